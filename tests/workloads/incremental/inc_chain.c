// A program for chains of incremental checkpoints. Started as `inc_chain WORKDIR`, it fills a
// 64 MiB area (step 0; each page half pseudo-random, half one repeated byte), then for each WORKDIR/stepN (N = 1, 2, ...) makes that step's random
// changes: writes a random set of pages, discards (MADV_DONTNEED) a few, grows its heap with brk,
// and every third step replaces a small mapping by a new one. Each step is derived from its number
// only, so the state after step K can be recomputed from scratch. After each step it writes
// WORKDIR/doneN with the number of distinct pages of the 64 MiB area the step wrote and left
// in place (not discarded afterwards).
//
// When WORKDIR/check exists (content: K), it recomputes the state after step K and checks its
// own memory against it, page by page: PASS (exit 0) when it is exactly at step K, FAIL otherwise.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "wl_common.h"

#define kPages 16384  // 64 MiB
#define kPage 4096
#define kMaxSteps 64
#define kHeapChunk (2 * kPage)

static unsigned char* g_area;
static int g_version[kPages];      // step that last wrote each page; -1: discarded (zero)
static int g_expect[kPages];       // recomputed by the check
static unsigned char* g_small;     // replaced every third step
static size_t g_small_len;
static int g_small_step;
static unsigned char* g_heap[kMaxSteps + 1];
static int g_step;                 // last step made

static uint64_t PageSeed(int page, int step) { return (uint64_t)page * 1000003u + (uint64_t)step * 7919u + 1; }

static size_t SmallLen(int step) { return (size_t)(1 + step % 4) * 16 * kPage; }

// A page of the big area: half pseudo-random, half one repeated byte (so that compressed
// checkpoints have something to compress).
static void FillPage(unsigned char* at, int page, int step) {
  wl_fill_pattern(at, kPage / 2, PageSeed(page, step));
  memset(at + kPage / 2, (int)(PageSeed(page, step) % 251) + 1, kPage / 2);
}

// Offset of the first wrong byte of a page, or -1.
static ptrdiff_t CheckPage(const unsigned char* at, int page, int step) {
  ptrdiff_t bad = wl_check_pattern(at, kPage / 2, PageSeed(page, step));
  if (bad >= 0) return bad;
  for (size_t i = kPage / 2; i < kPage; i++) {
    if (at[i] != (unsigned char)((PageSeed(page, step) % 251) + 1)) return (ptrdiff_t)i;
  }
  return -1;
}

// Applies step `step` to `version` (and to memory when `apply`); returns distinct pages written.
static int Step(int step, int* version, int apply) {
  uint64_t rng = 0x9e3779b97f4a7c15ull ^ ((uint64_t)step * 0x100000001b3ull);
  static unsigned char touched[kPages];
  memset(touched, 0, sizeof touched);
  int writes = 1 + (int)(wl_xorshift64(&rng) % 400);
  int distinct = 0;
  for (int i = 0; i < writes; i++) {
    int page = (int)(wl_xorshift64(&rng) % kPages);
    version[page] = step;
    if (!touched[page]) distinct++;
    touched[page] = 1;
    if (apply) FillPage(g_area + (size_t)page * kPage, page, step);
  }
  int first = (int)(wl_xorshift64(&rng) % (kPages - 16));
  int count = 1 + (int)(wl_xorshift64(&rng) % 16);
  for (int p = first; p < first + count; p++) {
    version[p] = -1;
    if (touched[p]) distinct--;  // written, then discarded: nothing to save
    touched[p] = 0;
  }
  if (apply) WL_SYS(madvise(g_area + (size_t)first * kPage, (size_t)count * kPage, MADV_DONTNEED));
  if (apply) {
    g_heap[step] = sbrk(kHeapChunk);
    WL_CHECK(g_heap[step] != (void*)-1, "sbrk failed");
    wl_fill_pattern(g_heap[step], kHeapChunk, 424242 + (uint64_t)step);
    if (step % 3 == 0) {
      WL_SYS(munmap(g_small, g_small_len));
      g_small_len = SmallLen(step);
      g_small = mmap(NULL, g_small_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      WL_CHECK(g_small != MAP_FAILED, "mmap failed");
      wl_fill_pattern(g_small, g_small_len, 5555 + (uint64_t)step);
      g_small_step = step;
    }
  }
  return distinct;
}

static int IsZero(const unsigned char* p, size_t len) {
  for (size_t i = 0; i < len; i++) {
    if (p[i]) return 0;
  }
  return 1;
}

static void Check(int k) {
  WL_CHECK(g_step == k, "at step %d, expected step %d", g_step, k);
  for (int p = 0; p < kPages; p++) g_expect[p] = 0;
  for (int s = 1; s <= k; s++) Step(s, g_expect, 0);
  for (int p = 0; p < kPages; p++) {
    WL_CHECK(g_expect[p] == g_version[p], "page %d: recorded version %d, recomputed %d", p, g_version[p], g_expect[p]);
    const unsigned char* at = g_area + (size_t)p * kPage;
    if (g_expect[p] < 0) {
      WL_CHECK(IsZero(at, kPage), "page %d was discarded but holds data", p);
    } else {
      ptrdiff_t bad = CheckPage(at, p, g_expect[p]);
      WL_CHECK(bad < 0, "page %d (written at step %d) differs at byte %td", p, g_expect[p], bad);
    }
  }
  for (int s = 1; s <= k; s++) {
    ptrdiff_t bad = wl_check_pattern(g_heap[s], kHeapChunk, 424242 + (uint64_t)s);
    WL_CHECK(bad < 0, "heap chunk of step %d differs at byte %td", s, bad);
  }
  int small_step = k - k % 3;
  WL_CHECK(g_small_step == small_step && g_small_len == SmallLen(small_step), "small mapping from step %d, expected %d",
           g_small_step, small_step);
  ptrdiff_t bad = wl_check_pattern(g_small, g_small_len, 5555 + (uint64_t)small_step);
  WL_CHECK(bad < 0, "small mapping differs at byte %td", bad);
  wl_pass();
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  g_area = mmap(NULL, (size_t)kPages * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  WL_CHECK(g_area != MAP_FAILED, "mmap failed");
  for (int p = 0; p < kPages; p++) FillPage(g_area + (size_t)p * kPage, p, 0);
  g_small_len = SmallLen(0);
  g_small = mmap(NULL, g_small_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  WL_CHECK(g_small != MAP_FAILED, "mmap failed");
  wl_fill_pattern(g_small, g_small_len, 5555);
  wl_signal_ready();
  char path[512], buf[64];
  int64_t deadline = wl_now_ns(CLOCK_MONOTONIC) + (int64_t)WL_GO_TIMEOUT_S * 1000000000;
  for (;;) {
    wl_path(path, sizeof path, "check");
    if (wl_read_file(path, buf, sizeof buf) > 0) Check(atoi(buf));
    char name[32];
    snprintf(name, sizeof name, "step%d", g_step + 1);
    wl_path(path, sizeof path, name);
    if (access(path, F_OK) == 0 && g_step < kMaxSteps) {
      int distinct = Step(g_step + 1, g_version, 1);
      g_step++;
      snprintf(name, sizeof name, "done%d", g_step);
      wl_path(path, sizeof path, name);
      char tmp[520];
      snprintf(tmp, sizeof tmp, "%s.tmp", path);
      int fd = WL_SYS(open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644));
      int n = snprintf(buf, sizeof buf, "%d\n", distinct);
      WL_CHECK(write(fd, buf, (size_t)n) == n, "write failed");
      WL_SYS(close(fd));
      WL_SYS(rename(tmp, path));
      continue;
    }
    WL_CHECK(wl_now_ns(CLOCK_MONOTONIC) < deadline, "timed out waiting for the next step");
    wl_sleep_ms(5);
  }
}
