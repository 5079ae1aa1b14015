// Orphaned connections in the way of a restore (engine/net/orphans.h): made on loopback in a
// network namespace of the test's own, removed only where a bind or a rebuilt connection
// conflicts with them, and only when no process holds them.
#include "engine/net/orphans.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/unique_fd.h"
#include "gtest/gtest.h"

namespace cairn::net {
namespace {

std::string V4(const char* ip, uint16_t port) {
  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_port = htons(port);
  ::inet_pton(AF_INET, ip, &in.sin_addr);
  return std::string(reinterpret_cast<const char*>(&in), sizeof in);
}

int Bind(const std::string& addr) {
  UniqueFd s(::socket(reinterpret_cast<const sockaddr*>(addr.data())->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  return ::bind(s.get(), reinterpret_cast<const sockaddr*>(addr.data()), static_cast<socklen_t>(addr.size())) == 0
             ? 0
             : errno;
}

// A listener on 127.0.0.1:`port` (no SO_REUSEADDR) accepts a connection and closes its side
// first: a TIME_WAIT socket stays on the port; the listener is closed.
void LeaveTimeWait(uint16_t port) {
  UniqueFd l(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  std::string at = V4("127.0.0.1", port);
  ASSERT_EQ(::bind(l.get(), reinterpret_cast<const sockaddr*>(at.data()), sizeof(sockaddr_in)), 0) << std::strerror(errno);
  ASSERT_EQ(::listen(l.get(), 1), 0);
  UniqueFd c(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_EQ(::connect(c.get(), reinterpret_cast<const sockaddr*>(at.data()), sizeof(sockaddr_in)), 0);
  UniqueFd s(::accept4(l.get(), nullptr, nullptr, SOCK_CLOEXEC));
  ASSERT_TRUE(s.valid());
  s.Reset();  // the server's side closes first: its end waits in TIME_WAIT
  char b;
  ASSERT_EQ(::recv(c.get(), &b, 1, 0), 0);
  c.Reset();
}

void InNewNetworkNamespace(const std::function<void()>& body) {
  std::thread t([&] {
    if (::unshare(CLONE_NEWNET) != 0) {
      ADD_FAILURE() << "unshare(CLONE_NEWNET): " << std::strerror(errno);
      return;
    }
    ASSERT_EQ(std::system("ip link set lo up"), 0);
    body();
  });
  t.join();
}

TEST(OrphansTest, OnlyTheTimeWaitSocketsInTheWayOfTheBindAreRemoved) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (CAP_NET_ADMIN) for a network namespace";
  InNewNetworkNamespace([] {
    ASSERT_NO_FATAL_FAILURE(LeaveTimeWait(7001));
    ASSERT_NO_FATAL_FAILURE(LeaveTimeWait(7002));
    EXPECT_EQ(Bind(V4("0.0.0.0", 7001)), EADDRINUSE) << "the kernel let a listener's port be bound over TIME_WAIT";

    // Another address, another port: nothing in their way, nothing removed.
    absl::StatusOr<int> none = DestroyOrphansOnPort(V4("127.0.0.2", 7001));
    ASSERT_TRUE(none.ok()) << none.status();
    EXPECT_EQ(*none, 0);
    none = DestroyOrphansOnPort(V4("0.0.0.0", 7003));
    ASSERT_TRUE(none.ok()) << none.status();
    EXPECT_EQ(*none, 0);

    absl::StatusOr<int> cleared = DestroyOrphansOnPort(V4("0.0.0.0", 7001));
    ASSERT_TRUE(cleared.ok()) << cleared.status();
    EXPECT_EQ(*cleared, 1);
    EXPECT_EQ(Bind(V4("0.0.0.0", 7001)), 0);
    EXPECT_EQ(Bind(V4("0.0.0.0", 7002)), EADDRINUSE) << "the TIME_WAIT on another port was removed too";

    // A live listener on the port is no TIME_WAIT: it stays, and so does the conflict.
    UniqueFd live(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    std::string at = V4("127.0.0.1", 7004);
    ASSERT_EQ(::bind(live.get(), reinterpret_cast<const sockaddr*>(at.data()), sizeof(sockaddr_in)), 0);
    ASSERT_EQ(::listen(live.get(), 1), 0);
    cleared = DestroyOrphansOnPort(V4("127.0.0.1", 7004));
    ASSERT_TRUE(cleared.ok()) << cleared.status();
    EXPECT_EQ(*cleared, 0);
    EXPECT_EQ(Bind(V4("127.0.0.1", 7004)), EADDRINUSE);
  });
}

// A connection 127.0.0.1:`from` -> 127.0.0.1:`to` whose server never reads, its client's send
// queue filled: closed (or, with `live`, only shut down for writing), the client's FIN waits
// behind its data in FIN_WAIT1 for minutes. Returns the client's socket when `live`, and keeps
// the server's ends in `keep`.
UniqueFd LeaveFinWait1(uint16_t from, uint16_t to, bool live, std::vector<UniqueFd>* keep) {
  UniqueFd l(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int one = 1;
  ::setsockopt(l.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  std::string at = V4("127.0.0.1", to), me = V4("127.0.0.1", from);
  EXPECT_EQ(::bind(l.get(), reinterpret_cast<const sockaddr*>(at.data()), sizeof(sockaddr_in)), 0) << std::strerror(errno);
  EXPECT_EQ(::listen(l.get(), 4), 0);
  UniqueFd c(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  EXPECT_EQ(::bind(c.get(), reinterpret_cast<const sockaddr*>(me.data()), sizeof(sockaddr_in)), 0) << std::strerror(errno);
  int rc = ::connect(c.get(), reinterpret_cast<const sockaddr*>(at.data()), sizeof(sockaddr_in));
  EXPECT_TRUE(rc == 0 || errno == EINPROGRESS) << std::strerror(errno);
  UniqueFd s(::accept4(l.get(), nullptr, nullptr, SOCK_CLOEXEC));
  EXPECT_TRUE(s.valid());
  std::string block(64 * 1024, 'x');
  for (int i = 0; i < 10000 && ::send(c.get(), block.data(), block.size(), MSG_NOSIGNAL) > 0; ++i) {
  }
  keep->push_back(std::move(s));
  keep->push_back(std::move(l));
  if (live) {
    ::shutdown(c.get(), SHUT_WR);
    return c;
  }
  return UniqueFd();  // c closes here: an orphan
}

// A socket in repair mode bound to `local` and connected to `peer` (nothing is sent): how a
// restore rebuilds a connection. 0 or the errno of the step that failed.
int RebuildConnection(const std::string& local, const std::string& peer) {
  UniqueFd c(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int on = 1;
  if (::setsockopt(c.get(), IPPROTO_TCP, TCP_REPAIR, &on, sizeof on) != 0) return errno;
  if (::bind(c.get(), reinterpret_cast<const sockaddr*>(local.data()), sizeof(sockaddr_in)) != 0) return errno;
  if (::connect(c.get(), reinterpret_cast<const sockaddr*>(peer.data()), sizeof(sockaddr_in)) != 0) return errno;
  return 0;  // closed in repair mode: gone without a word
}

TEST(OrphansTest, AClosedConnectionStillRetransmittingIsRemovedSoThatItCanBeRebuilt) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (CAP_NET_ADMIN) for a network namespace";
  InNewNetworkNamespace([] {
    std::vector<UniqueFd> keep;
    LeaveFinWait1(7201, 7101, /*live=*/false, &keep);
    UniqueFd live = LeaveFinWait1(7202, 7102, /*live=*/true, &keep);
    ASSERT_TRUE(live.valid());
    std::string orphan = V4("127.0.0.1", 7201), held = V4("127.0.0.1", 7202);
    EXPECT_EQ(RebuildConnection(orphan, V4("127.0.0.1", 7101)), EADDRNOTAVAIL)
        << "the kernel let a connection be rebuilt over its closing earlier life";
    EXPECT_EQ(Bind(orphan), EADDRINUSE) << "the kernel let the port of a closing connection be bound";

    // Another connection (other peer port, other local address): not in the way, not removed.
    absl::StatusOr<int> none = DestroyOrphanConnection(orphan, V4("127.0.0.1", 7102));
    ASSERT_TRUE(none.ok()) << none.status();
    EXPECT_EQ(*none, 0);
    none = DestroyOrphanConnection(V4("127.0.0.2", 7201), V4("127.0.0.1", 7101));
    ASSERT_TRUE(none.ok()) << none.status();
    EXPECT_EQ(*none, 0);
    // The same state, held by a live socket: it stays, and so does the conflict.
    none = DestroyOrphanConnection(held, V4("127.0.0.1", 7102));
    ASSERT_TRUE(none.ok()) << none.status();
    EXPECT_EQ(*none, 0);
    none = DestroyOrphansOnPort(held);
    ASSERT_TRUE(none.ok()) << none.status();
    EXPECT_EQ(*none, 0);
    EXPECT_EQ(RebuildConnection(held, V4("127.0.0.1", 7102)), EADDRNOTAVAIL);

    absl::StatusOr<int> cleared = DestroyOrphanConnection(orphan, V4("127.0.0.1", 7101));
    ASSERT_TRUE(cleared.ok()) << cleared.status();
    EXPECT_EQ(*cleared, 1);
    EXPECT_EQ(RebuildConnection(orphan, V4("127.0.0.1", 7101)), 0);

    // By port, as a listener's bind finds it.
    LeaveFinWait1(7203, 7103, /*live=*/false, &keep);
    EXPECT_EQ(Bind(V4("0.0.0.0", 7203)), EADDRINUSE);
    cleared = DestroyOrphansOnPort(V4("0.0.0.0", 7203));
    ASSERT_TRUE(cleared.ok()) << cleared.status();
    EXPECT_EQ(*cleared, 1);
    EXPECT_EQ(Bind(V4("0.0.0.0", 7203)), 0);
  });
}

}  // namespace
}  // namespace cairn::net
