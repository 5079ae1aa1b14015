#include "engine/restore/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>

#include "absl/strings/str_format.h"
#include "common/file_util.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace cairn::restore {
namespace {

// Creates a file holding `content` under a name near `path` that does not exist yet.
absl::StatusOr<std::string> RecreateDeleted(const std::string& path, const std::string& content, uint32_t mode) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  std::error_code ec;
  if (dir.empty() || !std::filesystem::is_directory(dir, ec)) dir = "/tmp";
  std::string base = std::filesystem::path(path).filename().string();
  std::random_device rd;
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string name = attempt == 0 && dir + "/" + base == path ? path
                                                                  : absl::StrFormat("%s/.%s.cairn-%08x", dir, base, rd());
    UniqueFd fd(::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode & 07777));
    if (!fd.valid()) {
      if (errno == EEXIST) continue;
      return ErrnoStatus("create " + name + " (to hold the content of deleted file " + path + ")");
    }
    RETURN_IF_ERROR(WriteAll(fd.get(), content, name));
    return name;
  }
  return absl::AlreadyExistsError("cannot find a free name to recreate deleted file " + path);
}

}  // namespace

absl::Status RestoreFds(inject::Injector& inj, inject::RemoteScratch& scratch, const image::ImageReader& img,
                        std::vector<std::string>* temp_paths) {
  pid_t pid = inj.tid();
  // Pipes are created once per pipe, parked above every saved descriptor number so the
  // dup3s into place never clobber them, and closed at the end.
  int max_fd = 0;
  for (const image::Fd& fd : img.meta().process().fds()) max_fd = std::max(max_fd, fd.fd());
  std::map<uint64_t, std::pair<long, long>> pipes;  // pipe_id -> parked (read, write) ends
  for (const image::Fd& fd : img.meta().process().fds()) {
    if (fd.kind() != image::Fd::PIPE || fd.is_dup()) continue;
    auto it = pipes.find(fd.pipe_id());
    if (it == pipes.end()) {
      RETURN_IF_ERROR(inj.Call("pipe2", SYS_pipe2, scratch.addr(), 0).status());
      int ends[2];
      RETURN_IF_ERROR(scratch.Get(0, ends, sizeof ends));
      long parked[2];
      for (int e = 0; e < 2; ++e) {
        ASSIGN_OR_RETURN(parked[e], inj.Call("fcntl(F_DUPFD_CLOEXEC)", SYS_fcntl, static_cast<uint64_t>(ends[e]),
                                             F_DUPFD_CLOEXEC, static_cast<uint64_t>(max_fd + 1)));
        RETURN_IF_ERROR(inj.Call("close", SYS_close, static_cast<uint64_t>(ends[e])).status());
      }
      it = pipes.emplace(fd.pipe_id(), std::make_pair(parked[0], parked[1])).first;
    }
    if (fd.pipe_size() != 0) {
      RETURN_IF_ERROR(inj.Call("fcntl(F_SETPIPE_SZ)", SYS_fcntl, static_cast<uint64_t>(it->second.first),
                               F_SETPIPE_SZ, fd.pipe_size()).status());
    }
    if (fd.content_size() > 0) {
      ASSIGN_OR_RETURN(std::string content, img.FileContent(fd));
      std::string w = absl::StrCat("/proc/", pid, "/fd/", it->second.second);
      UniqueFd wfd(::open(w.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC));
      if (!wfd.valid()) return ErrnoStatus("open " + w);
      RETURN_IF_ERROR(WriteAll(wfd.get(), content, "pipe of fd " + std::to_string(fd.fd())));
    }
  }
  for (const image::Fd& fd : img.meta().process().fds()) {
    if (fd.is_dup()) {
      // Its original is lower, hence already in place: the saved list is ascending.
      RETURN_IF_ERROR(inj.Call(absl::StrCat("dup3 fd ", fd.dup_of(), " to fd ", fd.fd()), SYS_dup3,
                               static_cast<uint64_t>(fd.dup_of()), static_cast<uint64_t>(fd.fd()),
                               fd.cloexec() ? O_CLOEXEC : 0).status());
      continue;
    }
    if (fd.kind() == image::Fd::PIPE) {
      const auto& ends = pipes.at(fd.pipe_id());
      long src = (fd.flags() & O_ACCMODE) == O_RDONLY ? ends.first : ends.second;
      RETURN_IF_ERROR(inj.Call(absl::StrCat("dup3 pipe to fd ", fd.fd()), SYS_dup3, static_cast<uint64_t>(src),
                               static_cast<uint64_t>(fd.fd()), fd.cloexec() ? O_CLOEXEC : 0).status());
      RETURN_IF_ERROR(inj.Call("fcntl(F_SETFL)", SYS_fcntl, static_cast<uint64_t>(fd.fd()), F_SETFL,
                               static_cast<uint64_t>(fd.flags())).status());
      continue;
    }
    std::string open_path = fd.path();
    if (fd.deleted()) {
      ASSIGN_OR_RETURN(std::string content, img.FileContent(fd));
      ASSIGN_OR_RETURN(open_path, RecreateDeleted(fd.path(), content, fd.mode()));
      temp_paths->push_back(open_path);
    }
    int flags = fd.flags() & ~(O_CREAT | O_EXCL | O_TRUNC | O_NOCTTY);
    if (fd.kind() == image::Fd::DIRECTORY) flags |= O_DIRECTORY;
    ASSIGN_OR_RETURN(uint64_t path_addr, scratch.PutString(0, open_path));
    ASSIGN_OR_RETURN(long rfd, inj.Call(absl::StrCat("open ", open_path, " for fd ", fd.fd()), SYS_openat,
                                        static_cast<uint64_t>(AT_FDCWD), path_addr, static_cast<uint64_t>(flags), 0));
    if (fd.deleted()) {
      if (::unlink(open_path.c_str()) != 0) return ErrnoStatus("unlink " + open_path);
      temp_paths->pop_back();
    } else {
      std::string link = absl::StrCat("/proc/", pid, "/fd/", rfd);
      struct stat st {};
      if (::stat(link.c_str(), &st) != 0) return ErrnoStatus("stat " + link);
      bool same = fd.kind() == image::Fd::CHAR_DEVICE
                      ? st.st_rdev == fd.rdev()
                      : st.st_dev == fd.file().dev() && st.st_ino == fd.file().ino();
      if (!same) {
        return absl::FailedPreconditionError(absl::StrCat(
            fd.path(), " (fd ", fd.fd(), ") is not the file the process had open at checkpoint time: it was "
            "replaced since; restore needs the same file"));
      }
    }
    if (fd.kind() == image::Fd::REGULAR && fd.pos() != 0) {
      RETURN_IF_ERROR(inj.Call(absl::StrCat("lseek fd ", fd.fd()), SYS_lseek, static_cast<uint64_t>(rfd),
                               static_cast<uint64_t>(fd.pos()), SEEK_SET).status());
    }
    if (rfd != fd.fd()) {
      RETURN_IF_ERROR(inj.Call(absl::StrCat("dup3 to fd ", fd.fd()), SYS_dup3, static_cast<uint64_t>(rfd),
                               static_cast<uint64_t>(fd.fd()), fd.cloexec() ? O_CLOEXEC : 0).status());
      RETURN_IF_ERROR(inj.Call("close", SYS_close, static_cast<uint64_t>(rfd)).status());
    } else if (fd.cloexec()) {
      RETURN_IF_ERROR(inj.Call("fcntl(F_SETFD)", SYS_fcntl, static_cast<uint64_t>(rfd), F_SETFD, FD_CLOEXEC).status());
    }
  }
  for (const auto& [id, ends] : pipes) {
    RETURN_IF_ERROR(inj.Call("close", SYS_close, static_cast<uint64_t>(ends.first)).status());
    RETURN_IF_ERROR(inj.Call("close", SYS_close, static_cast<uint64_t>(ends.second)).status());
  }
  return absl::OkStatus();
}

}  // namespace cairn::restore
