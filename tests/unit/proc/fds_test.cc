#include "engine/proc/fds.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <climits>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/temp_dir.h"

namespace cairn::proc {
namespace {

using ::testing::IsEmpty;

TEST(ParseFdInfoTest, OctalFlagsPosAndMount) {
  auto info = ParseFdInfo("pos:\t42\nflags:\t02102002\nmnt_id:\t27\nino:\t1234\n");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->pos, 42);
  EXPECT_EQ(info->flags, 02102002);  // O_CLOEXEC | O_LARGEFILE | O_APPEND | O_RDWR
  EXPECT_EQ(info->flags & O_ACCMODE, O_RDWR);
  EXPECT_NE(info->flags & O_APPEND, 0);
  EXPECT_NE(info->flags & O_CLOEXEC, 0);
  EXPECT_EQ(info->flags & O_NONBLOCK, 0);
  EXPECT_EQ(info->mnt_id, 27u);
}

TEST(ParseFdInfoTest, LargePositionAndReadOnly) {
  auto info = ParseFdInfo("pos:\t8589934592\nflags:\t0100000\nmnt_id:\t1\n");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->pos, int64_t{8589934592});
  EXPECT_EQ(info->flags & O_ACCMODE, O_RDONLY);
}

TEST(ParseFdInfoTest, ExtraLinesAreIgnored) {
  // eventfd/epoll/inotify fdinfo carries object-specific lines after the common ones.
  auto info = ParseFdInfo(
      "pos:\t0\nflags:\t02004002\nmnt_id:\t15\nino:\t1057\neventfd-count:                0\n"
      "eventfd-id: 3\n");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->flags, 02004002);
  EXPECT_NE(info->flags & O_NONBLOCK, 0);
}

TEST(ParseFdInfoTest, MalformedIsDataLoss) {
  for (const char* text : {"", "mnt_id:\t1\n", "pos:\t0\n", "flags:\t02\n",
                           "pos:\tx\nflags:\t02\n", "pos:\t0\nflags:\t0289\n",
                           "pos:\t0\nflags:\t\n"}) {
    SCOPED_TRACE(text);
    auto info = ParseFdInfo(text);
    ASSERT_FALSE(info.ok());
    EXPECT_EQ(info.status().code(), absl::StatusCode::kDataLoss);
  }
}

constexpr char kTimers[] =
    "ID: 5\n"
    "signal: 10/0000000000001234\n"
    "notify: signal/pid.3112\n"
    "ClockID: 0\n"
    "ID: 9\n"
    "signal: 36/000000000000004d\n"
    "notify: signal/tid.3112\n"
    "ClockID: 7\n";

TEST(ParseTimersTest, KernelFormat) {
  auto timers = ParseTimers(kTimers);
  ASSERT_TRUE(timers.ok()) << timers.status();
  ASSERT_EQ(timers->size(), 2u);

  const TimerInfo& a = (*timers)[0];
  EXPECT_EQ(a.id, 5);
  EXPECT_EQ(a.signo, 10);
  EXPECT_EQ(a.sigval, 0x1234u);
  EXPECT_EQ(a.notify, "signal");
  EXPECT_FALSE(a.to_thread);
  EXPECT_EQ(a.notify_tid, 3112);
  EXPECT_EQ(a.clock, 0);

  const TimerInfo& b = (*timers)[1];
  EXPECT_EQ(b.id, 9);
  EXPECT_EQ(b.signo, 36);
  EXPECT_EQ(b.sigval, 0x4du);
  EXPECT_EQ(b.notify, "signal");
  EXPECT_TRUE(b.to_thread);
  EXPECT_EQ(b.notify_tid, 3112);
  EXPECT_EQ(b.clock, 7);
}

TEST(ParseTimersTest, NoneNotification) {
  auto timers = ParseTimers("ID: 0\nsignal: 14/0000000000000000\nnotify: none/pid.77\nClockID: 1\n");
  ASSERT_TRUE(timers.ok()) << timers.status();
  ASSERT_EQ(timers->size(), 1u);
  EXPECT_EQ((*timers)[0].notify, "none");
  EXPECT_EQ((*timers)[0].notify_tid, 77);
  EXPECT_EQ((*timers)[0].clock, 1);
}

TEST(ParseTimersTest, EmptyIsNoTimers) {
  auto timers = ParseTimers("");
  ASSERT_TRUE(timers.ok()) << timers.status();
  EXPECT_THAT(*timers, IsEmpty());
}

TEST(ParseTimersTest, MalformedIsDataLoss) {
  for (const char* text : {
           "signal: 10/0000000000001234\n",                    // before any ID
           "ID: five\n",                                        // id not numeric
           "ID: 1\nsignal: ten/0000000000001234\n",             // signo not numeric
           "ID: 1\nsignal: 10/zz\n",                            // sigval not hex
           "ID: 1\nnotify: signal\n",                           // no target
           "ID: 1\nnotify: signal/pid.x\n",                     // target not numeric
           "ID: 1\nClockID: mono\n",
       }) {
    SCOPED_TRACE(text);
    auto timers = ParseTimers(text);
    ASSERT_FALSE(timers.ok());
    EXPECT_EQ(timers.status().code(), absl::StatusCode::kDataLoss);
  }
}

TEST(ReadFdsTest, SelfReportsPositionAndFlags) {
  testing::TempDir tmp;
  std::string path = tmp.Sub("log file.txt");
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  ASSERT_TRUE(fd.valid());
  ASSERT_EQ(::write(fd.get(), "0123456789", 10), 10);
  ASSERT_EQ(::lseek(fd.get(), 3, SEEK_SET), 3);
  UniqueFd ro(::open(path.c_str(), O_RDONLY | O_NONBLOCK));
  ASSERT_TRUE(ro.valid());
  ASSERT_EQ(::lseek(ro.get(), 7, SEEK_SET), 7);

  auto fds = ReadFds(::getpid());
  ASSERT_TRUE(fds.ok()) << fds.status();
  const FdInfo* rw_info = nullptr;
  const FdInfo* ro_info = nullptr;
  int prev = -1;
  for (const FdInfo& f : *fds) {
    EXPECT_GT(f.fd, prev) << "descriptors must be ascending";
    prev = f.fd;
    if (f.fd == fd.get()) rw_info = &f;
    if (f.fd == ro.get()) ro_info = &f;
  }
  ASSERT_NE(rw_info, nullptr);
  EXPECT_EQ(rw_info->target, path);
  EXPECT_EQ(rw_info->pos, 3);
  EXPECT_EQ(rw_info->flags & O_ACCMODE, O_RDWR);
  EXPECT_NE(rw_info->flags & O_APPEND, 0);
  EXPECT_NE(rw_info->flags & O_CLOEXEC, 0);
  EXPECT_EQ(rw_info->flags & O_NONBLOCK, 0);
  EXPECT_NE(rw_info->mnt_id, 0u);

  ASSERT_NE(ro_info, nullptr);
  EXPECT_EQ(ro_info->target, path);
  EXPECT_EQ(ro_info->pos, 7);
  EXPECT_EQ(ro_info->flags & O_ACCMODE, O_RDONLY);
  EXPECT_EQ(ro_info->flags & O_APPEND, 0);
  EXPECT_EQ(ro_info->flags & O_CLOEXEC, 0);
  EXPECT_NE(ro_info->flags & O_NONBLOCK, 0);

  // After the file is unlinked the kernel reports it as deleted.
  ASSERT_EQ(::unlink(path.c_str()), 0);
  auto after = ReadFds(::getpid());
  ASSERT_TRUE(after.ok()) << after.status();
  bool seen = false;
  for (const FdInfo& f : *after) {
    if (f.fd == fd.get()) {
      seen = true;
      EXPECT_EQ(f.target, path + " (deleted)");
    }
  }
  EXPECT_TRUE(seen);
}

TEST(ReadFdsTest, OnlyTheTargetsAskedForGetTheirFdinfo) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);
  UniqueFd ev(::eventfd(3, EFD_NONBLOCK));
  ASSERT_TRUE(ev.valid());
  auto fds = ReadFds(::getpid(), [](absl::string_view target) { return !SocketInode(target).has_value(); });
  ASSERT_TRUE(fds.ok()) << fds.status();
  const FdInfo* sock = nullptr;
  const FdInfo* counter = nullptr;
  for (const FdInfo& f : *fds) {
    if (f.fd == a.get()) sock = &f;
    if (f.fd == ev.get()) counter = &f;
  }
  ASSERT_NE(sock, nullptr);
  ASSERT_NE(counter, nullptr);
  // The socket: its number and target alone (its fdinfo would say O_NONBLOCK and O_CLOEXEC).
  EXPECT_TRUE(SocketInode(sock->target).has_value()) << sock->target;
  EXPECT_EQ(sock->flags, 0);
  EXPECT_THAT(sock->extra, IsEmpty());
  // The eventfd: its fdinfo read.
  EXPECT_EQ(counter->target, "anon_inode:[eventfd]");
  EXPECT_NE(counter->flags & O_NONBLOCK, 0);
  auto e = ParseEventfd(*counter);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->count, 3u);
}

TEST(SocketInodeTest, OnlyASocketLinkNamesOne) {
  EXPECT_EQ(SocketInode("socket:[12345]"), 12345u);
  EXPECT_EQ(SocketInode("socket:[0]"), 0u);
  EXPECT_EQ(SocketInode("pipe:[12345]"), std::nullopt);
  EXPECT_EQ(SocketInode("socket:[12345"), std::nullopt);
  EXPECT_EQ(SocketInode("socket:[x]"), std::nullopt);
  EXPECT_EQ(SocketInode("/tmp/socket:[1]"), std::nullopt);
  // What the kernel shows for a socket of ours is that socket's inode.
  UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_TRUE(s.valid());
  struct stat st {};
  ASSERT_EQ(::fstat(s.get(), &st), 0);
  char link[64];
  ssize_t n = ::readlink(absl::StrCat("/proc/self/fd/", s.get()).c_str(), link, sizeof link);
  ASSERT_GT(n, 0);
  EXPECT_EQ(SocketInode(std::string(link, static_cast<size_t>(n))), static_cast<uint64_t>(st.st_ino));
}

TEST(ReadFdsTest, MissingProcessIsNotFound) {
  EXPECT_EQ(ReadFds(INT_MAX).status().code(), absl::StatusCode::kNotFound);
}

TEST(ReadTimersTest, SelfSeesItsPosixTimer) {
  sigevent sev{};
  sev.sigev_notify = SIGEV_SIGNAL;
  sev.sigev_signo = SIGUSR2;
  sev.sigev_value.sival_ptr = reinterpret_cast<void*>(uintptr_t{0xabcd});
  timer_t timer;
  ASSERT_EQ(::timer_create(CLOCK_MONOTONIC, &sev, &timer), 0);
  auto timers = ReadTimers(::getpid());
  ::timer_delete(timer);
  ASSERT_TRUE(timers.ok()) << timers.status();
  ASSERT_EQ(timers->size(), 1u);
  const TimerInfo& t = (*timers)[0];
  EXPECT_EQ(t.id, static_cast<int>(reinterpret_cast<intptr_t>(timer)));
  EXPECT_EQ(t.signo, SIGUSR2);
  EXPECT_EQ(t.sigval, 0xabcdu);
  EXPECT_EQ(t.notify, "signal");
  EXPECT_FALSE(t.to_thread);
  EXPECT_EQ(t.notify_tid, ::getpid());
  EXPECT_EQ(t.clock, CLOCK_MONOTONIC);
}


// Object-specific fdinfo, as Linux 6.18 prints it (checked with probes on this machine).

TEST(ParseFdInfoTest, KeepsObjectLinesInOrder) {
  auto info = ParseFdInfo(
      "pos:\t0\nflags:\t02\nmnt_id:\t17\nino:\t1039\ntfd:        3 events: 19 data: 1  pos:0 ino:40f sdev:10\n"
      "tfd:        3 events: 19 data: 2  pos:0 ino:40f sdev:10\n");
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_EQ(info->extra.size(), 3u);
  EXPECT_EQ(info->extra[0], std::make_pair(std::string("ino"), std::string("1039")));
  EXPECT_EQ(info->extra[1].first, "tfd");
  EXPECT_EQ(info->extra[2].second, "3 events: 19 data: 2  pos:0 ino:40f sdev:10");
}

TEST(ParseEventfdTest, CountAndSemaphore) {
  auto info = ParseFdInfo(
      "pos:\t0\nflags:\t02004002\nmnt_id:\t17\nino:\t1039\neventfd-count:        12345678e\neventfd-id: 1\n"
      "eventfd-semaphore: 1\n");
  ASSERT_TRUE(info.ok()) << info.status();
  auto e = ParseEventfd(*info);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->count, 0x12345678eu);
  EXPECT_TRUE(e->semaphore);
  EXPECT_TRUE(e->semaphore_reported);
}

TEST(ParseEventfdTest, OlderKernelWithoutSemaphoreLine) {
  auto info = ParseFdInfo("pos:\t0\nflags:\t02\nmnt_id:\t15\neventfd-count:                0\n");
  ASSERT_TRUE(info.ok()) << info.status();
  auto e = ParseEventfd(*info);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->count, 0u);
  EXPECT_FALSE(e->semaphore);
  EXPECT_FALSE(e->semaphore_reported);
}

TEST(ParseTimerfdTest, KernelFormat) {
  auto info = ParseFdInfo(
      "pos:\t0\nflags:\t02\nmnt_id:\t17\nino:\t1039\nclockid: 0\nticks: 6\nsettime flags: 03\n"
      "it_value: (99, 845801252)\nit_interval: (1000, 500)\n");
  ASSERT_TRUE(info.ok()) << info.status();
  auto t = ParseTimerfd(*info);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->clock, 0);
  EXPECT_EQ(t->ticks, 6u);
  EXPECT_EQ(t->settime_flags, 03);  // TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET
  EXPECT_EQ(t->value_ns, int64_t{99845801252});
  EXPECT_EQ(t->interval_ns, int64_t{1000000000500});
}

TEST(ParseSignalfdTest, HexMask) {
  auto info = ParseFdInfo("pos:\t0\nflags:\t04002\nmnt_id:\t17\nino:\t1039\nsigmask:\t0000000800000200\n");
  ASSERT_TRUE(info.ok()) << info.status();
  auto mask = ParseSignalfdMask(*info);
  ASSERT_TRUE(mask.ok()) << mask.status();
  EXPECT_EQ(*mask, (1ull << (SIGUSR1 - 1)) | (1ull << 35));  // SIGUSR1 and signal 36
}

TEST(ParseEpollTargetsTest, KernelFormat) {
  auto info = ParseFdInfo(
      "pos:\t0\nflags:\t02\nmnt_id:\t17\nino:\t1039\n"
      "tfd:        3 events: 80000019 data:     deadbeefcafe  pos:0 ino:40f sdev:10\n"
      "tfd:       11 events:       19 data:                1  pos:0 ino:40f sdev:10\n"
      "tfd:        5 events: 4000001c data:                7  pos:12 ino:1234 sdev:800001\n");
  ASSERT_TRUE(info.ok()) << info.status();
  auto targets = ParseEpollTargets(*info);
  ASSERT_TRUE(targets.ok()) << targets.status();
  ASSERT_EQ(targets->size(), 3u);
  EXPECT_EQ((*targets)[0].tfd, 3);
  EXPECT_EQ((*targets)[0].events, 0x80000019u);  // EPOLLET | EPOLLHUP | EPOLLERR | EPOLLIN
  EXPECT_EQ((*targets)[0].data, 0xdeadbeefcafeu);
  EXPECT_EQ((*targets)[0].ino, 0x40fu);
  EXPECT_EQ((*targets)[1].tfd, 11);
  EXPECT_EQ((*targets)[1].data, 1u);
  EXPECT_EQ((*targets)[2].events, 0x4000001cu);
  EXPECT_EQ((*targets)[2].sdev, 0x800001u);
}

TEST(ParseEpollTargetsTest, EmptyInterestList) {
  auto info = ParseFdInfo("pos:\t0\nflags:\t02\nmnt_id:\t17\nino:\t1039\n");
  ASSERT_TRUE(info.ok()) << info.status();
  auto targets = ParseEpollTargets(*info);
  ASSERT_TRUE(targets.ok()) << targets.status();
  EXPECT_THAT(*targets, IsEmpty());
}

TEST(ParseInotifyWatchesTest, KernelFormat) {
  // As Linux 6.18 prints it.
  auto info = ParseFdInfo(
      "pos:\t0\nflags:\t00\nmnt_id:\t17\nino:\t1039\n"
      "inotify wd:2 ino:2dd sdev:fe00000 mask:80000002 ignored_mask:0 fhandle-bytes:8 fhandle-type:1 "
      "f_handle:dd02000000000000\n"
      "inotify wd:1 ino:abe083 sdev:fe00000 mask:300 ignored_mask:0 fhandle-bytes:8 fhandle-type:1 "
      "f_handle:83e0ab00f457f6cb\n");
  ASSERT_TRUE(info.ok()) << info.status();
  auto watches = ParseInotifyWatches(*info);
  ASSERT_TRUE(watches.ok()) << watches.status();
  ASSERT_EQ(watches->size(), 2u);
  const InotifyWatch& w = (*watches)[0];
  EXPECT_EQ(w.wd, 2);
  EXPECT_EQ(w.ino, 0x2ddu);
  EXPECT_EQ(w.sdev, 0xfe00000u);
  EXPECT_EQ(w.mask, 0x80000002u);  // IN_MASK_ADD is not kept; IN_ONESHOT is
  EXPECT_EQ(w.handle_type, 1);
  EXPECT_EQ(w.handle, std::string("\xdd\x02\0\0\0\0\0\0", 8));
  EXPECT_EQ((*watches)[1].wd, 1);
  EXPECT_EQ((*watches)[1].mask, 0x300u);
}

TEST(ParseInotifyWatchesTest, MalformedIsDataLoss) {
  for (const char* line : {"inotify wd:x ino:1 sdev:0 mask:1 f_handle:00 fhandle-bytes:1\n",
                           "inotify wd:1 ino:1 sdev:0 fhandle-bytes:1 f_handle:00\n",
                           "inotify wd:1 ino:1 sdev:0 mask:1 fhandle-bytes:2 f_handle:00\n"}) {
    SCOPED_TRACE(line);
    auto info = ParseFdInfo(std::string("pos:\t0\nflags:\t00\nmnt_id:\t17\n") + line);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(ParseInotifyWatches(*info).status().code(), absl::StatusCode::kDataLoss);
  }
}

TEST(ParseObjectFdInfoTest, MalformedIsDataLoss) {
  const std::string common = "pos:\t0\nflags:\t02\nmnt_id:\t17\n";
  for (const char* text : {"", "eventfd-count: xyz\n", "eventfd-count: 1\neventfd-semaphore: 2\n"}) {
    SCOPED_TRACE(text);
    auto info = ParseFdInfo(common + text);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(ParseEventfd(*info).status().code(), absl::StatusCode::kDataLoss);
  }
  for (const char* text : {"", "clockid: 1\nticks: 0\nsettime flags: 08\nit_value: (0, 0)\nit_interval: (0, 0)\n",
                           "clockid: 1\nticks: 0\nsettime flags: 00\nit_value: 0, 0\nit_interval: (0, 0)\n",
                           "clockid: 1\nticks: 0\nsettime flags: 00\nit_value: (0, 1000000000)\nit_interval: (0, 0)\n",
                           "clockid: 1\nticks: -1\nsettime flags: 00\nit_value: (0, 0)\nit_interval: (0, 0)\n",
                           "clockid: 1\nticks: 0\nsettime flags: 00\nit_value: (0, 0)\n"}) {
    SCOPED_TRACE(text);
    auto info = ParseFdInfo(common + text);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(ParseTimerfd(*info).status().code(), absl::StatusCode::kDataLoss);
  }
  for (const char* text : {"", "sigmask:\tzz\n"}) {
    SCOPED_TRACE(text);
    auto info = ParseFdInfo(common + text);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(ParseSignalfdMask(*info).status().code(), absl::StatusCode::kDataLoss);
  }
  for (const char* text : {"tfd: x events: 19 data: 1\n", "tfd: 3 events: 19\n", "tfd: 3 data: 1\n",
                           "tfd: 3 events: zz data: 1\n", "tfd: 3 events: 19 data: 1 ino:qq\n"}) {
    SCOPED_TRACE(text);
    auto info = ParseFdInfo(common + text);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(ParseEpollTargets(*info).status().code(), absl::StatusCode::kDataLoss);
  }
}

// The typed parsers against this kernel's own output for objects of each kind.
TEST(ReadFdsTest, SelfKernelObjects) {
  UniqueFd efd(::eventfd(7, EFD_SEMAPHORE | EFD_NONBLOCK | EFD_CLOEXEC));
  ASSERT_TRUE(efd.valid());
  UniqueFd tfd(::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC));
  ASSERT_TRUE(tfd.valid());
  itimerspec its{{3, 0}, {100, 0}};
  ASSERT_EQ(::timerfd_settime(tfd.get(), 0, &its, nullptr), 0);
  sigset_t m;
  sigemptyset(&m);
  sigaddset(&m, SIGUSR2);
  UniqueFd sfd(::signalfd(-1, &m, SFD_CLOEXEC));
  ASSERT_TRUE(sfd.valid());
  UniqueFd ep(::epoll_create1(EPOLL_CLOEXEC));
  ASSERT_TRUE(ep.valid());
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLET;
  ev.data.u64 = 0xfeedface12345678;
  ASSERT_EQ(::epoll_ctl(ep.get(), EPOLL_CTL_ADD, efd.get(), &ev), 0);

  auto fds = ReadFds(::getpid());
  ASSERT_TRUE(fds.ok()) << fds.status();
  int seen = 0;
  for (const FdInfo& f : *fds) {
    if (f.fd == efd.get()) {
      ++seen;
      EXPECT_EQ(f.target, "anon_inode:[eventfd]");
      auto e = ParseEventfd(f);
      ASSERT_TRUE(e.ok()) << e.status();
      EXPECT_EQ(e->count, 7u);
      if (e->semaphore_reported) {
        EXPECT_TRUE(e->semaphore);
      }
      EXPECT_NE(f.flags & O_NONBLOCK, 0);
    } else if (f.fd == tfd.get()) {
      ++seen;
      EXPECT_EQ(f.target, "anon_inode:[timerfd]");
      auto t = ParseTimerfd(f);
      ASSERT_TRUE(t.ok()) << t.status();
      EXPECT_EQ(t->clock, CLOCK_MONOTONIC);
      EXPECT_EQ(t->ticks, 0u);
      EXPECT_EQ(t->interval_ns, int64_t{3000000000});
      EXPECT_GT(t->value_ns, int64_t{90} * 1000000000);
      EXPECT_LE(t->value_ns, int64_t{100} * 1000000000);
    } else if (f.fd == sfd.get()) {
      ++seen;
      EXPECT_EQ(f.target, "anon_inode:[signalfd]");
      auto mask = ParseSignalfdMask(f);
      ASSERT_TRUE(mask.ok()) << mask.status();
      EXPECT_EQ(*mask, 1ull << (SIGUSR2 - 1));
    } else if (f.fd == ep.get()) {
      ++seen;
      EXPECT_EQ(f.target, "anon_inode:[eventpoll]");
      auto targets = ParseEpollTargets(f);
      ASSERT_TRUE(targets.ok()) << targets.status();
      ASSERT_EQ(targets->size(), 1u);
      EXPECT_EQ((*targets)[0].tfd, efd.get());
      EXPECT_EQ((*targets)[0].events, static_cast<uint32_t>(EPOLLIN | EPOLLET | EPOLLERR | EPOLLHUP));
      EXPECT_EQ((*targets)[0].data, 0xfeedface12345678u);
    }
  }
  EXPECT_EQ(seen, 4);
}

}  // namespace
}  // namespace cairn::proc
