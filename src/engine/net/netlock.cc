#include "engine/net/netlock.h"

#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <sched.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "engine/net/nft_netlink.h"

namespace cairn::net {
namespace {

// Debian's nft; CAIRN_NFT names another (an install elsewhere, or a test's missing one).
const char* NftPath() {
  static const char* const path = [] {
    const char* env = std::getenv("CAIRN_NFT");
    return env != nullptr && *env != '\0' ? env : "/usr/sbin/nft";
  }();
  return path;
}
constexpr char kPrefix[] = "cairn_lock_";

struct Endpoint {
  bool v6 = false;
  std::string addr;  // text
  std::string raw;   // the address in network order: 4 or 16 bytes
  uint16_t port = 0;
};

bool InOurNetns(pid_t pid) {
  if (pid <= 0) return true;
  struct stat ours {}, theirs {};
  return ::stat("/proc/thread-self/ns/net", &ours) == 0 &&  // the calling thread's: its netlink socket's
         ::stat(absl::StrCat("/proc/", pid, "/ns/net").c_str(), &theirs) == 0 && ours.st_ino == theirs.st_ino &&
         ours.st_dev == theirs.st_dev;
}

absl::StatusOr<Endpoint> ParseEndpoint(const std::string& bytes) {
  Endpoint e;
  char text[INET6_ADDRSTRLEN] = {};
  if (bytes.size() >= sizeof(sockaddr_in6) && reinterpret_cast<const sockaddr*>(bytes.data())->sa_family == AF_INET6) {
    sockaddr_in6 a;
    std::memcpy(&a, bytes.data(), sizeof a);
    e.port = ntohs(a.sin6_port);
    if (IN6_IS_ADDR_V4MAPPED(&a.sin6_addr)) {
      ::inet_ntop(AF_INET, &a.sin6_addr.s6_addr[12], text, sizeof text);
      e.raw.assign(reinterpret_cast<const char*>(&a.sin6_addr.s6_addr[12]), 4);
    } else {
      e.v6 = true;
      ::inet_ntop(AF_INET6, &a.sin6_addr, text, sizeof text);
      e.raw.assign(reinterpret_cast<const char*>(&a.sin6_addr), 16);
    }
  } else if (bytes.size() >= sizeof(sockaddr_in) &&
             reinterpret_cast<const sockaddr*>(bytes.data())->sa_family == AF_INET) {
    sockaddr_in a;
    std::memcpy(&a, bytes.data(), sizeof a);
    e.port = ntohs(a.sin_port);
    ::inet_ntop(AF_INET, &a.sin_addr, text, sizeof text);
    e.raw.assign(reinterpret_cast<const char*>(&a.sin_addr), 4);
  } else {
    return absl::InvalidArgumentError("not an IPv4 or IPv6 socket address");
  }
  e.addr = text;
  return e;
}

// The file naming the network namespace of `netns_of` ("" for 0: ours).
std::string NetnsPath(pid_t netns_of) { return netns_of > 0 ? absl::StrCat("/proc/", netns_of, "/ns/net") : ""; }

// Runs nft with `args`, `input` on its stdin, in the network namespace the file `ns_path` names
// ("": ours); its stderr is returned in the error.
absl::StatusOr<std::string> RunNft(const std::vector<std::string>& args, const std::string& input,
                                   const std::string& ns_path = "") {
  RETURN_IF_ERROR(CheckNftables());
  const char* nft = NftPath();
  UniqueFd netns;
  if (!ns_path.empty()) {
    const std::string& path = ns_path;
    netns = UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!netns.valid()) return ErrnoStatus("open " + path + " (the connections' network namespace)");
  }
  // The script from a memfd (no pipe: nft exiting early cannot raise SIGPIPE here).
  UniqueFd in_r(static_cast<int>(::memfd_create("cairn-nft", MFD_CLOEXEC)));
  if (!in_r.valid()) return ErrnoStatus("memfd_create for nft");
  RETURN_IF_ERROR(WriteAll(in_r.get(), input, "the nft script"));
  if (::lseek(in_r.get(), 0, SEEK_SET) != 0) return ErrnoStatus("lseek the nft script");
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return ErrnoStatus("pipe for nft");
  UniqueFd out_r(out[0]), out_w(out[1]);
  std::vector<char*> argv;
  std::vector<std::string> all = {"nft"};
  all.insert(all.end(), args.begin(), args.end());
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  // vfork: the child borrows this process's memory until it execs, so starting nft costs the
  // same from a daemon holding gigabytes as from a small CLI (a fork copied the page tables:
  // 100+ ms from a busy cairnd, inside a group rank's freeze). The child makes only system
  // calls on values computed before it.
  const int in_fd = in_r.get(), out_fd = out_w.get(), ns_fd = netns.valid() ? netns.get() : -1;
  char* env[] = {nullptr};
  char** args_v = argv.data();
  pid_t pid = ::vfork();
  if (pid < 0) return ErrnoStatus("vfork for nft");
  if (pid == 0) {
    // (dup2 onto itself would keep close-on-exec: a guardian may run with 0-2 closed.)
    if (in_fd == 0) ::fcntl(0, F_SETFD, 0); else ::dup2(in_fd, 0);
    if (out_fd == 1) ::fcntl(1, F_SETFD, 0); else ::dup2(out_fd, 1);
    if (out_fd == 2) ::fcntl(2, F_SETFD, 0); else ::dup2(out_fd, 2);
    if (ns_fd >= 0 && ::setns(ns_fd, CLONE_NEWNET) != 0) ::_exit(126);
    ::execve(nft, args_v, env);
    ::_exit(127);
  }
  in_r.Reset();
  out_w.Reset();
  std::string output;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(out_r.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    output.append(buf, static_cast<size_t>(n));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string how = WIFSIGNALED(status)          ? absl::StrCat("killed by signal ", WTERMSIG(status))
                      : WEXITSTATUS(status) == 126 ? "could not enter the connections' network namespace"
                      : WEXITSTATUS(status) == 127 ? absl::StrCat("could not run ", nft)
                                                   : absl::StrCat("exit status ", WEXITSTATUS(status));
    return absl::InternalError(absl::StrFormat("nft %s failed (%s): %s", absl::StrJoin(args, " "), how,
                                               absl::StripTrailingAsciiWhitespace(output)));
  }
  return output;
}

}  // namespace

std::string LockTableName(absl::string_view checkpoint_id) { return absl::StrCat(kPrefix, checkpoint_id); }

absl::Status CheckNftables() {
  if (::access(NftPath(), X_OK) == 0) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      NftPath(), " is missing: cairn holds the packets of live TCP connections with nftables while it saves and rebuilds "
            "them; install it (apt install nftables), or checkpoint with --tcp-close"));
}

absl::Status TakeNetworkLock(const std::string& table, const std::vector<Connection>& conns, pid_t netns_of) {
  // One set per address family of (local address . local port . remote address . remote
  // port), matched by one rule per direction: packets we send leave with the tuple as it is
  // (output), the peer's arrive with it reversed (input). On loopback a packet passes both;
  // it is dropped at the first. A set keeps the ruleset small: 1,000 connections load in
  // a quarter of the time separate rules take.
  std::vector<std::pair<Endpoint, Endpoint>> ends;
  for (const Connection& c : conns) {
    ASSIGN_OR_RETURN(Endpoint l, ParseEndpoint(c.local));
    ASSIGN_OR_RETURN(Endpoint r, ParseEndpoint(c.remote));
    if (l.v6 != r.v6) return absl::InvalidArgumentError("a connection between an IPv4 and an IPv6 address");
    ends.emplace_back(std::move(l), std::move(r));
  }
  // In this process's network namespace (a job's, as a rule): through netlink, no nft to start.
  if (InOurNetns(netns_of)) {
    std::vector<LockedConnection> keys;
    for (const auto& [l, r] : ends) keys.push_back({l.raw, r.raw, l.port, r.port});
    absl::Status made = CreateLockTable(table, keys);
    if (made.ok()) return absl::OkStatus();
    CAIRN_LOG_WARN("event=netlink_lock_failed table={} error=\"{}\"", table, made.ToString());
  }
  std::set<std::string> v4, v6;
  for (const auto& [l, r] : ends) {
    (l.v6 ? v6 : v4).insert(absl::StrFormat("%s . %d . %s . %d", l.addr, l.port, r.addr, r.port));
  }
  std::string sets, input, output;
  auto add = [&](const std::set<std::string>& elements, const char* name, const char* ip, const char* type) {
    if (elements.empty()) return;
    absl::StrAppendFormat(&sets, "  set %s {\n    type %s . inet_service . %s . inet_service\n    elements = { %s }\n  }\n",
                          name, type, type, absl::StrJoin(elements, ",\n      "));
    absl::StrAppendFormat(&output, "    %s saddr . tcp sport . %s daddr . tcp dport @%s drop\n", ip, ip, name);
    absl::StrAppendFormat(&input, "    %s daddr . tcp dport . %s saddr . tcp sport @%s drop\n", ip, ip, name);
  };
  add(v4, "conns4", "ip", "ipv4_addr");
  add(v6, "conns6", "ip6", "ipv6_addr");
  // Declared empty and deleted first, in the same transaction: a table of that name left by a
  // killed run is replaced, not merged with.
  std::string script = absl::StrFormat(
      "table inet %s\ndelete table inet %s\n"
      "table inet %s {\n%s"
      "  chain input {\n    type filter hook input priority -300; policy accept;\n%s  }\n"
      "  chain output {\n    type filter hook output priority -300; policy accept;\n%s  }\n"
      "}\n",
      table, table, table, sets, input, output);
  auto done = RunNft({"-f", "-"}, script, NetnsPath(netns_of));
  if (!done.ok()) return Annotate(done.status(), "take the network lock " + table);
  return absl::OkStatus();
}

absl::Status RemoveNetworkLock(const std::string& table, pid_t netns_of) {
  if (InOurNetns(netns_of)) {
    absl::Status deleted = DeleteLockTable(table);
    if (deleted.ok() || absl::IsNotFound(deleted)) return absl::OkStatus();
    CAIRN_LOG_WARN("event=netlink_delete_failed table={} error=\"{}\"", table, deleted.ToString());
  }
  return RemoveNetworkLockIn(table, NetnsPath(netns_of));
}

absl::Status OpenNetworkLock(const std::string& table, pid_t netns_of) {
  // In this process's network namespace (a job's, as a rule): through netlink, no nft to start.
  if (InOurNetns(netns_of)) {
    absl::Status flushed = FlushLockTable(table);
    if (flushed.ok() || absl::IsNotFound(flushed)) return absl::OkStatus();
    CAIRN_LOG_WARN("event=netlink_flush_failed table={} error=\"{}\"", table, flushed.ToString());
  }
  auto done = RunNft({"flush", "table", "inet", table}, "", NetnsPath(netns_of));
  if (done.ok()) return absl::OkStatus();
  if (absl::StrContains(done.status().message(), "No such file or directory")) return absl::OkStatus();
  return Annotate(done.status(), "open the network lock " + table);
}

absl::Status OpenNetworkLocks(const std::vector<std::string>& tables, pid_t netns_of) {
  if (tables.empty()) return absl::OkStatus();
  if (InOurNetns(netns_of)) {
    absl::Status opened = OpenLockTables(tables);
    if (opened.ok()) return absl::OkStatus();
    CAIRN_LOG_WARN("event=netlink_open_failed tables={} error=\"{}\"", absl::StrJoin(tables, ","), opened.ToString());
  }
  std::string script;
  for (const std::string& t : tables) absl::StrAppend(&script, "add table inet ", t, "\nflush table inet ", t, "\n");
  auto done = RunNft({"-f", "-"}, script, NetnsPath(netns_of));
  if (!done.ok()) return Annotate(done.status(), "open the network locks " + absl::StrJoin(tables, ", "));
  return absl::OkStatus();
}

absl::Status RemoveNetworkLocks(const std::vector<std::string>& tables, pid_t netns_of) {
  if (tables.empty()) return absl::OkStatus();
  if (InOurNetns(netns_of)) {  // each on its own, through netlink (RemoveNetworkLock)
    absl::Status first;
    for (const std::string& t : tables) {
      absl::Status s = RemoveNetworkLock(t, netns_of);
      if (first.ok()) first = s;
    }
    return first;
  }
  std::string script;
  for (const std::string& t : tables) absl::StrAppend(&script, "delete table inet ", t, "\n");
  auto done = RunNft({"-f", "-"}, script, NetnsPath(netns_of));
  if (done.ok()) return absl::OkStatus();
  // One was gone already (the transaction is all or nothing): each on its own.
  absl::Status first;
  for (const std::string& t : tables) {
    absl::Status s = RemoveNetworkLock(t, netns_of);
    if (first.ok()) first = s;
  }
  return first;
}

absl::Status RemoveNetworkLockIn(const std::string& table, const std::string& ns_path) {
  auto done = RunNft({"delete", "table", "inet", table}, "", ns_path);
  if (done.ok()) return absl::OkStatus();
  if (absl::StrContains(done.status().message(), "No such file or directory")) return absl::OkStatus();
  return Annotate(done.status(), absl::StrCat("remove the network lock ", table,
                                              ns_path.empty() ? "" : " (in the network namespace " + ns_path + ")"));
}

absl::StatusOr<std::vector<NetworkNamespace>> OtherNetworkNamespaces() {
  struct stat mine {};
  if (::stat("/proc/self/ns/net", &mine) != 0) return ErrnoStatus("stat /proc/self/ns/net");
  std::set<ino_t> seen = {mine.st_ino};
  std::vector<NetworkNamespace> out;
  auto fresh = [&](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && seen.insert(st.st_ino).second;
  };
  // Those a name under /run/netns holds (ip netns), then those a process is in.
  std::error_code ec;
  using Dir = std::filesystem::directory_iterator;
  for (Dir it("/run/netns", ec); !ec && it != Dir(); it.increment(ec)) {
    std::string path = it->path().string();
    if (fresh(path)) out.push_back({path, "the named network namespace " + path});
  }
  ec.clear();
  for (Dir it("/proc", ec); !ec && it != Dir(); it.increment(ec)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(it->path().filename().string(), &pid)) continue;
    std::string path = absl::StrCat("/proc/", pid, "/ns/net");
    if (!fresh(path)) continue;
    absl::StatusOr<std::string> comm = ReadFile(absl::StrCat("/proc/", pid, "/comm"));
    out.push_back({path, absl::StrFormat("the network namespace of pid %d (%s)", pid,
                                         comm.ok() ? absl::StripTrailingAsciiWhitespace(*comm) : "")});
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> ListNetworkLocks(const std::string& ns_path) {
  ASSIGN_OR_RETURN(std::string out, RunNft({"list", "tables"}, "", ns_path));
  std::vector<std::string> locks;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (!absl::ConsumePrefix(&line, "table inet ")) continue;
    if (absl::StartsWith(line, kPrefix)) locks.emplace_back(line);
  }
  return locks;
}

}  // namespace cairn::net
