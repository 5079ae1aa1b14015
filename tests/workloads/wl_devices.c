// Character devices: /dev/null (write-only), /dev/zero (read-only, also mapped MAP_PRIVATE) and
// /dev/urandom (read-only, O_CLOEXEC) held open across the checkpoint. After restore each descriptor
// must be the same device (st_rdev), keep its flags, and behave like it: writes to /dev/null succeed,
// reads from /dev/zero give zeros, reads from /dev/urandom give bytes that are not all zero.
#define _GNU_SOURCE
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "wl_common.h"

struct Dev {
  const char* path;
  int flags;
  int fd;
  dev_t rdev;
  int fl_flags, fd_flags;
};

static struct Dev g_devs[] = {
    {"/dev/null", O_WRONLY, -1, 0, 0, 0},
    {"/dev/zero", O_RDONLY, -1, 0, 0, 0},
    {"/dev/urandom", O_RDONLY | O_CLOEXEC, -1, 0, 0, 0},
};
#define kDevCount (sizeof g_devs / sizeof g_devs[0])

int main(int argc, char** argv) {
  wl_init(argc, argv);
  for (size_t i = 0; i < kDevCount; i++) {
    struct Dev* d = &g_devs[i];
    d->fd = open(d->path, d->flags);
    WL_CHECK(d->fd >= 0, "open %s: %s", d->path, wl_errstr());
    struct stat st;
    WL_SYS(fstat(d->fd, &st));
    WL_CHECK(S_ISCHR(st.st_mode), "%s is not a character device", d->path);
    d->rdev = st.st_rdev;
    d->fl_flags = WL_SYS(fcntl(d->fd, F_GETFL));
    d->fd_flags = WL_SYS(fcntl(d->fd, F_GETFD));
  }
  // A private mapping of /dev/zero is how old programs got anonymous memory.
  int zero_fd = WL_SYS(open("/dev/zero", O_RDWR));
  unsigned char* zmap = mmap(NULL, 16 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, zero_fd, 0);
  WL_CHECK(zmap != MAP_FAILED, "mmap /dev/zero: %s", wl_errstr());
  close(zero_fd);
  wl_fill_pattern(zmap, 4 * 4096, 77);

  wl_signal_ready();
  wl_wait_go();

  for (size_t i = 0; i < kDevCount; i++) {
    struct Dev* d = &g_devs[i];
    struct stat st;
    WL_CHECK(fstat(d->fd, &st) == 0, "fstat %s: %s", d->path, wl_errstr());
    WL_CHECK(S_ISCHR(st.st_mode) && st.st_rdev == d->rdev, "%s: device %u:%u became %u:%u", d->path,
             major(d->rdev), minor(d->rdev), major(st.st_rdev), minor(st.st_rdev));
    WL_CHECK(fcntl(d->fd, F_GETFL) == d->fl_flags, "%s: F_GETFL changed", d->path);
    WL_CHECK(fcntl(d->fd, F_GETFD) == d->fd_flags, "%s: F_GETFD changed", d->path);
  }
  static const char kData[] = "into the void";
  WL_CHECK(write(g_devs[0].fd, kData, sizeof kData) == (ssize_t)sizeof kData, "write /dev/null: %s", wl_errstr());
  unsigned char buf[4096];
  memset(buf, 0xff, sizeof buf);
  WL_CHECK(read(g_devs[1].fd, buf, sizeof buf) == (ssize_t)sizeof buf, "read /dev/zero: %s", wl_errstr());
  for (size_t i = 0; i < sizeof buf; i++) WL_CHECK(buf[i] == 0, "/dev/zero gave a non-zero byte");
  memset(buf, 0, sizeof buf);
  WL_CHECK(read(g_devs[2].fd, buf, 64) == 64, "read /dev/urandom: %s", wl_errstr());
  int nonzero = 0;
  for (size_t i = 0; i < 64; i++) nonzero |= buf[i];
  WL_CHECK(nonzero, "/dev/urandom gave 64 zero bytes");
  ptrdiff_t bad = wl_check_pattern(zmap, 4 * 4096, 77);
  WL_CHECK(bad < 0, "/dev/zero mapping: written pages differ at %td", bad);
  for (size_t i = 4 * 4096; i < 16 * 4096; i++) WL_CHECK(zmap[i] == 0, "/dev/zero mapping: untouched byte %zu not zero", i);
  wl_pass();
}
