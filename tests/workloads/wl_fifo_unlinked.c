// A FIFO whose name was removed while it is open at both ends: WORKDIR/fifo made with mode 0640,
// its read end opened non-blocking and its write end, bytes written into it, then its name
// unlinked; a second unlinked FIFO held on one O_RDWR descriptor. After restore: both are still
// FIFOs with no name (nlink 0, /proc/self/fd shows "... (deleted)"), the first keeps mode 0640,
// its waiting bytes are read first and new bytes pass through each, and the read end is still
// non-blocking (an empty read says EAGAIN).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wl_common.h"

static void check_nameless(int fd, mode_t mode, const char* when) {
  struct stat st;
  WL_SYS(fstat(fd, &st));
  WL_CHECK(S_ISFIFO(st.st_mode), "%s: fd %d is not a FIFO (mode %o)", when, fd, st.st_mode);
  WL_CHECK(st.st_nlink == 0, "%s: fd %d has %lu links, want 0", when, fd, (unsigned long)st.st_nlink);
  WL_CHECK((st.st_mode & 07777) == mode, "%s: fd %d has mode %o, want %o", when, fd, st.st_mode & 07777, mode);
  char link[64], target[700];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, target, sizeof target - 1);
  WL_CHECK(n > 0, "%s: readlink %s: %s", when, link, wl_errstr());
  target[n] = '\0';
  WL_CHECK(n > 10 && strcmp(target + n - 10, " (deleted)") == 0, "%s: fd %d links to '%s'", when, fd, target);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  char path[600], path2[600];
  wl_path(path, sizeof path, "fifo");
  wl_path(path2, sizeof path2, "fifo-rw");
  WL_SYS(mkfifo(path, 0640));
  WL_SYS(chmod(path, 0640));  // whatever the umask
  WL_SYS(mkfifo(path2, 0600));
  int r = WL_SYS(open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  int w = WL_SYS(open(path, O_WRONLY | O_CLOEXEC));
  int rw = WL_SYS(open(path2, O_RDWR | O_CLOEXEC));
  WL_SYS(unlink(path));
  WL_SYS(unlink(path2));
  WL_CHECK(write(w, "waiting bytes", 13) == 13, "write the FIFO: %s", wl_errstr());
  WL_CHECK(write(rw, "both ways", 9) == 9, "write the second FIFO: %s", wl_errstr());
  check_nameless(r, 0640, "before the checkpoint");
  check_nameless(rw, 0600, "before the checkpoint");

  wl_signal_ready();
  wl_wait_go();

  check_nameless(r, 0640, "after restore");
  check_nameless(w, 0640, "after restore");
  check_nameless(rw, 0600, "after restore");
  char buf[64] = {0};
  WL_CHECK(read(r, buf, sizeof buf) == 13 && memcmp(buf, "waiting bytes", 13) == 0, "after restore: the waiting "
           "bytes read '%s'", buf);
  errno = 0;
  WL_CHECK(read(r, buf, sizeof buf) == -1 && errno == EAGAIN, "after restore: an empty read is not EAGAIN (%s)",
           wl_errstr());
  WL_CHECK(write(w, "new", 3) == 3, "after restore: write the FIFO: %s", wl_errstr());
  memset(buf, 0, sizeof buf);
  WL_CHECK(read(r, buf, sizeof buf) == 3 && memcmp(buf, "new", 3) == 0, "after restore: new bytes read '%s'", buf);
  memset(buf, 0, sizeof buf);
  WL_CHECK(read(rw, buf, sizeof buf) == 9 && memcmp(buf, "both ways", 9) == 0, "after restore: the second FIFO "
           "read '%s'", buf);
  wl_pass();
}
