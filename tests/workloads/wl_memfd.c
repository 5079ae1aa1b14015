// memfds survive a round trip as memfds: their names, content, seals and offsets, their
// shared mappings still the same file as their descriptors, and a private mapping's
// changed pages. A: sealable, 64 KiB written through the descriptor and a shared mapping,
// sealed against shrinking and growing, offset 100, also mapped privately with one page
// changed. B: mapped shared, its descriptor closed. C: created without MFD_ALLOW_SEALING
// (so it carries F_SEAL_SEAL). D: sealed against writes. After go each one is checked from
// the process's side, and a write through A's descriptor must show in A's shared mapping.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "wl_common.h"

#define SIZE (64 * 1024)

static char* map(size_t len, int flags, int fd, const char* what) {
  void* p = mmap(NULL, len, PROT_READ | PROT_WRITE, flags, fd, 0);
  WL_CHECK(p != MAP_FAILED, "mmap %s: %s", what, wl_errstr());
  return p;
}

static void expect_link(int fd, const char* want) {
  char link[64], target[256] = {0};
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  WL_SYS(readlink(link, target, sizeof target - 1));
  WL_CHECK(strcmp(target, want) == 0, "fd %d links to '%s', want '%s'", fd, target, want);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  int a = WL_SYS(memfd_create("cairn-a", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  char* buf = malloc(SIZE);
  wl_fill_pattern(buf, SIZE, 11);
  WL_CHECK(write(a, buf, SIZE) == SIZE, "write A");
  char* shared = map(SIZE, MAP_SHARED, a, "A shared");
  memcpy(shared + 4096, "through the mapping", 19);
  WL_SYS(fcntl(a, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW));
  WL_SYS(lseek(a, 100, SEEK_SET));
  char* priv = map(SIZE, MAP_PRIVATE, a, "A private");
  memcpy(priv + 8192, "private copy", 12);

  int b = WL_SYS(memfd_create("cairn-b", MFD_CLOEXEC));
  WL_SYS(ftruncate(b, 8192));
  char* bmap = map(8192, MAP_SHARED, b, "B");
  wl_fill_pattern(bmap, 8192, 22);
  close(b);

  int c = WL_SYS(memfd_create("cairn-c", 0));
  WL_CHECK(write(c, "plain", 5) == 5, "write C");

  int d = WL_SYS(memfd_create("cairn-d", MFD_ALLOW_SEALING));
  WL_CHECK(write(d, "frozen", 6) == 6, "write D");
  WL_SYS(fcntl(d, F_ADD_SEALS, F_SEAL_WRITE));

  wl_signal_ready();
  wl_wait_go();

  expect_link(a, "/memfd:cairn-a (deleted)");
  expect_link(c, "/memfd:cairn-c (deleted)");
  WL_CHECK(fcntl(a, F_GET_SEALS) == (F_SEAL_SHRINK | F_SEAL_GROW), "A seals %#x", fcntl(a, F_GET_SEALS));
  WL_CHECK(fcntl(c, F_GET_SEALS) == F_SEAL_SEAL, "C seals %#x, want F_SEAL_SEAL", fcntl(c, F_GET_SEALS));
  WL_CHECK(fcntl(d, F_GET_SEALS) == F_SEAL_WRITE, "D seals %#x, want F_SEAL_WRITE", fcntl(d, F_GET_SEALS));
  WL_CHECK(lseek(a, 0, SEEK_CUR) == 100, "A offset %ld, want 100", (long)lseek(a, 0, SEEK_CUR));
  WL_CHECK((fcntl(a, F_GETFD) & FD_CLOEXEC) != 0, "A lost FD_CLOEXEC");
  WL_CHECK(ftruncate(a, SIZE * 2) != 0 && errno == EPERM, "A grew despite F_SEAL_GROW");
  WL_CHECK(write(d, "x", 1) < 0 && errno == EPERM, "D took a write despite F_SEAL_WRITE");

  // A's content, read through the descriptor, is what was written plus the mapping's change.
  memcpy(buf + 4096, "through the mapping", 19);
  char* got = malloc(SIZE);
  WL_CHECK(pread(a, got, SIZE, 0) == SIZE, "read A");
  WL_CHECK(memcmp(got, buf, SIZE) == 0, "A's content differs from what was written");
  WL_CHECK(memcmp(shared, buf, SIZE) == 0, "A's shared mapping differs from what was written");
  // The private mapping keeps its own page and sees the file elsewhere.
  WL_CHECK(memcmp(priv + 8192, "private copy", 12) == 0, "A's private page lost its change");
  WL_CHECK(memcmp(priv, buf, 8192) == 0, "A's private mapping differs from the file where unchanged");
  // Descriptor and shared mapping are still the same file.
  WL_SYS(pwrite(a, "after restore", 13, 100));
  WL_CHECK(memcmp(shared + 100, "after restore", 13) == 0, "a write through A's descriptor is not in its mapping");
  WL_CHECK(wl_check_pattern(bmap, 8192, 22) < 0, "B's mapping lost its content");
  char small[8] = {0};
  WL_CHECK(pread(c, small, 5, 0) == 5 && memcmp(small, "plain", 5) == 0, "C reads '%s'", small);
  WL_CHECK(pread(d, small, 6, 0) == 6 && memcmp(small, "frozen", 6) == 0, "D reads '%s'", small);
  wl_pass();
}
