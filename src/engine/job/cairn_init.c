// cairn-init: PID 1 of a job's PID namespace (`cairn run`, cairnd's jobs). A small static
// program, so that the init every checkpoint of a job saves and every restore rebuilds is a
// handful of memory areas, not the cairn binary with its libraries and heap.
//
//   cairn-init GO_FD OUT_FD ERR_FD [-u UID:GID[:GROUP,GROUP...]] [-C DIR] [-E FD] -- COMMAND [ARGS...]
//
// Waits for one byte on GO_FD (its parent has put it in the job's cgroup), gives itself a mount
// namespace with a /proc of its PID namespace, with -u becomes that user (groups, gid, uid: the
// job's owner, so that nothing of the job runs as root), with -C enters DIR as that user (a
// directory root may not enter, on a root-squashed NFS, is the user's to enter), with -E gives
// COMMAND the environment read from FD (KEY=VALUE entries each ended by a NUL byte) instead of its
// own (cairn-init itself, root until -u, never runs with a user's variables), starts COMMAND in a new session with stdin
// /dev/null and stdout/stderr on OUT_FD/ERR_FD, forwards SIGTERM, SIGINT, SIGHUP, SIGUSR1 and
// SIGUSR2 to it, reaps every orphan of the namespace, and exits with COMMAND's status (128 +
// signal when a signal ended it). Exit 125: it could not set the job up; 127: COMMAND could not
// be run. src/engine/job/job.cc starts it (and has the same init built in, for a cairn without
// this file beside it).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;
static pid_t g_command;

static void Forward(int sig) {
  if (g_command > 0) kill(g_command, sig);
}

static int Fd(const char* s) {
  char* end = NULL;
  long v = strtol(s, &end, 10);
  return *s != '\0' && *end == '\0' && v >= 0 && v < 1 << 20 ? (int)v : -1;
}

// Becomes the user "UID:GID[:G1,G2,...]" for good. 0 on success.
static int BecomeUser(const char* spec) {
  char* end = NULL;
  unsigned long uid = strtoul(spec, &end, 10);
  if (end == spec || *end != ':') return -1;
  const char* p = end + 1;
  unsigned long gid = strtoul(p, &end, 10);
  if (end == p || (*end != ':' && *end != '\0')) return -1;
  gid_t groups[256];
  size_t n = 0;
  if (*end == ':' && end[1] != '\0') {
    for (p = end + 1;; p = end + 1) {
      if (n == sizeof groups / sizeof groups[0]) return -1;
      groups[n++] = (gid_t)strtoul(p, &end, 10);
      if (end == p || (*end != ',' && *end != '\0')) return -1;
      if (*end == '\0') break;
    }
  }
  if (setgroups(n, groups) != 0 || setresgid(gid, gid, gid) != 0 || setresuid(uid, uid, uid) != 0) return -1;
  // Changing uid made it undumpable (its /proc files root's); a process of the user is dumpable.
  prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
  return 0;
}

// The NUL-separated KEY=VALUE entries of `fd`, as an environ array (malloc'd, kept for the exec).
static char** ReadEnvironment(int fd) {
  size_t size = 0, cap = 1 << 16;
  char* buf = malloc(cap);
  for (;;) {
    if (buf == NULL) return NULL;
    if (size == cap) buf = realloc(buf, cap *= 2);
    if (buf == NULL) return NULL;
    ssize_t n = read(fd, buf + size, cap - size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return NULL;
    if (n == 0) break;
    size += (size_t)n;
  }
  close(fd);
  size_t count = 0;
  for (size_t i = 0; i < size; ++i) count += buf[i] == '\0';
  char** env = calloc(count + 1, sizeof *env);
  if (env == NULL) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < size && k < count; ++k) {
    env[k] = buf + i;
    i += strlen(buf + i) + 1;
  }
  return env;
}

int main(int argc, char** argv) {
  int go_fd = argc > 5 ? Fd(argv[1]) : -1, out_fd = argc > 5 ? Fd(argv[2]) : -1, err_fd = argc > 5 ? Fd(argv[3]) : -1;
  const char* user = NULL;
  const char* workdir = NULL;
  int env_fd = -1;
  int dashes = 4;
  for (; dashes + 1 < argc && argv[dashes][0] == '-' && argv[dashes][1] != '\0' && argv[dashes][1] != '-' &&
         argv[dashes][2] == '\0';
       dashes += 2) {
    if (argv[dashes][1] == 'u') user = argv[dashes + 1];
    else if (argv[dashes][1] == 'C') workdir = argv[dashes + 1];
    else if (argv[dashes][1] == 'E') env_fd = Fd(argv[dashes + 1]);
    else break;
  }
  if (go_fd < 0 || out_fd < 0 || err_fd < 0 || argc <= dashes + 1 || strcmp(argv[dashes], "--") != 0) {
    fprintf(stderr, "cairn-init: started by cairn run only (cairn-init GO_FD OUT_FD ERR_FD [-u UID:GID:GROUPS] [-C DIR] -- COMMAND...)\n");
    return 125;
  }
  char** command = argv + dashes + 1;
  char** job_env = NULL;
  if (env_fd >= 0 && (job_env = ReadEnvironment(env_fd)) == NULL) {
    dprintf(err_fd, "cairn-init: cannot read the job's environment: %s\n", strerror(errno));
    return 125;
  }
  prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0);
  char go = 0;
  if (read(go_fd, &go, 1) != 1) _exit(125);  // the parent failed to set us up
  close(go_fd);
  if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
      mount("proc", "/proc", "proc", 0, NULL) != 0) {
    dprintf(err_fd, "cairn-init: cannot set up the mount namespace: %s\n", strerror(errno));
    _exit(125);
  }
  if (user != NULL && BecomeUser(user) != 0) {
    dprintf(err_fd, "cairn-init: cannot become user %s: %s\n", user, strerror(errno));
    _exit(125);
  }
  if (workdir != NULL && chdir(workdir) != 0) {
    dprintf(err_fd, "cairn-init: cannot enter the working directory %s: %s\n", workdir, strerror(errno));
    _exit(125);
  }
  pid_t cmd = fork();
  if (cmd == 0) {
    setsid();
    int null_fd = open("/dev/null", O_RDONLY);
    dup2(null_fd, 0);
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    syscall(SYS_close_range, 3, ~0U, 0);
    if (job_env != NULL) environ = job_env;
    execvp(command[0], command);
    dprintf(2, "cairn-init: cannot run %s: %s\n", command[0], strerror(errno));
    _exit(127);
  }
  syscall(SYS_close_range, 0, ~0U, 0);
  if (cmd < 0) _exit(125);
  g_command = cmd;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = Forward;
  sa.sa_flags = SA_RESTART;
  const int forwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2};
  for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; ++i) sigaction(forwarded[i], &sa, NULL);
  for (;;) {
    int status = 0;
    pid_t r = waitpid(-1, &status, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      _exit(125);
    }
    if (r == cmd) _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
}
