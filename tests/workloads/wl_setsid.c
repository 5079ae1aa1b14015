// Session and process group: the workload makes itself a session leader with setsid() (it is started
// as a non-leader child of the harness) before the checkpoint. After restore it must still lead its
// own session and process group: getsid(0) == getpgrp() == getpid(), it has no controlling
// terminal, and /proc/self/stat reports the same.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wl_common.h"

static char g_stat[4096];

static void StatIds(int* pgrp, int* session, int* tty) {
  if (wl_read_file("/proc/self/stat", g_stat, sizeof g_stat) < 0) wl_fail("read stat: %s", wl_errstr());
  char* p = strrchr(g_stat, ')');
  if (!p || sscanf(p + 2, "%*c %*d %d %d %d", pgrp, session, tty) != 3) wl_fail("bad /proc/self/stat");
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  if (getsid(0) != getpid()) WL_SYS(setsid());
  pid_t pid = getpid();
  WL_CHECK(getsid(0) == pid && getpgrp() == pid, "setsid did not make a session leader");

  wl_signal_ready();
  wl_wait_go();

  WL_CHECK(getpid() == pid, "pid %d became %d", (int)pid, (int)getpid());
  WL_CHECK(getsid(0) == pid, "session %d, want %d", (int)getsid(0), (int)pid);
  WL_CHECK(getpgrp() == pid, "process group %d, want %d", (int)getpgrp(), (int)pid);
  int pgrp, session, tty;
  StatIds(&pgrp, &session, &tty);
  WL_CHECK(pgrp == pid && session == pid, "/proc/self/stat says pgrp %d session %d", pgrp, session);
  WL_CHECK(tty == 0, "has a controlling terminal (%d)", tty);
  int fd = open("/dev/tty", O_RDWR | O_NOCTTY);
  WL_CHECK(fd < 0, "opened /dev/tty without a controlling terminal");
  // Still a leader: setsid fails with EPERM.
  errno = 0;
  WL_CHECK(setsid() == -1 && errno == EPERM, "setsid succeeded again: not a process group leader");
  wl_pass();
}
