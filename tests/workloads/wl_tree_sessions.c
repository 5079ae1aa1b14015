// Sessions, process groups and parent links of a tree:
//
//   root                     (the harness's session and group)
//   ├── C1  setsid(): leads session C1 and group C1
//   │   └── G1  in session C1, group C1 (forked after the setsid)
//   │       └── GG1  setpgid(0, 0): its own group inside session C1
//   ├── C2  setpgid(0, 0): leads group C2 in root's session
//   │   └── G2  forked before C2's setpgid (so born in root's group), then joins group C2
//   └── C3  a sibling that joins group C2 (led by another branch of the tree)
//
// After restore every process checks its own pid, ppid, pgid and sid; root also checks every other
// process through getpgid(pid), getsid(pid) and /proc/PID/stat (parent) while they all still run, and
// only then lets them finish (WORKDIR/root-checked). Parents reap their children and pass on failures.
#include "wl_tree.h"

#include <stdlib.h>

#define NPROC 7
static const char* const kRoles[NPROC] = {"root", "C1", "G1", "GG1", "C2", "G2", "C3"};

// Announces the caller with its ids: "pid ppid pgid sid".
static void announce_ids(struct wl_tree_ids* ids) {
  *ids = wl_tree_own_ids();
  char name[64], content[96];
  snprintf(name, sizeof name, "ids-%s", wl_tree_role_);
  snprintf(content, sizeof content, "%d %d %d %d\n", (int)ids->pid, (int)ids->ppid, (int)ids->pgid, (int)ids->sid);
  wl_tree_write_file(name, content);
  wl_tree_announce();
}

// What every non-root process does after go: check itself, wait until root has checked everyone,
// reap its child (if any), exit.
static void finish(const struct wl_tree_ids* ids, pid_t child, const char* child_role) {
  wl_wait_go();
  wl_tree_watchdog();
  wl_tree_check_own_ids(ids);
  wl_tree_phase("waiting for root's checks");
  wl_tree_wait_file("root-checked", WL_TREE_TIMEOUT_S);
  if (child > 0) wl_tree_expect_child_ok(child, child_role);
  wl_tree_expect_no_children();
  _exit(0);
}

// Waits until `pid` leads its own process group.
static void wait_group_leader(pid_t pid) {
  for (int waited = 0; getpgid(pid) != pid; waited++) {
    if (waited > WL_TREE_TIMEOUT_S * 1000) wl_fail("%s: pid %d never became a group leader", wl_tree_role_, (int)pid);
    wl_sleep_ms(1);
  }
}

static void run_gg1(void) {
  wl_tree_set_role("GG1");
  WL_SYS(setpgid(0, 0));
  struct wl_tree_ids ids;
  announce_ids(&ids);
  finish(&ids, 0, NULL);
}

static void run_g1(void) {
  wl_tree_set_role("G1");
  pid_t gg1 = WL_SYS(fork());
  if (gg1 == 0) run_gg1();
  struct wl_tree_ids ids;
  announce_ids(&ids);
  finish(&ids, gg1, "GG1");
}

static void run_c1(void) {
  wl_tree_set_role("C1");
  WL_SYS(setsid());
  pid_t g1 = WL_SYS(fork());
  if (g1 == 0) run_g1();
  struct wl_tree_ids ids;
  announce_ids(&ids);
  finish(&ids, g1, "G1");
}

static void run_g2(void) {
  wl_tree_set_role("G2");
  pid_t c2 = getppid();
  wait_group_leader(c2);
  WL_SYS(setpgid(0, c2));
  struct wl_tree_ids ids;
  announce_ids(&ids);
  finish(&ids, 0, NULL);
}

static void run_c2(void) {
  wl_tree_set_role("C2");
  pid_t g2 = WL_SYS(fork());
  if (g2 == 0) run_g2();
  WL_SYS(setpgid(0, 0));
  struct wl_tree_ids ids;
  announce_ids(&ids);
  finish(&ids, g2, "G2");
}

static void run_c3(pid_t c2) {
  wl_tree_set_role("C3");
  wait_group_leader(c2);
  WL_SYS(setpgid(0, c2));
  struct wl_tree_ids ids;
  announce_ids(&ids);
  finish(&ids, 0, NULL);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  pid_t c1 = WL_SYS(fork());
  if (c1 == 0) run_c1();
  pid_t c2 = WL_SYS(fork());
  if (c2 == 0) run_c2();
  pid_t c3 = WL_SYS(fork());
  if (c3 == 0) run_c3(c2);
  struct wl_tree_ids self;
  announce_ids(&self);

  struct wl_tree_ids want[NPROC];
  for (int i = 0; i < NPROC; i++) {
    wl_tree_wait_announced(kRoles[i]);
    char name[64], path[600], buf[128];
    snprintf(name, sizeof name, "ids-%s", kRoles[i]);
    wl_path(path, sizeof path, name);
    if (wl_read_file(path, buf, sizeof buf) < 0) wl_fail("root: read %s: %s", path, wl_errstr());
    if (sscanf(buf, "%d %d %d %d", &want[i].pid, &want[i].ppid, &want[i].pgid, &want[i].sid) != 4) {
      wl_fail("root: malformed %s: '%s'", name, buf);
    }
  }
  // The shape the tree was built to have, so that a mistake in the workload is not taken for success.
  struct wl_tree_ids *r = &want[0], *wc1 = &want[1], *g1 = &want[2], *gg1 = &want[3], *wc2 = &want[4], *g2 = &want[5],
                     *wc3 = &want[6];
  WL_CHECK(wc1->sid == wc1->pid && wc1->pgid == wc1->pid && wc1->sid != r->sid, "root: C1 does not lead its session");
  WL_CHECK(g1->sid == wc1->pid && g1->pgid == wc1->pid && g1->ppid == wc1->pid, "root: G1 is not in C1's session");
  WL_CHECK(gg1->sid == wc1->pid && gg1->pgid == gg1->pid && gg1->ppid == g1->pid, "root: GG1 does not lead a group in C1's session");
  WL_CHECK(wc2->pgid == wc2->pid && wc2->sid == r->sid, "root: C2 does not lead a group in root's session");
  WL_CHECK(g2->pgid == wc2->pid && g2->ppid == wc2->pid && g2->sid == r->sid, "root: G2 did not join C2's group");
  WL_CHECK(wc3->pgid == wc2->pid && wc3->ppid == r->pid && wc3->sid == r->sid, "root: C3 did not join C2's group");
  const char line[] = "tree_sessions: set up, 7 processes\n";
  wl_tree_write_all(1, line, sizeof line - 1, "stdout");
  wl_signal_ready();

  wl_wait_go();
  wl_tree_watchdog();
  wl_tree_check_own_ids(&self);
  wl_tree_phase("checking every process from outside");
  for (int i = 1; i < NPROC; i++) {
    pid_t pid = want[i].pid;
    pid_t pgid = getpgid(pid), sid = getsid(pid), ppid = -1;
    char state = wl_tree_proc_state(pid, &ppid);
    if (state == 0 || state == 'Z') wl_fail("root: %s (pid %d) is not running after go (state '%c')", kRoles[i], (int)pid, state ? state : '-');
    if (pgid != want[i].pgid || sid != want[i].sid || ppid != want[i].ppid) {
      wl_fail("root: %s (pid %d) has pgid %d sid %d ppid %d, want pgid %d sid %d ppid %d", kRoles[i], (int)pid,
              (int)pgid, (int)sid, (int)ppid, (int)want[i].pgid, (int)want[i].sid, (int)want[i].ppid);
    }
  }
  wl_tree_write_file("root-checked", "");
  wl_tree_phase("reaping children");
  wl_tree_expect_child_ok(c1, "C1");
  wl_tree_expect_child_ok(c2, "C2");
  wl_tree_expect_child_ok(c3, "C3");
  wl_tree_expect_no_children();
  wl_pass();
}
