#pragma once
// The network lock's nftables table made, opened and deleted through netlink from this process
// (nfnetlink, one batch each: one transaction, all or nothing), instead of starting nft —
// which costs tens of milliseconds before it does anything, paid on the frozen path of every dump
// and restore with live connections. Only in this process's network namespace; netlock.cc falls
// back to nft for another one, or if the kernel refuses a batch.
//
// The table is the one netlock.h describes: per address family, a set of (local address . local
// port . remote address . remote port) keys and one rule per direction in base chains at
// priority -300 — output drops a packet whose (saddr . sport . daddr . dport) is in the set,
// input one whose (daddr . dport . saddr . sport) is. The rules are the expressions nft itself
// makes of `ip saddr . tcp sport . ip daddr . tcp dport @conns4 drop` (nfproto and l4proto
// checks, four payload loads into consecutive 32-bit registers, a lookup, a drop verdict), so
// that `nft list table` shows them as nft would have written them.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace cairn::net {

// One connection as the set keys it: addresses in network order (4 or 16 bytes), ports in
// host order.
struct LockedConnection {
  std::string local_addr, remote_addr;
  uint16_t local_port = 0, remote_port = 0;
};

// Makes inet table `table` (replacing one of that name) dropping the packets of `conns`.
absl::Status CreateLockTable(const std::string& table, const std::vector<LockedConnection>& conns);

// Deletes every rule of inet table `table` (NotFound if there is no such table).
absl::Status FlushLockTable(const std::string& table);

// Flushes every table of `tables`, making those that do not exist empty (one transaction).
absl::Status OpenLockTables(const std::vector<std::string>& tables);

// Deletes inet table `table` (NotFound if there is none).
absl::Status DeleteLockTable(const std::string& table);

// For a process about to exit: the batches above go through one netlink socket kept open
// (closing it waits until nf_tables has freed what a transaction deleted: an RCU grace period,
// 6-30 ms here). A process that exits right after deleting a table would wait so at its exit;
// this hands the socket to a child that holds nothing else and exits at once, so that the wait
// is the child's. Nothing is left undone: every transaction was committed before it returned.
void LeaveChannelToChild();

}  // namespace cairn::net
