// Deterministic computation, checkpointed mid-way: a segmented sieve counts the primes below 2*10^9
// while folding every segment's primes into a 64 KiB hash state and summing their reciprocals in
// double precision. It does not wait for WORKDIR/go: it writes WORKDIR/ready after 0.3 s of work and
// keeps computing, so the checkpoint lands in the middle of the loop (registers, stack, heap and FPU
// state all live). At the end it prints "RESULT <hash> <sum>", which the harness compares with an
// uninterrupted run, and checks the prime count against the known value of pi(10^9).
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wl_common.h"

#define kLimit 2000000000ull
#define kKnownPrimeCount 98222287ull  // pi(2 * 10^9)
#define kSegment (256 * 1024)          // odd numbers per segment
#define kStateWords 8192               // 64 KiB of hash state

static uint64_t g_state[kStateWords];

static uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  for (int i = 0; i < kStateWords; i++) g_state[i] = Mix((uint64_t)i + 1);

  // Base primes up to sqrt(kLimit).
  const uint32_t root = (uint32_t)sqrt((double)kLimit) + 1;
  unsigned char* small = calloc(root + 1, 1);
  uint32_t* base = malloc(sizeof(uint32_t) * (root / 2 + 1));
  WL_CHECK(small && base, "out of memory");
  size_t nbase = 0;
  for (uint32_t i = 2; i <= root; i++) {
    if (small[i]) continue;
    if (i > 2) base[nbase++] = i;
    for (uint64_t j = (uint64_t)i * i; j <= root; j += i) small[j] = 1;
  }
  free(small);

  unsigned char* seg = malloc(kSegment);
  WL_CHECK(seg != NULL, "out of memory");
  uint64_t count = 1;  // the prime 2
  double reciprocal_sum = 0.5;
  uint64_t hash = 0x123456789abcdefull;
  int64_t start = wl_now_ns(CLOCK_MONOTONIC);
  int ready = 0;
  size_t slot = 0;
  // Segment k covers the odd numbers lo, lo+2, ..., lo + 2*(kSegment-1), lo = 1 + 2*kSegment*k.
  for (uint64_t lo = 1; lo < kLimit; lo += 2ull * kSegment) {
    memset(seg, 0, kSegment);
    if (lo == 1) seg[0] = 1;  // 1 is not prime
    uint64_t hi = lo + 2ull * (kSegment - 1);
    for (size_t b = 0; b < nbase; b++) {
      uint64_t p = base[b];
      if (p * p > hi) break;
      uint64_t first = p * p;
      if (first < lo) first = lo + ((p - (lo % p)) % p);
      if (first % 2 == 0) first += p;
      for (uint64_t m = first; m <= hi; m += 2 * p) seg[(m - lo) / 2] = 1;
    }
    for (size_t i = 0; i < kSegment; i++) {
      uint64_t n = lo + 2 * i;
      if (n >= kLimit) break;
      if (seg[i]) continue;
      count++;
      reciprocal_sum += 1.0 / (double)n;
      g_state[slot] = Mix(g_state[slot] ^ n);
      hash = Mix(hash + g_state[slot]);
      slot = (slot + (n & 63) + 1) % kStateWords;
    }
    if (!ready && wl_now_ns(CLOCK_MONOTONIC) - start >= 300000000) {
      wl_signal_ready();
      ready = 1;
    }
  }
  free(seg);
  free(base);
  if (!ready) wl_signal_ready();  // finished early on a fast machine: still follow the protocol
  for (int i = 0; i < kStateWords; i++) hash = Mix(hash ^ g_state[i]);
  printf("RESULT %016llx %.17g\n", (unsigned long long)hash, reciprocal_sum);
  fflush(stdout);
  WL_CHECK(count == kKnownPrimeCount, "counted %llu primes below 2*10^9, want %llu", (unsigned long long)count,
           (unsigned long long)kKnownPrimeCount);
  WL_CHECK(fabs(reciprocal_sum - 3.3257) < 0.001, "sum of 1/p is %.6f, want about 3.3257", reciprocal_sum);
  wl_pass();
}
