// Descriptions that name processes, shared across a fork and held for another process of the tree.
// Before forking C, root opens /proc/self/stat, /proc/self/ns/net and a pidfd of itself; C inherits
// all three (one open file description each, shared by both). Root then opens /proc/<C>/status.
// After restore, in both processes: the shared /proc/<root>/stat starts with root's pid; the shared
// namespace descriptor is the namespace each is in; the shared pidfd names root (fdinfo "Pid:");
// the three are still one description in both (kcmp KCMP_FILE, which the child runs on its parent);
// in root, /proc/<C>/status says "Pid: C". After go, C reads through the shared /proc file so
// that root sees the shared offset move.
#include "wl_tree.h"

#include <stdlib.h>
#include <sys/syscall.h>

#define KCMP_FILE_ 0

static long first_number(int fd, const char* key, const char* what, const char* when) {
  static char buf[8192];
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  WL_CHECK(n > 0, "%s: %s: pread %s: %s", wl_tree_role_, when, what, n < 0 ? wl_errstr() : "empty");
  buf[n] = '\0';
  if (key == NULL) return strtol(buf, NULL, 10);
  char* p = strstr(buf, key);
  WL_CHECK(p != NULL, "%s: %s: %s has no '%s'", wl_tree_role_, when, what, key);
  return strtol(p + strlen(key), NULL, 10);
}

static int fdinfo_pid(int fd) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
  WL_CHECK(wl_read_file(path, buf, sizeof buf) > 0, "read %s: %s", path, wl_errstr());
  const char* p = strstr(buf, "\nPid:");
  WL_CHECK(p != NULL, "%s has no Pid: line", path);
  return atoi(p + 5);
}

static void check_shared(int stat_fd, int ns_fd, int pidfd, pid_t root, const char* when) {
  long got = first_number(stat_fd, NULL, "/proc/<root>/stat", when);
  WL_CHECK(got == root, "%s: %s: the shared /proc/<root>/stat starts with %ld, root is %d", wl_tree_role_, when, got,
           (int)root);
  struct stat fst, st;
  WL_SYS(fstat(ns_fd, &fst));
  WL_SYS(stat("/proc/self/ns/net", &st));
  WL_CHECK(fst.st_ino == st.st_ino && fst.st_dev == st.st_dev, "%s: %s: the shared net namespace descriptor is %lu, "
           "the process is in %lu", wl_tree_role_, when, (unsigned long)fst.st_ino, (unsigned long)st.st_ino);
  WL_CHECK(fdinfo_pid(pidfd) == root, "%s: %s: the shared pidfd names %d, root is %d", wl_tree_role_, when,
           fdinfo_pid(pidfd), (int)root);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  pid_t root = getpid();
  int stat_fd = WL_SYS(open("/proc/self/stat", O_RDONLY | O_CLOEXEC));
  int ns_fd = WL_SYS(open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC));
  int pidfd = (int)WL_SYS(syscall(SYS_pidfd_open, root, 0));
  int p[2];
  WL_SYS(pipe2(p, O_CLOEXEC));
  pid_t c = WL_SYS(fork());
  if (c == 0) {
    wl_tree_set_role("C");
    close(p[0]);
    check_shared(stat_fd, ns_fd, pidfd, root, "before the checkpoint");
    wl_tree_announce();
    wl_wait_go();
    check_shared(stat_fd, ns_fd, pidfd, root, "after restore");
    pid_t parent = getppid();
    int fds[3] = {stat_fd, ns_fd, pidfd};
    for (int i = 0; i < 3; i++) {
      long same = syscall(SYS_kcmp, parent, getpid(), KCMP_FILE_, fds[i], fds[i]);
      WL_CHECK(same == 0, "C: after restore: fd %d is no longer the description root holds (kcmp %ld)", fds[i], same);
    }
    char b[16];
    WL_CHECK(read(stat_fd, b, sizeof b) == (ssize_t)sizeof b, "C: read the shared /proc/<root>/stat: %s", wl_errstr());
    wl_tree_write_all(p[1], "R", 1, "report pipe");
    _exit(0);
  }
  close(p[1]);
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/status", (int)c);
  int child_status = WL_SYS(open(path, O_RDONLY | O_CLOEXEC));
  wl_tree_wait_announced("C");
  check_shared(stat_fd, ns_fd, pidfd, root, "before the checkpoint");
  long got = first_number(child_status, "\nPid:\t", "/proc/<C>/status", "before the checkpoint");
  WL_CHECK(got == c, "root: before the checkpoint: /proc/<C>/status says Pid %ld, C is %d", got, (int)c);

  wl_tree_root_ready_after("C");

  check_shared(stat_fd, ns_fd, pidfd, root, "after restore");
  got = first_number(child_status, "\nPid:\t", "/proc/<C>/status", "after restore");
  WL_CHECK(got == c, "root: after restore: /proc/<C>/status says Pid %ld, C is %d", got, (int)c);
  char r = 0;
  wl_tree_read_full(p[0], &r, 1, "report pipe");
  off_t at = lseek(stat_fd, 0, SEEK_CUR);
  WL_CHECK(at == 16, "root: after C read 16 bytes through the shared /proc/<root>/stat its offset is %ld here",
           (long)at);
  wl_tree_expect_child_ok(c, "C");
  wl_pass();
}
