// Standard streams redirected to files: the workload prints numbered lines to stdout (through stdio)
// and stderr (with write) before the checkpoint, leaves a half-written line in stdout's buffer, and
// prints more afterwards. After restore the descriptors must point at the same files at the same
// offsets, so the files end up holding every line once, in order, with nothing overwritten. The
// workload reads its own output files back through /proc/self/fd to check.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wl_common.h"

#define kLinesBefore 20
#define kLinesAfter 20

static char g_expected_out[8192];
static char g_expected_err[8192];
static char g_actual[16384];

static void Append(char* buf, size_t size, const char* text) {
  size_t len = strlen(buf);
  snprintf(buf + len, size - len, "%s", text);
}

static void ErrLine(int n) {
  char line[64];
  int len = snprintf(line, sizeof line, "stderr line %d\n", n);
  if (write(2, line, (size_t)len) != len) wl_fail("write stderr: %s", wl_errstr());
  Append(g_expected_err, sizeof g_expected_err, line);
}

static void OutLine(int n) {
  char line[64];
  snprintf(line, sizeof line, "stdout line %d\n", n);
  fputs(line, stdout);
  Append(g_expected_out, sizeof g_expected_out, line);
}

// Reads the file behind descriptor `fd` (a regular file) from its start.
static const char* ReadBack(int fd) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  if (wl_read_file(path, g_actual, sizeof g_actual) < 0) wl_fail("read back %s: %s", path, wl_errstr());
  return g_actual;
}

static void ExpectOffsetAtEnd(int fd) {
  struct stat st;
  WL_SYS(fstat(fd, &st));
  WL_CHECK(S_ISREG(st.st_mode), "fd %d is not a regular file (redirect stdio to files)", fd);
  off_t off = lseek(fd, 0, SEEK_CUR);
  WL_CHECK(off == st.st_size, "fd %d: offset %lld, file size %lld", fd, (long long)off, (long long)st.st_size);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  for (int i = 0; i < kLinesBefore; i++) {
    OutLine(i);
    ErrLine(i);
  }
  fflush(stdout);
  ExpectOffsetAtEnd(1);
  ExpectOffsetAtEnd(2);
  // Left in stdio's buffer across the checkpoint: part of the process's memory.
  fputs("half a line ", stdout);
  Append(g_expected_out, sizeof g_expected_out, "half a line ");

  wl_signal_ready();
  wl_wait_go();

  fputs("and its end\n", stdout);
  Append(g_expected_out, sizeof g_expected_out, "and its end\n");
  for (int i = kLinesBefore; i < kLinesBefore + kLinesAfter; i++) {
    OutLine(i);
    ErrLine(i);
  }
  fflush(stdout);
  ExpectOffsetAtEnd(1);
  ExpectOffsetAtEnd(2);
  const char* out = ReadBack(1);
  WL_CHECK(strcmp(out, g_expected_out) == 0, "stdout file does not hold the expected lines:\n%s", out);
  const char* err = ReadBack(2);
  WL_CHECK(strcmp(err, g_expected_err) == 0, "stderr file does not hold the expected lines:\n%s", err);
  wl_pass();
}
