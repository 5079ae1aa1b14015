// Signal dispositions: handlers installed with SA_SIGINFO, SA_RESTART, SA_ONSTACK (with sigaltstack),
// SA_NODEFER|SA_RESETHAND, SA_NOCLDWAIT, a non-empty sa_mask, and SIG_IGN for two signals. One
// handler is for SIGTRAP, the signal an injected call's trap would reset to SIG_DFL; the main
// thread waits for go blocked in read(), which must restart (not fail) after the checkpoint. After
// restore sigaction() must return the same struct for every signal, the alternate stacks (one in the
// main thread, another with SS_AUTODISARM in a second thread) must be the same, and raising each
// signal must run the right handler with the right flags in effect.
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "wl_common.h"

#ifndef SS_AUTODISARM
#define SS_AUTODISARM (1U << 31)
#endif

#define kAltSize (64 * 1024)

static unsigned char g_main_alt[kAltSize];
static unsigned char g_thread_alt[kAltSize];
static struct sigaction g_before[NSIG];
static int g_have_before[NSIG];

static volatile sig_atomic_t g_usr1_ok, g_usr2_ran, g_hup_on, g_int_ok, g_term_ok, g_rt_ok, g_chld_ran, g_trap_ran;
static unsigned char* volatile g_expected_alt;

static int OnStack(const void* p, const unsigned char* alt) {
  return (const unsigned char*)p >= alt && (const unsigned char*)p < alt + kAltSize;
}

static void OnUsr1(int sig, siginfo_t* info, void* ctx) {
  g_usr1_ok = sig == SIGUSR1 && info->si_signo == SIGUSR1 && info->si_code == SI_TKILL &&
              info->si_pid == getpid() && ctx != NULL;
}

static void OnUsr2(int sig) { g_usr2_ran = sig == SIGUSR2; }

static void OnTrap(int sig) { g_trap_ran = sig == SIGTRAP; }

static void OnHup(int sig) {
  volatile char here = 0;
  g_hup_on = sig == SIGHUP && OnStack((const void*)&here, g_expected_alt) ? 1 : -1;
}

static void OnInt(int sig) {
  sigset_t now;
  pthread_sigmask(SIG_BLOCK, NULL, &now);
  // sa_mask (SIGTERM, SIGRTMIN+1) and the signal itself (no SA_NODEFER) are blocked in the handler.
  g_int_ok = sig == SIGINT && sigismember(&now, SIGTERM) && sigismember(&now, SIGRTMIN + 1) &&
             sigismember(&now, SIGINT) && !sigismember(&now, SIGUSR1) ? 1 : -1;
}

static void OnTerm(int sig) {
  sigset_t now;
  pthread_sigmask(SIG_BLOCK, NULL, &now);
  g_term_ok = sig == SIGTERM && !sigismember(&now, SIGTERM) ? 1 : -1;  // SA_NODEFER
}

static void OnRt(int sig, siginfo_t* info, void* ctx) {
  (void)ctx;
  volatile char here = 0;
  g_rt_ok = sig == SIGRTMIN + 6 && info->si_code == SI_QUEUE && info->si_value.sival_int == 1234 &&
            OnStack((const void*)&here, g_main_alt) ? 1 : -1;
}

static void OnChld(int sig, siginfo_t* info, void* ctx) {
  (void)ctx;
  g_chld_ran = sig == SIGCHLD && info->si_code == CLD_EXITED ? 1 : -1;
}

static void Install(int sig, void (*handler)(int), void (*action)(int, siginfo_t*, void*), int flags,
                    const int* mask_sigs) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  if (action) {
    sa.sa_sigaction = action;
  } else {
    sa.sa_handler = handler;
  }
  sa.sa_flags = flags;
  sigemptyset(&sa.sa_mask);
  for (; mask_sigs && *mask_sigs; mask_sigs++) sigaddset(&sa.sa_mask, *mask_sigs);
  if (sigaction(sig, &sa, NULL) != 0) wl_fail("sigaction(%d): %s", sig, wl_errstr());
}

static void Snapshot(struct sigaction* out, int* have) {
  for (int sig = 1; sig < NSIG; sig++) {
    have[sig] = sigaction(sig, NULL, &out[sig]) == 0;
  }
}

static void CompareAll(void) {
  struct sigaction now[NSIG];
  int have[NSIG];
  Snapshot(now, have);
  for (int sig = 1; sig < NSIG; sig++) {
    if (have[sig] != g_have_before[sig]) wl_fail("sigaction(%d) availability changed", sig);
    if (!have[sig]) continue;
    const struct sigaction* a = &g_before[sig];
    const struct sigaction* b = &now[sig];
    if (a->sa_handler != b->sa_handler) wl_fail("signal %d: handler %p became %p", sig, (void*)a->sa_handler, (void*)b->sa_handler);
    if (a->sa_flags != b->sa_flags) wl_fail("signal %d: sa_flags %#x became %#x", sig, a->sa_flags, b->sa_flags);
    if (a->sa_restorer != b->sa_restorer) wl_fail("signal %d: sa_restorer changed", sig);
    for (int m = 1; m < NSIG; m++) {
      if (sigismember(&a->sa_mask, m) != sigismember(&b->sa_mask, m)) wl_fail("signal %d: sa_mask bit %d changed", sig, m);
    }
  }
}

static void CheckAltStack(const unsigned char* want_sp, int want_flags, const char* who) {
  stack_t ss;
  WL_SYS(sigaltstack(NULL, &ss));
  if (ss.ss_sp != want_sp || ss.ss_size != kAltSize || (ss.ss_flags & ~SS_ONSTACK) != want_flags) {
    wl_fail("%s: sigaltstack %p/%zu/%#x, want %p/%d/%#x", who, ss.ss_sp, ss.ss_size, ss.ss_flags, (void*)want_sp, kAltSize, want_flags);
  }
}

static volatile int g_go;
static volatile int g_parked;
static volatile int g_thread_result;  // 1 ok, -1 failed

static int g_wake[2];

// Writes to the main thread's pipe once go exists.
static void* Waker(void* arg) {
  (void)arg;
  wl_wait_go();
  if (write(g_wake[1], "g", 1) != 1) wl_fail("write wake pipe: %s", wl_errstr());
  return NULL;
}

static void* ThreadMain(void* arg) {
  (void)arg;
  stack_t ss = {.ss_sp = g_thread_alt, .ss_size = kAltSize, .ss_flags = SS_AUTODISARM};
  if (sigaltstack(&ss, NULL) != 0) wl_fail("thread sigaltstack: %s", wl_errstr());
  g_parked = 1;
  while (!g_go) wl_sleep_ms(5);
  CheckAltStack(g_thread_alt, (int)SS_AUTODISARM, "thread");
  g_expected_alt = g_thread_alt;
  g_hup_on = 0;
  pthread_kill(pthread_self(), SIGHUP);
  g_thread_result = g_hup_on == 1 ? 1 : -1;
  return NULL;
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  stack_t ss = {.ss_sp = g_main_alt, .ss_size = kAltSize, .ss_flags = 0};
  WL_SYS(sigaltstack(&ss, NULL));
  int int_mask[] = {SIGTERM, SIGRTMIN + 1, 0};
  Install(SIGUSR1, NULL, OnUsr1, SA_SIGINFO, NULL);
  Install(SIGUSR2, OnUsr2, NULL, SA_RESTART, NULL);
  Install(SIGHUP, OnHup, NULL, SA_ONSTACK, NULL);
  Install(SIGINT, OnInt, NULL, 0, int_mask);
  Install(SIGTERM, OnTerm, NULL, SA_NODEFER | SA_RESETHAND, NULL);
  Install(SIGRTMIN + 6, NULL, OnRt, SA_SIGINFO | SA_RESTART | SA_ONSTACK, NULL);
  Install(SIGCHLD, NULL, OnChld, SA_SIGINFO | SA_NOCLDWAIT | SA_NOCLDSTOP, NULL);
  Install(SIGPIPE, SIG_IGN, NULL, 0, NULL);
  Install(SIGQUIT, SIG_IGN, NULL, SA_RESTART, NULL);
  Install(SIGTRAP, OnTrap, NULL, SA_RESTART, NULL);
  Snapshot(g_before, g_have_before);

  pthread_t thread;
  int rc = pthread_create(&thread, NULL, ThreadMain, NULL);
  WL_CHECK(rc == 0, "pthread_create: %s", strerror(rc));
  while (!g_parked) wl_sleep_ms(1);

  WL_SYS(pipe(g_wake));
  pthread_t waker;
  rc = pthread_create(&waker, NULL, Waker, NULL);
  WL_CHECK(rc == 0, "pthread_create: %s", strerror(rc));

  wl_signal_ready();
  char wake = 0;
  ssize_t got = read(g_wake[0], &wake, 1);
  WL_CHECK(got == 1 && wake == 'g', "read() blocked across the checkpoint returned %zd (%s)", got,
           got < 0 ? wl_errstr() : "no error");
  pthread_join(waker, NULL);

  CompareAll();
  CheckAltStack(g_main_alt, 0, "main thread");

  raise(SIGUSR1);
  WL_CHECK(g_usr1_ok, "SA_SIGINFO handler for SIGUSR1 did not run with the right siginfo");
  raise(SIGUSR2);
  WL_CHECK(g_usr2_ran, "SIGUSR2 handler did not run");
  raise(SIGTRAP);
  WL_CHECK(g_trap_ran, "SIGTRAP handler did not run");
  g_expected_alt = g_main_alt;
  raise(SIGHUP);
  WL_CHECK(g_hup_on == 1, "SIGHUP handler did not run on the alternate stack");
  raise(SIGINT);
  WL_CHECK(g_int_ok == 1, "SIGINT handler ran without its sa_mask in effect");
  raise(SIGTERM);
  WL_CHECK(g_term_ok == 1, "SIGTERM handler ran with SIGTERM blocked (SA_NODEFER lost)");
  struct sigaction after_term;
  sigaction(SIGTERM, NULL, &after_term);
  WL_CHECK(after_term.sa_handler == SIG_DFL, "SIGTERM handler not reset (SA_RESETHAND lost)");
  union sigval v = {.sival_int = 1234};
  WL_SYS(sigqueue(getpid(), SIGRTMIN + 6, v));
  WL_CHECK(g_rt_ok == 1, "SIGRTMIN+6 handler did not run with its siginfo on the alternate stack");
  raise(SIGPIPE);
  raise(SIGQUIT);  // both ignored: still alive

  // SA_NOCLDWAIT: a child that exits leaves no zombie, so waitpid fails with ECHILD.
  pid_t child = fork();
  WL_CHECK(child >= 0, "fork: %s", wl_errstr());
  if (child == 0) _exit(3);
  int status;
  pid_t waited;
  while ((waited = waitpid(child, &status, 0)) == -1 && errno == EINTR) {
  }
  WL_CHECK(waited == -1 && errno == ECHILD, "waitpid found a zombie child: SA_NOCLDWAIT lost");
  for (int i = 0; i < 1000 && !g_chld_ran; i++) wl_sleep_ms(1);
  WL_CHECK(g_chld_ran == 1, "SIGCHLD handler did not run with CLD_EXITED");

  g_go = 1;
  pthread_join(thread, NULL);
  WL_CHECK(g_thread_result == 1, "thread's SIGHUP handler did not run on the thread's alternate stack");
  wl_pass();
}
