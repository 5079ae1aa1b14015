#define _GNU_SOURCE
#include "wl_common.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static char g_workdir[512];
static pthread_mutex_t g_print_lock = PTHREAD_MUTEX_INITIALIZER;

void wl_init(int argc, char** argv) {
  if (argc != 2 || argv[1][0] == '\0') {
    printf("FAIL: usage: %s WORKDIR\n", argc > 0 ? argv[0] : "wl");
    fflush(stdout);
    exit(1);
  }
  if (strlen(argv[1]) >= sizeof g_workdir - 64) wl_fail("WORKDIR too long");
  strcpy(g_workdir, argv[1]);
}

const char* wl_workdir(void) { return g_workdir; }

void wl_path(char* buf, size_t size, const char* name) {
  int n = snprintf(buf, size, "%s/%s", g_workdir, name);
  if (n < 0 || (size_t)n >= size) wl_fail("path WORKDIR/%s does not fit", name);
}

const char* wl_errstr(void) {
  // strerror() may allocate for unknown codes; strerrordesc_np never does.
  const char* s = strerrordesc_np(errno);
  return s ? s : "unknown error";
}

void wl_signal_ready(void) {
  char tmp[600], final[600], line[32];
  wl_path(tmp, sizeof tmp, "ready.tmp");
  wl_path(final, sizeof final, "ready");
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) wl_fail("open %s: %s", tmp, wl_errstr());
  int n = snprintf(line, sizeof line, "%d\n", (int)getpid());
  if (write(fd, line, (size_t)n) != n) wl_fail("write %s: %s", tmp, wl_errstr());
  if (close(fd) != 0) wl_fail("close %s: %s", tmp, wl_errstr());
  if (rename(tmp, final) != 0) wl_fail("rename %s: %s", tmp, wl_errstr());
}

int wl_go_exists(void) {
  char go[600];
  wl_path(go, sizeof go, "go");
  return access(go, F_OK) == 0;
}

void wl_wait_go(void) {
  int64_t deadline = wl_now_ns(CLOCK_MONOTONIC) + (int64_t)WL_GO_TIMEOUT_S * 1000000000;
  while (!wl_go_exists()) {
    if (wl_now_ns(CLOCK_MONOTONIC) > deadline) wl_fail("no WORKDIR/go after %d s", WL_GO_TIMEOUT_S);
    struct timespec ts = {0, 10 * 1000 * 1000};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
  }
}

void wl_fail(const char* fmt, ...) {
  pthread_mutex_lock(&g_print_lock);
  va_list ap;
  va_start(ap, fmt);
  fputs("FAIL: ", stdout);
  vprintf(fmt, ap);
  va_end(ap);
  fputc('\n', stdout);
  fflush(stdout);
  // _exit: other threads may still run, and atexit handlers are not part of any check.
  _exit(1);
}

void wl_pass(void) {
  pthread_mutex_lock(&g_print_lock);
  fputs("PASS\n", stdout);
  fflush(stdout);
  _exit(0);
}

int64_t wl_now_ns(int clock) {
  struct timespec ts;
  if (clock_gettime(clock, &ts) != 0) wl_fail("clock_gettime(%d): %s", clock, wl_errstr());
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void wl_sleep_ms(int64_t ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
  }
}

pid_t wl_gettid(void) { return (pid_t)syscall(SYS_gettid); }

uint64_t wl_xorshift64(uint64_t* state) {
  uint64_t x = *state;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  *state = x;
  return x;
}

static uint64_t SeedState(uint64_t seed) {
  // xorshift must not start at 0; mix the seed so nearby seeds give unrelated streams.
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  return s ? s : 1;
}

void wl_fill_pattern(void* buf, size_t len, uint64_t seed) {
  uint64_t s = SeedState(seed);
  unsigned char* p = buf;
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t v = wl_xorshift64(&s);
    memcpy(p + i, &v, 8);
  }
  if (i < len) {
    uint64_t v = wl_xorshift64(&s);
    memcpy(p + i, &v, len - i);
  }
}

ptrdiff_t wl_check_pattern(const void* buf, size_t len, uint64_t seed) {
  uint64_t s = SeedState(seed);
  const unsigned char* p = buf;
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t v = wl_xorshift64(&s);
    if (memcmp(p + i, &v, 8) != 0) {
      for (size_t j = 0; j < 8; j++) {
        if (p[i + j] != ((const unsigned char*)&v)[j]) return (ptrdiff_t)(i + j);
      }
    }
  }
  if (i < len) {
    uint64_t v = wl_xorshift64(&s);
    for (size_t j = 0; i + j < len; j++) {
      if (p[i + j] != ((const unsigned char*)&v)[j]) return (ptrdiff_t)(i + j);
    }
  }
  return -1;
}

ssize_t wl_read_file(const char* path, char* buf, size_t size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t total = 0;
  while (total + 1 < size) {
    ssize_t n = read(fd, buf + total, size - 1 - total);
    if (n < 0) {
      if (errno == EINTR) continue;
      int saved = errno;
      close(fd);
      errno = saved;
      return -1;
    }
    if (n == 0) break;
    total += (size_t)n;
  }
  buf[total] = '\0';
  close(fd);
  return (ssize_t)total;
}

long wl_thread_syscall(pid_t tid) {
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)tid);
  if (wl_read_file(path, buf, sizeof buf) < 0) wl_fail("read %s: %s", path, wl_errstr());
  if (buf[0] < '0' || buf[0] > '9') return -1;  // "running"
  return strtol(buf, NULL, 10);
}

void wl_wait_in_syscall(pid_t tid, long nr) {
  int64_t deadline = wl_now_ns(CLOCK_MONOTONIC) + 5 * 1000000000ll;
  long last = -1;
  while ((last = wl_thread_syscall(tid)) != nr) {
    if (wl_now_ns(CLOCK_MONOTONIC) > deadline) {
      wl_fail("thread %d never blocked in syscall %ld (last seen: %ld)", (int)tid, nr, last);
    }
    wl_sleep_ms(1);
  }
}
