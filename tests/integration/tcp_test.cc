// Live TCP connections (`cairn dump --tcp-established`, engine/dump/tcp.h, engine/restore/tcp.h)
// between a real server, redis-server from Debian, and a client outside the checkpoint: this
// test, speaking redis's protocol on plain sockets. The client must see its connection carry
// on: no reset, no end-of-file, no lost or repeated reply; a command sent while the server was
// down is answered once it is back. Nothing of the network lock may be left once the server
// runs again, whichever way the dump ended (restored, left running, interrupted, killed).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>

#include "harness.h"

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

  static int FreePort() {
    int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = 0;
    if (::bind(s, reinterpret_cast<sockaddr*>(&a), len) == 0 &&
        ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      port = ntohs(a.sin_port);
    }
    ::close(s);
    return port;
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

  // The network locks `cairn check` reports (one line each).
  std::string Locks() {
    CommandResult r = Cairn({"check"});
    std::string out;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("network lock", 0) == 0) out += line + "\n";
    }
    return out;
  }
};

// The server is checkpointed (killed) with a client connected and restored; the client keeps
// its connection: a command it sent while the server was gone is answered once it is back, and
// the connection serves on. An idle second client is untouched too.
TEST_F(LiveTcp, ClientsOfACheckpointedServerKeepTheirConnections) {
  int port = FreePort();
  pid_t pid = StartRedis(port);
  ASSERT_GT(pid, 0) << "redis-server did not start";
  int busy = Connect(port), idle = Connect(port);
  ASSERT_GE(busy, 0);
  ASSERT_GE(idle, 0);
  ASSERT_EQ(Ask(busy, "SET counter 41"), "+OK");
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
  EXPECT_EQ(Ask(busy, ""), ":42") << "the command sent while the server was down";
  double pause = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(Ask(busy, "GET counter"), "$2 42");
  EXPECT_EQ(Ask(busy, "INCR counter"), ":43");
  EXPECT_EQ(Ask(idle, "PING"), "+PONG") << "the idle client";
  int fresh = Connect(port);
  ASSERT_GE(fresh, 0) << "the restored server does not accept new clients";
  EXPECT_EQ(Ask(fresh, "GET counter"), "$2 43");
  EXPECT_EQ(Locks(), "") << "the restore left the network lock in place";
  std::printf("the client's command was answered %.3f s after the restore started\n", pause);
  ::close(busy);
  ::close(idle);
  ::close(fresh);
}

// --leave-running: the server goes on at once, its clients' connections out of repair mode and
// no lock left.
TEST_F(LiveTcp, ServerLeftRunningServesItsClientsAtOnce) {
  int port = FreePort();
  pid_t pid = StartRedis(port);
  ASSERT_GT(pid, 0);
  int c = Connect(port);
  ASSERT_GE(c, 0);
  ASSERT_EQ(Ask(c, "SET k v"), "+OK");
  // Without a choice the connection is refused, naming both answers; the server goes on.
  CommandResult refused = Dump(pid, *temp_ / "refused", /*leave_running=*/true);
  EXPECT_TRUE(refused.FailedCleanly()) << refused.Describe();
  EXPECT_NE(refused.err.find("--tcp-established"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("--tcp-close"), std::string::npos) << refused.err;
  EXPECT_EQ(Ask(c, "PING", 2s), "+PONG");
  CommandResult live = Cairn({"dump", "--pid", std::to_string(pid), "--dir", *temp_ / "ckpt", "--leave-running",
                              "--tcp-established"});
  ASSERT_TRUE(live.Exited(0)) << live.Describe();
  EXPECT_EQ(Ask(c, "GET k", 2s), "$1 v");
  EXPECT_EQ(Locks(), "");
  ::close(c);
}

// The dump interrupted (SIGTERM) or killed (SIGKILL: its guardian puts things back) after it
// saved the connections, with the lock taken and the sockets in repair mode: the server and
// its client go on as if nothing had happened.
TEST_F(LiveTcp, InterruptedOrKilledDumpLeavesTheConnectionsAsTheyWere) {
  int port = FreePort();
  pid_t pid = StartRedis(port);
  ASSERT_GT(pid, 0);
  int c = Connect(port);
  ASSERT_GE(c, 0);
  ASSERT_EQ(Ask(c, "SET n 0"), "+OK");
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

}  // namespace
}  // namespace cairn::testing
