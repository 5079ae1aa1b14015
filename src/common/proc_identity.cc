#include "common/proc_identity.h"

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"

namespace cairn {

std::optional<uint64_t> ProcessStartTime(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  auto stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  if (!stat.ok()) return std::nullopt;
  size_t paren = stat->rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat->size()) return std::nullopt;
  // After "pid (comm) ": field 3 (state) is index 0, field 22 (starttime) index 19.
  std::vector<absl::string_view> f = absl::StrSplit(absl::string_view(*stat).substr(paren + 2), ' ');
  uint64_t start = 0;
  if (f.size() < 20 || f[0] == "Z" || f[0] == "X" || !absl::SimpleAtoi(f[19], &start)) return std::nullopt;
  return start;
}

bool SameProcess(pid_t pid, uint64_t start_time) {
  auto s = ProcessStartTime(pid);
  return s.has_value() && *s == start_time;
}

}  // namespace cairn
