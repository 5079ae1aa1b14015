// A TCP connection inside a tree, checkpointed with --tcp-close: root listens on loopback,
// child C connects, and they exchange a message before ready. After go each end uses the
// old connection: uninterrupted it still works ("kept"); after a --tcp-close round trip
// both ends must see it reset by the peer, as a program sees a dropped connection
// ("reset"). Either way C then reconnects to root's listener, which must still be there on
// the same port, and they exchange a message over the new connection. Root prints
// "CONNECTION kept" or "CONNECTION reset" (both ends must agree), then PASS.
#include "wl_tree.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

static void expect_read(int s, const char* want, const char* who) {
  char buf[16] = {0};
  ssize_t n = read(s, buf, sizeof buf - 1);
  WL_CHECK(n == (ssize_t)strlen(want) && strcmp(buf, want) == 0, "%s: read %zd bytes '%s', want '%s' (%s)", who, n, buf,
           want, n < 0 ? wl_errstr() : "");
}

static int reset_error(int err) { return err == ECONNRESET || err == EPIPE; }

int main(int argc, char** argv) {
  wl_init(argc, argv);
  int l = WL_SYS(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int one = 1;
  WL_SYS(setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one));
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  WL_SYS(bind(l, (struct sockaddr*)&addr, sizeof addr));
  WL_SYS(listen(l, 4));
  socklen_t len = sizeof addr;
  WL_SYS(getsockname(l, (struct sockaddr*)&addr, &len));
  pid_t c = WL_SYS(fork());
  if (c == 0) {
    wl_tree_set_role("C");
    close(l);
    int s = WL_SYS(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    WL_SYS(connect(s, (struct sockaddr*)&addr, sizeof addr));
    WL_SYS(write(s, "hello", 5));
    wl_tree_announce();
    wl_wait_go();
    wl_tree_watchdog();
    wl_tree_phase("old connection");
    const char* verdict = "kept";
    if (send(s, "after", 5, MSG_NOSIGNAL) != 5) {
      WL_CHECK(reset_error(errno), "C: send on the old connection: %s, want success or a reset", wl_errstr());
      verdict = "reset";
    } else {
      char buf[8] = {0};
      ssize_t n = read(s, buf, sizeof buf);
      if (n <= 0) {
        WL_CHECK(n == 0 || reset_error(errno), "C: read on the old connection: %s", wl_errstr());
        verdict = "reset";
      } else {
        WL_CHECK(n == 3 && memcmp(buf, "ack", 3) == 0, "C: read '%.*s', want 'ack'", (int)n, buf);
      }
    }
    wl_tree_write_file("verdict-C", verdict);
    close(s);
    wl_tree_phase("reconnect");
    s = WL_SYS(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    WL_SYS(connect(s, (struct sockaddr*)&addr, sizeof addr));
    WL_SYS(write(s, "again", 5));
    expect_read(s, "ok", "C (new connection)");
    _exit(0);
  }
  int s = WL_SYS(accept4(l, NULL, NULL, SOCK_CLOEXEC));
  expect_read(s, "hello", "root");
  wl_tree_root_ready_after("C");
  wl_tree_phase("old connection");
  const char* verdict = "kept";
  char buf[8] = {0};
  ssize_t n = read(s, buf, sizeof buf);
  if (n <= 0) {
    WL_CHECK(n == 0 || reset_error(errno), "root: read on the old connection: %s", wl_errstr());
    verdict = "reset";
  } else {
    WL_CHECK(n == 5 && memcmp(buf, "after", 5) == 0, "root: read '%.*s', want 'after'", (int)n, buf);
    WL_SYS(write(s, "ack", 3));
  }
  close(s);
  wl_tree_phase("accept the new connection");
  int s2 = WL_SYS(accept4(l, NULL, NULL, SOCK_CLOEXEC));
  expect_read(s2, "again", "root (new connection)");
  WL_SYS(write(s2, "ok", 2));
  wl_tree_expect_child_ok(c, "C");
  wl_tree_expect_no_children();
  char path[600], theirs[16] = {0};
  wl_path(path, sizeof path, "verdict-C");
  int f = WL_SYS(open(path, O_RDONLY | O_CLOEXEC));
  WL_SYS(read(f, theirs, sizeof theirs - 1));
  WL_CHECK(strcmp(theirs, verdict) == 0, "root saw the old connection %s, C saw it %s", verdict, theirs);
  printf("CONNECTION %s\n", verdict);
  wl_pass();
}
