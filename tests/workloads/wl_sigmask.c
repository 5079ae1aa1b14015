// Blocked-signal masks are per thread: the main thread and three threads each block a different set
// (one of them everything that can be blocked, one nothing) and check their own mask after restore.
// A signal sent to the process afterwards must be taken by the one thread that does not block it.
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "wl_common.h"

#define kThreads 3

static volatile int g_go;
static volatile int g_parked[kThreads];
static volatile pid_t g_handled_by;
static volatile pid_t g_tids[kThreads];

static void OnUsr2(int sig) {
  (void)sig;
  g_handled_by = wl_gettid();
}

static void MaskFor(int index, sigset_t* set) {
  sigemptyset(set);
  switch (index) {
    case 0:  // everything
      sigfillset(set);
      break;
    case 1:  // a few, including realtime signals
      sigaddset(set, SIGUSR1);
      sigaddset(set, SIGUSR2);
      sigaddset(set, SIGHUP);
      sigaddset(set, SIGRTMIN + 3);
      sigaddset(set, SIGRTMAX);
      break;
    case 2:  // nothing
      break;
    default:  // main thread
      sigaddset(set, SIGUSR1);
      sigaddset(set, SIGUSR2);
      sigaddset(set, SIGTERM);
      sigaddset(set, SIGRTMIN + 5);
      break;
  }
}

static void CheckMask(const char* who, int index) {
  sigset_t want, have;
  MaskFor(index, &want);
  // Compare through a round trip of sigprocmask, which drops SIGKILL/SIGSTOP the same way for both.
  sigset_t saved;
  pthread_sigmask(SIG_SETMASK, &want, &saved);
  pthread_sigmask(SIG_SETMASK, &saved, &want);
  pthread_sigmask(SIG_BLOCK, NULL, &have);
  for (int s = 1; s < NSIG; s++) {
    if (sigismember(&want, s) != sigismember(&have, s)) {
      wl_fail("%s: signal %d is %s, want %s", who, s, sigismember(&have, s) ? "blocked" : "unblocked",
              sigismember(&want, s) ? "blocked" : "unblocked");
    }
  }
}

static void* ThreadMain(void* arg) {
  int index = (int)(long)arg;
  sigset_t set;
  MaskFor(index, &set);
  pthread_sigmask(SIG_SETMASK, &set, NULL);
  g_tids[index] = wl_gettid();
  g_parked[index] = 1;
  while (!g_go) wl_sleep_ms(5);
  char who[32];
  snprintf(who, sizeof who, "thread %d", index);
  CheckMask(who, index);
  return NULL;
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = OnUsr2;
  WL_SYS(sigaction(SIGUSR2, &sa, NULL));

  // Threads inherit the creator's mask; start them with everything blocked so none takes a signal
  // before it has set its own mask.
  sigset_t all, mine;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, NULL);
  pthread_t threads[kThreads];
  for (int i = 0; i < kThreads; i++) {
    int rc = pthread_create(&threads[i], NULL, ThreadMain, (void*)(long)i);
    WL_CHECK(rc == 0, "pthread_create: %s", strerror(rc));
  }
  MaskFor(-1, &mine);
  pthread_sigmask(SIG_SETMASK, &mine, NULL);
  for (int i = 0; i < kThreads; i++) {
    while (!g_parked[i]) wl_sleep_ms(1);
  }
  wl_signal_ready();
  wl_wait_go();
  CheckMask("main thread", -1);

  // Thread 2 is the only one that does not block SIGUSR2.
  WL_SYS(kill(getpid(), SIGUSR2));
  for (int i = 0; i < 2000 && g_handled_by == 0; i++) wl_sleep_ms(1);
  WL_CHECK(g_handled_by == g_tids[2], "SIGUSR2 sent to the process was handled by tid %d, want %d",
           (int)g_handled_by, (int)g_tids[2]);

  g_go = 1;
  for (int i = 0; i < kThreads; i++) pthread_join(threads[i], NULL);
  CheckMask("main thread", -1);
  wl_pass();
}
