// Listening unix sockets with connections not accepted yet, their clients in the same process:
// a stream listener bound to WORKDIR/listen with three clients — the first plain, the second shut
// down for writing, the third non-blocking — and a seqpacket listener on an abstract name with
// one client. After restore each listener accepts its connections in the order the clients made
// them (each accepted end reaches the client it was made for, both ways), the shut-down client
// reads as end-of-file on the server's side, the third client is still non-blocking, every client
// still names its listener as its peer, and no other connection waits.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "wl_common.h"

static int client_of(const struct sockaddr_un* a, socklen_t len, int type, int flags) {
  int c = WL_SYS(socket(AF_UNIX, type | SOCK_CLOEXEC | flags, 0));
  WL_SYS(connect(c, (const struct sockaddr*)a, len));
  return c;
}

// The accepted end `s` and client `c` carry a message each way.
static void talk(int s, int c, const char* who) {
  char buf[64];
  char msg[64];
  snprintf(msg, sizeof msg, "to %s", who);
  WL_CHECK(send(s, msg, strlen(msg), 0) == (ssize_t)strlen(msg), "send to %s: %s", who, wl_errstr());
  memset(buf, 0, sizeof buf);
  ssize_t n = recv(c, buf, sizeof buf, MSG_DONTWAIT);
  WL_CHECK(n == (ssize_t)strlen(msg) && memcmp(buf, msg, (size_t)n) == 0,
           "%s read '%s' (%zd bytes, %s) from the connection accepted for it", who, buf, n, n < 0 ? wl_errstr() : "ok");
}

static void peer_is(int c, const struct sockaddr_un* want, socklen_t want_len, const char* who) {
  struct sockaddr_un got;
  socklen_t len = sizeof got;
  WL_SYS(getpeername(c, (struct sockaddr*)&got, &len));
  WL_CHECK(len == want_len && memcmp(&got, want, len) == 0, "%s: its peer's name changed (length %u, want %u)", who,
           (unsigned)len, (unsigned)want_len);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  struct sockaddr_un path = {.sun_family = AF_UNIX};
  char p[600];
  wl_path(p, sizeof p, "listen");
  WL_CHECK(strlen(p) < sizeof path.sun_path, "WORKDIR too long for a socket name");
  strcpy(path.sun_path, p);
  socklen_t path_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(p) + 1);
  int l = WL_SYS(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  WL_SYS(bind(l, (struct sockaddr*)&path, path_len));
  WL_SYS(listen(l, 8));
  int a = client_of(&path, path_len, SOCK_STREAM, 0);
  int b = client_of(&path, path_len, SOCK_STREAM, 0);
  WL_SYS(shutdown(b, SHUT_WR));
  int c = client_of(&path, path_len, SOCK_STREAM, SOCK_NONBLOCK);

  struct sockaddr_un abstract = {.sun_family = AF_UNIX};
  int an = snprintf(abstract.sun_path + 1, sizeof abstract.sun_path - 1, "cairn-wl-pending-%d", (int)getpid());
  socklen_t abstract_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)an);
  int q = WL_SYS(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  WL_SYS(bind(q, (struct sockaddr*)&abstract, abstract_len));
  WL_SYS(listen(q, 4));
  int d = client_of(&abstract, abstract_len, SOCK_SEQPACKET, 0);

  wl_signal_ready();
  wl_wait_go();

  peer_is(a, &path, path_len, "client 1");
  peer_is(b, &path, path_len, "client 2");
  peer_is(c, &path, path_len, "client 3");
  peer_is(d, &abstract, abstract_len, "the seqpacket client");
  int sa = WL_SYS(accept4(l, NULL, NULL, SOCK_CLOEXEC));
  int sb = WL_SYS(accept4(l, NULL, NULL, SOCK_CLOEXEC));
  int sc = WL_SYS(accept4(l, NULL, NULL, SOCK_CLOEXEC));
  errno = 0;
  WL_CHECK(accept4(l, NULL, NULL, SOCK_CLOEXEC) == -1 && errno == EAGAIN, "a fourth connection waited (%s)",
           errno ? wl_errstr() : "accepted one");
  talk(sa, a, "client 1");
  talk(sb, b, "client 2");
  talk(sc, c, "client 3");
  char buf[16];
  WL_CHECK(recv(sb, buf, sizeof buf, MSG_DONTWAIT) == 0, "the server's end of client 2 (shut down for writing) "
           "did not read end-of-file: %s", wl_errstr());
  WL_CHECK(send(sa, "x", 1, MSG_NOSIGNAL) == 1 && recv(a, buf, 1, 0) == 1 && send(a, "back", 4, 0) == 4 &&
               recv(sa, buf, sizeof buf, MSG_DONTWAIT) == 4 && memcmp(buf, "back", 4) == 0,
           "client 1 and its accepted end: %s", wl_errstr());
  WL_CHECK((fcntl(c, F_GETFL) & O_NONBLOCK) != 0, "client 3 lost O_NONBLOCK");
  WL_CHECK((fcntl(a, F_GETFL) & O_NONBLOCK) == 0, "client 1 became non-blocking");
  int sd = WL_SYS(accept4(q, NULL, NULL, SOCK_CLOEXEC));
  WL_SYS(send(d, "one message", 11, 0));
  WL_CHECK(recv(sd, buf, sizeof buf, MSG_DONTWAIT) == 11 && memcmp(buf, "one message", 11) == 0,
           "the seqpacket connection did not carry its message: %s", wl_errstr());
  wl_pass();
}
