// Messages waiting in datagram and seqpacket socket pairs between root and its child keep
// their boundaries and order across a round trip: root sends three messages of 1, 100 and
// 5000 bytes on each pair before ready; after go the child reads each as one message of
// the right size and content, in order, and its sockets' peek offsets are unset.
#include "wl_tree.h"

#include <sys/socket.h>

static const size_t kSizes[] = {1, 100, 5000};

static void send_all(int s, char tag) {
  char buf[5000];
  for (size_t i = 0; i < 3; ++i) {
    memset(buf, tag + (int)i, kSizes[i]);
    WL_CHECK(send(s, buf, kSizes[i], 0) == (ssize_t)kSizes[i], "send message %zu: %s", i, wl_errstr());
  }
}

static void expect_all(int s, char tag, const char* what) {
  char buf[8192];
  for (size_t i = 0; i < 3; ++i) {
    ssize_t n = recv(s, buf, sizeof buf, MSG_DONTWAIT);
    WL_CHECK(n == (ssize_t)kSizes[i], "C: %s message %zu is %zd bytes, want %zu (%s)", what, i, n, kSizes[i],
             n < 0 ? wl_errstr() : "");
    for (size_t k = 0; k < kSizes[i]; ++k) {
      WL_CHECK(buf[k] == tag + (char)i, "C: %s message %zu byte %zu differs", what, i, k);
    }
  }
  WL_CHECK(recv(s, buf, sizeof buf, MSG_DONTWAIT) < 0 && errno == EAGAIN, "C: more %s messages than sent", what);
  int off = 0;
  socklen_t len = sizeof off;
  WL_SYS(getsockopt(s, SOL_SOCKET, SO_PEEK_OFF, &off, &len));
  WL_CHECK(off == -1, "C: %s socket's peek offset is %d, want unset (-1)", what, off);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  int d[2], q[2];
  WL_SYS(socketpair(AF_UNIX, SOCK_DGRAM, 0, d));
  WL_SYS(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, q));
  pid_t c = WL_SYS(fork());
  if (c == 0) {
    wl_tree_set_role("C");
    close(d[0]);
    close(q[0]);
    wl_tree_announce();
    wl_wait_go();
    wl_tree_watchdog();
    expect_all(d[1], 'a', "datagram");
    expect_all(q[1], 'k', "seqpacket");
    _exit(0);
  }
  close(d[1]);
  close(q[1]);
  send_all(d[0], 'a');
  send_all(q[0], 'k');
  wl_tree_root_ready_after("C");
  wl_tree_expect_child_ok(c, "C");
  wl_tree_expect_no_children();
  wl_pass();
}
