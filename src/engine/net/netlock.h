#pragma once
// The network lock of a checkpoint that saves live TCP connections (`--tcp-established`): an
// nftables table of the inet family, named after the checkpoint, that drops every packet of
// those connections in both directions, on input and output. It is taken before any
// connection's state is read, so that nothing moves while it is (the peer's packets are
// dropped, not answered: it retransmits them later, as after any loss), and it stays until
// the connections are rebuilt: a dump that lets its processes run on, or fails, removes it; a
// dump that kills them leaves it (its name is in the checkpoint) for the restore to remove
// once the connections exist again. A stale one (its dump killed, no restore to come) is
// listed by `cairn check` and removed by `cairn check --fix`.
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

// The cairn_lock_* tables present.
absl::StatusOr<std::vector<std::string>> ListNetworkLocks();

}  // namespace cairn::net
