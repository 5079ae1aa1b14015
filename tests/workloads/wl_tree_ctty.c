// A session with a controlling terminal. The terminal is a pseudo-terminal whose master is held by
// a process outside the checkpoint (H: double-forked away from the tree, so that `dump --tree` of
// root leaves it out, as it would an ssh daemon or a terminal emulator). S makes a new session and
// opens the slave, which becomes its controlling terminal; S forks T into a process group of its
// own and makes that group the terminal's foreground group, and forks U, which gives the terminal
// up (TIOCNOTTY). After restore S and T must have the terminal as their controlling terminal
// (/proc/self/stat tty_nr, and /dev/tty opens), tcgetpgrp must name T's group, and U must still
// have none.
#include "wl_tree.h"

#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/sysmacros.h>
#include <termios.h>

static unsigned long tty_nr_self(void) {
  char buf[1024];
  WL_CHECK(wl_read_file("/proc/self/stat", buf, sizeof buf) > 0, "read /proc/self/stat");
  const char* p = strrchr(buf, ')');
  unsigned long nr = 0;
  char state;
  int ppid, pgrp, sid;
  WL_CHECK(p != NULL && sscanf(p + 2, "%c %d %d %d %lu", &state, &ppid, &pgrp, &sid, &nr) == 5, "parse stat");
  return nr;
}

// This process's view: its controlling terminal is `slave` (by tty_nr and by /dev/tty).
static void check_ctty(const char* who, dev_t slave, const char* when) {
  unsigned long nr = tty_nr_self();
  unsigned long want = (minor(slave) & 0xff) | (major(slave) << 8) | ((minor(slave) & ~0xffu) << 12);
  WL_CHECK(nr == want, "%s: %s has controlling terminal %#lx in /proc/self/stat, want %#lx", when, who, nr, want);
  int t = open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC);
  WL_CHECK(t >= 0, "%s: %s cannot open /dev/tty: %s", when, who, wl_errstr());
  close(t);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  int master = WL_SYS(posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
  WL_SYS(grantpt(master));
  WL_SYS(unlockpt(master));
  char slave_path[64];
  WL_CHECK(ptsname_r(master, slave_path, sizeof slave_path) == 0, "ptsname");
  struct stat sst;
  WL_SYS(stat(slave_path, &sst));
  dev_t slave = sst.st_rdev;

  // H: holds the master until WORKDIR/done appears, outside the tree.
  pid_t mid = WL_SYS(fork());
  if (mid == 0) {
    if (WL_SYS(fork()) != 0) _exit(0);
    setsid();
    for (int i = 0; i < 100 * 120 && !wl_tree_file_exists("done"); i++) wl_sleep_ms(10);
    _exit(0);
  }
  WL_SYS(waitpid(mid, NULL, 0));
  close(master);

  int p[2];
  WL_SYS(pipe2(p, O_CLOEXEC));
  pid_t s = WL_SYS(fork());
  if (s == 0) {
    wl_tree_set_role("S");
    close(p[0]);
    WL_SYS(setsid());
    int fd = WL_SYS(open(slave_path, O_RDWR | O_CLOEXEC));  // no O_NOCTTY: becomes the controlling terminal
    pid_t t = WL_SYS(fork());
    if (t == 0) {
      wl_tree_set_role("T");
      WL_SYS(setpgid(0, 0));
      wl_tree_announce();
      wl_wait_go();
      check_ctty("T", slave, "after restore");
      _exit(0);
    }
    pid_t u = WL_SYS(fork());
    if (u == 0) {
      wl_tree_set_role("U");
      int tty = WL_SYS(open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC));
      WL_SYS(ioctl(tty, TIOCNOTTY));
      close(tty);
      WL_CHECK(tty_nr_self() == 0, "before the checkpoint: U still has a controlling terminal");
      wl_tree_announce();
      wl_wait_go();
      WL_CHECK(tty_nr_self() == 0, "after restore: U has a controlling terminal again (%#lx)", tty_nr_self());
      WL_CHECK(open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC) < 0, "after restore: U can open /dev/tty");
      _exit(0);
    }
    WL_SYS(setpgid(t, t));
    signal(SIGTTOU, SIG_IGN);
    WL_SYS(tcsetpgrp(fd, t));
    check_ctty("S", slave, "before the checkpoint");
    WL_CHECK(tcgetpgrp(fd) == t, "before the checkpoint: foreground group %d, want T's %d", (int)tcgetpgrp(fd), (int)t);
    wl_tree_announce();
    wl_wait_go();
    check_ctty("S", slave, "after restore");
    WL_CHECK(tcgetpgrp(fd) == t, "after restore: foreground group %d, want T's %d", (int)tcgetpgrp(fd), (int)t);
    wl_tree_expect_child_ok(t, "T");
    wl_tree_expect_child_ok(u, "U");
    _exit(0);
  }
  close(p[1]);
  wl_tree_wait_announced("S");
  wl_tree_wait_announced("T");
  wl_tree_wait_announced("U");

  wl_tree_root_ready_after("S");

  wl_tree_expect_child_ok(s, "S");
  wl_tree_write_file("done", "");
  wl_pass();
}
