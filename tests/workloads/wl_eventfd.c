// eventfd: a counter above 2^32 (blocking, close-on-exec), a semaphore-mode eventfd holding 3
// (non-blocking), an empty non-blocking one, and a dup of the first at a high number. After restore
// each must keep its F_GETFD/F_GETFL flags and counter; the semaphore one must hand out its count one
// at a time; the dup must still share the counter with the original.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "wl_common.h"

#define kHighFd 90
static const uint64_t kBigCount = 0x123456789abcull;

struct Efd {
  const char* name;
  int fd;
  int fd_flags, fl_flags;
};

static void Record(struct Efd* e) {
  e->fd_flags = WL_SYS(fcntl(e->fd, F_GETFD));
  e->fl_flags = WL_SYS(fcntl(e->fd, F_GETFL));
}

static void CheckFlags(const struct Efd* e) {
  int fd_flags = fcntl(e->fd, F_GETFD);
  WL_CHECK(fd_flags == e->fd_flags, "%s (fd %d): F_GETFD %#x became %#x", e->name, e->fd, e->fd_flags, fd_flags);
  int fl_flags = fcntl(e->fd, F_GETFL);
  WL_CHECK(fl_flags == e->fl_flags, "%s (fd %d): F_GETFL %#o became %#o", e->name, e->fd, e->fl_flags, fl_flags);
}

static int Readable(int fd) {
  struct pollfd p = {fd, POLLIN, 0};
  return WL_SYS(poll(&p, 1, 0)) == 1 && (p.revents & POLLIN);
}

static uint64_t Read(const struct Efd* e) {
  uint64_t v = 0;
  ssize_t n = read(e->fd, &v, sizeof v);
  WL_CHECK(n == sizeof v, "%s (fd %d): read: %s", e->name, e->fd, n < 0 ? wl_errstr() : "short read");
  return v;
}

static void Write(const struct Efd* e, uint64_t v) {
  WL_CHECK(write(e->fd, &v, sizeof v) == sizeof v, "%s (fd %d): write %llu: %s", e->name, e->fd,
           (unsigned long long)v, wl_errstr());
}

static void ExpectEmpty(const struct Efd* e) {
  uint64_t v;
  errno = 0;
  WL_CHECK(read(e->fd, &v, sizeof v) == -1 && errno == EAGAIN, "%s (fd %d): counter not empty (read gave %llu, %s)",
           e->name, e->fd, (unsigned long long)v, wl_errstr());
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  struct Efd big = {"counter", WL_SYS(eventfd(0, EFD_CLOEXEC)), 0, 0};
  Write(&big, kBigCount);
  struct Efd sem = {"semaphore", WL_SYS(eventfd(3, EFD_SEMAPHORE | EFD_NONBLOCK)), 0, 0};
  struct Efd empty = {"empty", WL_SYS(eventfd(0, EFD_NONBLOCK)), 0, 0};
  struct Efd dup = {"dup of counter", WL_SYS(dup2(big.fd, kHighFd)), 0, 0};
  Record(&big);
  Record(&sem);
  Record(&empty);
  Record(&dup);

  wl_signal_ready();
  wl_wait_go();

  CheckFlags(&big);
  CheckFlags(&sem);
  CheckFlags(&empty);
  CheckFlags(&dup);
  // The big counter comes back whole in one read, then is empty (its descriptor blocks: poll first).
  WL_CHECK(Readable(big.fd), "counter (fd %d) is not readable", big.fd);
  uint64_t v = Read(&big);
  WL_CHECK(v == kBigCount, "counter (fd %d) read %#llx, want %#llx", big.fd, (unsigned long long)v,
           (unsigned long long)kBigCount);
  WL_CHECK(!Readable(big.fd), "counter (fd %d) still readable after reading it", big.fd);
  // The dup shares the counter.
  Write(&dup, 5);
  v = Read(&big);
  WL_CHECK(v == 5, "counter read %llu after writing 5 through its dup", (unsigned long long)v);
  // Semaphore mode: three reads of 1, then empty.
  for (int i = 0; i < 3; i++) {
    v = Read(&sem);
    WL_CHECK(v == 1, "semaphore read %d gave %llu, want 1 (semaphore mode lost?)", i, (unsigned long long)v);
  }
  ExpectEmpty(&sem);
  ExpectEmpty(&empty);
  Write(&empty, 2);
  Write(&empty, 40);
  v = Read(&empty);
  WL_CHECK(v == 42, "empty eventfd read %llu after writing 2 and 40", (unsigned long long)v);
  wl_pass();
}
