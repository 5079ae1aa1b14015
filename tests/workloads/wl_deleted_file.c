// A file deleted while open: the workload writes 256 KiB to WORKDIR/doomed.dat, unlinks it and keeps
// the descriptor (at a non-zero offset). The dumper can only get the content through the descriptor.
// After restore the descriptor must still refer to an unlinked file (st_nlink 0, "(deleted)" in
// /proc/self/fd) holding the same bytes, at the same offset, and accept more writes; no file may have
// reappeared under the old name.
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wl_common.h"

#define kSize (256 * 1024)

static unsigned char g_buf[kSize];

int main(int argc, char** argv) {
  wl_init(argc, argv);
  char path[600];
  wl_path(path, sizeof path, "doomed.dat");
  int fd = WL_SYS(open(path, O_RDWR | O_CREAT | O_TRUNC, 0600));
  wl_fill_pattern(g_buf, kSize, 666);
  WL_CHECK(write(fd, g_buf, kSize) == kSize, "write: %s", wl_errstr());
  WL_SYS(lseek(fd, 12345, SEEK_SET));
  WL_SYS(unlink(path));

  wl_signal_ready();
  wl_wait_go();

  struct stat st;
  WL_SYS(fstat(fd, &st));
  WL_CHECK(S_ISREG(st.st_mode), "not a regular file any more");
  WL_CHECK(st.st_nlink == 0, "st_nlink is %lu, want 0 (the file was deleted)", (unsigned long)st.st_nlink);
  WL_CHECK(st.st_size == kSize, "size %lld, want %d", (long long)st.st_size, kSize);
  WL_CHECK(lseek(fd, 0, SEEK_CUR) == 12345, "offset is %lld, want 12345", (long long)lseek(fd, 0, SEEK_CUR));
  WL_CHECK(access(path, F_OK) != 0, "%s exists again", path);
  char link[PATH_MAX], proc[64];
  snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(proc, link, sizeof link - 1);
  WL_CHECK(n > 0, "readlink %s: %s", proc, wl_errstr());
  link[n] = '\0';
  WL_CHECK(strstr(link, "(deleted)") != NULL, "%s is '%s', want a deleted file", proc, link);

  memset(g_buf, 0, kSize);
  WL_CHECK(pread(fd, g_buf, kSize, 0) == kSize, "pread: %s", wl_errstr());
  ptrdiff_t bad = wl_check_pattern(g_buf, kSize, 666);
  WL_CHECK(bad < 0, "content differs at offset %td", bad);
  static const char kMore[] = "written after restore";
  WL_CHECK(write(fd, kMore, sizeof kMore) == (ssize_t)sizeof kMore, "write after restore: %s", wl_errstr());
  char back[sizeof kMore];
  WL_CHECK(pread(fd, back, sizeof back, 12345) == (ssize_t)sizeof back && memcmp(back, kMore, sizeof back) == 0,
           "write after restore did not land at offset 12345");
  wl_pass();
}
