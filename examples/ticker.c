// The demo's workload: keeps a running SHA-like hash of a counter in memory and prints a
// line every 200 ms. After a restore it carries on from the same count and hash.
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char** argv) {
  long limit = argc > 1 ? atol(argv[1]) : 50;
  uint64_t h = 1469598103934665603ULL;
  for (long i = 0; i < limit; i++) {
    h = (h ^ (uint64_t)i) * 1099511628211ULL;
    printf("tick %ld pid %d hash %016llx\n", i, getpid(), (unsigned long long)h);
    fflush(stdout);
    struct timespec ts = {0, 200 * 1000 * 1000};
    while (nanosleep(&ts, &ts) != 0) {
    }
  }
  printf("done hash %016llx\n", (unsigned long long)h);
  return 0;
}
