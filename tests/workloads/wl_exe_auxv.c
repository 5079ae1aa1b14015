// Executable, arguments, environment and auxiliary vector: what the kernel keeps about the program
// (mm->exe_file, arg_start..arg_end, env_start..env_end, saved_auxv) must be the same after restore:
// /proc/self/exe, /proc/self/cmdline, /proc/self/environ and /proc/self/auxv byte for byte, the
// arg/env bounds in /proc/self/stat, and getauxval() values including the 16 AT_RANDOM bytes.
#define _GNU_SOURCE
#include <elf.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "wl_common.h"

struct Snapshot {
  char exe[PATH_MAX];
  char cmdline[8192];
  ssize_t cmdline_len;
  char environ_data[65536];
  ssize_t environ_len;
  char auxv[4096];
  ssize_t auxv_len;
  unsigned long stat_bounds[4];  // fields 48-51: arg_start arg_end env_start env_end
  unsigned long aux[8];
  unsigned char random_bytes[16];
  char execfn[PATH_MAX];
};

static struct Snapshot g_before, g_after;
static char g_stat[4096];

static const unsigned long kAuxTypes[] = {AT_PAGESZ, AT_RANDOM, AT_SYSINFO_EHDR, AT_PHDR,
                                          AT_ENTRY,  AT_HWCAP,  AT_EXECFN,       AT_CLKTCK};

static ssize_t ReadBinary(const char* path, char* buf, size_t size) {
  ssize_t n = wl_read_file(path, buf, size);
  if (n < 0) wl_fail("read %s: %s", path, wl_errstr());
  if ((size_t)n + 1 >= size) wl_fail("%s larger than expected", path);
  return n;
}

static void Take(struct Snapshot* s) {
  ssize_t n = readlink("/proc/self/exe", s->exe, sizeof s->exe - 1);
  if (n < 0) wl_fail("readlink /proc/self/exe: %s", wl_errstr());
  s->exe[n] = '\0';
  s->cmdline_len = ReadBinary("/proc/self/cmdline", s->cmdline, sizeof s->cmdline);
  s->environ_len = ReadBinary("/proc/self/environ", s->environ_data, sizeof s->environ_data);
  s->auxv_len = ReadBinary("/proc/self/auxv", s->auxv, sizeof s->auxv);
  if (wl_read_file("/proc/self/stat", g_stat, sizeof g_stat) < 0) wl_fail("read stat: %s", wl_errstr());
  char* p = strrchr(g_stat, ')') + 2;  // field 3
  for (int field = 3; field < 48; field++) p = strchr(p, ' ') + 1;
  for (int i = 0; i < 4; i++) s->stat_bounds[i] = strtoul(p, &p, 10);
  for (size_t i = 0; i < sizeof kAuxTypes / sizeof kAuxTypes[0]; i++) s->aux[i] = getauxval(kAuxTypes[i]);
  memcpy(s->random_bytes, (const void*)getauxval(AT_RANDOM), 16);
  snprintf(s->execfn, sizeof s->execfn, "%s", (const char*)getauxval(AT_EXECFN));
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  Take(&g_before);
  WL_CHECK(g_before.aux[0] == (unsigned long)sysconf(_SC_PAGESIZE), "AT_PAGESZ disagrees with sysconf");
  WL_CHECK(g_before.cmdline_len > 0 && g_before.environ_len >= 0, "empty cmdline");
  WL_CHECK(strcmp(g_before.cmdline, argv[0]) == 0, "cmdline does not start with argv[0]");
  const char* path_env = getenv("PATH");

  wl_signal_ready();
  wl_wait_go();

  Take(&g_after);
  struct Snapshot* b = &g_before;
  struct Snapshot* a = &g_after;
  WL_CHECK(strcmp(b->exe, a->exe) == 0, "/proc/self/exe %s became %s", b->exe, a->exe);
  WL_CHECK(b->cmdline_len == a->cmdline_len && memcmp(b->cmdline, a->cmdline, (size_t)b->cmdline_len) == 0,
           "/proc/self/cmdline changed (%zd -> %zd bytes)", b->cmdline_len, a->cmdline_len);
  WL_CHECK(b->environ_len == a->environ_len && memcmp(b->environ_data, a->environ_data, (size_t)b->environ_len) == 0,
           "/proc/self/environ changed (%zd -> %zd bytes)", b->environ_len, a->environ_len);
  WL_CHECK(b->auxv_len == a->auxv_len && memcmp(b->auxv, a->auxv, (size_t)b->auxv_len) == 0,
           "/proc/self/auxv changed (%zd -> %zd bytes)", b->auxv_len, a->auxv_len);
  for (int i = 0; i < 4; i++) {
    WL_CHECK(b->stat_bounds[i] == a->stat_bounds[i], "/proc/self/stat field %d: %#lx became %#lx", 48 + i,
             b->stat_bounds[i], a->stat_bounds[i]);
  }
  for (size_t i = 0; i < sizeof kAuxTypes / sizeof kAuxTypes[0]; i++) {
    WL_CHECK(b->aux[i] == a->aux[i], "getauxval(%lu): %#lx became %#lx", kAuxTypes[i], b->aux[i], a->aux[i]);
  }
  WL_CHECK(memcmp(b->random_bytes, a->random_bytes, 16) == 0, "AT_RANDOM bytes changed");
  WL_CHECK(strcmp(b->execfn, a->execfn) == 0, "AT_EXECFN %s became %s", b->execfn, a->execfn);
  // The memory argv and environ point into is what the kernel reports.
  WL_CHECK((unsigned long)argv[0] == a->stat_bounds[0], "argv[0] is not at arg_start");
  WL_CHECK(getenv("PATH") == path_env, "environment moved");
  wl_pass();
}
