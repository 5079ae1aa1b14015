#include "engine/lazy/page_server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/sockaddr.h"
#include "common/status.h"
#include "common/token.h"
#include "common/unique_fd.h"
#include "engine/image/chain.h"
#include "engine/image/format.h"
#include "engine/lazy/page_protocol.h"

namespace cairn::lazy {
namespace {

using Clock = std::chrono::steady_clock;

struct Link {
  std::string dir;
  std::string meta_file;  // checkpoint.meta as stored
  UniqueFd pages, files;
  uint64_t pages_size = 0, files_size = 0;
};

// What every connection thread shares. Immutable after start except where guarded.
class Server {
 public:
  Server(std::vector<Link> links, std::string token, uint64_t max_rate, int wake_fd)
      : links_(std::move(links)), token_(std::move(token)), max_rate_(max_rate), wake_fd_(wake_fd) {}

  void Serve(UniqueFd conn, std::string peer);

 private:
  absl::Status Handshake(int fd, const std::string& peer, uint64_t* who);
  absl::Status Request(int fd, const wire::Header& h, const std::string& peer, uint64_t who);
  absl::Status SendFileRange(int sock, int file, uint64_t offset, uint64_t len, const std::string& peer);
  void Throttle(uint64_t bytes);
  void NoteDone(uint64_t who, uint64_t handlers);

  const std::vector<Link> links_;
  const std::string token_;
  const uint64_t max_rate_;
  const int wake_fd_;

  std::mutex mu_;
  Clock::time_point next_send_;  // GUARDED_BY(mu_): when the rate limit lets the next byte go
  bool restorer_done_ = false;   // GUARDED_BY(mu_)
  uint64_t handlers_expected_ = 0, handlers_done_ = 0;  // GUARDED_BY(mu_)
};

absl::Status ErrorReply(int fd, const std::string& msg, const std::string& peer) {
  return wire::SendMessage(fd, wire::MakeHeader(wire::kError, 0, 0, 0, 0, msg.size()), msg.data(), peer);
}

void Server::Throttle(uint64_t bytes) {
  if (max_rate_ == 0) return;
  Clock::time_point at;
  {
    std::lock_guard<std::mutex> l(mu_);
    Clock::time_point now = Clock::now();
    if (next_send_ < now) next_send_ = now;
    at = next_send_;
    next_send_ += std::chrono::nanoseconds(bytes * 1000000000ull / max_rate_);
  }
  std::this_thread::sleep_until(at);
}

void Server::NoteDone(uint64_t who, uint64_t handlers) {
  std::lock_guard<std::mutex> l(mu_);
  if (who == 0) {
    restorer_done_ = true;
    handlers_expected_ = handlers;
  } else {
    ++handlers_done_;
  }
  CAIRN_LOG_INFO("event=page_server_done who={} handlers_done={} expected={}", who, handlers_done_,
                 restorer_done_ ? std::to_string(handlers_expected_) : "?");
  if (restorer_done_ && handlers_done_ >= handlers_expected_) {
    char one = 1;
    (void)::write(wake_fd_, &one, 1);
  }
}

absl::Status Server::Handshake(int fd, const std::string& peer, uint64_t* who) {
  wire::Header h{};
  RETURN_IF_ERROR(wire::RecvHeader(fd, &h, peer));
  if (h.op != wire::kHello || h.len > wire::kMaxToken) {
    (void)ErrorReply(fd, "expected a hello with a token first", peer);
    return absl::InvalidArgumentError(absl::StrCat(peer, ": did not start with a hello"));
  }
  std::string token(h.len, '\0');
  RETURN_IF_ERROR(wire::RecvAll(fd, token.data(), token.size(), peer));
  if (h.link != wire::kVersion) {
    std::string msg = absl::StrCat("protocol version ", h.link, " is not this server's ", wire::kVersion,
                                   "; use the same cairn version on both sides");
    (void)ErrorReply(fd, msg, peer);
    return absl::FailedPreconditionError(absl::StrCat(peer, ": ", msg));
  }
  if (!SameSecret(token, token_)) {
    (void)ErrorReply(fd, "wrong token: the page server refused it (use the token file the server was started with)",
                     peer);
    return absl::PermissionDeniedError(absl::StrCat(peer, ": wrong token, refused"));
  }
  *who = h.offset;
  return wire::SendMessage(fd, wire::MakeHeader(wire::kOk, static_cast<uint32_t>(links_.size())), nullptr, peer);
}

absl::Status Server::SendFileRange(int sock, int file, uint64_t offset, uint64_t len, const std::string& peer) {
  constexpr uint64_t kChunk = 1 << 20;
  off_t off = static_cast<off_t>(offset);
  while (len > 0) {
    uint64_t want = std::min(len, kChunk);
    Throttle(want);
    ssize_t n = ::sendfile(sock, file, &off, want);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(absl::StrCat(peer, ": connection lost while sending pages (", std::strerror(errno), ")"));
    }
    if (n == 0) return absl::DataLossError("pages file shorter than its metadata says");
    len -= static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

absl::Status Server::Request(int fd, const wire::Header& h, const std::string& peer, uint64_t who) {
  if (h.len != 0) return absl::InvalidArgumentError(absl::StrCat(peer, ": unexpected payload in a request"));
  if ((h.op == wire::kGetFile || h.op == wire::kRead) && h.link >= links_.size()) {
    return ErrorReply(fd, absl::StrCat("no link ", h.link, " in a chain of ", links_.size()), peer);
  }
  switch (h.op) {
    case wire::kGetFile: {
      const Link& l = links_[h.link];
      if (h.kind == wire::kMetaFile) {
        return wire::SendMessage(fd, wire::MakeHeader(wire::kOk, h.link, h.kind, 0, 0, l.meta_file.size()),
                                 l.meta_file.data(), peer);
      }
      if (h.kind != wire::kFilesFile) return ErrorReply(fd, absl::StrCat("unknown file kind ", h.kind), peer);
      RETURN_IF_ERROR(wire::SendMessage(fd, wire::MakeHeader(wire::kOk, h.link, h.kind, 0, 0, l.files_size), nullptr, peer));
      return SendFileRange(fd, l.files.get(), 0, l.files_size, peer);
    }
    case wire::kRead: {
      const Link& l = links_[h.link];
      if (h.offset < image::kHeaderSize || h.arg == 0 || h.arg > image::kMaxBlockBytes || h.offset > l.pages_size ||
          h.arg > l.pages_size - h.offset) {
        return ErrorReply(fd, absl::StrFormat("bytes %d+%d lie outside %s/%s (%d bytes)", h.offset, h.arg, l.dir,
                                              image::kPagesFile, l.pages_size), peer);
      }
      RETURN_IF_ERROR(wire::SendMessage(fd, wire::MakeHeader(wire::kOk, h.link, 0, h.offset, 0, h.arg), nullptr, peer));
      return SendFileRange(fd, l.pages.get(), h.offset, h.arg, peer);
    }
    case wire::kDone:
      RETURN_IF_ERROR(wire::SendMessage(fd, wire::MakeHeader(wire::kOk), nullptr, peer));
      NoteDone(who, h.arg);
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(absl::StrCat(peer, ": unknown request ", h.op));
  }
}

void Server::Serve(UniqueFd conn, std::string peer) {
  int one = 1;
  ::setsockopt(conn.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  timeval tv{10, 0};  // a client that says nothing in 10 s is not a restore
  ::setsockopt(conn.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  uint64_t who = 0;
  if (absl::Status s = Handshake(conn.get(), peer, &who); !s.ok()) {
    CAIRN_LOG_WARN("event=page_server_refused peer={} why=\"{}\"", peer, std::string(s.message()));
    return;
  }
  tv = {0, 0};  // a page handler's fault connection may idle for as long as its process runs
  ::setsockopt(conn.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  CAIRN_LOG_DEBUG("event=page_server_client peer={} who={}", peer, who);
  for (;;) {
    wire::Header h{};
    absl::Status s = wire::RecvHeader(conn.get(), &h, peer);
    if (s.ok()) s = Request(conn.get(), h, peer, who);
    if (!s.ok()) {
      if (!absl::IsUnavailable(s)) CAIRN_LOG_WARN("event=page_server_client_error peer={} why=\"{}\"", peer, std::string(s.message()));
      CAIRN_LOG_DEBUG("event=page_server_client_gone peer={}", peer);
      return;
    }
  }
}

absl::StatusOr<std::vector<Link>> LoadLinks(const std::string& dir) {
  ASSIGN_OR_RETURN(std::unique_ptr<image::ImageReader> chain, image::OpenChain(dir));
  std::vector<Link> links;
  for (const image::ImageReader* r = chain.get(); r != nullptr; r = r->parent()) {
    Link l;
    l.dir = r->dir();
    std::string meta_path = r->dir() + "/" + image::kMetaFile;
    ASSIGN_OR_RETURN(l.meta_file, ReadFile(meta_path));
    for (auto [fd, name, size] : {std::tuple{&l.pages, image::kPagesFile, &l.pages_size},
                                  std::tuple{&l.files, image::kFilesFile, &l.files_size}}) {
      std::string path = r->dir() + "/" + name;
      fd->Reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
      if (!fd->valid()) return ErrnoStatus("open " + path);
      off_t end = ::lseek(fd->get(), 0, SEEK_END);
      if (end < 0) return ErrnoStatus("seek " + path);
      *size = static_cast<uint64_t>(end);
    }
    links.push_back(std::move(l));
  }
  return links;
}

}  // namespace

absl::Status RunPageServer(const PageServerOptions& opts) {
  // sendfile has no MSG_NOSIGNAL: a client that closes while blocks are still on their way (a
  // handler done with its read-ahead stream) must cost one connection, not the server.
  ::signal(SIGPIPE, SIG_IGN);
  ASSIGN_OR_RETURN(std::string token, ReadTokenFile(opts.token_file));
  auto links = LoadLinks(opts.dir);
  if (!links.ok()) return Annotate(links.status(), absl::StrCat("page server: cannot serve ", opts.dir));
  ASSIGN_OR_RETURN(std::vector<char> addr, wire::ResolveHostPort(opts.listen, /*passive=*/true));
  auto sa = reinterpret_cast<const sockaddr*>(addr.data());
  UniqueFd ls(::socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!ls.valid()) return ErrnoStatus("socket for page server");
  int one = 1;
  ::setsockopt(ls.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(ls.get(), sa, static_cast<socklen_t>(addr.size())) != 0) {
    if (errno == EADDRINUSE) {
      return absl::AlreadyExistsError(
          absl::StrCat("page server: address ", opts.listen, " is already in use; choose another --listen port"));
    }
    return ErrnoStatus(absl::StrCat("page server: bind ", opts.listen));
  }
  if (::listen(ls.get(), 64) != 0) return ErrnoStatus(absl::StrCat("page server: listen on ", opts.listen));
  sockaddr_storage bound{};
  socklen_t blen = sizeof bound;
  ::getsockname(ls.get(), reinterpret_cast<sockaddr*>(&bound), &blen);
  std::string where = FormatSockaddr(std::string(reinterpret_cast<const char*>(&bound), blen));
  int wake[2];
  if (::pipe2(wake, O_CLOEXEC) != 0) return ErrnoStatus("pipe (page server)");
  UniqueFd wake_r(wake[0]), wake_w(wake[1]);
  uint64_t total = 0;
  for (const Link& l : *links) total += l.pages_size;
  size_t nlinks = links->size();
  // Leaked on purpose: connection threads are detached and may still be in a send when this returns.
  auto* server = new Server(std::move(*links), std::move(token), opts.max_rate, wake_w.Release());
  CAIRN_LOG_INFO("event=page_server_listening addr={} dir={} links={} page_bytes={}", where, opts.dir, nlinks, total);
  if (opts.on_listening) opts.on_listening(where);
  for (;;) {
    pollfd p[2] = {{ls.get(), POLLIN, 0}, {wake_r.get(), POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("poll (page server)");
    }
    if (p[1].revents) break;
    if (!(p[0].revents & POLLIN)) continue;
    sockaddr_storage peer{};
    socklen_t plen = sizeof peer;
    int c = ::accept4(ls.get(), reinterpret_cast<sockaddr*>(&peer), &plen, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN) continue;
      return ErrnoStatus("accept (page server)");
    }
    std::string name = FormatSockaddr(std::string(reinterpret_cast<const char*>(&peer), plen));
    std::thread([server, c, name] { server->Serve(UniqueFd(c), "client " + name); }).detach();
  }
  CAIRN_LOG_INFO("event=page_server_finished dir={}", opts.dir);
  return absl::OkStatus();
}

}  // namespace cairn::lazy
