// O_PATH descriptors: one of a regular file in WORKDIR, one of a directory (WORKDIR/dir, holding a
// file "name") and one of a symlink opened with O_PATH|O_NOFOLLOW (the link itself, not its target).
// After restore: F_GETFL still shows O_PATH on each, fstat gives the same device and inode as before,
// openat(dir_fd, "name") through the directory's O_PATH descriptor opens the file inside it,
// readlinkat(link_fd, "") gives the link's target, and fchdir(dir_fd) works.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wl_common.h"

#define TARGET "some/target/that-does-not-exist"

static void check(int fds[3], const struct stat* before, const char* when) {
  const char* names[3] = {"file", "dir", "symlink"};
  for (int i = 0; i < 3; i++) {
    int fl = WL_SYS(fcntl(fds[i], F_GETFL));
    WL_CHECK(fl & O_PATH, "%s: the %s descriptor lost O_PATH (F_GETFL %#x)", when, names[i], fl);
    struct stat st;
    WL_SYS(fstat(fds[i], &st));
    WL_CHECK(st.st_dev == before[i].st_dev && st.st_ino == before[i].st_ino,
             "%s: the %s descriptor is inode %lu, was %lu", when, names[i], (unsigned long)st.st_ino,
             (unsigned long)before[i].st_ino);
  }
  WL_CHECK(S_ISLNK(before[2].st_mode), "%s: the symlink descriptor does not refer to a link", when);
  int in = openat(fds[1], "name", O_RDONLY | O_CLOEXEC);
  WL_CHECK(in >= 0, "%s: openat(dir O_PATH fd, \"name\"): %s", when, wl_errstr());
  char buf[16] = {0};
  WL_CHECK(read(in, buf, sizeof buf - 1) == 5 && strcmp(buf, "inner") == 0, "%s: dir/name reads '%s'", when, buf);
  close(in);
  char target[256] = {0};
  ssize_t n = readlinkat(fds[2], "", target, sizeof target - 1);
  WL_CHECK(n >= 0, "%s: readlinkat(link fd, \"\"): %s", when, wl_errstr());
  WL_CHECK(strcmp(target, TARGET) == 0, "%s: link target '%s', want '%s'", when, target, TARGET);
  WL_CHECK(fchdir(fds[1]) == 0, "%s: fchdir(dir O_PATH fd): %s", when, wl_errstr());
  struct stat cwd;
  WL_SYS(stat(".", &cwd));
  WL_CHECK(cwd.st_ino == before[1].st_ino, "%s: after fchdir '.' is inode %lu, want %lu", when,
           (unsigned long)cwd.st_ino, (unsigned long)before[1].st_ino);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  char file[600], dir[600], inner[600], link[600];
  wl_path(file, sizeof file, "opath.file");
  wl_path(dir, sizeof dir, "dir");
  wl_path(inner, sizeof inner, "dir/name");
  wl_path(link, sizeof link, "opath.link");
  int w = WL_SYS(open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  close(w);
  WL_SYS(mkdir(dir, 0755));
  w = WL_SYS(open(inner, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  WL_CHECK(write(w, "inner", 5) == 5, "write dir/name: %s", wl_errstr());
  close(w);
  WL_SYS(symlink(TARGET, link));
  int fds[3];
  fds[0] = WL_SYS(open(file, O_PATH | O_CLOEXEC));
  fds[1] = WL_SYS(open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC));
  fds[2] = WL_SYS(open(link, O_PATH | O_NOFOLLOW | O_CLOEXEC));
  struct stat before[3];
  for (int i = 0; i < 3; i++) WL_SYS(fstat(fds[i], &before[i]));
  WL_SYS(chdir("/"));
  check(fds, before, "before the checkpoint");
  WL_SYS(chdir("/"));

  wl_signal_ready();
  wl_wait_go();

  check(fds, before, "after restore");
  wl_pass();
}
