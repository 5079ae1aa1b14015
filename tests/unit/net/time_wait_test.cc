// TIME_WAIT sockets in the way of a restored listener (engine/net/time_wait.h): made on
// loopback in a network namespace of the test's own, removed only where a bind conflicts.
#include "engine/net/time_wait.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

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

TEST(TimeWaitTest, OnlyTheSocketsInTheWayOfTheBindAreRemoved) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (CAP_NET_ADMIN) for a network namespace";
  InNewNetworkNamespace([] {
    ASSERT_NO_FATAL_FAILURE(LeaveTimeWait(7001));
    ASSERT_NO_FATAL_FAILURE(LeaveTimeWait(7002));
    EXPECT_EQ(Bind(V4("0.0.0.0", 7001)), EADDRINUSE) << "the kernel let a listener's port be bound over TIME_WAIT";

    // Another address, another port: nothing in their way, nothing removed.
    absl::StatusOr<int> none = DestroyTimeWait(V4("127.0.0.2", 7001));
    ASSERT_TRUE(none.ok()) << none.status();
    EXPECT_EQ(*none, 0);
    none = DestroyTimeWait(V4("0.0.0.0", 7003));
    ASSERT_TRUE(none.ok()) << none.status();
    EXPECT_EQ(*none, 0);

    absl::StatusOr<int> cleared = DestroyTimeWait(V4("0.0.0.0", 7001));
    ASSERT_TRUE(cleared.ok()) << cleared.status();
    EXPECT_EQ(*cleared, 1);
    EXPECT_EQ(Bind(V4("0.0.0.0", 7001)), 0);
    EXPECT_EQ(Bind(V4("0.0.0.0", 7002)), EADDRINUSE) << "the TIME_WAIT on another port was removed too";

    // A live listener on the port is no TIME_WAIT: it stays, and so does the conflict.
    UniqueFd live(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    std::string at = V4("127.0.0.1", 7004);
    ASSERT_EQ(::bind(live.get(), reinterpret_cast<const sockaddr*>(at.data()), sizeof(sockaddr_in)), 0);
    ASSERT_EQ(::listen(live.get(), 1), 0);
    cleared = DestroyTimeWait(V4("127.0.0.1", 7004));
    ASSERT_TRUE(cleared.ok()) << cleared.status();
    EXPECT_EQ(*cleared, 0);
    EXPECT_EQ(Bind(V4("127.0.0.1", 7004)), EADDRINUSE);
  });
}

}  // namespace
}  // namespace cairn::net
