#include "engine/dump/files.h"

#include <fcntl.h>
#include <sys/stat.h>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "engine/proc/fds.h"

namespace cairn::dump {
namespace {

absl::string_view KindOf(absl::string_view target) {
  if (absl::StartsWith(target, "pipe:")) return "a pipe";
  if (absl::StartsWith(target, "socket:")) return "a socket";
  if (absl::StartsWith(target, "anon_inode:")) return "a kernel object";
  return "an unsupported file";
}

}  // namespace

absl::Status CaptureFds(pid_t pid, image::ImageWriter* writer, image::Process* out) {
  ASSIGN_OR_RETURN(std::vector<proc::FdInfo> fds, proc::ReadFds(pid));
  for (const proc::FdInfo& info : fds) {
    auto unsupported = [&](absl::string_view kind) {
      return absl::UnimplementedError(absl::StrFormat(
          "pid %d fd %d is %s (%s); single-process checkpoints support regular files, directories and "
          "character devices only — close it or redirect it to a file before checkpointing",
          pid, info.fd, kind, info.target));
    };
    if (info.target.empty() || info.target[0] != '/') return unsupported(KindOf(info.target));
    std::string link = absl::StrCat("/proc/", pid, "/fd/", info.fd);
    struct stat st {};
    if (::stat(link.c_str(), &st) != 0) return ErrnoStatus("stat " + link + " (" + info.target + ")");
    image::Fd fd;
    fd.set_fd(info.fd);
    fd.set_cloexec((info.flags & O_CLOEXEC) != 0);
    fd.set_flags(info.flags & ~O_CLOEXEC);
    fd.set_pos(info.pos);
    fd.set_mode(st.st_mode);
    fd.mutable_file()->set_dev(st.st_dev);
    fd.mutable_file()->set_ino(st.st_ino);
    fd.mutable_file()->set_size(static_cast<uint64_t>(st.st_size));
    fd.mutable_file()->set_mtime_ns(st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec);
    std::string path = info.target;
    if (S_ISREG(st.st_mode)) {
      fd.set_kind(image::Fd::REGULAR);
      if (st.st_nlink == 0) {
        fd.set_deleted(true);
        if (absl::EndsWith(path, " (deleted)")) path.resize(path.size() - 10);
        if (writer != nullptr) {
          UniqueFd src(::open(link.c_str(), O_RDONLY | O_CLOEXEC));
          if (!src.valid()) return ErrnoStatus("open deleted file " + link + " (" + path + ")");
          ASSIGN_OR_RETURN(auto blob, writer->AppendFileContent(src.get(), static_cast<uint64_t>(st.st_size),
                                                                info.target));
          fd.set_content_offset(blob.offset);
          fd.set_content_size(blob.size);
          fd.set_content_xxh3(blob.xxh3);
        }
      }
    } else if (S_ISCHR(st.st_mode)) {
      fd.set_kind(image::Fd::CHAR_DEVICE);
      fd.set_rdev(st.st_rdev);
    } else if (S_ISDIR(st.st_mode)) {
      fd.set_kind(image::Fd::DIRECTORY);
    } else {
      return unsupported(S_ISFIFO(st.st_mode) ? "a FIFO" : "a special file");
    }
    if (absl::EndsWith(path, " (deleted)") && !fd.deleted()) {
      return unsupported("a file whose name was removed but which still has other links");
    }
    fd.set_path(path);
    if (out != nullptr) *out->add_fds() = std::move(fd);
  }
  return absl::OkStatus();
}

absl::Status CheckFdsSupported(pid_t pid) { return CaptureFds(pid, nullptr, nullptr); }

}  // namespace cairn::dump
