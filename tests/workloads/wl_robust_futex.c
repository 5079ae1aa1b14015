// Robust futex lists: each thread's robust-list head (set by glibc at thread start) must be the same
// after restore, and must still work: a thread holds a robust mutex across the checkpoint and exits
// afterwards without unlocking it, so the kernel walks its list and the main thread's lock attempt
// must return EOWNERDEAD. That needs the head registered and the TID in the lock word preserved.
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "wl_common.h"

static pthread_mutex_t g_mutex;
static volatile int g_go;
static volatile int g_parked;
static void* g_thread_head_before;
static size_t g_thread_len_before;

static void GetRobustList(pid_t tid, void** head, size_t* len) {
  struct robust_list_head* h = NULL;
  size_t l = 0;
  if (syscall(SYS_get_robust_list, tid, &h, &l) != 0) wl_fail("get_robust_list(%d): %s", (int)tid, wl_errstr());
  *head = h;
  *len = l;
}

static void* Holder(void* arg) {
  (void)arg;
  int rc = pthread_mutex_lock(&g_mutex);
  if (rc != 0) wl_fail("holder: pthread_mutex_lock: %s", strerror(rc));
  GetRobustList(0, &g_thread_head_before, &g_thread_len_before);
  g_parked = 1;
  while (!g_go) wl_sleep_ms(5);
  void* head;
  size_t len;
  GetRobustList(0, &head, &len);
  if (head != g_thread_head_before || len != g_thread_len_before) {
    wl_fail("holder: robust list %p/%zu became %p/%zu", g_thread_head_before, g_thread_len_before, head, len);
  }
  return NULL;  // exits holding the mutex
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&g_mutex, &attr);

  void* main_head;
  size_t main_len;
  GetRobustList(0, &main_head, &main_len);
  WL_CHECK(main_head != NULL, "main thread has no robust list head");

  pthread_t holder;
  int rc = pthread_create(&holder, NULL, Holder, NULL);
  WL_CHECK(rc == 0, "pthread_create: %s", strerror(rc));
  while (!g_parked) wl_sleep_ms(1);
  WL_CHECK(g_thread_head_before != main_head, "threads share a robust list head");

  wl_signal_ready();
  wl_wait_go();

  void* head;
  size_t len;
  GetRobustList(0, &head, &len);
  WL_CHECK(head == main_head && len == main_len, "main: robust list %p/%zu became %p/%zu", main_head,
           main_len, head, len);
  rc = pthread_mutex_trylock(&g_mutex);
  WL_CHECK(rc == EBUSY, "mutex held by the thread: trylock gave %s, want EBUSY", strerror(rc));

  g_go = 1;
  rc = pthread_join(holder, NULL);
  WL_CHECK(rc == 0, "pthread_join: %s", strerror(rc));
  rc = pthread_mutex_lock(&g_mutex);
  WL_CHECK(rc == EOWNERDEAD, "lock after the owner exited gave %s, want EOWNERDEAD", strerror(rc));
  WL_CHECK(pthread_mutex_consistent(&g_mutex) == 0, "pthread_mutex_consistent failed");
  WL_CHECK(pthread_mutex_unlock(&g_mutex) == 0, "unlock failed");
  wl_pass();
}
