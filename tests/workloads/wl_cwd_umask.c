// Filesystem context (the kernel's fs_struct): the current directory is WORKDIR/sub and the umask is
// 027 across the checkpoint. After restore getcwd() must name the same directory (same inode),
// relative paths must resolve in it, and new files must get their mode through the same umask.
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wl_common.h"

int main(int argc, char** argv) {
  wl_init(argc, argv);
  char sub[600];
  wl_path(sub, sizeof sub, "sub");
  WL_SYS(mkdir(sub, 0755));
  WL_SYS(chdir(sub));
  int fd = WL_SYS(open("marker", O_WRONLY | O_CREAT | O_TRUNC, 0644));
  WL_CHECK(write(fd, "here", 4) == 4, "write marker");
  close(fd);
  umask(027);
  char cwd_before[PATH_MAX];
  WL_CHECK(getcwd(cwd_before, sizeof cwd_before) != NULL, "getcwd: %s", wl_errstr());
  struct stat st_before;
  WL_SYS(stat(".", &st_before));

  wl_signal_ready();
  wl_wait_go();

  char cwd[PATH_MAX];
  WL_CHECK(getcwd(cwd, sizeof cwd) != NULL, "getcwd after restore: %s", wl_errstr());
  WL_CHECK(strcmp(cwd, cwd_before) == 0, "cwd %s became %s", cwd_before, cwd);
  struct stat st;
  WL_SYS(stat(".", &st));
  WL_CHECK(st.st_ino == st_before.st_ino && st.st_dev == st_before.st_dev, "cwd is another directory with the same name");
  char link[PATH_MAX];
  ssize_t n = readlink("/proc/self/cwd", link, sizeof link - 1);
  WL_CHECK(n > 0, "readlink /proc/self/cwd: %s", wl_errstr());
  link[n] = '\0';
  WL_CHECK(strcmp(link, cwd_before) == 0, "/proc/self/cwd is %s", link);
  char buf[16];
  WL_CHECK(wl_read_file("marker", buf, sizeof buf) == 4 && strcmp(buf, "here") == 0, "relative path 'marker' did not resolve in the cwd");

  mode_t old = umask(022);
  WL_CHECK(old == 027, "umask %03o, want 027", (unsigned)old);
  umask(027);
  fd = WL_SYS(open("created-after", O_WRONLY | O_CREAT | O_EXCL, 0666));
  struct stat created;
  WL_SYS(fstat(fd, &created));
  close(fd);
  WL_CHECK((created.st_mode & 0777) == 0640, "new file mode %03o, want 0640", (unsigned)(created.st_mode & 0777));
  wl_pass();
}
