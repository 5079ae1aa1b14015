// The physical limit a dump is compared with: write SIZE_MIB of random data to PATH with
// large sequential writes and one fsync at the end, as cairn dump does. Prints seconds.
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: plain_write SIZE_MIB PATH\n");
    return 2;
  }
  size_t total = (size_t)atol(argv[1]) << 20;
  size_t chunk = 8 << 20;
  uint64_t* buf = malloc(chunk);
  uint64_t x = 88172645463325252ULL;
  for (size_t i = 0; i < chunk / 8; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    buf[i] = x;
  }
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  int fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return 1;
  for (size_t done = 0; done < total; done += chunk) {
    buf[0] = done;  // distinct chunks
    if (write(fd, buf, chunk) != (ssize_t)chunk) return 1;
  }
  fsync(fd);
  close(fd);
  clock_gettime(CLOCK_MONOTONIC, &b);
  printf("%.6f\n", (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9);
  return 0;
}
