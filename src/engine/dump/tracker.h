#pragma once
// Write tracking between checkpoints, for incremental dumps and pre-copy.
//
// A tracker is a userfaultfd created inside the target (so it belongs to the target's
// address space) with the write-protect async feature: its private anonymous areas are
// registered in write-protect mode and protected; a write to a protected page is then
// resolved by the kernel on the spot (the process never waits) and only clears the
// page's protection bit. PAGEMAP_SCAN lists the pages whose bit is clear (PAGE_IS_WRITTEN)
// and, with PM_SCAN_WP_MATCHING, protects them again in the same walk.
//
// Lifetime: closing the last reference to a userfaultfd unregisters its ranges, so the
// tracker must outlive `cairn dump`. It is parked in the target itself, close-on-exec (an
// exec replaces the address space it tracks), at the highest free descriptor in 32..63
// (every descriptor table holds 64, so parking never grows the table, which for a
// multi-threaded process costs an RCU grace period while it is stopped), or else at the
// first free one from min(1000, RLIMIT_NOFILE - 16). A program that later dup2()s onto
// that number closes the tracker: the next dump then falls back to a full one. Dumps recognise it (a userfaultfd with
// the WP_ASYNC feature) and neither save nor restore it. Which image the tracker was last
// synchronised with (protected at) is recorded on the host, in
// $CAIRN_STATE_DIR/tracking/PID (default /var/lib/cairn), with the process's start time so
// that a reused pid is not mistaken for the tracked process.

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"
#include "engine/inject/injector.h"
#include "engine/proc/fds.h"

namespace cairn::dump {

// UFFD_FEATURE_WP_ASYNC (Linux 6.7); Debian 12's headers predate it.
inline constexpr uint64_t kUffdFeatureWpAsync = 1ULL << 15;

// Whether this machine can track writes (a userfaultfd with the write-protect async feature,
// Linux 6.7+), asked on a userfaultfd of this process's own.
bool WriteTrackingAvailable();

// True when `info` (a descriptor of some process) is a cairn write tracker.
bool IsTrackerFd(const proc::FdInfo& info);

// What the host remembers about a process's tracker.
struct TrackerState {
  uint64_t starttime = 0;  // /proc/PID/stat field 22
  std::string image_id;    // the image the tracker was last protected for
  int fd = -1;
};

absl::StatusOr<uint64_t> ProcessStartTime(pid_t pid);
// The state recorded for `pid`, if any and if it is about the same process (start time).
std::optional<TrackerState> LoadTrackerState(pid_t pid);
absl::Status SaveTrackerState(pid_t pid, const TrackerState& state);
void ClearTrackerState(pid_t pid);

// The tracker cairn parked in `pid` and recorded for it (state file: same process, same
// descriptor), or -1. Other tracker-like descriptors are not trusted: a child forked by a
// tracked process inherits its parent's tracker, which tracks the parent's memory. They
// are listed in `strays` for the caller to close.
int RecordedTrackerFd(pid_t pid, std::vector<int>* strays);
// The same from `fds`, `pid`'s descriptors as a caller read them (the fdinfo of its
// userfaultfds at least: ReadFds).
int RecordedTrackerFd(pid_t pid, const std::vector<proc::FdInfo>& fds, std::vector<int>* strays);

class Tracker {
 public:
  // Takes (pidfd_getfd) the tracker parked in `pid` at `remote_fd` and checks it is one.
  static absl::StatusOr<Tracker> Take(pid_t pid, int remote_fd);
  // Creates a tracker in the stopped process `inj` drives and parks it. The caller
  // unparks it with Discard() when the dump fails. `will_use`, if given, is told the
  // descriptor numbers the creation may take before any of them exists (the guardian's
  // journal: a dumper that dies in between leaves no userfaultfd behind, guardian.h).
  static absl::StatusOr<Tracker> Create(inject::Injector& inj,
                                        const std::function<void(const std::vector<int>&)>& will_use = nullptr);

  int remote_fd() const { return remote_fd_; }
  int fd() const { return local_.get(); }

  // Registers [start, end) in write-protect mode. False when the kernel refuses the area
  // (it is then not tracked, and dumped whole next time).
  bool Register(uint64_t start, uint64_t end);
  // Write-protects every page of [start, end) (a registered range).
  absl::Status Protect(uint64_t start, uint64_t end);

  // Closes the parked descriptor in the (stopped) process: tracking ends.
  static absl::Status Discard(inject::Injector& inj, int remote_fd);

 private:
  Tracker(UniqueFd local, int remote_fd) : local_(std::move(local)), remote_fd_(remote_fd) {}
  UniqueFd local_;
  int remote_fd_ = -1;
};

// A run of pages written since the last protection. `present`: the page holds data
// (read it); otherwise it was discarded (MADV_DONTNEED...) and reads as zeros.
struct WrittenRun {
  uint64_t start = 0, len = 0;
  bool present = false;
};

// Lists the pages of [start, end) written since they were last protected and protects
// them again in the same walk (PAGEMAP_SCAN with PM_SCAN_WP_MATCHING). `pagemap_fd` is
// /proc/PID/pagemap. Appends to `out`, merging adjacent runs of the same kind.
absl::Status ScanWritten(int pagemap_fd, uint64_t start, uint64_t end, std::vector<WrittenRun>* out);

// ScanWritten over several areas at once: large areas are cut into chunks scanned by
// parallel threads (a scan walks every page table entry: about 2 ms per GiB, which is
// downtime when the process is frozen). (*out)[i] gets the runs of ranges[i], in order.
absl::Status ScanWrittenParallel(int pagemap_fd, const std::vector<std::pair<uint64_t, uint64_t>>& ranges,
                                 std::vector<std::vector<WrittenRun>>* out);

}  // namespace cairn::dump
