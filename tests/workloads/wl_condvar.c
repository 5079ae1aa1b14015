// Condition variables (futex waits inside glibc): when the checkpoint is taken one thread is in
// pthread_cond_wait, one in pthread_cond_timedwait with a deadline 30 s away (CLOCK_MONOTONIC), and
// one in pthread_cond_timedwait with a deadline 1.5 s away that nobody will signal. After restore the
// main thread sets the predicate and broadcasts: the first two must wake with the predicate true and
// no timeout, within 5 s; the third must time out (ETIMEDOUT), and not before its deadline.
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>

#include "wl_common.h"

static pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond;
static pthread_cond_t g_lonely;  // never signalled
static int g_predicate;

enum Kind { kWait, kTimedWaitLong, kTimedWaitShort, kKinds };
static const char* const kKindNames[] = {"pthread_cond_wait", "pthread_cond_timedwait (30 s)",
                                         "pthread_cond_timedwait (1.5 s, unsignalled)"};

struct Result {
  volatile pid_t tid;
  int rc;
  int predicate;
  int64_t late_ns;  // for the short wait: how long after its deadline it returned (negative: early)
};

static struct Result g_results[kKinds];

static void* Waiter(void* arg) {
  int kind = (int)(long)arg;
  struct Result* r = &g_results[kind];
  struct timespec deadline;
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  if (kind == kTimedWaitLong) deadline.tv_sec += 30;
  if (kind == kTimedWaitShort) {
    deadline.tv_sec += 1;
    deadline.tv_nsec += 500000000;
    if (deadline.tv_nsec >= 1000000000) {
      deadline.tv_sec++;
      deadline.tv_nsec -= 1000000000;
    }
  }
  pthread_mutex_lock(&g_mutex);
  r->tid = wl_gettid();
  int rc = 0;
  if (kind == kTimedWaitShort) {
    // Spurious wakeups are allowed; loop until the deadline like a real program.
    while (rc == 0) rc = pthread_cond_timedwait(&g_lonely, &g_mutex, &deadline);
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    r->late_ns = (int64_t)(now.tv_sec - deadline.tv_sec) * 1000000000 + (now.tv_nsec - deadline.tv_nsec);
  } else {
    while (!g_predicate && rc == 0) {
      rc = kind == kWait ? pthread_cond_wait(&g_cond, &g_mutex) : pthread_cond_timedwait(&g_cond, &g_mutex, &deadline);
    }
  }
  r->rc = rc;
  r->predicate = g_predicate;
  pthread_mutex_unlock(&g_mutex);
  return NULL;
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&g_cond, &attr);
  pthread_cond_init(&g_lonely, &attr);
  pthread_t threads[kKinds];
  for (int k = 0; k < kKinds; k++) {
    int rc = pthread_create(&threads[k], NULL, Waiter, (void*)(long)k);
    WL_CHECK(rc == 0, "pthread_create: %s", strerror(rc));
  }
  for (int k = 0; k < kKinds; k++) {
    while (!g_results[k].tid) wl_sleep_ms(1);
    wl_wait_in_syscall(g_results[k].tid, SYS_futex);
  }
  wl_signal_ready();
  wl_wait_go();

  pthread_mutex_lock(&g_mutex);
  g_predicate = 1;
  pthread_cond_broadcast(&g_cond);
  pthread_mutex_unlock(&g_mutex);
  for (int k = 0; k < kKinds; k++) {
    struct timespec limit;
    clock_gettime(CLOCK_REALTIME, &limit);
    limit.tv_sec += 5;
    int rc = pthread_timedjoin_np(threads[k], NULL, &limit);
    WL_CHECK(rc == 0, "%s: thread did not finish within 5 s of the broadcast (%s)", kKindNames[k], strerror(rc));
    struct Result* r = &g_results[k];
    if (k == kTimedWaitShort) {
      WL_CHECK(r->rc == ETIMEDOUT, "%s returned %s, want ETIMEDOUT", kKindNames[k], strerror(r->rc));
      WL_CHECK(r->late_ns >= 0, "%s timed out %lld ms before its deadline", kKindNames[k], (long long)(-r->late_ns / 1000000));
    } else {
      WL_CHECK(r->rc == 0, "%s returned %s", kKindNames[k], strerror(r->rc));
      WL_CHECK(r->predicate == 1, "%s woke without the predicate", kKindNames[k]);
    }
  }
  wl_pass();
}
