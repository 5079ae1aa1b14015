// A tree that cairn must refuse to checkpoint: root and its child share an io_uring
// instance, which the engine cannot save. The workload checks after go that the ring and
// the tree still work, so that a refused dump can be shown to have left the tree running
// untouched: the child enters the ring (io_uring_enter with nothing to do) and exits 0;
// root does the same and collects the child.
#include "wl_tree.h"

#include <linux/io_uring.h>
#include <sys/syscall.h>

static void enter_ring(int ring, const char* who) {
  long r = syscall(__NR_io_uring_enter, ring, 0, 0, 0, NULL, 0);
  WL_CHECK(r == 0, "%s: io_uring_enter on the shared ring returned %ld (%s)", who, r, wl_errstr());
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  struct io_uring_params params;
  memset(&params, 0, sizeof params);
  int ring = (int)WL_SYS(syscall(__NR_io_uring_setup, 4, &params));
  pid_t c = WL_SYS(fork());
  if (c == 0) {
    wl_tree_set_role("C");
    wl_tree_announce();
    wl_wait_go();
    wl_tree_watchdog();
    enter_ring(ring, "C");
    _exit(0);
  }
  wl_tree_root_ready_after("C");
  enter_ring(ring, "root");
  wl_tree_expect_child_ok(c, "C");
  wl_tree_expect_no_children();
  wl_pass();
}
