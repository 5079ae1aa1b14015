// Child subreaper and parent-death signal:
//
//   root   PR_SET_CHILD_SUBREAPER
//   ├── A  PR_SET_PDEATHSIG(SIGUSR1), with a SIGUSR1 handler
//   │   └── B  PR_SET_PDEATHSIG(SIGUSR1), with a SIGUSR1 handler
//   └── P  orphaned before the checkpoint: its parent O exited and root reaped O, so P was
//          re-parented to root, the subreaper
//
// After restore: root still is a subreaper and has no parent-death signal; A and B have SIGUSR1; P's
// parent is root. Then A exits: B must be re-parented to root (not to the harness or init) and get
// SIGUSR1 from its parent's death, and root must be able to reap B.
#include "wl_tree.h"

#include <stdlib.h>
#include <sys/prctl.h>

static volatile sig_atomic_t g_usr1;

static void on_usr1(int sig) {
  (void)sig;
  g_usr1++;
}

static void set_pdeathsig_usr1(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sigemptyset(&sa.sa_mask);
  WL_SYS(sigaction(SIGUSR1, &sa, NULL));
  WL_SYS(prctl(PR_SET_PDEATHSIG, SIGUSR1));
}

static int get_pdeathsig(void) {
  int sig = -1;
  WL_SYS(prctl(PR_GET_PDEATHSIG, &sig));
  return sig;
}

static void run_b(void) {
  wl_tree_set_role("B");
  set_pdeathsig_usr1();
  struct wl_tree_ids ids = wl_tree_own_ids();
  wl_tree_announce();
  wl_wait_go();
  wl_tree_watchdog();
  wl_tree_check_own_ids(&ids);
  if (get_pdeathsig() != SIGUSR1) wl_fail("B: PR_GET_PDEATHSIG is %d after restore, want SIGUSR1", get_pdeathsig());
  if (g_usr1 != 0) wl_fail("B: got SIGUSR1 before its parent died");
  wl_tree_write_file("b-checked", "");
  // A exits after go; wait for its death signal.
  wl_tree_phase("waiting for SIGUSR1 from A's death");
  while (g_usr1 == 0) wl_sleep_ms(1);
  char buf[32], path[600];
  wl_path(path, sizeof path, "proc-root");
  if (wl_read_file(path, buf, sizeof buf) < 0) wl_fail("B: read %s: %s", path, wl_errstr());
  pid_t want = (pid_t)atoi(buf);
  if (getppid() != want) wl_fail("B: after A died my parent is %d, want the subreaper root %d", (int)getppid(), (int)want);
  if (g_usr1 != 1) wl_fail("B: got SIGUSR1 %d times", (int)g_usr1);
  _exit(0);
}

static void run_a(void) {
  wl_tree_set_role("A");
  set_pdeathsig_usr1();
  struct wl_tree_ids ids = wl_tree_own_ids();
  pid_t b = WL_SYS(fork());
  if (b == 0) run_b();
  wl_tree_announce();
  wl_wait_go();
  wl_tree_watchdog();
  wl_tree_check_own_ids(&ids);
  if (get_pdeathsig() != SIGUSR1) wl_fail("A: PR_GET_PDEATHSIG is %d after restore, want SIGUSR1", get_pdeathsig());
  if (g_usr1 != 0) wl_fail("A: got SIGUSR1 but its parent lives");
  wl_tree_phase("waiting for B's checks");
  wl_tree_wait_file("b-checked", WL_TREE_TIMEOUT_S);
  (void)b;
  _exit(0);  // orphans B
}

static void run_p(pid_t o) {
  wl_tree_set_role("P");
  // Wait until O has exited and root adopted us.
  for (int waited = 0; getppid() == o; waited++) {
    if (waited > WL_TREE_TIMEOUT_S * 1000) wl_fail("P: never re-parented");
    wl_sleep_ms(1);
  }
  struct wl_tree_ids ids = wl_tree_own_ids();
  wl_tree_announce();
  wl_wait_go();
  wl_tree_watchdog();
  wl_tree_check_own_ids(&ids);
  _exit(0);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  WL_SYS(prctl(PR_SET_CHILD_SUBREAPER, 1));
  struct wl_tree_ids ids = wl_tree_own_ids();
  wl_tree_announce();
  pid_t a = WL_SYS(fork());
  if (a == 0) run_a();
  pid_t o = WL_SYS(fork());
  if (o == 0) {
    wl_tree_set_role("O");
    pid_t self = getpid();
    pid_t p = WL_SYS(fork());
    if (p == 0) run_p(self);
    _exit(0);
  }
  wl_tree_expect_child_ok(o, "O");
  wl_tree_wait_announced("A");
  wl_tree_wait_announced("B");
  wl_tree_wait_announced("P");
  char buf[32], path[600];
  wl_path(path, sizeof path, "proc-P");
  if (wl_read_file(path, buf, sizeof buf) < 0) wl_fail("root: read %s: %s", path, wl_errstr());
  pid_t p = (pid_t)atoi(buf);
  wl_path(path, sizeof path, "proc-B");
  if (wl_read_file(path, buf, sizeof buf) < 0) wl_fail("root: read %s: %s", path, wl_errstr());
  pid_t b = (pid_t)atoi(buf);
  const char line[] = "tree_subreaper_pdeathsig: set up\n";
  wl_tree_write_all(1, line, sizeof line - 1, "stdout");
  wl_signal_ready();

  wl_wait_go();
  wl_tree_watchdog();
  wl_tree_check_own_ids(&ids);
  int subreaper = -1;
  WL_SYS(prctl(PR_GET_CHILD_SUBREAPER, &subreaper));
  if (subreaper != 1) wl_fail("root: PR_GET_CHILD_SUBREAPER is %d after restore, want 1", subreaper);
  if (get_pdeathsig() != 0) wl_fail("root: PR_GET_PDEATHSIG is %d after restore, want 0", get_pdeathsig());
  pid_t p_parent = 0;
  wl_tree_proc_state(p, &p_parent);
  if (p_parent != getpid()) wl_fail("root: orphan P (pid %d) has parent %d, want root %d", (int)p, (int)p_parent, (int)getpid());
  wl_tree_phase("reaping A, then the orphan B");
  wl_tree_expect_child_ok(a, "A");
  wl_tree_expect_child_ok(b, "B (orphaned by A, adopted by root)");
  wl_tree_expect_child_ok(p, "P");
  wl_tree_expect_no_children();
  wl_pass();
}
