#include "engine/net/address.h"

#include <arpa/inet.h>
#include <linux/if_addr.h>
#include <net/ethernet.h>
#include <net/if_arp.h>
#include <netpacket/packet.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/icmp6.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/ip_prefix.h"
#include "common/log.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace cairn::net {
namespace {

// One address of an interface, as RTM_GETADDR lists it.
struct Held {
  int family = 0;
  int index = 0;
  int prefix = 0;
  std::string addr;
};

// A route-netlink socket with a 2 s limit on every answer.
absl::StatusOr<UniqueFd> RouteSocket() {
  UniqueFd s(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (!s.valid()) return ErrnoStatus("socket(NETLINK_ROUTE)");
  timeval tv{2, 0};
  ::setsockopt(s.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return s;
}

void Attr(std::string* msg, uint16_t type, const std::string& data) {
  nlattr a{};
  a.nla_type = type;
  a.nla_len = static_cast<uint16_t>(NLA_HDRLEN + data.size());
  msg->append(reinterpret_cast<const char*>(&a), sizeof a);
  msg->append(data);
  msg->resize(NLMSG_ALIGN(msg->size()), '\0');
}

// Sends one request that asks for an acknowledgement and returns the kernel's errno for it (0: done).
absl::StatusOr<int> Request(uint16_t type, uint16_t flags, const ifaddrmsg& ifa, const std::string& addr) {
  std::string msg(NLMSG_HDRLEN, '\0');
  msg.append(reinterpret_cast<const char*>(&ifa), sizeof ifa);
  msg.resize(NLMSG_ALIGN(msg.size()), '\0');
  if (ifa.ifa_family == AF_INET) Attr(&msg, IFA_LOCAL, addr);
  Attr(&msg, IFA_ADDRESS, addr);
  auto* h = reinterpret_cast<nlmsghdr*>(msg.data());
  h->nlmsg_len = static_cast<uint32_t>(msg.size());
  h->nlmsg_type = type;
  h->nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | NLM_F_ACK | flags);
  h->nlmsg_seq = 1;
  ASSIGN_OR_RETURN(UniqueFd s, RouteSocket());
  if (::send(s.get(), msg.data(), msg.size(), 0) != static_cast<ssize_t>(msg.size())) {
    return ErrnoStatus("send to rtnetlink");
  }
  alignas(nlmsghdr) char buf[8192];
  for (;;) {
    ssize_t n = ::recv(s.get(), buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("read rtnetlink's answer");
    for (auto* r = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(r, static_cast<unsigned>(n));
         r = NLMSG_NEXT(r, n)) {
      if (r->nlmsg_type == NLMSG_ERROR && r->nlmsg_seq == 1) {
        return -reinterpret_cast<nlmsgerr*>(NLMSG_DATA(r))->error;
      }
    }
  }
}

// Every address of every interface here.
absl::StatusOr<std::vector<Held>> ListAddresses() {
  ASSIGN_OR_RETURN(UniqueFd s, RouteSocket());
  struct {
    nlmsghdr h;
    ifaddrmsg ifa;
  } req{};
  req.h.nlmsg_len = sizeof req;
  req.h.nlmsg_type = RTM_GETADDR;
  req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  req.h.nlmsg_seq = 1;
  req.ifa.ifa_family = AF_UNSPEC;
  if (::send(s.get(), &req, sizeof req, 0) != static_cast<ssize_t>(sizeof req)) return ErrnoStatus("send RTM_GETADDR");
  std::vector<Held> out;
  alignas(nlmsghdr) char buf[32768];
  for (;;) {
    ssize_t n = ::recv(s.get(), buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("read the addresses from rtnetlink");
    for (auto* r = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(r, static_cast<unsigned>(n));
         r = NLMSG_NEXT(r, n)) {
      if (r->nlmsg_type == NLMSG_DONE) return out;
      if (r->nlmsg_type == NLMSG_ERROR) {
        int err = -reinterpret_cast<nlmsgerr*>(NLMSG_DATA(r))->error;
        return absl::InternalError(absl::StrCat("list the addresses (rtnetlink): ", std::strerror(err)));
      }
      if (r->nlmsg_type != RTM_NEWADDR) continue;
      auto* ifa = reinterpret_cast<ifaddrmsg*>(NLMSG_DATA(r));
      Held h;
      h.family = ifa->ifa_family;
      h.index = static_cast<int>(ifa->ifa_index);
      h.prefix = ifa->ifa_prefixlen;
      std::string local, address;
      int len = static_cast<int>(IFA_PAYLOAD(r));
      for (auto* a = IFA_RTA(ifa); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
        std::string v(reinterpret_cast<const char*>(RTA_DATA(a)), RTA_PAYLOAD(a));
        if (a->rta_type == IFA_LOCAL) local = v;
        if (a->rta_type == IFA_ADDRESS) address = v;
      }
      h.addr = local.empty() ? address : local;  // IPv4 names its own address IFA_LOCAL
      if (h.family == AF_INET || h.family == AF_INET6) out.push_back(std::move(h));
    }
  }
}

std::string Text(const ServiceAddress& a) { return a.text.empty() ? "(a service address)" : a.text; }

// Interface `index`'s name and Ethernet hardware address (6 bytes; empty when it has none:
// loopback, tunnels — nothing to announce there).
absl::Status EthernetOf(int index, std::string* name, std::string* mac) {
  char buf[IF_NAMESIZE] = {};
  if (::if_indextoname(static_cast<unsigned>(index), buf) == nullptr) return ErrnoStatus("if_indextoname");
  *name = buf;
  UniqueFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  ifreq ifr{};
  std::memcpy(ifr.ifr_name, buf, IF_NAMESIZE);  // IF_NAMESIZE bytes, NUL-terminated
  if (!s.valid() || ::ioctl(s.get(), SIOCGIFHWADDR, &ifr) != 0) return ErrnoStatus("SIOCGIFHWADDR " + *name);
  mac->clear();
  if (ifr.ifr_hwaddr.sa_family == ARPHRD_ETHER) mac->assign(ifr.ifr_hwaddr.sa_data, 6);
  return absl::OkStatus();
}

// Two gratuitous ARP requests for IPv4 address `a` out of interface `index` (`name`, hardware
// address `mac`): whoever has it cached learns its new hardware address.
absl::Status AnnounceV4(const ServiceAddress& a, int index, const std::string& name, const std::string& mac) {
  UniqueFd s(::socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, htons(ETH_P_ARP)));
  if (!s.valid()) return ErrnoStatus("socket(AF_PACKET) to announce " + Text(a));
  struct __attribute__((packed)) {
    arphdr h;
    unsigned char sha[6];
    unsigned char spa[4];
    unsigned char tha[6];
    unsigned char tpa[4];
  } pkt{};
  pkt.h.ar_hrd = htons(ARPHRD_ETHER);
  pkt.h.ar_pro = htons(ETH_P_IP);
  pkt.h.ar_hln = 6;
  pkt.h.ar_pln = 4;
  pkt.h.ar_op = htons(ARPOP_REQUEST);
  std::memcpy(pkt.sha, mac.data(), 6);
  std::memcpy(pkt.spa, a.addr.data(), 4);
  std::memcpy(pkt.tpa, a.addr.data(), 4);
  sockaddr_ll to{};
  to.sll_family = AF_PACKET;
  to.sll_protocol = htons(ETH_P_ARP);
  to.sll_ifindex = index;
  to.sll_halen = 6;
  std::memset(to.sll_addr, 0xff, 6);
  for (int i = 0; i < 2; ++i) {
    if (::sendto(s.get(), &pkt, sizeof pkt, 0, reinterpret_cast<sockaddr*>(&to), sizeof to) != sizeof pkt) {
      return ErrnoStatus(absl::StrCat("announce ", Text(a), " on ", name, " (gratuitous ARP)"));
    }
  }
  return absl::OkStatus();
}

// Two unsolicited Neighbor Advertisements (RFC 4861 4.4, 7.2.6) for IPv6 address `a` out of
// interface `index` to all nodes (ff02::1), with the Override flag and our hardware address as the
// target's: peers that have the address cached update the entry at once (to STALE, confirmed on
// their next packet), where they would otherwise keep sending to the old node until neighbour
// unreachability detection gave up on it. Sent from `a` itself (usable at once: added without
// DAD), hop limit 255 as receivers require.
absl::Status AnnounceV6(const ServiceAddress& a, int index, const std::string& name, const std::string& mac) {
  UniqueFd s(::socket(AF_INET6, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMPV6));
  if (!s.valid()) return ErrnoStatus("socket(ICMPv6) to announce " + Text(a));
  int hops = 255;
  unsigned ifindex = static_cast<unsigned>(index);
  sockaddr_in6 from{};
  from.sin6_family = AF_INET6;
  std::memcpy(&from.sin6_addr, a.addr.data(), 16);
  if (::setsockopt(s.get(), IPPROTO_IPV6, IPV6_MULTICAST_HOPS, &hops, sizeof hops) != 0 ||
      ::setsockopt(s.get(), IPPROTO_IPV6, IPV6_MULTICAST_IF, &ifindex, sizeof ifindex) != 0 ||
      ::bind(s.get(), reinterpret_cast<sockaddr*>(&from), sizeof from) != 0) {
    return ErrnoStatus(absl::StrCat("prepare the neighbour advertisement of ", Text(a), " on ", name));
  }
  struct __attribute__((packed)) {
    nd_neighbor_advert na;
    nd_opt_hdr opt;
    unsigned char mac[6];
  } pkt{};
  pkt.na.nd_na_type = ND_NEIGHBOR_ADVERT;
  pkt.na.nd_na_flags_reserved = ND_NA_FLAG_OVERRIDE;  // not solicited; we are no router
  std::memcpy(&pkt.na.nd_na_target, a.addr.data(), 16);
  pkt.opt.nd_opt_type = ND_OPT_TARGET_LINKADDR;
  pkt.opt.nd_opt_len = 1;  // in units of 8 bytes: the header and the 6-byte address
  std::memcpy(pkt.mac, mac.data(), 6);
  sockaddr_in6 to{};
  to.sin6_family = AF_INET6;
  ::inet_pton(AF_INET6, "ff02::1", &to.sin6_addr);
  to.sin6_scope_id = ifindex;
  for (int i = 0; i < 2; ++i) {  // (the kernel computes an ICMPv6 raw socket's checksum)
    if (::sendto(s.get(), &pkt, sizeof pkt, 0, reinterpret_cast<sockaddr*>(&to), sizeof to) != sizeof pkt) {
      return ErrnoStatus(absl::StrCat("announce ", Text(a), " on ", name, " (unsolicited neighbour advertisement)"));
    }
  }
  return absl::OkStatus();
}

// Announces `a`, just put on interface `index`, to its link (AnnounceV4, AnnounceV6).
absl::Status Announce(const ServiceAddress& a, int index) {
  std::string name, mac;
  RETURN_IF_ERROR(EthernetOf(index, &name, &mac));
  if (mac.empty()) return absl::OkStatus();
  return a.family == AF_INET ? AnnounceV4(a, index, name, mac) : AnnounceV6(a, index, name, mac);
}

// InterfaceFor, given what ListAddresses says is here.
absl::StatusOr<int> InterfaceIn(const std::vector<Held>& held, const ServiceAddress& a) {
  if (!a.device.empty()) {
    unsigned index = ::if_nametoindex(a.device.c_str());
    if (index == 0) {
      return absl::NotFoundError(absl::StrCat("service address ", Text(a), ": this node has no device ", a.device));
    }
    return static_cast<int>(index);
  }
  for (const Held& h : held) {
    if (h.family == a.family && h.addr != a.addr && SameSubnet(h.addr, a.addr, a.prefix)) return h.index;
  }
  for (const Held& h : held) {
    if (h.family == a.family && h.addr == a.addr) return h.index;
  }
  const std::string subnet = SubnetText(IpPrefix{a.family, a.addr, a.prefix, ""});
  return absl::NotFoundError(absl::StrCat("service address ", Text(a), ": no interface of this node has an address in ",
                                          subnet,
                                          " to put it on; name the device (ADDR/PREFIX@DEVICE) or give the node an "
                                          "address on that network"));
}


}  // namespace

absl::StatusOr<ServiceAddress> ParseServiceAddress(absl::string_view text) {
  absl::StatusOr<IpPrefix> p = ParseIpPrefix(text);
  if (!p.ok()) return absl::InvalidArgumentError(absl::StrCat("service address ", p.status().message()));
  ServiceAddress a{p->family, p->addr, p->prefix, p->device, std::string(text)};
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("service address '", text, "': ", why));
  };
  if (a.prefix < 1) return bad("the prefix must be at least 1");
  bool unspecified = a.addr == std::string(a.addr.size(), '\0');
  bool loopback = a.family == AF_INET ? static_cast<unsigned char>(a.addr[0]) == 127
                                      : a.addr == std::string(15, '\0') + '\x01';
  bool multicast = a.family == AF_INET ? (static_cast<unsigned char>(a.addr[0]) & 0xf0) == 0xe0
                                       : static_cast<unsigned char>(a.addr[0]) == 0xff;
  if (unspecified || loopback || multicast) return bad("an unspecified, loopback or multicast address cannot move");
  return a;
}

absl::StatusOr<int> InterfaceFor(const ServiceAddress& a) {
  ASSIGN_OR_RETURN(std::vector<Held> held, ListAddresses());
  return InterfaceIn(held, a);
}

absl::StatusOr<bool> HasAddress(const ServiceAddress& a) {
  ASSIGN_OR_RETURN(std::vector<Held> held, ListAddresses());
  for (const Held& h : held) {
    if (h.family == a.family && h.addr == a.addr) return true;
  }
  return false;
}

absl::StatusOr<bool> AddServiceAddress(const ServiceAddress& a) {
  ASSIGN_OR_RETURN(std::vector<Held> held, ListAddresses());  // once: on a migration's frozen path
  for (const Held& h : held) {
    if (h.family == a.family && h.addr == a.addr) return false;
  }
  ASSIGN_OR_RETURN(int index, InterfaceIn(held, a));
  ifaddrmsg ifa{};
  ifa.ifa_family = static_cast<unsigned char>(a.family);
  ifa.ifa_prefixlen = static_cast<unsigned char>(a.prefix);
  ifa.ifa_flags = a.family == AF_INET6 ? IFA_F_NODAD : 0;
  ifa.ifa_scope = RT_SCOPE_UNIVERSE;
  ifa.ifa_index = static_cast<unsigned>(index);
  ASSIGN_OR_RETURN(int err, Request(RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, ifa, a.addr));
  if (err == EEXIST) return false;
  if (err != 0) {
    return absl::InternalError(absl::StrCat("add service address ", Text(a), ": ", std::strerror(err),
                                            err == EPERM ? " (it needs CAP_NET_ADMIN in this network namespace)" : ""));
  }
  // Best effort: the address is in place; a peer that missed the news finds it when its
  // neighbour entry goes stale, a delay rather than a failure.
  if (absl::Status st = Announce(a, index); !st.ok()) {
    CAIRN_LOG_WARN("event=address_not_announced address={} error=\"{}\"", Text(a), st.ToString());
  }
  return true;
}

absl::Status RemoveServiceAddress(const ServiceAddress& a) {
  ASSIGN_OR_RETURN(std::vector<Held> held, ListAddresses());
  for (const Held& h : held) {
    if (h.family != a.family || h.addr != a.addr) continue;
    ifaddrmsg ifa{};
    ifa.ifa_family = static_cast<unsigned char>(a.family);
    ifa.ifa_prefixlen = static_cast<unsigned char>(h.prefix);
    ifa.ifa_index = static_cast<unsigned>(h.index);
    ASSIGN_OR_RETURN(int err, Request(RTM_DELADDR, 0, ifa, a.addr));
    if (err != 0 && err != EADDRNOTAVAIL && err != ENOENT) {
      return absl::InternalError(absl::StrCat("remove service address ", Text(a), ": ", std::strerror(err)));
    }
  }
  return absl::OkStatus();
}

absl::Status RemoveServiceAddresses(const std::vector<std::string>& texts) {
  absl::Status first;
  for (const std::string& t : texts) {
    absl::StatusOr<ServiceAddress> a = ParseServiceAddress(t);
    absl::Status st = a.ok() ? RemoveServiceAddress(*a) : a.status();
    if (first.ok()) first = st;
  }
  return first;
}

}  // namespace cairn::net
