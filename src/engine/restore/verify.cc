#include "engine/restore/verify.h"

#include <fcntl.h>
#include <signal.h>
#include <linux/kcmp.h>
#include <linux/filter.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <tuple>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/file_util.h"
#include "common/sockaddr.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "engine/inject/ptrace.h"
#include "engine/image/socket_options.h"
#include "engine/lazy/fuse.h"
#include "engine/proc/fds.h"
#include "engine/proc/maps.h"
#include "engine/proc/pidfd.h"
#include "engine/proc/stat.h"
#include "engine/proc/unix_sockets.h"
#include "engine/restore/file_identity.h"

namespace cairn::restore {
namespace {

// The differences found, as "what: image X, restored Y".
class Findings {
 public:
  template <typename A, typename B>
  void Compare(const std::string& what, const A& image, const B& restored) {
    if (image == restored) return;
    Add(absl::StrFormat("%s: checkpoint %s, restored %s", what, absl::FormatStreamed(image),
                        absl::FormatStreamed(restored)));
  }
  void Add(std::string line) { lines_.push_back(std::move(line)); }
  bool empty() const { return lines_.empty(); }
  const std::vector<std::string>& lines() const { return lines_; }

 private:
  std::vector<std::string> lines_;
};

std::string Hex(uint64_t v) { return absl::StrFormat("%#x", v); }

// ---- memory

// The mapping flags (smaps mnemonics) whose loss or gain changes what the program sees.
constexpr const char* kComparedFlags[] = {"lo", "lf", "dp", "wf", "dc", "dd", "gd", "hg", "nh"};

struct Range {
  uint64_t start = 0, end = 0;
  std::string attrs;  // everything compared, as one string: equal strings merge

  bool operator==(const Range& o) const { return start == o.start && end == o.end && attrs == o.attrs; }
};

std::string Attrs(uint32_t prot, bool shared, const std::string& object, const std::vector<std::string>& flags,
                  bool may_write_matters) {
  std::string a = absl::StrFormat("%c%c%c%c %s", prot & 1 ? 'r' : '-', prot & 2 ? 'w' : '-', prot & 4 ? 'x' : '-',
                                  shared ? 's' : 'p', object);
  for (const char* f : kComparedFlags) {
    if (std::find(flags.begin(), flags.end(), f) != flags.end()) absl::StrAppend(&a, " ", f);
  }
  if (may_write_matters && std::find(flags.begin(), flags.end(), "mw") != flags.end()) absl::StrAppend(&a, " mw");
  return a;
}

// Adjacent ranges with the same attributes are one: the kernel merges (or splits) areas
// with nothing visible to the program.
std::vector<Range> Merge(std::vector<Range> in) {
  std::sort(in.begin(), in.end(), [](const Range& a, const Range& b) { return a.start < b.start; });
  std::vector<Range> out;
  for (Range& r : in) {
    if (!out.empty() && out.back().end == r.start && out.back().attrs == r.attrs) {
      out.back().end = r.end;
    } else {
      out.push_back(std::move(r));
    }
  }
  return out;
}

// Whether any area of the image has a flag verify compares (or is a shared file mapping,
// whose may-write flag is compared). Only then is /proc/PID/smaps read: it walks every page
// table to count the resident pages (about 20 ms per GiB resident), where /proc/PID/maps,
// which has no flags, costs nothing.
bool HasComparedFlags(const image::Process& proc) {
  for (const image::Vma& v : proc.vmas()) {
    if (v.kind() == image::Vma::VDSO || v.kind() == image::Vma::VVAR) continue;
    if (v.kind() == image::Vma::FILE_SHARED) return true;
    for (const char* f : kComparedFlags) {
      if (std::string(f) == "gd") continue;  // the main stack's: not special
      if (std::find(v.vm_flags().begin(), v.vm_flags().end(), f) != v.vm_flags().end()) return true;
    }
  }
  return false;
}

// The device a mapped file has here: on another machine that mounts the same filesystem, that
// machine's own number for it (the restore matched the file by inode, size and modification
// time: file_identity.h); otherwise the checkpoint's.
uint64_t DeviceHere(const image::Vma& v) {
  struct stat st {};
  const image::FileId& id = v.file();
  if (v.path().empty() || v.path()[0] != '/' || ::stat(v.path().c_str(), &st) != 0) return id.dev();
  if (st.st_dev == id.dev() || st.st_ino != id.ino() || !CheckSameFile(st, id, v.path(), true).ok()) return id.dev();
  return st.st_dev;
}

std::vector<Range> ImageRanges(const image::Process& proc, bool flags_too, const VerifyShared& shared) {
  std::vector<Range> out;
  for (const image::Vma& v : proc.vmas()) {
    std::string object;
    switch (v.kind()) {
      case image::Vma::VDSO:
        if (shared.vdso_proxied) {
          out.push_back({v.start(), v.end(), Attrs(/*r-x*/ 5, false, "anonymous", {}, false)});
        }
        continue;  // else the running kernel's own
      case image::Vma::VVAR:
        continue;  // the running kernel's own
      case image::Vma::ANON:
        object = "anonymous";
        break;
      case image::Vma::SHARED_ANON:
        object = "shared-anonymous";
        break;
      case image::Vma::SYSV_SHM:
        object = absl::StrCat("sysv:", v.shmem_id());
        break;
      case image::Vma::AIO_RING:
        object = "aio-ring";
        break;
      case image::Vma::FILE_PRIVATE:
      case image::Vma::FILE_SHARED: {
        uint64_t dev = DeviceHere(v), ino = v.file().ino();
        if (auto made = shared.made_scratch.find({dev, ino}); v.scratch() && made != shared.made_scratch.end()) {
          std::tie(dev, ino) = made->second;  // made again here: the new file
        }
        object = v.file_deleted() ? "deleted-file" : absl::StrFormat("file %d:%d:%d", major(dev), minor(dev), ino);
        break;
      }
      default:
        object = "?";
    }
    std::vector<std::string> flags;
    if (flags_too) flags.assign(v.vm_flags().begin(), v.vm_flags().end());
    out.push_back({v.start(), v.end(),
                   Attrs(v.prot(), v.shared() || v.kind() == image::Vma::FILE_SHARED ||
                                       v.kind() == image::Vma::SHARED_ANON || v.kind() == image::Vma::SYSV_SHM,
                         object, flags, v.kind() == image::Vma::FILE_SHARED)});
  }
  return Merge(std::move(out));
}

std::vector<Range> RestoredRanges(const std::vector<proc::MapEntry>& maps) {
  std::vector<Range> out;
  for (const proc::MapEntry& m : maps) {
    const std::string& p = m.path;
    if (p == "[vdso]" || p == "[vvar]" || p == "[vvar_vclock]" || p == "[vsyscall]") continue;
    std::string object;
    bool file = !p.empty() && p[0] == '/';
    if (absl::StartsWith(p, "/SYSV")) {  // its inode is the segment's id, which may be 0
      object = absl::StrCat("sysv:", m.inode);
    } else if (p == "/[aio] (deleted)") {
      object = "aio-ring";
    } else if (m.inode == 0 || !file) {
      object = "anonymous";
    } else if (m.shared && absl::StartsWith(p, "/dev/zero")) {
      object = "shared-anonymous";
    } else if (absl::EndsWith(p, " (deleted)")) {
      object = "deleted-file";
    } else {
      object = absl::StrFormat("file %d:%d:%d", m.dev_major, m.dev_minor, m.inode);
    }
    bool shared_file = m.shared && (absl::StartsWith(object, "file") || object == "deleted-file");
    out.push_back({m.start, m.end, Attrs(m.prot, m.shared, object, m.vm_flags, shared_file)});
  }
  return Merge(std::move(out));
}

void CompareMemory(const image::Process& proc, pid_t host, const VerifyShared& shared, Findings* f) {
  bool flags_too = HasComparedFlags(proc);
  auto maps = flags_too ? proc::ReadSmaps(host) : proc::ReadMaps(host);
  if (!maps.ok()) {
    f->Add(absl::StrCat("memory: cannot read the areas of /proc/", host, ": ", maps.status().message()));
    return;
  }
  std::vector<Range> want = ImageRanges(proc, flags_too, shared), got = RestoredRanges(*maps);
  // Walk both sorted lists; report each range that is not exactly matched.
  size_t i = 0, j = 0;
  int reported = 0;
  while ((i < want.size() || j < got.size()) && reported < 8) {
    if (i < want.size() && j < got.size() && want[i] == got[j]) {
      ++i, ++j;
      continue;
    }
    if (j >= got.size() || (i < want.size() && want[i].start < got[j].start)) {
      f->Add(absl::StrFormat("memory %#x-%#x: checkpoint '%s', restored %s", want[i].start, want[i].end, want[i].attrs,
                             j < got.size() && got[j].start < want[i].end
                                 ? absl::StrFormat("'%s' at %#x-%#x", got[j].attrs, got[j].start, got[j].end)
                                 : std::string("nothing there")));
      ++i;
    } else if (i >= want.size() || got[j].start < want[i].start) {
      f->Add(absl::StrFormat("memory %#x-%#x: checkpoint has nothing there, restored '%s'", got[j].start, got[j].end,
                             got[j].attrs));
      ++j;
    } else {  // same start, different end or attributes
      f->Add(absl::StrFormat("memory at %#x: checkpoint '%s' to %#x, restored '%s' to %#x", want[i].start,
                             want[i].attrs, want[i].end, got[j].attrs, got[j].end));
      ++i, ++j;
    }
    ++reported;
  }
}

// ---- descriptors

// Access mode and the status flags F_SETFL changes (O_LARGEFILE, which the kernel adds on
// its own, and O_CLOEXEC, compared apart, are left out).
constexpr int kComparedFdFlags = O_ACCMODE | O_APPEND | O_NONBLOCK | O_ASYNC | O_DIRECT | O_NOATIME;

// A timerfd as its fdinfo shows it (reading that has no effect on it): clock, flags and period
// as saved; no more time left than saved (or one period, if it fired since); no fewer
// expirations waiting to be read.
void CompareTimerfd(const std::string& what, const image::TimerfdState& t, const proc::FdInfo& info, Findings* f) {
  auto got = proc::ParseTimerfd(info);
  if (!got.ok()) {
    f->Add(absl::StrCat(what, ": ", got.status().message()));
    return;
  }
  // An absolute expiry on a wall clock is kept as a wall-clock time (and, on a host whose clock
  // is behind, more time is left); other timers are armed again relative to now, so their flags
  // read 0 (restore/files.cc, SetTimerfd).
  bool wall = (t.settime_flags() & TFD_TIMER_ABSTIME) != 0 &&
              (t.clock() == CLOCK_REALTIME || t.clock() == CLOCK_REALTIME_ALARM);
  int flags = wall && t.value_ns() != 0 ? t.settime_flags() & (TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET) : 0;
  f->Compare(what + " clock", t.clock(), got->clock);
  f->Compare(what + " settime flags", flags, got->settime_flags);
  f->Compare(what + " interval (ns)", t.interval_ns(), static_cast<uint64_t>(got->interval_ns));
  if (!wall && static_cast<uint64_t>(got->value_ns) > std::max(t.value_ns(), t.interval_ns())) {
    f->Add(absl::StrFormat("%s time left: checkpoint %d ns, restored %d ns (more than it had)", what, t.value_ns(),
                           got->value_ns));
  }
  // A kernel without TFD_IOC_SET_TICKS gets one unread expiration for several (warned).
  if (got->ticks < std::min<uint64_t>(t.ticks(), 1)) {
    f->Add(absl::StrFormat("%s expirations not yet read: checkpoint %d, restored %d", what, t.ticks(), got->ticks));
  }
}

void CompareFds(const image::Process& proc, pid_t host, const IdMap& ids, const std::vector<proc::FdInfo>& fds,
                Findings* f) {
  std::map<int, const proc::FdInfo*> got;
  for (const proc::FdInfo& info : fds) got[info.fd] = &info;
  std::set<int> expected;
  for (const image::Fd& fd : proc.fds()) {
    expected.insert(fd.fd());
    std::string what = absl::StrFormat("fd %d (%s)", fd.fd(), fd.path());
    auto it = got.find(fd.fd());
    if (it == got.end()) {
      f->Add(what + ": checkpoint has it, restored process does not");
      continue;
    }
    const proc::FdInfo& info = *it->second;
    f->Compare(what + " close-on-exec", fd.cloexec(), (info.flags & O_CLOEXEC) != 0);
    if (fd.is_dup()) {
      pid_t of = ids.Host(fd.dup_of_pid() != 0 ? fd.dup_of_pid() : proc.pid());
      long same = ::syscall(SYS_kcmp, of, host, KCMP_FILE, fd.dup_of(), fd.fd());
      if (same != 0) {
        f->Add(absl::StrFormat("%s: shared its open file description with fd %d of pid %d, restored it does not",
                               what, fd.dup_of(), fd.dup_of_pid() != 0 ? fd.dup_of_pid() : proc.pid()));
      }
      continue;
    }
    f->Compare(what + " flags", absl::StrFormat("%#o", fd.flags() & kComparedFdFlags),
               absl::StrFormat("%#o", info.flags & kComparedFdFlags));
    if (fd.kind() == image::Fd::TIMERFD) CompareTimerfd(what, fd.timerfd(), info, f);
    if (fd.kind() == image::Fd::REGULAR || fd.kind() == image::Fd::PROC_FILE) {
      f->Compare(what + " offset", fd.pos(), info.pos);
      // A file opened by its handle shows whichever of its names the kernel finds.
      if (!fd.deleted() && fd.handle().empty()) f->Compare(what + " file", fd.path(), info.target);
    }
    if (!fd.handle().empty()) {
      struct stat st {};
      std::string link = absl::StrFormat("/proc/%d/fd/%d", host, fd.fd());
      if (::stat(link.c_str(), &st) != 0) {
        f->Add(absl::StrFormat("%s: stat %s: %s", what, link, ErrnoStatus("").message()));
      } else {
        f->Compare(what + " file (device:inode)", absl::StrCat(fd.file().dev(), ":", fd.file().ino()),
                   absl::StrCat(st.st_dev, ":", st.st_ino));
      }
    }
    if (fd.kind() == image::Fd::NAMESPACE) {
      std::error_code ec;
      auto own = std::filesystem::read_symlink(absl::StrFormat("/proc/%d/ns/%s", host, fd.ns_name()), ec);
      f->Compare(what + " namespace (the process's own " + fd.ns_name() + ")", ec ? ec.message() : own.string(),
                 info.target);
    }
  }
  for (const auto& [n, info] : got) {
    if (!expected.count(n)) f->Add(absl::StrFormat("fd %d (%s): restored process has it, checkpoint does not", n, info->target));
  }
}

// ---- file locks

// "FLOCK WRITE 0-EOF owned by pid 1234": a lock as compared; `owner` 0 leaves the owner out.
std::string LockText(absl::string_view kind, bool write, int64_t start, int64_t end, pid_t owner) {
  return absl::StrFormat("%s %s %d-%s%s", kind, write ? "WRITE" : "READ", start,
                         end < 0 ? std::string("EOF") : absl::StrCat(end),
                         owner > 0 ? absl::StrCat(" owned by pid ", owner) : std::string());
}

// The locks each regular file descriptor shows (its description's flock and OFD locks, its
// process's POSIX locks on the file), kind, range and owner, against the image's. Owners are
// host pids on both sides: /proc shows them in the restorer's namespace.
void CompareLocks(const image::Process& proc, pid_t host, const IdMap& ids, const std::set<pid_t>& in_checkpoint,
                  const std::vector<proc::FdInfo>& fds, Findings* f) {
  std::map<int, const proc::FdInfo*> got;
  for (const proc::FdInfo& info : fds) got[info.fd] = &info;
  for (const image::Fd& fd : proc.fds()) {
    if (fd.is_dup() || fd.kind() != image::Fd::REGULAR) continue;
    auto it = got.find(fd.fd());
    if (it == got.end()) continue;  // reported by CompareFds
    // A POSIX lock shows on the open file description it was taken through: the descriptor
    // that recorded it, where restore takes it again.
    std::vector<std::string> want;
    // flock owners compared when the taker is a process of the checkpoint (one that has
    // exited leaves its lock to the restorer).
    bool owners = true;
    for (const image::FileLock& l : fd.locks()) {
      if (l.kind() == image::FileLock::FLOCK) {
        owners = owners && l.pid() != 0 && in_checkpoint.count(l.pid()) > 0;
      }
      // A lease whose taker no longer holds the description is taken by its holder (files.cc).
      if (l.kind() == image::FileLock::LEASE) {
        owners = owners && l.pid() == proc.pid();
      }
    }
    for (const image::FileLock& l : fd.locks()) {
      if (l.kind() == image::FileLock::POSIX) {
        want.push_back(LockText("POSIX", l.write(), l.start(), l.end(), host));
      } else if (l.kind() == image::FileLock::FLOCK) {
        want.push_back(LockText("FLOCK", l.write(), l.start(), l.end(), owners ? ids.Host(l.pid()) : 0));
      } else if (l.kind() == image::FileLock::OFD) {
        want.push_back(LockText("OFD", l.write(), l.start(), l.end(), 0));
      } else if (l.kind() == image::FileLock::LEASE) {
        want.push_back(LockText("LEASE", l.write(), 0, -1, owners ? ids.Host(l.pid()) : 0));
      }
    }
    auto locks = proc::ParseLocks(*it->second);
    if (!locks.ok()) {
      f->Add(absl::StrFormat("fd %d (%s) locks: %s", fd.fd(), fd.path(), locks.status().message()));
      continue;
    }
    std::vector<std::string> have;
    for (const proc::LockInfo& l : *locks) {
      if (l.kind == "FLOCK") have.push_back(LockText("FLOCK", l.write, l.start, l.end, owners ? l.pid : 0));
      else if (l.kind == "OFDLCK") have.push_back(LockText("OFD", l.write, l.start, l.end, 0));
      else if (l.kind == "POSIX") have.push_back(LockText("POSIX", l.write, l.start, l.end, l.pid));
      else if (l.kind == "LEASE") have.push_back(LockText("LEASE", l.write, l.start, l.end, owners ? l.pid : 0));
      else have.push_back(LockText(l.kind, l.write, l.start, l.end, l.pid));
    }
    std::sort(want.begin(), want.end());
    std::sort(have.begin(), have.end());
    f->Compare(absl::StrFormat("fd %d (%s) locks", fd.fd(), fd.path()), "[" + absl::StrJoin(want, "; ") + "]",
               "[" + absl::StrJoin(have, "; ") + "]");
  }
}

// ---- sockets

std::string OptionText(const std::string& bytes) {
  if (bytes.size() == sizeof(int)) {
    int v = 0;
    std::memcpy(&v, bytes.data(), sizeof v);
    return absl::StrCat(v);
  }
  std::string out = "0x";
  for (unsigned char c : bytes) absl::StrAppendFormat(&out, "%02x", c);
  return out;
}

// The address of socket `fd` (or, `peer`, its peer) as text for a comparison.
std::string SocketName(int fd, bool peer) {
  absl::StatusOr<std::string> a = SocketAddress(fd, peer);
  if (!a.ok()) return absl::StrCat("(", a.status().message(), ")");
  return a->empty() ? "(none)" : FormatSockaddr(*a);
}

int IntOption(int fd, int level, int name) { return SocketIntOption(fd, level, name, "").value_or(-1); }

// Reads option `level`/`name` of socket `fd` as text; empty if the socket has no such option.
std::string OptionOf(int fd, int level, int name) {
  char buf[64] = {};
  socklen_t len = sizeof buf;
  if (::getsockopt(fd, level, name, buf, &len) == 0) return OptionText(std::string(buf, len));
  return errno == ENOPROTOOPT || errno == EOPNOTSUPP ? std::string() : absl::StrCat("(", ErrnoStatus("").message(), ")");
}

// Every option of the list the image draws from: the recorded value, or (not recorded) a
// fresh socket's, so that an option set on the restored socket that the program never set is
// caught too.
void CompareOptions(const std::string& what, const image::SocketState& s, int restored, Findings* f) {
  const auto& fresh = image::FreshSocketOptions(s.family(), s.type(), s.protocol());
  std::map<std::pair<int, int>, std::string> recorded;
  for (const image::SocketOption& o : s.options()) recorded[{o.level(), o.name()}] = OptionText(o.value());
  image::ForEachSocketOption(s.family(), s.type(), s.protocol(), [&](const image::SocketOptionSpec& o) {
    // A live TCP connection is bound to its own IPv6 address again, which turns IPV6_V6ONLY on:
    // an established connection does not use it (restore/tcp.h).
    if (s.has_tcp() && o.level == IPPROTO_IPV6 && o.name == IPV6_V6ONLY) return;
    std::string want;
    if (auto it = recorded.find({o.level, o.name}); it != recorded.end()) {
      want = it->second;
    } else if (auto d = fresh.find({o.level, o.name}); d != fresh.end()) {
      want = OptionText(d->second);
    }
    f->Compare(absl::StrCat(what, " ", o.text), want, OptionOf(restored, o.level, o.name));
  });
}

// The inode of the socket that restored process `host` holds as `fd` (0 if none).
uint64_t SocketInode(pid_t host, int fd) {
  struct stat st{};
  return ::stat(absl::StrCat("/proc/", host, "/fd/", fd).c_str(), &st) == 0 ? st.st_ino : 0;
}

// Each socket: family, type and protocol; its name and peer; listening or not; the options
// the image set again; its BPF filter and its lock; for unix sockets, also type, shutdown
// state and, for a connected pair, that its peer is the restored socket of the image's peer.
void CompareSockets(const image::Process& proc, pid_t host, const IdMap& ids,
                    const std::vector<const image::Process*>& procs, VerifyShared* shared, Findings* f) {
  std::optional<std::map<uint64_t, proc::UnixSocket>>& unix_sockets = shared->unix_sockets;
  for (const image::Fd& fd : proc.fds()) {
    if (fd.is_dup() || (fd.kind() != image::Fd::UNIX_SOCKET && fd.kind() != image::Fd::INET_SOCKET)) continue;
    std::string what = absl::StrFormat("fd %d (%s)", fd.fd(), fd.path());
    auto copy = proc::CopyFd(host, fd.fd());
    if (!copy.ok()) {
      f->Add(absl::StrCat(what, ": cannot copy it to compare: ", copy.status().message()));
      continue;
    }
    int c = copy->get();
    if (fd.has_socket() && !fd.socket().reset()) {
      const image::SocketState& s = fd.socket();
      f->Compare(what + " family, type, protocol", absl::StrCat(s.family(), ",", s.type(), ",", s.protocol()),
                 absl::StrCat(IntOption(c, SOL_SOCKET, SO_DOMAIN), ",", IntOption(c, SOL_SOCKET, SO_TYPE), ",",
                              IntOption(c, SOL_SOCKET, SO_PROTOCOL)));
      if (!s.bound().empty()) f->Compare(what + " bound to", FormatSockaddr(s.bound()), SocketName(c, false));
      if (!s.peer().empty()) f->Compare(what + " connected to", FormatSockaddr(s.peer()), SocketName(c, true));
      f->Compare(what + " listening", s.listening(), IntOption(c, SOL_SOCKET, SO_ACCEPTCONN) == 1);
      CompareOptions(what, s, c, f);  // (a live TCP connection's IPV6_V6ONLY: see CompareOptions)
    }
    socklen_t count = 0;
    if (::getsockopt(c, SOL_SOCKET, SO_GET_FILTER, nullptr, &count) != 0) count = 0;
    f->Compare(what + " filter instructions", fd.socket_filter().size() / sizeof(sock_filter), static_cast<size_t>(count));
    if (!fd.socket_filter().empty()) {
      f->Compare(what + " filter locked", fd.filter_locked(), IntOption(c, SOL_SOCKET, SO_LOCK_FILTER) == 1);
    }
    if (fd.kind() != image::Fd::UNIX_SOCKET) continue;
    if (!unix_sockets) {
      auto all = proc::ReadUnixSockets();
      if (!all.ok()) {
        f->Add(absl::StrCat("unix sockets: ", all.status().message()));
        return;
      }
      unix_sockets = std::move(*all);
    }
    auto it = unix_sockets->find(SocketInode(host, fd.fd()));
    if (it == unix_sockets->end()) {
      f->Add(what + ": the kernel does not list the restored socket");
      continue;
    }
    const proc::UnixSocket& us = it->second;
    if (fd.sock_type() != 0) f->Compare(what + " type", fd.sock_type(), us.type);
    f->Compare(what + " shutdown", fd.shutdown(), static_cast<uint32_t>(us.shutdown));
    if (fd.has_socket() && fd.socket().listening()) {
      // The connections it had not accepted: the same clients, in the same order.
      // A client only a message in flight holds is in no process: "in flight" stands for it.
      std::map<uint32_t, std::string> clients;  // position -> restored client inode
      for (const image::Process* p : procs) {
        for (const image::Fd& g : p->fds()) {
          if (!g.is_dup() && g.pending_on() != 0 && g.pending_on() == fd.sock_ino()) {
            clients[g.pending_position()] = absl::StrCat(SocketInode(ids.Host(p->pid()), g.fd()));
          }
        }
      }
      if (shared->in_flight != nullptr) {
        for (const image::Fd& g : shared->in_flight->fds()) {
          if (!g.is_dup() && g.pending_on() != 0 && g.pending_on() == fd.sock_ino()) {
            clients[g.pending_position()] = "in flight";
          }
        }
      }
      std::vector<std::string> want, have;
      for (const auto& [position, ino] : clients) want.push_back(ino);
      for (size_t i = 0; i < us.pending.size(); ++i) {
        bool in_flight = i < want.size() && want[i] == "in flight";
        have.push_back(in_flight ? "in flight" : absl::StrCat(us.pending[i]));
      }
      f->Compare(what + " connections waiting to be accepted (client socket inodes)", absl::StrJoin(want, ","),
                 absl::StrJoin(have, ","));
    }
    if (fd.peer_ino() == 0 || fd.orphaned()) continue;
    uint64_t want_peer = 0;
    std::string peer_what = "(not in the checkpoint)";
    for (const image::Process* p : procs) {
      for (const image::Fd& g : p->fds()) {
        if (g.is_dup() || g.kind() != image::Fd::UNIX_SOCKET || g.sock_ino() != fd.peer_ino()) continue;
        want_peer = SocketInode(ids.Host(p->pid()), g.fd());
        peer_what = absl::StrFormat("the socket of fd %d of pid %d", g.fd(), p->pid());
      }
    }
    bool peer_in_flight = false;
    if (want_peer == 0 && shared->in_flight != nullptr) {
      for (const image::Fd& g : shared->in_flight->fds()) peer_in_flight |= !g.is_dup() && g.sock_ino() == fd.peer_ino();
    }
    if (peer_in_flight) {
      // Its peer is in a queue, not in a process: that it has one is what can be seen.
      if (us.peer == 0) f->Add(what + ": checkpoint connected to a socket in flight (SCM_RIGHTS), restored connected to none");
      continue;
    }
    if (us.peer != want_peer) {
      f->Add(absl::StrFormat("%s: checkpoint connected to %s (restored as socket inode %d), restored connected to "
                             "socket inode %d",
                             what, peer_what, want_peer, us.peer));
    }
  }
}

// ---- the rest of the process

std::string Ids(const google::protobuf::RepeatedField<uint32_t>& v) { return absl::StrJoin(v, ","); }
std::string Ids(const uint32_t* v, int n) { return absl::StrJoin(v, v + n, ","); }

// The controlling terminal and its foreground group, for a process whose session the restore
// rebuilt (its leader is in the checkpoint); others keep whatever session the restorer gave them.
void CompareTerminal(const image::Process& proc, pid_t host, const IdMap& ids, bool session_restored, Findings* f) {
  if (!session_restored) return;
  auto st = proc::ReadStat(host);
  if (!st.ok()) {
    f->Add(absl::StrCat("controlling terminal: cannot read /proc/", host, "/stat: ", st.status().message()));
    return;
  }
  uint64_t got = st->tty_nr != 0 ? proc::TtyDevice(st->tty_nr) : 0;
  f->Compare("controlling terminal (device)", absl::StrFormat("%u:%u", major(proc.ctty()), minor(proc.ctty())),
             absl::StrFormat("%u:%u", major(got), minor(got)));
  if (proc.sid() == proc.pid() && proc.ctty_foreground() != 0) {
    f->Compare("the terminal's foreground process group", static_cast<int64_t>(ids.Host(proc.ctty_foreground())),
               st->tpgid);
  }
}

void CompareProcess(const image::Process& proc, pid_t host, Findings* f) {
  auto st = proc::ReadStatus(host);
  if (!st.ok()) {
    f->Add(absl::StrCat("status: cannot read /proc/", host, "/status: ", st.status().message()));
    return;
  }
  const image::Creds& c = proc.creds();
  if (c.uids_size() == 4) f->Compare("uids (real, effective, saved, fs)", Ids(c.uids()), Ids(st->uid, 4));
  if (c.gids_size() == 4) f->Compare("gids (real, effective, saved, fs)", Ids(c.gids()), Ids(st->gid, 4));
  std::vector<uint32_t> want_groups(c.groups().begin(), c.groups().end()), got_groups(st->groups.begin(), st->groups.end());
  std::sort(want_groups.begin(), want_groups.end());
  std::sort(got_groups.begin(), got_groups.end());
  f->Compare("supplementary groups", absl::StrJoin(want_groups, ","), absl::StrJoin(got_groups, ","));
  f->Compare("effective capabilities", Hex(c.cap_eff()), Hex(st->cap_eff));
  f->Compare("permitted capabilities", Hex(c.cap_prm()), Hex(st->cap_prm));
  f->Compare("inheritable capabilities", Hex(c.cap_inh()), Hex(st->cap_inh));
  f->Compare("bounding capabilities", Hex(c.cap_bnd()), Hex(st->cap_bnd));
  f->Compare("ambient capabilities", Hex(c.cap_amb()), Hex(st->cap_amb));
  f->Compare("no_new_privs", c.no_new_privs(), st->no_new_privs);
  if (st->umask >= 0) f->Compare("umask", absl::StrFormat("%04o", proc.umask()), absl::StrFormat("%04o", st->umask));
  if (st->thp_enabled >= 0) f->Compare("transparent huge pages disabled", proc.thp_disabled(), st->thp_enabled == 0);

  // Signals: ignored and caught as the actions say; pending as saved.
  uint64_t ignored = 0, caught = 0;
  for (const image::SigAction& a : proc.sigactions()) {
    if (a.signo() < 1 || a.signo() > 64) continue;
    uint64_t bit = 1ULL << (a.signo() - 1);
    if (a.handler() == 1) ignored |= bit;
    if (a.handler() > 1) caught |= bit;
  }
  f->Compare("ignored signals", Hex(ignored), Hex(st->sig_ignored));
  f->Compare("caught signals", Hex(caught), Hex(st->sig_caught));

  auto limits = proc::ReadLimits(host);
  if (!limits.ok()) {
    f->Add(absl::StrCat("rlimits: ", limits.status().message()));
  } else {
    for (const image::Rlimit& r : proc.rlimits()) {
      std::string got = "(not shown)";
      if (r.resource() >= 0 && static_cast<size_t>(r.resource()) < limits->size()) {
        const proc::Limit& l = (*limits)[static_cast<size_t>(r.resource())];
        got = absl::StrCat(l.cur, ",", l.max);
      }
      f->Compare(absl::StrCat("rlimit ", r.resource(), " (soft, hard)"), absl::StrCat(r.cur(), ",", r.max()), got);
    }
  }
  auto read_trimmed = [&](const char* name) -> std::string {
    auto text = ReadFile(absl::StrCat("/proc/", host, "/", name));
    return text.ok() ? std::string(absl::StripAsciiWhitespace(*text)) : std::string("(unreadable)");
  };
  if (proc.has_oom_score_adj()) {
    f->Compare("oom_score_adj", absl::StrCat(proc.oom_score_adj()), read_trimmed("oom_score_adj"));
  }
  if (proc.has_loginuid()) f->Compare("loginuid", absl::StrCat(proc.loginuid()), read_trimmed("loginuid"));
  char buf[4096];
  for (const char* link : {"cwd", "root"}) {
    ssize_t n = ::readlink(absl::StrCat("/proc/", host, "/", link).c_str(), buf, sizeof buf);
    std::string got = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "(unreadable)";
    f->Compare(link, std::string(link) == "cwd" ? proc.cwd() : proc.root(), got);
  }

  auto timers = proc::ReadTimers(host);
  if (timers.ok()) {
    std::vector<std::string> want, got;
    for (const image::PosixTimer& t : proc.posix_timers()) {
      want.push_back(absl::StrFormat("id %d clock %d signal %d", t.id(), t.clock(), t.notify() == SIGEV_NONE ? 0 : t.signo()));
    }
    for (const proc::TimerInfo& t : *timers) {
      got.push_back(absl::StrFormat("id %d clock %d signal %d", t.id, t.clock, t.notify == "none" ? 0 : t.signo));
    }
    std::sort(want.begin(), want.end());
    std::sort(got.begin(), got.end());
    f->Compare("POSIX timers", absl::StrJoin(want, "; "), absl::StrJoin(got, "; "));
  }
}

void CompareThreads(const image::Process& proc, pid_t host, const IdMap& ids, Findings* f) {
  std::vector<pid_t> want;
  for (const image::Thread& t : proc.threads()) want.push_back(ids.Host(t.tid()));
  std::sort(want.begin(), want.end());
  auto got = proc::ListTasks(host);
  if (!got.ok()) {
    f->Add(absl::StrCat("threads: cannot list /proc/", host, "/task: ", got.status().message()));
    return;
  }
  f->Compare("threads", absl::StrJoin(want, ","), absl::StrJoin(*got, ","));
  for (const image::Thread& t : proc.threads()) {
    auto mask = inject::GetSigmask(ids.Host(t.tid()));
    if (mask.ok()) f->Compare(absl::StrCat("thread ", t.tid(), " blocked signals"), Hex(t.blocked_mask()), Hex(*mask));
  }
}

}  // namespace

absl::Status VerifyRestored(const image::Process& proc, const std::vector<const image::Process*>& procs,
                            const IdMap& ids, bool session_restored, VerifyShared* shared) {
  pid_t host = ids.Host(proc.pid());
  Findings f;
  CompareTerminal(proc, host, ids, session_restored, &f);
  CompareThreads(proc, host, ids, &f);
  CompareMemory(proc, host, *shared, &f);
  auto fds = proc::ReadFds(host);
  if (fds.ok()) {
    std::erase_if(*fds, [&](const proc::FdInfo& info) { return lazy::IsFuseFd(proc.comm(), info.fd); });
    std::set<pid_t> in_checkpoint;
    for (const image::Process* p : procs) in_checkpoint.insert(p->pid());
    CompareFds(proc, host, ids, *fds, &f);
    CompareLocks(proc, host, ids, in_checkpoint, *fds, &f);
  } else {
    f.Add(absl::StrCat("descriptors: cannot read /proc/", host, "/fd: ", fds.status().message()));
  }
  CompareSockets(proc, host, ids, procs, shared, &f);
  CompareProcess(proc, host, &f);
  if (f.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "--verify: restored pid %d differs from its checkpoint (%d difference%s): %s", proc.pid(), f.lines().size(),
      f.lines().size() == 1 ? "" : "s", absl::StrJoin(f.lines(), "; ")));
}

absl::Status PlantDifferenceForTest(pid_t host_pid) {
  const char* what = std::getenv("CAIRN_VERIFY_PLANT");
  if (what == nullptr || *what == '\0') return absl::OkStatus();
  std::string plant = what;
  if (plant == "oom_score_adj") {
    std::string path = absl::StrCat("/proc/", host_pid, "/oom_score_adj");
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd.valid() || ::write(fd.get(), "777", 3) != 3) return ErrnoStatus("plant: write " + path);
    return absl::OkStatus();
  }
  if (plant == "rlimit") {
    rlimit rl{};
    if (::prlimit(host_pid, RLIMIT_NOFILE, nullptr, &rl) != 0) return ErrnoStatus("plant: prlimit");
    rl.rlim_cur = rl.rlim_cur > 64 ? rl.rlim_cur - 1 : rl.rlim_cur + 1;
    if (::prlimit(host_pid, RLIMIT_NOFILE, &rl, nullptr) != 0) return ErrnoStatus("plant: prlimit");
    return absl::OkStatus();
  }
  if (plant == "fd_flags") {
    // O_NONBLOCK toggled on the process's first descriptor, through a copy of it (same
    // open file description).
    ASSIGN_OR_RETURN(std::vector<proc::FdInfo> fds, proc::ReadFds(host_pid));
    if (fds.empty()) return absl::FailedPreconditionError("plant: the process has no descriptor");
    ASSIGN_OR_RETURN(UniqueFd copy, proc::CopyFd(host_pid, fds.front().fd));
    int flags = ::fcntl(copy.get(), F_GETFL);
    if (flags < 0 || ::fcntl(copy.get(), F_SETFL, flags ^ O_NONBLOCK) != 0) return ErrnoStatus("plant: F_SETFL");
    return absl::OkStatus();
  }
  if (plant == "lock" || plant == "socket_option") {
    // An OFD lock the image does not have, on the first regular file; or SO_KEEPALIVE
    // toggled on the first socket. Both through a copy (the same open file description).
    bool lock = plant == "lock";
    ASSIGN_OR_RETURN(std::vector<proc::FdInfo> fds, proc::ReadFds(host_pid));
    for (const proc::FdInfo& info : fds) {
      if (!absl::StartsWith(info.target, lock ? "/" : "socket:")) continue;
      ASSIGN_OR_RETURN(UniqueFd copy, proc::CopyFd(host_pid, info.fd));
      if (lock) {
        struct stat st{};
        if (::fstat(copy.get(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
        struct flock fl{};
        fl.l_type = (info.flags & O_ACCMODE) == O_RDONLY ? F_RDLCK : F_WRLCK;
        fl.l_whence = SEEK_SET;
        fl.l_start = 1LL << 40;
        fl.l_len = 1;
        if (::fcntl(copy.get(), F_OFD_SETLK, &fl) != 0) return ErrnoStatus("plant: F_OFD_SETLK on " + info.target);
        return absl::OkStatus();
      }
      int on = IntOption(copy.get(), SOL_SOCKET, SO_KEEPALIVE) == 1 ? 0 : 1;
      if (::setsockopt(copy.get(), SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on) != 0) {
        return ErrnoStatus("plant: setsockopt SO_KEEPALIVE on " + info.target);
      }
      return absl::OkStatus();
    }
    return absl::FailedPreconditionError("plant: the process has no " + std::string(lock ? "regular file" : "socket"));
  }
  return absl::InvalidArgumentError("CAIRN_VERIFY_PLANT: unknown object '" + plant + "'");
}

}  // namespace cairn::restore
