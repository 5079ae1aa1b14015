// An epoll registration keyed by a closed descriptor number: an eventfd is added to an epoll set as
// fd N (data.u64 = a marker), then dup()ed to another number M and N closed. The registration
// stays in the set (it belongs to the open file, which is still alive through M), while the
// epoll's fdinfo still names the closed number N. After restore: writing to the eventfd through M
// makes epoll_wait report EPOLLIN with the registered marker, and reading M drains it. A second
// registration (set EP2) is of an eventfd whose number was dup2'd over by a pipe's read end: after
// restore that number is still the pipe, and the eventfd still reports under its old registration.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "wl_common.h"

#define MARK 0x5eed0fca11ab1eull

static void check(int ep, int efd, const char* when) {
  struct epoll_event ev[4];
  int n = epoll_wait(ep, ev, 4, 0);
  WL_CHECK(n == 0, "%s: epoll_wait reported %d events with the eventfd empty", when, n);
  uint64_t one = 1;
  WL_CHECK(write(efd, &one, sizeof one) == (ssize_t)sizeof one, "%s: write eventfd: %s", when, wl_errstr());
  n = epoll_wait(ep, ev, 4, 1000);
  WL_CHECK(n == 1, "%s: epoll_wait returned %d after the eventfd write (%s), want 1 event", when, n,
           n < 0 ? wl_errstr() : "");
  WL_CHECK(ev[0].data.u64 == MARK, "%s: event data %#llx, want %#llx", when, (unsigned long long)ev[0].data.u64,
           (unsigned long long)MARK);
  WL_CHECK(ev[0].events & EPOLLIN, "%s: events %#x lack EPOLLIN", when, ev[0].events);
  uint64_t v = 0;
  WL_CHECK(read(efd, &v, sizeof v) == (ssize_t)sizeof v && v == 1, "%s: read eventfd gave %llu", when,
           (unsigned long long)v);
  n = epoll_wait(ep, ev, 4, 0);
  WL_CHECK(n == 0, "%s: epoll_wait reported %d events after draining", when, n);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  struct epoll_event ev = {.events = EPOLLIN, .data.u64 = MARK};
  int ep2 = WL_SYS(epoll_create1(EPOLL_CLOEXEC));
  int over = WL_SYS(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  WL_SYS(epoll_ctl(ep2, EPOLL_CTL_ADD, over, &ev));
  int efd2 = WL_SYS(fcntl(over, F_DUPFD_CLOEXEC, 200));
  int p[2];
  WL_SYS(pipe2(p, O_CLOEXEC));
  WL_SYS(dup2(p[0], over));  // `over` is the pipe's read end now
  check(ep2, efd2, "before the checkpoint (dup2'd over)");
  int ep = WL_SYS(epoll_create1(EPOLL_CLOEXEC));
  int orig = WL_SYS(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  WL_SYS(epoll_ctl(ep, EPOLL_CTL_ADD, orig, &ev));
  int efd = WL_SYS(fcntl(orig, F_DUPFD_CLOEXEC, 100));
  WL_SYS(close(orig));
  WL_CHECK(fcntl(orig, F_GETFD) == -1 && errno == EBADF, "fd %d still open after close", orig);
  check(ep, efd, "before the checkpoint");

  wl_signal_ready();
  wl_wait_go();

  WL_CHECK(fcntl(orig, F_GETFD) == -1 && errno == EBADF, "after restore: the closed fd %d is open again", orig);
  check(ep, efd, "after restore");
  WL_CHECK(write(p[1], "z", 1) == 1, "write pipe: %s", wl_errstr());
  char c = 0;
  WL_CHECK(read(over, &c, 1) == 1 && c == 'z', "after restore: fd %d is no longer the pipe's read end", over);
  check(ep2, efd2, "after restore (dup2'd over)");
  wl_pass();
}
