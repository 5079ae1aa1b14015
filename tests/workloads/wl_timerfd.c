// timerfd: armed, expired and disarmed timers on several clocks.
//   slow:     CLOCK_MONOTONIC, first expiry in 60 s, then every 20 s (non-blocking, close-on-exec)
//   oneshot:  CLOCK_BOOTTIME, one-shot 1 ms, expired before the checkpoint and not read
//   overrun:  CLOCK_REALTIME, TFD_TIMER_ABSTIME|TFD_TIMER_CANCEL_ON_SET, started 5000.5 s in the past
//             with a 1000 s period: 6 expirations wait unread, the next is due in 999.5 s
//   off:      CLOCK_MONOTONIC, disarmed, with a 7 s interval set
// After restore: flags unchanged; timerfd_gettime gives the same interval and no more time left than
// before; reads return the unread expirations (1 and 6), and nothing for the armed-but-not-due ones;
// fdinfo still shows the settime flags of the absolute timer; a timer re-armed after restore fires.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "wl_common.h"

struct Tfd {
  const char* name;
  int fd;
  int fd_flags, fl_flags;
  struct itimerspec before;
};

static int64_t Ns(struct timespec ts) { return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec; }

static void Record(struct Tfd* t) {
  t->fd_flags = WL_SYS(fcntl(t->fd, F_GETFD));
  t->fl_flags = WL_SYS(fcntl(t->fd, F_GETFL));
  WL_SYS(timerfd_gettime(t->fd, &t->before));
}

static struct itimerspec Check(const struct Tfd* t) {
  int fd_flags = fcntl(t->fd, F_GETFD);
  WL_CHECK(fd_flags == t->fd_flags, "%s (fd %d): F_GETFD %#x became %#x", t->name, t->fd, t->fd_flags, fd_flags);
  int fl_flags = fcntl(t->fd, F_GETFL);
  WL_CHECK(fl_flags == t->fl_flags, "%s (fd %d): F_GETFL %#o became %#o", t->name, t->fd, t->fl_flags, fl_flags);
  struct itimerspec now;
  WL_SYS(timerfd_gettime(t->fd, &now));
  WL_CHECK(Ns(now.it_interval) == Ns(t->before.it_interval), "%s (fd %d): interval %lld ns became %lld ns", t->name,
           t->fd, (long long)Ns(t->before.it_interval), (long long)Ns(now.it_interval));
  WL_CHECK(Ns(now.it_value) <= Ns(t->before.it_value), "%s (fd %d): %lld ns left, more than the %lld ns before",
           t->name, t->fd, (long long)Ns(now.it_value), (long long)Ns(t->before.it_value));
  return now;
}

// Reads the expiration count of a timerfd that must have some (poll first: some block).
static uint64_t ReadTicks(const struct Tfd* t) {
  struct pollfd p = {t->fd, POLLIN, 0};
  WL_CHECK(poll(&p, 1, 0) == 1, "%s (fd %d): no expiration to read", t->name, t->fd);
  uint64_t n = 0;
  WL_CHECK(read(t->fd, &n, sizeof n) == sizeof n, "%s (fd %d): read: %s", t->name, t->fd, wl_errstr());
  return n;
}

static void ExpectNoTicks(const struct Tfd* t) {
  struct pollfd p = {t->fd, POLLIN, 0};
  WL_CHECK(poll(&p, 1, 0) == 0, "%s (fd %d): has an expiration it should not have", t->name, t->fd);
}

// The "settime flags" line of /proc/self/fdinfo/FD, as the kernel prints it ("03").
static void SettimeFlags(int fd, char* out, size_t size) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
  WL_CHECK(wl_read_file(path, buf, sizeof buf) >= 0, "read %s: %s", path, wl_errstr());
  char* p = strstr(buf, "settime flags:");
  WL_CHECK(p != NULL, "%s has no settime flags", path);
  p += strlen("settime flags:");
  while (*p == ' ' || *p == '\t') p++;
  size_t n = strcspn(p, "\n");
  WL_CHECK(n < size, "settime flags too long");
  memcpy(out, p, n);
  out[n] = 0;
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  struct Tfd slow = {"slow", WL_SYS(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)), 0, 0, {{0, 0}, {0, 0}}};
  struct itimerspec its = {{20, 0}, {60, 0}};
  WL_SYS(timerfd_settime(slow.fd, 0, &its, NULL));

  struct Tfd oneshot = {"oneshot", WL_SYS(timerfd_create(CLOCK_BOOTTIME, 0)), 0, 0, {{0, 0}, {0, 0}}};
  its = (struct itimerspec){{0, 0}, {0, 1000000}};
  WL_SYS(timerfd_settime(oneshot.fd, 0, &its, NULL));

  struct Tfd overrun = {"overrun", WL_SYS(timerfd_create(CLOCK_REALTIME, TFD_NONBLOCK)), 0, 0, {{0, 0}, {0, 0}}};
  struct timespec now;
  WL_SYS(clock_gettime(CLOCK_REALTIME, &now));
  its.it_interval = (struct timespec){1000, 0};
  its.it_value = (struct timespec){now.tv_sec - 5001, now.tv_nsec + 500000000};
  if (its.it_value.tv_nsec >= 1000000000) {
    its.it_value.tv_sec++;
    its.it_value.tv_nsec -= 1000000000;
  }
  WL_SYS(timerfd_settime(overrun.fd, TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET, &its, NULL));

  struct Tfd off = {"off", WL_SYS(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK)), 0, 0, {{0, 0}, {0, 0}}};
  its = (struct itimerspec){{7, 0}, {0, 0}};
  WL_SYS(timerfd_settime(off.fd, 0, &its, NULL));

  // Let the one-shot timer expire (unread), then take the "before" picture.
  struct pollfd p = {oneshot.fd, POLLIN, 0};
  WL_CHECK(poll(&p, 1, 5000) == 1, "the 1 ms one-shot timer did not expire within 5 s");
  Record(&slow);
  Record(&oneshot);
  Record(&overrun);  // timerfd_gettime counts the missed periods without consuming them
  Record(&off);
  char flags_before[16];
  SettimeFlags(overrun.fd, flags_before, sizeof flags_before);
  WL_CHECK(strcmp(flags_before, "03") == 0, "settime flags of the absolute timer are '%s', want '03'", flags_before);

  wl_signal_ready();
  wl_wait_go();

  struct itimerspec after = Check(&slow);
  WL_CHECK(Ns(after.it_value) > 0, "slow (fd %d) is no longer armed", slow.fd);
  ExpectNoTicks(&slow);
  Check(&oneshot);
  uint64_t n = ReadTicks(&oneshot);
  WL_CHECK(n == 1, "oneshot (fd %d): read %llu expirations, want 1", oneshot.fd, (unsigned long long)n);
  after = Check(&overrun);
  WL_CHECK(Ns(after.it_value) > 0, "overrun (fd %d) is no longer armed", overrun.fd);
  n = ReadTicks(&overrun);
  WL_CHECK(n == 6, "overrun (fd %d): read %llu expirations, want 6", overrun.fd, (unsigned long long)n);
  ExpectNoTicks(&overrun);
  char flags_after[16];
  SettimeFlags(overrun.fd, flags_after, sizeof flags_after);
  WL_CHECK(strcmp(flags_after, flags_before) == 0, "overrun (fd %d): settime flags '%s' became '%s'", overrun.fd,
           flags_before, flags_after);
  after = Check(&off);
  WL_CHECK(Ns(after.it_value) == 0, "off (fd %d) became armed", off.fd);
  ExpectNoTicks(&off);
  // A restored timer still works as a timer: re-arm the disarmed one for 5 ms and wait for it.
  its = (struct itimerspec){{0, 0}, {0, 5000000}};
  WL_SYS(timerfd_settime(off.fd, 0, &its, NULL));
  p = (struct pollfd){off.fd, POLLIN, 0};
  WL_CHECK(poll(&p, 1, 5000) == 1, "off (fd %d): re-armed for 5 ms, did not fire within 5 s", off.fd);
  n = ReadTicks(&off);
  WL_CHECK(n == 1, "off (fd %d): read %llu expirations after re-arming, want 1", off.fd, (unsigned long long)n);
  wl_pass();
}
