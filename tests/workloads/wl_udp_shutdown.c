// shutdown() on connected UDP sockets, which leaves no trace in /proc/net/udp. Linux behaviour
// (checked on 6.18): SHUT_WR makes send() fail EPIPE (no SIGPIPE for UDP; MSG_NOSIGNAL used anyway)
// while datagrams still arrive; SHUT_RD makes poll() report POLLIN | POLLRDHUP at once and a blocking
// recv() return 0 at once, while a MSG_DONTWAIT recv() still says EAGAIN. (shutdown of an unconnected
// UDP socket fails ENOTCONN.) A and C are connected to B on 127.0.0.1; A is SHUT_WR, C is SHUT_RD.
// Before the checkpoint and after restore: A's send fails EPIPE, a datagram from B reaches A, and C's
// poll/recv see the read shutdown.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wl_common.h"

static int udp_bound(struct sockaddr_in* addr) {
  int fd = WL_SYS(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  struct sockaddr_in any = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  WL_SYS(bind(fd, (struct sockaddr*)&any, sizeof any));
  socklen_t len = sizeof *addr;
  WL_SYS(getsockname(fd, (struct sockaddr*)addr, &len));
  return fd;
}

static void check(int a, int b, int c, const struct sockaddr_in* aa, const char* when) {
  errno = 0;
  ssize_t n = send(a, "no", 2, MSG_NOSIGNAL);
  WL_CHECK(n == -1 && errno == EPIPE, "%s: send on the SHUT_WR socket: %s, want EPIPE", when,
           n >= 0 ? "succeeded" : wl_errstr());
  WL_CHECK(sendto(b, when, strlen(when), 0, (const struct sockaddr*)aa, sizeof *aa) == (ssize_t)strlen(when),
           "%s: send from B: %s", when, wl_errstr());
  struct pollfd pa = {a, POLLIN, 0};
  WL_CHECK(poll(&pa, 1, 2000) == 1, "%s: B's datagram did not reach the SHUT_WR socket", when);
  char buf[128] = {0};
  n = recv(a, buf, sizeof buf - 1, MSG_DONTWAIT);
  WL_CHECK(n == (ssize_t)strlen(when) && strcmp(buf, when) == 0, "%s: the SHUT_WR socket received %zd bytes '%s'", when,
           n, buf);
  struct pollfd pc = {c, POLLIN | POLLRDHUP, 0};
  int r = poll(&pc, 1, 1000);
  WL_CHECK(r == 1 && (pc.revents & POLLRDHUP), "%s: poll on the SHUT_RD socket: %d, revents %#x, want POLLRDHUP", when,
           r, pc.revents);
  n = recv(c, buf, sizeof buf, 0);  // returns at once only if the read side is shut
  WL_CHECK(n == 0, "%s: recv on the SHUT_RD socket: %zd (%s), want 0", when, n, n < 0 ? wl_errstr() : "data");
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  struct sockaddr_in aa, ba, ca;
  int a = udp_bound(&aa), b = udp_bound(&ba), c = udp_bound(&ca);
  WL_SYS(connect(a, (struct sockaddr*)&ba, sizeof ba));
  WL_SYS(connect(c, (struct sockaddr*)&ba, sizeof ba));
  WL_SYS(shutdown(a, SHUT_WR));
  WL_SYS(shutdown(c, SHUT_RD));
  check(a, b, c, &aa, "before the checkpoint");

  wl_signal_ready();
  wl_wait_go();

  check(a, b, c, &aa, "after restore");
  struct sockaddr_in peer;
  socklen_t len = sizeof peer;
  WL_SYS(getpeername(a, (struct sockaddr*)&peer, &len));
  WL_CHECK(peer.sin_port == ba.sin_port, "after restore: A's peer port %d, want B's %d", ntohs(peer.sin_port),
           ntohs(ba.sin_port));
  wl_pass();
}
