// What a process does to its memory right after a lazy restore, while pages are still coming:
// it forks (the child must see every page), moves part of an area with mremap (the pages move
// with it), drops part with madvise(MADV_DONTNEED) (it must read as zero afterwards, not the
// saved data) and unmaps part (gone). Each 4 KiB page of a 128 MiB private area holds its own
// pattern; the checks run at once after go, before the page handler has copied most pages in.
#define _GNU_SOURCE
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "wl_common.h"

#define kPage 4096ul
#define kSize (128ul << 20)
#define kPages (kSize / kPage)

static void check_pages(const unsigned char* base, size_t first, size_t count, size_t seed_first, const char* what) {
  for (size_t i = 0; i < count; ++i) {
    ptrdiff_t bad = wl_check_pattern(base + i * kPage, kPage, seed_first + first + i);
    if (bad >= 0) wl_fail("%s: page %zu differs at byte %td", what, first + i, bad);
  }
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  unsigned char* p = mmap(NULL, kSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  WL_CHECK(p != MAP_FAILED, "mmap: %s", wl_errstr());
  for (size_t i = 0; i < kPages; ++i) wl_fill_pattern(p + i * kPage, kPage, 7000000 + i);
  wl_signal_ready();
  wl_wait_go();

  // Fork first: the child checks the last quarter, which nothing else touches before.
  pid_t child = WL_SYS(fork());
  if (child == 0) {
    for (size_t i = 3 * kPages / 4; i < kPages; ++i) {
      if (wl_check_pattern(p + i * kPage, kPage, 7000000 + i) >= 0) _exit(3);
    }
    _exit(0);
  }
  // Move pages [kPages/8, kPages/4) elsewhere; they must keep their content.
  size_t mv_first = kPages / 8, mv_count = kPages / 8;
  void* spot = mmap(NULL, mv_count * kPage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  WL_CHECK(spot != MAP_FAILED, "mmap: %s", wl_errstr());
  unsigned char* moved =
      mremap(p + mv_first * kPage, mv_count * kPage, mv_count * kPage, MREMAP_MAYMOVE | MREMAP_FIXED, spot);
  WL_CHECK(moved != MAP_FAILED, "mremap: %s", wl_errstr());
  // Drop pages [kPages/4, 3*kPages/8): they must read as zero now.
  size_t dn_first = kPages / 4, dn_count = kPages / 8;
  WL_SYS(madvise(p + dn_first * kPage, dn_count * kPage, MADV_DONTNEED));
  // Unmap pages [3*kPages/8, kPages/2).
  WL_SYS(munmap(p + 3 * kPages / 8 * kPage, kPages / 8 * kPage));

  check_pages(moved, mv_first, mv_count, 7000000, "moved by mremap");
  for (size_t i = 0; i < dn_count * kPage; ++i) {
    if (p[dn_first * kPage + i] != 0) wl_fail("dropped by MADV_DONTNEED: byte %zu is not zero", i);
  }
  check_pages(p, 0, kPages / 8, 7000000, "first eighth");
  check_pages(p + kPages / 2 * kPage, kPages / 2, kPages / 4, 7000000, "third quarter");
  int status = 0;
  WL_SYS(waitpid(child, &status, 0));
  WL_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "forked child saw wrong memory (status %#x)", status);
  wl_pass();
}
