// An AIO context holding a completed request not collected yet: a pwrite submitted through
// io_setup's context and left in the ring. It cannot be put back into a new context, so the dump
// must refuse, naming it. After go, the completion is still there to collect.
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

int main(int argc, char** argv) {
  wl_init(argc, argv);
  char path[600];
  wl_path(path, sizeof path, "aio-file");
  int fd = WL_SYS(open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  aio_context_t ctx = 0;
  WL_CHECK(syscall(SYS_io_setup, 8, &ctx) == 0, "io_setup: %s", wl_errstr());
  static char buf[512] = "left in the ring";
  struct iocb w = {0};
  w.aio_lio_opcode = IOCB_CMD_PWRITE;
  w.aio_fildes = (uint32_t)fd;
  w.aio_buf = (uint64_t)(uintptr_t)buf;
  w.aio_nbytes = sizeof buf;
  w.aio_data = 7;
  struct iocb* list[1] = {&w};
  WL_CHECK(syscall(SYS_io_submit, ctx, 1, list) == 1, "io_submit: %s", wl_errstr());
  // Buffered writes complete within io_submit; wait until the ring shows it anyway.
  volatile unsigned* tail = (volatile unsigned*)(uintptr_t)(ctx + 12);
  for (int i = 0; i < 1000 && *tail == 0; i++) wl_sleep_ms(1);
  WL_CHECK(*tail == 1, "the completion never reached the ring");

  wl_signal_ready();
  wl_wait_go();

  struct io_event ev;
  struct timespec ts = {5, 0};
  WL_CHECK(syscall(SYS_io_getevents, ctx, 1, 1, &ev, &ts) == 1 && ev.data == 7 && ev.res == (int64_t)sizeof buf,
           "after go: the completion is gone (%s)", wl_errstr());
  wl_pass();
}
