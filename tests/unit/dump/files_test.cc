// Capturing kernel-object descriptors (eventfd, timerfd, signalfd, epoll) and sockets of
// live child processes, and refusing what restore could not make again: epoll
// registrations by another process or number, established TCP connections (without
// --tcp-close), listeners with connections waiting, netlink sockets.

#include "engine/dump/files.h"

#include <fcntl.h>
#include <signal.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cairn::dump {
namespace {

using ::testing::HasSubstr;

constexpr int kReportFd = 100;

// A child process that closes every descriptor, runs `setup` (raw syscalls only: it is a
// fork of the test), and then waits to be killed. Descriptors `setup` creates get the
// lowest numbers first: 0, 1, 2... `setup` may write pids (int) to kReportFd; they are
// returned in `reported`. The constructor returns once no process holds kReportFd
// any more, so the descriptor tables are final.
class Child {
 public:
  explicit Child(const std::function<void()>& setup) {
    int p[2];
    if (::pipe(p) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::dup2(p[1], kReportFd);
      ::syscall(SYS_close_range, 0, kReportFd - 1, 0);
      ::syscall(SYS_close_range, kReportFd + 1, ~0U, 0);
      setup();
      ::close(kReportFd);
      for (;;) ::pause();
    }
    ::close(p[1]);
    int pid = 0;
    while (::read(p[0], &pid, sizeof pid) == sizeof pid) reported.push_back(pid);
    ::close(p[0]);
  }
  ~Child() {
    for (pid_t r : reported) ::kill(r, SIGKILL);
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  std::vector<pid_t> reported;

 private:
  pid_t pid_ = -1;
};

void AddWatch(int ep, int fd, uint32_t events, uint64_t data) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = data;
  if (::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) ::_exit(3);
}

TEST(CaptureFdsTest, KernelObjectsAreRecorded) {
  Child child([] {
    ::eventfd(5, EFD_SEMAPHORE | EFD_NONBLOCK);  // 0
    int t = ::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);  // 1
    itimerspec its{{3, 0}, {100, 0}};
    ::timerfd_settime(t, 0, &its, nullptr);
    uint64_t mask = 1ull << (SIGUSR1 - 1);
    ::syscall(SYS_signalfd4, -1, &mask, sizeof mask, SFD_NONBLOCK);  // 2
    int ep = ::epoll_create1(EPOLL_CLOEXEC);  // 3
    AddWatch(ep, 0, EPOLLIN, 42);
    AddWatch(ep, 1, EPOLLIN | EPOLLET, 43);
    ::dup(ep);  // 4
  });
  ASSERT_GT(child.pid(), 0);
  image::Process proc;
  absl::Status st = CaptureFds({child.pid()}, {}, nullptr, {&proc}, nullptr);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(proc.fds_size(), 5);

  const image::Fd& e = proc.fds(0);
  EXPECT_EQ(e.kind(), image::Fd::EVENTFD);
  EXPECT_EQ(e.eventfd().count(), 5u);
  EXPECT_TRUE(e.eventfd().semaphore());
  EXPECT_NE(e.flags() & O_NONBLOCK, 0);
  EXPECT_FALSE(e.cloexec());

  const image::Fd& t = proc.fds(1);
  EXPECT_EQ(t.kind(), image::Fd::TIMERFD);
  EXPECT_TRUE(t.cloexec());
  EXPECT_EQ(t.timerfd().clock(), CLOCK_MONOTONIC);
  EXPECT_EQ(t.timerfd().interval_ns(), 3000000000u);
  EXPECT_GT(t.timerfd().value_ns(), 90000000000u);
  EXPECT_LE(t.timerfd().value_ns(), 100000000000u);
  EXPECT_EQ(t.timerfd().ticks(), 0u);
  EXPECT_GT(t.timerfd().clock_ns(), 0);

  const image::Fd& s = proc.fds(2);
  EXPECT_EQ(s.kind(), image::Fd::SIGNALFD);
  EXPECT_EQ(s.signalfd_mask(), 1ull << (SIGUSR1 - 1));
  EXPECT_NE(s.flags() & O_NONBLOCK, 0);

  const image::Fd& ep = proc.fds(3);
  EXPECT_EQ(ep.kind(), image::Fd::EPOLL);
  EXPECT_TRUE(ep.cloexec());
  ASSERT_EQ(ep.epoll_size(), 2);
  for (const image::EpollEntry& entry : ep.epoll()) {
    if (entry.tfd() == 0) {
      EXPECT_EQ(entry.data(), 42u);
      EXPECT_EQ(entry.events(), static_cast<uint32_t>(EPOLLIN | EPOLLERR | EPOLLHUP));
    } else {
      EXPECT_EQ(entry.tfd(), 1);
      EXPECT_EQ(entry.data(), 43u);
      EXPECT_EQ(entry.events(), static_cast<uint32_t>(EPOLLIN | EPOLLET | EPOLLERR | EPOLLHUP));
    }
  }
  const image::Fd& dup = proc.fds(4);
  EXPECT_TRUE(dup.is_dup());
  EXPECT_EQ(dup.dup_of(), 3);
  EXPECT_EQ(dup.epoll_size(), 0) << "a dup's registrations belong to the instance, recorded once";

  EXPECT_TRUE(CheckFdsSupported({child.pid()}, {}).ok());
}

TEST(CaptureFdsTest, ExpiredPeriodicTimerfdCountsMissedExpirations) {
  // Started 10.5 periods ago: 11 expirations wait unread, the next is half a period away.
  Child child([] {
    int t = ::timerfd_create(CLOCK_REALTIME, 0);  // 0
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    itimerspec its{{1000, 0}, {now.tv_sec - 10500, now.tv_nsec}};
    ::timerfd_settime(t, TFD_TIMER_ABSTIME, &its, nullptr);
  });
  ASSERT_GT(child.pid(), 0);
  image::Process proc;
  absl::Status st = CaptureFds({child.pid()}, {}, nullptr, {&proc}, nullptr);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(proc.fds_size(), 1);
  const image::TimerfdState& t = proc.fds(0).timerfd();
  EXPECT_EQ(t.ticks(), 11u);
  EXPECT_EQ(t.settime_flags(), TFD_TIMER_ABSTIME);
  EXPECT_GT(t.value_ns(), 499000000000u);
  EXPECT_LE(t.value_ns(), 500000000000u);
}

// A registration whose number was closed, or reused for another file, while a dup kept the
// file open is accepted: restore registers the file under that number again (restore/files.cc).
TEST(CheckFdsSupportedTest, EpollWatchingAClosedDescriptorNumberIsAccepted) {
  Child child([] {
    ::eventfd(0, 0);                    // 0
    int ep = ::epoll_create1(0);        // 1
    AddWatch(ep, 0, EPOLLIN, 1);
    ::dup2(0, 2);                       // the file stays open, as fd 2 only
    ::close(0);
  });
  ASSERT_GT(child.pid(), 0);
  EXPECT_TRUE(CheckFdsSupported({child.pid()}, {}).ok()) << CheckFdsSupported({child.pid()}, {});
}

TEST(CheckFdsSupportedTest, EpollWatchingAReusedDescriptorNumberIsAccepted) {
  Child child([] {
    ::eventfd(0, 0);                    // 0
    int ep = ::epoll_create1(0);        // 1
    AddWatch(ep, 0, EPOLLIN, 1);
    ::dup2(0, 2);
    ::close(0);
    ::eventfd(0, 0);                    // 0 again, another file
  });
  ASSERT_GT(child.pid(), 0);
  EXPECT_TRUE(CheckFdsSupported({child.pid()}, {}).ok()) << CheckFdsSupported({child.pid()}, {});
}

TEST(CheckFdsSupportedTest, EpollWatchingAnotherProcessDescriptorIsRefused) {
  // The parent creates the epoll instance; its child, which inherits it, registers a
  // descriptor of its own that the parent does not have.
  Child child([] {
    int ep = ::epoll_create1(0);  // 0
    pid_t b = static_cast<pid_t>(::syscall(SYS_fork));
    if (b == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      int e = ::eventfd(0, 0);  // 1
      AddWatch(ep, e, EPOLLIN, 7);
      ::close(kReportFd);
      for (;;) ::pause();
    }
    ::write(kReportFd, &b, sizeof b);
  });
  ASSERT_GT(child.pid(), 0);
  ASSERT_EQ(child.reported.size(), 1u);
  pid_t b = child.reported[0];
  absl::Status st = CheckFdsSupported({child.pid(), b}, {});
  ASSERT_EQ(st.code(), absl::StatusCode::kUnimplemented) << st;
  EXPECT_THAT(st.message(), HasSubstr(absl::StrCat("pid ", child.pid(), " fd 0 is an epoll instance watching fd 1 of pid ", b)));
}

// ---- sockets

int Loopback4(int type, sockaddr_in* a) {
  int s = ::socket(AF_INET, type, 0);
  *a = sockaddr_in{};
  a->sin_family = AF_INET;
  a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof *a;
  if (::bind(s, reinterpret_cast<sockaddr*>(a), len) != 0) ::_exit(4);
  ::getsockname(s, reinterpret_cast<sockaddr*>(a), &len);
  return s;
}

bool HasOption(const image::SocketState& s, int level, int name) {
  for (const auto& o : s.options()) {
    if (o.level() == level && o.name() == name) return true;
  }
  return false;
}

TEST(CaptureFdsTest, ListeningTcpSocketKeepsAddressBacklogAndOptions) {
  Child child([] {
    int s = ::socket(AF_INET, SOCK_STREAM, 0);  // 0
    int one = 1;
    ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    ::setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(s, 7) != 0) ::_exit(4);
  });
  ASSERT_GT(child.pid(), 0);
  image::Process proc;
  absl::Status st = CaptureFds({child.pid()}, {}, nullptr, {&proc}, nullptr);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(proc.fds_size(), 1);
  const image::Fd& f = proc.fds(0);
  EXPECT_EQ(f.kind(), image::Fd::INET_SOCKET);
  const image::SocketState& s = f.socket();
  EXPECT_EQ(s.family(), AF_INET);
  EXPECT_TRUE(s.listening());
  EXPECT_EQ(s.backlog(), 7);
  ASSERT_EQ(s.bound().size(), sizeof(sockaddr_in));
  sockaddr_in a;
  std::memcpy(&a, s.bound().data(), sizeof a);
  EXPECT_EQ(ntohl(a.sin_addr.s_addr), INADDR_LOOPBACK);
  EXPECT_NE(a.sin_port, 0);
  EXPECT_TRUE(HasOption(s, SOL_SOCKET, SO_REUSEADDR));
  EXPECT_TRUE(HasOption(s, IPPROTO_TCP, TCP_NODELAY));
  EXPECT_FALSE(HasOption(s, SOL_SOCKET, SO_KEEPALIVE)) << "an option left at its default is not recorded";
}

TEST(CaptureFdsTest, ConnectedUdpSocketKeepsItsPeer) {
  Child child([] {
    sockaddr_in a, b;
    Loopback4(SOCK_DGRAM, &a);      // 0
    int s = Loopback4(SOCK_DGRAM, &b);  // 1
    if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) ::_exit(4);
  });
  ASSERT_GT(child.pid(), 0);
  image::Process proc;
  absl::Status st = CaptureFds({child.pid()}, {}, nullptr, {&proc}, nullptr);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(proc.fds_size(), 2);
  EXPECT_TRUE(proc.fds(0).socket().peer().empty());
  ASSERT_EQ(proc.fds(1).socket().peer().size(), sizeof(sockaddr_in));
  sockaddr_in peer, first;
  std::memcpy(&peer, proc.fds(1).socket().peer().data(), sizeof peer);
  std::memcpy(&first, proc.fds(0).socket().bound().data(), sizeof first);
  EXPECT_EQ(peer.sin_port, first.sin_port);
}

TEST(CaptureFdsTest, EstablishedTcpConnectionIsRefusedOrResetWithTcpClose) {
  Child child([] {
    sockaddr_in a;
    int l = Loopback4(SOCK_STREAM, &a);  // 0
    ::listen(l, 1);
    int c = ::socket(AF_INET, SOCK_STREAM, 0);  // 1
    if (::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) ::_exit(4);
    ::accept(l, nullptr, nullptr);  // 2
  });
  ASSERT_GT(child.pid(), 0);
  absl::Status st = CheckFdsSupported({child.pid()}, {});
  ASSERT_EQ(st.code(), absl::StatusCode::kUnimplemented) << st;
  EXPECT_THAT(st.message(), HasSubstr(absl::StrCat("pid ", child.pid(), " fd 1 is an established TCP connection 127.0.0.1:")));
  EXPECT_THAT(st.message(), HasSubstr("--tcp-close"));

  image::Process proc;
  st = CaptureFds({child.pid()}, FdOptions{.tcp_close = true}, nullptr, {&proc}, nullptr);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(proc.fds_size(), 3);
  EXPECT_TRUE(proc.fds(0).socket().listening());
  EXPECT_TRUE(proc.fds(1).socket().reset());
  EXPECT_TRUE(proc.fds(2).socket().reset());
  EXPECT_THAT(proc.fds(1).socket().reset_from(), HasSubstr(" -> 127.0.0.1:"));
}

TEST(CaptureFdsTest, ListenerWithConnectionsWaitingIsRefused) {
  Child child([] {
    sockaddr_in a;
    int l = Loopback4(SOCK_STREAM, &a);  // 0
    ::listen(l, 4);
    int c = ::socket(AF_INET, SOCK_STREAM, 0);  // 1
    if (::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) ::_exit(4);
    ::close(c);  // the connection still waits in the accept queue
  });
  ASSERT_GT(child.pid(), 0);
  absl::Status st = CheckFdsSupported({child.pid()}, {});
  ASSERT_EQ(st.code(), absl::StatusCode::kUnimplemented) << st;
  EXPECT_THAT(st.message(), HasSubstr("with 1 connection waiting to be accepted"));
}

// Sends one byte with `fds` (SCM_RIGHTS) through `sock`; exits 5 on failure.
void SendRights(int sock, const std::vector<int>& fds) {
  char byte = 'x';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))] = {};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = control;
  mh.msg_controllen = CMSG_SPACE(fds.size() * sizeof(int));
  cmsghdr* c = CMSG_FIRSTHDR(&mh);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
  std::memcpy(CMSG_DATA(c), fds.data(), fds.size() * sizeof(int));
  if (::sendmsg(sock, &mh, 0) != 1) ::_exit(5);
}

// A descriptor in flight the sender still holds names it; one the sender closed is the holder's.
TEST(CaptureFdsTest, DescriptorsInFlightNameTheirHolder) {
  Child child([] {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) ::_exit(4);  // 0, 1
    int kept = ::eventfd(0, 0);                                     // 2
    int closed = ::eventfd(3, 0);                                   // 3
    SendRights(sv[0], {kept, closed});
    ::close(closed);
  });
  ASSERT_GT(child.pid(), 0);
  image::Process proc, holder;
  proc.set_pid(child.pid());
  absl::Status st = CaptureFds({child.pid()}, {}, nullptr, {&proc}, nullptr, &holder);
  ASSERT_TRUE(st.ok()) << st;
  const image::Fd* receiver = nullptr;
  for (const image::Fd& fd : proc.fds()) receiver = fd.fd() == 1 ? &fd : receiver;
  ASSERT_NE(receiver, nullptr);
  ASSERT_EQ(receiver->in_flight_size(), 1);
  const image::InFlight& f = receiver->in_flight(0);
  EXPECT_EQ(f.offset(), 0u);
  EXPECT_EQ(f.length(), 1u);
  ASSERT_EQ(f.files_size(), 2);
  EXPECT_EQ(f.files(0).pid(), child.pid());
  EXPECT_EQ(f.files(0).fd(), 2);
  EXPECT_EQ(f.files(1).pid(), 0);
  EXPECT_EQ(holder.pid(), 0);
  ASSERT_EQ(holder.fds_size(), 1);
  EXPECT_EQ(holder.fds(0).fd(), f.files(1).fd());
  EXPECT_EQ(holder.fds(0).kind(), image::Fd::EVENTFD);
  EXPECT_EQ(holder.fds(0).eventfd().count(), 3u);
}

// A pidfd in flight names a process only the process that opens it can: refused.
TEST(CaptureFdsTest, PidfdInFlightIsRefused) {
  Child child([] {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_DGRAM, 0, sv) != 0) ::_exit(4);
    int self = static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0));
    if (self < 0) ::_exit(6);
    SendRights(sv[0], {self});
  });
  ASSERT_GT(child.pid(), 0);
  image::Process proc, holder;
  proc.set_pid(child.pid());
  absl::Status st = CaptureFds({child.pid()}, {}, nullptr, {&proc}, nullptr, &holder);
  ASSERT_EQ(st.code(), absl::StatusCode::kUnimplemented) << st;
  EXPECT_THAT(st.message(), HasSubstr("with a descriptor in flight (sent with SCM_RIGHTS, not received yet) that is a "
                                      "pidfd"));
}

// An epoll set only a message holds (its registrations name descriptors of a process): refused,
// naming the queue it waits in.
TEST(CaptureFdsTest, EpollSetOnlyAMessageHoldsIsRefused) {
  Child child([] {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) ::_exit(4);  // 0, 1
    int ep = ::epoll_create1(0);
    SendRights(sv[0], {ep});
    ::close(ep);
  });
  ASSERT_GT(child.pid(), 0);
  image::Process proc, holder;
  proc.set_pid(child.pid());
  absl::Status st = CaptureFds({child.pid()}, {}, nullptr, {&proc}, nullptr, &holder);
  ASSERT_EQ(st.code(), absl::StatusCode::kUnimplemented) << st;
  EXPECT_THAT(st.message(), HasSubstr(absl::StrCat("a descriptor in flight in the queue of pid ", child.pid(),
                                                   " fd 1 (sent with SCM_RIGHTS, not received yet; its sender closed "
                                                   "its own) is an epoll set")));
  // The check while the process runs refuses it too.
  st = CheckFdsSupported({child.pid()}, {});
  EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented) << st;
}

TEST(CaptureFdsTest, NetlinkSocketIsRefused) {
  Child child([] { ::socket(AF_NETLINK, SOCK_RAW, 0); });
  ASSERT_GT(child.pid(), 0);
  absl::Status st = CheckFdsSupported({child.pid()}, {});
  ASSERT_EQ(st.code(), absl::StatusCode::kUnimplemented) << st;
  EXPECT_THAT(st.message(), HasSubstr(absl::StrCat("pid ", child.pid(), " fd 0 is a netlink socket (socket:[")));
}

TEST(CaptureFdsTest, NamedUnixListenerKeepsItsNameAndFile) {
  std::string path = absl::StrCat(::testing::TempDir(), "/cairn-unit-", ::getpid(), ".sock");
  ::unlink(path.c_str());
  Child child([path] {
    int s = ::socket(AF_UNIX, SOCK_STREAM, 0);  // 0
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(s, 3) != 0) ::_exit(4);
  });
  ASSERT_GT(child.pid(), 0);
  image::Process proc;
  absl::Status st = CaptureFds({child.pid()}, {}, nullptr, {&proc}, nullptr);
  ::unlink(path.c_str());
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(proc.fds_size(), 1);
  const image::Fd& f = proc.fds(0);
  EXPECT_EQ(f.kind(), image::Fd::UNIX_SOCKET);
  ASSERT_TRUE(f.has_socket());
  EXPECT_TRUE(f.socket().listening());
  EXPECT_EQ(f.socket().backlog(), 3);
  EXPECT_NE(f.socket().bound_ino(), 0u);
  EXPECT_THAT(f.socket().bound(), HasSubstr(path));
}

}  // namespace
}  // namespace cairn::dump
