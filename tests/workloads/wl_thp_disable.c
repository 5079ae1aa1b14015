// prctl(PR_SET_THP_DISABLE): a per-process (mm) flag that /proc/PID/maps does not show. Set before the
// checkpoint; after restore prctl(PR_GET_THP_DISABLE) is 1 and /proc/self/status says
// "THP_enabled: 0". Before setting it both must say enabled (else the check could not fail).
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include "wl_common.h"

static int status_thp_enabled(void) {
  static char buf[8192];
  WL_CHECK(wl_read_file("/proc/self/status", buf, sizeof buf) > 0, "read /proc/self/status: %s", wl_errstr());
  char* p = strstr(buf, "\nTHP_enabled:");
  WL_CHECK(p != NULL, "no THP_enabled line in /proc/self/status");
  return (int)strtol(p + 13, NULL, 10);
}

static void check(int want_disabled, const char* when) {
  int got = WL_SYS(prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0));
  WL_CHECK(got == want_disabled, "%s: PR_GET_THP_DISABLE is %d, want %d", when, got, want_disabled);
  int enabled = status_thp_enabled();
  WL_CHECK(enabled == !want_disabled, "%s: /proc/self/status THP_enabled: %d, want %d", when, enabled, !want_disabled);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  check(0, "at start");
  WL_SYS(prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0));
  check(1, "before the checkpoint");

  wl_signal_ready();
  wl_wait_go();

  check(1, "after restore");
  wl_pass();
}
