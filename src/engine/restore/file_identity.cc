#include "engine/restore/file_identity.h"

#include <linux/magic.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>

#include "absl/strings/str_format.h"
#include "engine/restore/files.h"

namespace cairn::restore {
namespace {

int64_t MtimeNs(const struct stat& st) { return st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec; }

std::string Dev(uint64_t dev) { return absl::StrFormat("%u:%u", major(dev), minor(dev)); }

}  // namespace

absl::Status CheckSameFile(const struct stat& st, const image::FileId& want, const std::string& what,
                           bool content_too) {
  if (ImageRootActive()) {
    if (static_cast<uint64_t>(st.st_size) == want.size() && MtimeNs(st) == want.mtime_ns()) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s is not the file the container's process had at checkpoint time: its size is %d (was %u) and its "
        "modification time %d ns (was %d); a container's files are matched by size and modification time, as its "
        "runtime makes its root file system again: restore it over the same image",
        what, st.st_size, want.size(), MtimeNs(st), want.mtime_ns()));
  }
  if (st.st_ino != want.ino()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s is not the file the process had at checkpoint time: its inode is %u here and was %u then (the file was "
        "replaced since, or this is another filesystem); restore needs the same file",
        what, st.st_ino, want.ino()));
  }
  bool same_content = static_cast<uint64_t>(st.st_size) == want.size() && MtimeNs(st) == want.mtime_ns();
  if (st.st_dev == want.dev() && (!content_too || same_content)) return absl::OkStatus();
  if (st.st_dev != want.dev() && same_content) return absl::OkStatus();  // the same file, mounted here
  if (st.st_dev == want.dev()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s was modified since the checkpoint (size %d, was %u; modification time %d ns, was %d): restore needs "
        "the file as it was",
        what, st.st_size, want.size(), MtimeNs(st), want.mtime_ns()));
  }
  return absl::FailedPreconditionError(absl::StrFormat(
      "%s has the same inode as at checkpoint time but on device %s (it was %s there: another machine or mount), "
      "and its size (%d, was %u) or modification time (%d ns, was %d) differs, so it cannot be told to be the same "
      "file: restore it where the file is as it was",
      what, Dev(st.st_dev), Dev(want.dev()), st.st_size, want.size(), MtimeNs(st), want.mtime_ns()));
}

bool KernelGeneratedFile(int fd) {
  struct statfs sf {};
  if (::fstatfs(fd, &sf) != 0) return false;
  switch (static_cast<unsigned long>(sf.f_type)) {
    case PROC_SUPER_MAGIC:
    case SYSFS_MAGIC:
    case CGROUP_SUPER_MAGIC:
    case CGROUP2_SUPER_MAGIC:
      return true;
    default:
      return false;
  }
}

}  // namespace cairn::restore
