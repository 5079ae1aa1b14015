// Files of /proc/self kept open: /proc/self/status, /proc/self/stat and a descriptor of the
// /proc/self directory itself, all opened before the checkpoint. /proc/self resolves when opened,
// so the descriptors belong to this process's own /proc/<pid> entry. After restore, pread from
// offset 0 of status shows "Pid:\t<getpid()>", stat starts with "<getpid()> (", and
// openat(dir_fd, "status") through the directory descriptor also shows this process's pid (a
// restore that reopened them inside the restorer, or a dead /proc/<pid>, fails here).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wl_common.h"

static long status_pid(int fd, const char* what, const char* when) {
  static char buf[8192];
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  WL_CHECK(n > 0, "%s: pread %s: %s", when, what, n < 0 ? wl_errstr() : "empty");
  buf[n] = '\0';
  char* p = strstr(buf, "\nPid:\t");
  WL_CHECK(p != NULL, "%s: %s has no Pid: line", when, what);
  return strtol(p + 6, NULL, 10);
}

static void check(int status_fd, int stat_fd, int dir_fd, const char* when) {
  long me = getpid();
  long pid = status_pid(status_fd, "/proc/self/status", when);
  WL_CHECK(pid == me, "%s: /proc/self/status says Pid %ld, getpid() is %ld", when, pid, me);
  char buf[512];
  ssize_t n = pread(stat_fd, buf, sizeof buf - 1, 0);
  WL_CHECK(n > 0, "%s: pread /proc/self/stat: %s", when, n < 0 ? wl_errstr() : "empty");
  buf[n] = '\0';
  long spid = strtol(buf, NULL, 10);
  WL_CHECK(spid == me, "%s: /proc/self/stat starts with pid %ld, getpid() is %ld", when, spid, me);
  int fd = openat(dir_fd, "status", O_RDONLY | O_CLOEXEC);
  WL_CHECK(fd >= 0, "%s: openat(/proc/self dir fd, \"status\"): %s", when, wl_errstr());
  pid = status_pid(fd, "<dir fd>/status", when);
  close(fd);
  WL_CHECK(pid == me, "%s: <proc dir fd>/status says Pid %ld, getpid() is %ld", when, pid, me);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  int status_fd = WL_SYS(open("/proc/self/status", O_RDONLY | O_CLOEXEC));
  int stat_fd = WL_SYS(open("/proc/self/stat", O_RDONLY | O_CLOEXEC));
  int dir_fd = WL_SYS(open("/proc/self", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  check(status_fd, stat_fd, dir_fd, "before the checkpoint");

  wl_signal_ready();
  wl_wait_go();

  check(status_fd, stat_fd, dir_fd, "after restore");
  wl_pass();
}
