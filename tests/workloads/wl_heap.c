// Heap: many small malloc'ed blocks (from the brk heap), a few medium ones and one of 64 MiB (which
// malloc serves with its own mmap), each filled with its own pattern; some freed before the
// checkpoint to leave holes in malloc's free lists. After restore every byte must match, and malloc's
// own metadata must still work: free everything, allocate again, and use calloc/realloc.
#define _GNU_SOURCE
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wl_common.h"

#define kSmall 2000
#define kMedium 8

struct Block {
  unsigned char* p;
  size_t size;
};

static struct Block g_small[kSmall];
static struct Block g_medium[kMedium];
static struct Block g_big;

static void Allocate(struct Block* b, size_t size, uint64_t seed) {
  b->p = malloc(size);
  if (!b->p) wl_fail("malloc(%zu) failed", size);
  b->size = size;
  wl_fill_pattern(b->p, size, seed);
}

static void Check(const struct Block* b, uint64_t seed, const char* what, int index) {
  if (!b->p) return;
  ptrdiff_t bad = wl_check_pattern(b->p, b->size, seed);
  if (bad >= 0) wl_fail("%s block %d (%zu bytes at %p) differs at offset %td", what, index, b->size, (void*)b->p, bad);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  uint64_t rng = 12345;
  for (int i = 0; i < kSmall; i++) Allocate(&g_small[i], 16 + wl_xorshift64(&rng) % 4080, (uint64_t)i);
  for (int i = 0; i < kMedium; i++) Allocate(&g_medium[i], (size_t)(i + 1) * 100 * 1024, 100000 + (uint64_t)i);
  Allocate(&g_big, 64u << 20, 999);
  for (int i = 0; i < kSmall; i += 3) {  // holes
    free(g_small[i].p);
    g_small[i].p = NULL;
  }
  wl_signal_ready();
  wl_wait_go();

  for (int i = 0; i < kSmall; i++) Check(&g_small[i], (uint64_t)i, "small", i);
  for (int i = 0; i < kMedium; i++) Check(&g_medium[i], 100000 + (uint64_t)i, "medium", i);
  Check(&g_big, 999, "64 MiB", 0);

  // malloc's metadata: reuse the holes, grow blocks, free everything.
  for (int i = 0; i < kSmall; i += 3) Allocate(&g_small[i], 16 + (size_t)i % 512, 50000 + (uint64_t)i);
  for (int i = 0; i < kSmall; i += 7) {
    size_t grown = g_small[i].size * 2 + 100;
    unsigned char* p = realloc(g_small[i].p, grown);
    WL_CHECK(p != NULL, "realloc failed");
    ptrdiff_t bad = wl_check_pattern(p, g_small[i].size, i % 3 == 0 ? 50000 + (uint64_t)i : (uint64_t)i);
    WL_CHECK(bad < 0, "realloc lost the content of block %d", i);
    free(p);
    g_small[i].p = NULL;
  }
  unsigned char* zeros = calloc(1, 8u << 20);
  WL_CHECK(zeros != NULL, "calloc failed");
  for (size_t i = 0; i < (8u << 20); i += 4096) WL_CHECK(zeros[i] == 0, "calloc memory not zero");
  free(zeros);
  for (int i = 0; i < kSmall; i++) free(g_small[i].p);
  for (int i = 0; i < kMedium; i++) free(g_medium[i].p);
  free(g_big.p);
  void* again = malloc(64u << 20);
  WL_CHECK(again != NULL, "malloc after restore failed");
  memset(again, 0x5a, 64u << 20);
  free(again);
  wl_pass();
}
