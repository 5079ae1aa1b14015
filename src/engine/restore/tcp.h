#pragma once
// Rebuilding the established TCP connections a dump saved with --tcp-established (dump/tcp.h),
// in repair mode (TCP_REPAIR), so that the peer sees no SYN, no reset and no lost byte: the
// socket is bound to the connection's local address (repair mode lets it share the port
// with the listener that accepted it), given both sequence numbers, "connected" without a
// handshake, given the options negotiated at the handshake, its timestamp clock, its queues
// (the bytes sent and not yet acknowledged go back as sent: the kernel retransmits them once
// repair ends; the bytes received and not yet read wait to be read again) and its window.
// Once every process is rebuilt, FinishConnections ends repair mode (a window probe tells
// the peer the connection is alive), sends the bytes that had never been sent, and shuts a
// half-closed connection down on its closed side; the restore then removes the network locks
// (net/netlock.h): the dump's, and its own (RestoreLock).

#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/unique_fd.h"
#include "engine/image/image.h"
#include "engine/net/claim.h"
#include "image.pb.h"

namespace cairn::restore {

// A connection rebuilt in repair mode, to finish once the restore succeeds.
struct RepairedConnection {
  UniqueFd sock;        // a copy of the master, kept after the masters are closed
  std::string unsent;   // written by the program, never sent: sent after repair mode
  bool reuseaddr = false;  // SO_REUSEADDR as the program had it (repair mode forces it)
  int shut = -1;           // half-closed: shutdown(2) once repair ends (SHUT_RD, SHUT_WR)
  std::string where;
};

// The network lock of the restoring host (net/netlock.h): taken before the connections of the
// checkpoint are rebuilt, removed when it goes (on every path out). The dump's lock, on the
// host that was checkpointed, is another table; the restore removes that one too once it has
// succeeded (RemoveDumpLock), where it is on this host.
class RestoreLock {
 public:
  // Takes it when a process of `procs` has a live TCP connection; nullopt otherwise. In the
  // network namespace of process `netns_of` (a restored container's root), or this one's (0).
  static absl::StatusOr<std::optional<RestoreLock>> Take(const image::Checkpoint& meta,
                                                         const std::vector<const image::Process*>& procs,
                                                         pid_t netns_of = 0);
  RestoreLock(RestoreLock&& o) noexcept
      : table_(std::move(o.table_)), claim_(std::move(o.claim_)), netns_of_(o.netns_of_), released_(o.released_) {
    o.table_.clear();
  }
  RestoreLock& operator=(RestoreLock&&) = delete;
  // Removes the lock once Release() was called (the restore succeeded); a failed restore
  // leaves it, so that the peers' packets are dropped until a second restore (which replaces
  // it) or `cairn check --fix`, not answered with resets.
  ~RestoreLock();
  // The connections exist again: the lock may go (restore.cc opens it, then deletes it once the
  // processes run, with the dump's: net/netlock.h).
  void Release() { released_ = true; }
  const std::string& table() const { return table_; }
  // Its table was deleted by the caller: nothing left to remove.
  void Removed() { table_.clear(); }
  // The claim on it (net/claim.h), taken before the table: `cairn check --fix` leaves the lock
  // while a copy is held (RestoreResult::network_claim, for a held one).
  const net::LockClaim& claim() const { return claim_; }
  // Leaves it in place for the caller to lift (RestoreOptions::hold_network); its name.
  std::string Hold() {
    released_ = false;
    return std::exchange(table_, std::string());
  }

 private:
  RestoreLock(std::string table, net::LockClaim claim, pid_t netns_of)
      : table_(std::move(table)), claim_(std::move(claim)), netns_of_(netns_of) {}
  std::string table_;
  net::LockClaim claim_;
  pid_t netns_of_ = 0;
  bool released_ = false;
};

// Takes, before a restore of `meta` starts, the lock that restore takes over its connections
// (RestoreLock::Take: the same table, which the restore then replaces); nothing when the
// checkpoint has no live connection. For a caller that must hold the packets
// first: a migration's destination, before the job's addresses arrive on this host, where a
// client's packet that found no socket yet would be answered with a reset. The caller removes
// the table when the restore fails (a restore that fails leaves its lock: RestoreLock).
// Returns the claim on it (net/claim.h; none without connections) for the caller to hold until
// the restore's own has replaced it.
absl::StatusOr<net::LockClaim> TakeRestoreLockEarly(const image::Checkpoint& meta);
// The table of that lock ("" when the checkpoint has no live connection), for a caller that
// records it before it takes it.
std::string RestoreLockTableFor(const image::Checkpoint& meta);

// A listening socket given SO_REUSEADDR while the restore binds and listens beside the live
// connections bound to its port; `reuseaddr` (the program's) goes back with them.
struct ListenerReuse {
  UniqueFd sock;
  int reuseaddr = 0;
  std::string where;
};

// Rebuilds `fd` (INET_SOCKET with socket.tcp) of `pid`; the socket is left in repair mode.
absl::StatusOr<UniqueFd> RebuildConnection(const image::ImageReader& img, const image::Fd& fd, pid_t pid,
                                           RepairedConnection* out);

// Ends repair mode on each connection and sends what had never been sent; gives the
// listeners their own SO_REUSEADDR back.
absl::Status FinishConnections(const std::vector<RepairedConnection>& conns,
                               const std::vector<ListenerReuse>& listeners);

// A restore that fails: each connection goes back into repair mode, so that closing it sends
// nothing to its peer (no FIN, no reset) and a second restore can rebuild it.
void AbortConnections(const std::vector<RepairedConnection>& conns);

}  // namespace cairn::restore
