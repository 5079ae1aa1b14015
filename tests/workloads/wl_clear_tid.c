// clear-child-tid: pthread_join waits for the kernel to clear the thread's TID word and wake it
// (set_tid_address at thread creation). Threads created before the checkpoint exit after restore;
// joining them must work. Also checks that PR_GET_TID_ADDRESS reports the same address per thread,
// and that a thread created after restore can be joined too.
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "wl_common.h"

#define kThreads 3

static volatile int g_go;
static volatile int g_parked[kThreads];
static int* g_tid_address[kThreads];

static int* TidAddress(void) {
  int* addr = NULL;
  if (prctl(PR_GET_TID_ADDRESS, &addr, 0, 0, 0) != 0) wl_fail("PR_GET_TID_ADDRESS: %s", wl_errstr());
  return addr;
}

static void* ThreadMain(void* arg) {
  int index = (int)(long)arg;
  g_tid_address[index] = TidAddress();
  if (g_tid_address[index] == NULL) wl_fail("thread %d has no clear-child-tid address", index);
  if (*g_tid_address[index] != wl_gettid()) wl_fail("thread %d: TID word does not hold its TID", index);
  g_parked[index] = 1;
  while (!g_go) wl_sleep_ms(5 + index);
  int* now = TidAddress();
  if (now != g_tid_address[index]) wl_fail("thread %d: TID address %p became %p", index, (void*)g_tid_address[index], (void*)now);
  if (*now != wl_gettid()) wl_fail("thread %d: TID word holds %d, TID is %d", index, *now, (int)wl_gettid());
  return (void*)(long)(index + 1);
}

static void Join(pthread_t thread, long want, const char* what) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 5;
  void* ret = NULL;
  int rc = pthread_timedjoin_np(thread, &ret, &deadline);
  if (rc == ETIMEDOUT) wl_fail("%s: join timed out (TID word never cleared)", what);
  if (rc != 0) wl_fail("%s: join: %s", what, strerror(rc));
  if ((long)ret != want) wl_fail("%s: returned %ld, want %ld", what, (long)ret, want);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  pthread_t threads[kThreads];
  for (int i = 0; i < kThreads; i++) {
    int rc = pthread_create(&threads[i], NULL, ThreadMain, (void*)(long)i);
    WL_CHECK(rc == 0, "pthread_create: %s", strerror(rc));
  }
  for (int i = 0; i < kThreads; i++) {
    while (!g_parked[i]) wl_sleep_ms(1);
  }
  int* main_tid_address = TidAddress();
  wl_signal_ready();
  wl_wait_go();
  WL_CHECK(TidAddress() == main_tid_address, "main: TID address changed");
  g_go = 1;
  for (int i = 0; i < kThreads; i++) {
    char what[32];
    snprintf(what, sizeof what, "thread %d", i);
    Join(threads[i], i + 1, what);
  }
  // A thread born after restore.
  g_go = 1;
  g_parked[0] = 0;
  pthread_t late;
  int rc = pthread_create(&late, NULL, ThreadMain, (void*)0L);
  WL_CHECK(rc == 0, "pthread_create after restore: %s", strerror(rc));
  Join(late, 1, "thread created after restore");
  wl_pass();
}
