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

#include <string>

#include "absl/status/status.h"
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
  // Before the processes are killed: a paused cgroup stays thawed (a frozen task does not die).
  void ThawForKill();
  // Leaves it frozen whatever happens now (a hand-off holding the processes: kHeld).
  void Keep() { frozen_ = false; }

 private:
  std::string cgroup_;
  bool frozen_ = false;
  bool paused_ = false;  // ThawIfPaused thawed it: Thaw freezes it again
};

// A cgroup its runtime paused before the dump (containerd pauses a task to checkpoint it):
// thawed, so that the processes can be stopped by ptrace and the dump's injected calls run (a
// frozen task does neither); true when it was FROZEN. They run for the moment between this and
// their ptrace stop. FreezerHold::AdoptPaused then pauses them again as they are let go; the
// journal has it (GuardJournal::PausedThawed) for a dumper that dies first.
absl::StatusOr<bool> ThawPausedCgroup(const std::string& cgroup, GuardJournal& journal);

// The freezer.state of v1 cgroup directory `cgroup` (THAWED, FREEZING, FROZEN); "" if unreadable.
std::string FreezerState(const std::string& cgroup);

// Writes `state` (FROZEN or THAWED) to the freezer.state of v1 cgroup directory `cgroup`.
absl::Status SetFreezerState(const std::string& cgroup, const char* state);

}  // namespace cairn::dump
