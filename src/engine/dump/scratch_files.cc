#include "engine/dump/scratch_files.h"

#include "absl/strings/match.h"

namespace cairn::dump {

bool InScratchSpace(const std::string& path) {
  for (const char* dir : {"/tmp/", "/var/tmp/", "/dev/shm/"}) {
    if (absl::StartsWith(path, dir)) return true;
  }
  return false;
}

bool IsScratchFile(const std::string& path, const struct stat& st) {
  if (!S_ISREG(st.st_mode) || st.st_nlink == 0 || static_cast<uint64_t>(st.st_size) > kMaxScratchFile ||
      absl::EndsWith(path, " (deleted)")) {  // a name removed while another link keeps the file
    return false;
  }
  return InScratchSpace(path);
}

}  // namespace cairn::dump
