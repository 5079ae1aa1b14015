// Sleeping in the kernel: three threads are inside a 2 s sleep when the checkpoint is taken: the raw
// nanosleep syscall, glibc's nanosleep (clock_nanosleep on CLOCK_REALTIME, relative) and
// clock_nanosleep on CLOCK_MONOTONIC with TIMER_ABSTIME. Relative sleeps keep their remaining time in
// kernel state that a restore may turn into EINTR; each thread loops the usual way
// (`while (nanosleep(&ts, &ts) == -1 && errno == EINTR)`). After restore each sleep must end with at
// least the requested time elapsed on CLOCK_MONOTONIC, any EINTR must leave a sane remaining time, and
// no call may fail otherwise.
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "wl_common.h"

#define kSleepNs 2000000000ll

enum Kind { kRawNanosleep, kGlibcNanosleep, kAbsClockNanosleep, kKinds };
static const char* const kKindNames[] = {"nanosleep syscall", "glibc nanosleep", "clock_nanosleep TIMER_ABSTIME"};
static const long kSyscalls[] = {SYS_nanosleep, SYS_clock_nanosleep, SYS_clock_nanosleep};

struct Result {
  volatile pid_t tid;
  int64_t elapsed_ns;
  int interruptions;
  char error[160];
};

static struct Result g_results[kKinds];

static int64_t Ns(struct timespec ts) { return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec; }

static void* Sleeper(void* arg) {
  int kind = (int)(long)arg;
  struct Result* r = &g_results[kind];
  struct timespec ts = {kSleepNs / 1000000000, kSleepNs % 1000000000};
  int64_t start = wl_now_ns(CLOCK_MONOTONIC);
  r->tid = wl_gettid();
  if (kind == kRawNanosleep) {
    while (syscall(SYS_nanosleep, &ts, &ts) == -1) {
      if (errno != EINTR) {
        snprintf(r->error, sizeof r->error, "failed: %s", wl_errstr());
        break;
      }
      r->interruptions++;
      if (Ns(ts) < 0 || Ns(ts) > kSleepNs) snprintf(r->error, sizeof r->error, "EINTR left %lld ns", (long long)Ns(ts));
    }
  } else if (kind == kGlibcNanosleep) {
    while (nanosleep(&ts, &ts) == -1) {
      if (errno != EINTR) {
        snprintf(r->error, sizeof r->error, "failed: %s", wl_errstr());
        break;
      }
      r->interruptions++;
      if (Ns(ts) < 0 || Ns(ts) > kSleepNs) snprintf(r->error, sizeof r->error, "EINTR left %lld ns", (long long)Ns(ts));
    }
  } else {
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += kSleepNs / 1000000000;
    int rc;
    while ((rc = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, NULL)) != 0) {
      if (rc != EINTR) {
        snprintf(r->error, sizeof r->error, "failed: %s", strerror(rc));
        break;
      }
      r->interruptions++;
    }
  }
  r->elapsed_ns = wl_now_ns(CLOCK_MONOTONIC) - start;
  return NULL;
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  pthread_t threads[kKinds];
  for (int k = 0; k < kKinds; k++) {
    int rc = pthread_create(&threads[k], NULL, Sleeper, (void*)(long)k);
    WL_CHECK(rc == 0, "pthread_create: %s", strerror(rc));
  }
  for (int k = 0; k < kKinds; k++) {
    while (!g_results[k].tid) wl_sleep_ms(1);
    wl_wait_in_syscall(g_results[k].tid, kSyscalls[k]);
  }
  wl_signal_ready();
  wl_wait_go();
  for (int k = 0; k < kKinds; k++) {
    pthread_join(threads[k], NULL);
    struct Result* r = &g_results[k];
    WL_CHECK(r->error[0] == '\0', "%s: %s", kKindNames[k], r->error);
    WL_CHECK(r->elapsed_ns >= kSleepNs, "%s: woke after %lld ms of %lld ms (interrupted %d times)", kKindNames[k],
             (long long)(r->elapsed_ns / 1000000), kSleepNs / 1000000, r->interruptions);
    WL_CHECK(r->elapsed_ns < kSleepNs + 60000000000ll, "%s: slept %lld ms", kKindNames[k], (long long)(r->elapsed_ns / 1000000));
  }
  wl_pass();
}
