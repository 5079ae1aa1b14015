#include "engine/dump/guardian.h"

#include "engine/dump/freezer_hold.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/status.h"
#include "common/stop_points.h"
#include "engine/dump/devices.h"
#include "engine/dump/freeze.h"
#include "engine/dump/freezer_hold.h"
#include "engine/dump/tracker.h"
#include "engine/inject/ptrace.h"
#include "engine/net/netlock.h"
#include "engine/proc/pidfd.h"
#include "engine/proc/maps.h"

namespace cairn::dump {

absl::StatusOr<int> GuardJournal::AddProcess(pid_t pid, uint64_t start_time) {
  int n = nprocs_.load(std::memory_order_relaxed);
  if (n >= kMaxProcesses) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a checkpoint freezes at most ", kMaxProcesses, " processes (counting pre-copy rounds)"));
  }
  Process& p = procs_[n];
  p.pid = pid;
  p.start_time = start_time;
  p.trampoline_writing.store(0, std::memory_order_relaxed);
  p.trampoline.store(0, std::memory_order_relaxed);
  p.scratch_addr.store(0, std::memory_order_relaxed);
  p.scratch_len = 0;
  // A write tracker made in an earlier freeze of the same process (a pre-copy round).
  int32_t tracker = -1;
  for (int i = n - 1; i >= 0; --i) {
    if (procs_[i].pid != pid) continue;
    tracker = procs_[i].tracker_fd.load(std::memory_order_relaxed);
    break;
  }
  p.tracker_fd.store(tracker, std::memory_order_relaxed);
  p.ncreating.store(0, std::memory_order_relaxed);
  p.thawed.store(0, std::memory_order_relaxed);
  nprocs_.store(n + 1, std::memory_order_release);
  return n;
}

absl::StatusOr<int> GuardJournal::AddThread(int proc, pid_t tid, const user_regs_struct& regs, uint64_t mask) {
  int n = nthreads_.load(std::memory_order_relaxed);
  if (n >= kMaxThreads) {
    return absl::ResourceExhaustedError(absl::StrCat("a checkpoint freezes at most ", kMaxThreads, " threads"));
  }
  Thread& t = threads_[n];
  t.tid = tid;
  t.proc = proc;
  t.mask = mask;
  t.regs = regs;
  t.in_call.store(0, std::memory_order_relaxed);
  nthreads_.store(n + 1, std::memory_order_release);
  return n;
}

void GuardJournal::TrampolineWriting(int proc) { procs_[proc].trampoline_writing.store(1, std::memory_order_release); }
void GuardJournal::TrampolineAt(int proc, uint64_t addr) {
  procs_[proc].trampoline.store(addr, std::memory_order_release);
}
void GuardJournal::ScratchAt(int proc, uint64_t addr, uint64_t len) {
  procs_[proc].scratch_len = len;
  procs_[proc].scratch_addr.store(addr, std::memory_order_release);
}
void GuardJournal::ScratchGone(int proc) {
  procs_[proc].scratch_addr.store(0, std::memory_order_release);
}
void GuardJournal::TrackerCreating(int proc, const std::vector<int>& fds) {
  Process& p = procs_[proc];
  uint32_t n = 0;
  for (int fd : fds) {
    if (n < 2) p.creating_fds[n++] = fd;
  }
  p.ncreating.store(n, std::memory_order_release);
}
void GuardJournal::TrackerCreated(int proc, int fd) {
  procs_[proc].tracker_fd.store(fd, std::memory_order_release);
  procs_[proc].ncreating.store(0, std::memory_order_release);
}
std::vector<pid_t> GuardJournal::Pids() const {
  std::set<pid_t> pids;
  for (int i = 0; i < nprocs_.load(std::memory_order_acquire); ++i) pids.insert(procs_[i].pid);
  return {pids.begin(), pids.end()};
}

absl::Status GuardJournal::DevicesLocking(const std::vector<std::pair<pid_t, uint64_t>>& procs) {
  if (procs.size() > static_cast<size_t>(kMaxDeviceProcesses)) {
    return absl::InvalidArgumentError(absl::StrCat(procs.size(), " processes hold CUDA state; one checkpoint takes at most ",
                                                   kMaxDeviceProcesses));
  }
  for (size_t i = 0; i < procs.size(); ++i) devices_[i] = {procs[i].first, procs[i].second};
  devices_settled_.store(0, std::memory_order_relaxed);
  ndevices_.store(static_cast<int32_t>(procs.size()), std::memory_order_release);
  return absl::OkStatus();
}

std::vector<std::pair<pid_t, uint64_t>> GuardJournal::UnsettledDevices() const {
  std::vector<std::pair<pid_t, uint64_t>> out;
  if (!DevicesUnsettled()) return out;
  for (int i = 0; i < ndevices_.load(std::memory_order_acquire); ++i) {
    out.emplace_back(devices_[i].pid, devices_[i].start_time);
  }
  return out;
}

void GuardJournal::Thawed(int proc) { procs_[proc].thawed.store(1, std::memory_order_release); }

absl::Status GuardJournal::TcpRepairing(pid_t pid, int fd, bool reuseaddr) {
  int n = nrepairs_.load(std::memory_order_relaxed);
  if (n >= kMaxRepairs) {
    return absl::ResourceExhaustedError(absl::StrCat("a checkpoint saves at most ", kMaxRepairs, " TCP connections"));
  }
  repairs_[n] = {pid, fd, reuseaddr ? 1 : 0};
  nrepairs_.store(n + 1, std::memory_order_release);
  return absl::OkStatus();
}

absl::StatusOr<int> GuardJournal::PeekOffsetChanging(pid_t pid, int fd, uint64_t ino, int saved) {
  int n = npeeks_.load(std::memory_order_relaxed);
  if (n >= kMaxPeeks) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a dump looks into unix socket queues at most ", kMaxPeeks, " times (each socket two or three)"));
  }
  peeks_[n].pid = pid;
  peeks_[n].fd = fd;
  peeks_[n].ino = ino;
  peeks_[n].saved = saved;
  peeks_[n].back.store(0, std::memory_order_relaxed);
  npeeks_.store(n + 1, std::memory_order_release);
  return n;
}

void GuardJournal::NetworkLock(const std::string& table, pid_t netns_of) {
  std::snprintf(lock_, sizeof lock_, "%s", table.c_str());
  lock_netns_of_ = netns_of;
  lock_set_.store(table.size() < sizeof lock_ ? 1 : 0, std::memory_order_release);
}

std::string GuardJournal::LockTable() const {
  if (lock_set_.load(std::memory_order_acquire) == 0) return "";
  return std::string(lock_, ::strnlen(lock_, sizeof lock_));
}

void GuardJournal::RepairsEnded() { nrepairs_.store(0, std::memory_order_release); }

void GuardJournal::LockGone() { lock_set_.store(0, std::memory_order_release); }

namespace {

// `cgroup` into a journal field of `size` bytes, then marked set.
absl::Status JournalCgroup(const std::string& cgroup, char* field, size_t size, std::atomic<uint32_t>& set) {
  if (cgroup.size() >= size) {
    return absl::InvalidArgumentError(absl::StrCat("freezer cgroup path too long for the journal: ", cgroup));
  }
  std::snprintf(field, size, "%s", cgroup.c_str());
  set.store(1, std::memory_order_release);
  return absl::OkStatus();
}

}  // namespace

absl::Status GuardJournal::FreezerHeld(const std::string& cgroup) {
  return JournalCgroup(cgroup, freezer_, sizeof freezer_, freezer_set_);
}

absl::Status GuardJournal::PausedThawed(const std::string& cgroup) {
  return JournalCgroup(cgroup, paused_, sizeof paused_, paused_set_);
}

bool GuardJournal::ShareRaising(const std::string& file, const std::string& before) {
  if (file.size() >= sizeof shares_[0].file || before.size() >= sizeof shares_[0].before) return false;
  int slot = nshares_.load(std::memory_order_relaxed);
  if (slot >= static_cast<int>(sizeof shares_ / sizeof shares_[0])) return false;
  std::snprintf(shares_[slot].file, sizeof shares_[slot].file, "%s", file.c_str());
  std::snprintf(shares_[slot].before, sizeof shares_[slot].before, "%s", before.c_str());
  shares_[slot].raised.store(1, std::memory_order_release);
  nshares_.store(slot + 1, std::memory_order_release);
  return true;
}

void GuardJournal::ShareBack(const std::string& file) {
  for (int i = 0; i < nshares_.load(std::memory_order_acquire); ++i) {
    if (file == shares_[i].file) shares_[i].raised.store(0, std::memory_order_release);
  }
}

void GuardJournal::SetCheckpointDir(const std::string& dir, uint64_t dev, uint64_t ino, bool kill_on_commit) {
  dir_dev_ = dev;
  dir_ino_ = ino;
  kill_on_commit_ = kill_on_commit ? 1 : 0;
  std::snprintf(dir_, sizeof dir_, "%s", dir.c_str());
  dir_set_.store(dir.size() + 9 < sizeof dir_ ? 1 : 0, std::memory_order_release);
}

// Undoes, after the dumper's death, what the journal says it changed.
class GuardianRepair {
 public:
  // `live`: the dump's own guardian, right after the dumper died (not a repair found later,
  // RepairOrphanedDumps).
  GuardianRepair(GuardJournal& j, bool live) : j_(j), live_(live) {}

  int Run() {
    auto outcome = static_cast<GuardJournal::Outcome>(j_.outcome_.load(std::memory_order_acquire));
    if (outcome == GuardJournal::Outcome::kDone) return PutSharesBack() == 0 ? 0 : 1;  // (none, as a rule)
    if (outcome == GuardJournal::Outcome::kHold) {
      // Their sockets as the program left them (they may run here again); the lock stays.
      int failures = EndRepairs();
      for (int i = 0; i < j_.nprocs_.load(std::memory_order_acquire); ++i) {
        const GuardJournal::Process& p = j_.procs_[i];
        if (p.trampoline_writing.load(std::memory_order_acquire) == 0 || !SameProcess(p)) continue;
        absl::StatusOr<inject::TrampolineHome> home = inject::FindTrampolineHome(p.pid);
        absl::Status s = home.ok() ? ClearTrampoline(p.pid, *home) : home.status();
        if (!s.ok() && !absl::IsNotFound(s)) {
          ++failures;
          Say(absl::StrCat("could not clear the trampoline of pid ", p.pid, ": ", s.ToString()));
        }
      }
      Say("the dump was handing its processes off: they stay frozen in their freezer cgroup for the daemon to decide");
      return failures == 0 ? 0 : 1;
    }
    // The commit is the rename of DIR.partial to DIR: whether it happened is on disk.
    if (outcome == GuardJournal::Outcome::kRunning && j_.kill_on_commit_ != 0 && Committed()) {
      outcome = GuardJournal::Outcome::kKill;
    }
    int nprocs = j_.nprocs_.load(std::memory_order_acquire);
    if (outcome == GuardJournal::Outcome::kKill) {
      std::set<pid_t> killed;
      for (int i = j_.final_from_.load(std::memory_order_acquire); i < nprocs; ++i) {
        const GuardJournal::Process& p = j_.procs_[i];
        if (!killed.insert(p.pid).second || !SameProcess(p)) continue;
        ::kill(p.pid, SIGKILL);
      }
      ThawFreezer();  // a frozen task dies only once thawed
      Say("the dump had committed its checkpoint: its processes were killed, as it was to do");
      return PutSharesBack() == 0 ? 0 : 1;
    }
    // The dumper's death let its processes go: a cgroup their runtime had paused is paused
    // again at once, its threads seized while it is and then thawed for the repairs (each stops
    // before it runs any of its own code), and it is paused again before they are let go.
    int failures = 0;
    if (live_ && j_.paused_set_.load(std::memory_order_acquire) != 0) failures += HoldPaused();
    failures += EndRepairs() + PutPeekOffsetsBack();
    if (j_.lock_set_.load(std::memory_order_acquire) != 0) {
      absl::Status s = net::RemoveNetworkLock(j_.lock_, j_.lock_netns_of_);
      if (!s.ok()) {
        ++failures;
        Say(s.ToString());
      }
    }
    // Only now may the processes run: their sockets are out of repair mode and unlocked.
    ThawFreezer();
    Ordinary();  // what is left takes its turn with everything else
    RemovePartial();  // (a large directory's removal is no reason to hold the machine)
    // The latest record of each process (pre-copy freezes a process once per round).
    std::map<pid_t, int> latest;
    for (int i = 0; i < nprocs; ++i) latest[j_.procs_[i].pid] = i;
    for (const auto& [pid, i] : latest) {
      if (repairs_blocked_) break;
      absl::Status s = Repair(i);
      if (!s.ok()) {
        ++failures;
        Say(absl::StrCat("could not put pid ", pid, " back as it was: ", s.ToString()));
      }
    }
    failures += Repause();
    failures += PutSharesBack();
    return failures == 0 ? 0 : 1;
  }

 private:
  // Raw write(2): the guardian may be a fork of a threaded daemon, whose stdio lock another
  // thread could have held.
  static void Say(const std::string& what) {
    std::string line = absl::StrCat("cairn dump guardian: ", what, "\n");
    (void)!::write(STDERR_FILENO, line.data(), line.size());
  }

  // The guardian waits at a real-time priority (Urgent): the dumper's death lets its processes
  // go, and what must be put back first (a paused cgroup, sockets in repair mode) is done before
  // anything else on the machine runs. Then an ordinary process again.
  static void Ordinary() {
    struct sched_param none {};
    (void)::sched_setscheduler(0, SCHED_OTHER, &none);
    (void)::setpriority(PRIO_PROCESS, 0, 0);
  }

  // A cgroup its runtime had paused: paused again, its threads seized (PausedSeize) and thawed
  // for the repairs. Returns the number of failures (after one, the repairs seize each process
  // as it runs, and Repause pauses the cgroup at the end).
  int HoldPaused() {
    if (absl::Status s = FreezeCgroup(j_.paused_); !s.ok()) {
      // Left FREEZING, a repair's ptrace stop would never come: thawed, repaired as they run.
      Say(absl::StrCat("could not pause the processes' cgroup again at once: ", s.ToString()));
      (void)SetFreezerState(j_.paused_, "THAWED");
      return 1;
    }
    absl::StatusOr<PausedSeize> seized = PausedSeize::Seize(j_.paused_, /*retry_eperm_ms=*/10000);
    int failures = 0;
    if (seized.ok()) {
      paused_seized_ = std::move(*seized);
    } else {
      ++failures;
      Say(absl::StrCat("could not seize the paused cgroup's threads: ", seized.status().ToString()));
    }
    if (absl::Status s = SetFreezerState(j_.paused_, "THAWED"); !s.ok()) {
      // Frozen, nothing can be repaired (a ptrace stop needs the thread to run): the repairs are
      // skipped and said to have failed; the threads stay paused, as their runtime left them.
      ++failures;
      Say(absl::StrCat("could not thaw the paused cgroup for the repairs: ", s.ToString()));
      repairs_blocked_ = true;
    }
    return failures;
  }

  // A cgroup its runtime had paused is paused again, its processes let go (the runtime still
  // believes it paused) — by the live guardian only: a repair found later would pause a
  // container its runtime has resumed since (containerd resumes after a failed checkpoint).
  // The processes the repairs hold and the threads HoldPaused seized are let go only once it
  // is frozen: they run nothing before their runtime resumes them.
  int Repause() {
    if (!live_ || j_.paused_set_.load(std::memory_order_acquire) == 0) return 0;
    std::set<pid_t> kept;
    for (const FrozenProcess& fp : repaired_) {
      for (const FrozenProcess::ThreadState& t : fp.threads()) kept.insert(t.tid);
    }
    paused_seized_.Collect(kept);
    absl::Status s = FreezeCgroup(j_.paused_);
    paused_seized_.Release(kept);
    int failures = 0;
    for (FrozenProcess& fp : repaired_) {
      if (absl::Status t = fp.Thaw(); !t.ok()) {
        ++failures;
        Say(absl::StrCat("could not let pid ", fp.pid(), " go: ", t.ToString()));
      }
    }
    repaired_.clear();
    if (s.ok()) return failures;
    Say(absl::StrCat("could not pause the processes' cgroup again, as their runtime had: ", s.ToString()));
    return failures + 1;
  }

  // Gives every cpu share the dump raised its value back. Returns the number of failures (a
  // cgroup gone since is none).
  int PutSharesBack() {
    int failures = 0;
    constexpr int kSlots = sizeof j_.shares_ / sizeof j_.shares_[0];
    for (int i = 0; i < std::min(j_.nshares_.load(std::memory_order_acquire), kSlots); ++i) {
      GuardJournal::Share& sh = j_.shares_[i];
      if (sh.raised.load(std::memory_order_acquire) == 0) continue;
      sh.file[sizeof sh.file - 1] = '\0';  // (a journal file found later is read as it is)
      sh.before[sizeof sh.before - 1] = '\0';
      int fd = ::open(sh.file, O_WRONLY | O_CLOEXEC);
      if (fd < 0 && errno == ENOENT) continue;
      size_t len = std::strlen(sh.before);
      bool ok = fd >= 0 && ::write(fd, sh.before, len) == static_cast<ssize_t>(len);
      if (fd >= 0) ::close(fd);
      if (!ok) {
        ++failures;
        Say(absl::StrCat("could not give ", sh.file, " its value ", sh.before, " back"));
        continue;
      }
      sh.raised.store(0, std::memory_order_release);
    }
    return failures;
  }

  void ThawFreezer() {
    if (j_.freezer_set_.load(std::memory_order_acquire) == 0) return;
    absl::Status s = SetFreezerState(j_.freezer_, "THAWED");
    if (!s.ok()) Say(absl::StrCat("could not thaw the processes' freezer cgroup: ", s.ToString()));
  }

  static bool SameProcess(const GuardJournal::Process& p) {
    auto start = ProcessStartTime(p.pid);
    return start.ok() && *start == p.start_time;
  }

  // The directory, if it is still the one the dump created.
  bool IsOurs(const std::string& dir) const {
    struct stat st {};
    return ::lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_dev == j_.dir_dev_ &&
           st.st_ino == j_.dir_ino_;
  }
  bool Committed() const { return j_.dir_set_.load(std::memory_order_acquire) != 0 && IsOurs(j_.dir_); }

  void RemovePartial() {
    if (j_.dir_set_.load(std::memory_order_acquire) == 0) return;
    std::string partial = absl::StrCat(j_.dir_, ".partial");
    if (!IsOurs(partial)) return;
    std::error_code ec;
    std::filesystem::remove_all(partial, ec);
  }

  // Takes every journaled TCP socket out of repair mode, through a copy of its descriptor
  // (the process need not be stopped). Returns the number of failures.
  int EndRepairs() {
    int failures = 0;
    int n = j_.nrepairs_.load(std::memory_order_acquire);
    for (int i = 0; i < n; ++i) {
      const GuardJournal::Repair& r = j_.repairs_[i];
      absl::StatusOr<UniqueFd> copy = proc::CopyFd(r.pid, r.fd);
      if (!copy.ok()) continue;  // the process or its descriptor is gone
      int off = TCP_REPAIR_OFF;
      if (::setsockopt(copy->get(), IPPROTO_TCP, TCP_REPAIR, &off, sizeof off) != 0 ||
          ::setsockopt(copy->get(), SOL_SOCKET, SO_REUSEADDR, &r.reuseaddr, sizeof r.reuseaddr) != 0) {
        ++failures;
        Say(absl::StrCat("could not take pid ", r.pid, " fd ", r.fd, " out of TCP repair mode: ",
                         ErrnoStatus("setsockopt(TCP_REPAIR, off)").ToString()));
      }
    }
    return failures;
  }

  // Gives every journaled unix socket not yet given it back its own peek offset, through a
  // copy of its descriptor. Returns the number of failures.
  int PutPeekOffsetsBack() {
    int failures = 0;
    int n = j_.npeeks_.load(std::memory_order_acquire);
    for (int i = 0; i < n; ++i) {
      const GuardJournal::Peek& p = j_.peeks_[i];
      if (p.back.load(std::memory_order_acquire) != 0) continue;
      absl::StatusOr<UniqueFd> copy = proc::CopyFd(p.pid, p.fd);
      if (!copy.ok()) continue;  // the process or its descriptor is gone
      struct stat st {};
      if (::fstat(copy->get(), &st) != 0 || st.st_ino != p.ino) continue;  // not that socket any more
      if (::setsockopt(copy->get(), SOL_SOCKET, SO_PEEK_OFF, &p.saved, sizeof p.saved) != 0) {
        ++failures;
        Say(absl::StrCat("could not give pid ", p.pid, " fd ", p.fd, " its peek offset back: ",
                         ErrnoStatus("setsockopt(SO_PEEK_OFF)").ToString()));
      }
    }
    return failures;
  }

  // Freezes the process again; the dead tracer's hold goes only once its exit is complete,
  // so a seize refused as EPERM is tried again for a while.
  absl::StatusOr<FrozenProcess> Seize(pid_t pid) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
      absl::StatusOr<FrozenProcess> fp = FrozenProcess::Freeze(pid, nullptr, &paused_seized_.tids());
      if (fp.ok() || !absl::IsPermissionDenied(fp.status()) || std::chrono::steady_clock::now() > deadline) return fp;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  absl::Status Repair(int index) {
    GuardJournal::Process& p = j_.procs_[index];
    uint32_t ncreating = std::min<uint32_t>(p.ncreating.load(std::memory_order_acquire), 2);
    bool tracker = p.tracker_fd.load(std::memory_order_acquire) >= 0 || ncreating > 0;
    bool trampoline = p.trampoline_writing.load(std::memory_order_acquire) != 0;
    if (p.thawed.load(std::memory_order_acquire) != 0 && !tracker) return absl::OkStatus();
    if (!SameProcess(p)) return absl::OkStatus();  // it is gone: nothing to put back
    absl::StatusOr<FrozenProcess> frozen = Seize(p.pid);
    if (absl::IsNotFound(frozen.status())) return absl::OkStatus();
    RETURN_IF_ERROR(frozen.status());
    FrozenProcess& fp = *frozen;
    // Threads inside the trampoline get their registers and mask back.
    inject::Trampoline at = inject::Trampoline::Adopt(p.pid, p.trampoline.load(std::memory_order_acquire));
    uint64_t scratch = p.scratch_addr.load(std::memory_order_acquire);
    int nthreads = j_.nthreads_.load(std::memory_order_acquire);
    for (const FrozenProcess::ThreadState& t : fp.threads()) {
      ASSIGN_OR_RETURN(user_regs_struct regs, inject::GetRegs(t.tid));
      const GuardJournal::Thread* saved = nullptr;
      for (int k = nthreads - 1; k >= 0 && saved == nullptr; --k) {
        if (j_.threads_[k].tid == t.tid && j_.threads_[k].proc == index) saved = &j_.threads_[k];
      }
      if (at.Contains(regs.rip)) {
        if (saved == nullptr) {
          return absl::InternalError(absl::StrCat("thread ", t.tid, " is in the trampoline but not in the journal"));
        }
        RETURN_IF_ERROR(inject::SetSigmask(t.tid, saved->mask));
        RETURN_IF_ERROR(inject::SetRegs(t.tid, saved->regs));
      } else if (saved != nullptr && saved->in_call.load(std::memory_order_acquire) != 0) {
        // Between its mask and its registers, on the way in or out of a call.
        RETURN_IF_ERROR(inject::SetSigmask(t.tid, saved->mask));
      }
    }
    ASSIGN_OR_RETURN(inject::TrampolineHome home, inject::FindTrampolineHome(p.pid));
    if (trampoline) RETURN_IF_ERROR(ClearTrampoline(p.pid, home));
    // What the injected calls made: unmapped and closed with injected calls again.
    int fd = p.tracker_fd.load(std::memory_order_acquire);
    bool scratch_ours = scratch != 0 && IsScratch(p.pid, scratch);
    std::vector<int> made;  // a tracker's creation cut short: the userfaultfds it left
    for (uint32_t k = 0; k < ncreating; ++k) {
      int at = p.creating_fds[k];
      if (at != fd && IsTracker(p.pid, at)) made.push_back(at);
    }
    if (scratch_ours || fd >= 0 || !made.empty()) {
      RETURN_IF_ERROR(fp.InstallTrampoline(home));
      inject::Injector inj = fp.injector(p.pid);
      if (scratch_ours) {
        RETURN_IF_ERROR(inj.Call("munmap scratch", SYS_munmap, scratch, inject::RemoteScratch::kSize).status());
      }
      if (fd >= 0 && IsTracker(p.pid, fd)) {
        RETURN_IF_ERROR(inj.Call("close the write tracker", SYS_close, static_cast<uint64_t>(fd)).status());
      }
      for (int at : made) {
        RETURN_IF_ERROR(inj.Call("close a half-made write tracker", SYS_close, static_cast<uint64_t>(at)).status());
      }
    }
    if (!paused_seized_.tids().empty()) {
      repaired_.push_back(std::move(fp));  // let go once their cgroup is paused again (Repause)
      return absl::OkStatus();
    }
    return fp.Thaw();
  }

  // Zeros over where Trampoline::Install puts its code (where the dumper may have been
  // writing it when it died).
  static absl::Status ClearTrampoline(pid_t pid, const inject::TrampolineHome& home) {
    ASSIGN_OR_RETURN(uint64_t at, inject::Trampoline::Locate(pid, home));
    return inject::Trampoline::ClearIfOurs(pid, at);
  }

  // The area at `addr` is the dump's scratch area (shared anonymous, of its size: see
  // RemoteScratch::Map).
  static bool IsScratch(pid_t pid, uint64_t addr) {
    auto maps = proc::ReadMaps(pid);
    if (!maps.ok()) return false;
    for (const proc::MapEntry& m : *maps) {
      if (m.start == addr) return m.end - m.start == inject::RemoteScratch::kSize && m.path == "/dev/zero (deleted)";
    }
    return false;
  }

  static bool IsTracker(pid_t pid, int fd) {
    char link[256];
    std::string path = absl::StrCat("/proc/", pid, "/fd/", fd);
    ssize_t n = ::readlink(path.c_str(), link, sizeof link - 1);
    return n > 0 && std::string(link, static_cast<size_t>(n)) == "anon_inode:[userfaultfd]";
  }

  GuardJournal& j_;
  bool live_;
  PausedSeize paused_seized_;             // HoldPaused's threads not yet let go
  bool repairs_blocked_ = false;          // HoldPaused could not thaw the cgroup again
  std::vector<FrozenProcess> repaired_;   // repaired, held until Repause
};

// See GuardianRepair::Ordinary. SCHED_FIFO where the cgroup allows real-time tasks; else the
// highest nice.
static void Urgent() {
  struct sched_param rt {};
  rt.sched_priority = 1;
  if (::sched_setscheduler(0, SCHED_FIFO, &rt) != 0) (void)::setpriority(PRIO_PROCESS, 0, -20);
}

int RunGuardian(GuardJournal& journal, int pipe_rd) {
  Urgent();
  char c;
  for (;;) {
    ssize_t n = ::read(pipe_rd, &c, 1);
    if (n == 0) break;
    if (n < 0 && errno != EINTR) break;
  }
  return GuardianRepair(journal, /*live=*/true).Run();
}

std::string JournalDir() {
  const char* env = std::getenv("CAIRN_JOURNAL_DIR");
  return env != nullptr && *env != '\0' ? env : "/run/cairn/dump-journals";
}

namespace {

// The journal directory: what is in it is acted on as root.
absl::StatusOr<UniqueFd> OpenJournalDir(const std::string& dir, bool create) {
  return OpenPrivateDir(dir, create, "the dump journal directory");
}

}  // namespace

absl::StatusOr<std::unique_ptr<Guardian>> Guardian::Start() {
  // The journal: an unnamed file, locked, sized and marked, then linked in under a free name
  // (point 8): a journal found in the directory is always complete.
  std::string dir = JournalDir();
  ASSIGN_OR_RETURN(UniqueFd dirfd, OpenJournalDir(dir, /*create=*/true));
  UniqueFd file(::openat(dirfd.get(), ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (!file.valid()) return ErrnoStatus(absl::StrCat("make the dump's journal in ", dir));
  if (::flock(file.get(), LOCK_EX) != 0) return ErrnoStatus("lock the dump's journal");
  if (::ftruncate(file.get(), sizeof(GuardJournal)) != 0) {
    return ErrnoStatus(absl::StrCat("size the dump's journal in ", dir));
  }
  void* mem = ::mmap(nullptr, sizeof(GuardJournal), PROT_READ | PROT_WRITE, MAP_SHARED, file.get(), 0);
  if (mem == MAP_FAILED) return ErrnoStatus("mmap the dump's journal");
  // Zero bytes are the journal's initial state (every count 0, outcome kRunning): it is not
  // constructed, which would write all of its MiBs; only what is used gets a page.
  static_assert(std::is_trivially_destructible_v<GuardJournal>);
  auto* journal = static_cast<GuardJournal*>(mem);
  journal->magic_ = GuardJournal::kMagic;
  journal->size_ = sizeof(GuardJournal);
  static std::atomic<uint64_t> serial{0};
  std::string name;
  std::string self = absl::StrCat("/proc/self/fd/", file.get());
  for (int tries = 0;; ++tries) {
    name = absl::StrCat("dump-", ::getpid(), "-", serial.fetch_add(1), ".journal");
    if (::linkat(AT_FDCWD, self.c_str(), dirfd.get(), name.c_str(), AT_SYMLINK_FOLLOW) == 0) break;
    if (errno != EEXIST || tries > 1000) {
      absl::Status s = ErrnoStatus(absl::StrCat("link the dump's journal into ", dir));
      ::munmap(mem, sizeof(GuardJournal));
      return s;
    }
  }
  std::string path = absl::StrCat(dir, "/", name);
  // Point 11's fresh cairn, its command line made now: the guardian allocates nothing.
  std::vector<std::string> put_back_args = {"cairn", "gpu-put-back", "--journal", path, "--journal-fd", "4"};
  std::vector<char*> put_back_argv;
  for (std::string& a : put_back_args) put_back_argv.push_back(a.data());
  put_back_argv.push_back(nullptr);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    absl::Status s = ErrnoStatus("pipe for the dump's guardian");
    ::unlink(path.c_str());
    ::munmap(mem, sizeof(GuardJournal));
    return s;
  }
  pid_t pid = ::fork();
  if (pid < 0) {
    absl::Status s = ErrnoStatus("fork the dump's guardian");
    ::close(fds[0]);
    ::close(fds[1]);
    ::unlink(path.c_str());
    ::munmap(mem, sizeof(GuardJournal));
    return s;
  }
  if (pid == 0) {
    // The guardian: nothing but the read end, the journal's file and stdin/out/err, in a
    // session of its own (a terminal's ^C or hangup, or a kill of the dumper's group, does
    // not reach it), deaf to the signals that end the dumper. It may be a fork of a threaded
    // daemon: from here on it touches no lock another thread could have held.
    ::setsid();
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT}) ::signal(sig, SIG_IGN);
    ::prctl(PR_SET_NAME, "cairn-guardian", 0, 0, 0);
    DisableFaultPoints();
    // No logging: an atomic store, where a log call could wait for a lock held at the fork.
    spdlog::default_logger_raw()->set_level(spdlog::level::off);
    ::close(fds[1]);  // wherever it is (fds 0-2 may have been closed)
    // Out of the way of 3 and 4 first, then into them (the same open file descriptions: the
    // journal's lock is shared with the dumper).
    int rd = ::fcntl(fds[0], F_DUPFD, 5);
    int jf = ::fcntl(file.get(), F_DUPFD, 5);
    ::dup2(rd, 3);
    ::dup2(jf, 4);
    ::syscall(SYS_close_range, 5, ~0U, 0);
    int rc = RunGuardian(*journal, 3);
    journal->SetOutcome(GuardJournal::Outcome::kDone);
    if (journal->DevicesUnsettled()) {
      // Point 11: the GPU driver's side is for a fresh cairn, which inherits the journal (fd 4,
      // its lock held) and removes it: this very binary (/proc/self/exe works even once the file
      // was replaced), at an ordinary priority. Without it, the journal stays: an orphan's (8).
      ::close(3);
      struct sched_param none {};
      (void)::sched_setscheduler(0, SCHED_OTHER, &none);
      (void)::setpriority(PRIO_PROCESS, 0, 0);
      ::execv("/proc/self/exe", put_back_argv.data());
      ::_exit(rc == 0 ? 1 : rc);
    }
    // Done: nothing is left for anyone to repair.
    ::unlink(path.c_str());
    ::_exit(rc);
  }
  ::close(fds[0]);
  return std::unique_ptr<Guardian>(new Guardian(journal, file.Release(), fds[1], pid));
}

Guardian::~Guardian() {
  auto t0 = std::chrono::steady_clock::now();
  ::close(pipe_wr_);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  CAIRN_LOG_DEBUG("event=guardian_gone us={:.0f}", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e6);
  ::munmap(journal_, sizeof(GuardJournal));
  ::close(journal_fd_);
}

namespace {

bool IsJournalName(const std::string& name) { return absl::EndsWith(name, ".journal"); }
bool IsFailedJournalName(const std::string& name) { return absl::EndsWith(name, ".journal.failed"); }

// The journal `name` in `dirfd`, locked, if its dumper and guardian are both dead and it is
// still linked there (another cairn may have repaired and removed it meanwhile).
absl::StatusOr<UniqueFd> LockOrphan(int dirfd, const std::string& name) {
  UniqueFd fd(::openat(dirfd, name.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
  if (!fd.valid()) return errno == ENOENT ? absl::NotFoundError(name) : ErrnoStatus(absl::StrCat("open ", name));
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) return absl::UnavailableError(absl::StrCat(name, ": its dump or guardian runs"));
    return ErrnoStatus(absl::StrCat("lock ", name));
  }
  struct stat held {}, named {};
  if (::fstat(fd.get(), &held) != 0) return ErrnoStatus(absl::StrCat("stat ", name));
  if (::fstatat(dirfd, name.c_str(), &named, AT_SYMLINK_NOFOLLOW) != 0 || named.st_ino != held.st_ino ||
      named.st_dev != held.st_dev) {
    return absl::NotFoundError(absl::StrCat(name, ": repaired and removed meanwhile"));
  }
  return fd;
}

}  // namespace

namespace {

// Calls fn(dirfd, name) for each journal in `dir` (none when `dir` does not exist); stops at
// fn's first error.
absl::Status ForEachJournal(const std::string& dir,
                            const std::function<absl::Status(int dirfd, const std::string& name)>& fn,
                            const std::function<bool(const std::string&)>& named = IsJournalName) {
  if (::access(dir.c_str(), F_OK) != 0 && errno == ENOENT) return absl::OkStatus();
  ASSIGN_OR_RETURN(UniqueFd dirfd, OpenJournalDir(dir, /*create=*/false));
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::string name = e.path().filename();
    if (named(name)) RETURN_IF_ERROR(fn(dirfd.get(), name));
  }
  if (ec) return absl::InternalError(absl::StrCat("list ", dir, ": ", ec.message()));
  return absl::OkStatus();
}

// Runs `fn` on the kept journal `name` in `dirfd` (NAME.failed) if it is one of this cairn's and
// no other cairn holds it meanwhile.
void WithKeptJournal(int dirfd, const std::string& name, const std::function<void(GuardJournal&)>& fn) {
  absl::StatusOr<UniqueFd> fd = LockOrphan(dirfd, name);
  if (!fd.ok()) return;
  struct stat st {};
  if (::fstat(fd->get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
      static_cast<uint64_t>(st.st_size) != sizeof(GuardJournal)) {
    return;  // not a journal of this cairn (kept as it was found)
  }
  void* mem = ::mmap(nullptr, sizeof(GuardJournal), PROT_READ | PROT_WRITE, MAP_SHARED, fd->get(), 0);
  if (mem == MAP_FAILED) return;
  auto* j = static_cast<GuardJournal*>(mem);
  if (j->Marked()) fn(*j);
  ::munmap(mem, sizeof(GuardJournal));
}

}  // namespace

absl::StatusOr<std::vector<std::string>> FindOrphanedDumps(const std::string& dir) {
  std::vector<std::string> out;
  RETURN_IF_ERROR(ForEachJournal(dir, [&](int dirfd, const std::string& name) {
    if (LockOrphan(dirfd, name).ok()) out.push_back(name);
    return absl::OkStatus();
  }));
  std::sort(out.begin(), out.end());
  return out;
}

absl::StatusOr<std::vector<std::string>> FailedDevicePutBacks(const std::string& dir) {
  std::vector<std::string> out;
  RETURN_IF_ERROR(ForEachJournal(
      dir,
      [&](int dirfd, const std::string& name) {
        WithKeptJournal(dirfd, name, [&](GuardJournal& j) {
          if (LeftByTheDriver(j)) out.push_back(name);
        });
        return absl::OkStatus();
      },
      IsFailedJournalName));
  std::sort(out.begin(), out.end());
  return out;
}

absl::StatusOr<std::vector<std::string>> NetworkLocksOfRunningDumps(const std::string& dir) {
  std::vector<std::string> out;
  RETURN_IF_ERROR(ForEachJournal(dir, [&](int dirfd, const std::string& name) -> absl::Status {
    UniqueFd fd(::openat(dirfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
    if (!fd.valid()) return absl::OkStatus();  // removed by its guardian meanwhile
    // A dump in progress holds its journal's lock: a shared one is refused. (Taken, it is an
    // orphan's, whose lock is no one's to keep.)
    if (::flock(fd.get(), LOCK_SH | LOCK_NB) == 0 || errno != EWOULDBLOCK) return absl::OkStatus();
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
        static_cast<uint64_t>(st.st_size) != sizeof(GuardJournal)) {
      return absl::OkStatus();
    }
    void* mem = ::mmap(nullptr, sizeof(GuardJournal), PROT_READ, MAP_SHARED, fd.get(), 0);
    if (mem == MAP_FAILED) return ErrnoStatus(absl::StrCat("mmap ", dir, "/", name));
    const auto* j = static_cast<const GuardJournal*>(mem);
    if (j->Marked()) {
      std::string table = j->LockTable();
      if (!table.empty()) out.push_back(std::move(table));
    }
    ::munmap(mem, sizeof(GuardJournal));
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<std::vector<std::string>> RepairOrphanedDumps(const std::string& dir) {
  std::vector<std::string> lines;
  ASSIGN_OR_RETURN(std::vector<std::string> names, FindOrphanedDumps(dir));
  UniqueFd dirfd;
  if (!names.empty()) {
    ASSIGN_OR_RETURN(dirfd, OpenJournalDir(dir, /*create=*/false));
  }
  for (const std::string& name : names) {
    absl::StatusOr<UniqueFd> fd = LockOrphan(dirfd.get(), name);
    if (!fd.ok()) continue;  // taken by another cairn since the listing
    std::string path = absl::StrCat(dir, "/", name);
    struct stat st {};
    if (::fstat(fd->get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
        static_cast<uint64_t>(st.st_size) != sizeof(GuardJournal)) {
      ::renameat(dirfd.get(), name.c_str(), dirfd.get(), absl::StrCat(name, ".failed").c_str());
      lines.push_back(absl::StrCat("dump journal ", path, ": not a journal of this cairn (size ", st.st_size,
                                   "): nothing done, kept as ", name, ".failed"));
      continue;
    }
    void* mem = ::mmap(nullptr, sizeof(GuardJournal), PROT_READ | PROT_WRITE, MAP_SHARED, fd->get(), 0);
    if (mem == MAP_FAILED) return ErrnoStatus(absl::StrCat("mmap ", path));
    auto* j = static_cast<GuardJournal*>(mem);
    std::string what;
    int rc = 0;
    if (!j->Marked()) {
      rc = 1;
      what = "not a journal of this cairn: nothing done";
    } else {
      std::vector<pid_t> pids = j->Pids();
      GuardJournal::Outcome outcome = j->outcome();
      rc = GuardianRepair(*j, /*live=*/false).Run();
      std::vector<std::string> device_lines;
      absl::Status devices = PutBackJournaledDevices(*j, &device_lines);
      if (!devices.ok()) {
        rc = 1;
        device_lines.push_back(devices.ToString());
      }
      for (const std::string& line : device_lines) CAIRN_LOG_WARN("event=orphan_device_put_back what=\"{}\"", line);
      what = absl::StrCat(outcome == GuardJournal::Outcome::kDone ? "the dump had finished"
                                                                  : "its dump and guardian had died",
                          "; processes ", absl::StrJoin(pids, ", "), ": ",
                          rc == 0 ? "done what its guardian would have (put back, or the committed kill finished)"
                                  : "not all put back (the cairn dump guardian lines above say why)");
      j->SetOutcome(GuardJournal::Outcome::kDone);
    }
    ::munmap(mem, sizeof(GuardJournal));
    if (rc == 0) {
      ::unlinkat(dirfd.get(), name.c_str(), 0);
      lines.push_back(absl::StrCat("dump journal ", path, ": ", what));
    } else {
      ::renameat(dirfd.get(), name.c_str(), dirfd.get(), absl::StrCat(name, ".failed").c_str());
      lines.push_back(absl::StrCat("dump journal ", path, ": ", what, "; kept as ", name, ".failed"));
    }
  }
  // GPU processes a failed put-back left to the driver (point 11): tried again every time.
  RETURN_IF_ERROR(ForEachJournal(
      dir,
      [&](int dirfd, const std::string& name) {
        WithKeptJournal(dirfd, name, [&](GuardJournal& j) {
          if (!LeftByTheDriver(j)) return;
          std::vector<std::string> device_lines;
          // (No wait for a dying process: this runs before every dump, cairnd's too.)
          absl::Status s = PutBackJournaledDevices(j, &device_lines, /*just_killed=*/false);
          for (const std::string& line : device_lines) CAIRN_LOG_WARN("event=failed_device_put_back_retried what=\"{}\"", line);
          lines.push_back(absl::StrCat("dump journal ", dir, "/", name, ": its GPU processes ",
                                       s.ok() ? "are put back now (the journal stays, for a person to read)"
                                              : absl::StrCat("are still not put back: ", s.message())));
        });
        return absl::OkStatus();
      },
      IsFailedJournalName));
  return lines;
}

}  // namespace cairn::dump
