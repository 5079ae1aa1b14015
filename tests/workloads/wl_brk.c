// brk: the program break is kernel state (mm->start_brk, mm->brk). The workload grows it by 1 MiB
// with sbrk and fills it. After restore sbrk(0) must return the same break, /proc/self/stat must
// report the same start_brk, the memory must hold its content, and the break must move again in
// both directions.
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wl_common.h"

#define kGrow (1ul << 20)

static char g_stat[4096];

// Field 47 of /proc/self/stat (start_brk).
static unsigned long StartBrk(void) {
  if (wl_read_file("/proc/self/stat", g_stat, sizeof g_stat) < 0) wl_fail("read stat: %s", wl_errstr());
  char* p = strrchr(g_stat, ')');  // comm may hold spaces
  if (!p) wl_fail("bad /proc/self/stat");
  p += 2;  // field 3 starts here
  for (int field = 3; field < 47; field++) {
    p = strchr(p, ' ');
    if (!p) wl_fail("short /proc/self/stat");
    p++;
  }
  return strtoul(p, NULL, 10);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  unsigned long start_brk = StartBrk();
  unsigned char* base = sbrk(0);
  WL_CHECK(base != (void*)-1, "sbrk(0): %s", wl_errstr());
  WL_CHECK(sbrk((intptr_t)kGrow) == base, "sbrk(+1 MiB): %s", wl_errstr());
  wl_fill_pattern(base, kGrow, 31337);
  unsigned char* top = sbrk(0);
  WL_CHECK(top == base + kGrow, "break is %p, want %p", (void*)top, (void*)(base + kGrow));

  wl_signal_ready();
  wl_wait_go();

  unsigned char* now = sbrk(0);
  WL_CHECK(now == top, "break %p became %p", (void*)top, (void*)now);
  unsigned long start_now = StartBrk();
  WL_CHECK(start_now == start_brk, "start_brk %#lx became %#lx", start_brk, start_now);
  ptrdiff_t bad = wl_check_pattern(base, kGrow, 31337);
  WL_CHECK(bad < 0, "memory below the break differs at offset %td", bad);

  WL_CHECK(sbrk(64 * 4096) == top, "sbrk(+256 KiB) after restore: %s", wl_errstr());
  memset(top, 0xab, 64 * 4096);
  WL_CHECK(sbrk(0) == top + 64 * 4096, "break did not grow");
  WL_CHECK(sbrk(-(intptr_t)(kGrow + 64 * 4096)) == top + 64 * 4096, "sbrk(shrink): %s", wl_errstr());
  WL_CHECK(sbrk(0) == base, "break did not shrink back to %p", (void*)base);
  wl_pass();
}
