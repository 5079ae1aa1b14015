// vDSO: clock_gettime and gettimeofday run in the vDSO and read the kernel's time data from the vvar
// pages. After restore the vDSO must be where AT_SYSINFO_EHDR says (an ELF image, named [vdso] in
// /proc/self/maps), its clocks must be monotonic across the checkpoint and agree with the same
// clocks read through real syscalls (a vvar page saved as plain memory would freeze them), and they
// must keep advancing. Restored on a machine whose vDSO differs, AT_SYSINFO_EHDR names cairn's
// proxy of the old vDSO (a private r-x copy whose functions jump to the new one) and the new
// [vdso] is elsewhere: both are checked, and the clocks through the proxy as above.
#define _GNU_SOURCE
#include <elf.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "wl_common.h"

static const clockid_t kClocks[] = {CLOCK_REALTIME, CLOCK_MONOTONIC, CLOCK_BOOTTIME,
                                    CLOCK_MONOTONIC_RAW, CLOCK_MONOTONIC_COARSE, CLOCK_REALTIME_COARSE};
#define kClockCount (sizeof kClocks / sizeof kClocks[0])

static char g_maps[1 << 16];

static int64_t Vdso(clockid_t c) {
  struct timespec ts;
  if (clock_gettime(c, &ts) != 0) wl_fail("clock_gettime(%d): %s", (int)c, wl_errstr());
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t Syscall(clockid_t c) {
  struct timespec ts;
  if (syscall(SYS_clock_gettime, c, &ts) != 0) wl_fail("syscall clock_gettime(%d): %s", (int)c, wl_errstr());
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void CheckVdsoMapping(unsigned long ehdr) {
  if (wl_read_file("/proc/self/maps", g_maps, sizeof g_maps) < 0) wl_fail("read maps: %s", wl_errstr());
  char want[64];
  snprintf(want, sizeof want, "%lx-", ehdr);
  char* line = g_maps;
  while (line && strncmp(line, want, strlen(want)) != 0) {
    line = strchr(line, '\n');
    if (line) line++;
  }
  if (!line) wl_fail("no mapping starts at AT_SYSINFO_EHDR %#lx", ehdr);
  char* end = strchr(line, '\n');
  if (end) *end = '\0';
  if (!strstr(line, "[vdso]")) {
    // The proxy: private, r-x, no file; and the kernel's [vdso] mapped elsewhere.
    if (!strstr(line, " r-xp ") || !strstr(line, " 00:00 0")) wl_fail("mapping at AT_SYSINFO_EHDR is neither [vdso] nor a proxy: %s", line);
    if (end) *end = '\n';
    if (!strstr(g_maps, "[vdso]")) wl_fail("AT_SYSINFO_EHDR names a proxy, and there is no [vdso] mapped");
  }
  if (memcmp((const void*)ehdr, ELFMAG, SELFMAG) != 0) wl_fail("no ELF header at AT_SYSINFO_EHDR");
}

// vDSO and syscall readings must agree within `slack_ns` (coarse clocks tick at most every few ms).
static void CheckAgree(void) {
  for (size_t i = 0; i < kClockCount; i++) {
    int64_t slack = (kClocks[i] == CLOCK_MONOTONIC_COARSE || kClocks[i] == CLOCK_REALTIME_COARSE) ? 50000000 : 5000000;
    int64_t a = Syscall(kClocks[i]);
    int64_t v = Vdso(kClocks[i]);
    int64_t b = Syscall(kClocks[i]);
    if (v < a - slack || v > b + slack) {
      wl_fail("clock %d: vDSO says %lld, syscalls say %lld..%lld", (int)kClocks[i], (long long)v, (long long)a, (long long)b);
    }
  }
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  unsigned long ehdr = getauxval(AT_SYSINFO_EHDR);
  WL_CHECK(ehdr != 0, "no AT_SYSINFO_EHDR");
  CheckVdsoMapping(ehdr);
  CheckAgree();
  int64_t before[kClockCount];
  for (size_t i = 0; i < kClockCount; i++) before[i] = Vdso(kClocks[i]);
  struct timeval tv_before;
  gettimeofday(&tv_before, NULL);

  wl_signal_ready();
  wl_wait_go();

  CheckVdsoMapping(ehdr);
  for (size_t i = 0; i < kClockCount; i++) {
    if (kClocks[i] == CLOCK_REALTIME || kClocks[i] == CLOCK_REALTIME_COARSE) continue;  // may be stepped
    int64_t now = Vdso(kClocks[i]);
    WL_CHECK(now >= before[i], "clock %d went back from %lld to %lld", (int)kClocks[i], (long long)before[i], (long long)now);
  }
  CheckAgree();
  // Time keeps moving in the vDSO.
  int64_t t0 = Vdso(CLOCK_MONOTONIC);
  wl_sleep_ms(50);
  int64_t t1 = Vdso(CLOCK_MONOTONIC);
  WL_CHECK(t1 - t0 >= 40000000, "vDSO CLOCK_MONOTONIC advanced %lld ns over a 50 ms sleep", (long long)(t1 - t0));
  CheckAgree();
  struct timeval tv;
  WL_SYS(gettimeofday(&tv, NULL));
  WL_CHECK(tv.tv_sec >= tv_before.tv_sec - 1, "gettimeofday went back");
  time_t t = time(NULL);
  WL_CHECK(t >= tv.tv_sec - 1 && t <= tv.tv_sec + 2, "time() disagrees with gettimeofday");
  unsigned cpu;
  WL_CHECK(getcpu(&cpu, NULL) == 0, "getcpu: %s", wl_errstr());
  wl_pass();
}
