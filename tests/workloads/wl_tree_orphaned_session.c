// A session whose leader has exited, as after `setsid sh -c 'worker & exit'`: root, a child
// subreaper, forks L; L starts a new session and forks M, then exits, so M is re-parented
// to root and stays in L's session and group, whose ids no process has any more. After go
// M must still be in that session and group, and still root's child.
#include "wl_tree.h"

#include <stdlib.h>
#include <sys/prctl.h>

int main(int argc, char** argv) {
  wl_init(argc, argv);
  WL_SYS(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0));
  pid_t root = getpid();
  pid_t l = WL_SYS(fork());
  if (l == 0) {
    WL_SYS(setsid());
    pid_t m = WL_SYS(fork());
    if (m == 0) {
      wl_tree_set_role("M");
      pid_t session = getsid(0);
      for (int i = 0; i < 5000 && getppid() != root; ++i) wl_sleep_ms(1);  // L's exit re-parents us
      WL_CHECK(getppid() == root, "M: parent %d, want root %d", (int)getppid(), (int)root);
      wl_tree_announce();
      wl_wait_go();
      wl_tree_watchdog();
      WL_CHECK(getsid(0) == session && getpgid(0) == session, "M: session %d group %d after go, want %d",
               (int)getsid(0), (int)getpgid(0), (int)session);
      WL_CHECK(getppid() == root, "M: parent %d after go, want root %d", (int)getppid(), (int)root);
      WL_CHECK(kill(session, 0) < 0 && errno == ESRCH, "M: the session's leader %d exists", (int)session);
      _exit(0);
    }
    _exit(0);
  }
  int status;
  WL_SYS(waitpid(l, &status, 0));
  wl_tree_wait_announced("M");
  pid_t m = 0;
  {
    char path[600], buf[32] = {0};
    wl_path(path, sizeof path, "proc-M");
    int f = WL_SYS(open(path, O_RDONLY | O_CLOEXEC));
    WL_SYS(read(f, buf, sizeof buf - 1));
    close(f);
    m = atoi(buf);
  }
  wl_tree_announce();
  wl_signal_ready();
  wl_wait_go();
  wl_tree_watchdog();
  WL_CHECK(getsid(m) == l, "M is in session %d, want %d", (int)getsid(m), (int)l);
  wl_tree_expect_child_ok(m, "M");
  wl_tree_expect_no_children();
  wl_pass();
}
