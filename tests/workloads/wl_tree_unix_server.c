// A unix-socket server and its client inside one tree: root listens on a path in the work
// directory, child C connects and they exchange a message before ready, leaving one more
// message unread on each side; C also makes a second connection, which root has not accepted
// when the tree is checkpointed. After go both read what was waiting, talk over the same
// connection, root accepts the second one (C's, both ways), and C opens a third by the socket's
// name, which root accepts.
#include "wl_tree.h"

#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>

static void expect(int s, const char* want, const char* who) {
  char buf[32] = {0};
  size_t len = strlen(want);
  ssize_t n = recv(s, buf, len, MSG_WAITALL);
  WL_CHECK(n == (ssize_t)len && memcmp(buf, want, len) == 0, "%s: read '%s', want '%s'", who, buf, want);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  wl_path(a.sun_path, sizeof a.sun_path, "server.sock");
  int l = WL_SYS(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  WL_SYS(bind(l, (struct sockaddr*)&a, sizeof a));
  WL_SYS(listen(l, 8));
  pid_t c = WL_SYS(fork());
  if (c == 0) {
    wl_tree_set_role("C");
    close(l);
    int s = WL_SYS(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    WL_SYS(connect(s, (struct sockaddr*)&a, sizeof a));
    WL_SYS(write(s, "hello", 5));
    expect(s, "welcome", "C");
    WL_SYS(write(s, "pending-to-root", 15));
    int s2 = WL_SYS(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    WL_SYS(connect(s2, (struct sockaddr*)&a, sizeof a));
    wl_tree_announce();
    wl_wait_go();
    wl_tree_watchdog();
    expect(s, "pending-to-child", "C");
    WL_SYS(write(s, "after", 5));
    expect(s, "ack", "C");
    WL_SYS(write(s2, "second", 6));
    expect(s2, "ok", "C (second connection)");
    int s3 = WL_SYS(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    WL_SYS(connect(s3, (struct sockaddr*)&a, sizeof a));
    WL_SYS(write(s3, "third", 5));
    expect(s3, "ok3", "C (third connection)");
    _exit(0);
  }
  int s = WL_SYS(accept4(l, NULL, NULL, SOCK_CLOEXEC));
  expect(s, "hello", "root");
  WL_SYS(write(s, "welcome", 7));
  WL_SYS(write(s, "pending-to-child", 16));
  wl_tree_root_ready_after("C");
  expect(s, "pending-to-root", "root");
  expect(s, "after", "root");
  WL_SYS(write(s, "ack", 3));
  int s2 = WL_SYS(accept4(l, NULL, NULL, SOCK_CLOEXEC));
  expect(s2, "second", "root (second connection)");
  WL_SYS(write(s2, "ok", 2));
  int s3 = WL_SYS(accept4(l, NULL, NULL, SOCK_CLOEXEC));
  expect(s3, "third", "root (third connection)");
  WL_SYS(write(s3, "ok3", 3));
  wl_tree_expect_child_ok(c, "C");
  wl_tree_expect_no_children();
  unlink(a.sun_path);
  wl_pass();
}
