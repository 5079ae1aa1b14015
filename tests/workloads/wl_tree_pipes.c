// Pipes between the processes of a tree: bytes queued in a pipe at checkpoint time must come out of
// it after restore, in order, followed by what is written afterwards, and EOF must come when the last
// writer closes (so no restored process may hold a stray copy of a write end).
//
//   root ──rc1──▶ C1 ──c1r──▶ root      10000 bytes queued, C1 has read 1000 of them (so the pipe's
//                                        read position is inside a page); C1 has queued 3000 for root
//   C2 ──c2r (256 KiB)──▶ root           full: 256 KiB queued and C2 blocked writing the rest of its
//                                        300000 bytes; root's read end is O_NONBLOCK
//   root ──pa──▶ C3 ──pb──▶ G3           a pipeline: C3 forwards (xor 0x5a) what it reads from pa to its
//                                        child G3; 12000 bytes queued in pa, 8000 in pb at checkpoint
//   C1, C2, C3, G3 ──verdict──▶ root     one write end shared by four processes: each writes a
//                                        16-byte "set up" record before ready and a "done" record at the end
//
// After go, root writes the rest of the rc1 and pa streams and closes them; everyone reads to EOF and
// checks the exact byte stream (wl_fill_pattern); root checks the verdict records, the pipe size and
// O_NONBLOCK, reaps C1, C2, C3 (C3 reaps G3) and prints PASS.
#include "wl_tree.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/ioctl.h>

#define RC1_BEFORE 10000
#define RC1_TOTAL 15000
#define C1_READS_BEFORE 1000
#define C1R_BEFORE 3000
#define C1R_TOTAL 4000
#define C2R_PIPE_SIZE (256 * 1024)
#define C2R_TOTAL 300000
#define PA_BEFORE 20000
#define PA_TOTAL 30000
#define C3_FORWARDS_BEFORE 8000

enum { kSeedRc1 = 1, kSeedC1r = 2, kSeedC2r = 3, kSeedPa = 4 };

struct verdict {
  char kind;     // 'S': set up (before ready), 'D': done (after go, all checks passed)
  char role[7];  // NUL-padded
  int32_t pid;
  int32_t zero;
};
_Static_assert(sizeof(struct verdict) == 16, "verdict records are 16 bytes");

static void send_verdict(int fd, char kind) {
  struct verdict v;
  memset(&v, 0, sizeof v);
  v.kind = kind;
  strncpy(v.role, wl_tree_role_, sizeof v.role);
  v.pid = getpid();
  wl_tree_write_all(fd, &v, sizeof v, "verdict pipe");  // 16 bytes < PIPE_BUF: atomic
}

static char* pattern(size_t len, uint64_t seed) {
  char* buf = malloc(len);
  if (buf == NULL) wl_fail("%s: malloc %zu", wl_tree_role_, len);
  wl_fill_pattern(buf, len, seed);
  return buf;
}

// Checks that buf holds bytes [from, from+len) of stream `seed` (xored with `x`).
static void check_stream(const char* buf, size_t from, size_t len, uint64_t seed, unsigned char x, const char* what) {
  char* want = pattern(from + len, seed);
  for (size_t i = 0; i < len; i++) {
    if ((unsigned char)buf[i] != ((unsigned char)want[from + i] ^ x)) {
      wl_fail("%s: %s: byte %zu of the stream differs (got %#x, want %#x)", wl_tree_role_, what, from + i,
              (unsigned char)buf[i], (unsigned char)want[from + i] ^ x);
    }
  }
  free(want);
}

static void child_c1(int rc1, int c1r, int verdict) {
  wl_tree_set_role("C1");
  struct wl_tree_ids ids = wl_tree_own_ids();
  char* got = malloc(RC1_TOTAL);
  if (wl_tree_read_full(rc1, got, C1_READS_BEFORE, "rc1") != C1_READS_BEFORE) wl_fail("C1: rc1 ended early");
  check_stream(got, 0, C1_READS_BEFORE, kSeedRc1, 0, "rc1 before the checkpoint");
  char* out = pattern(C1R_TOTAL, kSeedC1r);
  wl_tree_write_all(c1r, out, C1R_BEFORE, "c1r");
  send_verdict(verdict, 'S');
  wl_tree_announce();
  wl_wait_go();
  wl_tree_watchdog();
  wl_tree_check_own_ids(&ids);
  wl_tree_phase("reading rc1 to EOF");
  wl_tree_read_to_eof(rc1, got, RC1_TOTAL - C1_READS_BEFORE, "rc1");
  check_stream(got, C1_READS_BEFORE, RC1_TOTAL - C1_READS_BEFORE, kSeedRc1, 0, "rc1");
  wl_tree_phase("writing the rest of c1r");
  wl_tree_write_all(c1r, out + C1R_BEFORE, C1R_TOTAL - C1R_BEFORE, "c1r");
  close(c1r);
  send_verdict(verdict, 'D');
  _exit(0);
}

static void child_c2(int c2r, int verdict) {
  wl_tree_set_role("C2");
  struct wl_tree_ids ids = wl_tree_own_ids();
  int size = fcntl(c2r, F_SETPIPE_SZ, C2R_PIPE_SIZE);
  if (size != C2R_PIPE_SIZE) wl_fail("C2: F_SETPIPE_SZ %d gave %d: %s", C2R_PIPE_SIZE, size, wl_errstr());
  char* out = pattern(C2R_TOTAL, kSeedC2r);
  send_verdict(verdict, 'S');
  wl_tree_announce();
  // Blocks once the pipe is full, and is still blocked at checkpoint time: root does not read before go.
  wl_tree_phase("writing c2r");
  wl_tree_write_all(c2r, out, C2R_TOTAL, "c2r");
  close(c2r);
  // Only after go can the write have completed.
  if (!wl_go_exists()) wl_fail("C2: wrote all of c2r before go; root read it early");
  wl_tree_check_own_ids(&ids);
  send_verdict(verdict, 'D');
  _exit(0);
}

static void grandchild_g3(int pb, int verdict) {
  wl_tree_set_role("G3");
  struct wl_tree_ids ids = wl_tree_own_ids();
  send_verdict(verdict, 'S');
  wl_tree_announce();
  wl_wait_go();
  wl_tree_watchdog();
  wl_tree_check_own_ids(&ids);
  wl_tree_phase("reading pb to EOF");
  char* got = malloc(PA_TOTAL);
  wl_tree_read_to_eof(pb, got, PA_TOTAL, "pb");
  check_stream(got, 0, PA_TOTAL, kSeedPa, 0x5a, "pb (pa forwarded by C3)");
  send_verdict(verdict, 'D');
  _exit(0);
}

// Forwards up to `limit` bytes (or to EOF) from `in` to `out`, xoring each with 0x5a. Returns the count.
static size_t forward(int in, int out, size_t limit) {
  char buf[1500];  // an odd size, so chunks do not line up with pipe pages
  size_t total = 0;
  while (total < limit) {
    size_t want = limit - total < sizeof buf ? limit - total : sizeof buf;
    ssize_t n = read(in, buf, want);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) wl_fail("C3: read pa: %s", wl_errstr());
    if (n == 0) break;
    for (ssize_t i = 0; i < n; i++) buf[i] ^= 0x5a;
    wl_tree_write_all(out, buf, (size_t)n, "pb");
    total += (size_t)n;
  }
  return total;
}

static void child_c3(int pa, int pb[2], int verdict) {
  wl_tree_set_role("C3");
  struct wl_tree_ids ids = wl_tree_own_ids();
  pid_t g3 = WL_SYS(fork());
  if (g3 == 0) {
    close(pa);
    close(pb[1]);
    grandchild_g3(pb[0], verdict);
  }
  close(pb[0]);
  if (forward(pa, pb[1], C3_FORWARDS_BEFORE) != C3_FORWARDS_BEFORE) wl_fail("C3: pa ended early");
  send_verdict(verdict, 'S');
  wl_tree_announce();
  wl_wait_go();
  wl_tree_watchdog();
  wl_tree_check_own_ids(&ids);
  wl_tree_phase("forwarding pa to pb until EOF");
  size_t rest = forward(pa, pb[1], (size_t)-1);
  if (rest != PA_TOTAL - C3_FORWARDS_BEFORE) {
    wl_fail("C3: forwarded %zu bytes after go, want %d", rest, PA_TOTAL - C3_FORWARDS_BEFORE);
  }
  close(pb[1]);
  wl_tree_phase("waiting for G3");
  wl_tree_expect_child_ok(g3, "G3");
  send_verdict(verdict, 'D');
  _exit(0);
}

static void check_verdicts(int fd, pid_t c1, pid_t c2, pid_t c3) {
  struct verdict v[8];
  wl_tree_read_to_eof(fd, v, 8 * sizeof v[0], "verdict pipe");
  // The four set-up records were queued before the checkpoint, so they come first.
  const char* roles[4] = {"C1", "C2", "C3", "G3"};
  for (int phase = 0; phase < 2; phase++) {
    int seen[4] = {0, 0, 0, 0};
    for (int i = phase * 4; i < phase * 4 + 4; i++) {
      char want_kind = phase == 0 ? 'S' : 'D';
      if (v[i].kind != want_kind) wl_fail("root: verdict record %d is '%c', want '%c'", i, v[i].kind, want_kind);
      int r = -1;
      for (int k = 0; k < 4; k++) {
        if (strncmp(v[i].role, roles[k], sizeof v[i].role) == 0) r = k;
      }
      if (r < 0 || seen[r]++) wl_fail("root: verdict record %d from unexpected or repeated role '%.7s'", i, v[i].role);
      pid_t want_pid = r == 0 ? c1 : r == 1 ? c2 : r == 2 ? c3 : v[i].pid;
      if (v[i].pid != want_pid) wl_fail("root: verdict of %s carries pid %d, want %d", roles[r], v[i].pid, want_pid);
    }
  }
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  struct wl_tree_ids ids = wl_tree_own_ids();
  int rc1[2], c1r[2], c2r[2], pa[2], pb[2], verdict[2];
  WL_SYS(pipe(rc1));
  WL_SYS(pipe(c1r));
  WL_SYS(pipe(c2r));
  WL_SYS(pipe(pa));
  WL_SYS(pipe(pb));
  WL_SYS(pipe(verdict));

  pid_t c1 = WL_SYS(fork());
  if (c1 == 0) {
    int keep[] = {rc1[0], c1r[1], verdict[1]};
    wl_tree_close_except(keep, 3);
    child_c1(rc1[0], c1r[1], verdict[1]);
  }
  pid_t c2 = WL_SYS(fork());
  if (c2 == 0) {
    int keep[] = {c2r[1], verdict[1]};
    wl_tree_close_except(keep, 2);
    child_c2(c2r[1], verdict[1]);
  }
  pid_t c3 = WL_SYS(fork());
  if (c3 == 0) {
    int keep[] = {pa[0], pb[0], pb[1], verdict[1]};
    wl_tree_close_except(keep, 4);
    child_c3(pa[0], pb, verdict[1]);
  }
  int keep[] = {rc1[1], c1r[0], c2r[0], pa[1], verdict[0]};
  wl_tree_close_except(keep, 5);

  char* rc1_out = pattern(RC1_TOTAL, kSeedRc1);
  char* pa_out = pattern(PA_TOTAL, kSeedPa);
  wl_tree_write_all(rc1[1], rc1_out, RC1_BEFORE, "rc1");
  wl_tree_write_all(pa[1], pa_out, PA_BEFORE, "pa");

  wl_tree_wait_announced("C1");
  wl_tree_wait_announced("C2");
  wl_tree_wait_announced("C3");
  wl_tree_wait_announced("G3");
  // C2 has filled its pipe and is blocked writing the rest.
  for (int waited = 0;; waited++) {
    int queued = 0;
    WL_SYS(ioctl(c2r[0], FIONREAD, &queued));
    if (queued == C2R_PIPE_SIZE) break;
    if (waited > WL_TREE_TIMEOUT_S * 1000) wl_fail("root: c2r holds %d bytes, want it full (%d)", queued, C2R_PIPE_SIZE);
    wl_sleep_ms(1);
  }
  WL_SYS(fcntl(c2r[0], F_SETFL, O_NONBLOCK));
  wl_tree_announce();
  const char line[] = "tree_pipes: set up, 5 processes\n";
  wl_tree_write_all(1, line, sizeof line - 1, "stdout");
  wl_signal_ready();

  wl_wait_go();
  wl_tree_watchdog();
  wl_tree_check_own_ids(&ids);
  int size = fcntl(c2r[0], F_GETPIPE_SZ);
  if (size != C2R_PIPE_SIZE) wl_fail("root: c2r pipe size is %d after restore, want %d", size, C2R_PIPE_SIZE);
  int fl = fcntl(c2r[0], F_GETFL);
  if (fl < 0 || !(fl & O_NONBLOCK)) wl_fail("root: c2r read end lost O_NONBLOCK (flags %#x)", fl);
  if ((fcntl(rc1[1], F_GETFL) & O_NONBLOCK) != 0) wl_fail("root: rc1 write end became O_NONBLOCK");

  wl_tree_phase("writing the rest of rc1 and pa");
  wl_tree_write_all(rc1[1], rc1_out + RC1_BEFORE, RC1_TOTAL - RC1_BEFORE, "rc1");
  close(rc1[1]);
  wl_tree_write_all(pa[1], pa_out + PA_BEFORE, PA_TOTAL - PA_BEFORE, "pa");
  close(pa[1]);

  wl_tree_phase("reading c1r to EOF");
  char* got = malloc(C2R_TOTAL);
  wl_tree_read_to_eof(c1r[0], got, C1R_TOTAL, "c1r");
  check_stream(got, 0, C1R_TOTAL, kSeedC1r, 0, "c1r");
  wl_tree_phase("reading c2r to EOF");
  wl_tree_read_to_eof(c2r[0], got, C2R_TOTAL, "c2r");
  check_stream(got, 0, C2R_TOTAL, kSeedC2r, 0, "c2r");
  wl_tree_phase("reading the verdict pipe to EOF");
  check_verdicts(verdict[0], c1, c2, c3);
  wl_tree_phase("reaping children");
  wl_tree_expect_child_ok(c1, "C1");
  wl_tree_expect_child_ok(c2, "C2");
  wl_tree_expect_child_ok(c3, "C3");
  wl_tree_expect_no_children();
  wl_pass();
}
