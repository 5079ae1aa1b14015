// A process group whose leader has exited, as a shell leaves a pipeline whose first stage
// ended: root forks A, B and C, makes A the leader of a new group and puts B and C in it;
// A exits and root reaps it. After go B and C must still share that group (its id is A's
// old pid, which no process has), and a signal sent to the group must reach both.
#include "wl_tree.h"

static volatile sig_atomic_t got_usr1 = 0;
static void on_usr1(int sig) {
  (void)sig;
  got_usr1 = 1;
}

static void member(const char* role, pid_t group) {
  wl_tree_set_role(role);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sigemptyset(&sa.sa_mask);
  WL_SYS(sigaction(SIGUSR1, &sa, NULL));
  // Wait until root has put us into the group.
  for (int i = 0; i < 5000 && getpgid(0) != group; ++i) wl_sleep_ms(1);
  WL_CHECK(getpgid(0) == group, "%s: group %d, want %d", role, (int)getpgid(0), (int)group);
  wl_tree_announce();
  wl_wait_go();
  wl_tree_watchdog();
  WL_CHECK(getpgid(0) == group, "%s: group %d after go, want %d", role, (int)getpgid(0), (int)group);
  while (!got_usr1) pause();
  _exit(0);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  pid_t a = WL_SYS(fork());
  if (a == 0) {
    for (;;) pause();  // killed below once the group is formed
  }
  WL_SYS(setpgid(a, a));
  pid_t b = WL_SYS(fork());
  if (b == 0) member("B", a);
  pid_t c = WL_SYS(fork());
  if (c == 0) member("C", a);
  WL_SYS(setpgid(b, a));
  WL_SYS(setpgid(c, a));
  wl_tree_wait_announced("B");
  wl_tree_wait_announced("C");
  WL_SYS(kill(a, SIGKILL));
  int status;
  WL_SYS(waitpid(a, &status, 0));
  wl_tree_announce();
  wl_signal_ready();
  wl_wait_go();
  wl_tree_watchdog();
  WL_CHECK(getpgid(b) == a && getpgid(c) == a, "B and C are in groups %d and %d, want %d", (int)getpgid(b),
           (int)getpgid(c), (int)a);
  WL_CHECK(kill(a, 0) < 0 && errno == ESRCH, "a process %d exists; the group's leader should be gone", (int)a);
  WL_SYS(kill(-a, SIGUSR1));
  wl_tree_expect_child_ok(b, "B");
  wl_tree_expect_child_ok(c, "C");
  wl_tree_expect_no_children();
  wl_pass();
}
