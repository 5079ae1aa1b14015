// rseq: glibc registers a restartable-sequences area per thread (at the thread pointer plus
// __rseq_offset). After restore the kernel must still know that area for every thread: registering
// the same area again must fail with EBUSY (it would succeed if the registration were lost), its
// cpu_id must be valid and agree with the getcpu syscall, and sched_getcpu() (which reads the area)
// must work. Checked in the main thread and in a second thread that sleeps across the checkpoint.
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/rseq.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "wl_common.h"

// glibc 2.35+ registers this much; the kernel wants the same length to recognise the area.
#define kRegisteredLength 32

static volatile int g_go;
static volatile int g_parked;

static struct rseq* Area(void) {
  return (struct rseq*)((char*)__builtin_thread_pointer() + __rseq_offset);
}

static void CheckArea(const char* who) {
  struct rseq* area = Area();
  errno = 0;
  long rc = syscall(SYS_rseq, area, kRegisteredLength, 0, RSEQ_SIG);
  if (rc == 0) wl_fail("%s: rseq area was not registered with the kernel (registering it again succeeded)", who);
  if (errno != EBUSY) wl_fail("%s: re-registering the rseq area gave %s, want EBUSY", who, wl_errstr());

  // The thread may migrate between reading the area and asking the kernel; retry a few times.
  int agreed = 0;
  for (int attempt = 0; attempt < 200 && !agreed; attempt++) {
    int32_t from_area = (int32_t)__atomic_load_n(&area->cpu_id, __ATOMIC_RELAXED);
    unsigned cpu = 0;
    if (syscall(SYS_getcpu, &cpu, NULL, NULL) != 0) wl_fail("%s: getcpu: %s", who, wl_errstr());
    int32_t again = (int32_t)__atomic_load_n(&area->cpu_id, __ATOMIC_RELAXED);
    if (from_area < 0) wl_fail("%s: rseq cpu_id is %d", who, from_area);
    if (from_area == (int32_t)cpu && again == from_area) agreed = 1;
    if (!agreed) sched_yield();
  }
  if (!agreed) wl_fail("%s: rseq cpu_id never agreed with getcpu", who);
  int cpu = sched_getcpu();
  if (cpu < 0) wl_fail("%s: sched_getcpu: %s", who, wl_errstr());
}

static void* ThreadMain(void* arg) {
  (void)arg;
  CheckArea("thread before checkpoint");
  g_parked = 1;
  while (!g_go) wl_sleep_ms(5);
  CheckArea("thread after checkpoint");
  return NULL;
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  WL_CHECK(__rseq_size > 0, "glibc did not register rseq (__rseq_size is 0; GLIBC_TUNABLES?)");
  CheckArea("main before checkpoint");
  pthread_t thread;
  int rc = pthread_create(&thread, NULL, ThreadMain, NULL);
  WL_CHECK(rc == 0, "pthread_create: %s", strerror(rc));
  while (!g_parked) wl_sleep_ms(1);
  wl_signal_ready();
  wl_wait_go();
  CheckArea("main after checkpoint");
  g_go = 1;
  pthread_join(thread, NULL);
  wl_pass();
}
