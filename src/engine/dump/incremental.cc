#include "engine/dump/incremental.h"

#include <sys/random.h>

#include <filesystem>

#include "absl/strings/str_format.h"
#include "common/status.h"
#include "engine/image/chain.h"
#include "engine/proc/stat.h"

namespace cairn::dump {

absl::StatusOr<Parent> OpenParent(const std::string& dir, const std::string& parent) {
  std::filesystem::path p = std::filesystem::absolute(parent).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  std::string name = p.filename().string();
  RETURN_IF_ERROR(image::CheckParentName(name));
  std::error_code ec;
  if (!std::filesystem::equivalent(image::ParentPath(dir, name), p, ec) ||
      std::filesystem::absolute(image::ParentPath(dir, name)).lexically_normal() != p) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--parent ", parent, " must be in the same folder as the new checkpoint ", dir,
        " (a chain is kept in one folder so that it moves as a whole)"));
  }
  Parent out;
  out.name = name;
  ASSIGN_OR_RETURN(out.chain, image::OpenChain(p.string()));
  if (out.meta().id().empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--parent ", parent, " was written by a cairn without incremental checkpoints (it has no id); "
        "take a full checkpoint first"));
  }
  return out;
}

std::string NewImageId() {
  uint64_t r[2] = {0, 0};
  size_t got = 0;
  while (got < sizeof r) {
    ssize_t n = ::getrandom(reinterpret_cast<char*>(r) + got, sizeof r - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  return absl::StrFormat("%016x%016x", r[0], r[1]);
}

int ImagePid(pid_t pid, bool own_pid_ns) {
  if (!own_pid_ns) return pid;
  auto st = proc::ReadStatus(pid);
  if (!st.ok() || st->nspids.empty()) return pid;
  return st->nspids.back();
}

}  // namespace cairn::dump
