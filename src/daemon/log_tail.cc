#include "daemon/log_tail.h"

#include <unistd.h>

#include <algorithm>
#include <string>

namespace cairn::daemon {

off_t LogTailOffset(int fd, off_t size, int64_t lines, int64_t bytes, off_t max_back) {
  if (lines <= 0 && bytes <= 0) return size;
  off_t base = std::max<off_t>(0, size - max_back);
  std::string buf(static_cast<size_t>(size - base), '\0');
  ssize_t n = buf.empty() ? 0 : ::pread(fd, buf.data(), buf.size(), base);
  if (n < 0) return lines > 0 ? base : std::max<off_t>(base, size - static_cast<off_t>(bytes));
  buf.resize(static_cast<size_t>(n));
  if (lines <= 0) {
    // Bytes: back to the start of the line they begin in (a line longer than max_back is cut).
    off_t target = std::max<off_t>(base, size - static_cast<off_t>(bytes));
    size_t at = static_cast<size_t>(target - base);
    if (at == 0) return target;
    size_t nl = buf.rfind('\n', at - 1);
    if (nl != std::string::npos) return base + static_cast<off_t>(nl + 1);
    return base == 0 ? 0 : target;
  }
  // Lines: back over `lines` newlines (a last line without one counts as a line).
  size_t end = buf.size();
  if (end > 0 && buf[end - 1] == '\n') --end;
  for (int64_t seen = 0; end > 0; --end) {
    if (buf[end - 1] == '\n' && ++seen == lines) return base + static_cast<off_t>(end);
  }
  return base;
}

}  // namespace cairn::daemon
