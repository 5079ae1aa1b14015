// Shared file mappings: a file in WORKDIR is mapped MAP_SHARED and written through the mapping before
// the checkpoint. After restore the mapping must still be the file's (not a private copy): what was
// written before is in the file, a write through the mapping shows up in pread(), and a pwrite() to
// the file shows up in the mapping.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "wl_common.h"

#define kPage 4096ul
#define kFileSize (256 * kPage)

static char g_maps[1 << 16];

static void CheckSharedMapping(const void* addr, const char* path) {
  if (wl_read_file("/proc/self/maps", g_maps, sizeof g_maps) < 0) wl_fail("read maps: %s", wl_errstr());
  for (char* line = g_maps; *line;) {
    unsigned long start, end;
    char perms[8];
    int name_at = 0;
    char* next = strchr(line, '\n');
    if (next) *next = '\0';
    if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %n", &start, &end, perms, &name_at) == 3 &&
        start == (unsigned long)addr) {
      if (name_at == 0 || strcmp(line + name_at, path) != 0) wl_fail("mapping is '%s', want %s", line, path);
      if (strcmp(perms, "rw-s") != 0) wl_fail("mapping permissions %s, want rw-s", perms);
      if (end - start != kFileSize) wl_fail("mapping size %lu, want %lu", end - start, kFileSize);
      return;
    }
    if (!next) break;
    line = next + 1;
  }
  wl_fail("no mapping starts at %p", addr);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  char path[600];
  wl_path(path, sizeof path, "shared.dat");
  int fd = WL_SYS(open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  WL_SYS(ftruncate(fd, kFileSize));
  unsigned char* map = mmap(NULL, kFileSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  WL_CHECK(map != MAP_FAILED, "mmap: %s", wl_errstr());
  WL_SYS(close(fd));  // the mapping alone keeps the file
  // Write half the pages through the mapping; leave the others as holes.
  for (size_t pg = 0; pg < kFileSize / kPage; pg += 2) wl_fill_pattern(map + pg * kPage, kPage, 500 + pg);
  wl_signal_ready();
  wl_wait_go();

  CheckSharedMapping(map, path);
  fd = WL_SYS(open(path, O_RDWR | O_CLOEXEC));
  static unsigned char buf[kFileSize];
  WL_CHECK(pread(fd, buf, kFileSize, 0) == (ssize_t)kFileSize, "pread: %s", wl_errstr());
  for (size_t pg = 0; pg < kFileSize / kPage; pg++) {
    unsigned char* page = buf + pg * kPage;
    if (pg % 2 == 0) {
      ptrdiff_t bad = wl_check_pattern(page, kPage, 500 + pg);
      WL_CHECK(bad < 0, "file page %zu (written through the map before the checkpoint) differs at %td", pg, bad);
    } else {
      for (size_t i = 0; i < kPage; i++) WL_CHECK(page[i] == 0, "file page %zu should be zero", pg);
    }
    WL_CHECK(memcmp(page, map + pg * kPage, kPage) == 0, "mapping and file disagree on page %zu", pg);
  }

  // Map -> file.
  static const char kViaMap[] = "written through the mapping after restore";
  memcpy(map + 3 * kPage + 10, kViaMap, sizeof kViaMap);
  char back[sizeof kViaMap];
  WL_CHECK(pread(fd, back, sizeof back, 3 * kPage + 10) == (ssize_t)sizeof back, "pread: %s", wl_errstr());
  WL_CHECK(memcmp(back, kViaMap, sizeof back) == 0, "a write through the mapping did not reach the file");
  // File -> map.
  static const char kViaFile[] = "written with pwrite after restore";
  WL_CHECK(pwrite(fd, kViaFile, sizeof kViaFile, 5 * kPage + 20) == (ssize_t)sizeof kViaFile, "pwrite: %s", wl_errstr());
  WL_CHECK(memcmp(map + 5 * kPage + 20, kViaFile, sizeof kViaFile) == 0, "a pwrite to the file is not seen in the mapping");
  WL_SYS(msync(map, kFileSize, MS_SYNC));
  close(fd);
  wl_pass();
}
