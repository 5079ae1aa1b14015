// A program that plays a CUDA application for tests/gpu (fake_cuda.h): its "device memory" is a
// shared mapping of a file under /dev/nvidia*, which its main thread transforms step by step
// ("kernels") while a driver thread answers the fake driver (fake_libcuda.c). At the end it prints
// the checksum of the device memory: a run checkpointed and restored must print the same as an
// uninterrupted one.
//
//   fake_cuda_app WORKDIR STEPS STEP_MS
// WORKDIR/progress holds the last step done; stdout gets "checksum HEX steps N" at the end.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "fake_cuda.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int state = FAKE_RUNNING;
static char device_path[96];
static char key[48];
static int gpu;  // the GPU index it uses
static const char* workdir;
static int device_fd = -1;
static uint64_t* device;  // FAKE_CUDA_DEVICE_BYTES, mapped from device_fd; NULL while checkpointed
static uint64_t* host_copy;  // where a checkpoint puts the device memory (allocated up front)

static void Die(const char* what) {
  fprintf(stderr, "fake_cuda_app: %s: %s\n", what, strerror(errno));
  exit(2);
}

static void SayWhere(void) {
  char path[4096];
  snprintf(path, sizeof path, "%s/device", workdir);
  FILE* f = fopen(path, "we");
  if (f == NULL || fprintf(f, "%s\n", device_path) < 0 || fclose(f) != 0) Die(path);
  snprintf(path, sizeof path, "%s/gpu", workdir);
  f = fopen(path, "we");
  if (f == NULL || fprintf(f, "%d\n", gpu) < 0 || fclose(f) != 0) Die(path);
}

static int OpenDevice(void) {
  snprintf(device_path, sizeof device_path, FAKE_CUDA_DEVICE_PREFIX "g%d-%s", gpu, key);
  device_fd = open(device_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (device_fd < 0 || ftruncate(device_fd, FAKE_CUDA_DEVICE_BYTES) != 0) return -1;
  void* m = mmap(NULL, FAKE_CUDA_DEVICE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, device_fd, 0);
  if (m == MAP_FAILED) return -1;
  device = m;
  return 0;
}

static int Handle(const struct fake_request* q, int* value) {
  if (q->op == FAKE_STATE) {
    pthread_mutex_lock(&mu);
    *value = state;
    pthread_mutex_unlock(&mu);
    return FAKE_SUCCESS;
  }
  if (q->op == FAKE_LOCK) {
    // Waits for the kernel under way (the work submitted), at most the timeout.
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    uint32_t ms = q->timeout_ms == 0 ? 3600000u : q->timeout_ms;
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec += 1;
      until.tv_nsec -= 1000000000L;
    }
    if (pthread_mutex_timedlock(&mu, &until) != 0) return FAKE_ERROR_TIMEOUT;
  } else {
    pthread_mutex_lock(&mu);
  }
  int r = FAKE_SUCCESS;
  switch (q->op) {
    case FAKE_LOCK:
      if (state != FAKE_RUNNING) r = FAKE_ERROR_ILLEGAL_STATE; else state = FAKE_LOCKED;
      break;
    case FAKE_CHECKPOINT:
      if (state != FAKE_LOCKED) { r = FAKE_ERROR_ILLEGAL_STATE; break; }
      memcpy(host_copy, device, FAKE_CUDA_DEVICE_BYTES);
      munmap(device, FAKE_CUDA_DEVICE_BYTES);
      close(device_fd);
      device = NULL;
      device_fd = -1;
      state = FAKE_CHECKPOINTED;
      break;
    case FAKE_RESTORE:
      if (state != FAKE_CHECKPOINTED) { r = FAKE_ERROR_ILLEGAL_STATE; break; }
      if (q->old_gpu >= 0 && q->old_gpu != gpu) { r = FAKE_ERROR_INVALID_VALUE; break; }  // not its GPU
      if (q->new_gpu >= 0 && q->new_gpu != gpu) {
        unlink(device_path);  // the other GPU's memory: not this process's any more
        gpu = q->new_gpu;
      }
      if (OpenDevice() != 0) { r = FAKE_ERROR_OPERATING_SYSTEM; break; }
      SayWhere();
      memcpy(device, host_copy, FAKE_CUDA_DEVICE_BYTES);
      state = FAKE_LOCKED;
      break;
    case FAKE_UNLOCK:
      if (state != FAKE_LOCKED) { r = FAKE_ERROR_ILLEGAL_STATE; break; }
      state = FAKE_RUNNING;
      pthread_cond_broadcast(&cv);
      break;
    default:
      r = FAKE_ERROR_INVALID_VALUE;
  }
  pthread_mutex_unlock(&mu);
  return r;
}

static void* DriverThread(void* arg) {
  int listener = *(int*)arg;
  prctl(PR_SET_NAME, FAKE_CUDA_THREAD_NAME, 0, 0, 0);
  for (;;) {
    int c = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR) continue;
      Die("accept");
    }
    struct fake_request q;
    struct fake_reply r = {FAKE_ERROR_INVALID_VALUE, 0};
    if (read(c, &q, sizeof q) == (ssize_t)sizeof q) r.result = Handle(&q, &r.value);
    if (write(c, &r, sizeof r) != (ssize_t)sizeof r) fprintf(stderr, "fake_cuda_app: reply lost\n");
    close(c);
  }
  return NULL;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: fake_cuda_app WORKDIR STEPS STEP_MS\n");
    return 2;
  }
  workdir = argv[1];
  int steps = atoi(argv[2]), step_ms = atoi(argv[3]);
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  srandom((unsigned)(now.tv_nsec ^ getpid()));
  snprintf(key, sizeof key, "%d-%ld-%ld", (int)getpid(), (long)now.tv_sec, random());
  const char* visible = getenv("CUDA_VISIBLE_DEVICES");
  gpu = visible != NULL && *visible != '\0' ? atoi(visible) : 0;
  host_copy = malloc(FAKE_CUDA_DEVICE_BYTES);
  if (host_copy == NULL) Die("malloc");
  if (OpenDevice() != 0) Die(device_path);
  SayWhere();
  for (size_t i = 0; i < FAKE_CUDA_DEVICE_BYTES / 8; ++i) device[i] = i * 0x9e3779b97f4a7c15ULL;

  int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  int n = snprintf(a.sun_path + 1, sizeof a.sun_path - 1, FAKE_CUDA_SOCKET_PREFIX "%s", key);
  if (listener < 0 || bind(listener, (struct sockaddr*)&a, (socklen_t)(sizeof(sa_family_t) + 1 + (size_t)n)) != 0 ||
      listen(listener, 8) != 0) {
    Die("listen");
  }
  pthread_t t;
  if (pthread_create(&t, NULL, DriverThread, &listener) != 0) Die("pthread_create");

  char progress_path[4096];
  snprintf(progress_path, sizeof progress_path, "%s/progress", workdir);
  int progress = open(progress_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (progress < 0) Die(progress_path);
  for (int step = 0; step < steps; ++step) {
    pthread_mutex_lock(&mu);
    while (state != FAKE_RUNNING) pthread_cond_wait(&cv, &mu);
    for (size_t i = 0; i < FAKE_CUDA_DEVICE_BYTES / 8; ++i) device[i] = device[i] * 6364136223846793005ULL + (uint64_t)step + 1;
    pthread_mutex_unlock(&mu);
    char line[32];
    int len = snprintf(line, sizeof line, "%10d\n", step + 1);
    if (pwrite(progress, line, (size_t)len, 0) != len) Die("write progress");
    struct timespec pause = {step_ms / 1000, (long)(step_ms % 1000) * 1000000L};
    while (nanosleep(&pause, &pause) != 0 && errno == EINTR) {
    }
  }
  pthread_mutex_lock(&mu);
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < FAKE_CUDA_DEVICE_BYTES / 8; ++i) h = (h ^ device[i]) * 0x100000001b3ULL;
  pthread_mutex_unlock(&mu);
  printf("checksum %016llx steps %d\n", (unsigned long long)h, steps);
  fflush(stdout);
  unlink(device_path);
  return 0;
}
