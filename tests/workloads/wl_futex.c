// Raw futex waits: when the checkpoint is taken, threads are blocked in FUTEX_WAIT (private, no
// timeout), FUTEX_WAIT with a 30 s relative timeout, FUTEX_WAIT_BITSET with an absolute
// CLOCK_MONOTONIC deadline 30 s away, and a shared (non-private) FUTEX_WAIT on a word in a MAP_SHARED
// anonymous mapping. After restore the main thread stores 1 into each word and wakes it; every
// waiter must see its word become 1 within 5 s, must not time out, and must not get an error other
// than EAGAIN or EINTR (which it handles by waiting again).
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "wl_common.h"

enum Kind { kPrivate, kRelativeTimeout, kAbsoluteBitset, kShared, kKinds };
static const char* const kKindNames[] = {"FUTEX_WAIT", "FUTEX_WAIT with timeout", "FUTEX_WAIT_BITSET absolute",
                                         "shared FUTEX_WAIT"};

struct Waiter {
  uint32_t* word;
  volatile pid_t tid;
  volatile int done;
  int wakeups;
  char error[160];
};

static uint32_t g_private_words[kKinds];
static struct Waiter g_waiters[kKinds];

static long Futex(uint32_t* word, int op, uint32_t val, const struct timespec* ts, uint32_t val3) {
  return syscall(SYS_futex, word, op, val, ts, NULL, val3);
}

static void* WaiterMain(void* arg) {
  int kind = (int)(long)arg;
  struct Waiter* w = &g_waiters[kind];
  struct timespec abs_deadline;
  clock_gettime(CLOCK_MONOTONIC, &abs_deadline);
  abs_deadline.tv_sec += 30;
  w->tid = wl_gettid();
  while (__atomic_load_n(w->word, __ATOMIC_ACQUIRE) == 0) {
    long rc;
    struct timespec rel = {30, 0};
    switch (kind) {
      case kPrivate:
        rc = Futex(w->word, FUTEX_WAIT_PRIVATE, 0, NULL, 0);
        break;
      case kRelativeTimeout:
        rc = Futex(w->word, FUTEX_WAIT_PRIVATE, 0, &rel, 0);
        break;
      case kAbsoluteBitset:
        rc = Futex(w->word, FUTEX_WAIT_BITSET_PRIVATE, 0, &abs_deadline, FUTEX_BITSET_MATCH_ANY);
        break;
      default:
        rc = Futex(w->word, FUTEX_WAIT, 0, NULL, 0);
        break;
    }
    if (rc == 0) {
      w->wakeups++;
    } else if (errno == ETIMEDOUT) {
      snprintf(w->error, sizeof w->error, "timed out");
      break;
    } else if (errno != EAGAIN && errno != EINTR) {
      snprintf(w->error, sizeof w->error, "failed: %s", wl_errstr());
      break;
    }
  }
  w->done = 1;
  return NULL;
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  uint32_t* shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  WL_CHECK(shared != MAP_FAILED, "mmap: %s", wl_errstr());
  pthread_t threads[kKinds];
  for (int k = 0; k < kKinds; k++) {
    g_waiters[k].word = k == kShared ? &shared[100] : &g_private_words[k];
    int rc = pthread_create(&threads[k], NULL, WaiterMain, (void*)(long)k);
    WL_CHECK(rc == 0, "pthread_create: %s", strerror(rc));
  }
  for (int k = 0; k < kKinds; k++) {
    while (!g_waiters[k].tid) wl_sleep_ms(1);
    wl_wait_in_syscall(g_waiters[k].tid, SYS_futex);
  }
  wl_signal_ready();
  wl_wait_go();

  for (int k = 0; k < kKinds; k++) {
    WL_CHECK(!g_waiters[k].done, "%s: waiter returned before it was woken (%s)", kKindNames[k], g_waiters[k].error);
    __atomic_store_n(g_waiters[k].word, 1, __ATOMIC_RELEASE);
    Futex(g_waiters[k].word, k == kShared ? FUTEX_WAKE : FUTEX_WAKE_PRIVATE, 1, NULL, 0);
  }
  for (int k = 0; k < kKinds; k++) {
    struct timespec limit;
    clock_gettime(CLOCK_REALTIME, &limit);
    limit.tv_sec += 5;
    int rc = pthread_timedjoin_np(threads[k], NULL, &limit);
    WL_CHECK(rc == 0, "%s: waiter did not return within 5 s of the wake (%s)", kKindNames[k], strerror(rc));
    WL_CHECK(g_waiters[k].error[0] == '\0', "%s: %s", kKindNames[k], g_waiters[k].error);
  }
  wl_pass();
}
