#include "engine/restore/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "absl/strings/str_format.h"
#include "common/file_util.h"
#include "common/status.h"

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

// Opens one saved description (not a pipe) in the restorer.
absl::StatusOr<UniqueFd> OpenDescription(const image::ImageReader& img, const image::Fd& fd, pid_t pid,
                                         std::vector<std::string>* temp_paths) {
  std::string open_path = fd.path();
  if (fd.deleted()) {
    ASSIGN_OR_RETURN(std::string content, img.FileContent(fd));
    ASSIGN_OR_RETURN(open_path, RecreateDeleted(fd.path(), content, fd.mode()));
    temp_paths->push_back(open_path);
  }
  int flags = (fd.flags() & ~(O_CREAT | O_EXCL | O_TRUNC)) | O_NOCTTY | O_CLOEXEC;
  if (fd.kind() == image::Fd::DIRECTORY) flags |= O_DIRECTORY;
  UniqueFd f(::open(open_path.c_str(), flags));
  if (!f.valid()) return ErrnoStatus(absl::StrFormat("open %s (fd %d of pid %d)", open_path, fd.fd(), pid));
  if (fd.deleted()) {
    if (::unlink(open_path.c_str()) != 0) return ErrnoStatus("unlink " + open_path);
    temp_paths->pop_back();
  } else {
    struct stat st {};
    if (::fstat(f.get(), &st) != 0) return ErrnoStatus("stat " + open_path);
    bool same = fd.kind() == image::Fd::CHAR_DEVICE ? st.st_rdev == fd.rdev()
                                                     : st.st_dev == fd.file().dev() && st.st_ino == fd.file().ino();
    if (!same) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s (fd %d of pid %d) is not the file the process had open at checkpoint time: it was replaced since; "
          "restore needs the same file",
          fd.path(), fd.fd(), pid));
    }
  }
  if (fd.kind() == image::Fd::REGULAR && fd.pos() != 0 && ::lseek(f.get(), fd.pos(), SEEK_SET) != fd.pos()) {
    return ErrnoStatus(absl::StrFormat("lseek %s to %d", open_path, fd.pos()));
  }
  return f;
}

}  // namespace

absl::StatusOr<Masters> OpenMasters(const image::ImageReader& img, const std::vector<const image::Process*>& procs,
                                    std::vector<std::string>* temp_paths) {
  Masters m;
  for (const image::Process* p : procs) {
    for (const image::Fd& fd : p->fds()) m.base = std::max(m.base, fd.fd() + 1);
  }
  auto park = [&](UniqueFd f, pid_t pid, int fd) -> absl::Status {
    int n = ::fcntl(f.get(), F_DUPFD_CLOEXEC, m.base);
    if (n < 0) return ErrnoStatus(absl::StrFormat("fcntl(F_DUPFD) above %d for fd %d of pid %d", m.base, fd, pid));
    m.owned.emplace_back(n);
    m.fds[{pid, fd}] = n;
    return absl::OkStatus();
  };
  std::map<uint64_t, std::pair<int, int>> pipes;  // pipe_id -> restorer's (read, write) ends
  for (const image::Process* p : procs) {
    for (const image::Fd& fd : p->fds()) {
      if (fd.is_dup()) continue;
      if (fd.kind() != image::Fd::PIPE) {
        ASSIGN_OR_RETURN(UniqueFd f, OpenDescription(img, fd, p->pid(), temp_paths));
        RETURN_IF_ERROR(park(std::move(f), p->pid(), fd.fd()));
        continue;
      }
      auto it = pipes.find(fd.pipe_id());
      if (it == pipes.end()) {
        int ends[2];
        if (::pipe2(ends, O_CLOEXEC) != 0) return ErrnoStatus("pipe2");
        UniqueFd r(ends[0]), w(ends[1]);
        int rn = ::fcntl(r.get(), F_DUPFD_CLOEXEC, m.base);
        int wn = ::fcntl(w.get(), F_DUPFD_CLOEXEC, m.base);
        if (rn < 0 || wn < 0) return ErrnoStatus("fcntl(F_DUPFD) for a pipe");
        m.owned.emplace_back(rn);
        m.owned.emplace_back(wn);
        it = pipes.emplace(fd.pipe_id(), std::make_pair(rn, wn)).first;
      }
      int end = (fd.flags() & O_ACCMODE) == O_RDONLY ? it->second.first : it->second.second;
      if (fd.pipe_size() != 0 && ::fcntl(end, F_SETPIPE_SZ, fd.pipe_size()) < 0) {
        return ErrnoStatus(absl::StrFormat("F_SETPIPE_SZ %d on the pipe of fd %d of pid %d", fd.pipe_size(), fd.fd(),
                                           p->pid()));
      }
      if (fd.content_size() > 0) {
        ASSIGN_OR_RETURN(std::string content, img.FileContent(fd));
        RETURN_IF_ERROR(WriteAll(it->second.second, content, "the pipe of fd " + std::to_string(fd.fd())));
      }
      if (::fcntl(end, F_SETFL, fd.flags()) != 0) return ErrnoStatus("fcntl(F_SETFL) on a pipe");
      m.fds[{p->pid(), fd.fd()}] = end;
    }
  }
  return m;
}

absl::Status InstallFds(inject::Injector& inj, const image::Process& proc, const Masters& masters) {
  for (const image::Fd& fd : proc.fds()) {
    std::pair<pid_t, int> key = {proc.pid(), fd.fd()};
    if (fd.is_dup()) key = {fd.dup_of_pid() != 0 ? fd.dup_of_pid() : proc.pid(), fd.dup_of()};
    auto it = masters.fds.find(key);
    if (it == masters.fds.end()) {
      return absl::DataLossError(absl::StrFormat("fd %d of pid %d refers to fd %d of pid %d, which the checkpoint "
                                                 "does not hold (corrupt image)",
                                                 fd.fd(), proc.pid(), key.second, key.first));
    }
    RETURN_IF_ERROR(inj.Call(absl::StrCat("dup3 to fd ", fd.fd()), SYS_dup3, static_cast<uint64_t>(it->second),
                             static_cast<uint64_t>(fd.fd()), fd.cloexec() ? O_CLOEXEC : 0)
                        .status());
  }
  return inj.Call("close_range (masters)", SYS_close_range, static_cast<uint64_t>(masters.base), ~0U, 0).status();
}

}  // namespace cairn::restore
