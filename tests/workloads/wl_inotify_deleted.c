// An inotify instance with a watch whose file is gone: a watch on WORKDIR/doomed, then the file is
// unlinked (IN_DELETE_SELF and IN_IGNORED arrive and are read away before the checkpoint, so the
// first watch no longer exists in the kernel), and a second watch (IN_MODIFY) on WORKDIR/kept,
// which still exists. After restore: no stale event is pending, and a write to WORKDIR/kept makes
// the instance report IN_MODIFY with the second watch's descriptor.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "wl_common.h"

static char g_buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));

// Reads what is pending (waiting up to ms for the first event); returns the OR of masks seen for wd.
static uint32_t drain(int in, int wd, int ms, int* other) {
  uint32_t mask = 0;
  struct pollfd p = {in, POLLIN, 0};
  while (poll(&p, 1, ms) == 1) {
    ssize_t n = read(in, g_buf, sizeof g_buf);
    if (n <= 0) break;
    for (char* q = g_buf; q < g_buf + n;) {
      struct inotify_event* e = (struct inotify_event*)q;
      if (e->wd == wd) mask |= e->mask;
      else if (other) (*other)++;
      q += sizeof *e + e->len;
    }
    ms = 50;
  }
  return mask;
}

static void modify(const char* path, int wd2, int in, const char* when) {
  int fd = WL_SYS(open(path, O_WRONLY | O_APPEND | O_CLOEXEC));
  WL_CHECK(write(fd, "x", 1) == 1, "%s: write kept: %s", when, wl_errstr());
  close(fd);
  int other = 0;
  uint32_t m = drain(in, wd2, 1000, &other);
  WL_CHECK(m & IN_MODIFY, "%s: no IN_MODIFY for the second watch (mask %#x, %d other events)", when, m, other);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  char doomed[600], kept[600];
  wl_path(doomed, sizeof doomed, "doomed");
  wl_path(kept, sizeof kept, "kept");
  close(WL_SYS(open(doomed, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)));
  close(WL_SYS(open(kept, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)));
  int in = WL_SYS(inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  int wd1 = WL_SYS(inotify_add_watch(in, doomed, IN_DELETE_SELF | IN_ATTRIB));
  WL_SYS(unlink(doomed));
  uint32_t m1 = drain(in, wd1, 1000, NULL);
  WL_CHECK((m1 & IN_DELETE_SELF) && (m1 & IN_IGNORED), "the deleted file's watch gave mask %#x, want DELETE_SELF|IGNORED", m1);
  int wd2 = WL_SYS(inotify_add_watch(in, kept, IN_MODIFY));
  modify(kept, wd2, in, "before the checkpoint");

  wl_signal_ready();
  wl_wait_go();

  int other = 0;
  uint32_t stale = drain(in, wd2, 0, &other);
  WL_CHECK(stale == 0 && other == 0, "after restore: stale events pending (mask %#x for the second watch, %d other)",
           stale, other);
  modify(kept, wd2, in, "after restore");
  wl_pass();
}
