// Lock ownership across a tree: a restored lock must belong to the process that held it, not to
// whichever process of the restore happened to take it. Root holds a POSIX write lock on
// WORKDIR/a.dat bytes 0-9; child C holds a POSIX write lock on WORKDIR/b.dat bytes 0-9 and an flock
// on WORKDIR/c.dat. Before the checkpoint and after restore root reads /proc/locks and requires,
// matching the files by inode number, exactly one lock of the right kind on each file whose pid
// column names the right process (root for a.dat, C for b.dat and c.dat), and F_GETLK from root on
// b.dat's range must report C's pid in l_pid. Then root closes a pipe and C exits.
#include "wl_tree.h"

#include <stdlib.h>
#include <sys/file.h>

static int open_file(const char* name) {
  char path[600];
  wl_path(path, sizeof path, name);
  return WL_SYS(open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644));
}

static ino_t ino_of(int fd) {
  struct stat st;
  WL_SYS(fstat(fd, &st));
  return st.st_ino;
}

// Requires exactly one /proc/locks entry of `kind` ("POSIX"/"FLOCK") on inode `ino`, held by `pid`.
static void expect_lock(const char* locks, ino_t ino, const char* kind, pid_t pid, const char* what, const char* when) {
  int found = 0;
  const char* line = locks;
  while (*line) {
    const char* end = strchr(line, '\n');
    if (!end) end = line + strlen(line);
    char buf[256];
    size_t len = (size_t)(end - line) < sizeof buf - 1 ? (size_t)(end - line) : sizeof buf - 1;
    memcpy(buf, line, len);
    buf[len] = '\0';
    char k[16], mode[16], rw[16];
    int p;
    unsigned maj, min;
    unsigned long long i;
    if (strstr(buf, "->") == NULL &&
        sscanf(buf, "%*d: %15s %15s %15s %d %x:%x:%llu", k, mode, rw, &p, &maj, &min, &i) == 7 && i == ino) {
      WL_CHECK(strcmp(k, kind) == 0, "%s: %s lock on %s (inode %llu), want %s: '%s'", when, k, what, i, kind, buf);
      WL_CHECK(p == pid, "%s: %s lock on %s is held by pid %d in /proc/locks, want %d: '%s'", when, k, what, p,
               (int)pid, buf);
      found++;
    }
    line = *end ? end + 1 : end;
  }
  WL_CHECK(found == 1, "%s: %d locks on %s (inode %llu) in /proc/locks, want 1:\n%s", when, found, what,
           (unsigned long long)ino, locks);
}

static void check(int a, int b, int c, pid_t child, const char* when) {
  static char locks[65536];
  WL_CHECK(wl_read_file("/proc/locks", locks, sizeof locks) >= 0, "read /proc/locks: %s", wl_errstr());
  expect_lock(locks, ino_of(a), "POSIX", getpid(), "a.dat (root's)", when);
  expect_lock(locks, ino_of(b), "POSIX", child, "b.dat (C's)", when);
  expect_lock(locks, ino_of(c), "FLOCK", child, "c.dat (C's flock)", when);
  struct flock q = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 10};
  WL_SYS(fcntl(b, F_GETLK, &q));
  WL_CHECK(q.l_type == F_WRLCK && q.l_pid == child, "%s: F_GETLK on b.dat: type %d pid %d, want F_WRLCK by C (%d)",
           when, q.l_type, (int)q.l_pid, (int)child);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  int a = open_file("a.dat"), b = open_file("b.dat"), c = open_file("c.dat");
  struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 10};
  WL_SYS(fcntl(a, F_SETLK, &l));
  int done[2];
  WL_SYS(pipe2(done, O_CLOEXEC));
  pid_t child = WL_SYS(fork());
  if (child == 0) {
    wl_tree_set_role("C");
    close(done[1]);
    int cb = open_file("b.dat"), cc = open_file("c.dat");
    WL_SYS(fcntl(cb, F_SETLK, &l));
    WL_SYS(flock(cc, LOCK_EX | LOCK_NB));
    wl_tree_announce();
    wl_wait_go();
    wl_tree_watchdog();
    wl_tree_phase("waiting for root to finish its checks");
    char x;
    wl_tree_read_full(done[0], &x, 1, "done pipe");
    _exit(0);
  }
  close(done[0]);
  wl_tree_wait_announced("C");
  check(a, b, c, child, "before the checkpoint");
  wl_tree_root_ready_after("C");
  check(a, b, c, child, "after restore");
  close(done[1]);
  wl_tree_expect_child_ok(child, "C");
  wl_pass();
}
