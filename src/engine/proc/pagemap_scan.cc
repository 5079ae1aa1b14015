#include "engine/proc/pagemap_scan.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

namespace cairn::proc {

bool PagemapKnowsGuards() {
  static const bool known = [] {
    int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    static char page[4096] __attribute__((aligned(4096)));
    PageRegion region{};
    PmScanArg arg{};
    arg.size = sizeof arg;
    arg.start = reinterpret_cast<uint64_t>(page);
    arg.end = arg.start + sizeof page;
    arg.vec = reinterpret_cast<uint64_t>(&region);
    arg.vec_len = 1;
    arg.category_anyof_mask = kPageIsGuard;
    arg.return_mask = kPageIsGuard;
    bool ok = ::ioctl(fd, kPagemapScan, &arg) >= 0;
    ::close(fd);
    return ok;
  }();
  return known;
}

}  // namespace cairn::proc
