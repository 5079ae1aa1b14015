// Issue 21: a live migration whose source or destination daemon is SIGKILLed at each step of
// the protocol (src/daemon/migrate.h lists the cuts). Whichever side dies wherever, once the
// dead daemon is back: exactly one copy of the job runs (never none, never two), the records
// agree (`migrated` on the source only while the destination runs it), nothing received is
// left half-written, and the job finishes with the result of an uninterrupted run.
//
// Each case pauses the daemon to kill at a named fault point (CAIRN_FAULT_PAUSE=STAGE: the
// daemon's migration stages, or the engine's `frozen` inside the dump it runs), kills it there,
// starts it again on the same state directory, and waits for the migration to be settled.

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "daemon_harness.h"

namespace cairn::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Cut {
  const char* name;      // the test's name
  bool kill_source;      // which daemon dies
  const char* stage;     // where
  const char* settles;   // where the job must run afterwards: "source", "destination" or "either"
  int down_s = 0;        // how long the killed daemon stays down before it is started again
  // The destination's credential comes with the request (--to-token-file, as the controller
  // sends it), the source has no --peer-token-file of its own: a restarted source must have
  // kept the migration's credential to ask how it ended.
  bool token_in_request = false;
};

std::ostream& operator<<(std::ostream& os, const Cut& c) { return os << c.name; }

class MigrateKillTest : public DaemonFixture, public ::testing::WithParamInterface<Cut> {};

TEST_P(MigrateKillTest, ExactlyOneCopyRunsAndTheRecordsAgree) {
  const Cut& cut = GetParam();
  std::string expected = Expected();
  ASSERT_FALSE(expected.empty());
  std::string token = Token("token", "token-of-the-peers-0123456789");
  std::string addr_a = "127.0.0.1:" + std::to_string(FreeTcpPort());
  std::string addr_b = "127.0.0.1:" + std::to_string(FreeTcpPort());
  std::string fault = std::string("CAIRN_FAULT_PAUSE=") + cut.stage;
  std::vector<std::string> args_b = {"--listen", addr_b, "--token-file", token};
  auto b = std::make_unique<DaemonProcess>(Dir(), "node-b", args_b,
                                           cut.kill_source ? std::vector<std::string>{} : std::vector<std::string>{fault});
  ASSERT_TRUE(b->Start());
  std::vector<std::string> args_a = {"--listen", addr_a, "--token-file", token, "--peer", b->node() + "=" + addr_b,
                                     "--spool-dir", Dir() + "/spool"};
  if (!cut.token_in_request) args_a.insert(args_a.end(), {"--peer-token-file", token});
  auto a = std::make_unique<DaemonProcess>(Dir(), "node-a", args_a,
                                           cut.kill_source ? std::vector<std::string>{fault} : std::vector<std::string>{});
  ASSERT_TRUE(a->Start());
  const std::string node_a = a->node(), node_b = b->node();

  std::string out = Dir() + "/py";
  std::vector<std::string> run = {"job", "run", "--name", "py", "--checkpoint-every", "0", "--"};
  for (auto& arg : PythonJob(out)) run.push_back(arg);
  ASSERT_TRUE(a->Cairn(run).Exited(0)) << a->Log();
  std::this_thread::sleep_for(1s);  // mid-computation
  int pid_a = Job(*a, "py")["host_pid"];

  std::unique_ptr<DaemonProcess>& victim = cut.kill_source ? a : b;
  std::vector<std::string> migrate_args = {"job", "migrate", "py", "--to", node_b, "--restore-timeout", "30"};
  if (cut.token_in_request) migrate_args.insert(migrate_args.end(), {"--to-token-file", token});
  FaultCut killed = KillAtFaultPoint(*a, migrate_args, *victim, cut.stage);
  const CommandResult& migrate = killed.call;
  ASSERT_TRUE(killed.reached) << "the " << (cut.kill_source ? "source" : "destination") << " never reached " << cut.stage
                              << ": " << victim->RunLog() << "\nmigrate: " << migrate.Describe();
  EXPECT_FALSE(migrate.Exited(0)) << "the migration reported success although a daemon died in it: " << migrate.Describe();

  // The dead daemon comes back on its state directory (without the fault point), at once or
  // after the other side has given up asking (the source then holds the job in doubt).
  if (cut.down_s > 0) {
    std::this_thread::sleep_for(std::chrono::seconds(cut.down_s));
    if (!cut.kill_source) {
      EXPECT_EQ(Job(*a, "py")["state"], "migrating") << "the source should hold the job in doubt meanwhile";
      EXPECT_EQ(JobFreezer(node_a, "py"), "FROZEN") << "the job must stand frozen on the source while in doubt";
    }
  }
  victim = std::make_unique<DaemonProcess>(Dir(), cut.kill_source ? "node-a" : "node-b",
                                           cut.kill_source ? args_a : args_b);
  ASSERT_TRUE(victim->Start());

  // Settled: the source's record is running or migrated, no longer migrating.
  std::string state_a;
  bool settled = WaitFor(
      [&] {
        state_a = Job(*a, "py")["state"];
        return state_a == "running" || state_a == "migrated";
      },
      60s);
  ASSERT_TRUE(settled) << "the source's record stays " << state_a << ": " << a->RunLog() << b->RunLog();

  json jobs_b = b->Json({"job", "list"})["jobs"];
  json job_b;
  for (const json& j : jobs_b) {
    if (j["name"] == "py") job_b = j;
  }
  bool b_runs = !job_b.is_null() && job_b["state"] == "running";
  if (state_a == "migrated") {
    // Committed: only the destination's copy.
    ASSERT_TRUE(b_runs) << "the source says migrated but the destination does not run it: " << jobs_b.dump();
    EXPECT_TRUE(WaitGone(pid_a, 10s).gone) << "the source's copy still exists";
    EXPECT_TRUE(IsAlive(job_b["host_pid"].get<int>()));
    EXPECT_EQ(JobFreezer(node_b, "py"), "THAWED");
  } else {
    // Aborted: only the source's copy, and it runs (not left frozen).
    EXPECT_FALSE(b_runs) << "both nodes run the job: " << jobs_b.dump();
    EXPECT_EQ(Job(*a, "py")["host_pid"], pid_a);
    EXPECT_TRUE(IsAlive(pid_a));
    EXPECT_EQ(JobFreezer(node_a, "py"), "THAWED");
    // Nothing of it runs in the destination's cgroup.
    EXPECT_TRUE(WaitFor([&] { return ReadFile("/sys/fs/cgroup/freezer/cairn/" + node_b + ".py/cgroup.procs").empty(); }, 10s))
        << "a copy is left in the destination's cgroup";
  }
  std::string where = state_a == "migrated" ? "destination" : "source";
  if (std::string(cut.settles) != "either") {
    EXPECT_EQ(where, cut.settles);
  }

  // Nothing half-received is left on the destination.
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(b->state_dir() + "/checkpoints", ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    EXPECT_FALSE(it->path().string().ends_with(".partial")) << it->path();
  }

  // The copy that runs finishes with the uninterrupted run's result.
  Release(out);
  EXPECT_TRUE(WaitFor([&] { return ReadFile(out + "/result") == expected; }, 120s))
      << "result: " << ReadFile(out + "/result") << " (the job ran on the " << where << ")";
  std::cerr << "cut " << cut.name << ": settled on the " << where << "\n";
  a->KillJobs();
  b->KillJobs();
}

// The destination dies holding the commit and never comes back: the source holds the job frozen
// (state migrating) and asks on. `job kill` is refused, saying what to do; the operator, who
// knows the destination is gone for good, settles it with `job settle --here`: the job thaws
// and finishes with the uninterrupted run's result.
TEST_F(MigrateKillTest, DestinationGoneForGoodTheOperatorSettlesItHere) {
  std::string expected = Expected();
  ASSERT_FALSE(expected.empty());
  std::string token = Token("token", "token-of-the-peers-0123456789");
  std::string addr_a = "127.0.0.1:" + std::to_string(FreeTcpPort());
  std::string addr_b = "127.0.0.1:" + std::to_string(FreeTcpPort());
  DaemonProcess b(Dir(), "node-b", {"--listen", addr_b, "--token-file", token},
                  {"CAIRN_FAULT_PAUSE=migrate-commit-received"});
  ASSERT_TRUE(b.Start());
  DaemonProcess a(Dir(), "node-a",
                  {"--listen", addr_a, "--token-file", token, "--peer", b.node() + "=" + addr_b, "--peer-token-file",
                   token, "--spool-dir", Dir() + "/spool"});
  ASSERT_TRUE(a.Start());
  std::string out = Dir() + "/py";
  std::vector<std::string> run = {"job", "run", "--name", "py", "--checkpoint-every", "0", "--"};
  for (auto& arg : PythonJob(out)) run.push_back(arg);
  ASSERT_TRUE(a.Cairn(run).Exited(0)) << a.Log();
  std::this_thread::sleep_for(1s);
  int pid = Job(a, "py")["host_pid"];
  FaultCut killed = KillAtFaultPoint(a, {"job", "migrate", "py", "--to", b.node(), "--restore-timeout", "30"}, b,
                                     "migrate-commit-received");
  ASSERT_TRUE(killed.reached) << b.RunLog();
  ASSERT_TRUE(WaitFor([&] { return Job(a, "py")["state"] == "migrating"; }, 30s)) << a.RunLog();
  EXPECT_EQ(JobFreezer(a.node(), "py"), "FROZEN");

  CommandResult kill = a.Cairn({"job", "kill", "py"});
  EXPECT_FALSE(kill.Exited(0));
  EXPECT_TRUE(Matches(kill.err, "job settle py --here")) << kill.Describe();
  EXPECT_FALSE(a.Cairn({"job", "settle", "py"}).Exited(0)) << "settle needs --here or --there";
  CommandResult settled = a.Cairn({"job", "settle", "py", "--here"});
  ASSERT_TRUE(settled.Exited(0)) << settled.Describe() << a.RunLog();
  EXPECT_EQ(Job(a, "py")["state"], "running");
  EXPECT_EQ(Job(a, "py")["host_pid"], pid);
  EXPECT_EQ(JobFreezer(a.node(), "py"), "THAWED");
  EXPECT_FALSE(a.Cairn({"job", "settle", "py", "--here"}).Exited(0)) << "a settled migration is not settled twice";
  Release(out);
  EXPECT_TRUE(WaitFor([&] { return ReadFile(out + "/result") == expected; }, 120s)) << ReadFile(out + "/result");
  a.KillJobs();
}

INSTANTIATE_TEST_SUITE_P(
    Cuts, MigrateKillTest,
    ::testing::Values(Cut{"SourceWhileFrozen", true, "frozen", "source"},
                      Cut{"SourceHoldingBeforeCommit", true, "migrate-held", "source"},
                      Cut{"SourceAfterSendingCommit", true, "migrate-commit-sent", "either"},
                      Cut{"DestinationHoldingTheImage", false, "migrate-received", "source"},
                      Cut{"DestinationRunningItBeforeCommit", false, "migrate-running", "source"},
                      Cut{"DestinationGivenCommitBeforeItsRecord", false, "migrate-commit-received", "source"},
                      Cut{"DestinationAfterItsRecord", false, "migrate-adopted", "destination"},
                      // Down longer than the source asks (10 s): the source holds the job frozen
                      // (state migrating) and asks every 2 s until the destination answers.
                      Cut{"DestinationGivenCommitDownLong", false, "migrate-commit-received", "source", 14},
                      Cut{"DestinationAfterItsRecordDownLong", false, "migrate-adopted", "destination", 14},
                      // The controller's way: the credential only in the request (chaos run, seed
                      // 602: a restarted source held its job frozen for good, unable to ask).
                      Cut{"SourceHoldingBeforeCommitTokenInRequest", true, "migrate-held", "source", 0, true},
                      Cut{"SourceAfterSendingCommitTokenInRequest", true, "migrate-commit-sent", "either", 0, true}),
    [](const ::testing::TestParamInfo<Cut>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace cairn::testing
