// AF_UNIX datagram sockets connected to themselves (bind, then connect to the own address): peer and
// socket are the same object, which a restore must not turn into two. P is bound to WORKDIR/self.sock,
// Q to an abstract name ("\0wl-dgram-self-PID"). Each has one datagram queued to itself across the
// checkpoint. Before and after: getpeername equals getsockname, a datagram sent with send() comes back
// through recv() (poll with a timeout, so a lost connection is a FAIL, not a hang); after restore the
// queued datagram comes first.
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "wl_common.h"

static int self_connected(struct sockaddr_un* addr, socklen_t len) {
  int fd = WL_SYS(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  WL_SYS(bind(fd, (struct sockaddr*)addr, len));
  WL_SYS(connect(fd, (struct sockaddr*)addr, len));
  return fd;
}

static void expect_datagram(int fd, const char* want, const char* name, const char* when) {
  struct pollfd p = {fd, POLLIN, 0};
  WL_CHECK(poll(&p, 1, 2000) == 1, "%s: %s: no datagram to receive within 2 s (want '%s')", when, name, want);
  char buf[64] = {0};
  ssize_t n = recv(fd, buf, sizeof buf - 1, MSG_DONTWAIT);
  WL_CHECK(n == (ssize_t)strlen(want) && strcmp(buf, want) == 0, "%s: %s received %zd bytes '%s' (%s), want '%s'", when,
           name, n, n > 0 ? buf : "", n < 0 ? wl_errstr() : "", want);
}

static void check(int fd, const char* name, const char* when) {
  struct sockaddr_un self, peer;
  socklen_t slen = sizeof self, plen = sizeof peer;
  memset(&self, 0, sizeof self);
  memset(&peer, 0, sizeof peer);
  WL_SYS(getsockname(fd, (struct sockaddr*)&self, &slen));
  int r = getpeername(fd, (struct sockaddr*)&peer, &plen);
  WL_CHECK(r == 0, "%s: %s getpeername: %s", when, name, wl_errstr());
  WL_CHECK(slen == plen && memcmp(&self, &peer, slen) == 0, "%s: %s is no longer connected to itself", when, name);
  ssize_t n = send(fd, when, strlen(when), MSG_DONTWAIT);
  WL_CHECK(n == (ssize_t)strlen(when), "%s: %s send: %s", when, name, n < 0 ? wl_errstr() : "short");
  expect_datagram(fd, when, name, when);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  struct sockaddr_un a = {.sun_family = AF_UNIX}, b = {.sun_family = AF_UNIX};
  wl_path(a.sun_path, sizeof a.sun_path, "self.sock");
  int p = self_connected(&a, sizeof a);
  int n = snprintf(b.sun_path + 1, sizeof b.sun_path - 1, "wl-dgram-self-%d", (int)getpid());
  int q = self_connected(&b, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n));
  check(p, "P (path)", "before the checkpoint");
  check(q, "Q (abstract)", "before the checkpoint");
  WL_SYS(send(p, "queued P", 8, 0));
  WL_SYS(send(q, "queued Q", 8, 0));

  wl_signal_ready();
  wl_wait_go();

  expect_datagram(p, "queued P", "P (path)", "after restore");
  expect_datagram(q, "queued Q", "Q (abstract)", "after restore");
  check(p, "P (path)", "after restore");
  check(q, "Q (abstract)", "after restore");
  wl_pass();
}
