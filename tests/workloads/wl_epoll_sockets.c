// An epoll instance watching many sockets, as a server's event loop does: one end of each of
// 1200 unix socket pairs registered, EPOLLIN, data 0x5000 + i; the pairs with i % 3 == 0 have a
// byte waiting (ready). Plus a socket registered under a number the process reused since: `moved`
// was registered at fd `slot`, dup'd to another number, `slot` closed and a new socket opened
// there (so the number now holds another socket than the registered one), data 0x7777, ready.
// The dump matches each registration to its socket by inode (no kcmp per registration) and must
// still see that `slot` is not the registered socket; the restore registers them in batches of
// its stop loop (more than one run of it).
// The pairs' descriptors differ in their flags: non-blocking for even i, close-on-exec when i % 4
// is 0 or 1 (the dump asks a socket's flags inside the process, not from its fdinfo).
// After restore: each socket's flags are its own; epoll_wait reports exactly the ready ones with
// their data; every registration is still there (ADD gives EEXIST); a byte written to a quiet
// pair is reported with that pair's data.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wl_common.h"

#define kPairs 1200
#define kMaxEvents 2048

static int g_a[kPairs], g_b[kPairs];

static void Add(int ep, int fd, uint64_t data) {
  struct epoll_event ev = {.events = EPOLLIN, .data.u64 = data};
  WL_SYS(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev));
}

// Fails unless epoll_wait reports exactly the pairs with i % 3 == 0, `extra` (if not 0) and
// `moved_data` once each.
static void ExpectReady(int ep, const char* when, int extra) {
  static struct epoll_event ev[kMaxEvents];
  static char seen[kPairs];
  for (int i = 0; i < kPairs; i++) seen[i] = 0;
  int n = WL_SYS(epoll_wait(ep, ev, kMaxEvents, 0));
  int moved = 0, want = 1;
  for (int i = 0; i < kPairs; i++) want += i % 3 == 0 || i == extra;
  for (int k = 0; k < n; k++) {
    uint64_t d = ev[k].data.u64;
    if (d == 0x7777) {
      moved++;
      continue;
    }
    WL_CHECK(d >= 0x5000 && d < 0x5000 + kPairs, "%s: an event with data %#llx, which no registration has", when,
             (unsigned long long)d);
    int i = (int)(d - 0x5000);
    WL_CHECK(i % 3 == 0 || i == extra, "%s: pair %d reported ready, which has nothing to read", when, i);
    WL_CHECK(!seen[i], "%s: pair %d reported twice", when, i);
    seen[i] = 1;
  }
  WL_CHECK(moved == 1, "%s: the socket registered under a reused number reported %d times, want once", when, moved);
  WL_CHECK(n == want, "%s: %d events, want %d", when, n, want);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  struct rlimit rl;
  WL_SYS(getrlimit(RLIMIT_NOFILE, &rl));
  WL_CHECK(rl.rlim_max > 2 * kPairs + 64, "hard RLIMIT_NOFILE %lu is too low for this workload",
           (unsigned long)rl.rlim_max);
  rl.rlim_cur = rl.rlim_max;
  WL_SYS(setrlimit(RLIMIT_NOFILE, &rl));
  int ep = WL_SYS(epoll_create1(EPOLL_CLOEXEC));
  for (int i = 0; i < kPairs; i++) {
    int sv[2];
    int type = SOCK_STREAM | (i % 2 == 0 ? SOCK_NONBLOCK : 0) | (i % 4 < 2 ? SOCK_CLOEXEC : 0);
    WL_SYS(socketpair(AF_UNIX, type, 0, sv));
    g_a[i] = sv[0];
    g_b[i] = sv[1];
    Add(ep, g_a[i], 0x5000 + (uint64_t)i);
    if (i % 3 == 0) WL_CHECK(write(g_b[i], "x", 1) == 1, "write to pair %d: %s", i, wl_errstr());
  }
  // The registration keyed by a number the process has since given to another socket.
  int mv[2];
  WL_SYS(socketpair(AF_UNIX, SOCK_STREAM, 0, mv));
  int slot = mv[0];
  Add(ep, slot, 0x7777);
  WL_CHECK(write(mv[1], "y", 1) == 1, "write to the moved socket's peer: %s", wl_errstr());
  int held = WL_SYS(dup(slot));
  WL_SYS(close(slot));
  int other[2];
  WL_SYS(socketpair(AF_UNIX, SOCK_STREAM, 0, other));
  if (other[0] != slot) WL_SYS(dup2(other[0], slot));  // the lowest free number: `slot` itself
  ExpectReady(ep, "before the checkpoint", -1);

  wl_signal_ready();
  wl_wait_go();

  for (int i = 0; i < kPairs; i++) {
    for (int end = 0; end < 2; end++) {
      int fd = end ? g_b[i] : g_a[i];
      int fl = WL_SYS(fcntl(fd, F_GETFL)), fdfl = WL_SYS(fcntl(fd, F_GETFD));
      WL_CHECK(((fl & O_NONBLOCK) != 0) == (i % 2 == 0), "pair %d fd %d: O_NONBLOCK is %s", i, fd,
               fl & O_NONBLOCK ? "set" : "clear");
      WL_CHECK(((fdfl & FD_CLOEXEC) != 0) == (i % 4 < 2), "pair %d fd %d: FD_CLOEXEC is %s", i, fd,
               fdfl & FD_CLOEXEC ? "set" : "clear");
      WL_CHECK((fl & O_ACCMODE) == O_RDWR, "pair %d fd %d: access mode %#o", i, fd, fl & O_ACCMODE);
    }
  }
  ExpectReady(ep, "after restore", -1);
  for (int i = 0; i < kPairs; i++) {
    struct epoll_event ev = {.events = EPOLLIN};
    errno = 0;
    WL_CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, g_a[i], &ev) == -1 && errno == EEXIST,
             "pair %d (fd %d) is no longer registered (ADD gave %s)", i, g_a[i], wl_errstr());
  }
  // The socket now at `slot` was never registered: adding it works.
  struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0x8888};
  WL_CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, slot, &ev) == 0, "fd %d (another socket) was registered: %s", slot,
           wl_errstr());
  WL_SYS(epoll_ctl(ep, EPOLL_CTL_DEL, slot, NULL));
  // A quiet pair becomes ready with its own data.
  WL_CHECK(write(g_b[1000], "z", 1) == 1, "write to pair 1000: %s", wl_errstr());
  ExpectReady(ep, "after a write to pair 1000", 1000);
  (void)held;
  wl_pass();
}
