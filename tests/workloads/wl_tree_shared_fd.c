// Open file descriptions shared between processes: after restore, descriptors that shared one
// description (inherited over fork, dup'd, 2>&1) must share it again, offset included.
//
// - WORKDIR/shared.log, opened (not O_APPEND) by root before fork, also dup'd to fd 50. The child
//   moves its inherited copy to fd 77 (so the same description has different numbers in the two
//   processes) and keeps fd 50. Root and child take turns writing 16-byte records: record k is written
//   by root if k is even, by the child if odd, each waiting until the shared offset says it is its turn
//   (lseek(fd, 0, SEEK_CUR) == 16 * k): only a shared offset lets the turns advance. Each alternates
//   between its two descriptor numbers. Records 0-9 are written before ready, 10-29 after go; root
//   then checks the file holds exactly the 30 records in order (no overwrite, no gap).
// - The child's stdout and stderr are WORKDIR/child.out, opened once, 2>&1 style; it writes
//   "out N" and "err N" lines through fds 1 and 2 alternately, before and after the checkpoint.
// - Root's own stdout is the harness's file, shared with the child up to its redirection; root writes
//   a line before ready, which must stay in front of PASS.
#include "wl_tree.h"

#include <stdlib.h>

#define REC_LEN 16
#define RECS_BEFORE 10
#define RECS_TOTAL 30
#define DUP_FD 50
#define CHILD_FD 77
#define OUT_LINES_BEFORE 2
#define OUT_LINES_TOTAL 5

static void record(int k, char* buf) {
  // "rec 007 by C...\n": 16 bytes, naming the writer so a misplaced record is recognisable.
  snprintf(buf, REC_LEN + 1, "rec %03d by %c...", k, k % 2 == 0 ? 'R' : 'C');
  buf[REC_LEN - 1] = '\n';
}

static off_t offset_of(int fd) {
  off_t off = lseek(fd, 0, SEEK_CUR);
  if (off < 0) wl_fail("%s: lseek(%d): %s", wl_tree_role_, fd, wl_errstr());
  return off;
}

// Writes the records in [from, to) that belong to `parity` (0: root, 1: child), waiting for each turn
// on the shared offset; alternates between descriptors fd_a and fd_b.
static void take_turns(int from, int to, int parity, int fd_a, int fd_b) {
  for (int k = from; k < to; k++) {
    if (k % 2 != parity) continue;
    int64_t deadline = wl_now_ns(CLOCK_MONOTONIC) + (int64_t)WL_TREE_TIMEOUT_S * 1000000000;
    off_t off;
    while ((off = offset_of(fd_a)) != (off_t)k * REC_LEN) {
      if (off > (off_t)k * REC_LEN) wl_fail("%s: shared offset is %lld before record %d, want %d", wl_tree_role_, (long long)off, k, k * REC_LEN);
      if (wl_now_ns(CLOCK_MONOTONIC) > deadline) {
        wl_fail("%s: waited %d s for the turn of record %d: the shared offset stays at %lld (is the description "
                "still shared?)",
                wl_tree_role_, WL_TREE_TIMEOUT_S, k, (long long)off);
      }
      wl_sleep_ms(1);
    }
    off_t other = offset_of(fd_b);
    if (other != off) wl_fail("%s: fds %d and %d are at offsets %lld and %lld: not one description", wl_tree_role_, fd_a, fd_b, (long long)off, (long long)other);
    char buf[REC_LEN + 1];
    record(k, buf);
    int fd = (k / 2) % 2 == 0 ? fd_a : fd_b;
    wl_tree_write_all(fd, buf, REC_LEN, "shared.log");
  }
}

static void out_lines(int from, int to) {
  for (int i = from; i < to; i++) {
    char buf[32];
    int n = snprintf(buf, sizeof buf, "out %d\n", i);
    wl_tree_write_all(1, buf, (size_t)n, "stdout (child.out)");
    n = snprintf(buf, sizeof buf, "err %d\n", i);
    wl_tree_write_all(2, buf, (size_t)n, "stderr (child.out)");
  }
}

static void child(int log_fd) {
  wl_tree_set_role("C");
  struct wl_tree_ids ids = wl_tree_own_ids();
  WL_SYS(dup2(log_fd, CHILD_FD));
  WL_SYS(close(log_fd));
  char path[600];
  wl_path(path, sizeof path, "child.out");
  int out = WL_SYS(open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644));
  WL_SYS(dup2(out, 1));
  WL_SYS(dup2(1, 2));  // 2>&1
  WL_SYS(close(out));
  out_lines(0, OUT_LINES_BEFORE);
  take_turns(0, RECS_BEFORE, 1, CHILD_FD, DUP_FD);
  wl_tree_announce();
  wl_wait_go();
  wl_tree_watchdog();
  wl_tree_check_own_ids(&ids);
  wl_tree_phase("writing child.out");
  out_lines(OUT_LINES_BEFORE, OUT_LINES_TOTAL);
  wl_tree_phase("taking turns on shared.log");
  take_turns(RECS_BEFORE, RECS_TOTAL, 1, CHILD_FD, DUP_FD);
  _exit(0);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  struct wl_tree_ids ids = wl_tree_own_ids();
  char log_path[600], out_path[600];
  wl_path(log_path, sizeof log_path, "shared.log");
  wl_path(out_path, sizeof out_path, "child.out");
  int log_fd = WL_SYS(open(log_path, O_RDWR | O_CREAT | O_TRUNC, 0644));
  WL_SYS(dup2(log_fd, DUP_FD));
  const char line[] = "tree_shared_fd: root set up\n";
  wl_tree_write_all(1, line, sizeof line - 1, "stdout");

  pid_t c = WL_SYS(fork());
  if (c == 0) child(log_fd);
  take_turns(0, RECS_BEFORE, 0, log_fd, DUP_FD);
  wl_tree_wait_announced("C");
  if (offset_of(log_fd) != RECS_BEFORE * REC_LEN) wl_fail("root: offset %lld before ready", (long long)offset_of(log_fd));
  wl_tree_announce();
  wl_signal_ready();

  wl_wait_go();
  wl_tree_watchdog();
  wl_tree_check_own_ids(&ids);
  // Nobody can have written since the checkpoint: the next record is root's.
  off_t at_go = offset_of(log_fd);
  if (at_go != RECS_BEFORE * REC_LEN) wl_fail("root: shared offset is %lld at go, want %d", (long long)at_go, RECS_BEFORE * REC_LEN);
  wl_tree_phase("taking turns on shared.log");
  take_turns(RECS_BEFORE, RECS_TOTAL, 0, log_fd, DUP_FD);
  wl_tree_phase("waiting for the child");
  int status = wl_tree_reap(c, "C");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    char buf[64], out[2048];
    if (wl_read_file(out_path, out, sizeof out) < 0) snprintf(out, sizeof out, "(unreadable: %s)", wl_errstr());
    wl_fail("root: child C (pid %d) %s; its child.out: %s", (int)c, wl_tree_describe_status(status, buf, sizeof buf), out);
  }
  wl_tree_expect_no_children();

  off_t end = offset_of(log_fd);
  if (end != RECS_TOTAL * REC_LEN || offset_of(DUP_FD) != end) {
    wl_fail("root: final offsets %lld (fd %d) and %lld (fd %d), want %d", (long long)end, log_fd,
            (long long)offset_of(DUP_FD), DUP_FD, RECS_TOTAL * REC_LEN);
  }
  char want[RECS_TOTAL * REC_LEN + 1], got[RECS_TOTAL * REC_LEN + 64];
  for (int k = 0; k < RECS_TOTAL; k++) record(k, want + k * REC_LEN);
  ssize_t n = wl_read_file(log_path, got, sizeof got);
  if (n != RECS_TOTAL * REC_LEN || memcmp(got, want, RECS_TOTAL * REC_LEN) != 0) {
    wl_fail("root: shared.log holds %zd bytes, want the %d records in order; it reads: %.*s", n, RECS_TOTAL,
            (int)(n > 0 ? n : 0), got);
  }

  char out_want[256] = "", out_got[512];
  for (int i = 0; i < OUT_LINES_TOTAL; i++) {
    snprintf(out_want + strlen(out_want), sizeof out_want - strlen(out_want), "out %d\nerr %d\n", i, i);
  }
  if (wl_read_file(out_path, out_got, sizeof out_got) < 0 || strcmp(out_got, out_want) != 0) {
    wl_fail("root: child.out (the child's stdout and stderr, 2>&1) reads '%s', want '%s'", out_got, out_want);
  }
  wl_pass();
}
