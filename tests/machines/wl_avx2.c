// An AVX2 program, for the cross-machine tests: a thread steps eight 32-bit linear congruential
// generators held in one ymm register (vpmulld, vpaddd) until told to stop, counting its steps;
// the checkpoint catches it with the register live. After the restore the lanes must equal the
// same number of steps computed one lane at a time. Built with -mavx2: on a CPU without AVX2 it
// would die of SIGILL, so a restore there must be refused. Protocol: tests/workloads/wl_common.h.
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>

#include "wl_common.h"

static volatile int g_stop;
static volatile uint64_t g_steps;  // written by the thread while it runs: ready once it moves
static uint32_t g_lanes[8];
static uint64_t g_final_steps;

// `steps` steps of lane `lane`'s generator from x, one lane at a time without AVX: the step is
// the affine map x -> a*x + c (mod 2^32), raised to the power by squaring (the thread may have
// taken billions of steps).
static uint32_t Steps(uint32_t x, uint32_t lane, uint64_t steps) {
  uint32_t a = 1664525u, c = 1013904223u + lane, all_a = 1, all_c = 0;
  for (; steps != 0; steps >>= 1) {
    if (steps & 1) all_a *= a, all_c = a * all_c + c;
    c = a * c + c;
    a *= a;
  }
  return all_a * x + all_c;
}

static void* Run(void* arg) {
  (void)arg;
  __m256i acc = _mm256_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8);
  const __m256i mul = _mm256_set1_epi32(1664525);
  const __m256i add = _mm256_setr_epi32(1013904223, 1013904224, 1013904225, 1013904226, 1013904227,
                                        1013904228, 1013904229, 1013904230);
  uint64_t steps = 0;
  while (!g_stop) {
    acc = _mm256_add_epi32(_mm256_mullo_epi32(acc, mul), add);
    if ((++steps & 1023) == 0) g_steps = steps;
  }
  _mm256_storeu_si256((__m256i*)g_lanes, acc);
  g_final_steps = steps;
  return NULL;
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  pthread_t t;
  WL_CHECK(pthread_create(&t, NULL, Run, NULL) == 0, "pthread_create");
  while (g_steps == 0) {
  }
  wl_signal_ready();
  wl_wait_go();
  uint64_t seen = g_steps;
  while (g_steps == seen) {  // it runs on after the restore
  }
  g_stop = 1;
  pthread_join(t, NULL);
  for (uint32_t lane = 0; lane < 8; lane++) {
    uint32_t x = Steps(lane + 1, lane, g_final_steps);
    WL_CHECK(x == g_lanes[lane], "lane %u after %llu steps: %#x, expected %#x", lane,
             (unsigned long long)g_final_steps, g_lanes[lane], x);
  }
  wl_pass();
}
