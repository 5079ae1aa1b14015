// Personality: the workload sets PER_LINUX | ADDR_NO_RANDOMIZE | READ_IMPLIES_EXEC before the
// checkpoint. After restore personality(0xffffffff) must report the same value, and the
// READ_IMPLIES_EXEC bit must still act: a new PROT_READ mapping comes out executable.
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/personality.h>

#include "wl_common.h"

static char g_maps[1 << 16];

static char ExecBit(const void* addr) {
  if (wl_read_file("/proc/self/maps", g_maps, sizeof g_maps) < 0) wl_fail("read maps: %s", wl_errstr());
  for (char* line = g_maps; *line;) {
    unsigned long start, end;
    char perms[8];
    if (sscanf(line, "%lx-%lx %7s", &start, &end, perms) == 3 && start <= (unsigned long)addr &&
        (unsigned long)addr < end) {
      return perms[2];
    }
    char* next = strchr(line, '\n');
    if (!next) break;
    line = next + 1;
  }
  wl_fail("no mapping holds %p", addr);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  const unsigned long want = PER_LINUX | ADDR_NO_RANDOMIZE | READ_IMPLIES_EXEC;
  WL_SYS(personality(want));
  int now = personality(0xffffffff);
  WL_CHECK(now == (int)want, "personality is %#x right after setting %#lx", now, want);

  wl_signal_ready();
  wl_wait_go();

  now = personality(0xffffffff);
  WL_CHECK(now == (int)want, "personality %#lx became %#x", want, now);
  void* p = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  WL_CHECK(p != MAP_FAILED, "mmap: %s", wl_errstr());
  WL_CHECK(ExecBit(p) == 'x', "READ_IMPLIES_EXEC no longer applies to new mappings");
  WL_SYS(personality(PER_LINUX));
  void* q = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  WL_CHECK(q != MAP_FAILED && ExecBit(q) == '-', "PROT_READ mapping executable without READ_IMPLIES_EXEC");
  wl_pass();
}
