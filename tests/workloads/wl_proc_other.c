// A file of another process's /proc entry kept open: /proc/1/status, opened before the
// checkpoint. Process 1 is not part of the checkpoint, so after a restore that id could name
// anything: the dump must refuse it, naming the file. After go the descriptor still reads
// process 1's status (the refused dump changed nothing).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "wl_common.h"

static void check(int fd, const char* when) {
  static char buf[8192];
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  WL_CHECK(n > 0, "%s: pread /proc/1/status: %s", when, n < 0 ? wl_errstr() : "empty");
  buf[n] = '\0';
  WL_CHECK(strstr(buf, "\nPid:\t1\n") != NULL, "%s: /proc/1/status has no 'Pid: 1' line", when);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  int fd = WL_SYS(open("/proc/1/status", O_RDONLY | O_CLOEXEC));
  check(fd, "before the checkpoint");

  wl_signal_ready();
  wl_wait_go();

  check(fd, "after go");
  wl_pass();
}
