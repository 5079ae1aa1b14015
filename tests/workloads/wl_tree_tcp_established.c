// Live TCP connections inside a tree, checkpointed with --tcp-established: root listens on
// 127.0.0.1 and on ::1, child C connects to both. Before ready, over the IPv4 connection C
// sends a 64-byte greeting and then 3 MiB of a pattern that root does not read yet (part of
// it waits in root's receive queue, part in C's send queue, not all of it acknowledged), and
// root sends 48 KiB that C does not read; C sets TCP_NODELAY and a 2 s TCP_USER_TIMEOUT.
// Over the IPv6 connection each sends one message the other has not read. After go, both
// read everything that was waiting, byte for byte, exchange more both ways, check their
// names, peers and options are the same, then C closes and root reads end-of-file. A third
// connection is half-closed before ready: C sends "bye" and shuts down its sending side (C's end
// FIN_WAIT2, root's CLOSE_WAIT, "bye" unread); after go root reads "bye" then end-of-file, and
// its reply still reaches C, which then reads end-of-file once root closes.
// Uninterrupted and after the round trip alike it prints "CONNECTIONS kept", then PASS.
#include "wl_tree.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#define BULK (3u << 20)
#define BACK (48u << 10)

static void read_exact(int s, void* buf, size_t len, const char* what) {
  size_t got = 0;
  while (got < len) {
    ssize_t n = read(s, (char*)buf + got, len - got);
    WL_CHECK(n > 0, "%s: read %zd after %zu of %zu bytes (%s)", what, n, got, len, n < 0 ? wl_errstr() : "EOF");
    got += (size_t)n;
  }
}

static void write_all(int s, const void* buf, size_t len, const char* what) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = write(s, (const char*)buf + done, len - done);
    WL_CHECK(n > 0, "%s: write: %s", what, wl_errstr());
    done += (size_t)n;
  }
}

static void expect_msg(int s, const char* want, const char* who) {
  char buf[64] = {0};
  read_exact(s, buf, strlen(want), who);
  WL_CHECK(strcmp(buf, want) == 0, "%s: read '%s', want '%s'", who, buf, want);
}

static int opt(int s, int level, int name) {
  int v = -1;
  socklen_t len = sizeof v;
  WL_SYS(getsockopt(s, level, name, &v, &len));
  return v;
}

static void names(int s, struct sockaddr_storage* local, struct sockaddr_storage* peer) {
  memset(local, 0, sizeof *local);
  memset(peer, 0, sizeof *peer);
  socklen_t len = sizeof *local;
  WL_SYS(getsockname(s, (struct sockaddr*)local, &len));
  len = sizeof *peer;
  WL_SYS(getpeername(s, (struct sockaddr*)peer, &len));
}

static void same_names(int s, const struct sockaddr_storage* local, const struct sockaddr_storage* peer,
                       const char* who) {
  struct sockaddr_storage l2, p2;
  names(s, &l2, &p2);
  WL_CHECK(memcmp(&l2, local, sizeof l2) == 0 && memcmp(&p2, peer, sizeof p2) == 0,
           "%s: the connection's addresses changed", who);
}

static int listen_on(int family, struct sockaddr_storage* addr, socklen_t* len) {
  int l = WL_SYS(socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int one = 1;
  WL_SYS(setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one));
  memset(addr, 0, sizeof *addr);
  if (family == AF_INET) {
    struct sockaddr_in* a = (struct sockaddr_in*)addr;
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    *len = sizeof *a;
  } else {
    struct sockaddr_in6* a = (struct sockaddr_in6*)addr;
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_loopback;
    *len = sizeof *a;
  }
  WL_SYS(bind(l, (struct sockaddr*)addr, *len));
  WL_SYS(listen(l, 4));
  WL_SYS(getsockname(l, (struct sockaddr*)addr, len));
  return l;
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  struct sockaddr_storage a4, a6;
  socklen_t len4, len6;
  int l4 = listen_on(AF_INET, &a4, &len4), l6 = listen_on(AF_INET6, &a6, &len6);
  static unsigned char bulk[BULK], back[BACK], got[BULK];
  wl_fill_pattern(bulk, sizeof bulk, 7);
  wl_fill_pattern(back, sizeof back, 8);
  pid_t c = WL_SYS(fork());
  if (c == 0) {
    wl_tree_set_role("C");
    close(l4);
    close(l6);
    int s4 = WL_SYS(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    int one = 1, timeout_ms = 2000;
    WL_SYS(setsockopt(s4, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one));
    WL_SYS(setsockopt(s4, IPPROTO_TCP, TCP_USER_TIMEOUT, &timeout_ms, sizeof timeout_ms));
    WL_SYS(connect(s4, (struct sockaddr*)&a4, len4));
    int s6 = WL_SYS(socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
    WL_SYS(connect(s6, (struct sockaddr*)&a6, len6));
    char greeting[65];
    snprintf(greeting, sizeof greeting, "%-63s", "greeting from C");
    write_all(s4, greeting, 64, "C greeting");
    // Nonblocking: as much as the queues take; the rest after go.
    int flags = fcntl(s4, F_GETFL);
    WL_SYS(fcntl(s4, F_SETFL, flags | O_NONBLOCK));
    size_t sent = 0;
    while (sent < BULK) {
      ssize_t n = write(s4, bulk + sent, BULK - sent);
      if (n < 0 && errno == EAGAIN) break;
      WL_CHECK(n > 0, "C: bulk write: %s", wl_errstr());
      sent += (size_t)n;
    }
    WL_SYS(fcntl(s4, F_SETFL, flags));
    WL_SYS(write(s6, "six from C", 10));
    int half = WL_SYS(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    WL_SYS(connect(half, (struct sockaddr*)&a4, len4));
    WL_SYS(write(half, "bye", 3));
    WL_SYS(shutdown(half, SHUT_WR));
    // Ready only once root's kernel has acknowledged the FIN (FIN_WAIT2): until then C's end is
    // closing (FIN_WAIT1), which a dump refuses, and the ACK may be delayed.
    for (int waited_ms = 0;; waited_ms++) {
      struct tcp_info ti;
      socklen_t len = sizeof ti;
      WL_SYS(getsockopt(half, IPPROTO_TCP, TCP_INFO, &ti, &len));
      if (ti.tcpi_state == TCP_FIN_WAIT2) break;
      WL_CHECK(waited_ms < 5000, "C: the FIN was not acknowledged in 5 s (state %d)", ti.tcpi_state);
      struct timespec ms = {0, 1000 * 1000};
      nanosleep(&ms, NULL);
    }
    struct sockaddr_storage l4n, p4n, l6n, p6n;
    names(s4, &l4n, &p4n);
    names(s6, &l6n, &p6n);
    wl_tree_announce();
    wl_wait_go();
    wl_tree_watchdog();
    wl_tree_phase("after go");
    same_names(s4, &l4n, &p4n, "C (IPv4)");
    same_names(s6, &l6n, &p6n, "C (IPv6)");
    WL_CHECK(opt(s4, IPPROTO_TCP, TCP_NODELAY) == 1, "C: TCP_NODELAY lost");
    WL_CHECK(opt(s4, IPPROTO_TCP, TCP_USER_TIMEOUT) == 2000, "C: TCP_USER_TIMEOUT %d, want 2000",
             opt(s4, IPPROTO_TCP, TCP_USER_TIMEOUT));
    write_all(s4, bulk + sent, BULK - sent, "C: the rest of the bulk");
    static unsigned char back_got[BACK];
    read_exact(s4, back_got, BACK, "C: root's 48 KiB");
    WL_CHECK(memcmp(back_got, back, BACK) == 0, "C: root's 48 KiB differ at byte %td",
             wl_check_pattern(back_got, BACK, 8));
    expect_msg(s6, "six from root", "C (IPv6)");
    WL_SYS(write(s6, "six again", 9));
    expect_msg(s4, "done", "C");
    expect_msg(half, "late reply", "C (half-closed)");
    char end;
    WL_CHECK(read(half, &end, 1) == 0, "C (half-closed): no end-of-file after root closed");
    close(s4);
    close(s6);
    close(half);
    _exit(0);
  }
  int s4 = WL_SYS(accept4(l4, NULL, NULL, SOCK_CLOEXEC));
  int s6 = WL_SYS(accept4(l6, NULL, NULL, SOCK_CLOEXEC));
  int half = WL_SYS(accept4(l4, NULL, NULL, SOCK_CLOEXEC));
  // Its FIN has arrived (POLLRDHUP) before ready: root's end is in CLOSE_WAIT, "bye" unread.
  struct pollfd hp = {half, POLLRDHUP, 0};
  WL_CHECK(poll(&hp, 1, 5000) == 1, "root: C's shutdown did not arrive");
  char greeting[65] = {0};
  read_exact(s4, greeting, 64, "root: the greeting");
  write_all(s4, back, BACK, "root: 48 KiB");
  WL_SYS(write(s6, "six from root", 13));
  struct sockaddr_storage l4n, p4n, l6n, p6n;
  names(s4, &l4n, &p4n);
  names(s6, &l6n, &p6n);
  wl_tree_root_ready_after("C");
  wl_tree_phase("after go");
  same_names(s4, &l4n, &p4n, "root (IPv4)");
  same_names(s6, &l6n, &p6n, "root (IPv6)");
  read_exact(s4, got, BULK, "root: C's 3 MiB");
  WL_CHECK(memcmp(got, bulk, BULK) == 0, "root: C's 3 MiB differ at byte %td", wl_check_pattern(got, BULK, 7));
  expect_msg(s6, "six from C", "root (IPv6)");
  expect_msg(s6, "six again", "root (IPv6)");
  expect_msg(half, "bye", "root (half-closed)");
  char end;
  WL_CHECK(read(half, &end, 1) == 0, "root (half-closed): no end-of-file after bye");
  WL_SYS(write(half, "late reply", 10));
  close(half);
  WL_SYS(write(s4, "done", 4));
  WL_CHECK(read(s4, &end, 1) == 0, "root: no end-of-file after C closed");
  close(s4);
  close(s6);
  wl_tree_expect_child_ok(c, "C");
  wl_tree_expect_no_children();
  printf("CONNECTIONS kept\n");
  wl_pass();
}
