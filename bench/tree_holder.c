// Benchmark workload: a tree of NPROC processes sharing SIZE_MIB of random data
// (MAP_SHARED|MAP_ANONYMOUS, created by the root before it forks). Writes READY_FILE
// once every process exists, then all sleep.
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: tree_holder NPROC SIZE_MIB READY_FILE\n");
    return 2;
  }
  int nproc = atoi(argv[1]);
  size_t bytes = (size_t)atol(argv[2]) << 20;
  uint64_t* p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return 1;
  uint64_t x = 88172645463325252ULL;
  for (size_t i = 0; i < bytes / 8; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = x;
  }
  for (int i = 1; i < nproc; i++) {
    pid_t c = fork();
    if (c < 0) return 1;
    if (c == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // the tree goes when its root is killed
      for (;;) pause();
    }
  }
  int fd = open(argv[3], O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return 1;
  close(fd);
  for (;;) pause();
}
