// A job's service addresses (engine/net/address.h): parsed, put on and taken off a real
// interface of a network namespace the test makes, and announced by gratuitous ARP.
#include "engine/net/address.h"

#include <arpa/inet.h>
#include <net/ethernet.h>
#include <net/if_arp.h>
#include <netpacket/packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "common/unique_fd.h"
#include "gtest/gtest.h"

namespace cairn::net {
namespace {

TEST(ServiceAddressTest, ParsesAddressPrefixAndDevice) {
  absl::StatusOr<ServiceAddress> a = ParseServiceAddress("10.0.0.5/24");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->family, AF_INET);
  EXPECT_EQ(a->addr, std::string("\x0a\x00\x00\x05", 4));
  EXPECT_EQ(a->prefix, 24);
  EXPECT_EQ(a->device, "");
  a = ParseServiceAddress("fd00::5/64@eth1");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->family, AF_INET6);
  EXPECT_EQ(a->addr.size(), 16u);
  EXPECT_EQ(a->prefix, 64);
  EXPECT_EQ(a->device, "eth1");
  for (const char* bad : {"10.0.0.5", "10.0.0.5/33", "10.0.0.5/0", "10.0.0.5/x", "host/24", "127.0.0.2/8",
                          "0.0.0.0/8", "224.0.0.1/4", "::1/128", "ff02::1/16", "10.0.0.5/24@", "10.0.0.5/24@a/b"}) {
    absl::StatusOr<ServiceAddress> r = ParseServiceAddress(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status();
    }
  }
}

// Runs `body` on a thread of its own in a new network namespace (the commands it starts run
// there too: a fork copies its caller's namespaces).
void InNewNetworkNamespace(const std::function<void()>& body) {
  std::thread t([&] {
    if (::unshare(CLONE_NEWNET) != 0) {
      ADD_FAILURE() << "unshare(CLONE_NEWNET): " << std::strerror(errno);
      return;
    }
    body();
  });
  t.join();
}

bool Sh(const std::string& command) { return std::system(command.c_str()) == 0; }

// Whether `sock` (a bound TCP socket would do) can bind to `ip` port 0.
int BindErrno(int family, const std::string& ip) {
  UniqueFd s(::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_storage ss{};
  socklen_t len;
  if (family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&ss);
    in->sin_family = AF_INET;
    ::inet_pton(AF_INET, ip.c_str(), &in->sin_addr);
    len = sizeof *in;
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
    in6->sin6_family = AF_INET6;
    ::inet_pton(AF_INET6, ip.c_str(), &in6->sin6_addr);
    len = sizeof *in6;
  }
  return ::bind(s.get(), reinterpret_cast<sockaddr*>(&ss), len) == 0 ? 0 : errno;
}

TEST(ServiceAddressTest, PutOnTheInterfaceOfItsSubnetAnnouncedAndTakenOff) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (CAP_NET_ADMIN) for a network namespace";
  InNewNetworkNamespace([] {
    ASSERT_TRUE(Sh("ip link add ca type veth peer name cb && ip addr add 10.99.0.1/24 dev ca && "
                   "ip -6 addr add fd00:99::1/64 dev ca nodad && ip link set ca up && ip link set cb up"));
    int ca = static_cast<int>(::if_nametoindex("ca")), cb = static_cast<int>(::if_nametoindex("cb"));
    ASSERT_GT(ca, 0);
    // What the other end of the wire hears.
    UniqueFd cap(::socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, htons(ETH_P_ARP)));
    ASSERT_TRUE(cap.valid()) << std::strerror(errno);
    sockaddr_ll ll{};
    ll.sll_family = AF_PACKET;
    ll.sll_protocol = htons(ETH_P_ARP);
    ll.sll_ifindex = cb;
    ASSERT_EQ(::bind(cap.get(), reinterpret_cast<sockaddr*>(&ll), sizeof ll), 0) << std::strerror(errno);

    absl::StatusOr<ServiceAddress> a = ParseServiceAddress("10.99.0.50/24");
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(*HasAddress(*a), false);
    EXPECT_EQ(BindErrno(AF_INET, "10.99.0.50"), EADDRNOTAVAIL);
    EXPECT_EQ(*InterfaceFor(*a), ca);
    absl::StatusOr<bool> added = AddServiceAddress(*a);
    ASSERT_TRUE(added.ok()) << added.status();
    EXPECT_TRUE(*added);
    EXPECT_EQ(*HasAddress(*a), true);
    EXPECT_EQ(BindErrno(AF_INET, "10.99.0.50"), 0);
    // Announced: an ARP request from ca's hardware address, for and from the address itself.
    bool announced = false;
    for (int i = 0; i < 10 && !announced; ++i) {
      pollfd p{cap.get(), POLLIN, 0};
      if (::poll(&p, 1, 1000) != 1) break;
      unsigned char pkt[64];
      ssize_t n = ::recv(cap.get(), pkt, sizeof pkt, 0);
      if (n < 28) continue;
      auto* h = reinterpret_cast<arphdr*>(pkt);
      announced = ntohs(h->ar_op) == ARPOP_REQUEST && std::memcmp(pkt + 14, a->addr.data(), 4) == 0 &&
                  std::memcmp(pkt + 24, a->addr.data(), 4) == 0;
    }
    EXPECT_TRUE(announced) << "no gratuitous ARP for 10.99.0.50 reached the other end";
    added = AddServiceAddress(*a);
    ASSERT_TRUE(added.ok()) << added.status();
    EXPECT_FALSE(*added) << "added twice";

    ASSERT_TRUE(RemoveServiceAddress(*a).ok());
    EXPECT_EQ(*HasAddress(*a), false);
    EXPECT_EQ(BindErrno(AF_INET, "10.99.0.50"), EADDRNOTAVAIL);
    EXPECT_TRUE(RemoveServiceAddress(*a).ok()) << "a second removal is not an error";
    // The node's own address stays.
    EXPECT_EQ(*HasAddress(*ParseServiceAddress("10.99.0.1/24")), true);

    // No interface on that subnet: said, unless a device is named.
    absl::StatusOr<bool> none = AddServiceAddress(*ParseServiceAddress("10.98.0.5/24"));
    ASSERT_FALSE(none.ok());
    EXPECT_NE(none.status().message().find("no interface of this node has an address in 10.98.0.0/24"),
              std::string::npos)
        << none.status();
    EXPECT_TRUE(AddServiceAddress(*ParseServiceAddress("10.98.0.5/24@ca")).ok());
    EXPECT_EQ(BindErrno(AF_INET, "10.98.0.5"), 0);
    EXPECT_TRUE(RemoveServiceAddresses({"10.98.0.5/24@ca"}).ok());

    // IPv6: usable at once (no duplicate address detection keeping it tentative), and announced
    // by an unsolicited Neighbor Advertisement to all nodes: Override set, the target the address,
    // its link-layer address ca's.
    UniqueFd cap6(::socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, htons(ETH_P_IPV6)));
    ASSERT_TRUE(cap6.valid()) << std::strerror(errno);
    ll.sll_protocol = htons(ETH_P_IPV6);
    ASSERT_EQ(::bind(cap6.get(), reinterpret_cast<sockaddr*>(&ll), sizeof ll), 0) << std::strerror(errno);
    absl::StatusOr<ServiceAddress> v6 = ParseServiceAddress("fd00:99::50/64");
    ASSERT_TRUE(v6.ok());
    added = AddServiceAddress(*v6);
    ASSERT_TRUE(added.ok()) << added.status();
    EXPECT_TRUE(*added);
    EXPECT_EQ(BindErrno(AF_INET6, "fd00:99::50"), 0);
    UniqueFd q(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, "ca", IF_NAMESIZE - 1);
    ASSERT_EQ(::ioctl(q.get(), SIOCGIFHWADDR, &ifr), 0);
    bool advertised = false;
    for (int i = 0; i < 40 && !advertised; ++i) {
      pollfd p{cap6.get(), POLLIN, 0};
      if (::poll(&p, 1, 1000) != 1) break;
      unsigned char pkt[256];
      ssize_t n = ::recv(cap6.get(), pkt, sizeof pkt, 0);
      // IPv6 header (next header 58, hop limit 255), then ICMPv6 type 136, flags, target, option 2.
      if (n < 40 + 24 + 8 || pkt[6] != IPPROTO_ICMPV6 || pkt[7] != 255 || pkt[40] != 136) continue;
      advertised = (pkt[44] & 0x20) != 0 && std::memcmp(pkt + 48, v6->addr.data(), 16) == 0 && pkt[64] == 2 &&
                   std::memcmp(pkt + 66, ifr.ifr_hwaddr.sa_data, 6) == 0;
    }
    EXPECT_TRUE(advertised) << "no neighbour advertisement for fd00:99::50 reached the other end";
    ASSERT_TRUE(RemoveServiceAddress(*v6).ok());
    EXPECT_EQ(BindErrno(AF_INET6, "fd00:99::50"), EADDRNOTAVAIL);
  });
}

}  // namespace
}  // namespace cairn::net
