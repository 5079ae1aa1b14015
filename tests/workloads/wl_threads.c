// Threads: four threads, each with its own TLS (__thread), stack contents and values held in
// callee-saved registers (rbx, r12-r15) across the checkpoint. Thread 0 spins in user space, thread 1
// spins around sched_yield, threads 2 and 3 sleep in a raw nanosleep syscall, so the dump catches
// threads both in user mode and inside syscalls. Each thread also checks its TID, pthread_self() and
// the address of its TLS block (fs base) after restore.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "wl_common.h"

#define kThreads 4

static __thread uint64_t tls_value[16];
static __thread int tls_index = -1;

static volatile int g_go;
static volatile int g_parked[kThreads];

struct ThreadResult {
  pid_t tid_before;
  pid_t tid_after;
  pthread_t self_before;
  pthread_t self_after;
  uintptr_t tls_addr_before;
  uintptr_t tls_addr_after;
  uint64_t regs[5];  // rbx, r12, r13, r14, r15 after the wait
};

static struct ThreadResult g_results[kThreads];

// Loads seed-derived values into rbx and r12-r15, then loops until *go is set: spinning in user space
// (mode 0), calling sched_yield (mode 1) or nanosleep(1 ms) (mode 2). Returns what the registers hold
// after the loop. The values live only in registers during the loop.
static void HoldRegisters(volatile int* go, volatile int* parked, uint64_t seed, int mode,
                          uint64_t out[5]) {
  static const struct timespec kNap = {0, 1000 * 1000};
  uint64_t rbx, r12, r13, r14, r15;
  __asm__ volatile(
      "mov %[seed], %%rbx\n\t"
      "lea 1(%[seed]), %%r12\n\t"
      "lea 2(%[seed]), %%r13\n\t"
      "lea 3(%[seed]), %%r14\n\t"
      "lea 4(%[seed]), %%r15\n\t"
      "movl $1, (%[parked])\n\t"
      "1:\n\t"
      "cmpl $0, (%[go])\n\t"
      "jne 3f\n\t"
      "cmpl $0, %[mode]\n\t"
      "jne 2f\n\t"
      "pause\n\t"
      "jmp 1b\n\t"
      "2:\n\t"
      "cmpl $1, %[mode]\n\t"
      "jne 4f\n\t"
      "mov $24, %%eax\n\t"  // sched_yield
      "syscall\n\t"
      "jmp 1b\n\t"
      "4:\n\t"
      "mov $35, %%eax\n\t"  // nanosleep(&kNap, NULL)
      "mov %[nap], %%rdi\n\t"
      "xor %%esi, %%esi\n\t"
      "syscall\n\t"
      "jmp 1b\n\t"
      "3:\n\t"
      "mov %%rbx, %[o0]\n\t"
      "mov %%r12, %[o1]\n\t"
      "mov %%r13, %[o2]\n\t"
      "mov %%r14, %[o3]\n\t"
      "mov %%r15, %[o4]\n\t"
      : [o0] "=m"(rbx), [o1] "=m"(r12), [o2] "=m"(r13), [o3] "=m"(r14), [o4] "=m"(r15)
      : [seed] "r"(seed), [go] "r"(go), [parked] "r"(parked), [mode] "m"(mode), [nap] "r"(&kNap)
      : "rax", "rcx", "rdx", "rsi", "rdi", "r11", "rbx", "r12", "r13", "r14", "r15", "memory", "cc");
  out[0] = rbx;
  out[1] = r12;
  out[2] = r13;
  out[3] = r14;
  out[4] = r15;
}

static void* ThreadMain(void* arg) {
  int index = (int)(intptr_t)arg;
  uint64_t seed = 0x1000000000ull * (uint64_t)(index + 1) + 0xabcdef;
  tls_index = index;
  for (int i = 0; i < 16; i++) tls_value[i] = seed ^ (uint64_t)i * 0x1111;

  volatile unsigned char stack_pattern[4096];
  wl_fill_pattern((void*)stack_pattern, sizeof stack_pattern, seed);

  struct ThreadResult* r = &g_results[index];
  r->tid_before = wl_gettid();
  r->self_before = pthread_self();
  r->tls_addr_before = (uintptr_t)&tls_value[0];

  int mode = index == 0 ? 0 : index == 1 ? 1 : 2;
  HoldRegisters(&g_go, &g_parked[index], seed, mode, r->regs);

  for (int i = 0; i < 5; i++) {
    if (r->regs[i] != seed + (uint64_t)i) {
      wl_fail("thread %d: callee-saved register %d holds %#llx, want %#llx", index, i,
              (unsigned long long)r->regs[i], (unsigned long long)(seed + (uint64_t)i));
    }
  }
  if (tls_index != index) wl_fail("thread %d: TLS index is %d", index, tls_index);
  for (int i = 0; i < 16; i++) {
    if (tls_value[i] != (seed ^ (uint64_t)i * 0x1111)) wl_fail("thread %d: TLS word %d changed", index, i);
  }
  ptrdiff_t bad = wl_check_pattern((const void*)stack_pattern, sizeof stack_pattern, seed);
  if (bad >= 0) wl_fail("thread %d: stack pattern differs at offset %td", index, bad);
  r->tid_after = wl_gettid();
  r->self_after = pthread_self();
  r->tls_addr_after = (uintptr_t)&tls_value[0];
  return (void*)(intptr_t)(index + 100);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  pthread_t threads[kThreads];
  for (int i = 0; i < kThreads; i++) {
    int rc = pthread_create(&threads[i], NULL, ThreadMain, (void*)(intptr_t)i);
    WL_CHECK(rc == 0, "pthread_create: %s", strerror(rc));
  }
  for (int i = 0; i < kThreads; i++) {
    while (!g_parked[i]) wl_sleep_ms(1);
  }
  wl_signal_ready();
  wl_wait_go();
  g_go = 1;
  for (int i = 0; i < kThreads; i++) {
    void* ret = NULL;
    int rc = pthread_join(threads[i], &ret);
    WL_CHECK(rc == 0, "pthread_join %d: %s", i, strerror(rc));
    WL_CHECK((intptr_t)ret == i + 100, "thread %d returned %ld", i, (long)(intptr_t)ret);
    struct ThreadResult* r = &g_results[i];
    WL_CHECK(r->tid_before == r->tid_after, "thread %d: tid %d became %d", i, r->tid_before, r->tid_after);
    WL_CHECK(pthread_equal(r->self_before, r->self_after), "thread %d: pthread_self changed", i);
    WL_CHECK(r->self_before == threads[i], "thread %d: pthread_self differs from pthread_create's", i);
    WL_CHECK(r->tls_addr_before == r->tls_addr_after, "thread %d: TLS moved from %#lx to %#lx", i,
             (unsigned long)r->tls_addr_before, (unsigned long)r->tls_addr_after);
  }
  wl_pass();
}
