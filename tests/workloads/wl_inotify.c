// An inotify instance survives a round trip with its watches and their numbers: a watch on
// a directory (IN_CREATE) as 1, a removed watch that used up 2, and a watch on a
// file (IN_MODIFY) as 3, in a non-blocking instance. After go: creating a file in the
// directory and writing the watched file give events with watch descriptors 1 and 3, and
// no event is left over from the restore itself.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "wl_common.h"

// Reads one event (waiting up to 5 s) and checks its watch descriptor, mask and name.
static void expect_event(int in, int wd, uint32_t mask, const char* name) {
  struct pollfd p = {.fd = in, .events = POLLIN};
  WL_CHECK(poll(&p, 1, 5000) == 1, "no inotify event for watch %d", wd);
  char buf[4096] __attribute__((aligned(8)));
  ssize_t n = WL_SYS(read(in, buf, sizeof buf));
  struct inotify_event* e = (struct inotify_event*)buf;
  WL_CHECK(n >= (ssize_t)sizeof *e, "short inotify read");
  WL_CHECK(e->wd == wd && (e->mask & mask) != 0, "event wd %d mask %#x, want wd %d mask %#x", e->wd, e->mask, wd, mask);
  if (name != NULL) WL_CHECK(e->len > 0 && strcmp(e->name, name) == 0, "event names '%s', want '%s'", e->len ? e->name : "", name);
  WL_CHECK(n == (ssize_t)(sizeof *e + e->len), "more than one event queued (%zd bytes)", n);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  char dir[600], file[600], other[600];
  wl_path(dir, sizeof dir, "watched-dir");
  WL_SYS(mkdir(dir, 0755));
  wl_path(file, sizeof file, "watched");
  wl_path(other, sizeof other, "other");
  int f = WL_SYS(open(file, O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
  int o = WL_SYS(open(other, O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
  close(o);
  int in = WL_SYS(inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  int d = WL_SYS(inotify_add_watch(in, dir, IN_CREATE));
  int gone = WL_SYS(inotify_add_watch(in, other, IN_ATTRIB));
  int m = WL_SYS(inotify_add_watch(in, file, IN_MODIFY));
  WL_CHECK(d == 1 && gone == 2 && m == 3, "watch descriptors %d %d %d, want 1 2 3", d, gone, m);
  WL_SYS(inotify_rm_watch(in, gone));
  char buf[4096];
  while (read(in, buf, sizeof buf) > 0) {  // IN_IGNORED of the removed watch
  }

  wl_signal_ready();
  wl_wait_go();

  WL_CHECK(read(in, buf, sizeof buf) < 0 && errno == EAGAIN, "an event was waiting after restore");
  WL_CHECK((fcntl(in, F_GETFL) & O_NONBLOCK) != 0, "the instance lost O_NONBLOCK");
  char made[700];
  snprintf(made, sizeof made, "%s/made-after-go", dir);
  close(WL_SYS(open(made, O_WRONLY | O_CREAT | O_CLOEXEC, 0644)));
  expect_event(in, 1, IN_CREATE, "made-after-go");
  WL_CHECK(write(f, "x", 1) == 1, "write the watched file");
  expect_event(in, 3, IN_MODIFY, NULL);
  wl_pass();
}
