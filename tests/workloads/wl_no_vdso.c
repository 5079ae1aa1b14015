// A process that unmapped its vDSO and vvar (as some sandboxes and runtimes do): both found in
// /proc/self/maps and munmap()ed, after which it makes only plain syscalls (glibc's
// clock_gettime would jump into the vanished vDSO). After restore: still no [vdso] nor [vvar]
// area, a buffer filled before the checkpoint reads the same, and clock_gettime and getpid
// through syscall(2) work, and the last bytes of every executable file mapping (where the
// checkpoint's injected code went for the time of the dump) are what they were.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "wl_common.h"

#define LEN (256 * 1024)

static char g_buf[LEN];
static char g_maps[65536];

// Whether /proc/self/maps names any of the kernel's vDSO areas.
static int has_kernel_areas(void) {
  ssize_t n = wl_read_file("/proc/self/maps", g_maps, sizeof g_maps);
  WL_CHECK(n > 0, "read /proc/self/maps: %s", wl_errstr());
  return strstr(g_maps, "[vdso]") != NULL || strstr(g_maps, "[vvar") != NULL;
}

static void unmap_kernel_areas(void) {
  wl_read_file("/proc/self/maps", g_maps, sizeof g_maps);
  for (char* line = strtok(g_maps, "\n"); line != NULL; line = strtok(NULL, "\n")) {
    if (strstr(line, "[vdso]") == NULL && strstr(line, "[vvar") == NULL) continue;
    unsigned long start = strtoul(line, NULL, 16), end = strtoul(strchr(line, '-') + 1, NULL, 16);
    WL_CHECK(syscall(SYS_munmap, start, end - start) == 0, "munmap %s: %s", line, wl_errstr());
  }
}

#define kTail 128
#define kMaxText 32
static unsigned long g_text_end[kMaxText];
static char g_tail[kMaxText][kTail];
static int g_texts;

// The last kTail bytes of each executable file mapping (r-xp), read from our own memory.
static void snapshot_text_tails(void) {
  wl_read_file("/proc/self/maps", g_maps, sizeof g_maps);
  g_texts = 0;
  for (char* line = strtok(g_maps, "\n"); line != NULL && g_texts < kMaxText; line = strtok(NULL, "\n")) {
    if (strstr(line, " r-xp ") == NULL || strchr(line, '/') == NULL) continue;
    unsigned long end = strtoul(strchr(line, '-') + 1, NULL, 16);
    g_text_end[g_texts] = end;
    memcpy(g_tail[g_texts], (const void*)(end - kTail), kTail);
    g_texts++;
  }
}

static void check_text_tails(void) {
  for (int i = 0; i < g_texts; i++) {
    WL_CHECK(memcmp(g_tail[i], (const void*)(g_text_end[i] - kTail), kTail) == 0,
             "after restore: the last %d bytes of the executable area ending at %#lx changed", kTail, g_text_end[i]);
  }
}

// wl_wait_go without clock_gettime: up to WL_GO_TIMEOUT_S in 10 ms naps.
static void wait_go(void) {
  for (long naps = 0; !wl_go_exists(); naps++) {
    WL_CHECK(naps < (long)WL_GO_TIMEOUT_S * 100, "no WORKDIR/go after %d s", WL_GO_TIMEOUT_S);
    struct timespec ts = {0, 10 * 1000 * 1000};
    while (syscall(SYS_nanosleep, &ts, &ts) == -1 && errno == EINTR) {
    }
  }
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  wl_fill_pattern(g_buf, LEN, 21);
  unmap_kernel_areas();
  WL_CHECK(!has_kernel_areas(), "before the checkpoint: the vDSO is still mapped");
  long pid = syscall(SYS_getpid);
  snapshot_text_tails();
  WL_CHECK(g_texts > 0, "no executable file mapping found");

  wl_signal_ready();
  wait_go();

  WL_CHECK(!has_kernel_areas(), "after restore: the process has a vDSO or vvar area again");
  WL_CHECK(wl_check_pattern(g_buf, LEN, 21) < 0, "after restore: the buffer differs");
  check_text_tails();
  struct timespec ts;
  WL_CHECK(syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts) == 0, "after restore: clock_gettime: %s", wl_errstr());
  WL_CHECK(syscall(SYS_getpid) == pid, "after restore: getpid is %ld, was %ld", syscall(SYS_getpid), pid);
  wl_pass();
}
