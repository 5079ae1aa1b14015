#include "engine/restore/tcp.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/sockaddr.h"
#include "common/log.h"
#include "common/status.h"
#include "engine/net/netlock.h"
#include "engine/net/orphans.h"

namespace cairn::restore {
namespace {

// `what` and `on` name the call for an error only (a restore of a thousand connections made
// tens of thousands of these strings for nothing).
absl::Status SetInt(int sock, int level, int name, int value, absl::string_view what, absl::string_view on = "") {
  if (::setsockopt(sock, level, name, &value, sizeof value) != 0) return ErrnoStatus(absl::StrCat(what, on));
  return absl::OkStatus();
}

// Writes `data` into the queue TCP_REPAIR_QUEUE selected (or, out of repair mode, sends
// it), waiting up to 2 s for room.
absl::Status SendAll(int sock, const std::string& data, const std::string& what) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::send(sock, data.data() + done, data.size() - done, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      pollfd p{sock, POLLOUT, 0};
      if (::poll(&p, 1, 2000) == 1) continue;
      return absl::ResourceExhaustedError(
          absl::StrFormat("%s: no room for %d more of its %d bytes within 2 s", what, data.size() - done, data.size()));
    }
    return ErrnoStatus(absl::StrFormat("%s (%d of %d bytes in)", what, done, data.size()));
  }
  return absl::OkStatus();
}

void AddConnections(const image::Process& p, std::vector<net::Connection>* conns) {
  for (const image::Fd& fd : p.fds()) {
    if (fd.has_socket() && fd.socket().has_tcp()) conns->push_back({fd.socket().bound(), fd.socket().peer()});
  }
}

std::string RestoreLockTable(const image::Checkpoint& meta) { return net::LockTableName(meta.id() + "_restore"); }

}  // namespace

absl::StatusOr<std::optional<RestoreLock>> RestoreLock::Take(const image::Checkpoint& meta,
                                                             const std::vector<const image::Process*>& procs,
                                                             pid_t netns_of) {
  std::vector<net::Connection> conns;
  for (const image::Process* p : procs) AddConnections(*p, &conns);
  if (conns.empty()) return std::optional<RestoreLock>();
  std::string table = RestoreLockTable(meta);
  // (One left by an earlier restore of this checkpoint that was killed, or taken early by
  // TakeRestoreLockEarly, is replaced in one transaction: no packet gets through meanwhile.)
  ASSIGN_OR_RETURN(net::LockClaim claim, net::LockClaim::Take(table));
  RETURN_IF_ERROR(net::TakeNetworkLock(table, conns, netns_of));
  return std::optional<RestoreLock>(RestoreLock(table, std::move(claim), netns_of));
}

namespace {

std::vector<net::Connection> ConnectionsOf(const image::Checkpoint& meta) {
  std::vector<net::Connection> conns;
  AddConnections(meta.process(), &conns);
  for (const image::Process& p : meta.descendants()) AddConnections(p, &conns);
  return conns;
}

}  // namespace

absl::StatusOr<net::LockClaim> TakeRestoreLockEarly(const image::Checkpoint& meta) {
  std::vector<net::Connection> conns = ConnectionsOf(meta);
  if (conns.empty()) return net::LockClaim();
  std::string table = RestoreLockTable(meta);
  ASSIGN_OR_RETURN(net::LockClaim claim, net::LockClaim::Take(table));
  RETURN_IF_ERROR(net::TakeNetworkLock(table, conns));
  return claim;
}

std::string RestoreLockTableFor(const image::Checkpoint& meta) {
  return ConnectionsOf(meta).empty() ? std::string() : RestoreLockTable(meta);
}

RestoreLock::~RestoreLock() {
  if (table_.empty() || !released_) return;
  absl::Status s = net::RemoveNetworkLock(table_, netns_of_);
  if (!s.ok()) CAIRN_LOG_WARN("event=network_unlock_failed error=\"{}\"", s.ToString());
}

absl::StatusOr<UniqueFd> RebuildConnection(const image::ImageReader& img, const image::Fd& fd, pid_t pid,
                                           RepairedConnection* out) {
  const image::SocketState& s = fd.socket();
  const image::TcpConnection& t = s.tcp();
  std::string where = absl::StrFormat("pid %d fd %d (TCP %s -> %s)", pid, fd.fd(), FormatSockaddr(s.bound()),
                                      FormatSockaddr(s.peer()));
  if (t.unsent() > t.send_size()) {
    return absl::DataLossError(where + ": more bytes unsent than in its send queue (corrupt image)");
  }
  ASSIGN_OR_RETURN(std::string sendq, img.SendQueue(t));
  ASSIGN_OR_RETURN(std::string recvq, img.ReceiveQueue(t));
  UniqueFd sock(::socket(s.family(), SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP));
  if (!sock.valid()) return ErrnoStatus("socket for " + where);
  int c = sock.get();
  RETURN_IF_ERROR(SetInt(c, IPPROTO_TCP, TCP_REPAIR, TCP_REPAIR_ON, "setsockopt(TCP_REPAIR, on) for ",
                         absl::StrCat(where, " (needs CAP_NET_ADMIN)")));
  for (const image::SocketOption& o : s.options()) {
    if (o.level() == SOL_SOCKET && o.name() == SO_REUSEADDR) {
      // Given back when repair mode ends; until then repair mode's forced reuse must stay (a
      // listener on the same port binds and listens meanwhile).
      int v = 0;
      std::memcpy(&v, o.value().data(), std::min(o.value().size(), sizeof v));
      out->reuseaddr = v != 0;
      continue;
    }
    if (::setsockopt(c, o.level(), o.name(), o.value().data(), static_cast<socklen_t>(o.value().size())) != 0) {
      return ErrnoStatus(absl::StrFormat("setsockopt(level %d, option %d) on %s", o.level(), o.name(), where));
    }
  }
  // Sequence numbers of the queues' heads: each queue written below moves its own on to
  // where the connection stood.
  // A FIN we had sent (FIN_WAIT2) is sent again by shutdown() once repair ends, at the
  // sequence number it had: the peer takes it as a retransmission. One the peer had sent
  // (CLOSE_WAIT) is not received again: the bytes before it are queued up to recv_seq (the
  // peer, closed for writing, sends nothing more) and the read side is shut down.
  uint32_t send_head = t.send_seq() - static_cast<uint32_t>(t.send_size()) - (t.fin_sent() ? 1 : 0);
  uint32_t recv_head = t.recv_seq() - static_cast<uint32_t>(t.recv_size());
  if (t.fin_sent()) out->shut = SHUT_WR;
  if (t.fin_received()) out->shut = SHUT_RD;
  if (t.fin_sent() && t.fin_received()) {
    return absl::DataLossError(where + ": both FINs without a closing state (corrupt image)");
  }
  RETURN_IF_ERROR(SetInt(c, IPPROTO_TCP, TCP_REPAIR_QUEUE, TCP_SEND_QUEUE, "select the send queue of ", where));
  RETURN_IF_ERROR(SetInt(c, IPPROTO_TCP, TCP_QUEUE_SEQ, static_cast<int>(send_head), "send sequence of ", where));
  RETURN_IF_ERROR(SetInt(c, IPPROTO_TCP, TCP_REPAIR_QUEUE, TCP_RECV_QUEUE, "select the receive queue of ", where));
  RETURN_IF_ERROR(SetInt(c, IPPROTO_TCP, TCP_QUEUE_SEQ, static_cast<int>(recv_head), "receive sequence of ", where));
  // (Bound to its own address: on IPv6 that turns IPV6_V6ONLY on, which an established
  // connection does not use; the source address connect() chose is thus kept exactly.)
  if (::bind(c, reinterpret_cast<const sockaddr*>(s.bound().data()), static_cast<socklen_t>(s.bound().size())) != 0) {
    if (errno == EADDRNOTAVAIL) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "bind %s for %s: the address is not on this host; a connection comes back only where its address is — "
          "add the address here (the job's service address moves with it), or checkpoint with --tcp-close",
          FormatSockaddr(s.bound()), where));
    }
    return ErrnoStatus(absl::StrFormat("bind %s for %s", FormatSockaddr(s.bound()), where));
  }
  auto connect_it = [&] {
    return ::connect(c, reinterpret_cast<const sockaddr*>(s.peer().data()), static_cast<socklen_t>(s.peer().size()));
  };
  int connected = connect_it();
  if (connected != 0 && errno == EADDRNOTAVAIL) {
    // The connection's earlier life may linger, closed by a program that was killed or ended
    // while its peer could not answer (net/orphans.h): it goes, and this one takes its place.
    absl::StatusOr<int> cleared = net::DestroyOrphanConnection(s.bound(), s.peer());
    if (cleared.ok() && *cleared > 0) {
      CAIRN_LOG_INFO("event=orphan_connection_cleared for=\"{}\"", where);
      connected = connect_it();
    } else {
      if (!cleared.ok()) {
        CAIRN_LOG_WARN("event=orphan_connection_not_cleared for=\"{}\" error=\"{}\"", where, cleared.status().ToString());
      }
      errno = EADDRNOTAVAIL;
    }
  }
  if (connected != 0) {
    if (errno == EADDRNOTAVAIL) {
      return absl::FailedPreconditionError(absl::StrCat(
          "connect (in repair mode) ", where,
          ": a socket of this network stack still holds the same connection — its checkpointed copy is alive "
          "here (a move within one host, or one network namespace, cannot carry a connection: kill the copy, or "
          "move it to another network stack)"));
    }
    return ErrnoStatus("connect (in repair mode: nothing is sent) " + where);
  }
  std::vector<tcp_repair_opt> opts;
  opts.push_back({TCPOPT_MAXSEG, t.mss()});
  if (t.wscale()) opts.push_back({TCPOPT_WINDOW, t.snd_wscale() | (t.rcv_wscale() << 16)});
  if (t.sack()) opts.push_back({TCPOPT_SACK_PERMITTED, 0});
  if (t.timestamps()) opts.push_back({TCPOPT_TIMESTAMP, 0});
  if (::setsockopt(c, IPPROTO_TCP, TCP_REPAIR_OPTIONS, opts.data(),
                   static_cast<socklen_t>(opts.size() * sizeof(tcp_repair_opt))) != 0) {
    return ErrnoStatus("TCP_REPAIR_OPTIONS (MSS, window scaling, SACK, timestamps) on " + where);
  }
  if (t.timestamps()) {
    RETURN_IF_ERROR(SetInt(c, IPPROTO_TCP, TCP_TIMESTAMP, static_cast<int>(t.timestamp()), "TCP_TIMESTAMP on ", where));
  }
  // Room for the queues: as large as the buffers they were in (which locks the sizes, where
  // the kernel would have grown them on its own: the one thing that differs after).
  auto room = [&](int name, uint32_t saved, uint64_t queued, const char* what) -> absl::Status {
    if (queued == 0) return absl::OkStatus();
    int size = static_cast<int>(std::max<uint64_t>(saved / 2, queued));  // the kernel doubles it
    return SetInt(c, SOL_SOCKET, name, size, what, absl::StrCat(" for ", where));
  };
  RETURN_IF_ERROR(room(SO_SNDBUFFORCE, t.sndbuf(), t.send_size(), "SO_SNDBUFFORCE"));
  RETURN_IF_ERROR(room(SO_RCVBUFFORCE, t.rcvbuf(), t.recv_size(), "SO_RCVBUFFORCE"));
  // The queues' bytes, each written into its queue (an idle connection has none: nothing asked).
  size_t sent = t.send_size() - t.unsent();
  if (sent > 0) {
    RETURN_IF_ERROR(SetInt(c, IPPROTO_TCP, TCP_REPAIR_QUEUE, TCP_SEND_QUEUE, "select the send queue of ", where));
    RETURN_IF_ERROR(SendAll(c, sendq.substr(0, sent), "restore the send queue of " + where));
  }
  if (!recvq.empty()) {
    RETURN_IF_ERROR(SetInt(c, IPPROTO_TCP, TCP_REPAIR_QUEUE, TCP_RECV_QUEUE, "select the receive queue of ", where));
    RETURN_IF_ERROR(SendAll(c, recvq, "restore the receive queue of " + where));
  }
  RETURN_IF_ERROR(SetInt(c, IPPROTO_TCP, TCP_REPAIR_QUEUE, TCP_NO_QUEUE, "TCP_REPAIR_QUEUE none on ", where));
  if (t.window().size() == sizeof(tcp_repair_window)) {
    if (::setsockopt(c, IPPROTO_TCP, TCP_REPAIR_WINDOW, t.window().data(), sizeof(tcp_repair_window)) != 0) {
      return ErrnoStatus("TCP_REPAIR_WINDOW on " + where);
    }
  }
  if (::fcntl(c, F_SETFL, fd.flags()) != 0) return ErrnoStatus("fcntl(F_SETFL) on " + where);
  out->unsent = sendq.substr(sent);
  out->where = where;
  return sock;
}

void AbortConnections(const std::vector<RepairedConnection>& conns) {
  for (const RepairedConnection& r : conns) {
    int on = TCP_REPAIR_ON;
    (void)::setsockopt(r.sock.get(), IPPROTO_TCP, TCP_REPAIR, &on, sizeof on);
  }
}

absl::Status FinishConnections(const std::vector<RepairedConnection>& conns,
                               const std::vector<ListenerReuse>& listeners) {
  for (const ListenerReuse& l : listeners) {
    RETURN_IF_ERROR(SetInt(l.sock.get(), SOL_SOCKET, SO_REUSEADDR, l.reuseaddr, "SO_REUSEADDR on ", l.where));
  }
  for (const RepairedConnection& r : conns) {
    int c = r.sock.get();
    RETURN_IF_ERROR(SetInt(c, IPPROTO_TCP, TCP_REPAIR, TCP_REPAIR_OFF, "setsockopt(TCP_REPAIR, off) on ", r.where));
    // Ending repair mode resets SO_REUSEADDR: the program's choice goes back.
    RETURN_IF_ERROR(SetInt(c, SOL_SOCKET, SO_REUSEADDR, r.reuseaddr ? 1 : 0, "SO_REUSEADDR on ", r.where));
    if (!r.unsent.empty()) RETURN_IF_ERROR(SendAll(c, r.unsent, "send the unsent bytes of " + r.where));
    if (r.shut >= 0 && ::shutdown(c, r.shut) != 0) {
      return ErrnoStatus(absl::StrCat(r.shut == SHUT_RD ? "shutdown(SHUT_RD) (the peer had closed) of "
                                                        : "shutdown(SHUT_WR) (it had closed its side) of ",
                                      r.where));
    }
  }
  return absl::OkStatus();
}

}  // namespace cairn::restore
