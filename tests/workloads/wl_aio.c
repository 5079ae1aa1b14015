// AIO contexts (io_setup) with no request in flight: two contexts (8 and 128 events), each used
// once before the checkpoint (a pwrite and a pread of WORKDIR/aio-file, both collected). After
// restore, with the same context ids (they are ring addresses): each ring's header is intact in
// user space (magic, head == tail), a pwrite and a pread submitted through each complete with the
// right results and data, and io_destroy succeeds.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "wl_common.h"

struct ring_header {
  unsigned id, nr, head, tail, magic, compat_features, incompat_features, header_length;
};

static long io_setup_(unsigned n, aio_context_t* ctx) { return syscall(SYS_io_setup, n, ctx); }
static long io_submit_(aio_context_t ctx, long n, struct iocb** iocbs) { return syscall(SYS_io_submit, ctx, n, iocbs); }
static long io_getevents_(aio_context_t ctx, long min, long max, struct io_event* ev, struct timespec* ts) {
  return syscall(SYS_io_getevents, ctx, min, max, ev, ts);
}

// Writes `len` bytes of `seed`'s pattern at `off` and reads them back, through `ctx`.
static void round_trip(aio_context_t ctx, int fd, off_t off, uint64_t seed, const char* when) {
  static char out[4096], in[4096];
  wl_fill_pattern(out, sizeof out, seed);
  memset(in, 0, sizeof in);
  struct iocb w = {0}, r = {0};
  w.aio_lio_opcode = IOCB_CMD_PWRITE;
  w.aio_fildes = (uint32_t)fd;
  w.aio_buf = (uint64_t)(uintptr_t)out;
  w.aio_nbytes = sizeof out;
  w.aio_offset = off;
  w.aio_data = 1;
  struct iocb* list[1] = {&w};
  WL_CHECK(io_submit_(ctx, 1, list) == 1, "%s: io_submit pwrite on context %#llx: %s", when, (unsigned long long)ctx,
           wl_errstr());
  struct io_event ev[2];
  struct timespec ts = {10, 0};
  WL_CHECK(io_getevents_(ctx, 1, 1, ev, &ts) == 1, "%s: io_getevents (pwrite): %s", when, wl_errstr());
  WL_CHECK(ev[0].data == 1 && ev[0].res == (int64_t)sizeof out, "%s: pwrite completed with data %llu res %lld", when,
           (unsigned long long)ev[0].data, (long long)ev[0].res);
  r.aio_lio_opcode = IOCB_CMD_PREAD;
  r.aio_fildes = (uint32_t)fd;
  r.aio_buf = (uint64_t)(uintptr_t)in;
  r.aio_nbytes = sizeof in;
  r.aio_offset = off;
  r.aio_data = 2;
  list[0] = &r;
  WL_CHECK(io_submit_(ctx, 1, list) == 1, "%s: io_submit pread: %s", when, wl_errstr());
  WL_CHECK(io_getevents_(ctx, 1, 1, ev, &ts) == 1, "%s: io_getevents (pread): %s", when, wl_errstr());
  WL_CHECK(ev[0].data == 2 && ev[0].res == (int64_t)sizeof in, "%s: pread completed with data %llu res %lld", when,
           (unsigned long long)ev[0].data, (long long)ev[0].res);
  WL_CHECK(wl_check_pattern(in, sizeof in, seed) < 0, "%s: the bytes read back differ", when);
}

static void check_ring(aio_context_t ctx, const char* when) {
  const struct ring_header* h = (const struct ring_header*)(uintptr_t)ctx;
  WL_CHECK(h->magic == 0xa10a10a1, "%s: the ring at %#llx has magic %#x", when, (unsigned long long)ctx, h->magic);
  WL_CHECK(h->head == h->tail, "%s: the ring at %#llx has head %u tail %u", when, (unsigned long long)ctx, h->head,
           h->tail);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  char path[600];
  wl_path(path, sizeof path, "aio-file");
  int fd = WL_SYS(open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  aio_context_t small = 0, big = 0;
  WL_CHECK(io_setup_(8, &small) == 0, "io_setup(8): %s", wl_errstr());
  WL_CHECK(io_setup_(128, &big) == 0, "io_setup(128): %s", wl_errstr());
  round_trip(small, fd, 0, 11, "before the checkpoint");
  round_trip(big, fd, 4096, 12, "before the checkpoint");
  check_ring(small, "before the checkpoint");
  check_ring(big, "before the checkpoint");

  wl_signal_ready();
  wl_wait_go();

  check_ring(small, "after restore");
  check_ring(big, "after restore");
  round_trip(small, fd, 8192, 13, "after restore");
  round_trip(big, fd, 12288, 14, "after restore");
  check_ring(small, "after restore, used");
  WL_CHECK(syscall(SYS_io_destroy, small) == 0, "io_destroy: %s", wl_errstr());
  WL_CHECK(syscall(SYS_io_destroy, big) == 0, "io_destroy: %s", wl_errstr());
  wl_pass();
}
