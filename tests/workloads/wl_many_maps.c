// Many memory areas side by side: 3000 private anonymous areas of two pages carved from one
// reservation, every third one read-only, every third one PROT_NONE, each first page holding
// its own pattern. After restore each area must be where it was with its protection (from
// /proc/self/maps) and its pattern, and its second page still untouched zeros. The restore maps
// and protects them in one stop each (inject/stop_loop.h) and registers the runs of adjacent
// areas for its userfaultfd fill in one call: a result given to the wrong area shows here.
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "wl_common.h"

#define kAreas 3000
#define kPage 4096ul

static char g_maps[1 << 20];

static int ProtOf(int i) { return i % 3 == 0 ? PROT_READ | PROT_WRITE : i % 3 == 1 ? PROT_READ : PROT_NONE; }

int main(int argc, char** argv) {
  wl_init(argc, argv);
  unsigned char* base = mmap(NULL, kAreas * 2 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  WL_CHECK(base != MAP_FAILED, "mmap: %s", wl_errstr());
  for (int i = 0; i < kAreas; ++i) {
    unsigned char* a = base + (size_t)i * 2 * kPage;
    wl_fill_pattern(a, kPage, (uint64_t)i + 1);
    if (ProtOf(i) != (PROT_READ | PROT_WRITE)) WL_SYS(mprotect(a, 2 * kPage, ProtOf(i)));
  }

  wl_signal_ready();
  wl_wait_go();

  // Every area in /proc/self/maps, in order, with its protection.
  WL_CHECK(wl_read_file("/proc/self/maps", g_maps, sizeof g_maps) > 0, "read maps: %s", wl_errstr());
  int found = 0;
  for (char* line = g_maps; *line;) {
    unsigned long start, end;
    char perms[8];
    if (sscanf(line, "%lx-%lx %7s", &start, &end, perms) == 3 && start >= (unsigned long)base &&
        end <= (unsigned long)(base + kAreas * 2 * kPage)) {
      int i = (int)((start - (unsigned long)base) / (2 * kPage));
      WL_CHECK(start == (unsigned long)base + (unsigned long)i * 2 * kPage && end == start + 2 * kPage,
               "area %d is %lx-%lx", i, start, end);
      int p = ProtOf(i);
      char want[4] = {p & PROT_READ ? 'r' : '-', p & PROT_WRITE ? 'w' : '-', '-', 0};
      WL_CHECK(strncmp(perms, want, 3) == 0, "area %d has %.3s, want %s", i, perms, want);
      ++found;
    }
    char* next = strchr(line, '\n');
    if (!next) break;
    line = next + 1;
  }
  WL_CHECK(found == kAreas, "%d of %d areas in /proc/self/maps", found, kAreas);
  static const unsigned char zeros[kPage];
  for (int i = 0; i < kAreas; ++i) {
    unsigned char* a = base + (size_t)i * 2 * kPage;
    if (ProtOf(i) == PROT_NONE) WL_SYS(mprotect(a, 2 * kPage, PROT_READ));
    ptrdiff_t bad = wl_check_pattern(a, kPage, (uint64_t)i + 1);
    WL_CHECK(bad < 0, "area %d differs at byte %td", i, bad);
    WL_CHECK(memcmp(a + kPage, zeros, kPage) == 0, "area %d's untouched page is not zeros", i);
  }
  wl_pass();
}
