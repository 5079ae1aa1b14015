// Files the kernel generates as they are read, held open across the checkpoint: a sysctl
// (/proc/sys/kernel/hostname), a /proc file (/proc/meminfo, read part way) and a sysfs file
// (/sys/devices/system/cpu/online). Their inodes live in memory only: the kernel makes them anew
// after evicting them and on another mount (a container's new /proc), so a restore finds them by
// name. After restore each descriptor reads what it read before from offset 0, keeps its position
// and its descriptor flags.
#define _GNU_SOURCE
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "wl_common.h"

static char hostname_before[256], online_before[256];

static void read_at0(int fd, char* buf, size_t size, const char* what, const char* when) {
  ssize_t n = pread(fd, buf, size - 1, 0);
  WL_CHECK(n > 0, "%s: pread %s: %s", when, what, n < 0 ? wl_errstr() : "empty");
  buf[n] = '\0';
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  int host = WL_SYS(open("/proc/sys/kernel/hostname", O_RDONLY | O_CLOEXEC));
  int mem = WL_SYS(open("/proc/meminfo", O_RDONLY | O_CLOEXEC));
  int online = WL_SYS(open("/sys/devices/system/cpu/online", O_RDONLY));
  read_at0(host, hostname_before, sizeof hostname_before, "/proc/sys/kernel/hostname", "before the checkpoint");
  read_at0(online, online_before, sizeof online_before, "/sys/devices/system/cpu/online", "before the checkpoint");
  char line[16];
  WL_CHECK(read(mem, line, 9) == 9 && memcmp(line, "MemTotal:", 9) == 0, "before: /proc/meminfo starts otherwise");
  int flags_before = WL_SYS(fcntl(online, F_GETFD));

  wl_signal_ready();
  wl_wait_go();

  char buf[256];
  read_at0(host, buf, sizeof buf, "/proc/sys/kernel/hostname", "after restore");
  WL_CHECK(strcmp(buf, hostname_before) == 0, "after restore the hostname reads '%s', was '%s'", buf, hostname_before);
  read_at0(online, buf, sizeof buf, "/sys/devices/system/cpu/online", "after restore");
  WL_CHECK(strcmp(buf, online_before) == 0, "after restore cpu/online reads '%s', was '%s'", buf, online_before);
  long at = (long)lseek(mem, 0, SEEK_CUR);
  WL_CHECK(at == 9, "after restore /proc/meminfo is at offset %ld, was 9", at);
  WL_CHECK(WL_SYS(fcntl(online, F_GETFD)) == flags_before, "after restore cpu/online's descriptor flags differ");
  WL_CHECK((WL_SYS(fcntl(host, F_GETFD)) & FD_CLOEXEC) != 0, "after restore the hostname's descriptor lost FD_CLOEXEC");
  WL_CHECK(read(mem, line, 2) == 2, "after restore /proc/meminfo does not read on from its offset");
  wl_pass();
}
