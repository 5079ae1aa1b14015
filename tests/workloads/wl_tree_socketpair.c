// Root and its child talk over a socketpair(AF_UNIX, SOCK_STREAM), and a message sits queued in it
// at checkpoint time: after go, the child reads the queued "ping 1", answers "pong 1", and root
// checks the answer and the child's exit status.
#include "wl_tree.h"

#include <sys/socket.h>

static void expect_message(int fd, const char* want) {
  char buf[16];
  size_t len = strlen(want);
  size_t got = wl_tree_read_full(fd, buf, len, "socket");
  if (got != len || memcmp(buf, want, len) != 0) {
    wl_fail("%s: read '%.*s' from the socket, want '%s'", wl_tree_role_, (int)got, buf, want);
  }
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  int sv[2];
  WL_SYS(socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
  pid_t c = WL_SYS(fork());
  if (c == 0) {
    wl_tree_set_role("C");
    close(sv[0]);
    expect_message(sv[1], "ping 0");
    wl_tree_write_all(sv[1], "pong 0", 6, "socket");
    wl_tree_announce();
    wl_wait_go();
    wl_tree_watchdog();
    expect_message(sv[1], "ping 1");
    wl_tree_write_all(sv[1], "pong 1", 6, "socket");
    _exit(0);
  }
  close(sv[1]);
  wl_tree_write_all(sv[0], "ping 0", 6, "socket");
  expect_message(sv[0], "pong 0");
  wl_tree_write_all(sv[0], "ping 1", 6, "socket");  // stays queued until go
  wl_tree_root_ready_after("C");
  expect_message(sv[0], "pong 1");
  wl_tree_expect_child_ok(c, "C");
  wl_tree_expect_no_children();
  wl_pass();
}
