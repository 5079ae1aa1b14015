// A thread asleep in ppoll() with a temporary signal mask when the checkpoint is taken. The
// thread blocks SIGUSR1 for good, then waits in ppoll(NULL, 0, 30 s, mask without SIGUSR1), so
// that only in that call SIGUSR1 is let in. The kernel keeps the thread's own mask aside
// while it waits and puts it back when ppoll returns. After go, the main thread sends SIGUSR1
// to it: the handler must run (the temporary mask still holds in the restarted call), ppoll
// must fail EINTR, and whenever ppoll returns the thread's mask must block SIGUSR1 again (its
// own mask came back, not the temporary one).
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "wl_common.h"

static volatile sig_atomic_t g_handled;
static volatile pid_t g_tid;
static volatile int g_result = -1;  // 0: every check passed
static char g_why[256];

static void on_usr1(int sig) {
  (void)sig;
  g_handled = 1;
}

static void* sleeper(void* arg) {
  (void)arg;
  sigset_t block, wait_mask, now;
  sigemptyset(&block);
  sigaddset(&block, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &block, NULL);
  pthread_sigmask(SIG_BLOCK, NULL, &wait_mask);
  sigdelset(&wait_mask, SIGUSR1);
  g_tid = wl_gettid();
  // A restore may make the call return EINTR without a signal (README: a thread asleep in a
  // syscall): then it is called again. Whenever it returns, the thread's own mask is back.
  for (int calls = 0; calls < 100; calls++) {
    struct timespec ts = {30, 0};
    int rc = ppoll(NULL, 0, &ts, &wait_mask);
    int err = errno;
    pthread_sigmask(SIG_BLOCK, NULL, &now);
    if (!sigismember(&now, SIGUSR1)) {
      snprintf(g_why, sizeof g_why, "after ppoll returned (%d, %s), SIGUSR1 is no longer blocked: the thread kept "
               "ppoll's temporary mask instead of its own", rc, strerror(err));
      return NULL;
    }
    if (rc != -1 || err != EINTR) {
      snprintf(g_why, sizeof g_why, "ppoll returned %d (%s), want -1 EINTR", rc, strerror(err));
      return NULL;
    }
    if (g_handled) {
      g_result = 0;
      return NULL;
    }
  }
  snprintf(g_why, sizeof g_why, "ppoll kept returning EINTR without the SIGUSR1 handler running");
  return NULL;
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sigemptyset(&sa.sa_mask);
  WL_SYS(sigaction(SIGUSR1, &sa, NULL));
  pthread_t t;
  WL_CHECK(pthread_create(&t, NULL, sleeper, NULL) == 0, "pthread_create");
  while (g_tid == 0) wl_sleep_ms(1);
  wl_wait_in_syscall(g_tid, SYS_ppoll);

  wl_signal_ready();
  wl_wait_go();

  WL_CHECK(syscall(SYS_tgkill, getpid(), g_tid, SIGUSR1) == 0, "tgkill: %s", wl_errstr());
  pthread_join(t, NULL);
  WL_CHECK(g_result == 0, "%s", g_why);
  wl_pass();
}
