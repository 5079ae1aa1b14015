// A read lease: WORKDIR/leased opened O_RDONLY and fcntl(F_SETLEASE, F_RDLCK) on it (the process
// owns the file, so it may take a lease). After restore F_GETLEASE on the descriptor returns
// F_RDLCK again, and the descriptor still reads the file's content.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "wl_common.h"

static void check(int fd, const char* when) {
  int l = WL_SYS(fcntl(fd, F_GETLEASE));
  WL_CHECK(l == F_RDLCK, "%s: F_GETLEASE is %d, want F_RDLCK (%d)", when, l, F_RDLCK);
  char buf[16] = {0};
  WL_CHECK(pread(fd, buf, sizeof buf - 1, 0) == 6 && strcmp(buf, "leased") == 0, "%s: the file reads '%s'", when, buf);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  char path[600];
  wl_path(path, sizeof path, "leased");
  int w = WL_SYS(open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  WL_CHECK(write(w, "leased", 6) == 6, "write: %s", wl_errstr());
  close(w);  // a read lease needs no writer open, this process's included
  int fd = WL_SYS(open(path, O_RDONLY | O_CLOEXEC));
  WL_SYS(fcntl(fd, F_SETLEASE, F_RDLCK));
  check(fd, "before the checkpoint");

  wl_signal_ready();
  wl_wait_go();

  check(fd, "after restore");
  wl_pass();
}
