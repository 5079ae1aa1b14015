// signalfd: SIGUSR1, SIGUSR2 and SIGRTMIN+3 are blocked. `rt` (non-blocking, close-on-exec) reads
// SIGUSR1 and SIGRTMIN+3; `usr2` (blocking) reads SIGUSR2 only. SIGUSR1 is sent before the checkpoint
// and left pending. After restore: the flags and the masks (fdinfo "sigmask") are unchanged; `rt`
// reads the pending SIGUSR1, then a SIGRTMIN+3 queued after restore with its value, then nothing;
// `usr2` reads a SIGUSR2 sent after restore and never sees the others.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "wl_common.h"

struct Sfd {
  const char* name;
  int fd;
  int fd_flags, fl_flags;
  char mask[64];  // fdinfo "sigmask" value
};

static void ReadMask(int fd, char* out, size_t size) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
  WL_CHECK(wl_read_file(path, buf, sizeof buf) >= 0, "read %s: %s", path, wl_errstr());
  char* p = strstr(buf, "sigmask:");
  WL_CHECK(p != NULL, "%s has no sigmask", path);
  p += strlen("sigmask:");
  while (*p == ' ' || *p == '\t') p++;
  size_t n = strcspn(p, "\n");
  WL_CHECK(n < size, "sigmask too long");
  memcpy(out, p, n);
  out[n] = 0;
}

static void Record(struct Sfd* s) {
  s->fd_flags = WL_SYS(fcntl(s->fd, F_GETFD));
  s->fl_flags = WL_SYS(fcntl(s->fd, F_GETFL));
  ReadMask(s->fd, s->mask, sizeof s->mask);
}

static void Check(const struct Sfd* s) {
  int fd_flags = fcntl(s->fd, F_GETFD);
  WL_CHECK(fd_flags == s->fd_flags, "%s (fd %d): F_GETFD %#x became %#x", s->name, s->fd, s->fd_flags, fd_flags);
  int fl_flags = fcntl(s->fd, F_GETFL);
  WL_CHECK(fl_flags == s->fl_flags, "%s (fd %d): F_GETFL %#o became %#o", s->name, s->fd, s->fl_flags, fl_flags);
  char mask[64];
  ReadMask(s->fd, mask, sizeof mask);
  WL_CHECK(strcmp(mask, s->mask) == 0, "%s (fd %d): sigmask %s became %s", s->name, s->fd, s->mask, mask);
}

static struct signalfd_siginfo ReadOne(const struct Sfd* s) {
  struct pollfd p = {s->fd, POLLIN, 0};
  WL_CHECK(poll(&p, 1, 5000) == 1, "%s (fd %d): no signal to read within 5 s", s->name, s->fd);
  struct signalfd_siginfo si;
  ssize_t n = read(s->fd, &si, sizeof si);
  WL_CHECK(n == sizeof si, "%s (fd %d): read: %s", s->name, s->fd, n < 0 ? wl_errstr() : "short read");
  return si;
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  sigset_t blocked;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGUSR1);
  sigaddset(&blocked, SIGUSR2);
  sigaddset(&blocked, SIGRTMIN + 3);
  WL_SYS(sigprocmask(SIG_BLOCK, &blocked, NULL));

  sigset_t m;
  sigemptyset(&m);
  sigaddset(&m, SIGUSR1);
  sigaddset(&m, SIGRTMIN + 3);
  struct Sfd rt = {"rt", WL_SYS(signalfd(-1, &m, SFD_NONBLOCK | SFD_CLOEXEC)), 0, 0, ""};
  sigemptyset(&m);
  sigaddset(&m, SIGUSR2);
  struct Sfd usr2 = {"usr2", WL_SYS(signalfd(-1, &m, 0)), 0, 0, ""};
  Record(&rt);
  Record(&usr2);
  WL_SYS(kill(getpid(), SIGUSR1));

  wl_signal_ready();
  wl_wait_go();

  Check(&rt);
  Check(&usr2);
  struct signalfd_siginfo si = ReadOne(&rt);
  WL_CHECK(si.ssi_signo == (uint32_t)SIGUSR1, "rt: first signal read is %u, want the pending SIGUSR1 (%d)",
           si.ssi_signo, SIGUSR1);
  union sigval value = {.sival_int = 4242};
  WL_SYS(sigqueue(getpid(), SIGRTMIN + 3, value));
  WL_SYS(kill(getpid(), SIGUSR2));
  si = ReadOne(&rt);
  WL_CHECK(si.ssi_signo == (uint32_t)(SIGRTMIN + 3), "rt: read signal %u, want SIGRTMIN+3 (%d)", si.ssi_signo,
           SIGRTMIN + 3);
  WL_CHECK(si.ssi_int == 4242 && si.ssi_code == SI_QUEUE, "rt: SIGRTMIN+3 came with value %d code %d, want 4242 %d",
           si.ssi_int, si.ssi_code, SI_QUEUE);
  struct signalfd_siginfo extra;
  errno = 0;
  WL_CHECK(read(rt.fd, &extra, sizeof extra) == -1 && errno == EAGAIN,
           "rt: a third signal was readable (signo %u): its mask grew", extra.ssi_signo);
  si = ReadOne(&usr2);
  WL_CHECK(si.ssi_signo == (uint32_t)SIGUSR2, "usr2: read signal %u, want SIGUSR2 (%d)", si.ssi_signo, SIGUSR2);
  WL_CHECK(si.ssi_pid == (uint32_t)getpid(), "usr2: SIGUSR2 from pid %u, want %d", si.ssi_pid, (int)getpid());
  struct pollfd p = {usr2.fd, POLLIN, 0};
  WL_CHECK(poll(&p, 1, 0) == 0, "usr2: another signal is readable");
  wl_pass();
}
