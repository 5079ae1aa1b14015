// epoll: an instance (close-on-exec) watching
//   pipe read end      EPOLLIN               data 0x1111  (empty: not ready)
//   pipe write end     EPOLLOUT              data 0x3333  (ready)
//   eventfd `quiet`    EPOLLIN|EPOLLET       data 0xdeadbeefcafef00d (counter 0: not ready)
//   eventfd `busy`     EPOLLIN               data 0x2222  (counter 1: ready)
//   a dup of `busy`    EPOLLIN|EPOLLONESHOT  data 0x4444  (fired before the checkpoint: disarmed)
// and a second instance (non-blocking) watching the first, EPOLLIN, data 0x5555.
// After restore: epoll_wait reports exactly 0x2222 and 0x3333 (and the outer one 0x5555);
// registrations are still there (ADD gives EEXIST); MOD re-arms the one-shot one; DEL removes the
// write end; a write to the pipe and to `quiet` (once, edge-triggered) are reported with their data.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "wl_common.h"

#define kMaxEvents 16

static const uint64_t kQuietData = 0xdeadbeefcafef00dull;

// Fills `got` with the data of the events epoll_wait reports at once; returns their count.
static int Wait(int ep, uint64_t* got) {
  struct epoll_event ev[kMaxEvents];
  int n = WL_SYS(epoll_wait(ep, ev, kMaxEvents, 0));
  for (int i = 0; i < n; i++) got[i] = ev[i].data.u64;
  return n;
}

// Fails unless epoll_wait on `ep` reports exactly the `want_n` data values in `want` (any order).
static void ExpectReady(int ep, const char* when, const uint64_t* want, int want_n) {
  uint64_t got[kMaxEvents];
  int n = Wait(ep, got);
  int ok = n == want_n;
  for (int i = 0; ok && i < want_n; i++) {
    int found = 0;
    for (int j = 0; j < n; j++) found |= got[j] == want[i];
    ok = found;
  }
  if (!ok) {
    wl_fail("%s: epoll fd %d reported %d events (%#llx %#llx %#llx %#llx ...), want %d (%#llx %#llx %#llx)", when, ep,
            n, n > 0 ? (unsigned long long)got[0] : 0ull, n > 1 ? (unsigned long long)got[1] : 0ull,
            n > 2 ? (unsigned long long)got[2] : 0ull, n > 3 ? (unsigned long long)got[3] : 0ull, want_n,
            want_n > 0 ? (unsigned long long)want[0] : 0ull, want_n > 1 ? (unsigned long long)want[1] : 0ull,
            want_n > 2 ? (unsigned long long)want[2] : 0ull);
  }
}

static void Add(int ep, int fd, uint32_t events, uint64_t data) {
  struct epoll_event ev = {.events = events, .data.u64 = data};
  WL_SYS(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev));
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  int p[2];
  WL_SYS(pipe(p));
  int quiet = WL_SYS(eventfd(0, EFD_NONBLOCK));
  int busy = WL_SYS(eventfd(1, EFD_NONBLOCK));
  int busy_dup = WL_SYS(dup(busy));
  int ep = WL_SYS(epoll_create1(EPOLL_CLOEXEC));
  int outer = WL_SYS(epoll_create1(0));
  WL_SYS(fcntl(outer, F_SETFL, O_NONBLOCK));
  Add(ep, p[0], EPOLLIN, 0x1111);
  Add(ep, p[1], EPOLLOUT, 0x3333);
  Add(ep, quiet, EPOLLIN | EPOLLET, kQuietData);
  Add(ep, busy, EPOLLIN, 0x2222);
  Add(ep, busy_dup, EPOLLIN | EPOLLONESHOT, 0x4444);
  Add(outer, ep, EPOLLIN, 0x5555);
  const uint64_t before[] = {0x2222, 0x3333, 0x4444};
  ExpectReady(ep, "before the checkpoint", before, 3);  // the one-shot entry fires and is disarmed
  const uint64_t steady[] = {0x2222, 0x3333};
  ExpectReady(ep, "before the checkpoint, second wait", steady, 2);
  int ep_fd_flags = WL_SYS(fcntl(ep, F_GETFD)), outer_fl_flags = WL_SYS(fcntl(outer, F_GETFL));

  wl_signal_ready();
  wl_wait_go();

  WL_CHECK(fcntl(ep, F_GETFD) == ep_fd_flags, "epoll fd %d: F_GETFD changed", ep);
  WL_CHECK(fcntl(outer, F_GETFL) == outer_fl_flags, "epoll fd %d: F_GETFL %#o became %#o", outer, outer_fl_flags,
           fcntl(outer, F_GETFL));
  const uint64_t outer_want[] = {0x5555};
  ExpectReady(outer, "after restore (outer epoll)", outer_want, 1);
  ExpectReady(ep, "after restore", steady, 2);
  // Every registration survived: adding any again is refused.
  const int registered[] = {p[0], p[1], quiet, busy, busy_dup};
  for (unsigned i = 0; i < sizeof registered / sizeof registered[0]; i++) {
    struct epoll_event ev = {.events = EPOLLIN};
    errno = 0;
    WL_CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, registered[i], &ev) == -1 && errno == EEXIST,
             "fd %d is no longer registered in epoll fd %d (ADD gave %s)", registered[i], ep, wl_errstr());
  }
  errno = 0;
  struct epoll_event ev = {.events = EPOLLIN};
  WL_CHECK(epoll_ctl(outer, EPOLL_CTL_ADD, ep, &ev) == -1 && errno == EEXIST, "epoll fd %d left the outer epoll", ep);
  // MOD re-arms the one-shot registration.
  ev = (struct epoll_event){.events = EPOLLIN | EPOLLONESHOT, .data.u64 = 0x4444};
  WL_SYS(epoll_ctl(ep, EPOLL_CTL_MOD, busy_dup, &ev));
  const uint64_t rearmed[] = {0x2222, 0x3333, 0x4444};
  ExpectReady(ep, "after EPOLL_CTL_MOD of the one-shot entry", rearmed, 3);
  // DEL removes the write end.
  WL_SYS(epoll_ctl(ep, EPOLL_CTL_DEL, p[1], NULL));
  const uint64_t busy_only[] = {0x2222};
  ExpectReady(ep, "after EPOLL_CTL_DEL of the pipe's write end", busy_only, 1);
  // Draining `busy` leaves nothing ready.
  uint64_t v;
  WL_CHECK(read(busy, &v, sizeof v) == sizeof v && v == 1, "busy eventfd lost its count");
  ExpectReady(ep, "after draining busy", NULL, 0);
  // New readiness is reported with the saved data: the pipe (level), `quiet` (one edge).
  WL_CHECK(write(p[1], "x", 1) == 1, "write to the pipe: %s", wl_errstr());
  const uint64_t pipe_ready[] = {0x1111};
  ExpectReady(ep, "after writing to the pipe", pipe_ready, 1);
  WL_CHECK(read(p[0], &v, 1) == 1, "read from the pipe: %s", wl_errstr());
  v = 1;
  WL_CHECK(write(quiet, &v, sizeof v) == sizeof v, "write to quiet: %s", wl_errstr());
  const uint64_t quiet_ready[] = {kQuietData};
  ExpectReady(ep, "after writing to the edge-triggered eventfd", quiet_ready, 1);
  ExpectReady(ep, "edge-triggered entry, second wait", NULL, 0);
  wl_pass();
}
