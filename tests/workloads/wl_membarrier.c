// membarrier registrations are per-process (mm) state that nothing in /proc shows. The process
// registers for MEMBARRIER_CMD_PRIVATE_EXPEDITED, its SYNC_CORE variant and (if the kernel has it)
// the RSEQ variant. Each command fails EPERM before its registration (checked at start, so the check
// can fail) and must succeed after it, before the checkpoint and after restore.
#define _GNU_SOURCE
#include <errno.h>
#include <linux/membarrier.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "wl_common.h"

#ifndef MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ
#define MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ (1 << 7)
#define MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ (1 << 8)
#endif

static long membarrier(int cmd) { return syscall(SYS_membarrier, cmd, 0, 0); }

struct kind {
  const char* name;
  int cmd, reg;
};
static const struct kind kKinds[3] = {
    {"PRIVATE_EXPEDITED", MEMBARRIER_CMD_PRIVATE_EXPEDITED, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED},
    {"PRIVATE_EXPEDITED_SYNC_CORE", MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE,
     MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE},
    {"PRIVATE_EXPEDITED_RSEQ", MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ},
};

int main(int argc, char** argv) {
  wl_init(argc, argv);
  long supported = membarrier(MEMBARRIER_CMD_QUERY);
  WL_CHECK(supported >= 0, "MEMBARRIER_CMD_QUERY: %s", wl_errstr());
  int used[3] = {0, 0, 0};
  for (int i = 0; i < 3; i++) {
    if (!(supported & kKinds[i].cmd) || !(supported & kKinds[i].reg)) {
      WL_CHECK(i == 2, "the kernel lacks membarrier %s", kKinds[i].name);
      printf("note: no membarrier %s on this kernel, not tested\n", kKinds[i].name);
      fflush(stdout);
      continue;
    }
    used[i] = 1;
    errno = 0;
    WL_CHECK(membarrier(kKinds[i].cmd) == -1 && errno == EPERM, "at start: %s before registering: %s, want EPERM",
             kKinds[i].name, errno ? wl_errstr() : "succeeded");
    WL_CHECK(membarrier(kKinds[i].reg) == 0, "register %s: %s", kKinds[i].name, wl_errstr());
    WL_CHECK(membarrier(kKinds[i].cmd) == 0, "before the checkpoint: %s: %s", kKinds[i].name, wl_errstr());
  }

  wl_signal_ready();
  wl_wait_go();

  for (int i = 0; i < 3; i++) {
    if (used[i]) WL_CHECK(membarrier(kKinds[i].cmd) == 0, "after restore: %s: %s (registration lost)", kKinds[i].name, wl_errstr());
  }
  wl_pass();
}
