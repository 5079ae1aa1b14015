// A process that shares its parent's memory without being one of its threads: child C is made with
// clone(CLONE_VM | SIGCHLD) on a stack of its own, as a vfork child is until it execs. cairn cannot
// give such a pair one address space again on restore, so `dump --tree` must refuse it, naming both
// processes (tests/integration/bad_input_test.cc). Run plainly, it checks the sharing it relies on:
// a counter C increments is seen by root, and C sees the value root writes after go.
#include "wl_tree.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>

static _Atomic int g_from_child;
static _Atomic int g_from_root;

static int child_main(void* arg) {
  (void)arg;
  // Not wl_tree_set_role: its globals are root's too (shared memory). And glibc's getpid()
  // reads an id cached in the thread's memory, root's: ask the kernel.
  wl_tree_announce_pid("C", (pid_t)syscall(SYS_getpid));
  atomic_store(&g_from_child, 1);
  // Waits (in shared memory) for root's word, which root writes after go.
  for (int i = 0; i < WL_GO_TIMEOUT_S * 100 && atomic_load(&g_from_root) == 0; i++) wl_sleep_ms(10);
  _exit(atomic_load(&g_from_root) == 42 ? 0 : 1);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  size_t stack_size = 256 * 1024;
  char* stack = malloc(stack_size);
  WL_CHECK(stack != NULL, "malloc the child's stack");
  pid_t c = WL_SYS(clone(child_main, stack + stack_size, CLONE_VM | SIGCHLD, NULL));
  wl_tree_wait_announced("C");
  for (int i = 0; i < 500 && atomic_load(&g_from_child) == 0; i++) wl_sleep_ms(10);
  WL_CHECK(atomic_load(&g_from_child) == 1, "C's write to shared memory is not seen by root");

  wl_tree_root_ready_after("C");

  atomic_store(&g_from_root, 42);
  wl_tree_expect_child_ok(c, "C");
  wl_pass();
}
