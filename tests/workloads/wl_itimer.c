// Interval timers: ITIMER_REAL fires SIGALRM every 100 ms into a handler that counts ticks, and
// ITIMER_PROF (CPU-time based, 50 ms interval, not expected to fire much while the workload sleeps)
// is armed too. After restore getitimer must report the same intervals and a remaining value no
// larger than the interval, and SIGALRM ticks must keep arriving at about the same rate.
#define _GNU_SOURCE
#include <signal.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "wl_common.h"

static volatile sig_atomic_t g_ticks;
static volatile sig_atomic_t g_prof_ticks;

static void OnAlarm(int sig) {
  (void)sig;
  g_ticks++;
}

static void OnProf(int sig) {
  (void)sig;
  g_prof_ticks++;
}

static long Usec(struct timeval tv) { return tv.tv_sec * 1000000L + tv.tv_usec; }

static void CheckTimer(int which, long interval_us, const char* name) {
  struct itimerval now;
  WL_SYS(getitimer(which, &now));
  if (Usec(now.it_interval) != interval_us) wl_fail("%s interval %ld us, want %ld", name, Usec(now.it_interval), interval_us);
  // CPU-time timers count in scheduler ticks, so allow one tick (at most 10 ms) of rounding.
  if (Usec(now.it_value) <= 0 || Usec(now.it_value) > interval_us + 10000) {
    wl_fail("%s remaining %ld us, want in (0, %ld]", name, Usec(now.it_value), interval_us + 10000);
  }
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = OnAlarm;
  sa.sa_flags = SA_RESTART;
  WL_SYS(sigaction(SIGALRM, &sa, NULL));
  sa.sa_handler = OnProf;
  WL_SYS(sigaction(SIGPROF, &sa, NULL));
  struct itimerval real = {{0, 100000}, {0, 100000}};
  struct itimerval prof = {{0, 50000}, {0, 50000}};
  WL_SYS(setitimer(ITIMER_REAL, &real, NULL));
  WL_SYS(setitimer(ITIMER_PROF, &prof, NULL));
  int64_t start = wl_now_ns(CLOCK_MONOTONIC);
  while (g_ticks < 3) {
    WL_CHECK(wl_now_ns(CLOCK_MONOTONIC) - start < 2000000000, "no SIGALRM ticks before the checkpoint");
    wl_sleep_ms(10);
  }

  wl_signal_ready();
  wl_wait_go();

  CheckTimer(ITIMER_REAL, 100000, "ITIMER_REAL");
  CheckTimer(ITIMER_PROF, 50000, "ITIMER_PROF");
  // Ticks keep coming: at least 5 within 1 s, and not a flood (at most ~12 + slack).
  sig_atomic_t base = g_ticks;
  int64_t t0 = wl_now_ns(CLOCK_MONOTONIC);
  while (g_ticks - base < 5) {
    WL_CHECK(wl_now_ns(CLOCK_MONOTONIC) - t0 < 1000000000, "only %d SIGALRM ticks in 1 s after restore", (int)(g_ticks - base));
    wl_sleep_ms(10);
  }
  int64_t elapsed_ms = (wl_now_ns(CLOCK_MONOTONIC) - t0) / 1000000;
  WL_CHECK(elapsed_ms >= 250, "5 ticks of a 100 ms timer came in %lld ms", (long long)elapsed_ms);
  struct itimerval off = {{0, 0}, {0, 0}};
  WL_SYS(setitimer(ITIMER_REAL, &off, NULL));
  WL_SYS(setitimer(ITIMER_PROF, &off, NULL));
  wl_pass();
}
