// An open file whose name was unlinked while a second hard link keeps it alive: WORKDIR/first is
// written, linked to WORKDIR/second, opened by the first name, and the first name unlinked.
// /proc/self/fd shows "WORKDIR/first (deleted)" although the file is not gone (nlink 1). After
// restore the descriptor still reads the data, fstat's device and inode equal stat(second)'s (the
// same file, not a recreated copy), nlink is 1, and a write through the descriptor shows in second.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wl_common.h"

#define LEN 8192

static char g_buf[LEN];

static void check(int fd, const char* second, const char* when) {
  WL_CHECK(pread(fd, g_buf, LEN, 0) == LEN, "%s: pread: %s", when, wl_errstr());
  WL_CHECK(wl_check_pattern(g_buf, LEN, 9) < 0, "%s: data differs", when);
  struct stat fst, st;
  WL_SYS(fstat(fd, &fst));
  WL_SYS(stat(second, &st));
  WL_CHECK(fst.st_dev == st.st_dev && fst.st_ino == st.st_ino, "%s: descriptor is inode %lu, WORKDIR/second is %lu",
           when, (unsigned long)fst.st_ino, (unsigned long)st.st_ino);
  WL_CHECK(fst.st_nlink == 1, "%s: nlink %lu, want 1", when, (unsigned long)fst.st_nlink);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  char first[600], second[600];
  wl_path(first, sizeof first, "first");
  wl_path(second, sizeof second, "second");
  int w = WL_SYS(open(first, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  wl_fill_pattern(g_buf, LEN, 9);
  WL_CHECK(write(w, g_buf, LEN) == LEN, "write: %s", wl_errstr());
  close(w);
  WL_SYS(link(first, second));
  int fd = WL_SYS(open(first, O_RDWR | O_CLOEXEC));
  WL_SYS(unlink(first));
  check(fd, second, "before the checkpoint");

  wl_signal_ready();
  wl_wait_go();

  check(fd, second, "after restore");
  WL_CHECK(pwrite(fd, "Z", 1, LEN) == 1, "after restore: pwrite: %s", wl_errstr());
  int rd = WL_SYS(open(second, O_RDONLY | O_CLOEXEC));
  char c = 0;
  WL_CHECK(pread(rd, &c, 1, LEN) == 1 && c == 'Z', "after restore: a write through the descriptor is not in second");
  close(rd);
  wl_pass();
}
