#pragma once
// The network lock of a checkpoint that saves live TCP connections (`--tcp-established`): an
// nftables table of the inet family, named after the checkpoint, that drops every packet of
// those connections in both directions, on input and output. It is taken before any
// connection's state is read, so that nothing moves while it is (the peer's packets are
// dropped, not answered: it retransmits them later, as after any loss), and it stays until
// the connections are rebuilt: a dump that lets its processes run on, or fails, removes it; a
// dump that kills them leaves it (its name is in the checkpoint) for the restore to remove
// once the connections exist again. A stale one (its dump killed, no restore to come) is
// listed by `cairn check` and removed by `cairn check --fix`, in the host's network namespace
// and in every other one a process is in or /run/netns names (a container's); one still needed
// is claimed and left (claim.h).
//
// nftables' `nft` command (Debian's nftables package, /usr/sbin/nft, or CAIRN_NFT) applies it;
// without it, a dump that needs the lock is refused before anything is frozen.

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cairn::net {

// One end of a connection as its socket sees it: struct sockaddr_in or sockaddr_in6 bytes
// (an IPv4-mapped IPv6 address is locked as the IPv4 address it carries).
struct Connection {
  std::string local;
  std::string remote;
};

// "cairn_lock_<id>" for checkpoint `id` (hex).
std::string LockTableName(absl::string_view checkpoint_id);

// Whether the nft command is there; FailedPrecondition saying what to install if not.
absl::Status CheckNftables();

// The lock lives in a network namespace: that of process `netns_of` (its connections'), or with
// 0 the caller's.

// Adds table `table` dropping the packets of `conns` (one nft transaction: all or nothing),
// replacing one of that name.
absl::Status TakeNetworkLock(const std::string& table, const std::vector<Connection>& conns, pid_t netns_of = 0);

// Deletes table `table`; OK if there is none (a restore on another host, a second remove).
absl::Status RemoveNetworkLock(const std::string& table, pid_t netns_of = 0);

// Lets the packets of table `table` through without deleting it: its rules flushed (through
// netlink from this process when it is in that network namespace, else by nft), its base
// chains left in place (policy accept). Much cheaper than the delete, which unregisters the
// chains' hooks and waits for the network stack's RCU grace periods — tens of milliseconds,
// serialized between concurrent deletes: the delete can then come once the processes run.
absl::Status OpenNetworkLock(const std::string& table, pid_t netns_of = 0);

// The same for several tables in one nft run (a restore opens its own lock and the dump's): a
// table that does not exist is made empty, so that RemoveNetworkLocks finds each.
absl::Status OpenNetworkLocks(const std::vector<std::string>& tables, pid_t netns_of = 0);
// Deletes every table of `tables` in one nft run (tables that are gone are skipped).
absl::Status RemoveNetworkLocks(const std::vector<std::string>& tables, pid_t netns_of = 0);

// The cairn_lock_* tables present in the network namespace the file `ns_path` names ("": ours).
absl::StatusOr<std::vector<std::string>> ListNetworkLocks(const std::string& ns_path = "");

// Deletes table `table` in the network namespace the file `ns_path` names; OK if it is gone.
absl::Status RemoveNetworkLockIn(const std::string& table, const std::string& ns_path);

// A network namespace of this host: a file that names it, and where it is, in words.
struct NetworkNamespace {
  std::string path;   // "/run/netns/NAME", "/proc/PID/ns/net"
  std::string where;  // "the network namespace of pid 812 (redis-server)"
};

// Every network namespace of this host but ours that a name under /run/netns holds or a process
// is in (a container's, where a dump of its live connections locks them): where a killed
// dump's lock may be left. One held only by an open descriptor is not found.
absl::StatusOr<std::vector<NetworkNamespace>> OtherNetworkNamespaces();

}  // namespace cairn::net
