// A process that dropped root for nobody (65534) but kept one capability as an ambient one
// (CAP_NET_BIND_SERVICE: permitted, inheritable, effective and ambient), with a resource limit of
// its own (RLIMIT_NOFILE soft 777). A checkpointer reading the limits of a process of another user
// needs care (prlimit(2) on it needs CAP_SYS_RESOURCE), and ambient capabilities are easily lost on
// the way. After restore: the same uids, the same capability sets, the capability still ambient,
// the same limit.
#define _GNU_SOURCE
#include <grp.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "wl_common.h"

static void caps(uint32_t* eff, uint32_t* prm, uint32_t* inh) {
  struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct d[2];
  WL_SYS(syscall(SYS_capget, &h, d));
  *eff = d[0].effective;
  *prm = d[0].permitted;
  *inh = d[0].inheritable;
}

static void check(const char* when) {
  uid_t r, e, s;
  WL_SYS(getresuid(&r, &e, &s));
  WL_CHECK(r == 65534 && e == 65534 && s == 65534, "%s: uids %d %d %d, want 65534", when, (int)r, (int)e, (int)s);
  uint32_t eff, prm, inh, want = 1u << CAP_NET_BIND_SERVICE;
  caps(&eff, &prm, &inh);
  WL_CHECK(eff == want && prm == want && inh == want, "%s: capabilities eff %#x prm %#x inh %#x, want %#x each", when,
           eff, prm, inh, want);
  WL_CHECK(prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, CAP_NET_BIND_SERVICE, 0, 0) == 1,
           "%s: CAP_NET_BIND_SERVICE is not ambient", when);
  WL_CHECK(prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, CAP_CHOWN, 0, 0) == 0, "%s: CAP_CHOWN is ambient", when);
  struct rlimit rl;
  WL_SYS(getrlimit(RLIMIT_NOFILE, &rl));
  WL_CHECK(rl.rlim_cur == 777, "%s: RLIMIT_NOFILE soft %llu, want 777", when, (unsigned long long)rl.rlim_cur);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  WL_CHECK(geteuid() == 0, "must start as root");
  WL_SYS(chmod(wl_workdir(), 0777));  // nobody writes WORKDIR/ready
  struct rlimit rl;
  WL_SYS(getrlimit(RLIMIT_NOFILE, &rl));
  rl.rlim_cur = 777;
  WL_SYS(setrlimit(RLIMIT_NOFILE, &rl));
  WL_SYS(prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0));
  WL_SYS(setgroups(0, NULL));
  WL_SYS(setresgid(65534, 65534, 65534));
  WL_SYS(setresuid(65534, 65534, 65534));
  struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct d[2] = {{0}};
  d[0].effective = d[0].permitted = d[0].inheritable = 1u << CAP_NET_BIND_SERVICE;
  WL_SYS(syscall(SYS_capset, &h, d));
  WL_SYS(prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_NET_BIND_SERVICE, 0, 0));
  check("before the checkpoint");

  wl_signal_ready();
  wl_wait_go();

  check("after restore");
  wl_pass();
}
