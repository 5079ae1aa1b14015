// Regular files: descriptors opened O_RDONLY, O_WRONLY, O_RDWR and O_WRONLY|O_APPEND, with
// O_CLOEXEC and O_NONBLOCK on some, at non-zero offsets; a dup() sharing one open file description;
// a descriptor moved to a high number. After restore each descriptor must refer to the same file
// (inode), with the same F_GETFD and F_GETFL flags and offset; reads and writes must continue where
// they left off; the dup must still share its offset with the original.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wl_common.h"

struct Fd {
  const char* name;  // file in WORKDIR
  int flags;
  int fd;
  off_t offset;
  int fd_flags, fl_flags;
  ino_t ino;
};

static struct Fd g_fds[] = {
    {"ro.txt", O_RDONLY, -1, 0, 0, 0, 0},
    {"wo.txt", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, -1, 0, 0, 0, 0},
    {"rw.txt", O_RDWR | O_CREAT | O_TRUNC | O_NONBLOCK, -1, 0, 0, 0, 0},
    {"append.txt", O_WRONLY | O_CREAT | O_APPEND, -1, 0, 0, 0, 0},
    {"ro.txt", O_RDONLY | O_CLOEXEC | O_NONBLOCK, -1, 0, 0, 0, 0},  // second description of ro.txt
};
#define kFdCount (sizeof g_fds / sizeof g_fds[0])
#define kHighFd 100

static char g_path[600];

static const char* Path(const char* name) {
  wl_path(g_path, sizeof g_path, name);
  return g_path;
}

static void Record(struct Fd* f) {
  struct stat st;
  WL_SYS(fstat(f->fd, &st));
  f->ino = st.st_ino;
  f->offset = WL_SYS(lseek(f->fd, 0, SEEK_CUR));
  f->fd_flags = WL_SYS(fcntl(f->fd, F_GETFD));
  f->fl_flags = WL_SYS(fcntl(f->fd, F_GETFL));
}

static void CheckSame(const struct Fd* f) {
  struct stat st;
  if (fstat(f->fd, &st) != 0) wl_fail("fd %d (%s): fstat: %s", f->fd, f->name, wl_errstr());
  if (st.st_ino != f->ino) wl_fail("fd %d (%s): inode %lu became %lu", f->fd, f->name, (unsigned long)f->ino, (unsigned long)st.st_ino);
  off_t off = lseek(f->fd, 0, SEEK_CUR);
  if (off != f->offset) wl_fail("fd %d (%s): offset %lld became %lld", f->fd, f->name, (long long)f->offset, (long long)off);
  int fd_flags = fcntl(f->fd, F_GETFD);
  if (fd_flags != f->fd_flags) wl_fail("fd %d (%s): F_GETFD %#x became %#x", f->fd, f->name, f->fd_flags, fd_flags);
  int fl_flags = fcntl(f->fd, F_GETFL);
  if (fl_flags != f->fl_flags) wl_fail("fd %d (%s): F_GETFL %#o became %#o", f->fd, f->name, f->fl_flags, fl_flags);
}

static void WriteAll(int fd, const char* s) {
  size_t n = strlen(s);
  if (write(fd, s, n) != (ssize_t)n) wl_fail("write fd %d: %s", fd, wl_errstr());
}

static void ExpectFile(const char* name, const char* want) {
  char buf[4096];
  ssize_t n = wl_read_file(Path(name), buf, sizeof buf);
  if (n < 0) wl_fail("read %s: %s", name, wl_errstr());
  if (strcmp(buf, want) != 0) wl_fail("%s holds '%s', want '%s'", name, buf, want);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  // ro.txt exists before it is opened read-only.
  int setup = WL_SYS(open(Path("ro.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0644));
  WriteAll(setup, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ");
  close(setup);
  setup = WL_SYS(open(Path("append.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0644));
  WriteAll(setup, "first;");
  close(setup);

  for (size_t i = 0; i < kFdCount; i++) {
    g_fds[i].fd = open(Path(g_fds[i].name), g_fds[i].flags, 0644);
    WL_CHECK(g_fds[i].fd >= 0, "open %s: %s", g_fds[i].name, wl_errstr());
  }
  struct Fd* ro = &g_fds[0];
  struct Fd* wo = &g_fds[1];
  struct Fd* rw = &g_fds[2];
  struct Fd* app = &g_fds[3];
  struct Fd* ro2 = &g_fds[4];
  char buf[64];
  WL_CHECK(read(ro->fd, buf, 10) == 10, "read ro");
  WL_CHECK(read(ro2->fd, buf, 36) == 36, "read ro2");
  WriteAll(wo->fd, "before-checkpoint;");
  WriteAll(rw->fd, "rw-data-0123456789;");
  WL_SYS(lseek(rw->fd, 3, SEEK_SET));
  WriteAll(app->fd, "second;");
  WL_SYS(lseek(app->fd, 2, SEEK_SET));  // position is ignored by O_APPEND writes but kept
  // A dup shares the description (and offset) of rw; move it far up the table.
  int dup_fd = WL_SYS(dup2(rw->fd, kHighFd));
  for (size_t i = 0; i < kFdCount; i++) Record(&g_fds[i]);
  struct Fd high = {"rw.txt (dup)", 0, dup_fd, 0, 0, 0, 0};
  Record(&high);

  wl_signal_ready();
  wl_wait_go();

  for (size_t i = 0; i < kFdCount; i++) CheckSame(&g_fds[i]);
  CheckSame(&high);
  // Reads continue at the saved offsets.
  WL_CHECK(read(ro->fd, buf, 5) == 5 && memcmp(buf, "abcde", 5) == 0, "ro.txt read did not continue at offset 10");
  WL_CHECK(read(ro2->fd, buf, 3) == 3 && memcmp(buf, "ABC", 3) == 0, "second ro.txt read did not continue at offset 36");
  WL_CHECK(read(ro->fd, buf, 1) == 1 && buf[0] == 'f', "ro.txt descriptors share an offset but must not");
  // Writes continue too.
  WriteAll(wo->fd, "after;");
  ExpectFile("wo.txt", "before-checkpoint;after;");
  WriteAll(rw->fd, "XY");
  WL_CHECK(lseek(high.fd, 0, SEEK_CUR) == 5, "the dup no longer shares the offset of rw.txt");
  WL_SYS(lseek(high.fd, 0, SEEK_SET));
  WL_CHECK(lseek(rw->fd, 0, SEEK_CUR) == 0, "seeking the dup did not move rw.txt's offset");
  WL_CHECK(read(rw->fd, buf, 19) == 19 && memcmp(buf, "rw-XYta-0123456789;", 19) == 0, "rw.txt content wrong");
  WriteAll(app->fd, "third;");
  ExpectFile("append.txt", "first;second;third;");
  // The write-only descriptor must still be write-only.
  WL_CHECK(read(wo->fd, buf, 1) == -1, "wo.txt became readable");
  wl_pass();
}
