// Holds N threads for bench/many.sh threads, then waits: each thread blocks in pause().
//
//   threads_holder N READY_FILE
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void* Sleep(void* arg) {
  (void)arg;
  for (;;) pause();
  return NULL;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: threads_holder N READY_FILE\n");
    return 2;
  }
  long n = strtol(argv[1], NULL, 10);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 64 * 1024);
  for (long i = 1; i < n; ++i) {
    pthread_t t;
    int rc = pthread_create(&t, &attr, Sleep, NULL);
    if (rc != 0) {
      fprintf(stderr, "threads_holder: thread %ld of %ld: %s\n", i + 1, n, strerror(rc));
      return 1;
    }
  }
  int r = open(argv[2], O_WRONLY | O_CREAT, 0600);
  if (r < 0) return 1;
  close(r);
  for (;;) pause();
}
