// Private file mappings: a 1 MiB file in WORKDIR is mapped MAP_PRIVATE twice. The first mapping is
// written to on some pages (copy-on-write: those pages become anonymous copies that must be saved);
// the second is only read. After restore both must still be backed by the file (named in
// /proc/self/maps at the same offset), show the right content, and the private writes must not have
// reached the file. A read-only private mapping of part of the file at an offset is checked too.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wl_common.h"

#define kPage 4096ul
#define kFileSize (1ul << 20)
#define kPages (kFileSize / kPage)
#define kSeed 7000

static char g_maps[1 << 16];
static unsigned char g_expected[kFileSize];

// Fails unless the maps line holding `addr` names `path` with file offset `offset` (hex, as in maps)
// for the page at `addr`.
static void CheckBackedBy(const void* addr, const char* path, unsigned long offset, const char* what) {
  if (wl_read_file("/proc/self/maps", g_maps, sizeof g_maps) < 0) wl_fail("read maps: %s", wl_errstr());
  for (char* line = g_maps; *line;) {
    unsigned long start, end, off;
    char perms[8];
    int name_at = 0;
    char* next = strchr(line, '\n');
    if (next) *next = '\0';
    if (sscanf(line, "%lx-%lx %7s %lx %*s %*s %n", &start, &end, perms, &off, &name_at) == 4 &&
        start <= (unsigned long)addr && (unsigned long)addr < end) {
      unsigned long page_offset = off + ((unsigned long)addr - start);
      if (name_at == 0 || strcmp(line + name_at, path) != 0) {
        wl_fail("%s: mapping at %p is '%s', want backed by %s", what, addr, line, path);
      }
      if (page_offset != offset) wl_fail("%s: file offset %#lx, want %#lx", what, page_offset, offset);
      if (perms[3] != 'p') wl_fail("%s: mapping is not private: %s", what, perms);
      return;
    }
    if (!next) break;
    line = next + 1;
  }
  wl_fail("%s: no mapping holds %p", what, addr);
}

static void CheckFileUnchanged(int fd) {
  static unsigned char buf[kFileSize];
  ssize_t n = pread(fd, buf, kFileSize, 0);
  if (n != (ssize_t)kFileSize) wl_fail("pread file: %zd (%s)", n, wl_errstr());
  ptrdiff_t bad = wl_check_pattern(buf, kFileSize, kSeed);
  if (bad >= 0) wl_fail("private writes reached the file at offset %td", bad);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  char path[600];
  wl_path(path, sizeof path, "private.dat");
  wl_fill_pattern(g_expected, kFileSize, kSeed);
  int fd = WL_SYS(open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  WL_CHECK(write(fd, g_expected, kFileSize) == (ssize_t)kFileSize, "write private.dat");

  unsigned char* written = mmap(NULL, kFileSize, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  unsigned char* clean = mmap(NULL, kFileSize, PROT_READ, MAP_PRIVATE, fd, 0);
  unsigned char* tail = mmap(NULL, 64 * kPage, PROT_READ, MAP_PRIVATE, fd, 128 * kPage);
  WL_CHECK(written != MAP_FAILED && clean != MAP_FAILED && tail != MAP_FAILED, "mmap: %s", wl_errstr());
  // The mappings must hold the file on their own; the harness also sees no descriptor for it.
  WL_SYS(close(fd));

  // Copy-on-write on every 5th page, plus a partial write on the last page.
  for (size_t pg = 0; pg < kPages; pg += 5) {
    wl_fill_pattern(written + pg * kPage, kPage, 90000 + pg);
    wl_fill_pattern(g_expected + pg * kPage, kPage, 90000 + pg);
  }
  written[kFileSize - 1] ^= 0xff;
  g_expected[kFileSize - 1] ^= 0xff;
  // Read every page of the clean mapping so they are present (file pages, nothing to save).
  volatile unsigned char sink = 0;
  for (size_t pg = 0; pg < kPages; pg++) sink ^= clean[pg * kPage];
  (void)sink;

  wl_signal_ready();
  wl_wait_go();

  for (size_t pg = 0; pg < kPages; pg += 7) {
    CheckBackedBy(written + pg * kPage, path, pg * kPage, "written mapping");
    CheckBackedBy(clean + pg * kPage, path, pg * kPage, "clean mapping");
  }
  CheckBackedBy(tail, path, 128 * kPage, "mapping at offset");
  for (size_t i = 0; i < kFileSize; i += kPage) {
    if (memcmp(written + i, g_expected + i, kPage) != 0) wl_fail("written mapping: page %zu differs", i / kPage);
  }
  ptrdiff_t bad = wl_check_pattern(clean, kFileSize, kSeed);
  WL_CHECK(bad < 0, "clean mapping differs from the file at offset %td", bad);
  unsigned char file_page[64 * kPage];
  wl_fill_pattern(g_expected, kFileSize, kSeed);
  memcpy(file_page, g_expected + 128 * kPage, sizeof file_page);
  WL_CHECK(memcmp(tail, file_page, sizeof file_page) == 0, "mapping at offset differs from the file");

  fd = WL_SYS(open(path, O_RDONLY | O_CLOEXEC));
  CheckFileUnchanged(fd);
  // Still copy-on-write after restore.
  written[kPage + 1] ^= 0x55;
  CheckFileUnchanged(fd);
  close(fd);
  wl_pass();
}
