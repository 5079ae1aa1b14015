// Live TCP connections (`cairn dump --tcp-established`, engine/dump/tcp.h, engine/restore/tcp.h)
// between a real server, redis-server from Debian, and a client outside the checkpoint: this
// test, speaking redis's protocol on plain sockets. The client must see its connection carry
// on: no reset, no end-of-file, no lost or repeated reply; a command sent while the server was
// down is answered once it is back. Nothing of the network lock may be left once the server
// runs again, whichever way the dump ended (restored, left running, interrupted, killed).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/stat.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "netns.h"

namespace cairn::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr char kRedisServer[] = "/usr/bin/redis-server";
constexpr char kNft[] = "/usr/sbin/nft";

class LiveTcp : public CairnTest {
 protected:
  void SetUp() override {
    CairnTest::SetUp();
    if (!fs::exists(kRedisServer) || !fs::exists(kNft)) {
      GTEST_SKIP() << kRedisServer << " or " << kNft << " is not installed (scripts/install-deps.sh installs them)";
    }
  }


  // A connection to 127.0.0.1:port; -1 if refused.
  static int Connect(int port) {
    int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(s);
      return -1;
    }
    return s;
  }

  // Sends `command` (inline protocol) on `s` unless empty, then reads one reply line, waiting
  // up to `timeout`: the line without CRLF, or "ERROR: ..." naming what the client saw.
  static std::string Ask(int s, const std::string& command, std::chrono::milliseconds timeout = 20s) {
    if (!command.empty()) {
      std::string line = command + "\r\n";
      if (::send(s, line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size())) {
        return "ERROR: send: " + std::string(strerror(errno));
      }
    }
    std::string reply;
    auto deadline = Clock::now() + timeout;
    // A bulk string ($N) carries its value on a second line.
    auto complete = [&] {
      size_t first = reply.find("\r\n");
      if (first == std::string::npos) return false;
      return reply[0] != '$' || reply.find("\r\n", first + 2) != std::string::npos;
    };
    while (!complete()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return "ERROR: no reply within the timeout (got '" + reply + "')";
      pollfd p{s, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) != 1) continue;
      char buf[256];
      ssize_t n = ::recv(s, buf, sizeof buf, 0);
      if (n == 0) return "ERROR: end-of-file (the server closed the connection)";
      if (n < 0) return "ERROR: recv: " + std::string(strerror(errno));
      reply.append(buf, static_cast<size_t>(n));
    }
    size_t first = reply.find("\r\n");
    if (reply[0] != '$') return reply.substr(0, first);
    return reply.substr(0, first) + " " + reply.substr(first + 2, reply.find("\r\n", first + 2) - first - 2);
  }

  // Nothing arrives on `s` for `quiet` (no reset, no end-of-file, no stray reply).
  static bool Silent(int s, std::chrono::milliseconds quiet) {
    pollfd p{s, POLLIN | POLLRDHUP, 0};
    return ::poll(&p, 1, static_cast<int>(quiet.count())) == 0;
  }

  pid_t StartRedis(int port) {
    std::string dir = *temp_ / "redis";
    fs::create_directories(dir);
    WriteFile(dir + "/stdin", "");
    pid_t pid = SpawnProgram({kRedisServer, "--port", std::to_string(port), "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "no", "--dir", dir, "--daemonize", "no", "--protected-mode", "no"},
                             dir + "/stdin", dir + "/stdout", dir + "/stderr");
    if (pid <= 0) return pid;
    Track(pid, kRedisServer);
    auto deadline = Clock::now() + 10s;
    for (;;) {
      int s = Connect(port);
      if (s >= 0) {
        std::string pong = Ask(s, "PING", 2s);
        ::close(s);
        if (pong == "+PONG") return pid;
      }
      if (Clock::now() > deadline) return -1;
      std::this_thread::sleep_for(20ms);
    }
  }

  // The options of the socket `pid` holds for the other end of client socket `client`, as
  // that process sees them (read through a copy of its descriptor): "" if none is found.
  static std::string ServerSideOptions(pid_t pid, int client) {
    sockaddr_storage mine{};
    socklen_t len = sizeof mine;
    if (::getsockname(client, reinterpret_cast<sockaddr*>(&mine), &len) != 0) return "";
    int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (pidfd < 0) return "";
    std::string out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
      int n = std::atoi(e.path().filename().c_str());
      int copy = static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, n, 0));
      if (copy < 0) continue;
      sockaddr_storage peer{};
      socklen_t plen = sizeof peer;
      if (::getpeername(copy, reinterpret_cast<sockaddr*>(&peer), &plen) == 0 && plen == len &&
          std::memcmp(&peer, &mine, len) == 0) {
        auto opt = [&](int level, int name) {
          int v = -1;
          socklen_t vlen = sizeof v;
          ::getsockopt(copy, level, name, &v, &vlen);
          return std::to_string(v);
        };
        out = "SO_REUSEADDR " + opt(SOL_SOCKET, SO_REUSEADDR) + ", TCP_NODELAY " + opt(IPPROTO_TCP, TCP_NODELAY) +
              ", SO_KEEPALIVE " + opt(SOL_SOCKET, SO_KEEPALIVE) + ", TCP_REPAIR " + opt(IPPROTO_TCP, TCP_REPAIR);
      }
      ::close(copy);
    }
    ::close(pidfd);
    return out;
  }

  // redis-server on a free loopback port and one client connected to it, which has stored
  // `key` = `value`; the server's pid (-1 if it did not start) and the client in *client.
  pid_t StartRedisWithClient(int* client, const std::string& key, const std::string& value) {
    port_ = FreeLoopbackPort();
    pid_t pid = StartRedis(port_);
    if (pid <= 0) return -1;
    *client = Connect(port_);
    if (*client < 0 || Ask(*client, "SET " + key + " " + value) != "+OK") return -1;
    return pid;
  }
  int port_ = 0;

  // The network locks `cairn check` reports (one line each) that hold this test's server port:
  // other tests running beside this one take locks of their own on the same host.
  std::string Locks() {
    CommandResult r = Cairn({"check"});
    std::string out;
    std::istringstream lines(r.out);
    const std::regex port("\\. " + std::to_string(port_) + "\\b");
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("network lock ", 0) != 0) continue;
      std::string name = line.substr(13, line.find(' ', 13) - 13);  // "network lock NAME in WHERE: ..."
      CommandResult table = RunCommand({"/usr/sbin/nft", "-n", "list", "table", "inet", name}, temp_->path());
      // A table gone between the two reads is no lock; one that cannot be read is reported.
      if (!table.Exited(0) && table.err.find("No such file") != std::string::npos) continue;
      if (!table.Exited(0) || std::regex_search(table.out, port)) out += line + "\n";
    }
    return out;
  }
};

// The children a cairn command leaves to close its nftables socket after it has exited
// (engine/net/nft_netlink.h), still running `older_than` after they were made: each should be
// gone moments after its parent. (Zombies are left out: reaping them is their new parent's part.)
std::vector<std::string> LingeringNftClosers(std::chrono::seconds older_than) {
  std::vector<std::string> out;
  std::ifstream up("/proc/uptime");
  double uptime = 0;
  up >> uptime;
  const long ticks = ::sysconf(_SC_CLK_TCK);
  for (const auto& e : fs::directory_iterator("/proc")) {
    std::string name = e.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "stat");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t open = text.find('('), close = text.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    if (text.substr(open + 1, close - open - 1) != "cairn-nft-close") continue;
    std::istringstream rest(text.substr(close + 2));
    std::vector<std::string> f{std::istream_iterator<std::string>(rest), std::istream_iterator<std::string>()};
    if (f.size() < 20 || f[0] == "Z") continue;
    double age = uptime - std::stod(f[19]) / static_cast<double>(ticks);  // field 22: start time
    if (age > static_cast<double>(older_than.count())) out.push_back(name + " (" + std::to_string(age) + " s old)");
  }
  return out;
}

// The server is checkpointed (killed) with a client connected and restored; the client keeps
// its connection: a command it sent while the server was gone is answered once it is back, and
// the connection serves on. An idle second client is untouched too.
TEST_F(LiveTcp, ClientsOfACheckpointedServerKeepTheirConnections) {
  int busy = -1;
  pid_t pid = StartRedisWithClient(&busy, "counter", "41");
  ASSERT_GT(pid, 0) << "redis-server did not start, or its client could not store counter";
  const int port = port_;
  int idle = Connect(port);
  ASSERT_GE(idle, 0);
  ASSERT_EQ(Ask(idle, "PING"), "+PONG");

  std::string ckpt = *temp_ / "ckpt";
  CommandResult dump = Cairn({"dump", "--pid", std::to_string(pid), "--dir", ckpt, "--tcp-established"});
  ASSERT_TRUE(dump.Exited(0)) << dump.Describe();
  ASSERT_TRUE(WaitGone(pid, 10s).gone);
  EXPECT_TRUE(Silent(busy, 300ms)) << "the client saw its connection reset or closed while the server was down";
  EXPECT_NE(Locks(), "") << "no network lock holds the connections between the dump and the restore";
  // Sent into the void: the lock drops it, the client's kernel will send it again.
  std::string line = "INCR counter\r\n";
  ASSERT_EQ(::send(busy, line.data(), line.size(), MSG_NOSIGNAL), static_cast<ssize_t>(line.size()));

  auto t0 = Clock::now();
  CommandResult restore = Restore(ckpt);
  ASSERT_TRUE(restore.Exited(0)) << restore.Describe();
  const auto restored = Clock::now();
  EXPECT_EQ(Ask(busy, ""), ":42") << "the command sent while the server was down";
  double pause = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(Ask(busy, "GET counter"), "$2 42");
  EXPECT_EQ(Ask(busy, "INCR counter"), ":43");
  EXPECT_EQ(Ask(idle, "PING"), "+PONG") << "the idle client";
  int fresh = Connect(port);
  ASSERT_GE(fresh, 0) << "the restored server does not accept new clients";
  EXPECT_EQ(Ask(fresh, "GET counter"), "$2 43");
  EXPECT_EQ(Locks(), "") << "the restore left the network lock in place";
  // The dump's and the restore's closers, had they outlived their commands, would be 2 s old
  // by now (each command hands its nftables socket to one as it exits).
  std::this_thread::sleep_until(restored + 2500ms);
  std::vector<std::string> lingering = LingeringNftClosers(2s);
  EXPECT_TRUE(lingering.empty()) << "a cairn command's nftables socket closer outlived it: " << lingering.front();
  std::printf("the client's command was answered %.3f s after the restore started\n", pause);
  ::close(busy);
  ::close(idle);
  ::close(fresh);
}

// --leave-running: the server goes on at once, its clients' connections out of repair mode and
// no lock left.
TEST_F(LiveTcp, ServerLeftRunningServesItsClientsAtOnce) {
  int c = -1;
  pid_t pid = StartRedisWithClient(&c, "k", "v");
  ASSERT_GT(pid, 0) << "redis-server did not start, or its client could not store k";
  // Without a choice the connection is refused, naming both answers; the server goes on.
  CommandResult refused = Dump(pid, *temp_ / "refused", /*leave_running=*/true);
  EXPECT_TRUE(refused.FailedCleanly()) << refused.Describe();
  EXPECT_NE(refused.err.find("--tcp-established"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("--tcp-close"), std::string::npos) << refused.err;
  EXPECT_EQ(Ask(c, "PING", 2s), "+PONG");
  std::string options = ServerSideOptions(pid, c);
  ASSERT_NE(options, "");
  // Without nftables it is refused before anything is frozen, saying what to install.
  CommandResult no_nft = Cairn({"dump", "--pid", std::to_string(pid), "--dir", *temp_ / "no-nft", "--leave-running",
                                "--tcp-established"},
                               WithEnv({"CAIRN_NFT=/nonexistent/nft"}));
  EXPECT_TRUE(no_nft.FailedCleanly()) << no_nft.Describe();
  EXPECT_NE(no_nft.err.find("apt install nftables"), std::string::npos) << no_nft.err;
  EXPECT_FALSE(fs::exists(*temp_ / "no-nft"));
  EXPECT_EQ(Ask(c, "PING", 2s), "+PONG");
  CommandResult live = Cairn({"dump", "--pid", std::to_string(pid), "--dir", *temp_ / "ckpt", "--leave-running",
                              "--tcp-established"});
  ASSERT_TRUE(live.Exited(0)) << live.Describe();
  // Out of repair mode, with the options the server had (repair mode forces SO_REUSEADDR).
  EXPECT_EQ(ServerSideOptions(pid, c), options);
  EXPECT_EQ(Ask(c, "GET k", 2s), "$1 v");
  EXPECT_EQ(Locks(), "");
  ::close(c);
}

// The dump interrupted (SIGTERM) or killed (SIGKILL: its guardian puts things back) after it
// saved the connections, with the lock taken and the sockets in repair mode: the server and
// its client go on as if nothing had happened.
TEST_F(LiveTcp, InterruptedOrKilledDumpLeavesTheConnectionsAsTheyWere) {
  int c = -1;
  pid_t pid = StartRedisWithClient(&c, "n", "0");
  ASSERT_GT(pid, 0) << "redis-server did not start, or its client could not store n";
  for (int sig : {SIGTERM, SIGKILL}) {
    SCOPED_TRACE(sig == SIGTERM ? "SIGTERM" : "SIGKILL");
    std::string dir = *temp_ / ("ckpt-" + std::to_string(sig));
    std::string err = dir + ".err";
    pid_t dump = SpawnProgram({CairnBinary(), "dump", "--pid", std::to_string(pid), "--dir", dir, "--tcp-established"},
                              *temp_ / "redis/stdin", dir + ".out", err, {"CAIRN_FAULT_PAUSE=fds"});
    ASSERT_GT(dump, 0);
    auto deadline = Clock::now() + 30s;
    while (ReadFile(err).find("fault point fds") == std::string::npos && Clock::now() < deadline) {
      std::this_thread::sleep_for(5ms);
    }
    ASSERT_NE(ReadFile(err).find("fault point fds"), std::string::npos) << ReadFile(err);
    EXPECT_NE(Locks(), "") << "the lock is not taken at the fds stage";
    ::kill(dump, sig);
    ::waitpid(dump, nullptr, 0);
    // The guardian (after SIGKILL) works on after the dump is gone: wait for what it puts back.
    deadline = Clock::now() + 15s;
    while (Locks() != "" && Clock::now() < deadline) std::this_thread::sleep_for(20ms);
    EXPECT_EQ(Locks(), "") << ReadFile(err);
    EXPECT_FALSE(fs::exists(dir)) << "a checkpoint was committed";
    EXPECT_EQ(Ask(c, "INCR n", 5s), ":" + std::to_string(sig == SIGTERM ? 1 : 2)) << ReadFile(err);
    EXPECT_TRUE(Silent(c, 100ms));
  }
  ::close(c);
}

// `cairn check --fix` removes the network locks a killed cairn left, and no other: not a
// dump's while it saves the connections (known by its claim, and by its journal), nor a
// restore's while it rebuilds them. Each is caught at a fault point and stopped (SIGSTOP) while
// check --fix runs, then let go: the lock stays, check names who holds it, and the client keeps
// its connection throughout.
TEST_F(LiveTcp, CheckFixLeavesTheLocksOfADumpAndARestoreUnderWay) {
  int c = -1;
  pid_t pid = StartRedisWithClient(&c, "n", "0");
  ASSERT_GT(pid, 0) << "redis-server did not start, or its client could not store n";
  // Runs `cairn ARGS` until it reaches `stage` (it waits there 2 s) and stops it there; its pid
  // (-1 if it never got there), its stderr in *err.
  auto stopped_at = [&](std::vector<std::string> args, const std::string& stage, const std::string& name,
                        std::vector<std::string> env, std::string* err) -> pid_t {
    *err = *temp_ / (name + ".err");
    args.insert(args.begin(), CairnBinary());
    env.push_back("CAIRN_FAULT_PAUSE=" + stage);
    env.push_back("CAIRN_FAULT_PAUSE_S=2");
    pid_t p = SpawnProgram(args, *temp_ / "redis/stdin", *temp_ / (name + ".out"), *err, env);
    auto deadline = Clock::now() + 30s;
    while (ReadFile(*err).find("fault point " + stage) == std::string::npos && Clock::now() < deadline) {
      std::this_thread::sleep_for(1ms);
    }
    ::kill(p, SIGSTOP);  // (within its 2 s at the fault point: check --fix may take its time)
    return ReadFile(*err).find("fault point " + stage) == std::string::npos ? -1 : p;
  };
  auto go_on = [](pid_t p) {
    ::kill(p, SIGCONT);
    int status = 0;
    while (::waitpid(p, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  };
  std::string err;
  {
    SCOPED_TRACE("a dump whose journal check --fix does not see: its claim keeps the lock");
    std::vector<std::string> elsewhere = {"CAIRN_JOURNAL_DIR=" + (*temp_ / "journals")};
    pid_t dump = stopped_at({"dump", "--pid", std::to_string(pid), "--dir", *temp_ / "live", "--tcp-established",
                             "--leave-running"},
                            "fds", "live", elsewhere, &err);
    ASSERT_GT(dump, 0) << ReadFile(err);
    ASSERT_NE(Locks(), "") << "the lock is not taken at the fds stage";
    CommandResult fix = Cairn({"check", "--fix"});
    EXPECT_NE(fix.out.find("in use by pid " + std::to_string(dump) + " (cairn)"), std::string::npos) << fix.Describe();
    EXPECT_NE(Locks(), "") << "check --fix removed the lock of a dump in progress\n" << fix.Describe();
    ASSERT_EQ(go_on(dump), 0) << ReadFile(err);
    EXPECT_EQ(Ask(c, "INCR n", 5s), ":1");
  }
  std::string ckpt = *temp_ / "ckpt";
  {
    SCOPED_TRACE("a dump that kills its process, its journal seen");
    pid_t dump = stopped_at({"dump", "--pid", std::to_string(pid), "--dir", ckpt, "--tcp-established"}, "fds", "dump",
                            {}, &err);
    ASSERT_GT(dump, 0) << ReadFile(err);
    CommandResult fix = Cairn({"check", "--fix"});
    EXPECT_NE(fix.out.find("in use by a dump in progress"), std::string::npos) << fix.Describe();
    EXPECT_NE(Locks(), "") << "check --fix removed the lock of a dump in progress\n" << fix.Describe();
    ASSERT_EQ(go_on(dump), 0) << ReadFile(err);
    ASSERT_TRUE(WaitGone(pid, 10s).gone);
  }
  std::string line = "INCR n\r\n";  // into the lock, sent again by the client's kernel
  ASSERT_EQ(::send(c, line.data(), line.size(), MSG_NOSIGNAL), static_cast<ssize_t>(line.size()));
  {
    SCOPED_TRACE("a restore under way");
    pid_t restore = stopped_at({"restore", "--verify", "--detach", "--dir", ckpt}, "restore-building", "restore", {}, &err);
    ASSERT_GT(restore, 0) << ReadFile(err);
    CommandResult fix = Cairn({"check", "--fix"});
    EXPECT_NE(fix.out.find("in use by pid " + std::to_string(restore) + " (cairn)"), std::string::npos)
        << fix.Describe();
    EXPECT_NE(Locks(), "") << "check --fix removed the lock of a restore under way\n" << fix.Describe();
    ASSERT_EQ(go_on(restore), 0) << ReadFile(err);
  }
  EXPECT_EQ(Ask(c, "", 10s), ":2") << "the command sent while the server was down";
  EXPECT_EQ(Ask(c, "INCR n"), ":3");
  EXPECT_EQ(Locks(), "") << "the restore left a network lock";
  ::close(c);
}

// Two network stacks as two machines: "node A" and "node B" are network namespaces made by the
// test, each with a veth into a bridge, and the client lives in a third ("C"). A python3 server
// in A listens on the service address 10.77.0.100; the client connects and talks to it. The
// server is checkpointed (killed) in A, the service address moves from A to B, and the server
// is restored by a `cairn restore` running in B: the client keeps its connection and notices
// nothing but a pause.
class TwoStacks : public LiveTcp {
 protected:
  void SetUp() override {
    LiveTcp::SetUp();
    if (IsSkipped()) return;
    ASSERT_TRUE(net_.Create({"A", "B", "C"}, "10.77.0", temp_->path()));
  }
  void TearDown() override {
    net_.Remove();
    LiveTcp::TearDown();
  }

  NetworkNodes net_;
};

TEST_F(TwoStacks, ConnectionMovesWithItsAddressToAnotherNetworkStack) {
  const std::string service = "10.77.0.100";
  ASSERT_TRUE(net_.Ip({"-n", net_.Namespace(0), "addr", "add", service + "/24", "dev", net_.Device(0)})) << net_.Last();
  // Its listener has no SO_REUSEADDR (Python's default): the restore binds and listens on the
  // port its live connection shares, and gives the listener its own setting back (--verify).
  std::string server = UppercaseEchoServerPy(service, 7000, /*reuseaddr=*/false);
  std::string dir = *temp_ / "server";
  fs::create_directories(dir);
  WriteFile(dir + "/stdin", "");
  // nsenter enters the network namespace alone (`ip netns exec` makes a mount namespace too).
  pid_t pid = SpawnProgram({"/usr/bin/nsenter", "--net=" + net_.Path(0), "python3", "-c", server}, dir + "/stdin",
                           dir + "/stdout", dir + "/stderr");
  ASSERT_GT(pid, 0);
  Track(pid, "python3");
  int c = net_.ConnectFrom(2, service, 7000);
  ASSERT_GE(c, 0) << "the client could not reach the server in A: " << ReadFile(dir + "/stderr");
  auto ask = [&](const std::string& line) {
    if (!line.empty()) ::send(c, line.data(), line.size(), MSG_NOSIGNAL);
    pollfd p{c, POLLIN, 0};
    if (::poll(&p, 1, 20000) != 1) return std::string("ERROR: no answer within 20 s");
    char buf[100];
    ssize_t n = ::recv(c, buf, sizeof buf, 0);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("ERROR: ") + (n == 0 ? "EOF" : strerror(errno));
  };
  ASSERT_EQ(ask("on a"), "ON A");

  std::string ckpt = *temp_ / "ckpt";
  CommandResult dump = Cairn({"dump", "--pid", std::to_string(pid), "--dir", ckpt, "--tcp-established"});
  ASSERT_TRUE(dump.Exited(0)) << dump.Describe();
  ASSERT_TRUE(WaitGone(pid, 10s).gone);
  // Sent while the server is down: A's lock drops it; the client sends it again later.
  ASSERT_EQ(::send(c, "moved", 5, MSG_NOSIGNAL), 5);
  // The address moves: off A, onto B; the client forgets where it was. (A packet that reached
  // B before the restore there has taken its own lock would be answered with a reset: the
  // client's next retransmission comes about 200 ms after its send.)
  ASSERT_TRUE(net_.Ip({"-n", net_.Namespace(0), "addr", "del", service + "/24", "dev", net_.Device(0)})) << net_.Last();
  ASSERT_TRUE(net_.Ip({"-n", net_.Namespace(1), "addr", "add", service + "/24", "dev", net_.Device(1)})) << net_.Last();
  ASSERT_TRUE(net_.Ip({"-n", net_.Namespace(2), "neigh", "flush", "all"})) << net_.Last();
  CommandResult restore = RunCommand({"/usr/bin/nsenter", "--net=" + net_.Path(1), CairnBinary(), "restore",
                                      "--detach", "--verify", "--dir", ckpt},
                                     temp_->path());
  ASSERT_TRUE(restore.Exited(0)) << restore.Describe();
  EXPECT_EQ(ask(""), "MOVED") << "the line the client sent while the server moved";
  EXPECT_EQ(ask("on b"), "ON B");
  // It runs in B's network stack now.
  struct stat b{}, there{};
  ASSERT_EQ(::stat((net_.Path(1)).c_str(), &b), 0);
  ASSERT_EQ(::stat(("/proc/" + std::to_string(pid) + "/ns/net").c_str(), &there), 0);
  EXPECT_EQ(there.st_ino, b.st_ino) << "the restored server is not in B's network namespace";
  ::close(c);
}

}  // namespace
}  // namespace cairn::testing
