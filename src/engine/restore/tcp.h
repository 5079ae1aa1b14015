#pragma once
// Rebuilding the established TCP connections a dump saved with --tcp-established (dump/tcp.h),
// in repair mode (TCP_REPAIR), so that the peer sees no SYN, no reset and no lost byte: the
// socket is bound to the connection's local address (repair mode lets it share the port
// with the listener that accepted it), given both sequence numbers, "connected" without a
// handshake, given the options negotiated at the handshake, its timestamp clock, its queues
// (the bytes sent and not yet acknowledged go back as sent: the kernel retransmits them once
// repair ends; the bytes received and not yet read wait to be read again) and its window.
// Once every process is rebuilt, FinishConnections ends repair mode (a window probe tells
// the peer the connection is alive), sends the bytes that had never been sent, and removes
// the network lock the dump left (net/netlock.h).

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/unique_fd.h"
#include "engine/image/image.h"
#include "image.pb.h"

namespace cairn::restore {

// A connection rebuilt in repair mode, to finish once the restore succeeds.
struct RepairedConnection {
  UniqueFd sock;        // a copy of the master, kept after the masters are closed
  std::string unsent;   // written by the program, never sent: sent after repair mode
  bool reuseaddr = false;  // SO_REUSEADDR as the program had it (repair mode forces it)
  std::string where;
};

// The network lock of the restoring host (net/netlock.h): taken before the connections of the
// checkpoint are rebuilt, removed when it goes (on every path out). The dump's lock, on the
// host that was checkpointed, is another table; the restore removes that one too once it has
// succeeded (RemoveDumpLock), where it is on this host.
class RestoreLock {
 public:
  // Takes it when a process of `procs` has a live TCP connection; nullopt otherwise.
  static absl::StatusOr<std::optional<RestoreLock>> Take(const image::Checkpoint& meta,
                                                         const std::vector<const image::Process*>& procs);
  RestoreLock(RestoreLock&& o) noexcept : table_(std::move(o.table_)) { o.table_.clear(); }
  RestoreLock& operator=(RestoreLock&&) = delete;
  ~RestoreLock();

 private:
  explicit RestoreLock(std::string table) : table_(std::move(table)) {}
  std::string table_;
};

// Rebuilds `fd` (INET_SOCKET with socket.tcp) of `pid`; the socket is left in repair mode.
absl::StatusOr<UniqueFd> RebuildConnection(const image::ImageReader& img, const image::Fd& fd, pid_t pid,
                                           RepairedConnection* out);

// Ends repair mode on each connection and sends what had never been sent.
absl::Status FinishConnections(const std::vector<RepairedConnection>& conns);

}  // namespace cairn::restore
