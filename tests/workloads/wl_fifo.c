// Named FIFOs survive a round trip: a FIFO in the work directory open at both ends (the read
// end non-blocking) with bytes waiting in it, and a second FIFO held open for reading and
// writing on one descriptor. After go: the waiting bytes are read first, new bytes pass
// through both FIFOs, the read end is still non-blocking, and the FIFOs are still the
// files in the work directory.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wl_common.h"

int main(int argc, char** argv) {
  wl_init(argc, argv);
  char path[600], path2[600];
  wl_path(path, sizeof path, "fifo");
  wl_path(path2, sizeof path2, "fifo-rw");
  WL_SYS(mkfifo(path, 0640));
  WL_SYS(mkfifo(path2, 0600));
  int r = WL_SYS(open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  int w = WL_SYS(open(path, O_WRONLY | O_CLOEXEC));
  WL_CHECK(write(w, "waiting bytes", 13) == 13, "write the FIFO");
  int rw = WL_SYS(open(path2, O_RDWR));
  WL_CHECK(write(rw, "both ways", 9) == 9, "write the second FIFO");
  struct stat before;
  WL_SYS(stat(path, &before));

  wl_signal_ready();
  wl_wait_go();

  char buf[32] = {0};
  WL_CHECK(read(r, buf, sizeof buf) == 13 && memcmp(buf, "waiting bytes", 13) == 0, "read '%s' from the FIFO", buf);
  WL_CHECK(read(r, buf, sizeof buf) < 0 && errno == EAGAIN, "the empty FIFO's read end did not return EAGAIN");
  WL_CHECK((fcntl(r, F_GETFL) & O_NONBLOCK) != 0, "the read end lost O_NONBLOCK");
  WL_CHECK((fcntl(w, F_GETFL) & O_NONBLOCK) == 0, "the write end gained O_NONBLOCK");
  WL_CHECK(write(w, "fresh", 5) == 5, "write the FIFO after restore");
  memset(buf, 0, sizeof buf);
  WL_CHECK(read(r, buf, sizeof buf) == 5 && memcmp(buf, "fresh", 5) == 0, "read '%s' after restore", buf);
  memset(buf, 0, sizeof buf);
  WL_CHECK(read(rw, buf, 9) == 9 && memcmp(buf, "both ways", 9) == 0, "read '%s' from the second FIFO", buf);
  struct stat now, st_fd;
  WL_SYS(stat(path, &now));
  WL_SYS(fstat(r, &st_fd));
  WL_CHECK(now.st_ino == before.st_ino && st_fd.st_ino == now.st_ino, "the FIFO is not the one in the work directory");
  unlink(path);
  unlink(path2);
  wl_pass();
}
