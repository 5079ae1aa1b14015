// Files of the node's scratch space (WORKDIR is under /tmp): in WORKDIR/session/run/, a file
// held open read-write at an offset (sess.dat), one mapped shared and written through the
// mapping (shm.dat, its descriptor closed), one mapped private and changed in its copy only
// (ro.dat), and a FIFO with bytes queued (ctl.fifo). The round trip's own test removes WORKDIR/session between dump and restore, as a
// program's cleanup or another machine would: the restored process must find everything as it
// was — names, modes, contents, offset, the shared mapping still the file's.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wl_common.h"

#define kPage 4096ul
#define kSize (8 * kPage)

int main(int argc, char** argv) {
  wl_init(argc, argv);
  char dir[600], run[700], sess[800], shm[800], ro[800], fifo[800];
  wl_path(dir, sizeof dir, "session");
  snprintf(run, sizeof run, "%s/run", dir);
  snprintf(sess, sizeof sess, "%s/sess.dat", run);
  snprintf(shm, sizeof shm, "%s/shm.dat", run);
  snprintf(ro, sizeof ro, "%s/ro.dat", run);
  snprintf(fifo, sizeof fifo, "%s/ctl.fifo", run);
  WL_SYS(mkdir(dir, 0700));
  WL_SYS(mkdir(run, 0700));

  static unsigned char buf[kSize];
  int fd = WL_SYS(open(sess, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0640));
  wl_fill_pattern(buf, kSize, 11);
  WL_CHECK(write(fd, buf, kSize) == (ssize_t)kSize, "write %s: %s", sess, wl_errstr());
  WL_CHECK(lseek(fd, 12345, SEEK_SET) == 12345, "lseek: %s", wl_errstr());

  int s = WL_SYS(open(shm, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  WL_SYS(ftruncate(s, kSize));
  unsigned char* shared = mmap(NULL, kSize, PROT_READ | PROT_WRITE, MAP_SHARED, s, 0);
  WL_CHECK(shared != MAP_FAILED, "mmap shared: %s", wl_errstr());
  WL_SYS(close(s));
  wl_fill_pattern(shared, kSize, 22);

  int r = WL_SYS(open(ro, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  wl_fill_pattern(buf, kSize, 33);
  WL_CHECK(write(r, buf, kSize) == (ssize_t)kSize, "write %s: %s", ro, wl_errstr());
  unsigned char* priv = mmap(NULL, kSize, PROT_READ | PROT_WRITE, MAP_PRIVATE, r, 0);
  WL_CHECK(priv != MAP_FAILED, "mmap private: %s", wl_errstr());
  WL_SYS(close(r));
  memset(priv + 2 * kPage, 0x5a, kPage);  // this page is the process's own copy now

  WL_SYS(mkfifo(fifo, 0600));
  WL_SYS(chmod(fifo, 0620));  // (past the umask)
  int ff = WL_SYS(open(fifo, O_RDWR | O_NONBLOCK | O_CLOEXEC));
  WL_CHECK(write(ff, "queued", 6) == 6, "write %s: %s", fifo, wl_errstr());

  wl_signal_ready();
  wl_wait_go();

  // The open file: same name, offset, mode and content.
  char link[64], target[800];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, target, sizeof target - 1);
  WL_CHECK(n > 0, "readlink %s: %s", link, wl_errstr());
  target[n] = '\0';
  WL_CHECK(strcmp(target, sess) == 0, "fd %d is %s, want %s", fd, target, sess);
  WL_CHECK(lseek(fd, 0, SEEK_CUR) == 12345, "offset %ld, want 12345", (long)lseek(fd, 0, SEEK_CUR));
  struct stat st;
  WL_SYS(fstat(fd, &st));
  WL_CHECK((st.st_mode & 07777) == 0640, "mode %o, want 640", st.st_mode & 07777);
  WL_CHECK(pread(fd, buf, kSize, 0) == (ssize_t)kSize, "pread: %s", wl_errstr());
  WL_CHECK(wl_check_pattern(buf, kSize, 11) < 0, "%s does not hold what was written", sess);
  struct stat by_name;
  WL_SYS(stat(sess, &by_name));
  WL_CHECK(by_name.st_ino == st.st_ino && by_name.st_dev == st.st_dev, "%s is not the file fd %d holds", sess, fd);
  WL_SYS(stat(run, &by_name));
  WL_CHECK(S_ISDIR(by_name.st_mode), "%s is no directory", run);

  // The shared mapping: what was written through it, and still the file's in both directions.
  WL_CHECK(wl_check_pattern(shared, kSize, 22) < 0, "the shared mapping of %s lost what was written to it", shm);
  s = WL_SYS(open(shm, O_RDWR | O_CLOEXEC));
  WL_CHECK(pread(s, buf, kSize, 0) == (ssize_t)kSize, "pread %s: %s", shm, wl_errstr());
  WL_CHECK(wl_check_pattern(buf, kSize, 22) < 0, "%s does not hold what was written through its mapping", shm);
  static const char kViaMap[] = "through the mapping after restore";
  memcpy(shared + kPage + 7, kViaMap, sizeof kViaMap);
  char back[sizeof kViaMap];
  WL_CHECK(pread(s, back, sizeof back, kPage + 7) == (ssize_t)sizeof back, "pread: %s", wl_errstr());
  WL_CHECK(memcmp(back, kViaMap, sizeof back) == 0, "a write through the shared mapping did not reach %s", shm);
  close(s);

  // The private mapping: the file's pages, and the page the process changed.
  wl_fill_pattern(buf, kSize, 33);
  for (size_t pg = 0; pg < kSize / kPage; pg++) {
    if (pg == 2) {
      for (size_t i = 0; i < kPage; i++) WL_CHECK(priv[pg * kPage + i] == 0x5a, "private page 2 lost its change");
      continue;
    }
    WL_CHECK(memcmp(priv + pg * kPage, buf + pg * kPage, kPage) == 0, "private page %zu differs from %s", pg, ro);
  }
  // The FIFO: there again by its name, with its mode and what was queued in it.
  WL_SYS(stat(fifo, &by_name));
  WL_CHECK(S_ISFIFO(by_name.st_mode) && (by_name.st_mode & 07777) == 0620, "%s is mode %o", fifo, by_name.st_mode);
  char queued[16] = "";
  WL_CHECK(read(ff, queued, sizeof queued) == 6 && memcmp(queued, "queued", 6) == 0, "%s lost its bytes", fifo);
  wl_pass();
  return 0;
}
