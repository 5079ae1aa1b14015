#include "engine/dump/tracker.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <atomic>
#include <filesystem>
#include <thread>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "common/status.h"
#include "common/stop_points.h"
#include "common/thread_nice.h"
#include "engine/proc/pagemap_scan.h"

namespace cairn::dump {
namespace {

// PAGEMAP_SCAN (engine/proc/pagemap_scan.h)
using proc::PmScanArg;
using proc::PageRegion;
using proc::kPagemapScan;
using proc::kPmScanWpMatching;
using proc::kPmScanCheckWpAsync;
using proc::kPageIsWritten;
using proc::kPageIsPresent;
using proc::kPageIsSwapped;
using proc::kPageIsPfnZero;

constexpr int kParkBase = 1000;
constexpr int kParkLow = 64;
constexpr int kParkLowest = 32;

std::string StateDir() {
  const char* d = std::getenv("CAIRN_STATE_DIR");
  return absl::StrCat(d != nullptr && *d != '\0' ? d : "/var/lib/cairn", "/tracking");
}

std::string StatePath(pid_t pid) { return absl::StrCat(StateDir(), "/", pid); }

// Where a tracker is parked when no descriptor below 64 is free: from 1000, or below the
// process's descriptor limit.
int ParkBase(pid_t pid) {
  struct rlimit lim {};
  int base = kParkBase;
  if (::prlimit(pid, RLIMIT_NOFILE, nullptr, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
    base = static_cast<int>(std::min<rlim_t>(base, lim.rlim_cur > 32 ? lim.rlim_cur - 16 : 3));
  }
  return base;
}

}  // namespace

bool WriteTrackingAvailable() {
  constexpr int kUffdUserModeOnly = 1;
  UniqueFd ufd(static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | kUffdUserModeOnly)));
  if (!ufd.valid()) return false;
  uffdio_api api{};
  api.api = UFFD_API;
  api.features = kUffdFeatureWpAsync;
  return ::ioctl(ufd.get(), UFFDIO_API, &api) == 0;
}

bool IsTrackerFd(const proc::FdInfo& info) {
  if (info.target != "anon_inode:[userfaultfd]") return false;
  for (const auto& [key, val] : info.extra) {
    if (key != "API") continue;
    // "API:\t<api>:<features>:<ioctls>", hexadecimal.
    std::vector<std::string> parts = absl::StrSplit(val, ':');
    uint64_t features = 0;
    return parts.size() == 3 && absl::SimpleHexAtoi(parts[1], &features) && (features & kUffdFeatureWpAsync) != 0;
  }
  return false;
}

int RecordedTrackerFd(pid_t pid, std::vector<int>* strays) {
  // Only a userfaultfd's fdinfo says whether it is a tracker: the rest cost a readlink each.
  auto fds = proc::ReadFds(pid, [](absl::string_view target) { return target == "anon_inode:[userfaultfd]"; });
  return fds.ok() ? RecordedTrackerFd(pid, *fds, strays) : -1;
}

int RecordedTrackerFd(pid_t pid, const std::vector<proc::FdInfo>& fds, std::vector<int>* strays) {
  std::optional<TrackerState> st = LoadTrackerState(pid);
  int found = -1;
  for (const proc::FdInfo& info : fds) {
    if (!IsTrackerFd(info)) continue;
    if (st && st->fd == info.fd) {
      found = info.fd;
    } else {
      strays->push_back(info.fd);
    }
  }
  return found;
}

absl::StatusOr<uint64_t> ProcessStartTime(pid_t pid) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(absl::StrCat("/proc/", pid, "/stat")));
  size_t close = text.rfind(')');
  if (close == std::string::npos) return absl::DataLossError(absl::StrCat("malformed /proc/", pid, "/stat"));
  // Fields after comm start at field 3 (state); starttime is field 22.
  std::vector<absl::string_view> f = absl::StrSplit(absl::string_view(text).substr(close + 2), ' ');
  uint64_t start = 0;
  if (f.size() < 20 || !absl::SimpleAtoi(f[19], &start)) {
    return absl::DataLossError(absl::StrCat("malformed /proc/", pid, "/stat"));
  }
  return start;
}

std::optional<TrackerState> LoadTrackerState(pid_t pid) {
  auto text = ReadFile(StatePath(pid));
  if (!text.ok()) return std::nullopt;
  std::vector<std::string> f = absl::StrSplit(absl::StripAsciiWhitespace(*text), ' ');
  TrackerState st;
  if (f.size() != 3 || !absl::SimpleAtoi(f[0], &st.starttime) || !absl::SimpleAtoi(f[2], &st.fd)) return std::nullopt;
  st.image_id = f[1];
  auto now = ProcessStartTime(pid);
  if (!now.ok() || *now != st.starttime) return std::nullopt;
  return st;
}

absl::Status SaveTrackerState(pid_t pid, const TrackerState& state) {
  std::error_code ec;
  std::filesystem::create_directories(StateDir(), ec);
  // Records of processes that are gone are dropped on the way.
  for (const auto& entry : std::filesystem::directory_iterator(StateDir(), ec)) {
    int other = 0;
    std::string name = entry.path().filename().string();
    if (absl::SimpleAtoi(name, &other) && other > 0 && !LoadTrackerState(other)) {
      std::error_code rm;
      std::filesystem::remove(entry.path(), rm);
    }
  }
  if (ec) return absl::InternalError(absl::StrCat("create ", StateDir(), ": ", ec.message()));
  std::string path = StatePath(pid);
  std::string tmp = path + ".tmp";
  UniqueFd f(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!f.valid()) return ErrnoStatus("create " + tmp);
  RETURN_IF_ERROR(WriteAll(f.get(), absl::StrFormat("%d %s %d\n", state.starttime, state.image_id, state.fd), tmp));
  if (::fsync(f.get()) != 0) return ErrnoStatus("fsync " + tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoStatus("rename " + tmp);
  return absl::OkStatus();
}

void ClearTrackerState(pid_t pid) { ::unlink(StatePath(pid).c_str()); }

absl::StatusOr<Tracker> Tracker::Take(pid_t pid, int remote_fd) {
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!pidfd.valid()) return ErrnoStatus(absl::StrCat("pidfd_open ", pid));
  UniqueFd local(static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd.get(), remote_fd, 0)));
  if (!local.valid()) return ErrnoStatus(absl::StrCat("take the write tracker (fd ", remote_fd, ") of pid ", pid));
  return Tracker(std::move(local), remote_fd);
}

absl::StatusOr<Tracker> Tracker::Create(inject::Injector& inj,
                                        const std::function<void(const std::vector<int>&)>& will_use) {
  pid_t pid = inj.tid();
  // Park it at the highest free descriptor below 64: every descriptor table has room for
  // 64, so the table does not grow (growing the table of a multi-threaded process waits
  // for an RCU grace period, milliseconds while the process is stopped). Above 1000 when
  // none is free there.
  std::set<int> used;
  auto fds = proc::ListFdTargets(pid);  // the numbers alone
  if (fds.ok()) {
    for (const auto& [fd, target] : *fds) used.insert(fd);
  }
  int target = -1;
  for (int fd = kParkLow - 1; fd >= kParkLowest && fds.ok(); --fd) {
    if (!used.count(fd)) {
      target = fd;
      break;
    }
  }
  // The numbers it will take, the process being stopped: userfaultfd() the lowest free one,
  // and the park `target` (or the lowest free one from the base).
  if (will_use != nullptr && fds.ok()) {
    auto lowest_free = [&used](int from, int except) {
      int fd = from;
      while (used.count(fd) != 0 || fd == except) ++fd;
      return fd;
    };
    int created = lowest_free(0, -1);
    will_use({created, target >= 0 ? target : lowest_free(ParkBase(pid), created)});
  }
  FaultPoint("tracker_creating");
  // A process without CAP_SYS_PTRACE may only make a userfaultfd limited to faults from user
  // mode (vm.unprivileged_userfaultfd=0). That is enough here: in write-protect async mode no
  // fault reaches the descriptor, the kernel resolves them all itself.
  constexpr uint64_t kUffdUserModeOnly = 1;  // UFFD_USER_MODE_ONLY, Linux 5.11+
  ASSIGN_OR_RETURN(long ufd, inj.Raw(SYS_userfaultfd, {O_CLOEXEC | O_NONBLOCK}));
  if (ufd == -EPERM) {
    ASSIGN_OR_RETURN(ufd, inj.Raw(SYS_userfaultfd, {O_CLOEXEC | O_NONBLOCK | kUffdUserModeOnly}));
  }
  ASSIGN_OR_RETURN(ufd, inject::SyscallResult("userfaultfd", inj.tid(), ufd));
  FaultPoint("tracker_created");
  // The API at once, on a copy (the state is the file's): until then the new descriptor looks
  // like a userfaultfd of the program's own, which the next dump could neither discard as a
  // stray tracker nor save, had this dumper died here. From here on it is a tracker.
  {
    absl::StatusOr<Tracker> early = Take(pid, static_cast<int>(ufd));
    uffdio_api api{};
    api.api = UFFD_API;
    api.features = kUffdFeatureWpAsync;
    if (!early.ok() || ::ioctl(early->fd(), UFFDIO_API, &api) != 0) {
      absl::Status s = early.ok() ? ErrnoStatus("UFFDIO_API with UFFD_FEATURE_WP_ASYNC (Linux 6.7 or later is needed)")
                                  : early.status();
      (void)Discard(inj, static_cast<int>(ufd));
      return s;
    }
  }
  absl::StatusOr<long> parked;
  if (target >= 0) {
    parked = inj.Call("park the write tracker", SYS_dup3, static_cast<uint64_t>(ufd), static_cast<uint64_t>(target),
                      O_CLOEXEC);
  } else {
    parked = inj.Call("park the write tracker", SYS_fcntl, static_cast<uint64_t>(ufd), F_DUPFD_CLOEXEC,
                      static_cast<uint64_t>(ParkBase(pid)));
  }
  (void)inj.Call("close userfaultfd", SYS_close, static_cast<uint64_t>(ufd));
  if (!parked.ok()) return parked.status();
  int remote = static_cast<int>(*parked);
  auto t = Take(pid, remote);
  if (!t.ok()) {
    (void)Discard(inj, remote);
    return t.status();
  }
  return t;
}

bool Tracker::Register(uint64_t start, uint64_t end) {
  uffdio_register reg{};
  reg.range.start = start;
  reg.range.len = end - start;
  reg.mode = UFFDIO_REGISTER_MODE_WP;
  return ::ioctl(local_.get(), UFFDIO_REGISTER, &reg) == 0;
}

absl::Status Tracker::Protect(uint64_t start, uint64_t end) {
  uffdio_writeprotect wp{};
  wp.range.start = start;
  wp.range.len = end - start;
  wp.mode = UFFDIO_WRITEPROTECT_MODE_WP;
  while (::ioctl(local_.get(), UFFDIO_WRITEPROTECT, &wp) != 0) {
    if (errno == EAGAIN || errno == EINTR) continue;
    return ErrnoStatus(absl::StrFormat("UFFDIO_WRITEPROTECT %#x-%#x", start, end));
  }
  return absl::OkStatus();
}

absl::Status Tracker::Discard(inject::Injector& inj, int remote_fd) {
  return inj.Call("close the write tracker", SYS_close, static_cast<uint64_t>(remote_fd)).status();
}

absl::Status ScanWritten(int pagemap_fd, uint64_t start, uint64_t end, std::vector<WrittenRun>* out) {
  PmScanArg arg{};
  arg.size = sizeof arg;
  arg.flags = kPmScanWpMatching | kPmScanCheckWpAsync;
  arg.category_mask = kPageIsWritten;
  arg.return_mask = kPageIsWritten | kPageIsPresent | kPageIsSwapped | kPageIsPfnZero;
  // A guard marker reads as written and swapped, but holds nothing to copy (and reading it
  // fails): left out as not present. The area's guards are recorded with it (RecordGuards).
  if (proc::PagemapKnowsGuards()) arg.return_mask |= proc::kPageIsGuard;
  std::vector<PageRegion> regions(1024);
  for (uint64_t addr = start; addr < end;) {
    arg.start = addr;
    arg.end = end;
    arg.vec = reinterpret_cast<uint64_t>(regions.data());
    arg.vec_len = regions.size();
    long n = ::ioctl(pagemap_fd, kPagemapScan, &arg);
    if (n < 0) return ErrnoStatus(absl::StrFormat("PAGEMAP_SCAN (written pages) %#x-%#x", addr, end));
    for (long k = 0; k < n; ++k) {
      const PageRegion& r = regions[static_cast<size_t>(k)];
      bool present = (r.categories & (kPageIsPresent | kPageIsSwapped)) != 0 &&
                     (r.categories & (kPageIsPfnZero | proc::kPageIsGuard)) == 0;
      if (!out->empty() && out->back().present == present && out->back().start + out->back().len == r.start) {
        out->back().len += r.end - r.start;
      } else {
        out->push_back({r.start, r.end - r.start, present});
      }
    }
    if (arg.walk_end <= addr) break;
    addr = arg.walk_end;
  }
  return absl::OkStatus();
}

}  // namespace cairn::dump

namespace cairn::dump {

absl::Status ScanWrittenParallel(int pagemap_fd, const std::vector<std::pair<uint64_t, uint64_t>>& ranges,
                                 std::vector<std::vector<WrittenRun>>* out) {
  constexpr uint64_t kChunk = 256ull << 20;
  struct Task {
    size_t range;
    uint64_t start, end;
    std::vector<WrittenRun> runs;
    absl::Status status;
  };
  std::vector<Task> tasks;
  for (size_t i = 0; i < ranges.size(); ++i) {
    for (uint64_t a = ranges[i].first; a < ranges[i].second; a += kChunk) {
      tasks.push_back({i, a, std::min(a + kChunk, ranges[i].second), {}, {}});
    }
  }
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t t; (t = next.fetch_add(1)) < tasks.size();) {
      tasks[t].status = ScanWritten(pagemap_fd, tasks[t].start, tasks[t].end, &tasks[t].runs);
    }
  };
  size_t threads = std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()), 8);
  threads = std::min(threads, tasks.size());
  std::vector<std::thread> pool;
  const int nice = ThreadNice::Current();  // the helpers scan at the dump's priority (thread_nice.h)
  for (size_t i = 1; i < threads; ++i) {
    pool.emplace_back([&worker, nice] {
      ThreadNice same(nice);
      worker();
    });
  }
  worker();
  for (auto& t : pool) t.join();
  out->assign(ranges.size(), {});
  for (Task& t : tasks) {
    RETURN_IF_ERROR(t.status);
    std::vector<WrittenRun>& dst = (*out)[t.range];
    for (const WrittenRun& r : t.runs) {
      if (!dst.empty() && dst.back().present == r.present && dst.back().start + dst.back().len == r.start) {
        dst.back().len += r.len;
      } else {
        dst.push_back(r);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace cairn::dump
