// Waiting with a timeout and nothing to wait for: three threads are inside poll(NULL, 0, 2000),
// ppoll(NULL, 0, {2 s}) and select(0, ..., {2 s}) when the checkpoint is taken. A restore may restart
// these or make them return EINTR; each thread retries with the time left by CLOCK_MONOTONIC. After
// restore none may report a timeout before 2 s have passed, and none may fail with anything but EINTR.
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/select.h>
#include <sys/syscall.h>
#include <time.h>

#include "wl_common.h"

#define kWaitMs 2000

enum Kind { kPoll, kPpoll, kSelect, kKinds };
static const char* const kKindNames[] = {"poll", "ppoll", "select"};
static const long kSyscalls[][2] = {{SYS_poll, SYS_ppoll}, {SYS_ppoll, SYS_ppoll}, {SYS_select, SYS_pselect6}};

struct Result {
  volatile pid_t tid;
  int64_t elapsed_ns;
  int interruptions;
  char error[160];
};

static struct Result g_results[kKinds];

static void* Waiter(void* arg) {
  int kind = (int)(long)arg;
  struct Result* r = &g_results[kind];
  int64_t start = wl_now_ns(CLOCK_MONOTONIC);
  int64_t deadline = start + kWaitMs * 1000000ll;
  r->tid = wl_gettid();
  for (;;) {
    int64_t left_ns = deadline - wl_now_ns(CLOCK_MONOTONIC);
    if (left_ns < 0) left_ns = 0;
    int rc;
    if (kind == kPoll) {
      rc = poll(NULL, 0, (int)((left_ns + 999999) / 1000000));
    } else if (kind == kPpoll) {
      struct timespec ts = {left_ns / 1000000000, left_ns % 1000000000};
      rc = ppoll(NULL, 0, &ts, NULL);
    } else {
      struct timeval tv = {left_ns / 1000000000, (left_ns % 1000000000 + 999) / 1000};
      if (tv.tv_usec >= 1000000) {
        tv.tv_sec++;
        tv.tv_usec -= 1000000;
      }
      rc = select(0, NULL, NULL, NULL, &tv);
    }
    if (rc == 0) break;  // timed out
    if (rc < 0 && errno == EINTR) {
      r->interruptions++;
      continue;
    }
    snprintf(r->error, sizeof r->error, "returned %d (%s)", rc, rc < 0 ? wl_errstr() : "no fds were given");
    break;
  }
  r->elapsed_ns = wl_now_ns(CLOCK_MONOTONIC) - start;
  return NULL;
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  pthread_t threads[kKinds];
  for (int k = 0; k < kKinds; k++) {
    int rc = pthread_create(&threads[k], NULL, Waiter, (void*)(long)k);
    WL_CHECK(rc == 0, "pthread_create: %s", strerror(rc));
  }
  for (int k = 0; k < kKinds; k++) {
    while (!g_results[k].tid) wl_sleep_ms(1);
    // glibc may implement poll with ppoll and select with pselect6; accept either.
    int64_t until = wl_now_ns(CLOCK_MONOTONIC) + 5000000000ll;
    for (;;) {
      long nr = wl_thread_syscall(g_results[k].tid);
      if (nr == kSyscalls[k][0] || nr == kSyscalls[k][1]) break;
      WL_CHECK(wl_now_ns(CLOCK_MONOTONIC) < until, "%s thread never blocked in it (last seen in %ld)", kKindNames[k], nr);
      wl_sleep_ms(1);
    }
  }
  wl_signal_ready();
  wl_wait_go();
  for (int k = 0; k < kKinds; k++) {
    pthread_join(threads[k], NULL);
    struct Result* r = &g_results[k];
    WL_CHECK(r->error[0] == '\0', "%s: %s", kKindNames[k], r->error);
    WL_CHECK(r->elapsed_ns >= kWaitMs * 1000000ll, "%s: timed out after %lld ms of %d ms", kKindNames[k],
             (long long)(r->elapsed_ns / 1000000), kWaitMs);
  }
  wl_pass();
}
