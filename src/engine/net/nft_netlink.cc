#include "engine/net/nft_netlink.h"

#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <mutex>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace cairn::net {
namespace {

// nfnetlink messages of one batch, with nested attributes.
class Batch {
 public:
  Batch() { Message(NFNL_MSG_BATCH_BEGIN, 0, AF_UNSPEC, NFNL_SUBSYS_NFTABLES); }

  // Starts a message of nf_tables type `type` (NFT_MSG_...) for `family`; the previous one ends.
  void Message(uint16_t type, uint16_t flags, uint8_t family, uint16_t res_id = 0) {
    Close();
    start_ = buf_.size();
    nlmsghdr h{};
    h.nlmsg_type = type;
    h.nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | flags);
    h.nlmsg_seq = ++seq_;
    nfgenmsg g{};
    g.nfgen_family = family;
    g.version = NFNETLINK_V0;
    g.res_id = htons(res_id);
    Append(&h, sizeof h);
    Append(&g, sizeof g);
    Pad();
  }
  void Nft(uint16_t msg, uint16_t flags, uint8_t family = NFPROTO_INET) {
    Message(static_cast<uint16_t>((NFNL_SUBSYS_NFTABLES << 8) | msg), flags, family);
  }

  void Bytes(uint16_t type, const void* data, size_t len) {
    nlattr a{};
    a.nla_type = type;
    a.nla_len = static_cast<uint16_t>(NLA_HDRLEN + len);
    Append(&a, sizeof a);
    Append(data, len);
    Pad();
  }
  void Str(uint16_t type, const std::string& s) { Bytes(type, s.c_str(), s.size() + 1); }
  void U32(uint16_t type, uint32_t v) {
    uint32_t be = htonl(v);
    Bytes(type, &be, sizeof be);
  }
  // A nested attribute: its attributes follow until the matching End.
  size_t Nest(uint16_t type) {
    size_t at = buf_.size();
    nlattr a{};
    a.nla_type = static_cast<uint16_t>(type | NLA_F_NESTED);
    Append(&a, sizeof a);
    return at;
  }
  void End(size_t at) {
    reinterpret_cast<nlattr*>(buf_.data() + at)->nla_len = static_cast<uint16_t>(buf_.size() - at);
  }

  // Ends the batch; returns its bytes.
  const std::string& Finish() {
    Message(NFNL_MSG_BATCH_END, 0, AF_UNSPEC, NFNL_SUBSYS_NFTABLES);
    Close();
    return buf_;
  }
  uint32_t seq() const { return seq_; }

 private:
  void Append(const void* p, size_t n) { buf_.append(static_cast<const char*>(p), n); }
  void Pad() { buf_.resize(NLMSG_ALIGN(buf_.size()), '\0'); }
  void Close() {
    if (start_ == std::string::npos) return;
    reinterpret_cast<nlmsghdr*>(buf_.data() + start_)->nlmsg_len = static_cast<uint32_t>(buf_.size() - start_);
    start_ = std::string::npos;
  }

  std::string buf_;
  size_t start_ = std::string::npos;
  uint32_t seq_ = 0;
};

// The nfnetlink socket of this process, kept open: closing one while nf_tables still has objects
// of a committed transaction to free (a deleted table, flushed rules, or the one a create
// replaces) waits for them — an RCU grace period, 6-15 ms on a small VM, in the frozen path of
// every dump and restore that opened one per batch. The kernel frees them in the background
// meanwhile, so a socket kept open pays nothing. One per network namespace (a socket stays in
// the one it was made in). It belongs to the process that used it first: a forked child (a
// dump's guardian, forked from a daemon whose other threads may hold `mu`) never touches it and
// sends each batch on a socket of its own.
struct Channel {
  std::atomic<pid_t> owner{0};
  std::mutex mu;
  UniqueFd sock;
  ino_t netns = 0;
};
Channel& TheChannel() {
  static Channel* c = new Channel;  // never destroyed: used until exit
  return *c;
}

// Whether this process owns the channel (made it, or is the first to ask).
bool OwnsChannel(Channel& c) {
  pid_t self = ::getpid();
  pid_t none = 0;
  return c.owner.compare_exchange_strong(none, self) || none == self;
}

absl::StatusOr<UniqueFd> NewSocket() {
  UniqueFd sock(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER));
  if (!sock.valid()) return ErrnoStatus("socket(NETLINK_NETFILTER)");
  timeval limit{2, 0};
  if (::setsockopt(sock.get(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit) != 0) {
    return ErrnoStatus("setsockopt(SO_RCVTIMEO) on the netlink socket");
  }
  int room = 4 << 20;  // a batch of thousands of set elements
  (void)::setsockopt(sock.get(), SOL_SOCKET, SO_SNDBUFFORCE, &room, sizeof room);
  // Errors without a copy of the message they are about: an error about a large message (a
  // chunk of set elements) then fits the reply buffer, and is not skipped as a cut reply.
  int one = 1;
  if (::setsockopt(sock.get(), SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof one) != 0) {
    return ErrnoStatus("setsockopt(NETLINK_CAP_ACK) on the netlink socket");
  }
  return sock;
}

// The owner's socket, `c.mu` held.
absl::StatusOr<int> OpenChannel(Channel& c) {
  struct stat ns{};
  if (::stat("/proc/thread-self/ns/net", &ns) != 0) return ErrnoStatus("stat /proc/thread-self/ns/net");
  if (c.sock.valid() && c.netns == ns.st_ino) return c.sock.get();
  ASSIGN_OR_RETURN(c.sock, NewSocket());
  c.netns = ns.st_ino;
  return c.sock.get();
}

// The child of LeaveChannelToChild. It shares the exiting process's memory, so it makes raw
// system calls only, on values set before it was made: it keeps the socket and a pidfd of its
// parent, waits until the parent has exited whole (every thread past closing its descriptors:
// the pidfd is then readable), and exits, closing the socket last.
int channel_fd_to_keep = -1;
int parent_pidfd = -1;
// (No ASan instrumentation: its fake stacks are the parent thread's, which is exiting. None of
// these calls fails in practice, so none writes the parent thread's errno, whose TLS it shares.)
__attribute__((no_sanitize("address"))) int HoldChannelPastParent(void*) {
  ::syscall(SYS_prctl, PR_SET_NAME, "cairn-nft-close", 0, 0, 0);
  unsigned a = static_cast<unsigned>(std::min(channel_fd_to_keep, parent_pidfd));
  unsigned b = static_cast<unsigned>(std::max(channel_fd_to_keep, parent_pidfd));
  if (a > 0) ::syscall(SYS_close_range, 0U, a - 1, 0U);
  if (b > a + 1) ::syscall(SYS_close_range, a + 1, b - 1, 0U);
  ::syscall(SYS_close_range, b + 1, ~0U, 0U);
  pollfd p{parent_pidfd, POLLIN, 0};
  while (::syscall(SYS_ppoll, &p, 1, nullptr, nullptr, 0) < 0) {
  }
  ::syscall(SYS_exit, 0);
  return 0;
}

absl::Status SendOn(int sock, Batch& batch, uint32_t acked, const std::string& what) {
  // Answers an earlier batch left (errors about its later messages, after the one it returned
  // on) go first: on a socket kept open they would pile up, and could be taken for this batch's
  // (the kernel answers a batch before sendto returns, so nothing of it is drained here).
  alignas(nlmsghdr) char reply[65536];
  while (::recv(sock, reply, sizeof reply, MSG_DONTWAIT | MSG_TRUNC) >= 0 || errno == EINTR) {
  }
  const std::string& buf = batch.Finish();
  sockaddr_nl to{};
  to.nl_family = AF_NETLINK;
  if (::sendto(sock, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to) !=
      static_cast<ssize_t>(buf.size())) {
    return ErrnoStatus("send the nftables batch to " + what);
  }
  for (;;) {
    ssize_t n = ::recv(sock, reply, sizeof reply, MSG_TRUNC);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("read the nftables answer to " + what);
    // A reply cut short could hide an error: never taken for an answer.
    if (static_cast<size_t>(n) > sizeof reply || !NLMSG_OK(reinterpret_cast<nlmsghdr*>(reply), static_cast<unsigned>(n))) {
      return absl::InternalError(absl::StrCat("an nftables answer to ", what, " did not fit or was malformed"));
    }
    for (auto* h = reinterpret_cast<nlmsghdr*>(reply); NLMSG_OK(h, static_cast<unsigned>(n)); h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type != NLMSG_ERROR) continue;
      int err = reinterpret_cast<nlmsgerr*>(NLMSG_DATA(h))->error;
      if (err == 0 && h->nlmsg_seq != acked) continue;
      if (err == 0) return absl::OkStatus();
      errno = -err;
      return ErrnoStatus(what);
    }
  }
}

// Sends `batch`, whose message `acked` asked for an acknowledgement, and waits for it (or for
// the error about any message of the batch, which aborts the whole transaction). Never long:
// the processes may be frozen meanwhile. ENOENT comes back as NotFound.
absl::Status Send(Batch& batch, uint32_t acked, const std::string& what) {
  Channel& channel = TheChannel();
  if (!OwnsChannel(channel)) {
    ASSIGN_OR_RETURN(UniqueFd own, NewSocket());
    return SendOn(own.get(), batch, acked, what);
  }
  std::lock_guard<std::mutex> hold(channel.mu);
  ASSIGN_OR_RETURN(int sock, OpenChannel(channel));
  absl::Status sent = SendOn(sock, batch, acked, what);
  // A socket that failed may hold a half-read answer: the next batch gets a fresh one.
  if (!sent.ok() && !absl::IsNotFound(sent) && !absl::IsAlreadyExists(sent)) channel.sock.Reset();
  return sent;
}

// Registers, as nft numbers them in attributes.
constexpr uint32_t kReg1 = NFT_REG_1;
constexpr uint32_t kReg32 = NFT_REG32_00;

void Expr(Batch& b, const char* name, const std::function<void()>& data) {
  size_t elem = b.Nest(NFTA_LIST_ELEM);
  b.Str(NFTA_EXPR_NAME, name);
  size_t d = b.Nest(NFTA_EXPR_DATA);
  data();
  b.End(d);
  b.End(elem);
}

void MetaLoad(Batch& b, uint32_t key) {
  Expr(b, "meta", [&] {
    b.U32(NFTA_META_DREG, kReg1);
    b.U32(NFTA_META_KEY, key);
  });
}

void CmpByte(Batch& b, uint8_t value) {
  Expr(b, "cmp", [&] {
    b.U32(NFTA_CMP_SREG, kReg1);
    b.U32(NFTA_CMP_OP, NFT_CMP_EQ);
    size_t d = b.Nest(NFTA_CMP_DATA);
    b.Bytes(NFTA_DATA_VALUE, &value, 1);
    b.End(d);
  });
}

void PayloadLoad(Batch& b, uint32_t base, uint32_t offset, uint32_t len, uint32_t reg) {
  Expr(b, "payload", [&] {
    b.U32(NFTA_PAYLOAD_DREG, reg);
    b.U32(NFTA_PAYLOAD_BASE, base);
    b.U32(NFTA_PAYLOAD_OFFSET, offset);
    b.U32(NFTA_PAYLOAD_LEN, len);
  });
}

struct Family {
  bool v6;
  const char* set;
  uint32_t set_id;
  uint32_t addr_len;  // 4 or 16
  uint32_t saddr_off, daddr_off;
  uint8_t nfproto;
  uint32_t key_type;  // nft's datatype of the concatenation (informational)
};

// nft's datatype numbers, concatenated as it does: 6 bits per field.
constexpr uint32_t kTypeIpv4 = 7, kTypeIpv6 = 8, kTypeService = 13;
constexpr uint32_t Concat(uint32_t addr) { return (((addr << 6 | kTypeService) << 6 | addr) << 6) | kTypeService; }

constexpr Family kV4{false, "conns4", 1, 4, 12, 16, NFPROTO_IPV4, Concat(kTypeIpv4)};
constexpr Family kV6{true, "conns6", 2, 16, 8, 24, NFPROTO_IPV6, Concat(kTypeIpv6)};

uint32_t KeyLen(const Family& f) { return 2 * f.addr_len + 2 * 4; }

// The key of a connection: address, port (2 bytes, padded to a register), address, port.
std::string Key(const std::string& a, uint16_t ap, const std::string& b, uint16_t bp) {
  std::string k;
  auto port = [&](uint16_t p) {
    uint16_t be = htons(p);
    k.append(reinterpret_cast<const char*>(&be), 2);
    k.append(2, '\0');
  };
  k += a;
  port(ap);
  k += b;
  port(bp);
  return k;
}

// `first` . `first port` . `second` . `second port` @set drop, where `first` is the source
// (output) or the destination (input) of the packet.
void LockRule(Batch& b, const std::string& table, const char* chain, const Family& f, bool output) {
  b.Nft(NFT_MSG_NEWRULE, NLM_F_CREATE | NLM_F_APPEND);
  b.Str(NFTA_RULE_TABLE, table);
  b.Str(NFTA_RULE_CHAIN, chain);
  size_t exprs = b.Nest(NFTA_RULE_EXPRESSIONS);
  MetaLoad(b, NFT_META_NFPROTO);
  CmpByte(b, f.nfproto);
  MetaLoad(b, NFT_META_L4PROTO);
  CmpByte(b, IPPROTO_TCP);
  uint32_t reg = kReg32;
  uint32_t addr_regs = f.addr_len / 4;
  // The local end first: the packet's source going out, its destination coming in.
  PayloadLoad(b, NFT_PAYLOAD_NETWORK_HEADER, output ? f.saddr_off : f.daddr_off, f.addr_len, reg);
  reg += addr_regs;
  PayloadLoad(b, NFT_PAYLOAD_TRANSPORT_HEADER, output ? 0 : 2, 2, reg);
  reg += 1;
  PayloadLoad(b, NFT_PAYLOAD_NETWORK_HEADER, output ? f.daddr_off : f.saddr_off, f.addr_len, reg);
  reg += addr_regs;
  PayloadLoad(b, NFT_PAYLOAD_TRANSPORT_HEADER, output ? 2 : 0, 2, reg);
  Expr(b, "lookup", [&] {
    b.Str(NFTA_LOOKUP_SET, f.set);
    b.U32(NFTA_LOOKUP_SET_ID, f.set_id);
    b.U32(NFTA_LOOKUP_SREG, kReg32);
  });
  Expr(b, "immediate", [&] {
    b.U32(NFTA_IMMEDIATE_DREG, NFT_REG_VERDICT);
    size_t data = b.Nest(NFTA_IMMEDIATE_DATA);
    size_t verdict = b.Nest(NFTA_DATA_VERDICT);
    b.U32(NFTA_VERDICT_CODE, NF_DROP);
    b.End(verdict);
    b.End(data);
  });
  b.End(exprs);
}

void BaseChain(Batch& b, const std::string& table, const char* chain, uint32_t hook) {
  b.Nft(NFT_MSG_NEWCHAIN, NLM_F_CREATE);
  b.Str(NFTA_CHAIN_TABLE, table);
  b.Str(NFTA_CHAIN_NAME, chain);
  size_t h = b.Nest(NFTA_CHAIN_HOOK);
  b.U32(NFTA_HOOK_HOOKNUM, hook);
  b.U32(NFTA_HOOK_PRIORITY, static_cast<uint32_t>(-300));
  b.End(h);
  b.U32(NFTA_CHAIN_POLICY, NF_ACCEPT);
  b.Str(NFTA_CHAIN_TYPE, "filter");
}

}  // namespace

void LeaveChannelToChild() {
  Channel& c = TheChannel();
  if (c.owner.load() != ::getpid()) return;
  std::lock_guard<std::mutex> hold(c.mu);
  if (!c.sock.valid()) return;
  UniqueFd self(static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0)));
  if (!self.valid()) return;
  alignas(16) static char stack[16384];
  channel_fd_to_keep = c.sock.get();
  parent_pidfd = self.get();
  // CLONE_VM: no copy of the page tables. It starts with every signal blocked (this thread's
  // mask, blocked around the clone): no handler of ours runs on its stack. Its exit signal goes
  // to whoever reaps it once this process is gone (init, or a subreaper).
  sigset_t all, was;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &was);
  int made = ::clone(HoldChannelPastParent, stack + sizeof stack, CLONE_VM | SIGCHLD, nullptr);
  ::pthread_sigmask(SIG_SETMASK, &was, nullptr);
  if (made < 0) return;
  (void)self.Release();  // both stay open until this process exits: the child's copies outlive them
  (void)c.sock.Release();
}

absl::Status CreateLockTable(const std::string& table, const std::vector<LockedConnection>& conns) {
  std::set<std::string> set4, set6;  // each key once: a set element is added once
  for (const LockedConnection& c : conns) {
    if (c.local_addr.size() != c.remote_addr.size() || (c.local_addr.size() != 4 && c.local_addr.size() != 16)) {
      return absl::InvalidArgumentError("a connection whose addresses are not both IPv4 or both IPv6");
    }
    (c.local_addr.size() == 4 ? set4 : set6).insert(Key(c.local_addr, c.local_port, c.remote_addr, c.remote_port));
  }
  std::vector<std::string> keys4(set4.begin(), set4.end()), keys6(set6.begin(), set6.end());
  Batch b;
  // Declared, deleted and declared again in the same transaction: a table of that name left by
  // a killed run is replaced, not merged with.
  b.Nft(NFT_MSG_NEWTABLE, NLM_F_CREATE);
  b.Str(NFTA_TABLE_NAME, table);
  b.Nft(NFT_MSG_DELTABLE, 0);
  b.Str(NFTA_TABLE_NAME, table);
  b.Nft(NFT_MSG_NEWTABLE, NLM_F_CREATE | NLM_F_EXCL);
  b.Str(NFTA_TABLE_NAME, table);
  for (const auto& [f, keys] : {std::make_pair(&kV4, &keys4), std::make_pair(&kV6, &keys6)}) {
    if (keys->empty()) continue;
    b.Nft(NFT_MSG_NEWSET, NLM_F_CREATE | NLM_F_EXCL);
    b.Str(NFTA_SET_TABLE, table);
    b.Str(NFTA_SET_NAME, f->set);
    b.U32(NFTA_SET_FLAGS, 0);
    b.U32(NFTA_SET_KEY_TYPE, f->key_type);
    b.U32(NFTA_SET_KEY_LEN, KeyLen(*f));
    b.U32(NFTA_SET_ID, f->set_id);
    // The elements, a few hundred per message.
    for (size_t at = 0; at < keys->size(); at += 512) {
      b.Nft(NFT_MSG_NEWSETELEM, NLM_F_CREATE | NLM_F_EXCL);
      b.Str(NFTA_SET_ELEM_LIST_TABLE, table);
      b.Str(NFTA_SET_ELEM_LIST_SET, f->set);
      b.U32(NFTA_SET_ELEM_LIST_SET_ID, f->set_id);
      size_t list = b.Nest(NFTA_SET_ELEM_LIST_ELEMENTS);
      for (size_t i = at; i < std::min(keys->size(), at + 512); ++i) {
        size_t elem = b.Nest(NFTA_LIST_ELEM);
        size_t key = b.Nest(NFTA_SET_ELEM_KEY);
        b.Bytes(NFTA_DATA_VALUE, (*keys)[i].data(), (*keys)[i].size());
        b.End(key);
        b.End(elem);
      }
      b.End(list);
    }
  }
  BaseChain(b, table, "input", NF_INET_LOCAL_IN);
  BaseChain(b, table, "output", NF_INET_LOCAL_OUT);
  for (const auto& [f, keys] : {std::make_pair(&kV4, &keys4), std::make_pair(&kV6, &keys6)}) {
    if (keys->empty()) continue;
    LockRule(b, table, "input", *f, /*output=*/false);
    LockRule(b, table, "output", *f, /*output=*/true);
  }
  // The last message asks for the acknowledgement.
  b.Nft(NFT_MSG_NEWTABLE, NLM_F_CREATE | NLM_F_ACK);
  b.Str(NFTA_TABLE_NAME, table);
  return Send(b, b.seq(), "make the network lock table inet " + table);
}

absl::Status FlushLockTable(const std::string& table) {
  Batch b;
  b.Nft(NFT_MSG_DELRULE, NLM_F_ACK);
  b.Str(NFTA_RULE_TABLE, table);
  return Send(b, b.seq(), "flush the rules of table inet " + table);
}

absl::Status OpenLockTables(const std::vector<std::string>& tables) {
  Batch b;
  for (const std::string& t : tables) {
    b.Nft(NFT_MSG_NEWTABLE, NLM_F_CREATE);
    b.Str(NFTA_TABLE_NAME, t);
    b.Nft(NFT_MSG_DELRULE, NLM_F_ACK);
    b.Str(NFTA_RULE_TABLE, t);
  }
  return Send(b, b.seq(), "open the network locks");
}

absl::Status DeleteLockTable(const std::string& table) {
  Batch b;
  b.Nft(NFT_MSG_DELTABLE, NLM_F_ACK);
  b.Str(NFTA_TABLE_NAME, table);
  return Send(b, b.seq(), "delete table inet " + table);
}

}  // namespace cairn::net
