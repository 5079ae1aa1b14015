// POSIX timers: four timers are created and one deleted, so the survivors have non-consecutive
// kernel ids: A (CLOCK_MONOTONIC, 100 ms period, SIGRTMIN+1 with sival 0xA11CE), C (CLOCK_REALTIME,
// one-shot in 60 s, never expected to fire), D (CLOCK_MONOTONIC, 150 ms period, SIGEV_THREAD_ID to a
// particular thread with SIGRTMIN+2 and sival 0xD0D0) and E (created, never armed). After restore the
// same timer_t ids must work with timer_gettime (same intervals, sane remaining times; E disarmed),
// A's ticks must keep arriving with its sival and si_timerid, and D's must arrive in its thread.
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "wl_common.h"

#ifndef sigev_notify_thread_id
#define sigev_notify_thread_id _sigev_un._tid
#endif

static volatile int g_a_ticks, g_d_ticks, g_bad;
static volatile pid_t g_d_thread_tid;
static timer_t g_a, g_b, g_c, g_d, g_e;
static int g_a_kernel_id;

static void OnTimer(int sig, siginfo_t* info, void* ctx) {
  (void)ctx;
  if (info->si_code != SI_TIMER) {
    g_bad = 1;
  } else if (sig == SIGRTMIN + 1 && info->si_value.sival_int == 0xA11CE && info->si_timerid == g_a_kernel_id) {
    g_a_ticks++;
  } else if (sig == SIGRTMIN + 2 && info->si_value.sival_int == 0xD0D0 && wl_gettid() == g_d_thread_tid) {
    g_d_ticks++;
  } else {
    g_bad = 2;
  }
}

static volatile int g_go;
static volatile int g_parked;

static void* TargetThread(void* arg) {
  (void)arg;
  g_d_thread_tid = wl_gettid();
  g_parked = 1;
  while (!g_go) wl_sleep_ms(5);
  return NULL;
}

static timer_t Create(clockid_t clock, int sig, int value, pid_t thread) {
  struct sigevent ev;
  memset(&ev, 0, sizeof ev);
  ev.sigev_notify = thread ? SIGEV_THREAD_ID : SIGEV_SIGNAL;
  ev.sigev_signo = sig;
  ev.sigev_value.sival_int = value;
  if (thread) ev.sigev_notify_thread_id = thread;
  timer_t t;
  if (timer_create(clock, &ev, &t) != 0) wl_fail("timer_create: %s", wl_errstr());
  return t;
}

static void Arm(timer_t t, long value_ms, long interval_ms) {
  struct itimerspec its = {{interval_ms / 1000, (interval_ms % 1000) * 1000000}, {value_ms / 1000, (value_ms % 1000) * 1000000}};
  if (timer_settime(t, 0, &its, NULL) != 0) wl_fail("timer_settime: %s", wl_errstr());
}

static int64_t Ns(struct timespec ts) { return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec; }

static void Expect(timer_t t, const char* name, int64_t interval_ns, int64_t max_value_ns, int armed) {
  struct itimerspec its;
  if (timer_gettime(t, &its) != 0) wl_fail("timer_gettime(%s): %s", name, wl_errstr());
  if (Ns(its.it_interval) != interval_ns) wl_fail("%s: interval %lld ns, want %lld", name, (long long)Ns(its.it_interval), (long long)interval_ns);
  int64_t v = Ns(its.it_value);
  if (armed && (v <= 0 || v > max_value_ns)) wl_fail("%s: remaining %lld ns, want in (0, %lld]", name, (long long)v, (long long)max_value_ns);
  if (!armed && v != 0) wl_fail("%s: disarmed timer has %lld ns left", name, (long long)v);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = OnTimer;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  WL_SYS(sigaction(SIGRTMIN + 1, &sa, NULL));
  WL_SYS(sigaction(SIGRTMIN + 2, &sa, NULL));
  pthread_t thread;
  int rc = pthread_create(&thread, NULL, TargetThread, NULL);
  WL_CHECK(rc == 0, "pthread_create: %s", strerror(rc));
  while (!g_parked) wl_sleep_ms(1);
  // The main thread blocks D's signal so that only a wrong delivery target could make it run here.
  sigset_t d_sig;
  sigemptyset(&d_sig);
  sigaddset(&d_sig, SIGRTMIN + 2);
  pthread_sigmask(SIG_BLOCK, &d_sig, NULL);

  g_a = Create(CLOCK_MONOTONIC, SIGRTMIN + 1, 0xA11CE, 0);
  g_b = Create(CLOCK_MONOTONIC, SIGRTMIN + 1, 0xB, 0);
  g_c = Create(CLOCK_REALTIME, SIGRTMIN + 1, 0xC, 0);
  g_d = Create(CLOCK_MONOTONIC, SIGRTMIN + 2, 0xD0D0, g_d_thread_tid);
  g_e = Create(CLOCK_BOOTTIME, SIGRTMIN + 1, 0xE, 0);
  WL_SYS(timer_delete(g_b));
  g_a_kernel_id = (int)(intptr_t)g_a;  // glibc's timer_t is the kernel id
  Arm(g_a, 100, 100);
  Arm(g_c, 60000, 0);
  Arm(g_d, 150, 150);
  int64_t start = wl_now_ns(CLOCK_MONOTONIC);
  while (g_a_ticks < 2 || g_d_ticks < 1) {
    WL_CHECK(wl_now_ns(CLOCK_MONOTONIC) - start < 3000000000, "timers did not fire before the checkpoint");
    wl_sleep_ms(10);
  }
  WL_CHECK(!g_bad, "unexpected timer signal before the checkpoint (%d)", g_bad);

  wl_signal_ready();
  wl_wait_go();

  Expect(g_a, "timer A", 100000000, 100000000 + 10000000, 1);
  Expect(g_c, "timer C", 0, 60000000000, 1);
  Expect(g_d, "timer D", 150000000, 150000000 + 10000000, 1);
  Expect(g_e, "timer E", 0, 0, 0);
  struct itimerspec its;
  WL_CHECK(timer_gettime(g_b, &its) == -1, "deleted timer B exists again");
  WL_CHECK(timer_getoverrun(g_a) >= 0, "timer_getoverrun(A): %s", wl_errstr());

  int a0 = g_a_ticks, d0 = g_d_ticks;
  int64_t t0 = wl_now_ns(CLOCK_MONOTONIC);
  while (g_a_ticks - a0 < 4 || g_d_ticks - d0 < 3) {
    WL_CHECK(wl_now_ns(CLOCK_MONOTONIC) - t0 < 2000000000, "after restore only %d ticks of A and %d of D in 2 s",
             g_a_ticks - a0, g_d_ticks - d0);
    wl_sleep_ms(10);
  }
  WL_CHECK(!g_bad, "a timer signal arrived with the wrong sival, timer id or thread (%d)", g_bad);
  // The ids still name the kernel's timers: re-arming and deleting them works.
  Arm(g_e, 10000, 0);
  Expect(g_e, "timer E re-armed", 0, 10000000000, 1);
  WL_SYS(timer_delete(g_a));
  WL_SYS(timer_delete(g_c));
  WL_SYS(timer_delete(g_d));
  WL_SYS(timer_delete(g_e));
  g_go = 1;
  pthread_join(thread, NULL);
  wl_pass();
}
