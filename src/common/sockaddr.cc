#include "common/sockaddr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cstddef>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace cairn {

std::string FormatSockaddr(const std::string& b) {
  if (b.size() < sizeof(sa_family_t)) return "unnamed";
  sa_family_t family;
  std::memcpy(&family, b.data(), sizeof family);
  char text[INET6_ADDRSTRLEN] = "";
  if (family == AF_INET && b.size() >= sizeof(sockaddr_in)) {
    sockaddr_in a;
    std::memcpy(&a, b.data(), sizeof a);
    ::inet_ntop(AF_INET, &a.sin_addr, text, sizeof text);
    return absl::StrCat(text, ":", ntohs(a.sin_port));
  }
  if (family == AF_INET6 && b.size() >= sizeof(sockaddr_in6)) {
    sockaddr_in6 a;
    std::memcpy(&a, b.data(), sizeof a);
    ::inet_ntop(AF_INET6, &a.sin6_addr, text, sizeof text);
    return absl::StrCat("[", text, "]:", ntohs(a.sin6_port));
  }
  if (family == AF_UNIX) {
    std::string path = b.substr(offsetof(sockaddr_un, sun_path));
    if (path.empty()) return "unnamed";
    if (path[0] == '\0') return absl::StrCat("@", path.substr(1));
    return path.substr(0, path.find('\0'));
  }
  return absl::StrCat("family ", family);
}

absl::StatusOr<std::string> SocketAddress(int fd, bool peer) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  int rc = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
                : ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  if (rc != 0) {
    if (peer && errno == ENOTCONN) return std::string();
    return ErrnoStatus(peer ? "getpeername" : "getsockname");
  }
  return std::string(reinterpret_cast<const char*>(&a), len);
}

absl::StatusOr<int> SocketIntOption(int fd, int level, int name, absl::string_view what) {
  int v = 0;
  socklen_t len = sizeof v;
  if (::getsockopt(fd, level, name, &v, &len) != 0) return ErrnoStatus(absl::StrCat("getsockopt ", what));
  return v;
}

}  // namespace cairn
