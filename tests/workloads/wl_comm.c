// Task names: the process (main thread) and two threads set distinct names with PR_SET_NAME /
// pthread_setname_np (including a full 15-character one). After restore each thread must read back
// its own name through PR_GET_NAME and /proc/self/task/TID/comm.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>

#include "wl_common.h"

static const char* const kNames[] = {"wl-main-comm", "wl-thread-one", "fifteen-chars-x"};

static volatile int g_go;
static volatile int g_parked[3];
static volatile pid_t g_tids[3];

static void CheckName(int index) {
  char name[32] = {0};
  if (prctl(PR_GET_NAME, name, 0, 0, 0) != 0) wl_fail("PR_GET_NAME: %s", wl_errstr());
  if (strcmp(name, kNames[index]) != 0) wl_fail("thread %d: PR_GET_NAME '%s', want '%s'", index, name, kNames[index]);
  char path[64], comm[64];
  snprintf(path, sizeof path, "/proc/self/task/%d/comm", (int)wl_gettid());
  if (wl_read_file(path, comm, sizeof comm) < 0) wl_fail("read %s: %s", path, wl_errstr());
  char* nl = strchr(comm, '\n');
  if (nl) *nl = '\0';
  if (strcmp(comm, kNames[index]) != 0) wl_fail("thread %d: %s is '%s', want '%s'", index, path, comm, kNames[index]);
}

static void* ThreadMain(void* arg) {
  int index = (int)(long)arg;
  if (prctl(PR_SET_NAME, kNames[index], 0, 0, 0) != 0) wl_fail("PR_SET_NAME: %s", wl_errstr());
  g_tids[index] = wl_gettid();
  g_parked[index] = 1;
  while (!g_go) wl_sleep_ms(5);
  CheckName(index);
  return NULL;
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  WL_SYS(prctl(PR_SET_NAME, kNames[0], 0, 0, 0));
  pthread_t threads[3];
  for (int i = 1; i < 3; i++) {
    int rc = pthread_create(&threads[i], NULL, ThreadMain, (void*)(long)i);
    WL_CHECK(rc == 0, "pthread_create: %s", strerror(rc));
  }
  for (int i = 1; i < 3; i++) {
    while (!g_parked[i]) wl_sleep_ms(1);
  }
  wl_signal_ready();
  wl_wait_go();
  CheckName(0);
  // The process name as other processes see it is the main thread's.
  char comm[64];
  WL_CHECK(wl_read_file("/proc/self/comm", comm, sizeof comm) > 0 && strncmp(comm, kNames[0], strlen(kNames[0])) == 0,
           "/proc/self/comm is '%s'", comm);
  char name[32];
  WL_CHECK(pthread_getname_np(threads[2], name, sizeof name) == 0 && strcmp(name, kNames[2]) == 0,
           "pthread_getname_np of thread 2 is '%s'", name);
  g_go = 1;
  for (int i = 1; i < 3; i++) pthread_join(threads[i], NULL);
  wl_pass();
}
