// Helpers shared by the process-tree workloads (wl_tree_*.c), on top of wl_common.h.
//
// The protocol of wl_common.h holds for the tree as a whole: the ROOT writes WORKDIR/ready only once
// every process of the tree is set up, every process waits for WORKDIR/go, and only the root prints
// the PASS line, after collecting its children's verdicts. A child that finds something wrong calls
// wl_fail() (its "FAIL: ..." line goes to the shared stdout, which the harness checks too) and so
// exits 1; its parent sees that in the exit status and fails in turn.
//
// Every process of the tree announces itself with wl_tree_announce(): WORKDIR/proc-<role> holds its
// pid. The root waits for those files before it writes ready; the test reads them to know the tree.
//
// All of this is header-only (static functions) so that the single-process workloads' common library
// stays as it is.
//
// Include it first, before any system header: it needs _GNU_SOURCE.
#pragma once

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "wl_common.h"

// How long a process waits for another process of the tree during setup or after go.
#define WL_TREE_TIMEOUT_S 8

// What the process is doing, for the watchdog's message. Set with wl_tree_phase().
static const char* volatile wl_tree_phase_ = "setup";
static const char* wl_tree_role_ = "root";

static inline void wl_tree_phase(const char* phase) { wl_tree_phase_ = phase; }

// Names this process in failure messages (call right after fork).
static inline void wl_tree_set_role(const char* role) {
  wl_tree_role_ = role;
  wl_tree_phase_ = "setup";
}

static inline void wl_tree_on_alarm(int sig) {
  (void)sig;
  wl_fail("%s (pid %d): watchdog: still in phase '%s' after %d s", wl_tree_role_, (int)getpid(), wl_tree_phase_,
          WL_TREE_TIMEOUT_S);
}

// Arms SIGALRM to fail this process if it is still running WL_TREE_TIMEOUT_S from now, so that a
// hang (a pipe that never reaches EOF, a child that never exits) ends with a FAIL line naming the
// phase instead of a process left behind. Call after go (the alarm is not part of the checkpoint).
static inline void wl_tree_watchdog(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = wl_tree_on_alarm;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGALRM, &sa, NULL) != 0) wl_fail("%s: sigaction(SIGALRM): %s", wl_tree_role_, wl_errstr());
  alarm(WL_TREE_TIMEOUT_S);
}

// Creates WORKDIR/<name> atomically with `content`.
static inline void wl_tree_write_file(const char* name, const char* content) {
  char tmp[600], final[600], tmpname[128];
  snprintf(tmpname, sizeof tmpname, "%s.tmp.%d", name, (int)getpid());
  wl_path(tmp, sizeof tmp, tmpname);
  wl_path(final, sizeof final, name);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) wl_fail("%s: open %s: %s", wl_tree_role_, tmp, wl_errstr());
  size_t len = strlen(content);
  if (write(fd, content, len) != (ssize_t)len) wl_fail("%s: write %s: %s", wl_tree_role_, tmp, wl_errstr());
  if (close(fd) != 0) wl_fail("%s: close %s: %s", wl_tree_role_, tmp, wl_errstr());
  if (rename(tmp, final) != 0) wl_fail("%s: rename %s: %s", wl_tree_role_, tmp, wl_errstr());
}

static inline int wl_tree_file_exists(const char* name) {
  char path[600];
  wl_path(path, sizeof path, name);
  return access(path, F_OK) == 0;
}

// Waits until WORKDIR/<name> exists; fails after `timeout_s` seconds.
static inline void wl_tree_wait_file(const char* name, int timeout_s) {
  int64_t deadline = wl_now_ns(CLOCK_MONOTONIC) + (int64_t)timeout_s * 1000000000;
  while (!wl_tree_file_exists(name)) {
    if (wl_now_ns(CLOCK_MONOTONIC) > deadline) {
      wl_fail("%s (pid %d): no WORKDIR/%s after %d s", wl_tree_role_, (int)getpid(), name, timeout_s);
    }
    wl_sleep_ms(2);
  }
}

// Publishes WORKDIR/proc-<role> holding `pid` (a process of the tree, usually the caller).
static inline void wl_tree_announce_pid(const char* role, pid_t pid) {
  char name[64], content[32];
  snprintf(name, sizeof name, "proc-%s", role);
  snprintf(content, sizeof content, "%d\n", (int)pid);
  wl_tree_write_file(name, content);
}

static inline void wl_tree_announce(void) { wl_tree_announce_pid(wl_tree_role_, getpid()); }

// Root side: waits until process `role` has announced itself.
static inline void wl_tree_wait_announced(const char* role) {
  char name[64];
  snprintf(name, sizeof name, "proc-%s", role);
  wl_tree_wait_file(name, WL_TREE_TIMEOUT_S);
}

// The root's side of the protocol once its tree is set up: waits until child `role` has
// announced itself, announces the root, writes ready, waits for go and arms the watchdog.
static inline void wl_tree_root_ready_after(const char* role) {
  wl_tree_wait_announced(role);
  wl_tree_announce();
  wl_signal_ready();
  wl_wait_go();
  wl_tree_watchdog();
}

// Reaps child `pid` (blocking, restarting on EINTR) and returns its wait status.
static inline int wl_tree_reap(pid_t pid, const char* what) {
  int status = 0;
  for (;;) {
    pid_t r = waitpid(pid, &status, 0);
    if (r == pid) return status;
    if (r < 0 && errno == EINTR) continue;
    wl_fail("%s: waitpid(%d) for %s: %s", wl_tree_role_, (int)pid, what, r < 0 ? wl_errstr() : "unexpected pid");
  }
}

// Describes a wait status ("exited 3", "killed by signal 15") into buf.
static inline const char* wl_tree_describe_status(int status, char* buf, size_t size) {
  if (WIFEXITED(status)) {
    snprintf(buf, size, "exited %d", WEXITSTATUS(status));
  } else if (WIFSIGNALED(status)) {
    snprintf(buf, size, "killed by signal %d%s", WTERMSIG(status), WCOREDUMP(status) ? " (core dumped)" : "");
  } else {
    snprintf(buf, size, "wait status %#x", status);
  }
  return buf;
}

// Reaps child `pid` (process `role`) and fails unless it exited 0 (its own FAIL line says why).
static inline void wl_tree_expect_child_ok(pid_t pid, const char* role) {
  int status = wl_tree_reap(pid, role);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    char buf[64];
    wl_fail("%s: child %s (pid %d) %s, want exited 0", wl_tree_role_, role, (int)pid,
            wl_tree_describe_status(status, buf, sizeof buf));
  }
}

// Fails unless this process has no child left to reap.
static inline void wl_tree_expect_no_children(void) {
  int status;
  pid_t r = waitpid(-1, &status, WNOHANG);
  if (r > 0) {
    char buf[64];
    wl_fail("%s: unexpected child %d (%s) left to reap", wl_tree_role_, (int)r,
            wl_tree_describe_status(status, buf, sizeof buf));
  }
  if (r == 0) wl_fail("%s: an unexpected child is still running", wl_tree_role_);
  if (errno != ECHILD) wl_fail("%s: waitpid(-1): %s", wl_tree_role_, wl_errstr());
}

// Closes every descriptor >= 3 except those in keep[0..n).
static inline void wl_tree_close_except(const int* keep, int n) {
  for (int fd = 3; fd < 1024; fd++) {
    int kept = 0;
    for (int i = 0; i < n; i++) kept |= keep[i] == fd;
    if (!kept) close(fd);
  }
}

// Writes all of buf (looping over short writes and EINTR; polling while a non-blocking fd is full).
static inline void wl_tree_write_all(int fd, const void* buf, size_t len, const char* what) {
  const char* p = buf;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      struct pollfd pfd = {fd, POLLOUT, 0};
      poll(&pfd, 1, 100);
      continue;
    }
    if (n <= 0) wl_fail("%s: write %s: %s", wl_tree_role_, what, n < 0 ? wl_errstr() : "wrote 0 bytes");
    p += n;
    len -= (size_t)n;
  }
}

// Reads until `len` bytes or EOF (looping over short reads and EINTR; polling while a non-blocking
// fd is empty). Returns the number of bytes read.
static inline size_t wl_tree_read_full(int fd, void* buf, size_t len, const char* what) {
  char* p = buf;
  size_t total = 0;
  while (total < len) {
    ssize_t n = read(fd, p + total, len - total);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      struct pollfd pfd = {fd, POLLIN, 0};
      poll(&pfd, 1, 100);
      continue;
    }
    if (n < 0) wl_fail("%s: read %s: %s", wl_tree_role_, what, wl_errstr());
    if (n == 0) break;
    total += (size_t)n;
  }
  return total;
}

// Reads exactly `len` bytes and then expects EOF.
static inline void wl_tree_read_to_eof(int fd, void* buf, size_t len, const char* what) {
  size_t got = wl_tree_read_full(fd, buf, len, what);
  if (got != len) wl_fail("%s: %s: EOF after %zu bytes, want %zu", wl_tree_role_, what, got, len);
  char extra;
  size_t more = wl_tree_read_full(fd, &extra, 1, what);
  if (more != 0) wl_fail("%s: %s: more than the %zu bytes expected before EOF", wl_tree_role_, what, len);
}

// The identity of a process as the kernel reports it to the process itself.
struct wl_tree_ids {
  pid_t pid, ppid, pgid, sid;
};

static inline struct wl_tree_ids wl_tree_own_ids(void) {
  struct wl_tree_ids ids = {getpid(), getppid(), getpgid(0), getsid(0)};
  return ids;
}

// Fails unless the process's ids are still `want` (after a restore: same pid, parent, group, session).
static inline void wl_tree_check_own_ids(const struct wl_tree_ids* want) {
  struct wl_tree_ids now = wl_tree_own_ids();
  if (now.pid != want->pid || now.ppid != want->ppid || now.pgid != want->pgid || now.sid != want->sid) {
    wl_fail("%s: ids changed: pid %d->%d ppid %d->%d pgid %d->%d sid %d->%d", wl_tree_role_, (int)want->pid,
            (int)now.pid, (int)want->ppid, (int)now.ppid, (int)want->pgid, (int)now.pgid, (int)want->sid, (int)now.sid);
  }
}

// State letter of `pid` in /proc/PID/stat, or 0 if it cannot be read; its parent in *ppid.
static inline char wl_tree_proc_state(pid_t pid, pid_t* ppid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  if (wl_read_file(path, buf, sizeof buf) < 0) return 0;
  char* paren = strrchr(buf, ')');
  if (paren == NULL || paren[1] == '\0') return 0;
  char state = 0;
  int parent = 0;
  if (sscanf(paren + 2, "%c %d", &state, &parent) != 2) return 0;
  if (ppid) *ppid = parent;
  return state;
}

// Waits (up to `timeout_ms`) until `pid` is a zombie: it has exited and waits to be reaped.
static inline int wl_tree_wait_zombie(pid_t pid, int timeout_ms) {
  for (int waited = 0; waited <= timeout_ms; waited += 2) {
    if (wl_tree_proc_state(pid, NULL) == 'Z') return 1;
    wl_sleep_ms(2);
  }
  return 0;
}
