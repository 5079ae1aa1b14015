// POSIX shared memory and a named semaphore shared by root and its child survive a round
// trip: segment A (in /dev/shm, descriptor and mapping in both), segment B (unlinked after
// mapping, its descriptor kept: it lives only in the processes) and a semaphore. After go
// the child writes into both mappings and posts the semaphore; root waits on it and must
// see the writes through its own mappings and through its descriptors (the same objects).
#include "wl_tree.h"

#include <semaphore.h>
#include <stdio.h>
#include <sys/mman.h>

#define SIZE 65536

int main(int argc, char** argv) {
  wl_init(argc, argv);
  char a_name[64], b_name[64], s_name[64];
  snprintf(a_name, sizeof a_name, "/cairn-wl-%d-a", (int)getpid());
  snprintf(b_name, sizeof b_name, "/cairn-wl-%d-b", (int)getpid());
  snprintf(s_name, sizeof s_name, "/cairn-wl-%d-s", (int)getpid());
  int a = WL_SYS(shm_open(a_name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600));
  WL_SYS(ftruncate(a, SIZE));
  char* pa = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, a, 0);
  WL_CHECK(pa != MAP_FAILED, "mmap A: %s", wl_errstr());
  int b = WL_SYS(shm_open(b_name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600));
  WL_SYS(ftruncate(b, SIZE));
  char* pb = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, b, 0);
  WL_CHECK(pb != MAP_FAILED, "mmap B: %s", wl_errstr());
  WL_SYS(shm_unlink(b_name));
  wl_fill_pattern(pa, SIZE, 3);
  wl_fill_pattern(pb, SIZE, 4);
  sem_t* s = sem_open(s_name, O_CREAT | O_EXCL, 0600, 0);
  WL_CHECK(s != SEM_FAILED, "sem_open: %s", wl_errstr());
  pid_t c = WL_SYS(fork());
  if (c == 0) {
    wl_tree_set_role("C");
    wl_tree_announce();
    wl_wait_go();
    wl_tree_watchdog();
    WL_CHECK(wl_check_pattern(pa, 4096, 3) < 0 && wl_check_pattern(pb, 4096, 4) < 0, "C: the mappings lost content");
    memcpy(pa + 100, "child in A", 10);
    memcpy(pb + 200, "child in B", 10);
    WL_SYS(sem_post(s));
    _exit(0);
  }
  wl_tree_root_ready_after("C");
  WL_SYS(sem_wait(s));
  char buf[16] = {0};
  WL_CHECK(memcmp(pa + 100, "child in A", 10) == 0, "root's mapping of A lacks the child's write");
  WL_CHECK(memcmp(pb + 200, "child in B", 10) == 0, "root's mapping of B lacks the child's write");
  WL_CHECK(pread(a, buf, 10, 100) == 10 && memcmp(buf, "child in A", 10) == 0, "A's descriptor reads '%s'", buf);
  WL_CHECK(pread(b, buf, 10, 200) == 10 && memcmp(buf, "child in B", 10) == 0, "B's descriptor reads '%s'", buf);
  wl_tree_expect_child_ok(c, "C");
  wl_tree_expect_no_children();
  shm_unlink(a_name);
  sem_unlink(s_name);
  wl_pass();
}
