// Many descriptors of one file: the file opened 1500 times (1500 open file descriptions, each at
// its own offset) and each open dup'd once, at numbers 5000 and up. After restore every
// descriptor must be at its number with its own description's offset, each dup must share its
// open's description (moving one moves the other) and no two opens may share one. A dump that
// matched descriptors to descriptions by comparing each with every earlier one took ~n² kcmp
// calls here; a restorer needs about highest number + descriptions descriptors at once
// (restore/files.h), which tests/integration checks a dump refuses before anything is touched.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

#include "wl_common.h"

#define kOpens 1500
#define kDupBase 5000

static int g_open[kOpens];

static off_t Offset(int i) { return (off_t)i * 7 + 3; }

int main(int argc, char** argv) {
  wl_init(argc, argv);
  struct rlimit rl;
  WL_SYS(getrlimit(RLIMIT_NOFILE, &rl));
  WL_CHECK(rl.rlim_max > kDupBase + kOpens, "hard RLIMIT_NOFILE %lu is too low for this workload", (unsigned long)rl.rlim_max);
  rl.rlim_cur = rl.rlim_max;
  WL_SYS(setrlimit(RLIMIT_NOFILE, &rl));
  char path[600];
  wl_path(path, sizeof path, "one");
  int made = WL_SYS(open(path, O_RDWR | O_CREAT | O_TRUNC, 0600));
  WL_SYS(ftruncate(made, 1 << 20));
  close(made);
  for (int i = 0; i < kOpens; ++i) {
    g_open[i] = WL_SYS(open(path, i % 2 ? O_RDONLY : O_RDWR));
    WL_SYS(lseek(g_open[i], Offset(i), SEEK_SET));
    WL_SYS(dup2(g_open[i], kDupBase + i));
  }

  wl_signal_ready();
  wl_wait_go();

  for (int i = 0; i < kOpens; ++i) {
    off_t at = lseek(g_open[i], 0, SEEK_CUR);
    WL_CHECK(at == Offset(i), "fd %d (open %d) at offset %ld, want %ld", g_open[i], i, (long)at, (long)Offset(i));
    off_t dup_at = lseek(kDupBase + i, 0, SEEK_CUR);
    WL_CHECK(dup_at == Offset(i), "fd %d (dup of open %d) at offset %ld, want %ld", kDupBase + i, i, (long)dup_at,
             (long)Offset(i));
    int acc = WL_SYS(fcntl(g_open[i], F_GETFL)) & O_ACCMODE;
    WL_CHECK(acc == (i % 2 ? O_RDONLY : O_RDWR), "fd %d opened with access mode %d", g_open[i], acc);
  }
  // Shared and not shared: moving each open moves its dup and no other open.
  for (int i = 0; i < kOpens; ++i) WL_SYS(lseek(g_open[i], 900000 + i, SEEK_SET));
  for (int i = 0; i < kOpens; ++i) {
    off_t dup_at = lseek(kDupBase + i, 0, SEEK_CUR);
    WL_CHECK(dup_at == 900000 + i, "fd %d is not open %d's description any more (offset %ld)", kDupBase + i, i,
             (long)dup_at);
  }
  wl_pass();
}
