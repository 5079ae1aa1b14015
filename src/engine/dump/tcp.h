#pragma once
// Live TCP connections of a dump (--tcp-established): the network lock taken over all of
// them (net/netlock.h), then each connection switched to repair mode (TCP_REPAIR) and read:
// both sequence numbers, the bytes written and not yet acknowledged (and how many of them
// were never sent), the bytes received and not yet read, the options negotiated at the
// handshake (MSS, window scaling, SACK, timestamps), the connection's timestamp clock and its
// window (TCP_REPAIR_WINDOW). restore/tcp.h rebuilds them.
//
// Every path out leaves the connections as the processes expect them: a dump whose
// processes run on (--leave-running, or a failure) takes each socket out of repair mode
// and opens the lock (its rules flushed) before they are thawed, and deletes its table once
// they run (the slow part, net/netlock.h); a dump that kills them leaves the sockets in
// repair mode (so their close sends nothing to the peers: no FIN, no reset) and keeps the
// lock for the restore. A dumper that dies is covered by its guardian (guardian.h, 6).
// Established and half-closed (CLOSE_WAIT, FIN_WAIT2) connections are saved; closing ones are refused.

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/unique_fd.h"
#include "engine/image/image.h"
#include "engine/net/claim.h"
#include "engine/proc/fds.h"
#include "image.pb.h"

namespace cairn::dump {

class GuardJournal;

class TcpConnections {
 public:
  // Finds the established TCP connections of `pids` (`fds`: each one's descriptors, read
  // frozen) and, if there are any, takes the network lock `table` over them (journaled first),
  // in their network namespace. Refuses other TCP states, connections in more than one network
  // namespace, and a missing nft, naming the connection.
  static absl::StatusOr<std::unique_ptr<TcpConnections>> Lock(const std::string& table, const std::vector<pid_t>& pids,
                                                              const std::vector<std::vector<proc::FdInfo>>& fds,
                                                              GuardJournal* journal);
  // Releases (below) unless Keep() was called.
  ~TcpConnections();

  // The lock's table; empty when there was no connection to lock.
  const std::string& table() const { return table_; }
  // The claim on it (net/claim.h), made before the table: held while this object lives; a copy
  // keeps the lock from `cairn check --fix` for a caller that keeps the lock (Keep).
  const net::LockClaim& claim() const { return claim_; }

  // The copy Lock took of the socket of inode `ino`, now the caller's (invalid if none): the
  // capture asks it rather than making another.
  UniqueFd TakeCopy(uint64_t ino);

  // Saves the connection `sock` (a copy of `pid`'s descriptor `fd`) into `s`: repair mode
  // on, then its state; the queues go to `writer`.
  absl::Status Save(pid_t pid, int fd, UniqueFd sock, image::ImageWriter& writer, image::SocketState* s);

  // The processes may run on: each saved socket leaves repair mode, and the lock lets their
  // packets through (opened, net/netlock.h); DropLock deletes its table once they run.
  absl::Status Release();
  // After Release, with the processes running: the lock's table is deleted (the slow part of
  // lifting it). Also done, if not yet, when this object goes.
  absl::Status DropLock();
  // The processes were killed: the sockets close in repair mode, the lock stays.
  void Keep();
  // The processes stay frozen for a caller that decides later (a hand-off held: dump.h): each
  // saved socket leaves repair mode, the lock stays closed (the caller removes it).
  absl::Status EndRepairsKeepLock();

 private:
  TcpConnections(std::string table, GuardJournal* journal) : table_(std::move(table)), journal_(journal) {}
  absl::Status EndRepairs();  // every saved socket out of repair mode, with its SO_REUSEADDR back

  std::string table_;
  net::LockClaim claim_;
  bool table_dropped_ = false;
  pid_t netns_of_ = 0;  // a process in the connections' network namespace, where the lock is
  GuardJournal* journal_;
  struct Repaired {
    UniqueFd sock;
    int reuseaddr;  // the program's SO_REUSEADDR (repair mode forces it on)
  };
  std::vector<Repaired> repaired_;
  absl::flat_hash_map<uint64_t, UniqueFd> copies_;  // by inode, until TakeCopy
  bool done_ = false;
};

}  // namespace cairn::dump
