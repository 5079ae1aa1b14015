// MAP_SHARED|MAP_ANONYMOUS memory shared between processes of a tree survives a round trip as ONE
// piece of memory per mapping, not as private copies, and private anonymous memory stays private.
//
// The tree: root maps S (8 MiB, shared, anonymous) and P (1 MiB, private, anonymous) and forks A
// and B. A and B each map their own T (1 MiB + a page, shared, anonymous; after the fork, so the
// kernel usually puts A's and B's at the same address) and fork a grandchild, GA and GB, that
// shares it. Before ready:
//   - root, A and B write distinct patterns into quarters 0, 1 and 2 of S; quarter 3 stays
//     untouched (all zero);
//   - every process writes its own pattern into its copy of P;
//   - in each T, the child writes the first half and its grandchild the second half (distinct
//     patterns in A's T and in B's T).
// After go every process checks that it sees every quarter of S as written (the others' writes
// included), quarter 3 still zero, its own P, and (A, B, GA, GB) its T. Then each writes a marker
// into a page of quarter 3 of S and into its own P, and waits until it sees all five markers in S:
// memory restored as private copies would never show the others' markers (the watchdog fails it).
// Its own P must still hold its own marker: had P become shared, the others' markers would
// overwrite it. Likewise A/GA and B/GB exchange markers through their T.
#include "wl_tree.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#define S_SIZE (8ul << 20)
#define QUARTER (S_SIZE / 4)
#define P_SIZE (1ul << 20)
#define T_HALF (512ul << 10)
#define T_SIZE (2 * T_HALF + 4096)
#define PAGE 4096
#define NPROCS 5  // root, A, B, GA, GB

// Index of each process: its marker page in quarter 3 of S, its seed for P.
enum { ROOT = 0, A = 1, B = 2, GA = 3, GB = 4 };
static const char* const kRoles[NPROCS] = {"root", "A", "B", "GA", "GB"};

static char* s_map;
static char* p_map;

static uint64_t s_marker(int idx) { return 0x5eed000000000000ull | ((uint64_t)getpid() << 8) | (uint64_t)idx; }
static uint64_t p_seed(int idx) { return 200 + (uint64_t)idx; }

static void* map_anon(size_t len, int flags, const char* what) {
  void* p = mmap(NULL, len, PROT_READ | PROT_WRITE, flags | MAP_ANONYMOUS, -1, 0);
  WL_CHECK(p != MAP_FAILED, "%s: mmap %s: %s", wl_tree_role_, what, wl_errstr());
  return p;
}

static void expect_pattern(const char* where, const char* what, const void* buf, size_t len, uint64_t seed) {
  ptrdiff_t bad = wl_check_pattern(buf, len, seed);
  if (bad >= 0) wl_fail("%s: %s differs at byte %td of %zu (%s)", wl_tree_role_, where, bad, len, what);
}

static void expect_zero(const char* where, const char* buf, size_t len) {
  for (size_t i = 0; i < len; i++) {
    if (buf[i] != 0) wl_fail("%s: %s is not zero at byte %zu (never written before the checkpoint)", wl_tree_role_, where, i);
  }
}

// Waits until the 8 bytes at `where` hold `want` (written by another process).
static void wait_marker(const char* what, const volatile uint64_t* where, uint64_t want) {
  wl_tree_phase(what);
  while (*where != want) wl_sleep_ms(1);
}

// Every process's part of the test after go. `t` is its T (NULL for root), `t_half` the half it
// wrote, `t_peer_idx` the index of the process it shares T with.
static void after_go(int idx, char* t, int t_half, int t_peer_idx, pid_t t_peer_pid) {
  wl_tree_watchdog();
  wl_tree_phase("checking contents");
  expect_pattern("S quarter 0 (root's writes)", "the shared mapping lost root's writes", s_map, QUARTER, 100);
  expect_pattern("S quarter 1 (A's writes)", "the shared mapping lost A's writes", s_map + QUARTER, QUARTER, 101);
  expect_pattern("S quarter 2 (B's writes)", "the shared mapping lost B's writes", s_map + 2 * QUARTER, QUARTER, 102);
  expect_zero("S quarter 3 past the marker pages", s_map + 3 * QUARTER + NPROCS * PAGE, QUARTER - NPROCS * PAGE);
  expect_pattern("P", "private memory lost this process's own writes", p_map, P_SIZE - PAGE, p_seed(idx));
  expect_zero("P's marker page", p_map + P_SIZE - PAGE, PAGE);
  if (t != NULL) {
    int owner = t_half == 0 ? idx : t_peer_idx;  // the child's index seeds both halves of its T
    expect_pattern("T first half", "the child's writes", t, T_HALF, 300 + (uint64_t)owner);
    expect_pattern("T second half", "the grandchild's writes", t + T_HALF, T_HALF, 310 + (uint64_t)owner);
  }

  // Writes after the restore must reach the other processes.
  wl_tree_phase("writing markers");
  *(volatile uint64_t*)(p_map + P_SIZE - PAGE) = s_marker(idx) ^ 0xffff;
  *(volatile uint64_t*)(s_map + 3 * QUARTER + (size_t)idx * PAGE) = s_marker(idx);
  if (t != NULL) *(volatile uint64_t*)(t + 2 * T_HALF + (size_t)t_half * 8) = s_marker(idx);

  char what[96];
  for (int i = 0; i < NPROCS; i++) {
    char pidfile[64], buf[32];
    snprintf(pidfile, sizeof pidfile, "%s/proc-%s", wl_workdir(), kRoles[i]);
    WL_CHECK(wl_read_file(pidfile, buf, sizeof buf) > 0, "%s: read %s: %s", wl_tree_role_, pidfile, wl_errstr());
    pid_t pid = (pid_t)atoi(buf);
    snprintf(what, sizeof what, "waiting to see %s's marker in S (is S still shared?)", kRoles[i]);
    wait_marker(what, (const volatile uint64_t*)(s_map + 3 * QUARTER + (size_t)i * PAGE),
                0x5eed000000000000ull | ((uint64_t)pid << 8) | (uint64_t)i);
  }
  if (t != NULL) {
    snprintf(what, sizeof what, "waiting to see %s's marker in T (is T still shared?)", kRoles[t_peer_idx]);
    wait_marker(what, (const volatile uint64_t*)(t + 2 * T_HALF + (size_t)(1 - t_half) * 8),
                0x5eed000000000000ull | ((uint64_t)t_peer_pid << 8) | (uint64_t)t_peer_idx);
  }
  wl_tree_phase("checking private memory");
  uint64_t own = *(volatile uint64_t*)(p_map + P_SIZE - PAGE);
  WL_CHECK(own == (s_marker(idx) ^ 0xffff), "%s: P's marker reads %#llx, want its own %#llx: private memory is shared",
           wl_tree_role_, (unsigned long long)own, (unsigned long long)(s_marker(idx) ^ 0xffff));
  expect_pattern("P after the markers", "private memory changed under this process", p_map, P_SIZE - PAGE, p_seed(idx));
}

// A or B: maps its own T, forks its grandchild, and returns once both are set up.
static void run_child(int idx, int gidx) {
  wl_tree_set_role(kRoles[idx]);
  expect_pattern("S quarter 0 at fork", "not inherited", s_map, QUARTER, 100);
  wl_fill_pattern(s_map + (size_t)idx * QUARTER, QUARTER, 100 + (uint64_t)idx);
  wl_fill_pattern(p_map, P_SIZE - PAGE, p_seed(idx));
  char* t = map_anon(T_SIZE, MAP_SHARED, "T");
  pid_t g = WL_SYS(fork());
  if (g == 0) {
    wl_tree_set_role(kRoles[gidx]);
    wl_fill_pattern(p_map, P_SIZE - PAGE, p_seed(gidx));
    wl_fill_pattern(t + T_HALF, T_HALF, 310 + (uint64_t)idx);
    wl_tree_announce();
    wl_wait_go();
    after_go(gidx, t, 1, idx, getppid());
    _exit(0);
  }
  wl_fill_pattern(t, T_HALF, 300 + (uint64_t)idx);
  wl_tree_wait_announced(kRoles[gidx]);
  wl_tree_announce();
  wl_wait_go();
  after_go(idx, t, 0, gidx, g);
  wl_tree_expect_child_ok(g, kRoles[gidx]);
  wl_tree_expect_no_children();
  _exit(0);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  s_map = map_anon(S_SIZE, MAP_SHARED, "S");
  p_map = map_anon(P_SIZE, MAP_PRIVATE, "P");
  wl_fill_pattern(s_map, QUARTER, 100);
  wl_fill_pattern(p_map, P_SIZE - PAGE, p_seed(ROOT));
  pid_t a = WL_SYS(fork());
  if (a == 0) run_child(A, GA);
  pid_t b = WL_SYS(fork());
  if (b == 0) run_child(B, GB);
  wl_tree_wait_announced("GA");
  wl_tree_wait_announced("GB");
  wl_tree_wait_announced("A");
  wl_tree_root_ready_after("B");
  after_go(ROOT, NULL, 0, 0, 0);
  wl_tree_expect_child_ok(a, "A");
  wl_tree_expect_child_ok(b, "B");
  wl_tree_expect_no_children();
  wl_pass();
}
