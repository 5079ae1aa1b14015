// Refused: a process that unmapped its [vvar] area(s) but kept its [vdso] (whose code reads
// them). Restore gives a process the kernel's vDSO areas whole, so the dump refuses it up front
// (before, the restore failed as if the checkpoint came from another kernel). After the unmap it
// makes only plain system calls: glibc's clock_gettime would read the vanished area.
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "wl_common.h"

static char g_maps[65536];

int main(int argc, char** argv) {
  wl_init(argc, argv);
  wl_read_file("/proc/self/maps", g_maps, sizeof g_maps);
  int unmapped = 0;
  for (char* line = strtok(g_maps, "\n"); line != NULL; line = strtok(NULL, "\n")) {
    if (strstr(line, "[vvar") == NULL) continue;
    unsigned long start = strtoul(line, NULL, 16), end = strtoul(strchr(line, '-') + 1, NULL, 16);
    WL_CHECK(syscall(SYS_munmap, start, end - start) == 0, "munmap %s: %s", line, wl_errstr());
    unmapped++;
  }
  WL_CHECK(unmapped > 0, "no [vvar] area to unmap");
  wl_signal_ready();
  for (long naps = 0; !wl_go_exists(); naps++) {
    WL_CHECK(naps < (long)WL_GO_TIMEOUT_S * 100, "no WORKDIR/go after %d s", WL_GO_TIMEOUT_S);
    struct timespec ts = {0, 10 * 1000 * 1000};
    while (syscall(SYS_nanosleep, &ts, &ts) == -1 && errno == EINTR) {
    }
  }
  wl_pass();
}
