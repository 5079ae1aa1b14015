#include "daemon/node_addresses.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <bitset>
#include <cstring>

#include "common/ip_prefix.h"

namespace cairn::daemon {
namespace {

int PrefixOf(const unsigned char* mask, size_t bytes) {
  int n = 0;
  for (size_t i = 0; i < bytes; ++i) n += static_cast<int>(std::bitset<8>(mask[i]).count());
  return n;
}

}  // namespace

std::vector<std::string> NodeAddresses() {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_netmask == nullptr || (i->ifa_flags & IFF_UP) == 0 ||
        (i->ifa_flags & IFF_LOOPBACK) != 0) {
      continue;
    }
    IpPrefix p;
    p.device = i->ifa_name;
    if (i->ifa_addr->sa_family == AF_INET) {
      const auto* a = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
      const auto* m = reinterpret_cast<const sockaddr_in*>(i->ifa_netmask);
      const auto* b = reinterpret_cast<const unsigned char*>(&a->sin_addr);
      if (b[0] == 169 && b[1] == 254) continue;
      p.family = AF_INET;
      p.addr.assign(reinterpret_cast<const char*>(b), 4);
      p.prefix = PrefixOf(reinterpret_cast<const unsigned char*>(&m->sin_addr), 4);
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      const auto* m = reinterpret_cast<const sockaddr_in6*>(i->ifa_netmask);
      if (IN6_IS_ADDR_LINKLOCAL(&a->sin6_addr) || IN6_IS_ADDR_LOOPBACK(&a->sin6_addr)) continue;
      p.family = AF_INET6;
      p.addr.assign(reinterpret_cast<const char*>(&a->sin6_addr), 16);
      p.prefix = PrefixOf(reinterpret_cast<const unsigned char*>(&m->sin6_addr), 16);
    } else {
      continue;
    }
    out.push_back(IpPrefixText(p));
  }
  ::freeifaddrs(list);
  return out;
}

std::vector<std::string> NodeDevices() {
  std::vector<std::string> out;
  if (struct if_nameindex* names = ::if_nameindex(); names != nullptr) {
    for (struct if_nameindex* i = names; i->if_index != 0; ++i) out.push_back(i->if_name);
    ::if_freenameindex(names);
  }
  return out;
}

}  // namespace cairn::daemon
