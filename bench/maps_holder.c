// Holds N separate memory areas for bench/many.sh maps, then waits.
//
//   maps_holder N READY_FILE
//
// N private anonymous areas of two pages, each touched (one page written), every other one
// read-only so that the kernel cannot merge neighbours into one area. The map count limit
// (vm.max_map_count, 65530 by default) bounds N. READY_FILE is created once they exist.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: maps_holder N READY_FILE\n");
    return 2;
  }
  long n = strtol(argv[1], NULL, 10);
  long page = sysconf(_SC_PAGESIZE);
  // One reservation, carved into areas of alternating protection.
  char* base = mmap(NULL, (size_t)n * 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  for (long i = 0; i < n; ++i) {
    char* a = base + i * 2 * page;
    a[0] = (char)(i + 1);
    if (i % 2 && mprotect(a, 2 * page, PROT_READ) != 0) {
      fprintf(stderr, "maps_holder: area %ld of %ld: %s\n", i + 1, n, strerror(errno));
      return 1;
    }
  }
  int r = open(argv[2], O_WRONLY | O_CREAT, 0600);
  if (r < 0) return 1;
  close(r);
  for (;;) pause();
}
