// TCP and UDP sockets over IPv4 and IPv6 survive a round trip with their addresses and
// options: a TCP listener on 127.0.0.1 (SO_REUSEADDR, TCP_NODELAY, SO_KEEPALIVE, backlog
// 5), a TCP listener on [::1] with IPV6_V6ONLY, a bound UDP socket and a UDP socket
// connected to it. After go: each listener still has its port and options and accepts a
// new connection that carries data both ways; the connected UDP socket still has its
// peer and its datagram reaches the bound one.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wl_common.h"

static int opt(int s, int level, int name) {
  int v = -1;
  socklen_t len = sizeof v;
  WL_SYS(getsockopt(s, level, name, &v, &len));
  return v;
}

static void set_opt(int s, int level, int name) {
  int one = 1;
  WL_SYS(setsockopt(s, level, name, &one, sizeof one));
}

static int port_of(int s) {
  struct sockaddr_storage a;
  socklen_t len = sizeof a;
  WL_SYS(getsockname(s, (struct sockaddr*)&a, &len));
  return a.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6*)&a)->sin6_port) : ntohs(((struct sockaddr_in*)&a)->sin_port);
}

// Connects to listener `l` (at `a`), accepts, and sends a message each way.
static void exchange(int l, struct sockaddr* a, socklen_t alen, const char* what) {
  int c = WL_SYS(socket(a->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  WL_SYS(connect(c, a, alen));
  int s = WL_SYS(accept4(l, NULL, NULL, SOCK_CLOEXEC));
  WL_SYS(write(c, "ping", 4));
  char buf[8] = {0};
  WL_CHECK(read(s, buf, sizeof buf) == 4 && memcmp(buf, "ping", 4) == 0, "%s: accepted side read '%s'", what, buf);
  WL_SYS(write(s, "pong", 4));
  memset(buf, 0, sizeof buf);
  WL_CHECK(read(c, buf, sizeof buf) == 4 && memcmp(buf, "pong", 4) == 0, "%s: client read '%s'", what, buf);
  WL_CHECK(opt(s, IPPROTO_TCP, TCP_NODELAY) == opt(l, IPPROTO_TCP, TCP_NODELAY),
           "%s: the accepted socket did not inherit the listener's TCP_NODELAY", what);
  close(c);
  close(s);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  int l4 = WL_SYS(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  set_opt(l4, SOL_SOCKET, SO_REUSEADDR);
  set_opt(l4, IPPROTO_TCP, TCP_NODELAY);
  set_opt(l4, SOL_SOCKET, SO_KEEPALIVE);
  struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  WL_SYS(bind(l4, (struct sockaddr*)&a4, sizeof a4));
  WL_SYS(listen(l4, 5));
  socklen_t len = sizeof a4;
  WL_SYS(getsockname(l4, (struct sockaddr*)&a4, &len));

  int l6 = WL_SYS(socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  set_opt(l6, IPPROTO_IPV6, IPV6_V6ONLY);
  set_opt(l6, SOL_SOCKET, SO_REUSEADDR);
  struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
  WL_SYS(bind(l6, (struct sockaddr*)&a6, sizeof a6));
  WL_SYS(listen(l6, 16));
  len = sizeof a6;
  WL_SYS(getsockname(l6, (struct sockaddr*)&a6, &len));

  int ub = WL_SYS(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  struct sockaddr_in ua = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  WL_SYS(bind(ub, (struct sockaddr*)&ua, sizeof ua));
  len = sizeof ua;
  WL_SYS(getsockname(ub, (struct sockaddr*)&ua, &len));
  int uc = WL_SYS(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  WL_SYS(connect(uc, (struct sockaddr*)&ua, sizeof ua));
  int uc_port = port_of(uc);
  int p4 = port_of(l4), p6 = port_of(l6);

  wl_signal_ready();
  wl_wait_go();

  WL_CHECK(port_of(l4) == p4, "IPv4 listener port %d, want %d", port_of(l4), p4);
  WL_CHECK(port_of(l6) == p6, "IPv6 listener port %d, want %d", port_of(l6), p6);
  WL_CHECK(opt(l4, SOL_SOCKET, SO_ACCEPTCONN) == 1, "IPv4 socket is not listening");
  WL_CHECK(opt(l6, SOL_SOCKET, SO_ACCEPTCONN) == 1, "IPv6 socket is not listening");
  WL_CHECK(opt(l4, SOL_SOCKET, SO_REUSEADDR) == 1, "SO_REUSEADDR lost");
  WL_CHECK(opt(l4, SOL_SOCKET, SO_KEEPALIVE) == 1, "SO_KEEPALIVE lost");
  WL_CHECK(opt(l4, IPPROTO_TCP, TCP_NODELAY) == 1, "TCP_NODELAY lost");
  WL_CHECK(opt(l6, IPPROTO_IPV6, IPV6_V6ONLY) == 1, "IPV6_V6ONLY lost");
  WL_CHECK(opt(l6, IPPROTO_TCP, TCP_NODELAY) == 0, "TCP_NODELAY appeared on the IPv6 listener");
  exchange(l4, (struct sockaddr*)&a4, sizeof a4, "IPv4");
  exchange(l6, (struct sockaddr*)&a6, sizeof a6, "IPv6");

  WL_CHECK(port_of(uc) == uc_port, "connected UDP socket port %d, want %d", port_of(uc), uc_port);
  struct sockaddr_in peer;
  len = sizeof peer;
  WL_SYS(getpeername(uc, (struct sockaddr*)&peer, &len));
  WL_CHECK(peer.sin_port == ua.sin_port, "connected UDP socket's peer port %d, want %d", ntohs(peer.sin_port),
           ntohs(ua.sin_port));
  WL_SYS(send(uc, "dgram", 5, 0));
  char buf[16];
  struct sockaddr_in from;
  len = sizeof from;
  ssize_t n = WL_SYS(recvfrom(ub, buf, sizeof buf, 0, (struct sockaddr*)&from, &len));
  WL_CHECK(n == 5 && memcmp(buf, "dgram", 5) == 0, "bound UDP socket read %zd bytes", n);
  WL_CHECK(ntohs(from.sin_port) == uc_port, "datagram came from port %d, want %d", ntohs(from.sin_port), uc_port);
  wl_pass();
}
