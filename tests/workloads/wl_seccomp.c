// Seccomp filters: the workload sets no_new_privs and installs three filters, the first with
// SECCOMP_FILTER_FLAG_LOG (getppid fails with EPERM), the second on top (getpriority fails with
// EACCES), the third killing the process on userfaultfd — a call it never makes, but cairn's
// write tracking makes it run (a container runtime's profile denies it too): the dump's own
// calls must not be judged by the program's filters. Then it starts a thread, which inherits
// them. After restore the filters must still act in both threads, in the same number and mode,
// and leave every other call alone.
#define _GNU_SOURCE
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "wl_common.h"

// Installs a filter answering `nr` with `action` (SECCOMP_RET_ERRNO | err, SECCOMP_RET_KILL_PROCESS).
static void Deny(long nr, unsigned action, unsigned flags) {
  struct sock_filter prog[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, action),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog fprog = {(unsigned short)(sizeof prog / sizeof prog[0]), prog};
  WL_SYS(syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &fprog));
}

// Both filters act in the calling thread, and the rest is allowed.
static void CheckFilters(const char* who) {
  errno = 0;
  long r = syscall(SYS_getppid);
  WL_CHECK(r == -1 && errno == EPERM, "%s: getppid gave %ld (errno %d), not EPERM from the first filter", who, r, errno);
  errno = 0;
  r = syscall(SYS_getpriority, PRIO_PROCESS, 0);
  WL_CHECK(r == -1 && errno == EACCES, "%s: getpriority gave %ld (errno %d), not EACCES from the second filter", who, r,
           errno);
  WL_CHECK(syscall(SYS_getpid) == getpid() && getpid() > 0, "%s: getpid disturbed", who);
}

static volatile int g_go;

static void* Thread(void* arg) {
  (void)arg;
  while (!g_go) usleep(1000);
  CheckFilters("thread");
  return NULL;
}

static char g_status[8192];

static const char* StatusField(const char* name) {
  if (wl_read_file("/proc/self/status", g_status, sizeof g_status) < 0) wl_fail("read status: %s", wl_errstr());
  char* at = strstr(g_status, name);
  if (!at) wl_fail("no %s in /proc/self/status", name);
  at += strlen(name);
  while (*at == ' ' || *at == '\t') ++at;
  char* end = strchr(at, '\n');
  if (end) *end = '\0';
  return at;
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  WL_SYS(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0));
  Deny(SYS_getppid, SECCOMP_RET_ERRNO | EPERM, SECCOMP_FILTER_FLAG_LOG);
  Deny(SYS_getpriority, SECCOMP_RET_ERRNO | EACCES, 0);
  Deny(SYS_userfaultfd, SECCOMP_RET_KILL_PROCESS, 0);
  CheckFilters("main, before");
  pthread_t t;
  WL_CHECK(pthread_create(&t, NULL, Thread, NULL) == 0, "pthread_create");

  wl_signal_ready();
  wl_wait_go();

  CheckFilters("main");
  g_go = 1;
  WL_CHECK(pthread_join(t, NULL) == 0, "pthread_join");
  WL_CHECK(strcmp(StatusField("Seccomp:"), "2") == 0, "Seccomp mode is %s, not 2", StatusField("Seccomp:"));
  WL_CHECK(strcmp(StatusField("Seccomp_filters:"), "3") == 0, "%s seccomp filters, not 3",
           StatusField("Seccomp_filters:"));
  WL_CHECK(strcmp(StatusField("NoNewPrivs:"), "1") == 0, "no_new_privs lost");
  wl_pass();
}
