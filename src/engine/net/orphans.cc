#include "engine/net/orphans.h"

#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/utsname.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace cairn::net {
namespace {

// What bind would take: the port and the address, an IPv4 one as 4 bytes (also when given as an
// IPv4-mapped IPv6 address), IPv6 as 16; `wildcard` for 0.0.0.0 and ::.
struct Bound {
  uint16_t port = 0;  // network order
  std::string v4, v6;
  bool wildcard = false;
};

absl::StatusOr<Bound> ParseBound(const std::string& addr) {
  Bound b;
  if (addr.size() >= sizeof(sockaddr_in) && reinterpret_cast<const sockaddr*>(addr.data())->sa_family == AF_INET) {
    sockaddr_in in;
    std::memcpy(&in, addr.data(), sizeof in);
    b.port = in.sin_port;
    b.v4.assign(reinterpret_cast<const char*>(&in.sin_addr), 4);
    b.wildcard = in.sin_addr.s_addr == htonl(INADDR_ANY);
    return b;
  }
  if (addr.size() >= sizeof(sockaddr_in6) && reinterpret_cast<const sockaddr*>(addr.data())->sa_family == AF_INET6) {
    sockaddr_in6 in6;
    std::memcpy(&in6, addr.data(), sizeof in6);
    b.port = in6.sin6_port;
    b.v6.assign(reinterpret_cast<const char*>(&in6.sin6_addr), 16);
    b.wildcard = IN6_IS_ADDR_UNSPECIFIED(&in6.sin6_addr);
    if (IN6_IS_ADDR_V4MAPPED(&in6.sin6_addr)) b.v4 = b.v6.substr(12);
    return b;
  }
  return absl::InvalidArgumentError("not an IPv4 or IPv6 socket address");
}

struct Request {
  nlmsghdr h;
  inet_diag_req_v2 r;
};

// The states of a connection closed by its program (its FIN sent, or its close over): what an
// orphan is in while it lingers.
constexpr uint32_t kClosingStates = 1u << TCP_TIME_WAIT | 1u << TCP_FIN_WAIT1 | 1u << TCP_FIN_WAIT2 |
                                    1u << TCP_CLOSING | 1u << TCP_LAST_ACK;

// A sock_diag request of `type` (with `flags` beside NLM_F_REQUEST) about TCP sockets of
// `family` in a closing state.
Request ClosingRequest(int family, uint16_t type, uint16_t flags) {
  Request q{};
  q.h.nlmsg_len = sizeof q;
  q.h.nlmsg_type = type;
  q.h.nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | flags);
  q.r.sdiag_family = static_cast<uint8_t>(family);
  q.r.sdiag_protocol = IPPROTO_TCP;
  q.r.idiag_states = kClosingStates;
  return q;
}

// One request on `nl` and every reply to it, each handed to `on` (NLMSG_DONE ends a dump; an
// error message that is not an acknowledgement is returned).
template <typename OnMessage>
absl::Status Talk(int nl, const void* request, size_t size, OnMessage on) {
  if (::send(nl, request, size, 0) != static_cast<ssize_t>(size)) return ErrnoStatus("sock_diag send");
  std::vector<char> buf(64 * 1024);
  for (;;) {
    ssize_t n = ::recv(nl, buf.data(), buf.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("sock_diag recv");
    int left = static_cast<int>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf.data()); NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_type == NLMSG_DONE) return absl::OkStatus();
      if (h->nlmsg_type == NLMSG_ERROR) {
        const auto* e = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
        if (e->error == 0) return absl::OkStatus();  // the acknowledgement of a destroy
        errno = -e->error;
        return ErrnoStatus("sock_diag");
      }
      on(h);
    }
  }
}

// Whether `raw` (an inet_diag address: 4 bytes for AF_INET, 16 for AF_INET6) is `b`'s address:
// the same bytes, or an IPv4-mapped IPv6 address of its IPv4 one.
bool SameAddress(int family, const uint8_t* raw, const Bound& b) {
  std::string a(reinterpret_cast<const char*>(raw), family == AF_INET ? 4 : 16);
  if (family == AF_INET) return a == b.v4;
  static const std::string kMapped("\0\0\0\0\0\0\0\0\0\0\xff\xff", 12);
  return a == b.v6 || (!b.v4.empty() && a.substr(0, 12) == kMapped && a.substr(12) == b.v4);
}

// Whether this kernel's SOCK_DESTROY really ends an orphan that is not in TIME_WAIT. Before
// Linux 6.11 ("tcp: fix forever orphan socket caused by tcp_abort"), tcp_abort() of an orphan
// only purged its write queue: it stayed, with no retransmission left to time it out — holding
// its tuple until reboot instead of a few minutes. There only TIME_WAIT sockets are destroyed.
bool KernelEndsOrphans() {
  static const bool ends = [] {
    utsname u{};
    int major = 0, minor = 0;
    if (::uname(&u) != 0 || std::sscanf(u.release, "%d.%d", &major, &minor) != 2) return false;
    return major > 6 || (major == 6 && minor >= 11);
  }();
  return ends;
}

// The orphans (no inode: no process's descriptor) in a closing state for which `matches(family,
// id)` holds, by family; with `blocked` set when a live listener matches (then the conflict is
// that listener's, and nothing is destroyed).
template <typename Matches>
absl::Status FindOrphans(int nl, Matches matches, std::vector<std::pair<int, inet_diag_sockid>>* found,
                         bool* blocked) {
  for (int family : {AF_INET, AF_INET6}) {
    Request dump = ClosingRequest(family, SOCK_DIAG_BY_FAMILY, NLM_F_DUMP);
    dump.r.idiag_states = kClosingStates | 1u << TCP_LISTEN;
    RETURN_IF_ERROR(Talk(nl, &dump, sizeof dump, [&](const nlmsghdr* h) {
      const auto* m = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
      if (!matches(family, m->id)) return;
      if (m->idiag_state == TCP_LISTEN) {
        *blocked = true;
        return;
      }
      if ((kClosingStates & 1u << m->idiag_state) == 0 || m->idiag_inode != 0) return;
      if (m->idiag_state != TCP_TIME_WAIT && !KernelEndsOrphans()) return;
      found->emplace_back(family, m->id);
    }));
  }
  return absl::OkStatus();
}

// Destroys the orphans FindOrphans finds (none when a live listener is in the way), then looks
// again: returns how many are really gone. An error is returned only when none went.
template <typename Matches>
absl::StatusOr<int> DestroyOrphans(Matches matches) {
  UniqueFd nl(::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
  if (!nl.valid()) return ErrnoStatus("socket(NETLINK_SOCK_DIAG)");
  std::vector<std::pair<int, inet_diag_sockid>> found;
  bool blocked = false;
  RETURN_IF_ERROR(FindOrphans(nl.get(), matches, &found, &blocked));
  if (blocked || found.empty()) return 0;
  absl::Status first;
  for (const auto& [family, id] : found) {
    Request kill = ClosingRequest(family, SOCK_DESTROY, NLM_F_ACK);
    kill.r.id = id;
    absl::Status st = Talk(nl.get(), &kill, sizeof kill, [](const nlmsghdr*) {});
    if (!st.ok() && !absl::IsNotFound(st) && first.ok()) first = st;  // ENOENT: it expired meanwhile
  }
  std::vector<std::pair<int, inet_diag_sockid>> left;
  RETURN_IF_ERROR(FindOrphans(nl.get(), matches, &left, &blocked));
  int gone = static_cast<int>(found.size()) - static_cast<int>(left.size());
  if (gone <= 0 && !first.ok()) return first;
  return std::max(gone, 0);
}

}  // namespace

absl::StatusOr<int> DestroyOrphansOnPort(const std::string& addr) {
  ASSIGN_OR_RETURN(Bound b, ParseBound(addr));
  // A wildcard or IPv6 bind also conflicts with IPv4 sockets (a dual-stack socket), an IPv4 one
  // only with IPv4 sockets and IPv4-mapped IPv6 ones.
  return DestroyOrphans([&](int family, const inet_diag_sockid& id) {
    return id.idiag_sport == b.port && (b.wildcard || SameAddress(family, reinterpret_cast<const uint8_t*>(id.idiag_src), b));
  });
}

absl::StatusOr<int> DestroyOrphanConnection(const std::string& local, const std::string& peer) {
  ASSIGN_OR_RETURN(Bound l, ParseBound(local));
  ASSIGN_OR_RETURN(Bound p, ParseBound(peer));
  return DestroyOrphans([&](int family, const inet_diag_sockid& id) {
    return id.idiag_sport == l.port && id.idiag_dport == p.port &&
           SameAddress(family, reinterpret_cast<const uint8_t*>(id.idiag_src), l) &&
           SameAddress(family, reinterpret_cast<const uint8_t*>(id.idiag_dst), p);
  });
}

}  // namespace cairn::net
