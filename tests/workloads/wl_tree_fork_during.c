// A tree that changes while it is checkpointed: root keeps forking short-lived children (each sleeps
// about 50 ms and exits with a status derived from its sequence number) and reaps them as they end,
// without pausing for the checkpoint. The dump has to freeze a tree whose members appear and exit
// meanwhile, and give a consistent image: children that were running come back running, children
// that had exited come back as zombies with their status, and none is lost or duplicated.
//
// After go, root forks a few more, then stops, reaps everything and checks its bookkeeping: every
// child it forked was reaped exactly once, with the status that child was told to exit with, and
// nothing else is left. Each child also checks that its parent is still root when it exits.
#include "wl_tree.h"

#include <stdlib.h>

#define MAX_ALIVE 8
#define FORKS_BEFORE_READY 20
#define FORKS_AFTER_GO 20
#define MAX_FORKS 100000

struct child {
  pid_t pid;
  int code;
};

static struct child g_outstanding[MAX_ALIVE];
static int g_n_outstanding;
static long g_forked, g_reaped;

static int code_of(long seq) { return (int)(seq % 100) + 1; }

static void fork_one(pid_t root) {
  long seq = g_forked;
  pid_t pid = WL_SYS(fork());
  if (pid == 0) {
    wl_sleep_ms(50);
    _exit(getppid() == root ? code_of(seq) : 200);
  }
  g_outstanding[g_n_outstanding++] = (struct child){pid, code_of(seq)};
  g_forked++;
}

// Reaps ended children (all of them, blocking, with `block`); checks each against the bookkeeping.
static void reap(int block) {
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, block ? 0 : WNOHANG);
    if (pid < 0 && errno == EINTR) continue;
    if (pid < 0 && errno == ECHILD && g_n_outstanding == 0) return;
    if (pid < 0) wl_fail("root: waitpid(-1): %s with %d children outstanding", wl_errstr(), g_n_outstanding);
    if (pid == 0) return;
    int i = 0;
    while (i < g_n_outstanding && g_outstanding[i].pid != pid) i++;
    if (i == g_n_outstanding) wl_fail("root: reaped pid %d, which it never forked (or reaped twice)", (int)pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != g_outstanding[i].code) {
      char buf[64];
      wl_fail("root: child %d %s, want exited %d%s", (int)pid, wl_tree_describe_status(status, buf, sizeof buf),
              g_outstanding[i].code, WIFEXITED(status) && WEXITSTATUS(status) == 200 ? " (its parent changed)" : "");
    }
    g_outstanding[i] = g_outstanding[--g_n_outstanding];
    g_reaped++;
  }
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  struct wl_tree_ids ids = wl_tree_own_ids();
  pid_t root = getpid();
  wl_tree_announce();
  int ready = 0;
  long forks_at_go = -1;
  while (forks_at_go < 0 || g_forked < forks_at_go + FORKS_AFTER_GO) {
    if (g_forked > MAX_FORKS) wl_fail("root: no go after %d forks", MAX_FORKS);
    reap(0);
    if (g_n_outstanding < MAX_ALIVE) fork_one(root);
    if (!ready && g_forked >= FORKS_BEFORE_READY) {
      const char line[] = "tree_fork_during: forking\n";
      wl_tree_write_all(1, line, sizeof line - 1, "stdout");
      wl_signal_ready();
      ready = 1;
    }
    if (ready && forks_at_go < 0 && wl_go_exists()) {
      forks_at_go = g_forked;
      wl_tree_watchdog();
      wl_tree_check_own_ids(&ids);
      wl_tree_phase("forking after go");
    }
    wl_sleep_ms(5);
  }
  wl_tree_phase("reaping the last children");
  reap(1);
  if (g_reaped != g_forked) wl_fail("root: forked %ld children but reaped %ld", g_forked, g_reaped);
  wl_tree_expect_no_children();
  wl_pass();
}
