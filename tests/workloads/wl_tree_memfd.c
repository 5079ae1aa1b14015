// A memfd shared by a parent and its child, each holding a descriptor and a shared mapping
// of it, stays one file after a round trip: what the child writes through its mapping after
// go, the parent reads through its descriptor and sees in its own mapping.
#include "wl_tree.h"

#include <sys/mman.h>

int main(int argc, char** argv) {
  wl_init(argc, argv);
  int m = WL_SYS(memfd_create("cairn-tree", MFD_CLOEXEC));
  WL_SYS(ftruncate(m, 16384));
  char* p = mmap(NULL, 16384, PROT_READ | PROT_WRITE, MAP_SHARED, m, 0);
  WL_CHECK(p != MAP_FAILED, "mmap: %s", wl_errstr());
  wl_fill_pattern(p, 16384, 5);
  pid_t c = WL_SYS(fork());
  if (c == 0) {
    wl_tree_set_role("C");
    wl_tree_announce();
    wl_wait_go();
    wl_tree_watchdog();
    WL_CHECK(wl_check_pattern(p, 16384, 5) < 0, "C: the shared mapping lost its content");
    memcpy(p + 8000, "written by the child", 20);
    _exit(0);
  }
  wl_tree_root_ready_after("C");
  wl_tree_expect_child_ok(c, "C");
  char buf[32] = {0};
  WL_CHECK(pread(m, buf, 20, 8000) == 20 && memcmp(buf, "written by the child", 20) == 0,
           "root reads '%s' through its descriptor, want the child's write", buf);
  WL_CHECK(memcmp(p + 8000, "written by the child", 20) == 0, "root's mapping does not show the child's write");
  wl_tree_expect_no_children();
  wl_pass();
}
