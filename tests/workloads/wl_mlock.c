// Locked memory: A is mmap'ed MAP_LOCKED, B mlock()ed, C mlock2(MLOCK_ONFAULT)ed with only its first
// page touched (4 pages each). In /proc/self/smaps a locked area shows "lo" in VmFlags and its
// resident pages as Locked; an on-fault one also shows "lf" and locks only the pages faulted in. After
// restore: A and B show "lo" (not "lf") with all 16 kB Locked; C shows "lo lf" with exactly its one
// touched page Locked (a restore that mlock()s it whole, or faults it all in, shows 16 kB), and
// touching a second page of C makes it 8 kB.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "wl_common.h"

#define PAGE 4096
#define LEN (4 * PAGE)

static char smaps[1 << 20];

// Finds the smaps entry holding addr; returns its Locked kB and copies its VmFlags line into flags.
static long area_info(const void* addr, char* flags, size_t size) {
  WL_CHECK(wl_read_file("/proc/self/smaps", smaps, sizeof smaps) > 0, "read smaps: %s", wl_errstr());
  unsigned long a = (unsigned long)addr;
  char* line = smaps;
  int in = 0;
  long locked = -1;
  while (line && *line) {
    char* next = strchr(line, '\n');
    if (next) *next++ = '\0';
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {  // an area's header line
      in = lo <= a && a < hi;
    } else if (in && strncmp(line, "Locked:", 7) == 0) {
      locked = strtol(line + 7, NULL, 10);
    } else if (in && strncmp(line, "VmFlags:", 8) == 0) {
      snprintf(flags, size, "%s ", line + 8);
      return locked;
    }
    line = next;
  }
  wl_fail("no smaps entry for %p", addr);
}

static void expect(const void* addr, const char* name, long want_kb, int onfault, const char* when) {
  char flags[256];
  long kb = area_info(addr, flags, sizeof flags);
  WL_CHECK(strstr(flags, " lo ") != NULL, "%s: %s is not locked: VmFlags:%s", when, name, flags);
  WL_CHECK((strstr(flags, " lf ") != NULL) == onfault, "%s: %s VmFlags:%s, want %s 'lf'", when, name, flags,
           onfault ? "with" : "without");
  WL_CHECK(kb == want_kb, "%s: %s has %ld kB Locked, want %ld", when, name, kb, want_kb);
}

static void check(char* a, char* b, char* c, const char* when) {
  expect(a, "A (MAP_LOCKED)", LEN / 1024, 0, when);
  expect(b, "B (mlock)", LEN / 1024, 0, when);
  expect(c, "C (mlock2 MLOCK_ONFAULT, 1 page touched)", PAGE / 1024, 1, when);
  WL_CHECK(a[PAGE] == 'A' && b[PAGE] == 'B' && c[0] == 'C', "%s: content lost", when);
}

static char* map(int flags) {
  // A guard page of PROT_NONE on each side keeps the areas from merging with each other.
  char* g = mmap(NULL, LEN + 2 * PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  WL_CHECK(g != MAP_FAILED, "mmap: %s", wl_errstr());
  char* p = mmap(g + PAGE, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | flags, -1, 0);
  WL_CHECK(p != MAP_FAILED, "mmap: %s", wl_errstr());
  return p;
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  char* a = map(MAP_LOCKED);
  char* b = map(0);
  char* c = map(0);
  WL_SYS(mlock(b, LEN));
  WL_SYS(mlock2(c, LEN, MLOCK_ONFAULT));
  memset(a, 'A', LEN);
  memset(b, 'B', LEN);
  c[0] = 'C';
  check(a, b, c, "before the checkpoint");

  wl_signal_ready();
  wl_wait_go();

  check(a, b, c, "after restore");
  c[2 * PAGE] = 'c';
  expect(c, "C after touching a second page", 2 * PAGE / 1024, 1, "after restore");
  wl_pass();
}
