// A child that stays behind in its parent's old session: P forks K, then P calls setsid(). K keeps
// root's session and group (root leads its own group), while its parent leads a new session, so K's
// session cannot be inherited from its parent when the tree is rebuilt top-down.
//
//   root  leads group root, in the harness's session
//   └── P  setsid() after forking K: leads session P
//       └── K  session and group of root, parent P
//
// After restore every process checks its own pid, ppid, pgid and sid; root also checks K's from
// outside. P reaps K and passes its verdict on.
#include "wl_tree.h"

#include <stdlib.h>

static void run_k(void) {
  wl_tree_set_role("K");
  struct wl_tree_ids ids = wl_tree_own_ids();
  // Wait for P's setsid, so that what is announced is the final state.
  for (int waited = 0; getsid(getppid()) != getppid(); waited++) {
    if (waited > WL_TREE_TIMEOUT_S * 1000) wl_fail("K: parent never became a session leader");
    wl_sleep_ms(1);
  }
  wl_tree_announce();
  wl_wait_go();
  wl_tree_watchdog();
  wl_tree_check_own_ids(&ids);
  wl_tree_wait_file("root-checked", WL_TREE_TIMEOUT_S);
  _exit(0);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  WL_SYS(setpgid(0, 0));
  struct wl_tree_ids self = wl_tree_own_ids();
  wl_tree_announce();
  pid_t p = WL_SYS(fork());
  if (p == 0) {
    wl_tree_set_role("P");
    pid_t k = WL_SYS(fork());
    if (k == 0) run_k();
    WL_SYS(setsid());
    struct wl_tree_ids ids = wl_tree_own_ids();
    wl_tree_announce();
    wl_wait_go();
    wl_tree_watchdog();
    wl_tree_check_own_ids(&ids);
    wl_tree_phase("waiting for K");
    wl_tree_expect_child_ok(k, "K");
    _exit(0);
  }
  wl_tree_wait_announced("P");
  wl_tree_wait_announced("K");
  char buf[32], path[600];
  wl_path(path, sizeof path, "proc-K");
  if (wl_read_file(path, buf, sizeof buf) < 0) wl_fail("root: read %s: %s", path, wl_errstr());
  pid_t k = (pid_t)atoi(buf);
  WL_CHECK(getsid(p) == p && getsid(k) == self.sid && getpgid(k) == self.pid, "root: the tree does not have the intended shape");
  const char line[] = "tree_session_split: set up\n";
  wl_tree_write_all(1, line, sizeof line - 1, "stdout");
  wl_signal_ready();

  wl_wait_go();
  wl_tree_watchdog();
  wl_tree_check_own_ids(&self);
  pid_t k_parent = 0;
  wl_tree_proc_state(k, &k_parent);
  if (getsid(p) != p || getsid(k) != self.sid || getpgid(k) != self.pid || k_parent != p) {
    wl_fail("root: after restore P has sid %d (want %d); K has sid %d pgid %d ppid %d (want sid %d pgid %d ppid %d)",
            (int)getsid(p), (int)p, (int)getsid(k), (int)getpgid(k), (int)k_parent, (int)self.sid, (int)self.pid, (int)p);
  }
  wl_tree_write_file("root-checked", "");
  wl_tree_expect_child_ok(p, "P");
  wl_tree_expect_no_children();
  wl_pass();
}
