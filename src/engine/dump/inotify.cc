#include "engine/dump/inotify.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "engine/proc/mountinfo.h"
#include "engine/proc/pidfd.h"

namespace cairn::dump {
namespace {

// The path of the file an inotify watch names, checked to be that file.
absl::StatusOr<std::string> WatchedPath(pid_t pid, int fd, const proc::InotifyWatch& w) {
  auto where = [&] { return absl::StrFormat("inotify watch %d of pid %d fd %d", w.wd, pid, fd); };
  ASSIGN_OR_RETURN(std::string mount, proc::MountPointOf(pid, makedev(w.sdev >> 20, w.sdev & 0xfffff)));
  ASSIGN_OR_RETURN(UniqueFd file, proc::OpenFileHandle(absl::StrCat("/proc/", pid, "/root", mount), w.handle_type,
                                                       w.handle, O_PATH | O_CLOEXEC, "the file of " + where()));
  std::string link = absl::StrCat("/proc/self/fd/", file.get());
  char target[4096];
  ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
  if (n <= 0) return ErrnoStatus("readlink " + link + " (the file of " + where() + ")");
  std::string path(target, static_cast<size_t>(n));
  struct stat st {};
  if (::fstat(file.get(), &st) != 0) return ErrnoStatus("stat the file of " + where());
  if (st.st_ino != w.ino || st.st_nlink == 0 || absl::EndsWith(path, " (deleted)") || path.empty() || path[0] != '/') {
    return absl::UnimplementedError(absl::StrFormat(
        "pid %d fd %d is an inotify instance watching %s (watch %d), a file that was deleted or cannot be named; "
        "remove the watch (inotify_rm_watch) before checkpointing",
        pid, fd, path, w.wd));
  }
  return path;
}

}  // namespace

absl::Status CaptureInotify(pid_t pid, const proc::FdInfo& info, bool capture, image::Fd* fd) {
  ASSIGN_OR_RETURN(std::vector<proc::InotifyWatch> watches, proc::ParseInotifyWatches(info));
  for (const proc::InotifyWatch& w : watches) {
    ASSIGN_OR_RETURN(std::string path, WatchedPath(pid, info.fd, w));
    image::InotifyWatch* out = fd->add_inotify();
    out->set_wd(w.wd);
    out->set_mask(w.mask);
    out->set_path(path);
    out->mutable_file()->set_ino(w.ino);
    out->mutable_file()->set_dev(makedev(w.sdev >> 20, w.sdev & 0xfffff));
  }
  if (!capture) return absl::OkStatus();
  ASSIGN_OR_RETURN(UniqueFd copy, proc::CopyFd(pid, info.fd));
  int queued = 0;
  if (::ioctl(copy.get(), FIONREAD, &queued) == 0 && queued > 0) {
    CAIRN_LOG_WARN("event=inotify_events_dropped pid={} fd={} bytes={} reason=\"events not read yet are not saved\"",
                   pid, info.fd, queued);
  }
  return absl::OkStatus();
}

}  // namespace cairn::dump
