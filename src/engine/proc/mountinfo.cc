#include "engine/proc/mountinfo.h"

#include <sys/sysmacros.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "common/status.h"

namespace cairn::proc {

absl::StatusOr<std::string> MountPointOf(pid_t pid, dev_t dev) {
  std::string path = absl::StrCat("/proc/", pid, "/mountinfo");
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  std::string want = absl::StrCat(major(dev), ":", minor(dev));
  std::string found;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    // "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw"
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
    if (f.size() < 5 || f[2] != want) continue;
    if (f[3] == "/") return std::string(f[4]);
    if (found.empty()) found = std::string(f[4]);
  }
  if (found.empty()) return absl::NotFoundError(absl::StrFormat("no mount of device %s in %s", want, path));
  return found;
}

}  // namespace cairn::proc
