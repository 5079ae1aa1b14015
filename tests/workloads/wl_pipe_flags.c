// Pipe ends keep their own file status flags: the two ends of a pipe are two open file
// descriptions, so O_NONBLOCK set on one end (fcntl F_SETFL after pipe2(0)) must not spread to the
// other or be lost. Pipe A: read end non-blocking, write end blocking. Pipe B: the opposite. Pipe C:
// 100 bytes written and not yet read. Pipe D: its read end opened a second time through
// /proc/self/fd, non-blocking, while the first description stays blocking (two descriptions of one
// end), and once more O_RDWR. After restore each end's F_GETFL O_NONBLOCK bit and access mode are as
// before, a read on A's empty non-blocking read end returns EAGAIN at once, and C still holds its
// bytes.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "wl_common.h"

static void set_nonblock(int fd) { WL_SYS(fcntl(fd, F_SETFL, WL_SYS(fcntl(fd, F_GETFL)) | O_NONBLOCK)); }

static void expect_flags(int a[2], int b[2], const char* when) {
  int want[4] = {1, 0, 0, 1};
  int fds[4] = {a[0], a[1], b[0], b[1]};
  const char* names[4] = {"A read end", "A write end", "B read end", "B write end"};
  for (int i = 0; i < 4; i++) {
    int fl = WL_SYS(fcntl(fds[i], F_GETFL));
    int nb = (fl & O_NONBLOCK) != 0;
    WL_CHECK(nb == want[i], "%s: %s (fd %d) is %s, want %s (F_GETFL %#x)", when, names[i], fds[i],
             nb ? "O_NONBLOCK" : "blocking", want[i] ? "O_NONBLOCK" : "blocking", fl);
    int acc = fl & O_ACCMODE;
    WL_CHECK(acc == (i % 2 == 0 ? O_RDONLY : O_WRONLY), "%s: %s has access mode %d", when, names[i], acc);
  }
  char c;
  errno = 0;
  ssize_t n = read(a[0], &c, 1);
  WL_CHECK(n == -1 && errno == EAGAIN, "%s: read on A's empty non-blocking read end returned %zd (%s), want EAGAIN",
           when, n, n < 0 ? wl_errstr() : "data");
}

// D: d[0] blocking, d_again (the same end, opened again) non-blocking, d_rw opened O_RDWR.
static void expect_reopened(int d[2], int d_again, int d_rw, const char* when) {
  int fl = WL_SYS(fcntl(d[0], F_GETFL)), fl2 = WL_SYS(fcntl(d_again, F_GETFL)), fl3 = WL_SYS(fcntl(d_rw, F_GETFL));
  WL_CHECK(!(fl & O_NONBLOCK), "%s: D's read end took O_NONBLOCK from its second description (F_GETFL %#x)", when, fl);
  WL_CHECK(fl2 & O_NONBLOCK, "%s: D's second read description lost O_NONBLOCK (F_GETFL %#x)", when, fl2);
  WL_CHECK((fl2 & O_ACCMODE) == O_RDONLY, "%s: D's second read description has access mode %d", when, fl2 & O_ACCMODE);
  WL_CHECK((fl3 & O_ACCMODE) == O_RDWR, "%s: D's O_RDWR description has access mode %d", when, fl3 & O_ACCMODE);
  // One pipe still: a byte written through the O_RDWR description comes out of the read end.
  WL_CHECK(write(d_rw, "d", 1) == 1, "%s: write D through the O_RDWR description: %s", when, wl_errstr());
  char c = 0;
  WL_CHECK(read(d_again, &c, 1) == 1 && c == 'd', "%s: D's second read description did not read the byte", when);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  int a[2], b[2], c[2], d[2];
  WL_SYS(pipe2(d, 0));
  char again[64];
  snprintf(again, sizeof again, "/proc/self/fd/%d", d[0]);
  int d_again = WL_SYS(open(again, O_RDONLY | O_NONBLOCK));
  int d_rw = WL_SYS(open(again, O_RDWR));
  expect_reopened(d, d_again, d_rw, "before the checkpoint");
  WL_SYS(pipe2(a, 0));
  WL_SYS(pipe2(b, 0));
  WL_SYS(pipe2(c, 0));
  set_nonblock(a[0]);
  set_nonblock(b[1]);
  char data[100];
  wl_fill_pattern(data, sizeof data, 77);
  WL_CHECK(write(c[1], data, sizeof data) == (ssize_t)sizeof data, "write C: %s", wl_errstr());
  expect_flags(a, b, "before the checkpoint");

  wl_signal_ready();
  wl_wait_go();

  expect_flags(a, b, "after restore");
  expect_reopened(d, d_again, d_rw, "after restore");
  char got[200];
  set_nonblock(c[0]);  // so a lost buffer shows as EAGAIN, not a hang
  ssize_t n = read(c[0], got, sizeof got);
  WL_CHECK(n == (ssize_t)sizeof data, "C read returned %zd (%s), want the %zu bytes written before",
           n, n < 0 ? wl_errstr() : "short", sizeof data);
  WL_CHECK(wl_check_pattern(got, sizeof data, 77) < 0, "C's bytes differ from what was written");
  wl_pass();
}
