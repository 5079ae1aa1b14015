// Guard regions (madvise MADV_GUARD_INSTALL, Linux 6.13+): pages 4-7 of a 16-page private anonymous
// area become markers that fault on any access, while the pages around them keep their data. After
// restore the same four pages must still fault (SIGSEGV, caught here) and the twelve others hold
// their data. (Not the PROT_NONE guard areas of wl_guard_pages: these live inside one area.)
#define _GNU_SOURCE
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "wl_common.h"

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif

#define PAGES 16
#define PG 4096

static sigjmp_buf g_jump;

static void on_segv(int sig) {
  (void)sig;
  siglongjmp(g_jump, 1);
}

static int faults(volatile const char* p) {
  if (sigsetjmp(g_jump, 1) == 0) {
    (void)*p;
    return 0;
  }
  return 1;
}

static void check(const char* a, const char* when) {
  for (int i = 0; i < PAGES; i++) {
    int guard = i >= 4 && i < 8;
    int f = faults(a + i * PG + 7);
    WL_CHECK(f == guard, "%s: page %d %s", when, i, guard ? "no longer faults (guard lost)" : "faults");
    if (!guard) {
      for (int k = 0; k < PG; k += 511) {
        WL_CHECK(a[i * PG + k] == 'A' + i, "%s: page %d byte %d is %#x, want %#x", when, i, k, a[i * PG + k], 'A' + i);
      }
    }
  }
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_segv;
  sa.sa_flags = SA_NODEFER;
  WL_SYS(sigaction(SIGSEGV, &sa, NULL));
  char* a = mmap(NULL, PAGES * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  WL_CHECK(a != MAP_FAILED, "mmap: %s", wl_errstr());
  for (int i = 0; i < PAGES; i++) memset(a + i * PG, 'A' + i, PG);
  if (madvise(a + 4 * PG, 4 * PG, MADV_GUARD_INSTALL) != 0) {
    WL_CHECK(errno == EINVAL, "madvise(MADV_GUARD_INSTALL): %s", wl_errstr());
    printf("note: this kernel has no MADV_GUARD_INSTALL; nothing to test\n");
    fflush(stdout);
    wl_signal_ready();
    wl_wait_go();
    wl_pass();
  }
  check(a, "before the checkpoint");

  wl_signal_ready();
  wl_wait_go();

  check(a, "after restore");
  wl_pass();
}
