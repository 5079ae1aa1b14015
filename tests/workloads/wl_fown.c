// Signal-driven I/O settings of a descriptor: its owner (F_SETOWN / F_SETOWN_EX), the signal it
// sends (F_SETSIG) and O_ASYNC. Pipe P: read end owned by the process, F_SETSIG SIGRTMIN+1, O_ASYNC.
// Socketpair S: one end owned by thread T (F_OWNER_TID), F_SETSIG SIGRTMIN+2, O_ASYNC. Before the
// checkpoint and after restore the getters return the same values, and writing to the other end
// delivers the signal with si_fd naming the descriptor: SIGRTMIN+1 to the process (sigtimedwait in
// main), SIGRTMIN+2 to T itself (sigtimedwait in T; main finds nothing of it pending).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "wl_common.h"

static int p[2], s[2], to_t[2], from_t[2];
static pid_t t_tid;

static int wait_sig(int sig, siginfo_t* si) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  struct timespec ts = {2, 0};
  return sigtimedwait(&set, si, &ts);
}

static void* thread_main(void* arg) {
  (void)arg;
  t_tid = wl_gettid();
  char c;
  while (read(to_t[0], &c, 1) == 1) {  // one byte per test: wait for the signal, report si_fd
    siginfo_t si;
    memset(&si, 0, sizeof si);
    int r = wait_sig(SIGRTMIN + 2, &si);
    int report = r == SIGRTMIN + 2 ? si.si_fd : -1000 - errno;
    if (write(from_t[1], &report, sizeof report) != sizeof report) wl_fail("T: write report: %s", wl_errstr());
  }
  return NULL;
}

static void check(const char* when) {
  WL_CHECK(fcntl(p[0], F_GETOWN) == getpid(), "%s: P F_GETOWN %d, want %d", when, fcntl(p[0], F_GETOWN), (int)getpid());
  WL_CHECK(fcntl(p[0], F_GETSIG) == SIGRTMIN + 1, "%s: P F_GETSIG %d, want %d", when, fcntl(p[0], F_GETSIG), SIGRTMIN + 1);
  WL_CHECK(fcntl(p[0], F_GETFL) & O_ASYNC, "%s: P lost O_ASYNC", when);
  struct f_owner_ex ex;
  WL_SYS(fcntl(s[0], F_GETOWN_EX, &ex));
  WL_CHECK(ex.type == F_OWNER_TID && ex.pid == t_tid, "%s: S F_GETOWN_EX type %d pid %d, want F_OWNER_TID (%d) %d",
           when, ex.type, (int)ex.pid, F_OWNER_TID, (int)t_tid);
  WL_CHECK(fcntl(s[0], F_GETSIG) == SIGRTMIN + 2, "%s: S F_GETSIG %d, want %d", when, fcntl(s[0], F_GETSIG), SIGRTMIN + 2);
  WL_CHECK(fcntl(s[0], F_GETFL) & O_ASYNC, "%s: S lost O_ASYNC", when);

  siginfo_t si;
  memset(&si, 0, sizeof si);
  WL_SYS(write(p[1], "x", 1));
  int r = wait_sig(SIGRTMIN + 1, &si);
  WL_CHECK(r == SIGRTMIN + 1, "%s: no SIGRTMIN+1 after a write into P (%s)", when, r < 0 ? wl_errstr() : "other");
  WL_CHECK(si.si_fd == p[0], "%s: SIGRTMIN+1 names fd %d, want %d", when, si.si_fd, p[0]);
  char c;
  WL_SYS(read(p[0], &c, 1));

  WL_SYS(write(to_t[1], "t", 1));
  WL_SYS(write(s[1], "y", 1));
  int report;
  WL_CHECK(read(from_t[0], &report, sizeof report) == sizeof report, "%s: no report from T", when);
  sigset_t pend;
  sigpending(&pend);
  WL_CHECK(report == s[0], "%s: T got %s (%d), want SIGRTMIN+2 for fd %d%s", when,
           report <= -1000 ? "no SIGRTMIN+2" : "SIGRTMIN+2 for fd", report, s[0],
           sigismember(&pend, SIGRTMIN + 2) ? " (it is pending for main instead)" : "");
  WL_SYS(read(s[0], &c, 1));
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGRTMIN + 1);
  sigaddset(&set, SIGRTMIN + 2);
  WL_SYS(sigprocmask(SIG_BLOCK, &set, NULL));
  WL_SYS(pipe2(p, O_CLOEXEC));
  WL_SYS(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s));
  WL_SYS(pipe2(to_t, O_CLOEXEC));
  WL_SYS(pipe2(from_t, O_CLOEXEC));
  pthread_t th;
  WL_CHECK(pthread_create(&th, NULL, thread_main, NULL) == 0, "pthread_create");
  while (__atomic_load_n(&t_tid, __ATOMIC_SEQ_CST) == 0) wl_sleep_ms(1);

  WL_SYS(fcntl(p[0], F_SETOWN, getpid()));
  WL_SYS(fcntl(p[0], F_SETSIG, SIGRTMIN + 1));
  WL_SYS(fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) | O_ASYNC));
  struct f_owner_ex ex = {F_OWNER_TID, t_tid};
  WL_SYS(fcntl(s[0], F_SETOWN_EX, &ex));
  WL_SYS(fcntl(s[0], F_SETSIG, SIGRTMIN + 2));
  WL_SYS(fcntl(s[0], F_SETFL, fcntl(s[0], F_GETFL) | O_ASYNC));
  check("before the checkpoint");

  wl_signal_ready();
  wl_wait_go();

  check("after restore");
  wl_pass();
}
