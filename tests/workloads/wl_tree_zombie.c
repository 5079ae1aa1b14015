// Zombies: children that ended before the checkpoint and were not reaped must come back as zombies
// with the same wait status, and their parent's waitpid must then return exactly that status for
// exactly that pid.
//
//   root
//   ├── Z7   exited with status 7               (a zombie at checkpoint time)
//   ├── ZT   killed by SIGTERM                  (a zombie at checkpoint time)
//   ├── ZK   killed by SIGKILL                  (a zombie at checkpoint time)
//   └── L    alive, waits for go
//       └── Z3   exited with status 3, L has not reaped it (a zombie below a live non-root process)
//
// Before ready, each parent waits for its zombies with waitid(WNOWAIT), which leaves them unreaped.
// After go: the zombies must still be zombies of the same parent (/proc/PID/stat), waitpid(pid)
// returns their status, and nothing else is left to reap.
#include "wl_tree.h"

#include <stdlib.h>

// Waits until child `pid` has ended, without reaping it.
static void wait_ended_unreaped(pid_t pid, const char* role) {
  siginfo_t info;
  memset(&info, 0, sizeof info);
  while (waitid(P_PID, (id_t)pid, &info, WEXITED | WNOWAIT) != 0) {
    if (errno != EINTR) wl_fail("%s: waitid(%s, WNOWAIT): %s", wl_tree_role_, role, wl_errstr());
  }
}

// After go: `pid` must be a zombie child of the caller, and reaping it must give `want_status`.
static void expect_zombie(pid_t pid, const char* role, int want_status) {
  pid_t parent = 0;
  if (!wl_tree_wait_zombie(pid, 2000)) {
    char state = wl_tree_proc_state(pid, NULL);
    wl_fail("%s: %s (pid %d) is not a zombie after go (state '%c')", wl_tree_role_, role, (int)pid, state ? state : '-');
  }
  wl_tree_proc_state(pid, &parent);
  if (parent != getpid()) wl_fail("%s: zombie %s (pid %d) has parent %d, want %d", wl_tree_role_, role, (int)pid, (int)parent, (int)getpid());
  int status = 0;
  pid_t r;
  while ((r = waitpid(pid, &status, WNOHANG)) < 0 && errno == EINTR) {
  }
  if (r != pid) wl_fail("%s: waitpid(%s = %d, WNOHANG) returned %d (%s)", wl_tree_role_, role, (int)pid, (int)r, r < 0 ? wl_errstr() : "not ended");
  if (status != want_status) {
    char got[64], want[64];
    wl_fail("%s: %s (pid %d) %s, want %s", wl_tree_role_, role, (int)pid, wl_tree_describe_status(status, got, sizeof got),
            wl_tree_describe_status(want_status, want, sizeof want));
  }
}

static void run_l(void) {
  wl_tree_set_role("L");
  struct wl_tree_ids ids = wl_tree_own_ids();
  pid_t z3 = WL_SYS(fork());
  if (z3 == 0) _exit(3);
  wait_ended_unreaped(z3, "Z3");
  wl_tree_announce_pid("Z3", z3);
  wl_tree_announce();
  wl_wait_go();
  wl_tree_watchdog();
  wl_tree_check_own_ids(&ids);
  expect_zombie(z3, "Z3", 3 << 8);
  wl_tree_expect_no_children();
  _exit(0);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  struct wl_tree_ids ids = wl_tree_own_ids();
  pid_t z7 = WL_SYS(fork());
  if (z7 == 0) _exit(7);
  pid_t zt = WL_SYS(fork());
  if (zt == 0) {
    for (;;) pause();
  }
  pid_t zk = WL_SYS(fork());
  if (zk == 0) {
    for (;;) pause();
  }
  pid_t l = WL_SYS(fork());
  if (l == 0) run_l();
  WL_SYS(kill(zt, SIGTERM));
  WL_SYS(kill(zk, SIGKILL));
  wait_ended_unreaped(z7, "Z7");
  wait_ended_unreaped(zt, "ZT");
  wait_ended_unreaped(zk, "ZK");
  wl_tree_announce_pid("Z7", z7);
  wl_tree_announce_pid("ZT", zt);
  wl_tree_announce_pid("ZK", zk);
  wl_tree_announce();
  wl_tree_wait_announced("L");
  wl_tree_wait_announced("Z3");
  const char line[] = "tree_zombie: set up, 4 zombies\n";
  wl_tree_write_all(1, line, sizeof line - 1, "stdout");
  wl_signal_ready();

  wl_wait_go();
  wl_tree_watchdog();
  wl_tree_check_own_ids(&ids);
  expect_zombie(z7, "Z7", 7 << 8);
  expect_zombie(zt, "ZT", SIGTERM);
  expect_zombie(zk, "ZK", SIGKILL);
  wl_tree_expect_child_ok(l, "L");
  wl_tree_expect_no_children();
  wl_pass();
}
