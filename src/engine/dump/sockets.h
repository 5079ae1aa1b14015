#pragma once
// Capturing sockets.
//
// Unix sockets (found through sock_diag):
// - a connected pair whose both ends are in the checkpoint: type, both inodes, and what
//   waits to be read: a stream's bytes (peeked), a datagram or seqpacket socket's messages
//   (peeked one by one with a peek offset, the socket's own offset put back after);
// - a socket on its own: bound to a name (in the file system, relative names resolved
//   against the process's cwd, or abstract), listening (with its backlog; no connection
//   may be waiting to be accepted), a datagram socket connected to a named socket of the
//   checkpoint, or one created and not used yet.
// TCP and UDP over IPv4 and IPv6 (read from a copy of the descriptor): bound address,
// listening state and backlog, the peer of a connected UDP socket, and the options a
// server sets (SO_REUSEADDR, SO_REUSEPORT, SO_KEEPALIVE, TCP_NODELAY, IPV6_V6ONLY...).
// An established TCP connection is saved whole with `tcp_established` (tcp.h), recorded to
// come back as a connection the peer reset with `tcp_close`, and otherwise refused naming
// the connection and both options. A listening socket with connections waiting to be
// accepted is refused unless `tcp_close` (they are dropped).
// Everything else (netlink, packet sockets, unix sockets connected to a process
// outside the checkpoint, shut-down sockets, descriptors in flight (SCM_RIGHTS), datagrams
// waiting on a bound unix socket) is
// refused with the reason.

#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"
#include "engine/dump/files.h"
#include "engine/dump/in_flight.h"
#include "engine/image/image.h"
#include "engine/net/netlock.h"
#include "engine/proc/fds.h"
#include "engine/proc/unix_sockets.h"
#include "image.pb.h"

namespace cairn::dump {

class TreeSockets {
 public:
  // `inodes`: the socket inodes every descriptor of the checkpointed processes refers to.
  // `netns_of`: a process of the tree, whose network namespace holds its unix sockets.
  static absl::StatusOr<TreeSockets> Load(std::set<uint64_t> inodes, const FdOptions& opts, pid_t netns_of);

  // How many of the sockets are not unix sockets (TCP, UDP...: a dump holds a copy of each
  // TCP connection at once).
  size_t OtherThanUnix() const {
    return std::count_if(inodes_.begin(), inodes_.end(), [&](uint64_t ino) { return !unix_.contains(ino); });
  }

  // A copy of `pid`'s socket descriptor `info` (the one the network lock took, if it did).
  absl::StatusOr<UniqueFd> CopyOf(pid_t pid, const proc::FdInfo& info) const;

  // Fills `fd` (number, flags and cloexec already set) for `pid`'s socket descriptor
  // `info`, asking `copy` (CopyOf). With a null `writer` only checks that it can be saved.
  absl::Status Capture(pid_t pid, const proc::FdInfo& info, UniqueFd copy, image::ImageWriter* writer,
                       image::Fd* fd) const;

  // Looks once at the queue of every unix socket `sockets` names — and of
  // every socket found in flight there — for descriptors in flight (in_flight.h): `in_flight`
  // keeps a copy of each description no process holds, and Capture records them all through it.
  // The sockets in flight count as the checkpoint's (a pair's other end may be one).
  struct SocketFd {
    pid_t pid;
    int fd;
    uint64_t ino;
  };
  absl::Status FindInFlight(std::vector<SocketFd> sockets, InFlightFiles* in_flight);

 private:
  absl::Status CaptureUnix(pid_t pid, const proc::FdInfo& info, const proc::UnixSocket& us,
                           image::ImageWriter* writer, image::Fd* fd) const;
  absl::Status CaptureInet(pid_t pid, const proc::FdInfo& info, UniqueFd copy, image::ImageWriter* writer,
                           image::Fd* fd) const;
  // The socket's classic BPF filter (SO_ATTACH_FILTER) and its lock; an eBPF one is refused.
  absl::Status CaptureFilter(pid_t pid, const proc::FdInfo& info, int copy, image::Fd* fd) const;

  // A client whose connection a listener has not accepted yet: filled like a socket of its
  // own whose peer is the listener's name (Fd.pending_on, pending_position).
  absl::Status CapturePendingClient(pid_t pid, const proc::FdInfo& info, const proc::UnixSocket& us,
                                    const proc::UnixSocket& listener, uint32_t position, image::Fd* fd) const;
  // Whether `pid`'s socket `us` (a listener) could be reached by its name again at restore:
  // empty if so, else why not.
  std::string UnreachableName(pid_t pid, const proc::UnixSocket& us) const;

  // net::CheckNftables, asked once per check (not once per connection).
  absl::Status NftablesChecked() const {
    if (!nft_checked_) nft_checked_ = net::CheckNftables();
    return *nft_checked_;
  }

  std::set<uint64_t> inodes_;
  mutable std::optional<absl::Status> nft_checked_;
  std::map<uint64_t, proc::UnixSocket> unix_;
  InFlightFiles* in_flight_ = nullptr;
  // Client inode -> (listener inode, position in its queue, 1 first).
  std::map<uint64_t, std::pair<uint64_t, uint32_t>> pending_;
  FdOptions opts_;
};

}  // namespace cairn::dump
