// Two processes sharing one descriptor table (clone(CLONE_FILES | SIGCHLD), no CLONE_VM): after
// restore they must share it again, not hold two copies that happen to look alike. Root sends child F
// (over a pipe) the number of an eventfd it has just opened and of a descriptor for F to close; F
// checks the new descriptor is there (F_GETFD succeeds, /proc/self/fd names an eventfd), closes the
// other and replies; root then finds that descriptor closed (EBADF). Done once before the checkpoint
// and once after restore, with new descriptors each time.
#include "wl_tree.h"

#include <sched.h>
#include <sys/eventfd.h>

struct cmd {
  int check_fd, close_fd;
};

static int to_f[2], from_f[2];
static char stack[256 * 1024] __attribute__((aligned(16)));

static int child(void* arg) {
  (void)arg;
  wl_tree_set_role("F");
  wl_tree_announce();
  for (int round = 0; round < 2; round++) {
    struct cmd c;
    wl_tree_phase(round == 0 ? "waiting for the first command" : "waiting for the second command");
    if (wl_tree_read_full(to_f[0], &c, sizeof c, "command pipe") != sizeof c) wl_fail("F: command pipe closed");
    if (fcntl(c.check_fd, F_GETFD) < 0) {
      wl_fail("F: round %d: root's new eventfd %d is not in F's table: %s", round, c.check_fd, wl_errstr());
    }
    char link[64], target[128] = {0};
    snprintf(link, sizeof link, "/proc/self/fd/%d", c.check_fd);
    WL_SYS(readlink(link, target, sizeof target - 1));
    WL_CHECK(strcmp(target, "anon_inode:[eventfd]") == 0, "F: round %d: fd %d is '%s', want root's eventfd", round,
             c.check_fd, target);
    WL_SYS(close(c.close_fd));
    wl_tree_write_all(from_f[1], "k", 1, "reply pipe");
    if (round == 0) {
      wl_wait_go();
      wl_tree_watchdog();
    }
  }
  _exit(0);
}

static pid_t f_pid;

static void round_trip(int round, int close_fd, const char* when) {
  WL_CHECK(fcntl(close_fd, F_GETFD) >= 0, "%s: fd %d is not open before F closes it", when, close_fd);
  struct cmd c = {WL_SYS(eventfd(0, EFD_CLOEXEC)), close_fd};
  wl_tree_write_all(to_f[1], &c, sizeof c, "command pipe");
  char r;
  wl_tree_phase("waiting for F's reply");
  // The pipes live in the shared table, so F's death closes no end: watch for it instead.
  struct pollfd pfd = {from_f[0], POLLIN, 0};
  while (poll(&pfd, 1, 20) == 0) {
    int status;
    if (waitpid(f_pid, &status, WNOHANG) == f_pid) wl_fail("%s: F died before replying (round %d)", when, round);
  }
  if (wl_tree_read_full(from_f[0], &r, 1, "reply pipe") != 1) wl_fail("%s: F did not reply (round %d)", when, round);
  errno = 0;
  WL_CHECK(fcntl(close_fd, F_GETFD) == -1 && errno == EBADF,
           "%s: fd %d, closed by F, is still open in root: the table is not shared", when, close_fd);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  WL_SYS(pipe2(to_f, O_CLOEXEC));
  WL_SYS(pipe2(from_f, O_CLOEXEC));
  int null = WL_SYS(open("/dev/null", O_RDONLY | O_CLOEXEC));
  WL_SYS(dup2(null, 60));
  WL_SYS(dup2(null, 61));
  close(null);
  pid_t f = f_pid = WL_SYS(clone(child, stack + sizeof stack, CLONE_FILES | SIGCHLD, NULL));
  wl_tree_wait_announced("F");
  round_trip(0, 60, "before the checkpoint");
  wl_tree_root_ready_after("F");
  round_trip(1, 61, "after restore");
  wl_tree_expect_child_ok(f, "F");
  wl_pass();
}
