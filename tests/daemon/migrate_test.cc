// `cairn job migrate` end to end: two real daemons on loopback TCP (distinct node names, state
// directories and tokens' files), a real python3 job moved from one to the other while it
// computes, and migrations that fail and must leave the job running where it was.

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "daemon_harness.h"

namespace cairn::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class MigrateTest : public DaemonFixture {
 protected:
  ::testing::AssertionResult HasEvent(const DaemonProcess& d, const std::string& job, const std::string& kind,
                                      const std::string& pattern) {
    json events = d.Json({"job", "show", job})["events"];
    for (const json& e : events) {
      if (e.value("kind", "") == kind && Matches(e.value("detail", ""), pattern)) return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "no " << kind << " event matching " << pattern << " in " << events.dump();
  }

  // A line of the daemon's log holds both strings (a regex over the whole log is slow).
  bool LogHas(const DaemonProcess& d, const std::string& a, const std::string& b) {
    std::string log = ReadFile(Dir() + "/" + d.node() + ".log.run");  // the running daemon's
    for (size_t at = log.find(a); at != std::string::npos; at = log.find(a, at + 1)) {
      size_t end = log.find('\n', at);
      if (log.substr(at, end == std::string::npos ? std::string::npos : end - at).find(b) != std::string::npos) return true;
    }
    return false;
  }

  void RunPython(const DaemonProcess& d, const std::string& out) {
    std::vector<std::string> run = {"job", "run", "--name", "py", "--checkpoint-every", "0", "--keep", "3", "--"};
    for (auto& arg : PythonJob(out)) run.push_back(arg);
    CommandResult r = d.Cairn(run);
    ASSERT_TRUE(r.Exited(0)) << r.Describe() << d.Log();
  }
};

TEST_F(MigrateTest, RunningPython3JobMovesToTheOtherDaemonAndFinishesWithTheSameResult) {
  std::string expected = Expected();
  ASSERT_FALSE(expected.empty());
  std::string token_b = Token("token-b", "token-of-node-b-0123456789");
  std::string addr_b = "127.0.0.1:" + std::to_string(FreeTcpPort());
  DaemonProcess b(Dir(), "node-b", {"--listen", addr_b, "--token-file", token_b});
  ASSERT_TRUE(b.Start());
  DaemonProcess a(Dir(), "node-a",
                  {"--peer", b.node() + "=" + addr_b, "--peer-token-file", token_b, "--spool-dir", Dir() + "/spool"});
  ASSERT_TRUE(a.Start());
  // `node info` says where each node listens and whom it may send jobs to.
  std::string info_a = a.Cairn({"node", "info"}).out, info_b = b.Cairn({"node", "info"}).out;
  EXPECT_TRUE(Matches(info_a, "peers: " + b.node() + "=" + addr_b)) << info_a;
  EXPECT_TRUE(Matches(info_a, "tcp: off")) << info_a;
  EXPECT_TRUE(Matches(info_b, "tcp: " + addr_b + " \\(port [0-9]+; calls carry the token\\)")) << info_b;
  std::string out = Dir() + "/py";
  RunPython(a, out);
  std::this_thread::sleep_for(1s);  // mid-computation
  int pid_a = Job(a, "py")["host_pid"];

  json m = a.Json({"job", "migrate", "py", "--to", b.node()});
  ASSERT_FALSE(m.is_null()) << a.Log() << b.Log();
  EXPECT_EQ(m["from_node"], a.node());
  EXPECT_EQ(m["to_node"], b.node());
  EXPECT_GT(m.value("downtime_s", 0.0), 0.0) << m.dump();
  EXPECT_LT(m.value("downtime_s", 0.0), m.value("total_s", 0.0)) << m.dump();
  EXPECT_GT(JsonInt(m["bytes"]), 1 << 20) << m.dump();
  EXPECT_GT(JsonInt(m["precopy_bytes"]), 0) << m.dump();
  EXPECT_EQ(m["job"]["state"], "running") << m.dump();

  // The source's copy is gone, the job is marked migrated there, with the figures in its event.
  EXPECT_TRUE(WaitGone(pid_a, 10s).gone);
  EXPECT_EQ(Job(a, "py")["state"], "migrated");
  EXPECT_TRUE(HasEvent(a, "py", "migrated", "to node " + b.node() + ".*downtime [0-9.]+ s, [0-9]+ bytes moved"));
  EXPECT_FALSE(fs::exists(Dir() + "/spool") && !fs::is_empty(Dir() + "/spool")) << "the spool keeps an image";
  EXPECT_TRUE(HasEvent(b, "py", "migrated-in", "from node " + a.node()));

  // The destination runs it (same name, same policy), keeps the received image as a checkpoint,
  // and the job finishes with the uninterrupted run's result, its output in the destination's log.
  json jb = Job(b, "py");
  EXPECT_EQ(jb["node"], b.node());
  EXPECT_EQ(jb["spec"]["checkpoint"]["keep_last"], 3) << jb.dump();
  json cps = b.Json({"checkpoint", "list", "--job", "py"})["checkpoints"];
  ASSERT_EQ(cps.size(), 1u) << cps.dump();
  EXPECT_EQ(cps[0]["reason"], "migration");
  EXPECT_TRUE(WaitFor([&] { return b.Json({"checkpoint", "list", "--job", "py"})["checkpoints"][0]["state"] == "complete"; }, 10s));
  Release(out);
  ASSERT_TRUE(WaitState(b, "py", "exited"));
  EXPECT_EQ(Job(b, "py")["health"]["exit_code"], 0);
  EXPECT_EQ(ReadFile(out + "/result"), expected);
  EXPECT_EQ(b.Cairn({"job", "logs", "py"}).out, "done\n");
  EXPECT_EQ(a.Cairn({"job", "logs", "py"}).out, "") << "the job wrote to the source's log after it moved";

  // The source may delete its record; the name is then free there again.
  EXPECT_TRUE(a.Cairn({"job", "delete", "py"}).Exited(0));
}

TEST_F(MigrateTest, FailedMigrationsLeaveTheJobRunningWhereItWas) {
  std::string expected = Expected();
  std::string token_b = Token("token-b", "token-of-node-b-0123456789");
  std::string wrong = Token("wrong", "not-the-token-of-b-0123456789");
  std::string addr_b = "127.0.0.1:" + std::to_string(FreeTcpPort());
  std::string nobody = "127.0.0.1:" + std::to_string(FreeTcpPort());
  DaemonProcess b(Dir(), "node-b", {"--listen", addr_b, "--token-file", token_b});
  ASSERT_TRUE(b.Start());
  DaemonProcess a(Dir(), "node-a",
                  {"--peer", b.node() + "=" + addr_b, "--peer", "ghost=" + nobody, "--spool-dir", Dir() + "/spool"});
  ASSERT_TRUE(a.Start());
  std::string out = Dir() + "/py";
  RunPython(a, out);
  int pid = Job(a, "py")["host_pid"];

  // No token for the peer at all.
  CommandResult no_token = a.Cairn({"job", "migrate", "py", "--to", b.node()});
  EXPECT_TRUE(no_token.FailedCleanly()) << no_token.Describe();
  EXPECT_TRUE(Matches(no_token.err, "no token for " + b.node())) << no_token.err;
  // The destination is down.
  CommandResult down = a.Cairn({"job", "migrate", "py", "--to", "ghost", "--to-token-file", token_b});
  EXPECT_TRUE(down.FailedCleanly()) << down.Describe();
  EXPECT_TRUE(Matches(down.err, "does not answer.*keeps running on node " + a.node())) << down.err;
  // The destination refuses the token.
  CommandResult bad = a.Cairn({"job", "migrate", "py", "--to", b.node(), "--to-token-file", wrong});
  EXPECT_TRUE(bad.FailedCleanly()) << bad.Describe();
  EXPECT_TRUE(Matches(bad.err, "refused our token")) << bad.err;
  // The destination already has a job of that name: refused before anything is copied.
  ASSERT_TRUE(b.Cairn({"job", "run", "--name", "py", "--", "/bin/sleep", "60"}).Exited(0));
  CommandResult taken = a.Cairn({"job", "migrate", "py", "--to", addr_b, "--to-token-file", token_b});
  EXPECT_TRUE(taken.FailedCleanly()) << taken.Describe();
  EXPECT_TRUE(Matches(taken.err, "already runs on node " + b.node())) << taken.err;
  ASSERT_TRUE(b.Cairn({"job", "kill", "py"}).Exited(0));
  // Unknown job, unknown node, this node.
  CommandResult nojob = a.Cairn({"job", "migrate", "nope", "--to", b.node(), "--to-token-file", token_b});
  EXPECT_TRUE(nojob.FailedCleanly());
  EXPECT_TRUE(Matches(nojob.err, "no job 'nope' on node " + a.node())) << nojob.err;
  CommandResult unknown = a.Cairn({"job", "migrate", "py", "--to", "node-z"});
  EXPECT_TRUE(unknown.FailedCleanly());
  EXPECT_TRUE(Matches(unknown.err, "unknown node 'node-z'.*--peer")) << unknown.err;
  CommandResult self = a.Cairn({"job", "migrate", "py", "--to", a.node()});
  EXPECT_TRUE(self.FailedCleanly());
  EXPECT_TRUE(Matches(self.err, "is this node")) << self.err;

  // Through all of it the job ran on under the same pid, and says why in its events.
  json j = Job(a, "py");
  EXPECT_EQ(j["state"], "running");
  EXPECT_EQ(j["host_pid"], pid);
  EXPECT_TRUE(IsAlive(pid));
  EXPECT_TRUE(HasEvent(a, "py", "migrate-failed", "does not answer.*keeps running here"));
  EXPECT_EQ(JsonInt(b.Json({"job", "show", "py"})["job"]["host_pid"]) != pid, true);
  // The destination kept nothing of the refused attempts but its own (killed) job.
  EXPECT_EQ(b.Json({"checkpoint", "list"})["checkpoints"].size(), 0u);
  Release(out);
  ASSERT_TRUE(WaitState(a, "py", "exited"));
  EXPECT_EQ(Job(a, "py")["health"]["exit_code"], 0);
  EXPECT_EQ(ReadFile(out + "/result"), expected);
}

// A node whose CPU lacks what the job may use (here: a node playing one without AVX2) is
// refused before the job is frozen — not after the pause and the copy, by the restore there —
// and the job runs on untouched. A job started for x86-64-v2 moves there and finishes.
TEST_F(MigrateTest, ANodeWhoseCpuLacksWhatTheJobMayUseIsRefusedBeforeTheFreeze) {
  std::string cpuinfo = ReadFile("/proc/cpuinfo");
  if (!Matches(cpuinfo, " avx2 ")) GTEST_SKIP() << "this CPU has no AVX2 to take away";
  std::string expected = Expected();
  std::string token_b = Token("token-b", "token-of-node-b-0123456789");
  std::string addr_b = "127.0.0.1:" + std::to_string(FreeTcpPort());
  DaemonProcess b(Dir(), "node-b", {"--listen", addr_b, "--token-file", token_b}, {"CAIRND_TEST_CPU_LACKS=avx2"});
  ASSERT_TRUE(b.Start());
  DaemonProcess a(Dir(), "node-a", {"--peer", b.node() + "=" + addr_b, "--peer-token-file", token_b});
  ASSERT_TRUE(a.Start());
  json info = b.Json({"node", "info"});
  EXPECT_EQ(info.value("cpu_level", 0), 2) << info.dump();  // without AVX2: x86-64-v2
  EXPECT_TRUE(Matches(b.Cairn({"node", "info"}).out, "cpu: x86-64-v2, [0-9]+ features")) << b.Cairn({"node", "info"}).out;
  EXPECT_TRUE(Matches(b.Cairn({"node", "info"}).out, "storage: local")) << b.Cairn({"node", "info"}).out;

  std::string out = Dir() + "/py";
  RunPython(a, out);
  int pid = Job(a, "py")["host_pid"];
  CommandResult refused = a.Cairn({"job", "migrate", "py", "--to", b.node()});
  EXPECT_TRUE(refused.FailedCleanly()) << refused.Describe();
  EXPECT_TRUE(Matches(refused.err, "node " + b.node() + "'s CPU \\(x86-64-v2\\) lacks .*avx2")) << refused.err;
  EXPECT_TRUE(Matches(refused.err, "--cpu-baseline x86-64-v2")) << refused.err;
  EXPECT_TRUE(Matches(refused.err, "keeps running on node " + a.node())) << refused.err;
  json j = Job(a, "py");
  EXPECT_EQ(j["state"], "running");
  EXPECT_EQ(j["host_pid"], pid);
  EXPECT_EQ(JsonInt(j["checkpoints"]), 0) << "nothing was frozen or saved for the move";
  EXPECT_EQ(b.Json({"checkpoint", "list"})["checkpoints"].size(), 0u);
  Release(out);
  ASSERT_TRUE(WaitState(a, "py", "exited"));
  EXPECT_EQ(ReadFile(out + "/result"), expected);

  std::string out2 = Dir() + "/py2";
  std::vector<std::string> run = {"job", "run", "--name", "py2", "--checkpoint-every", "0", "--cpu-baseline", "x86-64-v2", "--"};
  for (auto& arg : PythonJob(out2)) run.push_back(arg);
  ASSERT_TRUE(a.Cairn(run).Exited(0));
  json m = a.Json({"job", "migrate", "py2", "--to", b.node()});
  ASSERT_FALSE(m.is_null()) << a.Log() << b.Log();
  EXPECT_EQ(m["to_node"], b.node());
  Release(out2);
  ASSERT_TRUE(WaitState(b, "py2", "exited"));
  EXPECT_EQ(Job(b, "py2")["health"]["exit_code"], 0);
  EXPECT_EQ(ReadFile(out2 + "/result"), expected);
}

// A program that keeps writing its memory (64 MiB, 20 000 pages a second), with incremental
// periodic checkpoints, is moved while it writes, there and back again, then checks every page
// itself: each must hold the version it last wrote there.
TEST_F(MigrateTest, WritingProgramFindsEveryPageItWroteAfterMovingThereAndBack) {
  std::string token_b = Token("token-b", "token-of-node-b-0123456789");
  std::string addr_b = "127.0.0.1:" + std::to_string(FreeTcpPort());
  DaemonProcess b(Dir(), "node-b", {"--listen", addr_b, "--token-file", token_b});
  ASSERT_TRUE(b.Start());
  std::string token_a = Token("token-a", "token-of-node-a-0123456789");
  std::string addr_a = "127.0.0.1:" + std::to_string(FreeTcpPort());
  DaemonProcess a(Dir(), "node-a",
                  {"--listen", addr_a, "--token-file", token_a, "--peer-token-file", token_b, "--spool-dir", Dir() + "/spool"});
  ASSERT_TRUE(a.Start());
  std::string work = Dir() + "/writer";
  fs::create_directories(work);
  // Incremental periodic checkpoints: the job's writes are tracked (a tracker parked in it) when
  // it moves.
  ASSERT_TRUE(a.Cairn({"job", "run", "--name", "w", "--checkpoint-every", "1", "--incremental", "--",
                       WORKLOAD_DIR "/incremental/inc_writer", work, "64", "20000"})
                  .Exited(0));
  ASSERT_TRUE(WaitFor([&] { return Exists(work + "/ready"); }, 30s)) << a.Cairn({"job", "logs", "w", "--stderr"}).out;
  ASSERT_TRUE(WaitFor([&] { return a.Json({"checkpoint", "list", "--job", "w"})["checkpoints"].size() >= 2; }, 30s));

  json m = a.Json({"job", "migrate", "w", "--to", addr_b});  // by address, not a configured peer
  ASSERT_FALSE(m.is_null()) << a.Log() << b.Log();
  EXPECT_EQ(m["to_node"], b.node());
  EXPECT_GE(JsonInt(m["precopy_bytes"]), 64 << 20) << m.dump();
  EXPECT_EQ(Job(a, "w")["state"], "migrated");

  // Not restorable where it left (it runs elsewhere).
  CommandResult twice = a.Cairn({"job", "restore", "w"});
  EXPECT_TRUE(twice.FailedCleanly()) << twice.Describe();
  EXPECT_TRUE(Matches(twice.err, "migrated to node " + b.node() + " and runs there")) << twice.err;

  // And back again: a takes its old record over.
  json back = b.Json({"job", "migrate", "w", "--to", addr_a, "--to-token-file", token_a});
  ASSERT_FALSE(back.is_null()) << a.Log() << b.Log();
  EXPECT_EQ(back["to_node"], a.node());
  EXPECT_EQ(Job(a, "w")["state"], "running");
  EXPECT_EQ(Job(b, "w")["state"], "migrated");

  EXPECT_TRUE(WriterPasses(a, "w", work));
}

// The destination fails after the job was frozen and its image sent (its restore fails), and
// another one dies while it receives: each time the job is thawed and carries on at the source.
TEST_F(MigrateTest, DestinationFailingAfterTheFreezeOrDyingLeavesTheJobRunning) {
  std::string expected = Expected();
  std::string token = Token("token", "token-of-the-peers-0123456789");
  std::string addr_b = "127.0.0.1:" + std::to_string(FreeTcpPort());
  std::string addr_c = "127.0.0.1:" + std::to_string(FreeTcpPort());
  DaemonProcess b(Dir(), "node-b", {"--listen", addr_b, "--token-file", token}, {"CAIRND_TEST_FAIL_MIGRATION_RESTORE=1"});
  ASSERT_TRUE(b.Start());
  DaemonProcess c(Dir(), "node-c", {"--listen", addr_c, "--token-file", token},
                  {"CAIRND_TEST_PAUSE_BEFORE_MIGRATION_RESTORE=30"});
  ASSERT_TRUE(c.Start());
  std::string addr_d = "127.0.0.1:" + std::to_string(FreeTcpPort());
  DaemonProcess d(Dir(), "node-d", {"--listen", addr_d, "--token-file", token},
                  {"CAIRND_TEST_PAUSE_BEFORE_MIGRATION_RESTORE=6"});
  ASSERT_TRUE(d.Start());
  DaemonProcess a(Dir(), "node-a",
                  {"--peer", b.node() + "=" + addr_b, "--peer", c.node() + "=" + addr_c, "--peer", d.node() + "=" + addr_d,
                   "--peer-token-file", token, "--spool-dir", Dir() + "/spool"});
  ASSERT_TRUE(a.Start());
  std::string out = Dir() + "/py";
  RunPython(a, out);
  int pid = Job(a, "py")["host_pid"];

  CommandResult failed = a.Cairn({"job", "migrate", "py", "--to", b.node()});
  EXPECT_TRUE(failed.FailedCleanly()) << failed.Describe();
  EXPECT_TRUE(Matches(failed.err, "test hook.*keeps running on node " + a.node())) << failed.err;
  EXPECT_EQ(b.Json({"job", "list"})["jobs"].size(), 0u) << "the destination kept a failed job";
  EXPECT_EQ(Job(a, "py")["state"], "running");

  // d takes longer to restore than the job may stand frozen: called off, thawed here; d then
  // finds the migration called off and restores nothing.
  CommandResult slow = a.Cairn({"job", "migrate", "py", "--to", d.node(), "--restore-timeout", "2"});
  EXPECT_TRUE(slow.FailedCleanly()) << slow.Describe();
  EXPECT_TRUE(Matches(slow.err, "did not run the job within 2 s.*keeps running on node " + a.node())) << slow.err;
  // While it waited, the command said how the migration stood (not on a terminal: a line per phase).
  EXPECT_TRUE(Matches(slow.err, "cairn: job py: frozen: the destination restores the job \\([0-9.]+ [KMG]?i?B( of ~[0-9.]+ [KMG]?i?B)? sent"))
      << slow.err;
  EXPECT_TRUE(IsAlive(pid));

  // c dies (SIGKILL) once it holds the whole image, before it restores.
  std::thread killer([&] {
    WaitFor(
        [&] {
          std::error_code ec;
          for (auto& e : fs::directory_iterator(c.state_dir() + "/checkpoints/py", ec)) {
            if (fs::exists(e.path() / "checkpoint.meta")) return true;
          }
          return false;
        },
        60s);
    c.Kill();
  });
  CommandResult died = a.Cairn({"job", "migrate", "py", "--to", c.node()});
  killer.join();
  EXPECT_TRUE(died.FailedCleanly()) << died.Describe();
  EXPECT_TRUE(Matches(died.err, "keeps running on node " + a.node())) << died.err;

  json j = Job(a, "py");
  EXPECT_EQ(j["state"], "running");
  EXPECT_EQ(j["host_pid"], pid);
  EXPECT_TRUE(HasEvent(a, "py", "migrate-failed", "test hook"));
  EXPECT_TRUE(WaitFor([&] { return LogHas(d, "kind=migrate-in-failed", "called the migration off"); }, 20s));
  EXPECT_EQ(d.Json({"job", "list"})["jobs"].size(), 0u);
  EXPECT_FALSE(fs::exists(Dir() + "/spool") && !fs::is_empty(Dir() + "/spool")) << "the spool keeps an image";
  Release(out);
  ASSERT_TRUE(WaitState(a, "py", "exited"));
  EXPECT_EQ(Job(a, "py")["health"]["exit_code"], 0);
  EXPECT_EQ(ReadFile(out + "/result"), expected);
  EXPECT_EQ(a.Cairn({"job", "logs", "py"}).out, "done\n");
}

}  // namespace
}  // namespace cairn::testing
