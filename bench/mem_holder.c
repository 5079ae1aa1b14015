// Benchmark workload: holds SIZE_MIB of random data, writes READY_FILE, then sleeps.
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: mem_holder SIZE_MIB READY_FILE\n");
    return 2;
  }
  size_t bytes = (size_t)atol(argv[1]) << 20;
  uint64_t* p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return 1;
  uint64_t x = 88172645463325252ULL;
  for (size_t i = 0; i < bytes / 8; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = x;
  }
  int fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return 1;
  close(fd);
  for (;;) pause();
}
