// A write lease on a file the process also maps: WORKDIR/leased opened read-write, mapped shared
// through that descriptor, and fcntl(F_SETLEASE, F_WRLCK) taken on it. Restore would map the file
// through an open of its own, which a write lease does not allow, so the dump must refuse it,
// naming the lease and the mapping. After go the lease and the mapping are as they were.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "wl_common.h"

int main(int argc, char** argv) {
  wl_init(argc, argv);
  char path[600];
  wl_path(path, sizeof path, "leased");
  int fd = WL_SYS(open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  WL_CHECK(write(fd, "leased and mapped", 17) == 17, "write: %s", wl_errstr());
  char* p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  WL_CHECK(p != MAP_FAILED, "mmap: %s", wl_errstr());
  WL_SYS(fcntl(fd, F_SETLEASE, F_WRLCK));

  wl_signal_ready();
  wl_wait_go();

  WL_CHECK(fcntl(fd, F_GETLEASE) == F_WRLCK, "after go: F_GETLEASE is %d, want F_WRLCK", fcntl(fd, F_GETLEASE));
  WL_CHECK(memcmp(p, "leased and mapped", 17) == 0, "after go: the mapping reads '%.17s'", p);
  wl_pass();
}
