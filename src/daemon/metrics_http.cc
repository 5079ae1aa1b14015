#include "daemon/metrics_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/log.h"
#include "common/status.h"
#include "common/token.h"

namespace cairn::daemon {

namespace {

// The value of header `name` (case-insensitive) in the request head, without surrounding blanks.
std::optional<absl::string_view> Header(absl::string_view head, absl::string_view name) {
  for (absl::string_view line : absl::StrSplit(head, "\r\n")) {
    size_t colon = line.find(':');
    if (colon == absl::string_view::npos || !absl::EqualsIgnoreCase(line.substr(0, colon), name)) continue;
    return absl::StripAsciiWhitespace(line.substr(colon + 1));
  }
  return std::nullopt;
}

std::string Response(absl::string_view status, absl::string_view extra_headers, absl::string_view type,
                     absl::string_view body) {
  return absl::StrCat("HTTP/1.0 ", status, "\r\n", extra_headers, "Content-Type: ", type,
                      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(int port, std::string token,
                                                                     std::function<std::string()> render) {
  if (token.empty()) {
    return absl::InvalidArgumentError("--metrics-port needs --token-file: every scrape must carry the token "
                                      "(any local user can reach a loopback port)");
  }
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus("socket for --metrics-port");
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 16) != 0) {
    absl::Status st = ErrnoStatus(absl::StrCat("bind 127.0.0.1:", port, " for --metrics-port"));
    ::close(fd);
    return st;
  }
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return std::unique_ptr<MetricsServer>(new MetricsServer(fd, ntohs(a.sin_port), std::move(token), std::move(render)));
}

MetricsServer::MetricsServer(int fd, int port, std::string token, std::function<std::string()> render)
    : fd_(fd), port_(port), token_(std::move(token)), render_(std::move(render)) {
  thread_ = std::thread([this] { Loop(); });
}

MetricsServer::~MetricsServer() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  ::close(fd_);
}

namespace {

void SendAll(int c, const std::string& resp) {
  size_t off = 0;
  while (off < resp.size()) {
    ssize_t n = ::send(c, resp.data() + off, resp.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

}  // namespace

void MetricsServer::Loop() {
  while (!stop_) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    timeval tv{2, 0};  // a request not in within 2 s (per read) is dropped
    ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    {
      std::lock_guard<std::mutex> l(mu_);
      if (active_ >= kMaxConnections) {
        SendAll(c, Response("503 Service Unavailable", "Retry-After: 1\r\n", "text/plain", "too many connections\n"));
        ::close(c);
        continue;
      }
      ++active_;
    }
    try {
      std::thread([this, c] { Serve(c); }).detach();
    } catch (const std::system_error&) {  // no thread to be had: answered at once instead
      SendAll(c, Response("503 Service Unavailable", "Retry-After: 1\r\n", "text/plain", "busy\n"));
      ::close(c);
      std::lock_guard<std::mutex> l(mu_);
      --active_;
      idle_.notify_all();
    }
  }
  // The destructor returns only once every connection's thread is done with this object.
  std::unique_lock<std::mutex> l(mu_);
  idle_.wait(l, [this] { return active_ == 0; });
}

void MetricsServer::Serve(int c) {
  // The whole request within 5 s (not per read: a client sending a byte now and then would hold
  // its slot, and the daemon's shutdown, for hours).
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  std::string req;
  char buf[2048];
  while (req.find("\r\n\r\n") == std::string::npos && req.size() < 16384) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{c, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) != 1) break;
    ssize_t n = ::read(c, buf, sizeof buf);
    if (n <= 0) break;
    req.append(buf, static_cast<size_t>(n));
  }
  SendAll(c, Answer(req));
  ::close(c);
  std::lock_guard<std::mutex> l(mu_);  // notified under the lock: once it is released, `this` may go
  --active_;
  idle_.notify_all();
}

std::string MetricsServer::Answer(const std::string& request) {
  absl::string_view head(request);
  head = head.substr(0, head.find("\r\n\r\n"));
  // The token first, whatever was asked: without it nothing is said, not even what exists.
  std::optional<absl::string_view> auth = Header(head, "Authorization");
  absl::string_view presented = auth.value_or("");
  bool bearer = presented.size() > 7 && absl::EqualsIgnoreCase(presented.substr(0, 7), "Bearer ");
  if (!bearer || !SameSecret(absl::StripLeadingAsciiWhitespace(presented.substr(7)), token_)) {
    CAIRN_LOG_DEBUG("metrics: refused a scrape ({})", auth ? "wrong token" : "no Authorization header");
    return Response("401 Unauthorized", "WWW-Authenticate: Bearer realm=\"cairnd metrics\"\r\n", "text/plain",
                    "cairnd metrics need `Authorization: Bearer TOKEN` with the daemon's token (cairnd --token-file)\n");
  }
  if (absl::StartsWith(head, "GET /metrics ") || absl::StartsWith(head, "GET /metrics?")) {
    return Response("200 OK", "", "text/plain; version=0.0.4", render_());
  }
  return Response("404 Not Found", "", "text/plain", "only /metrics is here");
}

}  // namespace cairn::daemon
