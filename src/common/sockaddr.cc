#include "common/sockaddr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cstddef>
#include <cstring>

#include "absl/strings/str_cat.h"

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

}  // namespace cairn
