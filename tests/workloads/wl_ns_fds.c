// Descriptors of the process's own namespaces: /proc/self/ns/net and /proc/self/ns/uts opened
// O_RDONLY (as a tool that later setns()es back would keep them). After restore fstat of each gives
// the same device and inode as stat("/proc/self/ns/net") / ("/proc/self/ns/uts"): the descriptors
// name the namespaces the restored process is in, not the restorer's or a stale one.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wl_common.h"

static const char* kNs[2] = {"/proc/self/ns/net", "/proc/self/ns/uts"};

static void check(int fds[2], const char* when) {
  for (int i = 0; i < 2; i++) {
    struct stat fst, st;
    WL_SYS(fstat(fds[i], &fst));
    WL_SYS(stat(kNs[i], &st));
    WL_CHECK(fst.st_dev == st.st_dev && fst.st_ino == st.st_ino,
             "%s: the descriptor of %s is namespace %lu:%lu, the process is in %lu:%lu", when, kNs[i],
             (unsigned long)fst.st_dev, (unsigned long)fst.st_ino, (unsigned long)st.st_dev,
             (unsigned long)st.st_ino);
    int fl = WL_SYS(fcntl(fds[i], F_GETFL));
    WL_CHECK((fl & O_ACCMODE) == O_RDONLY, "%s: %s descriptor access mode %d", when, kNs[i], fl & O_ACCMODE);
  }
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  int fds[2];
  for (int i = 0; i < 2; i++) fds[i] = WL_SYS(open(kNs[i], O_RDONLY | O_CLOEXEC));
  check(fds, "before the checkpoint");

  wl_signal_ready();
  wl_wait_go();

  check(fds, "after restore");
  wl_pass();
}
