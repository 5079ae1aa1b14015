#pragma once
// A dump's processes held still in their v1 freezer cgroup while their TCP sockets are in
// repair mode (dump/tcp.h). The dump's ptrace stop alone does not survive the dumper: a
// tracer that dies lets its tracees run at once, and a thread of the program could then find
// its socket in repair mode (a read fails EPERM) before the guardian takes it out. A frozen
// cgroup outlives the dumper: its tasks, let go by the dead tracer, stay in the freezer until
// the guardian has taken the sockets out of repair mode and lifted the network lock, and only
// then thaws it (guardian.h, point 6).
//
// Only for a cgroup that holds exactly the dump's processes (a job of cairnd: DumpOptions::
// freezer_cgroup). Frozen on top of the ptrace stop, so nothing runs between the two.

#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/dump/guardian.h"

namespace cairn::dump {

class FreezerHold {
 public:
  // `cgroup`: the v1 freezer cgroup's directory (e.g. /sys/fs/cgroup/freezer/cairn/NODE.JOB);
  // empty: no cgroup, Freeze and Thaw do nothing.
  explicit FreezerHold(std::string cgroup) : cgroup_(std::move(cgroup)) {}
  // Thaws it if it is still frozen by Freeze.
  ~FreezerHold() { Thaw(); }
  FreezerHold(const FreezerHold&) = delete;
  FreezerHold& operator=(const FreezerHold&) = delete;

  // Journals the cgroup (the guardian thaws it), then freezes it and waits until it is FROZEN
  // (at most 2 s; then it is thawed again and an error says so).
  absl::Status Freeze(GuardJournal& journal);
  // THAWED, if Freeze froze it. The processes stay stopped by the dump until it lets them go.
  // A cgroup its runtime had paused (ThawIfPaused) is FROZEN again instead: the processes go
  // back to being paused as the dump lets them go.
  void Thaw();
  // The cgroup was paused by its runtime and thawed for the dump (ThawPausedCgroup): Thaw
  // freezes it again.
  void AdoptPaused() { paused_ = !cgroup_.empty(); }
  // Whether Thaw pauses the cgroup again (AdoptPaused) rather than thawing it: then it must
  // come before the processes are let go.
  bool PausesAgain() const { return paused_; }
  // Before the processes are killed: a paused cgroup stays thawed (a frozen task does not die).
  void ThawForKill();
  // Leaves it frozen whatever happens now (a hand-off holding the processes: kHeld).
  void Keep() { frozen_ = false; }

 private:
  std::string cgroup_;
  bool frozen_ = false;
  bool paused_ = false;  // ThawIfPaused thawed it: Thaw freezes it again
};

// The threads of a FROZEN cgroup, seized with ptrace and interrupted while it stays frozen, so
// that thawing it lets none of them run any of its own code: a thawed thread with a trap
// pending takes it (a PTRACE_EVENT_STOP) before it returns to user space. A thread in a group
// stop is left alone: seizing it would wait until the cgroup is thawed, and stopped it runs
// nothing anyway. Used from the one thread that traces (ptrace is per thread).
class PausedSeize {
 public:
  PausedSeize() = default;
  // Seizes and interrupts every thread listed in `cgroup`'s tasks file (a seize refused as
  // EPERM, by a dead tracer not yet gone, is tried again for up to `retry_eperm_ms`).
  static absl::StatusOr<PausedSeize> Seize(const std::string& cgroup, int retry_eperm_ms = 0);
  PausedSeize(PausedSeize&& other) noexcept
      : tids_(std::exchange(other.tids_, {})), stopped_(std::exchange(other.stopped_, {})) {}
  PausedSeize& operator=(PausedSeize&& other) noexcept {
    Release({});
    tids_ = std::exchange(other.tids_, {});
    stopped_ = std::exchange(other.stopped_, {});
    return *this;
  }
  ~PausedSeize() { Release({}); }

  const std::set<pid_t>& tids() const { return tids_; }
  // Waits until every seized thread not in `kept` is in its stop (REQUIRES: the cgroup thawed;
  // at most 2 s in all). Then the cgroup may be frozen again and Release let them go there.
  void Collect(const std::set<pid_t>& kept);
  // Lets go of every seized thread not in `kept` (Collect first, for those not yet stopped).
  // `kept` are the caller's now: FrozenProcess::Freeze took them.
  void Release(const std::set<pid_t>& kept);

 private:
  std::set<pid_t> tids_;
  std::map<pid_t, int> stopped_;  // collected: the signal its stop was for (0: its interrupt's); -1: gone
};

// A cgroup its runtime paused before the dump (containerd pauses a task to checkpoint it):
// thawed, so that the processes can be stopped by ptrace and the dump's injected calls run (a
// frozen task does neither); true when it was FROZEN. Its threads are seized first (`seized`,
// PausedSeize), so none runs between the thaw and its ptrace stop. FreezerHold::AdoptPaused then
// pauses them again before they are let go; the journal has it (GuardJournal::PausedThawed) for
// a dumper that dies first.
absl::StatusOr<bool> ThawPausedCgroup(const std::string& cgroup, GuardJournal& journal, PausedSeize* seized);

// The freezer.state of v1 cgroup directory `cgroup` (THAWED, FREEZING, FROZEN); "" if unreadable.
std::string FreezerState(const std::string& cgroup);

// Writes `state` (FROZEN or THAWED) to the freezer.state of v1 cgroup directory `cgroup`.
absl::Status SetFreezerState(const std::string& cgroup, const char* state);
// FROZEN, and waits until the cgroup reports it (at most 2 s; then DeadlineExceeded, the
// cgroup left FREEZING).
absl::Status FreezeCgroup(const std::string& cgroup);

}  // namespace cairn::dump
