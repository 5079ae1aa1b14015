// A child stopped by a job-control signal, its stop not yet collected by its parent. Child S moves to
// its own process group (so it is not orphaned: root, its parent, is in another group of the same
// session) and raises SIGTSTP. Root sees the stop with waitid(WSTOPPED | WNOWAIT), which leaves it to
// be collected. After restore: S is still stopped ('T' in /proc/S/stat), root can still collect the
// stop (waitid WSTOPPED | WNOHANG reports CLD_STOPPED, SIGTSTP), SIGCONT makes waitid(WCONTINUED)
// report CLD_CONTINUED, and S, running again, reports over a pipe that it continued after go.
#include "wl_tree.h"

static void expect_stopped(pid_t s, int flags, const char* when) {
  siginfo_t si;
  memset(&si, 0, sizeof si);
  WL_SYS(waitid(P_PID, (id_t)s, &si, WSTOPPED | flags));
  WL_CHECK(si.si_pid == s, "%s: waitid(WSTOPPED) reports no stop of S (si_pid %d)", when, (int)si.si_pid);
  WL_CHECK(si.si_code == CLD_STOPPED && si.si_status == SIGTSTP,
           "%s: waitid(WSTOPPED) reports si_code %d si_status %d, want CLD_STOPPED (%d) by SIGTSTP (%d)", when,
           si.si_code, si.si_status, CLD_STOPPED, SIGTSTP);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  int p[2], q[2];  // p: S's report to root; q: held by root so that S stays until it is collected
  WL_SYS(pipe2(p, O_CLOEXEC));
  WL_SYS(pipe2(q, O_CLOEXEC));
  pid_t s = WL_SYS(fork());
  if (s == 0) {
    wl_tree_set_role("S");
    close(p[0]);
    close(q[1]);
    WL_SYS(setpgid(0, 0));
    wl_tree_announce();
    WL_SYS(raise(SIGTSTP));
    // Runs only once root has sent SIGCONT, which it does after go.
    wl_tree_phase("reporting");
    const char* msg = wl_go_exists() ? "continued after go" : "continued before go";
    wl_tree_write_all(p[1], msg, strlen(msg), "report pipe");
    close(p[1]);  // root reads the report to its end
    // Stay until root has seen the continue: waitid(WCONTINUED) finds no child once S has exited.
    char c;
    while (read(q[0], &c, 1) > 0) {
    }
    _exit(0);
  }
  close(p[1]);
  close(q[0]);
  wl_tree_wait_announced("S");
  siginfo_t si;
  memset(&si, 0, sizeof si);
  WL_SYS(waitid(P_PID, (id_t)s, &si, WSTOPPED | WNOWAIT));  // blocks until S stops
  expect_stopped(s, WNOWAIT, "before the checkpoint");
  WL_CHECK(wl_tree_proc_state(s, NULL) == 'T', "before the checkpoint: S is in state '%c', want T",
           wl_tree_proc_state(s, NULL));

  wl_tree_root_ready_after("S");

  char st = wl_tree_proc_state(s, NULL);
  WL_CHECK(st == 'T', "after restore: S (pid %d) is in state '%c', want T (stopped)", (int)s, st ? st : '?');
  expect_stopped(s, WNOHANG, "after restore");
  WL_SYS(kill(s, SIGCONT));
  memset(&si, 0, sizeof si);
  wl_tree_phase("waiting for S to continue");
  WL_SYS(waitid(P_PID, (id_t)s, &si, WCONTINUED));
  WL_CHECK(si.si_code == CLD_CONTINUED, "after SIGCONT: waitid(WCONTINUED) si_code %d, want CLD_CONTINUED", si.si_code);
  char msg[64] = {0};
  wl_tree_phase("reading S's report");
  wl_tree_read_full(p[0], msg, sizeof msg - 1, "report pipe");
  WL_CHECK(strcmp(msg, "continued after go") == 0, "S reports '%s', want 'continued after go'", msg);
  close(q[1]);
  wl_tree_expect_child_ok(s, "S");
  wl_pass();
}
