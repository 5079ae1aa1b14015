// The program's first useful work after a restore (issue 23): holds SIZE_MIB of random data,
// then waits in read() on the FIFO WORKDIR/kick (opened read-write, so never at end of file).
// For each byte read it sums 1000 words at random places of its data and prints one line,
// "work CLOCK_REALTIME_NS SUM", to WORKDIR/out (appended, unbuffered).
//
//   first_work SIZE_MIB WORKDIR     (WORKDIR/ready once the data is made)
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: first_work SIZE_MIB WORKDIR\n");
    return 2;
  }
  size_t words = ((size_t)atol(argv[1]) << 20) / 8;
  uint64_t* p = mmap(NULL, words * 8, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return 1;
  uint64_t x = 88172645463325252ULL;
  for (size_t i = 0; i < words; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = x;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/kick", argv[2]);
  if (mkfifo(path, 0600) != 0) return 1;
  int kick = open(path, O_RDWR);
  snprintf(path, sizeof path, "%s/out", argv[2]);
  int out = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
  snprintf(path, sizeof path, "%s/ready", argv[2]);
  int ready = open(path, O_WRONLY | O_CREAT, 0644);
  if (kick < 0 || out < 0 || ready < 0) return 1;
  close(ready);
  uint64_t r = 0x9e3779b97f4a7c15ULL;
  for (;;) {
    char c;
    if (read(kick, &c, 1) != 1) continue;
    uint64_t sum = 0;
    for (int i = 0; i < 1000; ++i) {
      r ^= r << 13;
      r ^= r >> 7;
      r ^= r << 17;
      sum += p[r % words];
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char line[128];
    int n = snprintf(line, sizeof line, "work %lld %llu\n", (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec,
                     (unsigned long long)sum);
    if (write(out, line, n) != n) return 1;
  }
}
