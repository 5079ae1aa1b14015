#include "engine/dump/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <map>
#include <set>

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

constexpr int kKcmpFile = 0;  // KCMP_FILE

struct PipeContent {
  std::string data;
  uint32_t capacity = 0;
};

// Copies the bytes queued in the pipe behind `pid`'s descriptor `fd` without consuming
// them: a duplicate of the read end (pidfd_getfd) is tee(2)d into a pipe of our own.
absl::StatusOr<PipeContent> PeekPipe(pid_t pid, int fd) {
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!pidfd.valid()) return ErrnoStatus(absl::StrCat("pidfd_open pid ", pid));
  UniqueFd theirs(static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd.get(), fd, 0)));
  if (!theirs.valid()) return ErrnoStatus(absl::StrCat("pidfd_getfd pid ", pid, " fd ", fd));
  PipeContent pc;
  int cap = ::fcntl(theirs.get(), F_GETPIPE_SZ);
  if (cap < 0) return ErrnoStatus(absl::StrCat("F_GETPIPE_SZ on pid ", pid, " fd ", fd));
  pc.capacity = static_cast<uint32_t>(cap);
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) return ErrnoStatus("pipe2");
  UniqueFd r(p[0]), w(p[1]);
  if (::fcntl(w.get(), F_SETPIPE_SZ, cap) < cap) return ErrnoStatus("F_SETPIPE_SZ");
  ssize_t n = ::tee(theirs.get(), w.get(), static_cast<size_t>(cap), SPLICE_F_NONBLOCK);
  if (n < 0 && errno != EAGAIN) return ErrnoStatus(absl::StrCat("tee from pid ", pid, " fd ", fd));
  if (n > 0) {
    pc.data.resize(static_cast<size_t>(n));
    if (::read(r.get(), pc.data.data(), pc.data.size()) != n) return ErrnoStatus("read pipe copy");
  }
  return pc;
}

}  // namespace

absl::Status CaptureFds(const std::vector<pid_t>& pids, image::ImageWriter* writer,
                        const std::vector<image::Process*>& outs) {
  std::vector<std::vector<proc::FdInfo>> all(pids.size());
  // Pipes are supported when both ends are inside the tree.
  std::map<uint64_t, int> pipe_ends;  // inode -> bit 1: read end seen, bit 2: write end seen
  for (size_t i = 0; i < pids.size(); ++i) {
    ASSIGN_OR_RETURN(all[i], proc::ReadFds(pids[i]));
    for (const proc::FdInfo& info : all[i]) {
      if (!absl::StartsWith(info.target, "pipe:")) continue;
      std::string link = absl::StrCat("/proc/", pids[i], "/fd/", info.fd);
      struct stat st {};
      if (::stat(link.c_str(), &st) != 0) return ErrnoStatus("stat " + link);
      pipe_ends[st.st_ino] |= (info.flags & O_ACCMODE) == O_RDONLY ? 1 : 2;
    }
  }
  std::set<uint64_t> pipe_saved;
  struct Seen {
    pid_t pid;
    int fd;
    uint64_t ino;
  };
  std::vector<Seen> seen;  // descriptors recorded so far, across the tree
  for (size_t pi = 0; pi < pids.size(); ++pi) {
  pid_t pid = pids[pi];
  image::Process* out = outs.empty() ? nullptr : outs[pi];
  for (const proc::FdInfo& info : all[pi]) {
    // Same open file description as an earlier descriptor (dup, 2>&1, inherited by fork)?
    // kcmp tells exactly.
    {
      std::string link = absl::StrCat("/proc/", pid, "/fd/", info.fd);
      struct stat st {};
      if (::stat(link.c_str(), &st) != 0) return ErrnoStatus("stat " + link);
      const Seen* dup_of = nullptr;
      for (const Seen& other : seen) {
        if (other.ino == st.st_ino && ::syscall(SYS_kcmp, other.pid, pid, kKcmpFile, other.fd, info.fd) == 0) {
          dup_of = &other;
          break;
        }
      }
      if (dup_of != nullptr) {
        image::Fd fd;
        fd.set_fd(info.fd);
        fd.set_is_dup(true);
        fd.set_dup_of(dup_of->fd);
        fd.set_dup_of_pid(dup_of->pid);
        fd.set_cloexec((info.flags & O_CLOEXEC) != 0);
        fd.set_path(info.target);
        if (out != nullptr) *out->add_fds() = std::move(fd);
        continue;
      }
      seen.push_back({pid, info.fd, st.st_ino});
    }
    if (absl::StartsWith(info.target, "pipe:")) {
      std::string link = absl::StrCat("/proc/", pid, "/fd/", info.fd);
      struct stat st {};
      if (::stat(link.c_str(), &st) != 0) return ErrnoStatus("stat " + link);
      if (pipe_ends[st.st_ino] != 3) {
        return absl::UnimplementedError(absl::StrFormat(
            "pid %d fd %d is a pipe (%s) whose other end is outside the checkpointed process%s; redirect it to a "
            "file, or checkpoint the whole tree that holds both ends (--tree)",
            pid, info.fd, info.target, pids.size() > 1 ? "s" : ""));
      }
      image::Fd fd;
      fd.set_fd(info.fd);
      fd.set_kind(image::Fd::PIPE);
      fd.set_cloexec((info.flags & O_CLOEXEC) != 0);
      fd.set_flags(info.flags & ~O_CLOEXEC);
      fd.set_path(info.target);
      fd.set_pipe_id(st.st_ino);
      if (writer != nullptr && (info.flags & O_ACCMODE) == O_RDONLY && pipe_saved.insert(st.st_ino).second) {
        ASSIGN_OR_RETURN(PipeContent pc, PeekPipe(pid, info.fd));
        ASSIGN_OR_RETURN(auto blob, writer->AppendBytes(pc.data));
        fd.set_pipe_size(pc.capacity);
        fd.set_content_offset(blob.offset);
        fd.set_content_size(blob.size);
        fd.set_content_xxh3(blob.xxh3);
      }
      if (out != nullptr) *out->add_fds() = std::move(fd);
      continue;
    }
    auto unsupported = [&](absl::string_view kind) {
      return absl::UnimplementedError(absl::StrFormat(
          "pid %d fd %d is %s (%s); checkpoints support regular files, directories and "
          "character devices, pipes and dups of these — close it or redirect it to a file before checkpointing",
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
  }
  return absl::OkStatus();
}

absl::Status CheckFdsSupported(const std::vector<pid_t>& pids) { return CaptureFds(pids, nullptr, {}); }

}  // namespace cairn::dump
