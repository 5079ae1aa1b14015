#include "engine/lazy/page_protocol.h"

#include <netdb.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cairn::lazy::wire {

Header MakeHeader(Op op, uint32_t link, uint32_t kind, uint64_t offset, uint64_t arg, uint64_t len) {
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof h.magic);
  h.op = op;
  h.link = link;
  h.kind = kind;
  h.offset = offset;
  h.arg = arg;
  h.len = len;
  return h;
}

absl::StatusOr<std::vector<char>> ResolveHostPort(const std::string& host_port, bool passive) {
  std::string host, port;
  size_t colon = host_port.rfind(':');
  if (colon == std::string::npos || colon + 1 == host_port.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("address '", host_port, "' must be HOST:PORT (e.g. 127.0.0.1:7070 or [::1]:7070)"));
  }
  host = host_port.substr(0, colon);
  port = host_port.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  uint32_t port_n = 0;
  if (!absl::SimpleAtoi(port, &port_n) || port_n > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("address '", host_port, "': port '", port, "' is not 0-65535"));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("address '", host_port, "': cannot resolve host '", host, "' (", ::gai_strerror(rc), ")"));
  }
  std::vector<char> out(reinterpret_cast<const char*>(res->ai_addr),
                        reinterpret_cast<const char*>(res->ai_addr) + res->ai_addrlen);
  ::freeaddrinfo(res);
  return out;
}

absl::Status SendAll(int fd, const void* data, size_t len, const std::string& peer) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return absl::UnavailableError(absl::StrCat(peer, ": send timed out (it stopped reading)"));
      return absl::UnavailableError(absl::StrCat(peer, ": connection lost while sending (", std::strerror(errno), ")"));
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status SendMessage(int fd, const Header& h, const void* payload, const std::string& peer) {
  if (h.len == 0 || payload == nullptr) return SendAll(fd, &h, sizeof h, peer);
  if (h.len < 64 * 1024) {  // one segment for small messages
    std::string buf(reinterpret_cast<const char*>(&h), sizeof h);
    buf.append(static_cast<const char*>(payload), h.len);
    return SendAll(fd, buf.data(), buf.size(), peer);
  }
  if (absl::Status s = SendAll(fd, &h, sizeof h, peer); !s.ok()) return s;
  return SendAll(fd, payload, h.len, peer);
}

absl::Status RecvAll(int fd, void* data, size_t len, const std::string& peer) {
  char* p = static_cast<char*>(data);
  while (len > 0) {
    ssize_t n = ::recv(fd, p, len, 0);
    if (n == 0) return absl::UnavailableError(absl::StrCat(peer, ": connection closed by the other side"));
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return absl::DeadlineExceededError(absl::StrCat(peer, ": no answer in time (stalled?)"));
      return absl::UnavailableError(absl::StrCat(peer, ": connection lost (", std::strerror(errno), ")"));
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status RecvHeader(int fd, Header* h, const std::string& peer) {
  if (absl::Status s = RecvAll(fd, h, sizeof *h, peer); !s.ok()) return s;
  if (std::memcmp(h->magic, kMagic, sizeof kMagic) != 0) {
    return absl::DataLossError(absl::StrCat(peer, ": not the cairn page protocol (bad magic)"));
  }
  return absl::OkStatus();
}

}  // namespace cairn::lazy::wire
