#include "engine/image/socket_options.h"

#include <unistd.h>

#include <mutex>
#include <tuple>

namespace cairn::image {

const std::map<std::pair<int, int>, std::string>& FreshSocketOptions(int family, int type, int protocol) {
  static std::mutex mu;
  static std::map<std::tuple<int, int, int>, std::map<std::pair<int, int>, std::string>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto [it, inserted] = cache.try_emplace({family, type, protocol});
  if (!inserted) return it->second;
  int fresh = ::socket(family, type | SOCK_CLOEXEC, protocol);
  if (fresh < 0) return it->second;  // nothing to compare with: every option differs
  ForEachSocketOption(family, type, protocol, [&](const SocketOptionSpec& o) {
    char buf[64] = {};
    socklen_t len = sizeof buf;
    if (::getsockopt(fresh, o.level, o.name, buf, &len) == 0) it->second[{o.level, o.name}] = std::string(buf, len);
  });
  ::close(fresh);
  return it->second;
}

}  // namespace cairn::image
