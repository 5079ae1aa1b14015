// A program that keeps writing its memory, for pre-copy dumps: `inc_writer WORKDIR [MIB [PAGES_PER_SEC]]`
// (default 64 MiB, 20000 pages per second). It fills MIB of memory, one version-stamped page at a
// time, signals ready, then a writer thread rewrites random pages (and now and then discards one
// with MADV_DONTNEED) at the given rate, in 1 ms bursts, while a ticker thread wakes every
// millisecond and records the longest gap between two ticks: the stop it saw.
//
// WORKDIR/reportN (N = 1, 2, ...): writes WORKDIR/reportN.out with the longest gap in
// microseconds since the previous report, the number of pages written and when (CLOCK_REALTIME,
// milliseconds) the longest gap ended, then starts over.
// WORKDIR/go: stops the writer, then checks every page: its stamp must be the version the
// program last recorded for it and its bytes that version's pattern (a discarded page must be
// zero). PASS or FAIL, with the longest gap seen.
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "wl_common.h"

#define kPage 4096

static unsigned char* g_area;
static size_t g_pages;
static int64_t* g_version;  // per page; -1: discarded
static long g_rate;
static atomic_int g_stop;
static atomic_long g_written;
static atomic_llong g_max_gap_ns;
static atomic_llong g_max_gap_at;  // CLOCK_REALTIME (ms) when the longest gap ended

static uint64_t Seed(size_t page, int64_t version) { return (uint64_t)page * 2654435761u + (uint64_t)version * 40503u + 7; }

static void WritePage(size_t page, int64_t version) {
  unsigned char* p = g_area + page * kPage;
  wl_fill_pattern(p + 8, kPage - 8, Seed(page, version));
  memcpy(p, &version, 8);
}

static void* Writer(void* arg) {
  (void)arg;
  uint64_t rng = 0x1234567;
  int64_t next = 1;
  double per_ms = (double)g_rate / 1000.0, due = 0;
  while (!atomic_load(&g_stop)) {
    for (due += per_ms; due >= 1; due -= 1) {
      size_t page = (size_t)(wl_xorshift64(&rng) % g_pages);
      if (wl_xorshift64(&rng) % 64 == 0) {
        WL_SYS(madvise(g_area + page * kPage, kPage, MADV_DONTNEED));
        g_version[page] = -1;
      } else {
        int64_t v = next++;
        WritePage(page, v);
        g_version[page] = v;
      }
      atomic_fetch_add(&g_written, 1);
    }
    wl_sleep_ms(1);
  }
  return NULL;
}

static void* Ticker(void* arg) {
  (void)arg;
  int64_t last = wl_now_ns(CLOCK_MONOTONIC);
  while (!atomic_load(&g_stop)) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
    int64_t now = wl_now_ns(CLOCK_MONOTONIC);
    long long gap = now - last;
    if (gap > atomic_load(&g_max_gap_ns)) {
      atomic_store(&g_max_gap_ns, gap);
      atomic_store(&g_max_gap_at, wl_now_ns(CLOCK_REALTIME) / 1000000);
    }
    last = now;
  }
  return NULL;
}

static void WriteFileAtomic(const char* name, const char* text) {
  char path[512], tmp[520];
  wl_path(path, sizeof path, name);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int fd = WL_SYS(open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644));
  WL_CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text), "write failed");
  WL_SYS(close(fd));
  WL_SYS(rename(tmp, path));
}

int main(int argc, char** argv) {
  size_t mib = argc > 2 ? (size_t)atol(argv[2]) : 64;
  g_rate = argc > 3 ? atol(argv[3]) : 20000;  // may be 0: no writes
  char* args[2] = {argv[0], argv[1]};
  wl_init(2, args);
  g_pages = mib * 256;
  g_area = mmap(NULL, g_pages * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  g_version = mmap(NULL, g_pages * 8, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  WL_CHECK(g_area != MAP_FAILED && g_version != MAP_FAILED, "mmap failed");
  for (size_t p = 0; p < g_pages; p++) WritePage(p, 0);
  pthread_t writer, ticker;
  WL_CHECK(pthread_create(&writer, NULL, Writer, NULL) == 0, "pthread_create failed");
  WL_CHECK(pthread_create(&ticker, NULL, Ticker, NULL) == 0, "pthread_create failed");
  wl_signal_ready();
  char path[512], name[64], text[128];
  for (int report = 1;; ) {
    if (wl_go_exists()) break;
    snprintf(name, sizeof name, "report%d", report);
    wl_path(path, sizeof path, name);
    if (access(path, F_OK) == 0) {
      long long gap = atomic_exchange(&g_max_gap_ns, 0);
      snprintf(text, sizeof text, "%lld %ld %lld\n", gap / 1000, atomic_exchange(&g_written, 0),
               (long long)atomic_load(&g_max_gap_at));
      snprintf(name, sizeof name, "report%d.out", report);
      WriteFileAtomic(name, text);
      report++;
    }
    wl_sleep_ms(5);
  }
  atomic_store(&g_stop, 1);
  pthread_join(writer, NULL);
  pthread_join(ticker, NULL);
  size_t zero = 0;
  for (size_t p = 0; p < g_pages; p++) {
    const unsigned char* at = g_area + p * kPage;
    if (g_version[p] < 0) {
      for (size_t i = 0; i < kPage; i++) WL_CHECK(at[i] == 0, "page %zu was discarded but holds data", p);
      zero++;
      continue;
    }
    int64_t stamp;
    memcpy(&stamp, at, 8);
    WL_CHECK(stamp == g_version[p], "page %zu holds version %lld, the program last wrote version %lld", p,
             (long long)stamp, (long long)g_version[p]);
    ptrdiff_t bad = wl_check_pattern(at + 8, kPage - 8, Seed(p, stamp));
    WL_CHECK(bad < 0, "page %zu (version %lld) differs at byte %td", p, (long long)stamp, bad + 8);
  }
  printf("checked %zu pages (%zu discarded); longest gap %lld us\n", g_pages, zero,
         (long long)(atomic_load(&g_max_gap_ns) / 1000));
  wl_pass();
}
