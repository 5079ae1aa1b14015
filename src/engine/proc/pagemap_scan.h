#pragma once
// The PAGEMAP_SCAN ioctl on /proc/PID/pagemap (Linux 6.7+), defined here because Debian
// 12's headers predate it: one walk lists the ranges of pages in given categories, and
// with PM_SCAN_WP_MATCHING write-protects them again in the same walk (userfaultfd WP
// async tracking).

#include <sys/ioctl.h>

#include <cstdint>

namespace cairn::proc {

struct PmScanArg {
  uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
  uint64_t category_inverted, category_mask, category_anyof_mask, return_mask;
};
struct PageRegion {
  uint64_t start, end, categories;
};

constexpr unsigned long kPagemapScan = _IOWR('f', 16, PmScanArg);
// flags
constexpr uint64_t kPmScanWpMatching = 1 << 0;
constexpr uint64_t kPmScanCheckWpAsync = 1 << 1;
// page categories
constexpr uint64_t kPageIsWritten = 1 << 1;
constexpr uint64_t kPageIsFile = 1 << 2;
constexpr uint64_t kPageIsPresent = 1 << 3;
constexpr uint64_t kPageIsSwapped = 1 << 4;
constexpr uint64_t kPageIsPfnZero = 1 << 5;
// A guard region page (madvise MADV_GUARD_INSTALL, Linux 6.13+; reported from 6.14): no
// page, a marker that makes any access fault. Older kernels refuse the bit (EINVAL).
constexpr uint64_t kPageIsGuard = 1 << 8;

// Whether PAGEMAP_SCAN knows kPageIsGuard here (asked once, on a page of our own).
bool PagemapKnowsGuards();

}  // namespace cairn::proc
