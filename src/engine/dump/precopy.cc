#include "engine/dump/precopy.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/thread_nice.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "engine/dump/freeze.h"
#include "engine/dump/tracker.h"
#include "engine/inject/injector.h"
#include "engine/proc/maps.h"

namespace cairn::dump {
namespace {

using Clock = std::chrono::steady_clock;

bool Tracked(const image::Vma& v) {
  return v.kind() == image::Vma::ANON &&
         std::find(v.vm_flags().begin(), v.vm_flags().end(), "uw") != v.vm_flags().end();
}

// Step 1: starts (or restarts) the write tracker of `pid` and protects every private
// anonymous area. Only creating the tracker needs the process stopped (a userfaultfd
// belongs to the address space of the task that creates it); registering and protecting
// act on that address space from here while the process runs: a page written before its
// protection is copied by round 1 after it, so no write is missed. Returns how long the
// process was stopped.
absl::StatusOr<double> StartTracking(pid_t pid, GuardJournal* journal, int* tracker_fd) {
  ASSIGN_OR_RETURN(std::vector<proc::MapEntry> maps, proc::ReadSmaps(pid));
  ASSIGN_OR_RETURN(std::vector<image::Vma> vmas, DescribeAreas(pid, maps));
  std::vector<int> strays;
  int fd = RecordedTrackerFd(pid, &strays);
  double stopped = 0;
  std::optional<Tracker> tracker;
  if (fd >= 0 && strays.empty()) {
    ASSIGN_OR_RETURN(Tracker t, Tracker::Take(pid, fd));
    tracker.emplace(std::move(t));
  } else {
    auto t0 = Clock::now();
    ASSIGN_OR_RETURN(FrozenProcess fp, FrozenProcess::Freeze(pid, journal));
    ASSIGN_OR_RETURN(inject::TrampolineHome home, inject::FindTrampolineHome(pid));  // its layout, frozen
    RETURN_IF_ERROR(fp.InstallTrampoline(home));
    auto t1 = Clock::now();
    inject::Injector inj = fp.injector(pid);
    absl::StatusOr<Tracker> t = absl::UnknownError("");
    absl::Status closed;
    for (int stray : strays) {
      if (closed.ok()) closed = Tracker::Discard(inj, stray);
    }
    if (closed.ok() && fd >= 0) {
      t = Tracker::Take(pid, fd);
    } else if (closed.ok()) {
      int index = fp.journal_index();
      t = Tracker::Create(inj, [journal, index](const std::vector<int>& fds) {
        if (journal != nullptr) journal->TrackerCreating(index, fds);
      });
      if (journal != nullptr) journal->TrackerCreated(index, t.ok() ? t->remote_fd() : -1);
    } else {
      t = closed;
    }
    auto t2 = Clock::now();
    RETURN_IF_ERROR(fp.Thaw());
    CAIRN_LOG_DEBUG("event=start_tracking pid={} freeze_ms={:.2f} create_ms={:.2f} thaw_ms={:.2f}", pid,
                    std::chrono::duration<double>(t1 - t0).count() * 1e3, std::chrono::duration<double>(t2 - t1).count() * 1e3,
                    std::chrono::duration<double>(Clock::now() - t2).count() * 1e3);
    stopped = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!t.ok()) return Annotate(t.status(), "start tracking writes");
    tracker.emplace(std::move(*t));
  }
  ClearTrackerState(pid);  // whatever image it was in sync with, it no longer is
  *tracker_fd = tracker->remote_fd();
  for (const image::Vma& v : vmas) {
    if (v.kind() != image::Vma::ANON) continue;
    bool uw = std::find(v.vm_flags().begin(), v.vm_flags().end(), "uw") != v.vm_flags().end();
    if (!uw && !tracker->Register(v.start(), v.end())) continue;  // not trackable (or gone): copied while frozen
    // An area unmapped meanwhile cannot be protected; it is not copied either.
    absl::Status st = tracker->Protect(v.start(), v.end());
    // "uw" named a stray tracker's registration, closed above: register it with this one.
    if (absl::IsNotFound(st) && uw && tracker->Register(v.start(), v.end())) st = tracker->Protect(v.start(), v.end());
    if (!st.ok()) CAIRN_LOG_DEBUG("event=protect_failed pid={} error=\"{}\"", pid, st.ToString());
  }
  return stopped;
}

}  // namespace

absl::StatusOr<PreCopied> PreCopy(pid_t pid, image::ImageWriter& writer, const PreCopyOptions& opts,
                                  const ProgressFn& progress) {
  PreCopied out;
  ASSIGN_OR_RETURN(out.start_freeze_seconds, StartTracking(pid, opts.journal, &out.tracker_fd));
  // The bulk copy runs behind everything else (nice 19, with the writer threads it starts): on a
  // machine with few cores, copying at normal priority would take CPU time from the process,
  // which then sees the pre-copy as stalls.
  ThreadNice low(ThreadNice::kBackground);
  std::string path = absl::StrCat("/proc/", pid, "/pagemap");
  UniqueFd pm(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!pm.valid()) return ErrnoStatus("open " + path);
  for (int round = 1; round <= std::max(1, opts.max_rounds); ++round) {
    ASSIGN_OR_RETURN(std::vector<proc::MapEntry> maps, proc::ReadSmaps(pid));
    ASSIGN_OR_RETURN(std::vector<image::Vma> all, DescribeAreas(pid, maps));
    out.last_maps = maps;
    std::vector<image::Vma> vmas;
    for (auto& v : all) {
      if (Tracked(v)) vmas.push_back(std::move(v));
    }
    std::set<uint64_t> no_shmem;
    WrittenPages written;
    uint64_t found = 0;
    if (round > 1) {
      for (size_t i = 0; i < vmas.size(); ++i) {
        RETURN_IF_ERROR(ScanWritten(pm.get(), vmas[i].start(), vmas[i].end(), &written[i]));
        for (const WrittenRun& r : written[i]) found += r.len;
      }
      out.written_per_round.push_back(found);
    }
    // Rounds copy at most `rate_bytes` per second: copying (and the writeback of what it
    // writes) at full speed stalls the process on a small machine.
    auto round_start = Clock::now();
    ProgressFn paced = [&](uint64_t done, uint64_t total) {
      if (progress) progress(done, total);
      if (opts.rate_bytes == 0) return;
      auto due = round_start + std::chrono::duration<double>(static_cast<double>(done) / static_cast<double>(opts.rate_bytes));
      std::this_thread::sleep_until(due);
    };
    ASSIGN_OR_RETURN(MemoryStats m, DumpPages(pid, vmas, writer, paced, &no_shmem,
                                              round > 1 ? &written : nullptr, &out.unread));
    for (const image::Vma& v : vmas) {
      for (const image::PageBlock& b : v.blocks()) out.blocks.push_back(b);
    }
    out.bytes += m.bytes;
    out.rounds = round;
    CAIRN_LOG_DEBUG("event=precopy_round pid={} round={} written_bytes={} copied_bytes={}", pid, round, found, m.bytes);
    // Only the bulk copy of round 1 runs at low priority: starved on a busy machine, the
    // short later rounds would never catch up with the writes.
    low.End();
    if (round > 1 && found <= opts.small_bytes) break;
    // Not converging (the process writes about as fast as the rounds copy): freeze now.
    if (round > 2 && found * 10 > out.written_per_round[out.written_per_round.size() - 2] * 9) break;
  }
  return out;
}

}  // namespace cairn::dump
