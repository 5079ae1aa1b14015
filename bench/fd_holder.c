// Holds N descriptors for the descriptor benchmarks (bench/many.sh fds), then waits.
//
//   fd_holder N MODE READY_FILE
//
// MODE: "files"  N regular files, each its own (a directory of them is made beside READY_FILE);
//       "one"    one regular file opened N times: N open file descriptions of one inode;
//       "dups"   one description, dup'd N-1 times.
// The soft RLIMIT_NOFILE is raised to the hard limit first. READY_FILE is created once every
// descriptor is open. Exits 1 with a message if it cannot hold them.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: fd_holder N files|one|dups READY_FILE\n");
    return 2;
  }
  long n = strtol(argv[1], NULL, 10);
  const char* mode = argv[2];
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  char dir[4096], path[4200];
  snprintf(dir, sizeof dir, "%s.files", argv[3]);
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    perror("mkdir");
    return 1;
  }
  int first = -1;
  for (long i = 0; i < n; ++i) {
    int fd;
    if (strcmp(mode, "files") == 0) {
      snprintf(path, sizeof path, "%s/%ld", dir, i);
      fd = open(path, O_RDWR | O_CREAT, 0600);
    } else if (strcmp(mode, "one") == 0) {
      snprintf(path, sizeof path, "%s/one", dir);
      fd = open(path, O_RDWR | O_CREAT, 0600);
    } else {
      snprintf(path, sizeof path, "%s/one", dir);
      fd = first < 0 ? open(path, O_RDWR | O_CREAT, 0600) : dup(first);
    }
    if (fd < 0) {
      fprintf(stderr, "fd_holder: descriptor %ld of %ld: %s\n", i + 1, n, strerror(errno));
      return 1;
    }
    if (first < 0) first = fd;
  }
  int r = open(argv[3], O_WRONLY | O_CREAT, 0600);
  if (r < 0) return 1;
  close(r);
  for (;;) pause();
}
