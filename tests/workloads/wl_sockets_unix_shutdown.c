// Unix sockets that were shut down. J: a stream pair whose other end was closed with 5 bytes still
// waiting in J (what the JDK keeps to dup2 over descriptors it closes: the kernel shuts the survivor
// down both ways). Q: the same for a seqpacket pair with two messages waiting. S: a stream pair whose
// end S[0] called shutdown(SHUT_WR) after writing "bye". After restore: J reads its 5 bytes then EOF
// and a send fails EPIPE; Q reads its two messages, boundaries kept, then EOF; S[1] reads "bye" then
// EOF, S[0] cannot send (EPIPE) but still receives what S[1] sends.
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wl_common.h"

static void expect_eof_after(int fd, const char* const* msgs, int n, const char* what, const char* when) {
  for (int i = 0; i < n; i++) {
    char buf[64] = {0};
    ssize_t got = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    WL_CHECK(got == (ssize_t)strlen(msgs[i]) && memcmp(buf, msgs[i], (size_t)got) == 0,
             "%s: %s read %zd bytes '%s' (%s), want '%s'", when, what, got, got > 0 ? buf : "",
             got < 0 ? wl_errstr() : "-", msgs[i]);
  }
  char c;
  ssize_t got = recv(fd, &c, 1, MSG_DONTWAIT);
  WL_CHECK(got == 0, "%s: %s read %zd (%s) after its data, want 0 (EOF)", when, what, got, got < 0 ? wl_errstr() : "data");
}

static void expect_send_epipe(int fd, const char* what, const char* when) {
  errno = 0;
  ssize_t r = send(fd, "x", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  WL_CHECK(r == -1 && errno == EPIPE, "%s: send on %s returned %zd (%s), want EPIPE", when, what, r,
           r < 0 ? wl_errstr() : "sent");
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  int j[2], q[2], s[2];
  WL_SYS(socketpair(AF_UNIX, SOCK_STREAM, 0, j));
  WL_CHECK(write(j[1], "hello", 5) == 5, "write J: %s", wl_errstr());
  close(j[1]);
  WL_SYS(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, q));
  WL_CHECK(write(q[1], "one", 3) == 3 && write(q[1], "second", 6) == 6, "write Q: %s", wl_errstr());
  close(q[1]);
  WL_SYS(socketpair(AF_UNIX, SOCK_STREAM, 0, s));
  WL_CHECK(write(s[0], "bye", 3) == 3, "write S: %s", wl_errstr());
  WL_SYS(shutdown(s[0], SHUT_WR));
  struct pollfd p = {.fd = j[0], .events = POLLRDHUP};
  WL_CHECK(poll(&p, 1, 0) == 1 && (p.revents & POLLRDHUP), "before the checkpoint: J is not shut down");

  wl_signal_ready();
  wl_wait_go();

  const char* when = "after restore";
  const char* jm[] = {"hello"};
  expect_eof_after(j[0], jm, 1, "J", when);
  expect_send_epipe(j[0], "J", when);
  const char* qm[] = {"one", "second"};
  expect_eof_after(q[0], qm, 2, "Q", when);
  const char* sm[] = {"bye"};
  expect_eof_after(s[1], sm, 1, "S[1]", when);
  expect_send_epipe(s[0], "S[0] (shut down for sending)", when);
  WL_CHECK(write(s[1], "back", 4) == 4, "%s: S[1] cannot send to S[0]: %s", when, wl_errstr());
  char buf[8] = {0};
  WL_CHECK(recv(s[0], buf, sizeof buf, MSG_DONTWAIT) == 4 && memcmp(buf, "back", 4) == 0,
           "%s: S[0] did not receive what S[1] sent ('%s')", when, buf);
  wl_pass();
}
