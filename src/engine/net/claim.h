#pragma once
// Claims on network locks (netlock.h): who still needs a lock's table. A lock is left in place
// on purpose while its connections are saved or rebuilt (a dump, a restore), and between a dump
// that killed its processes and their restore (a cairnd job stopped by its checkpoint, or held
// for its group); `cairn check --fix`, which removes the locks a killed cairn left behind, must
// leave those alone. Each user claims the table while it needs it: a shared flock on a file
// named after the table in a root-only directory. The claim lasts as long as any process holds
// its descriptor and goes with the last one, so a claimer that dies leaves nothing to clean up.
// The remover takes an exclusive flock without waiting: it gets it only if no one claims the
// table, and holds it while it deletes the table and the file, so that a claim made meanwhile
// waits, finds its file gone, and claims on a new one (then finds no table, or the one it makes).
//
// A dump claims its lock from before it is taken (dump/tcp.h); the claim of one that kills its
// processes goes to its caller (DumpResult::network_claim): `cairn dump` drops it as it exits
// (the lock waits for a `cairn restore`, and check --fix may remove it), cairnd keeps it with
// the job. A restore claims its own lock while it rebuilds the connections, and hands the claim
// of a held one over (RestoreResult::network_claim). A dump's guardian, which outlives its
// dumper, is covered by its journal instead (dump/guardian.h, point 8: check --fix reads the
// tables that live journals name).

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace cairn::net {

// Where the claim files are: /run/cairn/network-locks (a tmpfs, emptied at boot with the tables).
std::string ClaimDir();

// One claim on one table. Copies share it (the last one releases it). Thread-compatible.
class LockClaim {
 public:
  LockClaim() = default;  // no claim

  // Claims `table` (made in `dir` if missing, 0700). Waits only while a remover holds the table
  // (the time of one delete), at most `wait` (then Unavailable, naming the remover: one stopped or
  // hung must not hold a dump, a restore or cairnd). Errors name the file and the call.
  static absl::StatusOr<LockClaim> Take(const std::string& table, const std::string& dir = ClaimDir(),
                                        absl::Duration wait = absl::Seconds(5));

  bool held() const { return state_ != nullptr; }
  const std::string& table() const;
  // Lets go of this copy's share; the file is removed with the last claim on it.
  void Release() { state_.reset(); }

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// Deletes `table` through `remove` unless a live process claims it, holding off new claims
// meanwhile. Returns "" when removed (or `remove`'s error), else who claims it, in words:
// "pid 812 (cairnd)", the process /proc/locks names (the one that first took the claim).
absl::StatusOr<std::string> RemoveUnclaimed(const std::string& table, const std::function<absl::Status()>& remove,
                                      const std::string& dir = ClaimDir());

}  // namespace cairn::net
