// A large sparse file that is unlinked but still open: a restore that recreates it must keep it
// sparse, the same size, the same owner and mode, with its data where it was. WORKDIR/sparse.dat is
// ftruncated to 1 GiB, 4 KiB of data written at 0, 512 MiB and 1 GiB - 4 KiB (the rest holes),
// fchown'ed to 12345:23456, fchmod'ed 0640 and unlinked. After restore: size 1 GiB, owner and mode
// unchanged, st_blocks under 1 MiB worth, the SEEK_DATA/SEEK_HOLE walk gives the same segments as
// before the checkpoint, and the three data blocks read back intact.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wl_common.h"

#define SIZE (1ll << 30)
#define BLK 4096
#define MAX_SEGS 64

static const off_t kData[3] = {0, SIZE / 2, SIZE - BLK};

// Fills segs with alternating [data start, hole start) pairs; returns how many offsets.
static int walk(int fd, off_t* segs) {
  int n = 0;
  off_t at = 0;
  while (at < SIZE && n + 2 <= MAX_SEGS) {
    off_t d = lseek(fd, at, SEEK_DATA);
    if (d < 0 && errno == ENXIO) break;
    WL_CHECK(d >= 0, "SEEK_DATA from %lld: %s", (long long)at, wl_errstr());
    off_t h = WL_SYS(lseek(fd, d, SEEK_HOLE));
    segs[n++] = d;
    segs[n++] = h;
    at = h;
  }
  return n;
}

static void check(int fd, const off_t* before, int nbefore, const char* when) {
  struct stat st;
  WL_SYS(fstat(fd, &st));
  WL_CHECK(st.st_size == SIZE, "%s: size %lld, want %lld", when, (long long)st.st_size, SIZE);
  WL_CHECK(st.st_uid == 12345 && st.st_gid == 23456, "%s: owner %d:%d, want 12345:23456", when, (int)st.st_uid,
           (int)st.st_gid);
  WL_CHECK((st.st_mode & 07777) == 0640, "%s: mode %#o, want 0640", when, st.st_mode & 07777);
  WL_CHECK(st.st_nlink == 0, "%s: nlink %lu, want 0 (deleted)", when, (unsigned long)st.st_nlink);
  WL_CHECK(st.st_blocks < 2048, "%s: %lld blocks allocated (holes filled?)", when, (long long)st.st_blocks);
  off_t segs[MAX_SEGS];
  int n = walk(fd, segs);
  if (before) {
    WL_CHECK(n == nbefore, "%s: %d data/hole offsets, %d before the checkpoint", when, n, nbefore);
    for (int i = 0; i < n; i++) {
      WL_CHECK(segs[i] == before[i], "%s: segment offset %d is %lld, was %lld", when, i, (long long)segs[i],
               (long long)before[i]);
    }
  }
  char buf[BLK];
  for (int i = 0; i < 3; i++) {
    WL_CHECK(pread(fd, buf, BLK, kData[i]) == BLK, "%s: pread at %lld: %s", when, (long long)kData[i], wl_errstr());
    WL_CHECK(wl_check_pattern(buf, BLK, 100 + i) < 0, "%s: data at %lld differs", when, (long long)kData[i]);
  }
  WL_CHECK(pread(fd, buf, BLK, SIZE / 4) == BLK, "%s: pread hole", when);
  for (int i = 0; i < BLK; i++) WL_CHECK(buf[i] == 0, "%s: the hole at 256 MiB holds data", when);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  char path[600];
  wl_path(path, sizeof path, "sparse.dat");
  int fd = WL_SYS(open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  WL_SYS(ftruncate(fd, SIZE));
  char buf[BLK];
  for (int i = 0; i < 3; i++) {
    wl_fill_pattern(buf, BLK, 100 + i);
    WL_CHECK(pwrite(fd, buf, BLK, kData[i]) == BLK, "pwrite: %s", wl_errstr());
  }
  WL_SYS(fchown(fd, 12345, 23456));
  WL_SYS(fchmod(fd, 0640));
  WL_SYS(unlink(path));
  WL_SYS(fsync(fd));  // so that st_blocks and SEEK_DATA see allocated blocks on every file system
  static off_t before[MAX_SEGS];
  int nbefore = walk(fd, before);
  WL_CHECK(nbefore >= 6, "only %d data/hole offsets before the checkpoint: is the file system sparse?", nbefore);
  check(fd, NULL, 0, "before the checkpoint");

  wl_signal_ready();
  wl_wait_go();

  check(fd, before, nbefore, "after restore");
  wl_pass();
}
