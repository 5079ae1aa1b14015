// pidfds. Root holds a non-blocking pidfd of its child C (pidfd_open), a dup of it, and a pidfd of a
// child D that has exited and been reaped. After restore: the pidfd names C (fdinfo "Pid:" is C's pid)
// and keeps O_NONBLOCK; it is not readable while C lives; pidfd_send_signal through it reaches C;
// once C exits it becomes readable and waitid(P_PIDFD) collects C's status through the dup. D's
// pidfd names no process (Pid: -1) and pidfd_send_signal through it fails ESRCH.
#include "wl_tree.h"

#include <poll.h>
#include <stdlib.h>
#include <sys/syscall.h>

#ifndef PIDFD_NONBLOCK
#define PIDFD_NONBLOCK O_NONBLOCK
#endif
#ifndef P_PIDFD
#define P_PIDFD 3
#endif

static volatile sig_atomic_t g_usr1;
static void on_usr1(int sig) { (void)sig; g_usr1 = 1; }

static int fdinfo_pid(int fd) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
  WL_CHECK(wl_read_file(path, buf, sizeof buf) > 0, "read %s: %s", path, wl_errstr());
  const char* p = strstr(buf, "\nPid:");
  WL_CHECK(p != NULL, "%s has no Pid: line", path);
  return atoi(p + 5);
}

static void check(int pfd, int pfd_dup, int dead, pid_t c, const char* when) {
  WL_CHECK(fdinfo_pid(pfd) == c, "%s: the pidfd names pid %d, want C (%d)", when, fdinfo_pid(pfd), (int)c);
  WL_CHECK(fdinfo_pid(pfd_dup) == c, "%s: the pidfd's dup names pid %d, want C (%d)", when, fdinfo_pid(pfd_dup), (int)c);
  WL_CHECK(fcntl(pfd, F_GETFL) & O_NONBLOCK, "%s: the pidfd lost O_NONBLOCK", when);
  struct pollfd p = {.fd = pfd, .events = POLLIN};
  WL_CHECK(poll(&p, 1, 0) == 0, "%s: the pidfd of C (alive) is readable", when);
  WL_CHECK(fdinfo_pid(dead) == -1, "%s: the pidfd of the reaped D names pid %d, want -1", when, fdinfo_pid(dead));
  errno = 0;
  WL_CHECK(syscall(SYS_pidfd_send_signal, dead, 0, NULL, 0) == -1 && errno == ESRCH,
           "%s: pidfd_send_signal through D's pidfd: %s, want ESRCH", when, errno ? wl_errstr() : "succeeded");
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  int p[2];
  WL_SYS(pipe2(p, O_CLOEXEC));
  pid_t c = WL_SYS(fork());
  if (c == 0) {
    wl_tree_set_role("C");
    close(p[0]);
    signal(SIGUSR1, on_usr1);
    wl_tree_announce();
    wl_wait_go();
    for (int i = 0; i < 500 && !g_usr1; i++) wl_sleep_ms(10);
    wl_tree_write_all(p[1], g_usr1 ? "Y" : "N", 1, "report pipe");
    _exit(g_usr1 ? 7 : 1);
  }
  close(p[1]);
  pid_t d = WL_SYS(fork());
  if (d == 0) _exit(0);
  int dead = (int)WL_SYS(syscall(SYS_pidfd_open, d, 0));
  WL_SYS(waitpid(d, NULL, 0));
  int pfd = (int)WL_SYS(syscall(SYS_pidfd_open, c, PIDFD_NONBLOCK));
  int pfd_dup = WL_SYS(dup(pfd));
  wl_tree_wait_announced("C");
  check(pfd, pfd_dup, dead, c, "before the checkpoint");

  wl_tree_root_ready_after("C");

  check(pfd, pfd_dup, dead, c, "after restore");
  WL_SYS(syscall(SYS_pidfd_send_signal, pfd, SIGUSR1, NULL, 0));
  char r = 0;
  wl_tree_read_full(p[0], &r, 1, "report pipe");
  WL_CHECK(r == 'Y', "C did not get the signal sent through the pidfd");
  struct pollfd pp = {.fd = pfd, .events = POLLIN};
  WL_CHECK(poll(&pp, 1, 5000) == 1, "the pidfd did not become readable when C exited");
  siginfo_t si;
  memset(&si, 0, sizeof si);
  WL_SYS(waitid(P_PIDFD, (id_t)pfd_dup, &si, WEXITED));
  WL_CHECK(si.si_pid == c && si.si_code == CLD_EXITED && si.si_status == 7,
           "waitid(P_PIDFD) reports pid %d code %d status %d, want C exited 7", (int)si.si_pid, si.si_code, si.si_status);
  wl_pass();
}
