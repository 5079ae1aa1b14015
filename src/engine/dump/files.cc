#include "engine/dump/files.h"
#include "engine/dump/tracker.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_format.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "engine/proc/fd_limit.h"
#include "engine/proc/fds.h"
#include "engine/proc/maps.h"
#include "engine/proc/mountinfo.h"
#include "engine/dump/description_index.h"
#include "engine/dump/in_flight.h"
#include "engine/dump/inotify.h"
#include "engine/dump/scratch_files.h"
#include "engine/dump/sockets.h"
#include "engine/lazy/fuse.h"
#include "engine/proc/pidfd.h"
#include "engine/proc/pty.h"
#include "engine/proc/stat.h"

namespace cairn::dump {
namespace {

absl::string_view KindOf(absl::string_view target) {
  if (absl::StartsWith(target, "pipe:")) return "a pipe";
  if (absl::StartsWith(target, "socket:")) return "a socket";
  if (absl::StartsWith(target, "anon_inode:")) return "a kernel object";
  return "an unsupported file";
}

// Character devices that reopening by path does not give back: each open is a new
// object (a pseudo-terminal pair, a tun interface, a KVM or FUSE instance...) or holds
// device state (GPUs, RDMA, VFIO). Returns what it is, or null for a device that can be
// reopened (/dev/null, /dev/zero, /dev/urandom, a terminal...).
const char* StatefulDevice(dev_t rdev, absl::string_view path) {
  unsigned major = ::major(rdev), minor = ::minor(rdev);
  if (major == 10 && minor == 200) return "a tun/tap interface";
  if (major == 10 && minor == 229) return "a FUSE connection";
  if (major == 10 && minor == 232) return "a KVM instance";
  if (major == 10 && minor == 238) return "a vhost-net instance";
  if (major == 195 || absl::StartsWith(path, "/dev/nvidia")) return "an NVIDIA GPU device";
  if (major == 226 || absl::StartsWith(path, "/dev/dri/")) return "a GPU (DRM) device";
  if (absl::StartsWith(path, "/dev/vfio/")) return "a VFIO device";
  if (absl::StartsWith(path, "/dev/infiniband/")) return "an RDMA device";
  if (absl::StartsWith(path, "/dev/kfd")) return "an AMD GPU compute device";
  return nullptr;
}

constexpr int kKcmpEpollTfd = 7;  // KCMP_EPOLL_TFD

// struct kcmp_epoll_slot (linux/kcmp.h): names registration number `toff` of descriptor
// number `tfd` in the epoll instance at descriptor `efd`.
struct KcmpEpollSlot {
  uint32_t efd, tfd, toff;
};

struct PipeContent {
  std::string data;
  uint32_t capacity = 0;
};

// Copies the bytes queued in the pipe behind `pid`'s descriptor `fd` without consuming
// them: a duplicate of the read end (pidfd_getfd) is tee(2)d into a pipe of our own.
absl::StatusOr<PipeContent> PeekPipe(pid_t pid, int fd) {
  ASSIGN_OR_RETURN(UniqueFd theirs, proc::CopyFd(pid, fd));
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

// The kernel objects behind "anon_inode:[...]" that restore can rebuild.
std::optional<image::Fd::Kind> KernelObjectKind(absl::string_view target) {
  if (target == "anon_inode:[eventfd]") return image::Fd::EVENTFD;
  if (target == "anon_inode:[timerfd]") return image::Fd::TIMERFD;
  if (target == "anon_inode:[signalfd]") return image::Fd::SIGNALFD;
  if (target == "anon_inode:[eventpoll]") return image::Fd::EPOLL;
  if (target == "anon_inode:inotify") return image::Fd::INOTIFY;
  return std::nullopt;
}

// A timerfd's setting as the process would see it now. fdinfo alone is not enough: an
// expired periodic timer is only re-armed (and its missed expirations counted) when the
// process reads it or calls timerfd_gettime, so its fdinfo shows it_value (0, 0) and too
// few ticks. timerfd_gettime on our copy of the description does that catching up,
// exactly as the process's next read would, and gives the time left; fdinfo read after
// it gives the counted ticks.
absl::Status CaptureTimerfd(pid_t pid, int fd, image::TimerfdState* out) {
  ASSIGN_OR_RETURN(UniqueFd theirs, proc::CopyFd(pid, fd));
  itimerspec cur{};
  if (::timerfd_gettime(theirs.get(), &cur) != 0) {
    return ErrnoStatus(absl::StrCat("timerfd_gettime on a copy of fd ", fd, " of pid ", pid));
  }
  std::string path = absl::StrCat("/proc/", pid, "/fdinfo/", fd);
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  ASSIGN_OR_RETURN(proc::FdInfo info, proc::ParseFdInfo(text));
  info.fd = fd;
  info.target = "anon_inode:[timerfd]";
  ASSIGN_OR_RETURN(proc::TimerfdInfo t, proc::ParseTimerfd(info));
  timespec now{};
  if (::clock_gettime(t.clock, &now) != 0) {
    return ErrnoStatus(absl::StrCat("clock_gettime(", t.clock, ") for the timerfd at fd ", fd, " of pid ", pid));
  }
  auto ns = [](const timespec& ts) { return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec; };
  out->set_clock(t.clock);
  out->set_settime_flags(t.settime_flags);
  out->set_value_ns(static_cast<uint64_t>(ns(cur.it_value)));
  out->set_interval_ns(static_cast<uint64_t>(ns(cur.it_interval)));
  out->set_ticks(t.ticks);
  out->set_clock_ns(ns(now));
  return absl::OkStatus();
}

// The device of sockfs, where every socket's inode is (0 if none can be made).
dev_t SockfsDevice() {
  static const dev_t dev = [] {
    UniqueFd s(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    struct stat st {};
    return s.valid() && ::fstat(s.get(), &st) == 0 ? st.st_dev : dev_t{0};
  }();
  return dev;
}

// Checks that registration `target` (the `toff`-th with its descriptor number) of the
// epoll instance at `pid`'s descriptor `efd` watches the file `pid` holds at that number:
// restore re-registers it from inside `pid` by number. kcmp(KCMP_EPOLL_TFD) compares the
// registered file with a process's descriptor.
// `own`: every descriptor of `pid`; `sockets`: the socket inode at each of its numbers that holds
// a socket.
absl::Status CheckEpollTarget(const std::vector<pid_t>& pids, pid_t pid, int efd, const proc::EpollTarget& target,
                              uint32_t toff, const std::vector<proc::FdInfo>& own,
                              const absl::flat_hash_map<int, uint64_t>& sockets, image::EpollEntry* entry) {
  // A socket has one open file description per inode (but for O_PATH opens of it, which
  // `sockets` leaves out): when the number holds the socket whose inode the registration names
  // (on sockfs), that is the registered file. No kcmp then, which walks the instance's interest
  // list to find the registration: quadratic over a server's thousand sockets.
  if (auto it = sockets.find(target.tfd); it != sockets.end() && it->second == target.ino &&
                                          makedev(target.sdev >> 20, target.sdev & 0xfffff) == SockfsDevice()) {
    return absl::OkStatus();
  }
  KcmpEpollSlot slot{static_cast<uint32_t>(efd), static_cast<uint32_t>(target.tfd), toff};
  auto same = [&](pid_t holder) -> absl::StatusOr<bool> {
    long r = ::syscall(SYS_kcmp, holder, pid, kKcmpEpollTfd, target.tfd, &slot);
    if (r == 0) return true;
    if (r > 0 || errno == EBADF || errno == ENOENT) return false;
    return ErrnoStatus(absl::StrFormat("kcmp(KCMP_EPOLL_TFD) of fd %d of pid %d with the epoll at fd %d of pid %d",
                                       target.tfd, holder, efd, pid));
  };
  ASSIGN_OR_RETURN(bool at_its_number, same(pid));
  if (at_its_number) return absl::OkStatus();
  // The number was closed or dup2'd over while another descriptor of the process kept the
  // file open: found by comparing each of them with the registered file.
  for (const proc::FdInfo& other : own) {
    long r = ::syscall(SYS_kcmp, pid, pid, kKcmpEpollTfd, other.fd, &slot);
    if (r == 0) {
      entry->set_held_elsewhere(true);
      entry->set_held_as(other.fd);
      return absl::OkStatus();
    }
  }
  for (pid_t other : pids) {
    if (other == pid) continue;
    ASSIGN_OR_RETURN(bool theirs, same(other));
    if (theirs) {
      return absl::UnimplementedError(absl::StrFormat(
          "pid %d fd %d is an epoll instance watching fd %d of pid %d, another process that shares the epoll "
          "instance; checkpoints support epoll registrations made by the process that holds the epoll first "
          "(pid %d) on its own descriptors — register the descriptor in pid %d, or give each process its own epoll",
          pid, efd, target.tfd, other, pid, pid));
    }
  }
  return absl::UnimplementedError(absl::StrFormat(
      "pid %d fd %d is an epoll instance watching a file registered as fd %d, which no descriptor of the process "
      "holds any more (the file is kept open by something else, such as a mapping); it cannot be registered again "
      "— remove it with EPOLL_CTL_DEL before closing the descriptor",
      pid, efd, target.tfd));
}

// Records the kernel object behind `pid`'s descriptor `info` in `fd` (kind already set).
// `capture`: also read the state that only a copy of the descriptor gives (a check-only
// pass only validates).
// Whether any process on this machine holds terminal device `rdev` open.
bool SlaveOpenSomewhere(dev_t rdev) {
  std::error_code ec;
  for (const auto& p : std::filesystem::directory_iterator("/proc", ec)) {
    std::string name = p.path().filename().string();
    if (name.empty() || !absl::ascii_isdigit(name[0])) continue;
    std::error_code fec;
    for (const auto& f : std::filesystem::directory_iterator(p.path() / "fd", fec)) {
      struct stat st {};
      if (::stat(f.path().c_str(), &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == rdev) return true;
    }
  }
  return false;
}

// A pseudo-terminal master, asked through a copy of it: its index, the terminal's settings
// and size (the master's ioctls act on its slave), lock and packet mode, and the slave
// file's owner and mode. Bytes waiting in either direction cannot be read without taking them
// from the program: such a terminal is refused, to be checkpointed once it is idle.
absl::Status CapturePty(pid_t pid, const proc::FdInfo& info, image::Fd* fd) {
  ASSIGN_OR_RETURN(UniqueFd m, proc::CopyFd(pid, info.fd));
  auto where = [&] { return absl::StrFormat("the pseudo-terminal master at fd %d of pid %d", info.fd, pid); };
  image::PtyState* pty = fd->mutable_pty();
  unsigned index = 0;
  if (::ioctl(m.get(), TIOCGPTN, &index) != 0) return ErrnoStatus("ioctl(TIOCGPTN) on " + where());
  pty->set_index(index);
  proc::Termios2 t{};
  if (::ioctl(m.get(), proc::kTcgets2, &t) != 0) return ErrnoStatus("ioctl(TCGETS2) on " + where());
  pty->set_termios(std::string(reinterpret_cast<const char*>(&t), sizeof t));
  winsize ws{};
  if (::ioctl(m.get(), TIOCGWINSZ, &ws) != 0) return ErrnoStatus("ioctl(TIOCGWINSZ) on " + where());
  pty->set_winsize(std::string(reinterpret_cast<const char*>(&ws), sizeof ws));
  int locked = 0, packet = 0;
  if (::ioctl(m.get(), TIOCGPTLCK, &locked) != 0) return ErrnoStatus("ioctl(TIOCGPTLCK) on " + where());
  if (::ioctl(m.get(), TIOCGPKT, &packet) != 0) return ErrnoStatus("ioctl(TIOCGPKT) on " + where());
  pty->set_locked(locked != 0);
  pty->set_packet(packet != 0);
  int output = 0, input = 0;
  if (::ioctl(m.get(), FIONREAD, &output) != 0) return ErrnoStatus("ioctl(FIONREAD) on " + where());
  // The input queue is counted on the slave. Opening it is harmless only while someone else
  // has it open: the last close of a slave tells the master the other side hung up.
  if (SlaveOpenSomewhere(makedev(136, index))) {  // devpts: major 136, minor the index
    UniqueFd slave(::ioctl(m.get(), TIOCGPTPEER, O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC));
    if (slave.valid() && ::ioctl(slave.get(), FIONREAD, &input) != 0) input = 0;
  }
  if (output != 0 || input != 0) {
    return absl::UnavailableError(absl::StrFormat(
        "%s has %d byte%s written by the program on the terminal and %d typed into it not read yet; they cannot "
        "be saved without taking them away — checkpoint it when the terminal is idle",
        where(), output, output == 1 ? "" : "s", input));
  }
  std::string slave_path = absl::StrCat("/proc/", pid, "/root/dev/pts/", index);
  struct stat sst {};
  if (::stat(slave_path.c_str(), &sst) == 0) {
    pty->set_slave_uid(sst.st_uid);
    pty->set_slave_gid(sst.st_gid);
    pty->set_slave_mode(sst.st_mode & 07777);
  }
  return absl::OkStatus();
}

// A pidfd: of which process (fdinfo "Pid:", -1 once it has exited and been reaped). It must be
// a process (or, with PIDFD_THREAD, a thread) of the checkpoint: another process's id would
// name anything after a restore.
absl::Status CapturePidfd(const std::vector<pid_t>& pids, pid_t pid, const proc::FdInfo& info, image::Fd* fd) {
  int32_t target = 0;
  bool found = false;
  for (const auto& [key, value] : info.extra) {
    if (key == "Pid") found = absl::SimpleAtoi(value, &target);
  }
  if (!found) {
    return absl::UnimplementedError(absl::StrFormat(
        "pid %d fd %d is a pidfd whose process this kernel does not show (no Pid: in its fdinfo)", pid, info.fd));
  }
  if (target <= 0) {
    fd->set_pidfd_pid(0);
    return absl::OkStatus();
  }
  if (info.flags & O_EXCL) {  // PIDFD_THREAD (Linux 6.9+)
    return absl::UnimplementedError(absl::StrFormat(
        "pid %d fd %d is a pidfd of thread %d (PIDFD_THREAD); thread pidfds cannot be checkpointed yet — use a "
        "pidfd of the process, or close it first",
        pid, info.fd, target));
  }
  bool inside = false;
  for (pid_t p : pids) {
    inside = inside || p == target || ::access(absl::StrCat("/proc/", p, "/task/", target).c_str(), F_OK) == 0;
  }
  if (!inside) {
    return absl::UnimplementedError(absl::StrFormat(
        "pid %d fd %d is a pidfd of pid %d, which is not part of the checkpoint; after a restore that id could be "
        "any process — checkpoint the tree that holds it (--tree), or close the pidfd first",
        pid, info.fd, target));
  }
  fd->set_pidfd_pid(target);
  return absl::OkStatus();
}

// The id process `pid` of this host has in the PID namespace it is in: the last of its NSpid
// (its host id when it is in the host's).
std::optional<pid_t> OwnNamespaceId(pid_t pid) {
  absl::StatusOr<proc::Status> st = proc::ReadStatus(pid);
  if (!st.ok() || st->nspids.empty()) return std::nullopt;
  return st->nspids.back();
}

// The start time of the process whose /proc stat file is `stat_path`.
std::optional<uint64_t> StartTime(const std::string& stat_path) {
  absl::StatusOr<std::string> text = ReadFile(stat_path);
  if (!text.ok()) return std::nullopt;
  absl::StatusOr<proc::Stat> st = proc::ParseStat(*text);
  if (!st.ok()) return std::nullopt;
  return st->start_time;
}

// A file of a /proc/N entry: N must be a process of the checkpoint as the holder sees it, on
// the /proc the holder sees (its root's /proc, showing the holder under its own id: the procfs
// of its PID namespace), so that the restored process opening the same path gets the same file
// of its restored self or sibling. Files of a thread's own entry (/proc/N/task/T, T another
// thread) are refused: restore opens the file before the thread exists.
absl::Status CaptureProcFile(const std::vector<pid_t>& pids, pid_t pid, const proc::FdInfo& info,
                             const struct stat& st, image::Fd* fd) {
  auto refuse = [&](absl::string_view why) {
    return absl::UnimplementedError(absl::StrFormat("pid %d fd %d is %s, %s — close it before checkpointing", pid,
                                                    info.fd, info.target, why));
  };
  std::vector<absl::string_view> parts = absl::StrSplit(info.target, '/');  // "", "proc", N, ...
  pid_t n = 0;
  if (parts.size() < 3 || !absl::SimpleAtoi(parts[2], &n)) {
    return absl::InternalError(absl::StrFormat("pid %d fd %d: %s is not under /proc/PID", pid, info.fd, info.target));
  }
  pid_t t = 0;
  if (parts.size() >= 5 && parts[3] == "task" && absl::SimpleAtoi(parts[4], &t) && t != n) {
    return refuse(absl::StrFormat("a file of the /proc entry of thread %d of process %d; restore cannot open it "
                                  "again before the thread exists",
                                  t, n));
  }
  std::string own_proc = absl::StrCat("/proc/", pid, "/root/proc");
  struct stat pst {};
  std::optional<pid_t> self = OwnNamespaceId(pid);
  std::optional<uint64_t> seen_there = self ? StartTime(absl::StrCat(own_proc, "/", *self, "/stat")) : std::nullopt;
  std::optional<uint64_t> seen_here = StartTime(absl::StrCat("/proc/", pid, "/stat"));
  if (::stat(own_proc.c_str(), &pst) != 0 || pst.st_dev != st.st_dev || !seen_there || seen_there != seen_here) {
    return refuse("a file of a /proc other than the one of the process's own PID namespace at its /proc; restore "
                  "could not open it again");
  }
  bool inside = false;
  for (pid_t p : pids) inside = inside || OwnNamespaceId(p) == n;
  if (!inside) {
    return refuse(absl::StrFormat("a file of the /proc entry of process %d, which is not part of the checkpoint; "
                                  "after a restore that id could be any process (checkpoint the tree that holds it "
                                  "with --tree, or close the file)",
                                  n));
  }
  fd->set_kind(image::Fd::PROC_FILE);
  fd->set_pos(info.pos);
  fd->set_mode(st.st_mode);
  return absl::OkStatus();
}

// A namespace file ("net:[4026531840]"): one of the holder's own namespaces, named by its
// entry in /proc/PID/ns, or refused (restore could not find another process's namespace).
absl::Status CaptureNamespace(pid_t pid, const proc::FdInfo& info, image::Fd* fd) {
  // pid_for_children and time_for_children are made again as the process's own pid and time
  // namespaces: one that differs from those (after unshare) is refused.
  for (const char* name : proc::kOwnNamespaces) {
    std::error_code ec;
    std::filesystem::path link = std::filesystem::read_symlink(absl::StrCat("/proc/", pid, "/ns/", name), ec);
    if (!ec && link.string() == info.target) {
      fd->set_ns_name(name);
      return absl::OkStatus();
    }
  }
  return absl::UnimplementedError(absl::StrFormat(
      "pid %d fd %d is a descriptor of a namespace the process is not in (%s; or one it made for its children "
      "only); restore could not open it again — close it before checkpointing (descriptors of the process's own "
      "namespaces are saved)",
      pid, info.fd, info.target));
}

// A namespace file's target, "TYPE:[INODE]".
bool IsNamespaceTarget(absl::string_view target) {
  size_t colon = target.find(":[");
  if (colon == absl::string_view::npos || colon == 0 || !absl::EndsWith(target, "]")) return false;
  for (char c : target.substr(0, colon)) {
    if (!absl::ascii_islower(c) && c != '_') return false;
  }
  uint64_t ino = 0;
  return absl::SimpleAtoi(target.substr(colon + 2, target.size() - colon - 3), &ino);
}

// A regular file whose name was removed while another link keeps it: its file handle and a
// mount point of its file system, to open it again without a name.
absl::Status CaptureHandle(pid_t pid, const proc::FdInfo& info, const struct stat& st, image::Fd* fd) {
  ASSIGN_OR_RETURN(UniqueFd copy, proc::CopyFd(pid, info.fd));
  std::vector<char> buf(sizeof(file_handle) + MAX_HANDLE_SZ);
  auto* fh = reinterpret_cast<file_handle*>(buf.data());
  fh->handle_bytes = MAX_HANDLE_SZ;
  int mount_id = 0;
  if (::name_to_handle_at(copy.get(), "", fh, &mount_id, AT_EMPTY_PATH) != 0) {
    return absl::UnimplementedError(absl::StrFormat(
        "pid %d fd %d is %s, a file whose name was removed while another link keeps it, on a file system that "
        "gives no file handles (%s); restore could not find it again — open it by its other name before "
        "checkpointing",
        pid, info.fd, info.target, ErrnoStatus("name_to_handle_at").message()));
  }
  auto mount = proc::MountPointOf(pid, st.st_dev);
  if (!mount.ok()) {
    return absl::UnimplementedError(absl::StrFormat(
        "pid %d fd %d is %s, a file whose name was removed while another link keeps it, on a file system the "
        "process sees no mount of (%s); restore could not find it again",
        pid, info.fd, info.target, mount.status().message()));
  }
  // Restore opens the mount point by that path from where it runs (this machine's, or the
  // job's, view of the same mounts): it must be there, on the file's file system.
  struct stat mst {};
  if (::stat(mount->c_str(), &mst) != 0 || mst.st_dev != st.st_dev) {
    return absl::UnimplementedError(absl::StrFormat(
        "pid %d fd %d is %s, a file whose name was removed while another link keeps it, on a file system mounted "
        "for the process at %s, which is not that file system here; restore could not find it again — open it by "
        "its other name before checkpointing",
        pid, info.fd, info.target, *mount));
  }
  fd->set_handle(std::string(reinterpret_cast<const char*>(fh->f_handle), fh->handle_bytes));
  fd->set_handle_type(fh->handle_type);
  fd->set_handle_mount(*mount);
  return absl::OkStatus();
}

// `own`: every descriptor of `pid`.
absl::Status CaptureKernelObject(const std::vector<pid_t>& pids, pid_t pid, const proc::FdInfo& info,
                                 const std::vector<proc::FdInfo>& own, bool capture, image::Fd* fd) {
  switch (fd->kind()) {
    case image::Fd::EVENTFD: {
      ASSIGN_OR_RETURN(proc::EventfdInfo e, proc::ParseEventfd(info));
      if (!e.semaphore_reported) {
        CAIRN_LOG_WARN("event=eventfd_mode_unknown pid={} fd={} reason=\"the kernel does not report "
                       "eventfd-semaphore; restored as a counter\"",
                       pid, info.fd);
      }
      fd->mutable_eventfd()->set_count(e.count);
      fd->mutable_eventfd()->set_semaphore(e.semaphore);
      return absl::OkStatus();
    }
    case image::Fd::TIMERFD:
      // Validated here; the exact values come from a copy of the descriptor.
      RETURN_IF_ERROR(proc::ParseTimerfd(info).status());
      return capture ? CaptureTimerfd(pid, info.fd, fd->mutable_timerfd()) : absl::OkStatus();
    case image::Fd::SIGNALFD: {
      ASSIGN_OR_RETURN(uint64_t mask, proc::ParseSignalfdMask(info));
      fd->set_signalfd_mask(mask);
      return absl::OkStatus();
    }
    case image::Fd::EPOLL: {
      ASSIGN_OR_RETURN(std::vector<proc::EpollTarget> targets, proc::ParseEpollTargets(info));
      absl::flat_hash_map<int, uint64_t> sockets;
      for (const proc::FdInfo& f : own) {
        if (f.flags & O_PATH) continue;  // an O_PATH open of a socket is a description of its own
        if (std::optional<uint64_t> ino = proc::SocketInode(f.target)) sockets[f.fd] = *ino;
      }
      std::map<int, uint32_t> seen_tfd;  // registrations so far per descriptor number
      for (const proc::EpollTarget& t : targets) {
        image::EpollEntry* e = fd->add_epoll();
        RETURN_IF_ERROR(CheckEpollTarget(pids, pid, info.fd, t, seen_tfd[t.tfd]++, own, sockets, e));
        e->set_tfd(t.tfd);
        e->set_events(t.events);
        e->set_data(t.data);
      }
      return absl::OkStatus();
    }
    case image::Fd::INOTIFY:
      return CaptureInotify(pid, info, capture, fd);
    default:
      return absl::InternalError(absl::StrCat("pid ", pid, " fd ", info.fd, ": not a kernel object kind"));
  }
}

// A lease is taken again by F_SETLEASE, which fails while the file has openers it would
// conflict with. Restore makes a deleted file or memfd again with a description of its own
// (and saving its content opens it, which would break a write lease while its holder is
// frozen), and maps a mapped file through descriptions of its own: a lease on a deleted file,
// or a write lease on a file the tree maps, is refused here rather than at restore.
absl::Status CheckLeaseRestorable(const std::vector<pid_t>& pids, pid_t pid, const proc::FdInfo& info,
                                  const struct stat& st, bool write) {
  if (st.st_nlink == 0) {
    return absl::UnimplementedError(absl::StrFormat(
        "pid %d fd %d holds a file lease (fcntl F_SETLEASE) on %s, a file whose name was removed (or a memfd); "
        "such a lease cannot be taken again on the file restore makes — release it (F_SETLEASE, F_UNLCK) before "
        "checkpointing",
        pid, info.fd, info.target));
  }
  if (!write) return absl::OkStatus();
  for (pid_t p : pids) {
    ASSIGN_OR_RETURN(std::vector<proc::MapEntry> maps, proc::ReadMaps(p));
    for (const proc::MapEntry& m : maps) {
      if (m.inode == st.st_ino && makedev(m.dev_major, m.dev_minor) == st.st_dev) {
        return absl::UnimplementedError(absl::StrFormat(
            "pid %d fd %d holds a write lease (fcntl F_SETLEASE, F_WRLCK) on %s, which pid %d also maps at %#x; "
            "restore maps it through an open of its own, and a write lease allows no other — release the lease or "
            "unmap the file before checkpointing",
            pid, info.fd, info.target, p, m.start));
      }
    }
  }
  return absl::OkStatus();
}

// The locks held through a regular file's descriptor, into `fd`.
absl::Status CaptureLocks(const std::vector<pid_t>& pids, pid_t pid, const proc::FdInfo& info, const struct stat& st,
                          std::set<std::pair<pid_t, uint64_t>>* posix_locked, image::Fd* fd) {
  uint64_t ino = st.st_ino;
  bool posix_new = !posix_locked->count({pid, ino});
  ASSIGN_OR_RETURN(std::vector<proc::LockInfo> locks, proc::ParseLocks(info));
  for (const proc::LockInfo& l : locks) {
    image::FileLock lock;
    if (l.kind == "FLOCK") {
      lock.set_kind(image::FileLock::FLOCK);
      lock.set_pid(l.pid);
    } else if (l.kind == "OFDLCK") {
      lock.set_kind(image::FileLock::OFD);
    } else if (l.kind == "POSIX") {
      if (!posix_new) continue;  // listed again for each descriptor of the same file
      lock.set_kind(image::FileLock::POSIX);
    } else if (l.kind == "LEASE") {
      // A lease being broken has an opener waiting for the holder to give it up, with a
      // deadline the kernel keeps: neither can be made again.
      if (l.mode != "ACTIVE") {
        return absl::FailedPreconditionError(absl::StrFormat(
            "pid %d fd %d holds a file lease (fcntl F_SETLEASE) on %s that is being broken (%s: another process "
            "opened the file and waits for the lease to be released); checkpoint it once the holder has released "
            "or downgraded it",
            pid, info.fd, info.target, l.mode));
      }
      RETURN_IF_ERROR(CheckLeaseRestorable(pids, pid, info, st, l.write));
      lock.set_kind(image::FileLock::LEASE);
      lock.set_pid(l.pid);
      lock.set_write(l.write);
      *fd->add_locks() = lock;
      continue;
    } else {
      return absl::UnimplementedError(absl::StrFormat("pid %d fd %d holds a %s lock (%s); not supported", pid, info.fd,
                                                      l.kind, info.target));
    }
    if (l.mode != "ADVISORY") {
      return absl::UnimplementedError(absl::StrFormat("pid %d fd %d holds a %s lock; not supported", pid, info.fd, l.mode));
    }
    lock.set_write(l.write);
    lock.set_start(l.start);
    lock.set_end(l.end);
    *fd->add_locks() = lock;
  }
  if (posix_new) {
    for (const auto& l : fd->locks()) {
      if (l.kind() == image::FileLock::POSIX) posix_locked->insert({pid, ino});
    }
  }
  return absl::OkStatus();
}

// The record every kind of descriptor starts from: number, kind, flags, what it points at.
image::Fd Describe(const proc::FdInfo& info, image::Fd::Kind kind) {
  image::Fd fd;
  fd.set_fd(info.fd);
  fd.set_kind(kind);
  fd.set_cloexec((info.flags & O_CLOEXEC) != 0);
  fd.set_flags(info.flags & ~O_CLOEXEC);
  fd.set_path(info.target);
  return fd;
}

// What a descriptor in flight may be: a description restore makes in the restorer, to send it
// (not one a process opens itself, nor an epoll set or SIGIO owner only a process could give
// back, nor a connection under the network lock). `holder`: the holder's own descriptions (the
// sender closed its copy). Empty if fine, else what it is.
std::string InFlightUnsupported(const image::Fd& fd, bool holder) {
  if ((fd.kind() == image::Fd::PIDFD && fd.pidfd_pid() != 0) || fd.kind() == image::Fd::PROC_FILE ||
      fd.kind() == image::Fd::NAMESPACE) {
    return absl::StrFormat("%s (%s), which only a process can open", fd.kind() == image::Fd::PIDFD ? "a pidfd"
                           : fd.kind() == image::Fd::PROC_FILE ? "a /proc file" : "a namespace file", fd.path());
  }
  if (!holder) return "";
  if (fd.kind() == image::Fd::EPOLL) return "an epoll set no process holds (its registrations name a process's descriptors)";
  if (fd.socket().has_tcp()) return "an established TCP connection no process holds";
  if (fd.has_owner() && fd.owner().pid() != 0) return "a file with a SIGIO owner (F_SETOWN) no process holds";
  for (const image::FileLock& l : fd.locks()) {
    if (l.kind() == image::FileLock::LEASE) return "a file with a lease no process holds";
  }
  return "";
}

// Every descriptor in flight the processes' sockets (`outs`) and the holder's name exists and
// can be sent again (InFlightUnsupported).
absl::Status CheckInFlight(const std::vector<image::Process*>& outs, const image::Process& holder,
                           const InFlightFiles& in_flight) {
  constexpr absl::string_view kAdvice = "let the process receive it before checkpointing";
  for (const image::Fd& fd : holder.fds()) {
    if (std::string what = InFlightUnsupported(fd, true); !what.empty()) {
      return absl::UnimplementedError(absl::StrFormat(
          "a descriptor in flight in %s (sent with SCM_RIGHTS, not received yet; its sender closed its own) is %s; %s",
          in_flight.FoundIn(fd.fd()), what, kAdvice));
    }
  }
  // The record of the description `ref` names (a dup's origin).
  auto find = [&](const image::FdRef& ref) -> const image::Fd* {
    pid_t pid = ref.pid();
    int n = ref.fd();
    for (int hop = 0; hop < 2; ++hop) {
      const image::Process* p = pid == kInFlightHolder ? &holder : nullptr;
      for (const image::Process* o : outs) p = p == nullptr && o->pid() == pid ? o : p;
      if (p == nullptr) return nullptr;
      const image::Fd* f = nullptr;
      for (const image::Fd& g : p->fds()) f = g.fd() == n ? &g : f;
      if (f == nullptr || !f->is_dup()) return f;
      pid = f->dup_of_pid() != 0 ? f->dup_of_pid() : pid;
      n = f->dup_of();
    }
    return nullptr;
  };
  std::vector<const image::Process*> sockets_of(outs.begin(), outs.end());
  sockets_of.push_back(&holder);
  for (const image::Process* p : sockets_of) {
    for (const image::Fd& fd : p->fds()) {
      for (const image::InFlight& f : fd.in_flight()) {
        for (const image::FdRef& ref : f.files()) {
          if (outs.empty() && ref.pid() != kInFlightHolder) continue;  // a check: nothing recorded
          const image::Fd* target = find(ref);
          std::string what = target == nullptr ? absl::StrFormat("fd %d of pid %d, which the checkpoint lost track of",
                                                                 ref.fd(), ref.pid())
                                               : InFlightUnsupported(*target, false);
          if (!what.empty()) {
            return absl::UnimplementedError(absl::StrFormat(
                "pid %d fd %d is a unix socket with a descriptor in flight (sent with SCM_RIGHTS, not received yet) "
                "that is %s; %s",
                p->pid(), fd.fd(), what, kAdvice));
          }
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

// Who the description at `pid`'s `fd_num` signals when I/O is possible (F_SETOWN_EX) and
// with which signal (F_SETSIG), asked on `copy`, a copy of it. An owner outside the checkpoint
// is refused: after a restore that id may name any process, or none.
absl::Status CaptureOwnerOf(int copy, pid_t pid, int fd_num, const std::vector<pid_t>& pids, image::Fd* fd) {
  int fl = ::fcntl(copy, F_GETFL);
  if (fl >= 0 && (fl & O_PATH)) return absl::OkStatus();  // an O_PATH descriptor does no I/O: no owner
  f_owner_ex owner{};
  if (::fcntl(copy, F_GETOWN_EX, &owner) != 0) {
    return ErrnoStatus(absl::StrFormat("fcntl(F_GETOWN_EX) on pid %d fd %d", pid, fd_num));
  }
  int sig = ::fcntl(copy, F_GETSIG);
  if (sig < 0) return ErrnoStatus(absl::StrFormat("fcntl(F_GETSIG) on pid %d fd %d", pid, fd_num));
  if (owner.pid == 0 && sig == 0) return absl::OkStatus();
  if (owner.pid != 0) {
    bool inside = false;
    for (pid_t p : pids) {
      if (owner.type == F_OWNER_PID) inside = inside || p == owner.pid;
      // A thread owner must be one of the holder's own threads: restore sets the owner from
      // inside the holder once its threads exist.
      if (owner.type == F_OWNER_TID && p == pid) {
        inside = ::access(absl::StrCat("/proc/", p, "/task/", owner.pid).c_str(), F_OK) == 0;
      }
      if (owner.type == F_OWNER_PGRP) inside = inside || ::getpgid(p) == owner.pid;
    }
    if (!inside) {
      const char* what = owner.type == F_OWNER_TID ? "thread" : owner.type == F_OWNER_PGRP ? "process group" : "process";
      return absl::FailedPreconditionError(absl::StrFormat(
          "pid %d fd %d sends its I/O signals (F_SETOWN) to %s %d, which is not part of the checkpoint (or, for a "
          "thread, not one of pid %d's own); checkpoint the tree that holds it (--tree), or clear the owner first",
          pid, fd_num, what, owner.pid, pid));
    }
  }
  image::FileOwner* o = fd->mutable_owner();
  o->set_type(owner.type);
  o->set_pid(owner.pid);
  o->set_signal(sig);
  return absl::OkStatus();
}

absl::Status CaptureOwner(pid_t pid, int fd_num, const std::vector<pid_t>& pids, image::Fd* fd) {
  ASSIGN_OR_RETURN(UniqueFd copy, proc::CopyFd(pid, fd_num));
  return CaptureOwnerOf(copy.get(), pid, fd_num, pids, fd);
}

absl::Status CaptureFds(const std::vector<pid_t>& pids, const FdOptions& opts, image::ImageWriter* writer,
                        const std::vector<image::Process*>& outs, FileSet* saved_files, image::Process* in_flight_out,
                        std::vector<std::vector<proc::FdInfo>> fds) {
  if (!fds.empty() && fds.size() != pids.size()) return absl::InternalError("descriptor tables of other processes");
  std::vector<std::vector<proc::FdInfo>> all = std::move(fds);
  bool read_here = all.empty();
  all.resize(pids.size());
  for (size_t i = 0; i < pids.size(); ++i) {
    // The check before the freeze needs nothing of a socket's fdinfo (its flags, locks): a
    // server's thousand connections skip it there.
    std::function<bool(absl::string_view)> info_for;
    if (writer == nullptr) info_for = [](absl::string_view target) { return !proc::SocketInode(target).has_value(); };
    if (read_here) {
      ASSIGN_OR_RETURN(all[i], proc::ReadFds(pids[i], info_for));
    }
    // cairn's own write tracker is not the process's: neither saved nor restored. Nor are the
    // fuses a job's init holds for a lazy restore (lazy/fuse.h).
    std::string comm;
    if (std::any_of(all[i].begin(), all[i].end(), [](const proc::FdInfo& f) { return f.fd >= lazy::kFuseFloor; })) {
      if (auto st = proc::ReadStat(pids[i]); st.ok()) comm = st->comm;
    }
    std::erase_if(all[i], [&](const proc::FdInfo& info) { return IsTrackerFd(info) || lazy::IsFuseFd(comm, info.fd); });
  }
  std::set<uint64_t> tree_sockets;  // every socket inode the tree holds
  std::vector<TreeSockets::SocketFd> socket_fds;
  for (size_t i = 0; i < pids.size(); ++i) {
    for (const proc::FdInfo& info : all[i]) {
      if (std::optional<uint64_t> ino = proc::SocketInode(info.target)) {
        tree_sockets.insert(*ino);
        socket_fds.push_back({pids[i], info.fd, *ino});
      }
    }
  }
  ASSIGN_OR_RETURN(TreeSockets sockets,
                   TreeSockets::Load(std::move(tree_sockets), opts, pids.empty() ? 0 : pids[0]));
  if (writer == nullptr && opts.tcp_established) {
    // The dump will hold a copy of each TCP connection at once, frozen (tcp.h): room made now.
    absl::Status room = proc::ReserveOwnDescriptors(sockets.OtherThanUnix(), "the dump's copies of the sockets");
    if (!room.ok()) CAIRN_LOG_WARN("event=descriptor_room_not_reserved error=\"{}\"", room.ToString());
  }
  // Descriptors in flight (in_flight.h): those no process holds are recorded as the holder's,
  // which comes last, after the processes.
  InFlightFiles in_flight([&] {
    std::vector<InFlightFiles::Held> held;
    for (size_t i = 0; i < pids.size(); ++i) {
      for (const proc::FdInfo& info : all[i]) {
        struct stat st {};
        if (::stat(absl::StrCat("/proc/", pids[i], "/fd/", info.fd).c_str(), &st) == 0) {
          held.push_back({pids[i], info.fd, st.st_ino});
        }
      }
    }
    return held;
  });
  RETURN_IF_ERROR(sockets.FindInFlight(std::move(socket_fds), &in_flight));
  std::vector<pid_t> holders = pids;
  image::Process holder_scratch;
  if (std::vector<int> kept = in_flight.Kept(); !kept.empty()) {
    ASSIGN_OR_RETURN(std::vector<proc::FdInfo> ours, proc::ReadFds(::getpid()));
    std::erase_if(ours, [&](const proc::FdInfo& info) { return std::find(kept.begin(), kept.end(), info.fd) == kept.end(); });
    all.push_back(std::move(ours));
    holders.push_back(::getpid());
  }
  image::Process* holder_out = in_flight_out != nullptr ? in_flight_out : &holder_scratch;
  // Pipes are supported when both ends are inside the tree.
  std::map<uint64_t, int> pipe_ends;  // inode -> bit 1: read end seen, bit 2: write end seen
  for (size_t i = 0; i < holders.size(); ++i) {
    for (const proc::FdInfo& info : all[i]) {
      bool pipe = absl::StartsWith(info.target, "pipe:");
      if (!pipe && !absl::StartsWith(info.target, "/")) continue;
      std::string link = absl::StrCat("/proc/", holders[i], "/fd/", info.fd);
      struct stat st {};
      if (::stat(link.c_str(), &st) != 0) return ErrnoStatus("stat " + link);
      if (!pipe && !S_ISFIFO(st.st_mode)) continue;
      int mode = info.flags & O_ACCMODE;
      pipe_ends[st.st_ino] |= mode == O_RDONLY ? 1 : mode == O_WRONLY ? 2 : 3;
    }
  }
  std::set<uint64_t> pipe_saved;
  std::set<std::pair<pid_t, uint64_t>> posix_locked;  // (pid, inode) whose POSIX locks are recorded
  DescriptionIndex seen;  // descriptions recorded so far, across the tree
  int highest_fd = 0;
  uint64_t pipes = 0;     // of those descriptions
  // One process's descriptors (all[pi]); the holder's last.
  auto capture_process = [&](size_t pi) -> absl::Status {
  pid_t pid = holders[pi];
  image::Process* out = pi == pids.size() ? holder_out : outs.empty() ? nullptr : outs[pi];
  for (const proc::FdInfo& info : all[pi]) {
    // Same open file description as an earlier descriptor (dup, 2>&1, inherited by fork)?
    // kcmp tells exactly.
    highest_fd = std::max(highest_fd, info.fd);
    std::string link = absl::StrCat("/proc/", pid, "/fd/", info.fd);
    struct stat st {};
    if (std::optional<uint64_t> ino = proc::SocketInode(info.target)) {
      st.st_ino = *ino;  // a socket's link names its inode: no stat (a server holds thousands)
      st.st_mode = S_IFSOCK;
    } else if (::stat(link.c_str(), &st) != 0) {
      // The check runs while the processes do: a descriptor closed since it was listed is gone.
      if (errno == ENOENT && writer == nullptr) continue;
      return ErrnoStatus("stat " + link + " (" + info.target + ")");
    }
    {
      const DescriptionIndex::Holder* dup_of = seen.FindOrAdd(st.st_ino, pid, info.fd);
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
    }
    bool fifo = absl::StartsWith(info.target, "/") && S_ISFIFO(st.st_mode);
    pipes += absl::StartsWith(info.target, "pipe:") ? 1 : 0;
    if (absl::StartsWith(info.target, "pipe:") || fifo) {
      // A FIFO is found by its name: a process outside the checkpoint that holds the other
      // end stays connected to the one restored, as both open the same inode. One whose name
      // was removed is made again under a new name, removed at once: like a pipe, it can
      // only be saved with every end that is still open.
      bool unlinked = fifo && absl::EndsWith(info.target, " (deleted)");
      if (opts.handed_over != nullptr && opts.handed_over->count(info.target) && !fifo) {
        image::Fd fd = Describe(info, image::Fd::PIPE);
        fd.set_pipe_id(st.st_ino);
        fd.set_handed_over(true);
        if (out != nullptr) *out->add_fds() = std::move(fd);
        continue;
      }
      if ((!fifo || unlinked) && pipe_ends[st.st_ino] != 3) {
        // Only one end is in the checkpoint. That is fine when the other end is closed
        // everywhere (a finished stage of a pipeline): poll on a copy of ours says so.
        // The restore then holds both ends only in the restorer, which closes the unused one.
        ASSIGN_OR_RETURN(UniqueFd copy, proc::CopyFd(pid, info.fd));
        pollfd pfd{copy.get(), 0, 0};
        bool reader = (info.flags & O_ACCMODE) == O_RDONLY;
        bool other_end_gone = ::poll(&pfd, 1, 0) == 1 && (pfd.revents & (reader ? POLLHUP : POLLERR)) != 0;
        if (!other_end_gone) {
          return absl::UnimplementedError(absl::StrFormat(
              "pid %d fd %d is %s (%s) whose other end is held outside the checkpointed process%s; redirect it "
              "to a file, or checkpoint the whole tree that holds both ends (--tree)",
              pid, info.fd, unlinked ? "a FIFO whose name was removed" : "a pipe", info.target,
              pids.size() > 1 ? "es" : ""));
        }
      }
      image::Fd fd = Describe(info, fifo ? image::Fd::FIFO : image::Fd::PIPE);
      fd.set_pipe_id(st.st_ino);
      if (unlinked) {
        fd.set_deleted(true);
        fd.set_path(info.target.substr(0, info.target.size() - 10));
        fd.mutable_saved_file()->set_uid(st.st_uid);
        fd.mutable_saved_file()->set_gid(st.st_gid);
      }
      if (fifo && !unlinked && InScratchSpace(info.target)) {
        // Made again where its name is gone (scratch_files.h), with its owner.
        fd.set_scratch(true);
        fd.mutable_saved_file()->set_uid(st.st_uid);
        fd.mutable_saved_file()->set_gid(st.st_gid);
      }
      if (fifo) {
        fd.set_mode(st.st_mode);
        fd.mutable_file()->set_dev(st.st_dev);
        fd.mutable_file()->set_ino(st.st_ino);
        fd.mutable_file()->set_mtime_ns(st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec);
      }
      if (writer != nullptr && (info.flags & O_ACCMODE) != O_WRONLY && pipe_saved.insert(st.st_ino).second) {
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
    if (absl::StartsWith(info.target, "socket:[")) {
      // One copy of it for all that is asked of it (its owner here, the rest by TreeSockets).
      image::Fd fd = Describe(info, image::Fd::UNIX_SOCKET);
      ASSIGN_OR_RETURN(UniqueFd copy, sockets.CopyOf(pid, info));
      RETURN_IF_ERROR(CaptureOwnerOf(copy.get(), pid, info.fd, pids, &fd));
      RETURN_IF_ERROR(sockets.Capture(pid, info, std::move(copy), writer, &fd));
      if (out != nullptr) *out->add_fds() = std::move(fd);
      continue;
    }
    if (info.target == "anon_inode:[pidfd]") {
      image::Fd fd = Describe(info, image::Fd::PIDFD);
      RETURN_IF_ERROR(CapturePidfd(pids, pid, info, &fd));
      if (out != nullptr) *out->add_fds() = std::move(fd);
      continue;
    }
    if (IsNamespaceTarget(info.target)) {
      image::Fd fd = Describe(info, image::Fd::NAMESPACE);
      RETURN_IF_ERROR(CaptureNamespace(pid, info, &fd));
      if (out != nullptr) *out->add_fds() = std::move(fd);
      continue;
    }
    if (std::optional<image::Fd::Kind> kind = KernelObjectKind(info.target)) {
      image::Fd fd = Describe(info, *kind);
      RETURN_IF_ERROR(CaptureKernelObject(pids, pid, info, all[pi], out != nullptr, &fd));
      if (out != nullptr) *out->add_fds() = std::move(fd);
      continue;
    }
    auto unsupported = [&](absl::string_view kind) {
      return absl::UnimplementedError(absl::StrFormat(
          "pid %d fd %d is %s (%s); checkpoints support regular files, directories, character devices, pipes, "
          "FIFOs, sockets, memfds, eventfd, timerfd, signalfd, epoll and inotify descriptors, pidfds, files of /proc/PID "
          "entries and namespace files of the checkpoint's processes, and dups of these — close it or redirect it to a file "
          "before checkpointing",
          pid, info.fd, kind, info.target));
    };
    if (info.target.empty() || info.target[0] != '/') return unsupported(KindOf(info.target));
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
    if (proc::ProcessEntryPath(path)) {
      fd = Describe(info, image::Fd::PROC_FILE);
      RETURN_IF_ERROR(CaptureProcFile(pids, pid, info, st, &fd));
      if (out != nullptr) *out->add_fds() = std::move(fd);
      continue;
    }
    if (S_ISREG(st.st_mode)) {
      fd.set_kind(image::Fd::REGULAR);
      RETURN_IF_ERROR(CaptureLocks(pids, pid, info, st, &posix_locked, &fd));
      if (st.st_nlink == 0) {
        fd.set_deleted(true);
        if (absl::EndsWith(path, " (deleted)")) path.resize(path.size() - 10);
        if (absl::StartsWith(path, "/memfd:")) {
          fd.set_memfd(true);
          ASSIGN_OR_RETURN(UniqueFd copy, proc::CopyFd(pid, info.fd));
          int seals = ::fcntl(copy.get(), F_GET_SEALS);
          if (seals < 0) return ErrnoStatus(absl::StrFormat("F_GET_SEALS on pid %d fd %d (%s)", pid, info.fd, path));
          fd.set_seals(static_cast<uint32_t>(seals));
        }
        // The content is saved once per file, for descriptors and mapped areas alike.
        if (writer != nullptr && saved_files->insert({st.st_dev, st.st_ino}).second) {
          UniqueFd src(::open(link.c_str(), O_RDONLY | O_CLOEXEC));
          if (!src.valid()) return ErrnoStatus("open deleted file " + link + " (" + path + ")");
          ASSIGN_OR_RETURN(auto blob, writer->AppendSparseFile(src.get(), static_cast<uint64_t>(st.st_size),
                                                               info.target, fd.mutable_saved_file()));
          fd.set_content_offset(blob.offset);
          fd.set_content_size(blob.size);
          fd.set_content_xxh3(blob.xxh3);
        }
      } else if (opts.container_mounts == nullptr && IsScratchFile(path, st)) {  // a container's /tmp is its own
        // A session file of the node's (scratch_files.h): its content goes with the checkpoint.
        fd.set_scratch(true);
        if (writer != nullptr && saved_files->insert({st.st_dev, st.st_ino}).second) {
          UniqueFd src(::open(link.c_str(), O_RDONLY | O_CLOEXEC));
          if (!src.valid()) return ErrnoStatus("open scratch file " + link + " (" + path + ")");
          ASSIGN_OR_RETURN(auto blob, writer->AppendSparseFile(src.get(), static_cast<uint64_t>(st.st_size), path,
                                                               fd.mutable_saved_file()));
          fd.set_content_offset(blob.offset);
          fd.set_content_size(blob.size);
          fd.set_content_xxh3(blob.xxh3);
        }
      }
    } else if (S_ISCHR(st.st_mode) && ::major(st.st_rdev) == 5 && ::minor(st.st_rdev) == 2) {
      fd.set_kind(image::Fd::PTY_MASTER);
      fd.set_rdev(st.st_rdev);
      RETURN_IF_ERROR(CapturePty(pid, info, &fd));
    } else if (S_ISCHR(st.st_mode)) {
      const char* what = StatefulDevice(st.st_rdev, path);
      if (what != nullptr && opts.gpu_processes != nullptr && opts.gpu_processes->count(pid) != 0 &&
          (::major(st.st_rdev) == 195 || absl::StartsWith(path, "/dev/nvidia"))) {
        what = nullptr;  // the driver's to release (devices.h)
      }
      if (what != nullptr) {
        return absl::UnimplementedError(absl::StrFormat(
            "pid %d fd %d is %s (%s), a device whose state lives in the kernel or the hardware and cannot be "
            "saved; opening it again would give the process a different one — close it before checkpointing",
            pid, info.fd, what, path));
      }
      fd.set_kind(image::Fd::CHAR_DEVICE);
      fd.set_rdev(st.st_rdev);
    } else if (S_ISDIR(st.st_mode)) {
      fd.set_kind(image::Fd::DIRECTORY);
    } else if (S_ISLNK(st.st_mode) && (info.flags & O_PATH)) {
      // O_PATH | O_NOFOLLOW on a symlink: opened the same way again (it is checked to be the
      // same link, by device and inode).
      fd.set_kind(image::Fd::REGULAR);
    } else {
      return unsupported("a special file");
    }
    if (absl::EndsWith(path, " (deleted)") && !fd.deleted()) {
      if (!S_ISREG(st.st_mode)) return unsupported("a file whose name was removed but which still has other links");
      RETURN_IF_ERROR(CaptureHandle(pid, info, st, &fd));
      path.resize(path.size() - 10);
    }
    fd.set_path(path);
    if (opts.container_mounts != nullptr && !fd.deleted() && !opts.container_mounts->count(info.mnt_id)) {
      fd.set_outside_container(true);  // its path is the host's (readlink from our root)
    }
    if (out != nullptr) *out->add_fds() = std::move(fd);
  }
  // SIGIO owners, once per description (a socket's were taken with the rest of it).
  auto socket = [](const image::Fd& fd) {
    return fd.kind() == image::Fd::UNIX_SOCKET || fd.kind() == image::Fd::INET_SOCKET;
  };
  if (out != nullptr) {
    for (image::Fd& fd : *out->mutable_fds()) {
      if (!fd.is_dup() && !socket(fd)) RETURN_IF_ERROR(CaptureOwner(pid, fd.fd(), pids, &fd));
    }
  } else {
    for (const proc::FdInfo& info : all[pi]) {
      if (proc::SocketInode(info.target)) continue;
      image::Fd scratch;
      RETURN_IF_ERROR(CaptureOwner(pid, info.fd, pids, &scratch));
    }
  }
  return absl::OkStatus();
  };
  for (size_t pi = 0; pi < pids.size(); ++pi) RETURN_IF_ERROR(capture_process(pi));
  // A checkpoint its restore could not hold (proc/fd_limit.h): refused here, in the check made
  // before anything is frozen, rather than found when the processes are gone.
  if (uint64_t need = proc::DescriptorsToRestore(highest_fd, seen.size(), pipes); need > proc::DescriptorRoom()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the processes hold %d open file descriptions, at descriptor numbers up to %d: restoring them needs %d "
        "descriptors at once, and this machine gives cairn at most %d (hard RLIMIT_NOFILE; fs.nr_open with "
        "CAP_SYS_RESOURCE); raise cairn's hard limit (ulimit -Hn, or LimitNOFILE= in cairnd's unit) to at least %d "
        "here and where it will be restored, or hold fewer descriptors",
        seen.size(), highest_fd, need, proc::DescriptorRoom(), need));
  }
  if (holders.size() > pids.size()) {
    // One at a time, so that a refusal says which queue the descriptor was found in (it names
    // the dumper's copy otherwise).
    std::vector<proc::FdInfo> held_here = std::move(all.back());
    for (const proc::FdInfo& info : held_here) {
      all.back() = {info};
      absl::Status s = capture_process(pids.size());
      if (!s.ok()) {
        return absl::Status(s.code(), absl::StrCat("a descriptor in flight in ", in_flight.FoundIn(info.fd),
                                                   " (sent with SCM_RIGHTS, not received yet; its sender closed its "
                                                   "own, so only the message holds it; below, cairn's copy of it): ",
                                                   s.message()));
      }
    }
    holder_out->set_pid(kInFlightHolder);
  }
  return CheckInFlight(outs, *holder_out, in_flight);
}

absl::Status CheckFdsSupported(const std::vector<pid_t>& pids, const FdOptions& opts) {
  return CaptureFds(pids, opts, nullptr, {}, nullptr, nullptr);
}

}  // namespace cairn::dump
