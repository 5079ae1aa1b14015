// An executable memfd (the fexecve pattern of runtimes that run a program without a file on disk):
// a copy of /bin/true written into memfd_create("wl-exec", 0). Before the checkpoint and after
// restore a forked child runs it with execveat(fd, "", AT_EMPTY_PATH) and must exit 0; a failed exec
// exits 100 + errno (ETXTBSY, EACCES, ENOEXEC...), so a restored memfd that lost its content, its
// mode or is held open for writing elsewhere shows up as that errno. Kernel detail: memfd_create's
// own descriptor does not count as a writer (i_writecount), so exec works although it is O_RDWR; a
// descriptor re-opened O_RDWR through /proc/PID/fd does count, and exec then fails ETXTBSY.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "wl_common.h"

extern char** environ;

static void run(int fd, const char* when) {
  pid_t c = WL_SYS(fork());
  if (c == 0) {
    char* argv[] = {"wl-exec-true", NULL};
    syscall(SYS_execveat, fd, "", argv, environ, AT_EMPTY_PATH);
    _exit(100 + errno);
  }
  int status;
  WL_SYS(waitpid(c, &status, 0));
  WL_CHECK(WIFEXITED(status), "%s: the exec'd child died of signal %d", when, WTERMSIG(status));
  int code = WEXITSTATUS(status);
  if (code >= 100) {
    errno = code - 100;
    wl_fail("%s: execveat of the memfd failed: %s", when, wl_errstr());
  }
  WL_CHECK(code == 0, "%s: the memfd's program exited %d, want 0", when, code);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  int fd = WL_SYS(memfd_create("wl-exec", 0));
  int src = WL_SYS(open("/bin/true", O_RDONLY | O_CLOEXEC));
  static char buf[1 << 16];
  ssize_t n;
  while ((n = read(src, buf, sizeof buf)) > 0) WL_CHECK(write(fd, buf, (size_t)n) == n, "write memfd: %s", wl_errstr());
  WL_CHECK(n == 0, "read /bin/true: %s", wl_errstr());
  close(src);
  struct stat st;
  WL_SYS(fstat(fd, &st));
  WL_CHECK(st.st_mode & 0111, "memfd mode %#o is not executable", st.st_mode);
  run(fd, "before the checkpoint");

  wl_signal_ready();
  wl_wait_go();

  char link[64], target[256] = {0};
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  WL_SYS(readlink(link, target, sizeof target - 1));
  WL_CHECK(strcmp(target, "/memfd:wl-exec (deleted)") == 0, "after restore: fd %d is '%s', want the memfd", fd, target);
  struct stat st2;
  WL_SYS(fstat(fd, &st2));
  WL_CHECK(st2.st_size == st.st_size, "after restore: memfd holds %lld bytes, want %lld", (long long)st2.st_size,
           (long long)st.st_size);
  WL_CHECK(st2.st_mode == st.st_mode, "after restore: memfd mode %#o, was %#o", st2.st_mode, st.st_mode);
  run(fd, "after restore");
  wl_pass();
}
