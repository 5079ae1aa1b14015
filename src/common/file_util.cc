#include "common/file_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include "common/status.h"
#include "common/unique_fd.h"

namespace cairn {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus("open " + path);
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("read " + path);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

absl::Status WriteAll(int fd, absl::string_view data, absl::string_view what) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(absl::StrCat("write ", what));
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status PreadAll(int fd, void* buf, size_t len, off_t offset, absl::string_view what) {
  auto* p = static_cast<char*>(buf);
  while (len > 0) {
    ssize_t n = ::pread(fd, p, len, offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(absl::StrCat("read ", what));
    }
    if (n == 0) {
      return absl::DataLossError(absl::StrCat(what, ": file is truncated at offset ", offset));
    }
    p += n;
    len -= static_cast<size_t>(n);
    offset += n;
  }
  return absl::OkStatus();
}

absl::Status SyncDir(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus("open directory " + path);
  if (::fsync(fd.get()) != 0) return ErrnoStatus("fsync " + path);
  return absl::OkStatus();
}

absl::Status WriteFileSynced(const std::string& path, absl::string_view data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus("create " + path);
  absl::Status st = WriteAll(fd, data, path);
  if (st.ok() && ::fsync(fd) != 0) st = ErrnoStatus("fsync " + path);
  ::close(fd);
  return st;
}

absl::Status ChmodNoFollow(const std::string& path, mode_t mode) {
  // O_NONBLOCK: a FIFO put there does not block the open; O_NOFOLLOW: a symlink fails with ELOOP.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ELOOP) return absl::FailedPreconditionError(absl::StrCat(path, " is a symlink: its mode is not set"));
    return ErrnoStatus("open " + path);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus("stat " + path);
  if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is neither a file nor a directory: its mode is not set"));
  }
  if ((st.st_mode & 07777) == mode) return absl::OkStatus();
  if (::fchmod(fd.get(), mode) != 0) return ErrnoStatus(absl::StrFormat("chmod %o %s", mode, path));
  return absl::OkStatus();
}


std::vector<std::pair<unsigned, unsigned>> RangesAround(std::vector<int> keep, unsigned from) {
  std::sort(keep.begin(), keep.end());
  std::vector<std::pair<unsigned, unsigned>> out;
  for (int k : keep) {
    if (k < 0) continue;
    if (static_cast<unsigned>(k) > from) out.emplace_back(from, static_cast<unsigned>(k) - 1);
    from = std::max(from, static_cast<unsigned>(k) + 1);
  }
  out.emplace_back(from, ~0U);
  return out;
}

void CloseAllDescriptorsBut(std::vector<int> keep) {
  for (const auto& [first, last] : RangesAround(std::move(keep), 3)) ::syscall(SYS_close_range, first, last, 0);
}

absl::StatusOr<int> MemoryFileWith(const char* name, absl::string_view data) {
  UniqueFd fd(static_cast<int>(::syscall(SYS_memfd_create, name, MFD_CLOEXEC)));
  if (!fd.valid()) return ErrnoStatus(absl::StrFormat("memfd_create %s", name));
  RETURN_IF_ERROR(WriteAll(fd.get(), data, name));
  if (::lseek(fd.get(), 0, SEEK_SET) != 0) return ErrnoStatus(absl::StrFormat("lseek %s", name));
  return fd.Release();
}

absl::StatusOr<UniqueFd> OpenPrivateDir(const std::string& dir, bool create, absl::string_view what) {
  if (create) {
    // Missing parents 0755 whatever the umask (not create_directories' 0777 & ~umask: under
    // umask 000 /run/cairn, where cairnd puts its socket, would be anyone's to write).
    std::vector<std::filesystem::path> missing;
    std::error_code ec;
    for (auto p = std::filesystem::path(dir).parent_path(); !p.empty() && p != p.root_path() &&
                                                            !std::filesystem::exists(p, ec);
         p = p.parent_path()) {
      missing.push_back(p);
    }
    for (auto it = missing.rbegin(); it != missing.rend(); ++it) ::mkdir(it->c_str(), 0755);
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      return ErrnoStatus(absl::StrCat("make ", what, " ", dir));
    }
  }
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus(absl::StrCat("open ", what, " ", dir));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(absl::StrCat("stat ", dir));
  if (st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, " ", dir, " is not a directory of uid ", ::geteuid(),
        " that only it can open (mode 0700): what is in it is acted on as root; remove it, cairn makes it again"));
  }
  return fd;
}

}  // namespace cairn
