// A restore must not touch the files a process has open: their modification times (which make,
// rsync and backup tools trust) stay as they were. WORKDIR/mapped.dat is open O_RDWR and mapped
// MAP_SHARED (written through the mapping and msync'ed first); WORKDIR/append.log is open
// O_WRONLY | O_APPEND with some lines in it. Both then get mtime 2001-01-01 00:00:00.123456789 via
// futimens. So do WORKDIR/fifo, a FIFO with 10 bytes queued (which restore writes back into it), and
// a file deleted while open (which restore makes again). After restore st_mtim of each is exactly
// that, and their content is unchanged. (ctime is not checked: no program can set it, so neither
// can a restore.)
#define _GNU_SOURCE
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wl_common.h"

#define LEN 8192
static const struct timespec kWhen = {978307200, 123456789};

static void check(int fd, const char* what, const char* when) {
  struct stat st;
  WL_SYS(fstat(fd, &st));
  WL_CHECK(st.st_mtim.tv_sec == kWhen.tv_sec && st.st_mtim.tv_nsec == kWhen.tv_nsec,
           "%s: %s mtime is %lld.%09ld, want %lld.%09ld", when, what, (long long)st.st_mtim.tv_sec,
           st.st_mtim.tv_nsec, (long long)kWhen.tv_sec, kWhen.tv_nsec);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  char path[600];
  wl_path(path, sizeof path, "mapped.dat");
  int a = WL_SYS(open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  WL_SYS(ftruncate(a, LEN));
  char* m = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, a, 0);
  WL_CHECK(m != MAP_FAILED, "mmap: %s", wl_errstr());
  wl_fill_pattern(m, LEN, 5);
  WL_SYS(msync(m, LEN, MS_SYNC));
  wl_path(path, sizeof path, "append.log");
  int b = WL_SYS(open(path, O_WRONLY | O_APPEND | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  WL_CHECK(write(b, "line 1\nline 2\n", 14) == 14, "write append.log: %s", wl_errstr());
  WL_SYS(fsync(b));
  struct timespec times[2] = {kWhen, kWhen};
  WL_SYS(futimens(a, times));
  WL_SYS(futimens(b, times));
  char fifo_path[600];
  wl_path(fifo_path, sizeof fifo_path, "fifo");
  WL_SYS(mkfifo(fifo_path, 0600));
  int f = WL_SYS(open(fifo_path, O_RDWR | O_NONBLOCK | O_CLOEXEC));
  WL_CHECK(write(f, "0123456789", 10) == 10, "write fifo: %s", wl_errstr());
  WL_SYS(futimens(f, times));
  char gone_path[600];
  wl_path(gone_path, sizeof gone_path, "deleted.dat");
  int g = WL_SYS(open(gone_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  WL_CHECK(write(g, "kept", 4) == 4, "write deleted.dat: %s", wl_errstr());
  WL_SYS(futimens(g, times));
  WL_SYS(unlink(gone_path));
  check(a, "mapped.dat", "before the checkpoint");
  check(b, "append.log", "before the checkpoint");
  check(f, "fifo", "before the checkpoint");
  check(g, "deleted.dat", "before the checkpoint");

  wl_signal_ready();
  wl_wait_go();

  check(a, "mapped.dat (open O_RDWR, mapped shared)", "after restore");
  check(b, "append.log (open O_WRONLY|O_APPEND)", "after restore");
  check(f, "fifo (with bytes queued)", "after restore");
  check(g, "deleted.dat (deleted while open)", "after restore");
  char q[16] = {0};
  WL_CHECK(read(f, q, sizeof q) == 10 && memcmp(q, "0123456789", 10) == 0, "after restore: the fifo reads '%s'", q);
  WL_CHECK(wl_check_pattern(m, LEN, 5) < 0, "after restore: the shared mapping's content changed");
  char buf[64];
  WL_CHECK(wl_read_file(path, buf, sizeof buf) == 14 && memcmp(buf, "line 1\nline 2\n", 14) == 0,
           "after restore: append.log reads '%s'", buf);
  check(a, "mapped.dat (after reading the mapping)", "after restore");
  wl_pass();
}
