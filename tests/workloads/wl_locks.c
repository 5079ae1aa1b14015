// File locks: an flock, an OFD lock and a POSIX record lock, each held across the
// checkpoint. After restore a child (another process, other open file descriptions)
// must find each one held; once the workload drops them, the child must get them.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include "wl_common.h"

static int open_in_workdir(const char* name) {
  char path[4096];
  wl_path(path, sizeof path, name);
  return WL_SYS(open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644));
}

// In a child: bit 0 set if the flock is free, bit 1 the OFD range, bit 2 the POSIX range.
static int probe_locks(void) {
  pid_t child = WL_SYS(fork());
  if (child == 0) {
    int free_mask = 0;
    int a = open_in_workdir("flock.dat");
    if (flock(a, LOCK_EX | LOCK_NB) == 0) free_mask |= 1;
    int b = open_in_workdir("ofd.dat");
    struct flock t = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 15, .l_len = 1};
    if (fcntl(b, F_OFD_SETLK, &t) == 0) free_mask |= 2;
    int c = open_in_workdir("posix.dat");
    struct flock u = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 100, .l_len = 1};
    if (fcntl(c, F_SETLK, &u) == 0) free_mask |= 4;
    _exit(free_mask);
  }
  int status = 0;
  WL_SYS(waitpid(child, &status, 0));
  WL_CHECK(WIFEXITED(status), "probe child died");
  return WEXITSTATUS(status);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  int a = open_in_workdir("flock.dat");
  int b = open_in_workdir("ofd.dat");
  int c = open_in_workdir("posix.dat");
  WL_SYS(flock(a, LOCK_EX));
  struct flock ofd = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 10, .l_len = 20};
  WL_SYS(fcntl(b, F_OFD_SETLK, &ofd));
  struct flock rec = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
  WL_SYS(fcntl(c, F_SETLK, &rec));
  WL_CHECK(probe_locks() == 0, "locks not held before the checkpoint");

  wl_signal_ready();
  wl_wait_go();

  int free_mask = probe_locks();
  WL_CHECK(!(free_mask & 1), "the flock was lost");
  WL_CHECK(!(free_mask & 2), "the OFD lock was lost");
  WL_CHECK(!(free_mask & 4), "the POSIX record lock was lost");
  // The restored locks are ours: a POSIX F_GETLK from us sees no conflict with our own lock,
  // and dropping each lock frees it for others.
  struct flock probe = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
  WL_SYS(fcntl(c, F_GETLK, &probe));
  WL_CHECK(probe.l_type == F_UNLCK, "our own POSIX lock shows as someone else's");
  WL_SYS(flock(a, LOCK_UN));
  ofd.l_type = F_UNLCK;
  WL_SYS(fcntl(b, F_OFD_SETLK, &ofd));
  rec.l_type = F_UNLCK;
  WL_SYS(fcntl(c, F_SETLK, &rec));
  WL_CHECK(probe_locks() == 7, "locks still held after unlocking (mask %d)", probe_locks());
  wl_pass();
}
