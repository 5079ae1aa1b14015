// An O_TMPFILE file: open(WORKDIR, O_TMPFILE|O_RDWR, 0600), 64 KiB written. It never had a name
// (nlink 0) but, unlike an unlinked file, may be given one with linkat. After restore: the data
// reads back, fstat shows st_nlink 0 and mode 0600, and linkat("/proc/self/fd/N", AT_SYMLINK_FOLLOW)
// to WORKDIR/linked works; the linked file holds the data and is the same inode as the descriptor.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wl_common.h"

#define LEN (64 * 1024)

static char g_buf[LEN];

static void check_data(int fd, const char* when) {
  WL_CHECK(pread(fd, g_buf, LEN, 0) == LEN, "%s: pread: %s", when, wl_errstr());
  ptrdiff_t bad = wl_check_pattern(g_buf, LEN, 42);
  WL_CHECK(bad < 0, "%s: data differs at %td", when, bad);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  int fd = WL_SYS(open(wl_workdir(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  wl_fill_pattern(g_buf, LEN, 42);
  WL_CHECK(write(fd, g_buf, LEN) == LEN, "write: %s", wl_errstr());
  struct stat st;
  WL_SYS(fstat(fd, &st));
  WL_CHECK(st.st_nlink == 0, "before the checkpoint: nlink %lu, want 0", (unsigned long)st.st_nlink);
  check_data(fd, "before the checkpoint");

  wl_signal_ready();
  wl_wait_go();

  check_data(fd, "after restore");
  WL_SYS(fstat(fd, &st));
  WL_CHECK(st.st_nlink == 0, "after restore: nlink %lu, want 0", (unsigned long)st.st_nlink);
  WL_CHECK((st.st_mode & 07777) == 0600, "after restore: mode %#o, want 0600", st.st_mode & 07777);
  WL_CHECK(st.st_size == LEN, "after restore: size %lld, want %d", (long long)st.st_size, LEN);
  char self[64], linked[600];
  snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
  wl_path(linked, sizeof linked, "linked");
  WL_CHECK(linkat(AT_FDCWD, self, AT_FDCWD, linked, AT_SYMLINK_FOLLOW) == 0, "after restore: linkat %s -> %s: %s",
           self, linked, wl_errstr());
  struct stat lst;
  WL_SYS(stat(linked, &lst));
  WL_SYS(fstat(fd, &st));
  WL_CHECK(lst.st_ino == st.st_ino && lst.st_dev == st.st_dev, "after restore: the linked name is another inode");
  WL_CHECK(st.st_nlink == 1, "after restore: nlink %lu after linkat, want 1", (unsigned long)st.st_nlink);
  int rd = WL_SYS(open(linked, O_RDONLY | O_CLOEXEC));
  check_data(rd, "after restore, through the linked name");
  close(rd);
  wl_pass();
}
