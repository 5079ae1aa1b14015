// Resource limits: RLIMIT_NOFILE (soft lowered to 200, hard to 4096), RLIMIT_STACK (soft 4 MiB),
// RLIMIT_CORE (0 soft, 1 MiB hard) and RLIMIT_CPU/RLIMIT_FSIZE/RLIMIT_NPROC soft limits are lowered
// before the checkpoint. After restore getrlimit must return the same values for every resource,
// and the NOFILE limit must be enforced (a descriptor at 200 or above cannot be created).
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

#include "wl_common.h"

static struct rlimit Get(int resource) {
  struct rlimit r;
  if (getrlimit(resource, &r) != 0) wl_fail("getrlimit(%d): %s", resource, wl_errstr());
  return r;
}

static void Lower(int resource, rlim_t soft, rlim_t hard) {
  struct rlimit old = Get(resource);
  struct rlimit r = {soft, hard};
  if (hard == RLIM_INFINITY || (old.rlim_max != RLIM_INFINITY && hard > old.rlim_max)) r.rlim_max = old.rlim_max;
  if (r.rlim_max != RLIM_INFINITY && r.rlim_cur > r.rlim_max) r.rlim_cur = r.rlim_max;
  if (setrlimit(resource, &r) != 0) wl_fail("setrlimit(%d): %s", resource, wl_errstr());
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  Lower(RLIMIT_NOFILE, 200, 4096);
  Lower(RLIMIT_STACK, 4ul << 20, RLIM_INFINITY);
  Lower(RLIMIT_CORE, 0, 1ul << 20);
  Lower(RLIMIT_CPU, 3600, RLIM_INFINITY);
  Lower(RLIMIT_FSIZE, 1ul << 30, RLIM_INFINITY);
  Lower(RLIMIT_NPROC, 5000, RLIM_INFINITY);
  struct rlimit before[RLIM_NLIMITS];
  for (int r = 0; r < RLIM_NLIMITS; r++) before[r] = Get(r);

  wl_signal_ready();
  wl_wait_go();

  for (int r = 0; r < RLIM_NLIMITS; r++) {
    struct rlimit now = Get(r);
    WL_CHECK(now.rlim_cur == before[r].rlim_cur && now.rlim_max == before[r].rlim_max,
             "rlimit %d: %llu/%llu became %llu/%llu", r, (unsigned long long)before[r].rlim_cur,
             (unsigned long long)before[r].rlim_max, (unsigned long long)now.rlim_cur,
             (unsigned long long)now.rlim_max);
  }
  errno = 0;
  WL_CHECK(dup2(0, 200) == -1 && errno == EBADF, "dup2 to fd 200 worked with RLIMIT_NOFILE 200");
  int fd = dup2(0, 199);
  WL_CHECK(fd == 199, "dup2 to fd 199 failed: %s", wl_errstr());
  close(fd);
  wl_pass();
}
