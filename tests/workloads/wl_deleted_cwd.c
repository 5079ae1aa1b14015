// A deleted current directory: the process chdir()s into WORKDIR/gone and then removes it with
// rmdir while it is the cwd. The kernel keeps the dentry as the cwd, unlinked: getcwd fails ENOENT,
// /proc/self/cwd reads "<path> (deleted)", and creating a file in "." fails ENOENT. After restore
// all three must be as before: the same getcwd result and errno, the same /proc/self/cwd text, and
// creating a file in "." still fails ENOENT (a restore that recreated the directory would let it).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wl_common.h"

struct state {
  int getcwd_ok, getcwd_errno, create_errno;
  char cwd[600], link[700];
};

static void probe(struct state* s) {
  memset(s, 0, sizeof *s);
  errno = 0;
  s->getcwd_ok = getcwd(s->cwd, sizeof s->cwd) != NULL;
  s->getcwd_errno = errno;
  ssize_t n = readlink("/proc/self/cwd", s->link, sizeof s->link - 1);
  if (n < 0) wl_fail("readlink /proc/self/cwd: %s", wl_errstr());
  int fd = open("newfile", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  s->create_errno = fd < 0 ? errno : 0;
  if (fd >= 0) close(fd);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  char dir[600];
  wl_path(dir, sizeof dir, "gone");
  WL_SYS(mkdir(dir, 0755));
  WL_SYS(chdir(dir));
  WL_SYS(rmdir(dir));
  struct state before, after;
  probe(&before);
  WL_CHECK(!before.getcwd_ok && before.getcwd_errno == ENOENT, "before the checkpoint: getcwd gave '%s' (errno %d), want ENOENT",
           before.cwd, before.getcwd_errno);
  size_t len = strlen(before.link);
  WL_CHECK(len > 10 && strcmp(before.link + len - 10, " (deleted)") == 0,
           "before the checkpoint: /proc/self/cwd is '%s', want '... (deleted)'", before.link);
  WL_CHECK(before.create_errno == ENOENT, "before the checkpoint: creating ./newfile gave errno %d, want ENOENT",
           before.create_errno);

  wl_signal_ready();
  wl_wait_go();

  probe(&after);
  WL_CHECK(!after.getcwd_ok && after.getcwd_errno == before.getcwd_errno,
           "after restore: getcwd gave '%s' (ok %d, errno %d), want failure with errno %d", after.getcwd_ok ? after.cwd : "",
           after.getcwd_ok, after.getcwd_errno, before.getcwd_errno);
  WL_CHECK(strcmp(after.link, before.link) == 0, "after restore: /proc/self/cwd is '%s', was '%s'", after.link,
           before.link);
  WL_CHECK(after.create_errno == ENOENT, "after restore: creating ./newfile gave errno %d (0 = created), want ENOENT",
           after.create_errno);
  wl_pass();
}
