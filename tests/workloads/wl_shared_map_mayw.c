// Whether a read-only shared file mapping may later be made writable depends on how its file was
// opened (VM_MAYWRITE), which /proc/PID/maps does not show. WORKDIR/rw.dat is opened O_RDWR, mapped
// twice PROT_READ + MAP_SHARED, and closed: mprotect(PROT_READ | PROT_WRITE) must succeed and a write
// through the mapping must reach the file (read back through a new descriptor) - on the first
// mapping before the checkpoint, on the second (untouched until then) after restore.
// WORKDIR/ro.dat is opened O_RDONLY, mapped PROT_READ + MAP_SHARED and closed: mprotect(PROT_WRITE)
// must fail with EACCES before and after (a restore must not grant more than the program had).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "wl_common.h"

#define LEN 4096

static char* map_file(const char* name, int flags, int fill) {
  char path[600];
  wl_path(path, sizeof path, name);
  if (fill) {
    int w = WL_SYS(open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    char buf[LEN];
    memset(buf, 'a', LEN);
    WL_CHECK(write(w, buf, LEN) == LEN, "write %s", name);
    close(w);
  }
  int fd = WL_SYS(open(path, flags | O_CLOEXEC));
  char* m = mmap(NULL, LEN, PROT_READ, MAP_SHARED, fd, 0);
  WL_CHECK(m != MAP_FAILED, "mmap %s: %s", name, wl_errstr());
  close(fd);
  return m;
}

static void expect_writable(char* m, const char* msg, const char* when) {
  WL_CHECK(mprotect(m, LEN, PROT_READ | PROT_WRITE) == 0, "%s: mprotect(RW) of the O_RDWR file's mapping: %s", when,
           wl_errstr());
  size_t len = strlen(msg);
  memcpy(m + 100, msg, len);
  char path[600], buf[64] = {0};
  wl_path(path, sizeof path, "rw.dat");
  int fd = WL_SYS(open(path, O_RDONLY | O_CLOEXEC));
  WL_CHECK(pread(fd, buf, len, 100) == (ssize_t)len && memcmp(buf, msg, len) == 0,
           "%s: a write through the shared mapping did not reach rw.dat (reads '%s')", when, buf);
  close(fd);
}

static void expect_not_writable(char* m, const char* when) {
  errno = 0;
  int r = mprotect(m, LEN, PROT_READ | PROT_WRITE);
  WL_CHECK(r == -1 && errno == EACCES, "%s: mprotect(RW) of the O_RDONLY file's shared mapping %s, want EACCES", when,
           r == 0 ? "succeeded" : wl_errstr());
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  char* rw1 = map_file("rw.dat", O_RDWR, 1);
  char* rw2 = map_file("rw.dat", O_RDWR, 0);
  char* ro = map_file("ro.dat", O_RDONLY, 1);
  expect_writable(rw1, "before", "before the checkpoint");
  expect_not_writable(ro, "before the checkpoint");

  wl_signal_ready();
  wl_wait_go();

  WL_CHECK(rw2[0] == 'a', "after restore: rw.dat's second mapping reads %#x", rw2[0]);
  expect_writable(rw2, "after restore", "after restore");
  expect_not_writable(ro, "after restore");
  wl_pass();
}
