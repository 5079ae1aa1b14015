#include "engine/dump/tcp.h"

#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <functional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/sockaddr.h"
#include "common/status.h"
#include "engine/dump/guardian.h"
#include "engine/net/netlock.h"
#include "engine/proc/fds.h"
#include "engine/proc/pidfd.h"

namespace cairn::dump {
namespace {

const char* TcpStateName(int state) {
  static const char* const kNames[] = {"?",         "ESTABLISHED", "SYN_SENT", "SYN_RECV",   "FIN_WAIT1", "FIN_WAIT2",
                                       "TIME_WAIT", "CLOSE",       "CLOSE_WAIT", "LAST_ACK", "LISTEN",    "CLOSING"};
  return state >= 0 && state < static_cast<int>(sizeof kNames / sizeof kNames[0]) ? kNames[state] : "?";
}

// An int option of socket `fd`, -1 if it cannot be read.
int IntOpt(int fd, int level, int name) { return SocketIntOption(fd, level, name, "").value_or(-1); }

// The TCP state of socket `fd`, or -1 if it is not a TCP socket (TCP_INFO is TCP's alone: an
// MPTCP socket, which also answers it, is refused later by its protocol).
int TcpState(int fd) {
  tcp_info ti{};
  socklen_t len = sizeof ti;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) return -1;
  return ti.tcpi_state;
}

// `len` bytes of the queue selected with TCP_REPAIR_QUEUE, peeked (nothing is taken off; a
// peek in repair mode reads the whole queue from its head).
absl::StatusOr<std::string> PeekQueue(int fd, size_t len, const std::function<std::string()>& what) {
  std::string data(len, '\0');
  if (len == 0) return data;
  ssize_t n;
  do {
    n = ::recv(fd, data.data(), len, MSG_PEEK | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return ErrnoStatus("peek the " + what());
  if (static_cast<size_t>(n) != len) {
    return absl::DataLossError(absl::StrFormat("the %s holds %d bytes, a peek read %d", what(), len, n));
  }
  return data;
}

// Established, or half-closed with nothing of the close in flight: the peer's FIN received
// and acknowledged (CLOSE_WAIT), ours sent and acknowledged (FIN_WAIT2).
bool Savable(int state) { return state == TCP_ESTABLISHED || state == TCP_CLOSE_WAIT || state == TCP_FIN_WAIT2; }

}  // namespace

absl::StatusOr<std::unique_ptr<TcpConnections>> TcpConnections::Lock(const std::string& table,
                                                                      const std::vector<pid_t>& pids,
                                                                      const std::vector<std::vector<proc::FdInfo>>& fds,
                                                                      GuardJournal* journal) {
  if (fds.size() != pids.size()) return absl::InternalError("descriptor tables of other processes");
  std::vector<net::Connection> conns;
  std::set<uint64_t> seen;
  absl::flat_hash_map<uint64_t, UniqueFd> copies;
  pid_t netns_of = 0;
  uint64_t netns = 0;
  for (size_t i = 0; i < pids.size(); ++i) {
    pid_t pid = pids[i];
    struct stat ns{};
    std::string ns_path = absl::StrCat("/proc/", pid, "/ns/net");
    if (::stat(ns_path.c_str(), &ns) != 0) return ErrnoStatus("stat " + ns_path);
    for (const proc::FdInfo& info : fds[i]) {
      int number = info.fd;
      // Each socket once, whichever descriptors share it (an O_PATH open of one is no socket
      // to save: the capture refuses it).
      if (info.flags & O_PATH) continue;
      std::optional<uint64_t> ino = proc::SocketInode(info.target);
      if (!ino || !seen.insert(*ino).second) continue;
      ASSIGN_OR_RETURN(UniqueFd copy, proc::CopyFd(pid, number));
      int state = TcpState(copy.get());
      if (state < 0 || state == TCP_LISTEN || state == TCP_CLOSE) continue;
      ASSIGN_OR_RETURN(std::string local, SocketAddress(copy.get(), false));
      ASSIGN_OR_RETURN(std::string remote, SocketAddress(copy.get(), true));
      if (!Savable(state)) {
        return absl::UnimplementedError(absl::StrFormat(
            "pid %d fd %d is a TCP connection %s -> %s in state %s, a closing one; established and half-closed "
            "(CLOSE_WAIT, FIN_WAIT2) connections can be saved — checkpoint it once it has closed, or pass "
            "--tcp-close to restore it as a connection reset by its peer",
            pid, number, FormatSockaddr(local), FormatSockaddr(remote), TcpStateName(state)));
      }
      if (netns_of != 0 && ns.st_ino != netns) {
        return absl::UnimplementedError(absl::StrFormat(
            "pid %d fd %d is a TCP connection in another network namespace than pid %d's; the connections of one "
            "checkpoint must share one namespace (their network lock is there)",
            pid, number, netns_of));
      }
      netns_of = pid;
      netns = ns.st_ino;
      conns.push_back({std::move(local), std::move(remote)});
      copies[*ino] = std::move(copy);
    }
  }
  if (conns.empty()) return std::unique_ptr<TcpConnections>(new TcpConnections("", journal));
  RETURN_IF_ERROR(net::CheckNftables());
  // Claimed before it exists: `cairn check --fix` leaves it alone from its first moment.
  ASSIGN_OR_RETURN(net::LockClaim claim, net::LockClaim::Take(table));
  if (journal != nullptr) journal->NetworkLock(table, netns_of);
  auto lock = std::unique_ptr<TcpConnections>(new TcpConnections(table, journal));
  lock->claim_ = std::move(claim);
  lock->netns_of_ = netns_of;
  lock->copies_ = std::move(copies);
  absl::Status taken = net::TakeNetworkLock(table, conns, netns_of);
  if (!taken.ok()) {
    lock->table_.clear();  // one nft transaction: nothing of it was made
    return taken;
  }
  CAIRN_LOG_INFO("event=network_locked table={} connections={}", table, conns.size());
  return lock;
}

UniqueFd TcpConnections::TakeCopy(uint64_t ino) {
  auto it = copies_.find(ino);
  if (it == copies_.end()) return UniqueFd();
  UniqueFd copy = std::move(it->second);
  copies_.erase(it);
  return copy;
}

absl::Status TcpConnections::Save(pid_t pid, int fd, UniqueFd sock, image::ImageWriter& writer,
                                  image::SocketState* s) {
  auto where = [&] { return absl::StrFormat("pid %d fd %d (TCP %s -> %s)", pid, fd, FormatSockaddr(s->bound()),
                                            FormatSockaddr(s->peer())); };
  if (table_.empty()) {
    return absl::InternalError(where() + ": a connection appeared after the network lock was taken");
  }
  int c = sock.get();
  int reuseaddr = IntOpt(c, SOL_SOCKET, SO_REUSEADDR) > 0 ? 1 : 0;
  if (journal_ != nullptr) RETURN_IF_ERROR(journal_->TcpRepairing(pid, fd, reuseaddr != 0));
  int on = TCP_REPAIR_ON;
  if (::setsockopt(c, IPPROTO_TCP, TCP_REPAIR, &on, sizeof on) != 0) {
    return ErrnoStatus("setsockopt(TCP_REPAIR, on) on " + where() + " (needs CAP_NET_ADMIN)");
  }
  repaired_.push_back({std::move(sock), reuseaddr});
  tcp_info ti{};
  socklen_t len = sizeof ti;
  if (::getsockopt(c, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) return ErrnoStatus("TCP_INFO of " + where());
  if (!Savable(ti.tcpi_state)) {
    return absl::UnimplementedError(absl::StrFormat(
        "%s went to state %s before it was locked; established and half-closed connections can be saved — try "
        "again, or pass --tcp-close",
        where(), TcpStateName(ti.tcpi_state)));
  }
  image::TcpConnection* t = s->mutable_tcp();
  t->set_fin_received(ti.tcpi_state == TCP_CLOSE_WAIT);
  t->set_fin_sent(ti.tcpi_state == TCP_FIN_WAIT2);
  t->set_wscale((ti.tcpi_options & TCPI_OPT_WSCALE) != 0);
  t->set_snd_wscale(ti.tcpi_snd_wscale);
  t->set_rcv_wscale(ti.tcpi_rcv_wscale);
  t->set_sack((ti.tcpi_options & TCPI_OPT_SACK) != 0);
  t->set_timestamps((ti.tcpi_options & TCPI_OPT_TIMESTAMPS) != 0);
  int mss = IntOpt(c, IPPROTO_TCP, TCP_MAXSEG);  // in repair mode: the MSS clamp
  if (mss <= 0) return ErrnoStatus("TCP_MAXSEG of " + where());
  t->set_mss(static_cast<uint32_t>(mss));
  uint32_t ts = 0;
  len = sizeof ts;
  if (::getsockopt(c, IPPROTO_TCP, TCP_TIMESTAMP, &ts, &len) != 0) return ErrnoStatus("TCP_TIMESTAMP of " + where());
  t->set_timestamp(ts);
  tcp_repair_window w{};
  len = sizeof w;
  if (::getsockopt(c, IPPROTO_TCP, TCP_REPAIR_WINDOW, &w, &len) != 0) {
    return ErrnoStatus("TCP_REPAIR_WINDOW of " + where());
  }
  t->set_window(std::string(reinterpret_cast<const char*>(&w), len));
  t->set_sndbuf(static_cast<uint32_t>(std::max(0, IntOpt(c, SOL_SOCKET, SO_SNDBUF))));
  t->set_rcvbuf(static_cast<uint32_t>(std::max(0, IntOpt(c, SOL_SOCKET, SO_RCVBUF))));

  for (int queue : {TCP_SEND_QUEUE, TCP_RECV_QUEUE}) {
    bool send = queue == TCP_SEND_QUEUE;
    // Named only for an error: formatting the addresses costs more than the calls.
    auto what = [&] { return absl::StrCat(send ? "send queue of " : "receive queue of ", where()); };
    if (::setsockopt(c, IPPROTO_TCP, TCP_REPAIR_QUEUE, &queue, sizeof queue) != 0) {
      return ErrnoStatus("select the " + what());
    }
    uint32_t seq = 0;
    len = sizeof seq;
    if (::getsockopt(c, IPPROTO_TCP, TCP_QUEUE_SEQ, &seq, &len) != 0) {
      return ErrnoStatus("TCP_QUEUE_SEQ of the " + what());
    }
    int bytes = 0;
    if (::ioctl(c, send ? SIOCOUTQ : SIOCINQ, &bytes) != 0 || bytes < 0) return ErrnoStatus("size of the " + what());
    ASSIGN_OR_RETURN(std::string data, PeekQueue(c, static_cast<size_t>(bytes), what));
    ASSIGN_OR_RETURN(auto blob, writer.AppendBytes(data));
    if (send) {
      int unsent = 0;
      if (::ioctl(c, SIOCOUTQNSD, &unsent) != 0 || unsent < 0 || unsent > bytes) {
        return ErrnoStatus("unsent size of the " + what());
      }
      t->set_send_seq(seq);
      t->set_unsent(static_cast<uint32_t>(unsent));
      t->set_send_offset(blob.offset);
      t->set_send_size(blob.size);
      t->set_send_xxh3(blob.xxh3);
    } else {
      t->set_recv_seq(seq);
      t->set_recv_offset(blob.offset);
      t->set_recv_size(blob.size);
      t->set_recv_xxh3(blob.xxh3);
    }
  }
  int none = TCP_NO_QUEUE;
  if (::setsockopt(c, IPPROTO_TCP, TCP_REPAIR_QUEUE, &none, sizeof none) != 0) {
    return ErrnoStatus("TCP_REPAIR_QUEUE none on " + where());
  }
  return absl::OkStatus();
}

absl::Status TcpConnections::Release() {
  if (done_) return absl::OkStatus();
  done_ = true;
  absl::Status status = EndRepairs();
  if (!table_.empty()) {
    absl::Status opened = net::OpenNetworkLock(table_, netns_of_);
    if (status.ok()) status = opened;
  }
  // No socket is left for the guardian to put back (descriptor numbers may be reused); the
  // table stays journaled until DropLock deletes it.
  if (journal_ != nullptr && status.ok()) journal_->RepairsEnded();
  return status;
}

absl::Status TcpConnections::DropLock() {
  if (table_.empty() || table_dropped_ || !done_ || !repaired_.empty()) return absl::OkStatus();
  table_dropped_ = true;
  absl::Status removed = net::RemoveNetworkLock(table_, netns_of_);
  if (journal_ != nullptr && removed.ok()) journal_->LockGone();
  claim_.Release();
  return removed;
}

absl::Status TcpConnections::EndRepairs() {
  absl::Status status;
  for (Repaired& r : repaired_) {
    int off = TCP_REPAIR_OFF;
    if ((::setsockopt(r.sock.get(), IPPROTO_TCP, TCP_REPAIR, &off, sizeof off) != 0 ||
         ::setsockopt(r.sock.get(), SOL_SOCKET, SO_REUSEADDR, &r.reuseaddr, sizeof r.reuseaddr) != 0) &&
        status.ok()) {
      status = ErrnoStatus("setsockopt(TCP_REPAIR, off) on a saved connection");
    }
  }
  repaired_.clear();
  return status;
}

absl::Status TcpConnections::EndRepairsKeepLock() {
  if (done_) return absl::OkStatus();
  absl::Status status = EndRepairs();
  // No socket is left for the guardian to put back; the lock stays journaled for it (point 6).
  if (journal_ != nullptr && status.ok()) journal_->RepairsEnded();
  Keep();
  return status;
}

void TcpConnections::Keep() {
  done_ = true;
  table_dropped_ = true;  // the restore removes it
  repaired_.clear();
}

TcpConnections::~TcpConnections() {
  absl::Status s = Release();
  if (s.ok()) s = DropLock();
  if (!s.ok()) CAIRN_LOG_WARN("event=tcp_release_failed error=\"{}\"", s.ToString());
}

}  // namespace cairn::dump
