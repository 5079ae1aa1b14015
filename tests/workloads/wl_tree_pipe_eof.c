// Half-closed pipes, as a finished producer leaves them in a shell pipeline (`producer | consumer`):
//
// - pipe A: the writer W1 wrote 5000 bytes and exited (root reaped it); root holds only the read end.
//   After restore root must read exactly those 5000 bytes, then EOF.
// - pipe B: root wrote 300 bytes, the reader W2 read 100 of them and exited; root holds only the
//   write end. After restore a write must fail with EPIPE (root ignores SIGPIPE).
//
// Both ends of both pipes were in the tree; what is left of each is in the checkpoint. A pipe with no
// writer left reports POLLHUP on its read end, one with no reader POLLERR on its write end.
#include "wl_tree.h"

#include <stdlib.h>

#define A_BYTES 5000
#define B_READ 100
#define B_QUEUED 200

int main(int argc, char** argv) {
  wl_init(argc, argv);
  struct wl_tree_ids ids = wl_tree_own_ids();
  signal(SIGPIPE, SIG_IGN);
  int a[2], b[2];
  WL_SYS(pipe(a));
  WL_SYS(pipe(b));
  char data[A_BYTES];
  wl_fill_pattern(data, sizeof data, 7);

  pid_t w1 = WL_SYS(fork());
  if (w1 == 0) {
    wl_tree_set_role("W1");
    close(a[0]);
    wl_tree_write_all(a[1], data, A_BYTES, "pipe A");
    _exit(0);
  }
  close(a[1]);
  wl_tree_expect_child_ok(w1, "W1");

  pid_t w2 = WL_SYS(fork());
  if (w2 == 0) {
    wl_tree_set_role("W2");
    close(b[1]);
    char buf[B_READ];
    if (wl_tree_read_full(b[0], buf, B_READ, "pipe B") != B_READ) wl_fail("W2: pipe B ended early");
    if (wl_check_pattern(buf, B_READ, 8) != -1) wl_fail("W2: pipe B carried the wrong bytes");
    _exit(0);
  }
  close(b[0]);
  char bdata[B_READ + B_QUEUED];
  wl_fill_pattern(bdata, sizeof bdata, 8);
  wl_tree_write_all(b[1], bdata, sizeof bdata, "pipe B");  // W2 reads the first 100, 200 stay queued
  wl_tree_expect_child_ok(w2, "W2");
  struct pollfd pa = {a[0], POLLIN, 0}, pb = {b[1], POLLOUT, 0};
  WL_SYS(poll(&pa, 1, 0));
  WL_SYS(poll(&pb, 1, 0));
  if (!(pa.revents & POLLHUP)) wl_fail("root: pipe A's read end does not report POLLHUP before the checkpoint");
  if (!(pb.revents & POLLERR)) wl_fail("root: pipe B's write end does not report POLLERR before the checkpoint");
  wl_tree_announce();
  const char line[] = "tree_pipe_eof: set up\n";
  wl_tree_write_all(1, line, sizeof line - 1, "stdout");
  wl_signal_ready();

  wl_wait_go();
  wl_tree_watchdog();
  wl_tree_check_own_ids(&ids);
  char got[A_BYTES];
  wl_tree_read_to_eof(a[0], got, A_BYTES, "pipe A (writer gone)");
  ptrdiff_t bad = wl_check_pattern(got, A_BYTES, 7);
  if (bad != -1) wl_fail("root: pipe A byte %td differs after restore", bad);
  ssize_t n = write(b[1], "x", 1);
  if (n != -1 || errno != EPIPE) {
    wl_fail("root: write to pipe B (reader gone) returned %zd (%s), want EPIPE", n, n < 0 ? wl_errstr() : "no error");
  }
  wl_tree_expect_no_children();
  wl_pass();
}
