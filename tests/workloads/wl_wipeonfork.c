// Fork-time behaviour of memory areas, which only shows in VmFlags and in a child: W has
// MADV_WIPEONFORK ("wf"), K has MADV_DONTFORK ("dc"), both filled with a pattern; D, if the kernel
// has MAP_DROPPABLE (6.11+; "dp", which also implies "wf"), holds a byte. Before the checkpoint and
// after restore: the parent still sees the patterns, VmFlags shows the flags, and a forked child
// finds W all zeros and K not mapped at all (mincore fails ENOMEM), D zeroed too. Without
// MAP_DROPPABLE (mmap EINVAL) that part is skipped with a note on stdout.
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "wl_common.h"

#ifndef MAP_DROPPABLE
#define MAP_DROPPABLE 0x08
#endif
#define LEN (4 * 4096)

static char smaps[1 << 20];

static void flags_of(const void* addr, char* flags, size_t size) {
  WL_CHECK(wl_read_file("/proc/self/smaps", smaps, sizeof smaps) > 0, "read smaps: %s", wl_errstr());
  unsigned long a = (unsigned long)addr;
  int in = 0;
  for (char *line = smaps, *next; line && *line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = '\0';
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
      in = lo <= a && a < hi;
    } else if (in && strncmp(line, "VmFlags:", 8) == 0) {
      snprintf(flags, size, "%s ", line + 8);
      return;
    }
  }
  wl_fail("no smaps entry for %p", addr);
}

static void expect_flag(const void* addr, const char* flag, const char* name, const char* when) {
  char flags[256], want[8];
  flags_of(addr, flags, sizeof flags);
  snprintf(want, sizeof want, " %s ", flag);
  WL_CHECK(strstr(flags, want) != NULL, "%s: %s lacks '%s': VmFlags:%s", when, name, flag, flags);
}

// Checks the parent's view, then forks a child that exits 0 if W is zeros, K unmapped and D (if
// any) zeros, otherwise with a code saying which is not.
static void check(char* w, char* k, char* d, const char* when) {
  WL_CHECK(wl_check_pattern(w, LEN, 1) < 0, "%s: W's pattern changed in the parent", when);
  WL_CHECK(wl_check_pattern(k, LEN, 2) < 0, "%s: K's pattern changed in the parent", when);
  expect_flag(w, "wf", "W (MADV_WIPEONFORK)", when);
  expect_flag(k, "dc", "K (MADV_DONTFORK)", when);
  if (d) {
    WL_CHECK(d[0] == 'd', "%s: D's byte changed in the parent", when);
    expect_flag(d, "dp", "D (MAP_DROPPABLE)", when);
  }
  pid_t c = WL_SYS(fork());
  if (c == 0) {
    for (int i = 0; i < LEN; i++) if (w[i] != 0) _exit(10);
    unsigned char vec[LEN / 4096];
    errno = 0;
    if (mincore(k, LEN, vec) != -1 || errno != ENOMEM) _exit(11);
    if (d && d[0] != 0) _exit(12);
    _exit(0);
  }
  int status;
  WL_SYS(waitpid(c, &status, 0));
  WL_CHECK(WIFEXITED(status), "%s: the forked child died of signal %d", when, WTERMSIG(status));
  int code = WEXITSTATUS(status);
  WL_CHECK(code != 10, "%s: a forked child sees W's data (not wiped on fork)", when);
  WL_CHECK(code != 11, "%s: a forked child has K mapped (not MADV_DONTFORK)", when);
  WL_CHECK(code != 12, "%s: a forked child sees D's data (droppable memory not wiped on fork)", when);
  WL_CHECK(code == 0, "%s: the forked child exited %d", when, code);
}

static char* map(int flags) {
  char* p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, flags | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  char* w = map(MAP_PRIVATE);
  char* k = map(MAP_PRIVATE);
  WL_CHECK(w && k, "mmap: %s", wl_errstr());
  WL_SYS(madvise(w, LEN, MADV_WIPEONFORK));
  WL_SYS(madvise(k, LEN, MADV_DONTFORK));
  wl_fill_pattern(w, LEN, 1);
  wl_fill_pattern(k, LEN, 2);
  char* d = map(MAP_DROPPABLE);
  if (d) {
    d[0] = 'd';
  } else {
    WL_CHECK(errno == EINVAL, "mmap MAP_DROPPABLE: %s", wl_errstr());
    printf("note: no MAP_DROPPABLE on this kernel, that part is skipped\n");
    fflush(stdout);
  }
  check(w, k, d, "before the checkpoint");

  wl_signal_ready();
  wl_wait_go();

  check(w, k, d, "after restore");
  wl_pass();
}
