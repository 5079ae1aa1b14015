// Exit status after restore: a minimal workload whose ending is chosen by the content of WORKDIR/go,
// so the harness can check that `cairn restore` (attached) reports the restored process's exit:
//   empty        -> prints PASS, exits 0 (the normal protocol)
//   "exit N"     -> prints "EXIT N", exits with status N
//   "signal N"   -> prints "SIGNAL N", kills itself with signal N (default action)
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "wl_common.h"

int main(int argc, char** argv) {
  wl_init(argc, argv);
  wl_signal_ready();
  wl_wait_go();
  char path[600], what[64];
  wl_path(path, sizeof path, "go");
  WL_CHECK(wl_read_file(path, what, sizeof what) >= 0, "read go: %s", wl_errstr());
  int n = 0;
  if (sscanf(what, "exit %d", &n) == 1) {
    printf("EXIT %d\n", n);
    fflush(stdout);
    _exit(n);
  }
  if (sscanf(what, "signal %d", &n) == 1) {
    printf("SIGNAL %d\n", n);
    fflush(stdout);
    signal(n, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, n);
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    raise(n);
    wl_fail("still alive after raising signal %d", n);
  }
  WL_CHECK(what[0] == '\0', "unknown request in go: '%s'", what);
  wl_pass();
}
