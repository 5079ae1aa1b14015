// Per-process settings written through /proc: oom_score_adj (set to 345) and loginuid (the audit
// login uid: set to 4242 when still unset, 4294967295; setting it needs CAP_AUDIT_CONTROL and an
// already set one may be immutable, so on EPERM its current value is what must survive). Both are
// read back before the checkpoint and after restore.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wl_common.h"

static long read_num(const char* path) {
  char buf[64];
  WL_CHECK(wl_read_file(path, buf, sizeof buf) > 0, "read %s: %s", path, wl_errstr());
  return strtol(buf, NULL, 10);
}

static int write_num(const char* path, long v) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[32];
  int n = snprintf(buf, sizeof buf, "%ld", v);
  int r = write(fd, buf, (size_t)n) == n ? 0 : -1;
  int saved = errno;
  close(fd);
  errno = saved;
  return r;
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  WL_CHECK(read_num("/proc/self/oom_score_adj") != 345, "oom_score_adj is already 345 at start");
  WL_CHECK(write_num("/proc/self/oom_score_adj", 345) == 0, "write oom_score_adj: %s", wl_errstr());
  WL_CHECK(read_num("/proc/self/oom_score_adj") == 345, "oom_score_adj does not read back 345");
  long login = read_num("/proc/self/loginuid");
  if (login == 4294967295l) {
    if (write_num("/proc/self/loginuid", 4242) == 0) {
      login = read_num("/proc/self/loginuid");
      WL_CHECK(login == 4242, "loginuid reads %ld after writing 4242", login);
    } else {
      WL_CHECK(errno == EPERM, "write loginuid: %s", wl_errstr());
      printf("note: may not set loginuid (EPERM), checking that it stays unset\n");
      fflush(stdout);
    }
  } else {
    printf("note: loginuid already set to %ld, checking that it stays\n", login);
    fflush(stdout);
  }

  wl_signal_ready();
  wl_wait_go();

  long adj = read_num("/proc/self/oom_score_adj");
  WL_CHECK(adj == 345, "after restore: oom_score_adj %ld, want 345", adj);
  long now = read_num("/proc/self/loginuid");
  WL_CHECK(now == login, "after restore: loginuid %ld, want %ld", now, login);
  wl_pass();
}
