// `cairn job migrate` of a server with a client connected (issue 13, section 1): two real
// daemons, each in a network namespace of its own ("node A", "node B": two network stacks on
// one wire, tests/integration/netns.h), the client in a third ("C"). The server job has a
// service address (`job run --address`), which cairnd puts on A; the migration takes it off A
// once the server's state is saved and puts it on B before the connection is rebuilt there. The
// client keeps its connection — no reset, no end of file, no lost byte, the server accepted it
// once — and notices nothing but a pause. A migration the destination fails leaves the server on
// A with its address and its client, and nothing on B.

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "daemon_harness.h"
#include "netns.h"

namespace cairn::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr char kNft[] = "/usr/sbin/nft";
constexpr char kService[] = "10.79.0.100";

// Echoes each message upper-cased; answers "count" with how many connections it accepted.
constexpr char kServer[] =
    "import socket\n"
    "l = socket.socket()\n"
    "l.bind(('10.79.0.100', 7000))\n"
    "l.listen()\n"
    "accepted = 0\n"
    "while True:\n"
    "    c, _ = l.accept()\n"
    "    accepted += 1\n"
    "    while True:\n"
    "        d = c.recv(100)\n"
    "        if not d:\n"
    "            break\n"
    "        c.sendall(b'accepted %d' % accepted if d == b'count' else d.upper())\n"
    "    c.close()\n";

class MigrateConnectionsTest : public DaemonFixture {
 protected:
  void SetUp() override {
    DaemonFixture::SetUp();
    if (IsSkipped()) return;
    if (::geteuid() != 0 || !fs::exists(kNft) || !fs::exists("/usr/bin/nsenter")) {
      GTEST_SKIP() << "needs root, nft and nsenter (network namespaces as nodes)";
    }
    ASSERT_TRUE(net_.Create({"A", "B", "C"}, "10.79.0", Dir()));
  }
  void TearDown() override {
    for (DaemonProcess* d : {a_.get(), b_.get()}) {
      if (d != nullptr) d->KillJobs();
    }
    a_.reset();
    b_.reset();
    net_.Remove();
    DaemonFixture::TearDown();
  }

  // Node B (in namespace B, listening on its address), then node A (in A, B as its peer).
  // `b_stack`: the network namespace node B runs in (0: A's own, one network stack for both).
  void StartDaemons(std::vector<std::string> b_env = {}, size_t b_stack = 1, std::vector<std::string> a_env = {}) {
    std::string token = Token("token-b", "token-of-node-b-0123456789");
    std::string listen = net_.Address(b_stack) + ":" + std::to_string(FreeTcpPort());
    b_args_ = {"--listen", listen, "--token-file", token};
    b_stack_ = b_stack;
    b_ = std::make_unique<DaemonProcess>(Dir(), "node-b", b_args_, b_env);
    b_->RunUnder(net_.Enter(b_stack));
    ASSERT_TRUE(b_->Start());
    a_args_ = {"--peer", b_->node() + "=" + listen, "--peer-token-file", token, "--spool-dir", Dir() + "/spool"};
    a_ = std::make_unique<DaemonProcess>(Dir(), "node-a", a_args_, a_env);
    a_->RunUnder(net_.Enter(0));
    ASSERT_TRUE(a_->Start());
  }

  // Starts node A (`source`) or B again on its state directory, in its namespace, without
  // the environment it had.
  void Restart(bool source) {
    std::unique_ptr<DaemonProcess>& d = source ? a_ : b_;
    d = std::make_unique<DaemonProcess>(Dir(), source ? "node-a" : "node-b", source ? a_args_ : b_args_);
    d->RunUnder(net_.Enter(source ? 0 : b_stack_));
    ASSERT_TRUE(d->Start());
  }

  // The server job on A with its service address, and a client in C talking to it.
  void StartServerAndClient() {
    CommandResult r = a_->Cairn({"job", "run", "--name", "srv", "--address", std::string(kService) + "/24", "--",
                                 kPython, "-c", kServer});
    ASSERT_TRUE(r.Exited(0)) << r.Describe() << a_->Log();
    EXPECT_TRUE(net_.HasAddress(0, kService)) << "cairnd did not put the job's address on A: " << net_.Last();
    client_ = net_.ConnectFrom(2, kService, 7000);
    ASSERT_GE(client_, 0) << "the client could not reach the server on A: " << a_->Log();
    ASSERT_EQ(Ask("on a"), "ON A");
  }

  // Sends `line` (unless empty) and returns the answer, or "ERROR: ..." as the client saw it.
  std::string Ask(const std::string& line, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    if (!line.empty() && ::send(client_, line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size())) {
      return std::string("ERROR: send: ") + std::strerror(errno);
    }
    pollfd p{client_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) != 1) return "ERROR: no answer in time";
    char buf[100];
    ssize_t n = ::recv(client_, buf, sizeof buf, 0);
    if (n > 0) return std::string(buf, static_cast<size_t>(n));
    return std::string("ERROR: ") + (n == 0 ? "end of file" : std::strerror(errno));
  }

  // The cairn_lock_* tables of node i.
  std::string Locks(size_t i) {
    CommandResult r = RunCommand({"/usr/bin/nsenter", "--net=" + net_.Path(i), kNft, "list", "tables"}, Dir());
    std::string out;
    for (size_t at = r.out.find("cairn_lock_"); at != std::string::npos; at = r.out.find("cairn_lock_", at + 1)) {
      out += r.out.substr(at, r.out.find('\n', at) - at) + " ";
    }
    return out;
  }

  // The service address is on node `runs` (0: A, 1: B) and not on the other, and no network lock
  // is left on either.
  void ExpectAddressOnlyOnAndNoLock(size_t runs) {
    const char* name[] = {"A", "B"};
    EXPECT_TRUE(net_.HasAddress(runs, kService)) << "the address is not on " << name[runs] << ": " << net_.Last();
    EXPECT_FALSE(net_.HasAddress(1 - runs, kService)) << "the address stayed on " << name[1 - runs] << ": " << net_.Last();
    EXPECT_EQ(Locks(0), "") << "a network lock stayed on A";
    EXPECT_EQ(Locks(1), "") << "a network lock stayed on B";
  }

  NetworkNodes net_;
  std::unique_ptr<DaemonProcess> a_, b_;
  std::vector<std::string> a_args_, b_args_;
  size_t b_stack_ = 1;
  int client_ = -1;
};

TEST_F(MigrateConnectionsTest, ServerMovesWithItsAddressAndItsClientNoticesOnlyAPause) {
  ASSERT_NO_FATAL_FAILURE(StartDaemons());
  ASSERT_NO_FATAL_FAILURE(StartServerAndClient());
  int pid_a = Job(*a_, "srv")["host_pid"];

  auto t0 = Clock::now();
  json m = a_->Json({"job", "migrate", "srv", "--to", b_->node()});
  ASSERT_FALSE(m.is_null()) << a_->Log() << b_->Log();
  EXPECT_EQ(m["job"]["state"], "running") << m.dump();
  // The client's next exchange: its first answer from B (the pause it saw ends here).
  std::string answer = Ask("on b");
  double pause = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(answer, "ON B") << a_->Log() << b_->Log();
  EXPECT_EQ(Ask("count"), "accepted 1") << "the server saw its client connect again";
  std::printf("migration downtime %.3f s (cairn), the client's first answer %.3f s after the migration began\n",
              m.value("downtime_s", 0.0), pause);

  EXPECT_TRUE(WaitGone(pid_a, std::chrono::seconds(10)).gone);
  EXPECT_EQ(Job(*a_, "srv")["state"], "migrated");
  EXPECT_EQ(Job(*b_, "srv")["state"], "running");
  ExpectAddressOnlyOnAndNoLock(1);
  ::close(client_);
}

TEST_F(MigrateConnectionsTest, AMigrationTheDestinationFailsLeavesTheServerItsAddressAndItsClient) {
  ASSERT_NO_FATAL_FAILURE(StartDaemons({"CAIRND_TEST_FAIL_MIGRATION_RESTORE=1"}));
  ASSERT_NO_FATAL_FAILURE(StartServerAndClient());
  int pid_a = Job(*a_, "srv")["host_pid"];

  CommandResult m = a_->Cairn({"job", "migrate", "srv", "--to", b_->node()});
  EXPECT_FALSE(m.Exited(0)) << m.Describe();
  EXPECT_NE(m.err.find("CAIRND_TEST_FAIL_MIGRATION_RESTORE"), std::string::npos) << m.Describe();
  EXPECT_EQ(Ask("still on a"), "STILL ON A") << a_->Log() << b_->Log();
  EXPECT_EQ(Ask("count"), "accepted 1");
  EXPECT_EQ(Job(*a_, "srv")["state"], "running");
  EXPECT_EQ(Job(*a_, "srv")["host_pid"], pid_a);
  ExpectAddressOnlyOnAndNoLock(0);
  ::close(client_);
}

TEST_F(MigrateConnectionsTest, TwoNodesOnOneNetworkStackCannotMoveAnAddressAndSaySo) {
  ASSERT_NO_FATAL_FAILURE(StartDaemons({}, 0));
  ASSERT_NO_FATAL_FAILURE(StartServerAndClient());
  int pid_a = Job(*a_, "srv")["host_pid"];

  CommandResult m = a_->Cairn({"job", "migrate", "srv", "--to", b_->node()});
  EXPECT_FALSE(m.Exited(0)) << m.Describe();
  EXPECT_NE(m.err.find("share one network stack"), std::string::npos) << m.Describe();
  EXPECT_EQ(Ask("still here"), "STILL HERE") << a_->Log() << b_->Log();
  EXPECT_EQ(Job(*a_, "srv")["host_pid"], pid_a);
  EXPECT_TRUE(net_.HasAddress(0, kService)) << net_.Last();
  EXPECT_EQ(Locks(0), "") << "a network lock stayed on A";
  ::close(client_);
}

TEST_F(MigrateConnectionsTest, AnAddressLeavesTheNodeWithItsJobAndABadOneIsRefused) {
  ASSERT_NO_FATAL_FAILURE(StartDaemons());
  CommandResult bad = a_->Cairn({"job", "run", "--name", "bad", "--address", "10.79.0.300/24", "--", "/bin/true"});
  EXPECT_FALSE(bad.Exited(0)) << bad.Describe();
  EXPECT_NE(bad.err.find("10.79.0.300/24"), std::string::npos) << bad.Describe();
  // No interface of A is on 10.80.0.0/24: refused, and nothing runs.
  CommandResult away = a_->Cairn({"job", "run", "--name", "away", "--address", "10.80.0.7/24", "--", "/bin/sleep", "60"});
  EXPECT_FALSE(away.Exited(0)) << away.Describe();
  EXPECT_NE(away.err.find("no interface of this node has an address in 10.80.0.0/24"), std::string::npos)
      << away.Describe();
  EXPECT_FALSE(net_.HasAddress(0, "10.80.0.7"));

  // As a user types it: the address right before the "--" that starts a command with options of
  // its own (a repeatable option once swallowed the "--", and the command's options were refused).
  CommandResult typed = RunCommand({CAIRN_BIN, "job", "run", "--socket", a_->socket(), "--name", "typed", "--address",
                                    "10.79.0.101/24", "--", "/usr/bin/env", "-i", "/bin/sleep", "60"},
                                   Dir());
  EXPECT_TRUE(typed.Exited(0)) << typed.Describe();
  EXPECT_TRUE(net_.HasAddress(0, "10.79.0.101")) << net_.Last();

  ASSERT_NO_FATAL_FAILURE(StartServerAndClient());
  int pid = Job(*a_, "srv")["host_pid"];
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  EXPECT_TRUE(WaitGone(pid, std::chrono::seconds(10)).gone);
  auto deadline = Clock::now() + std::chrono::seconds(20);
  while (net_.HasAddress(0, kService) && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(net_.HasAddress(0, kService)) << "the address outlived its job: " << net_.Last();
  ::close(client_);
}

// Either daemon SIGKILLed at a step of the migration (daemon/migrate.h), then started again:
// wherever the job settles, it runs there with its address (and only there), no network lock
// is left on either node, and its client goes on over the same connection — it notices a
// longer pause, never a reset.
struct Cut {
  const char* name;
  bool kill_source;
  const char* stage;
  const char* settles;  // "source", "destination" or "either"
};
std::ostream& operator<<(std::ostream& os, const Cut& c) { return os << c.name; }

class MigrateConnectionsKillTest : public MigrateConnectionsTest, public ::testing::WithParamInterface<Cut> {};

TEST_P(MigrateConnectionsKillTest, TheJobSettlesOnOneNodeWithItsAddressAndItsClient) {
  const Cut& cut = GetParam();
  std::vector<std::string> fault = {std::string("CAIRN_FAULT_PAUSE=") + cut.stage};
  ASSERT_NO_FATAL_FAILURE(StartDaemons(cut.kill_source ? std::vector<std::string>{} : fault, 1,
                                       cut.kill_source ? fault : std::vector<std::string>{}));
  ASSERT_NO_FATAL_FAILURE(StartServerAndClient());
  int pid_a = Job(*a_, "srv")["host_pid"];

  DaemonProcess& victim = cut.kill_source ? *a_ : *b_;
  FaultCut killed = KillAtFaultPoint(*a_, {"job", "migrate", "srv", "--to", b_->node(), "--restore-timeout", "30"},
                                     victim, cut.stage);
  ASSERT_TRUE(killed.reached) << cut.stage << " never reached: " << victim.RunLog();
  ASSERT_NO_FATAL_FAILURE(Restart(cut.kill_source));

  std::string state_a;
  ASSERT_TRUE(WaitFor(
      [&] {
        state_a = Job(*a_, "srv")["state"];
        return state_a == "running" || state_a == "migrated";
      },
      std::chrono::seconds(60)))
      << "the source's record stays " << state_a << ": " << a_->RunLog() << b_->RunLog();
  bool moved = state_a == "migrated";
  if (std::string(cut.settles) != "either") {
    EXPECT_EQ(moved ? "destination" : "source", std::string(cut.settles));
  }
  size_t runs = moved ? 1 : 0;
  if (moved) {
    EXPECT_EQ(Job(*b_, "srv")["state"], "running");
    EXPECT_TRUE(WaitGone(pid_a, std::chrono::seconds(10)).gone);
  } else {
    EXPECT_EQ(Job(*a_, "srv")["host_pid"], pid_a);
  }
  EXPECT_EQ(Ask("after the cut"), "AFTER THE CUT") << a_->RunLog() << b_->RunLog();
  EXPECT_EQ(Ask("count"), "accepted 1");
  ExpectAddressOnlyOnAndNoLock(runs);
  ::close(client_);
}

INSTANTIATE_TEST_SUITE_P(
    Cuts, MigrateConnectionsKillTest,
    ::testing::Values(Cut{"SourceHoldingBeforeCommit", true, "migrate-held", "source"},
                      Cut{"SourceAfterSendingCommit", true, "migrate-commit-sent", "either"},
                      Cut{"DestinationRunningItBeforeCommit", false, "migrate-running", "source"},
                      Cut{"DestinationAfterItsRecord", false, "migrate-adopted", "destination"}),
    [](const ::testing::TestParamInfo<Cut>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace cairn::testing
