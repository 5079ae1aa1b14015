// Two nodes as two machines: each daemon in a mount namespace of its own whose state directory
// (its jobs' logs, its checkpoints, its catalog) no other process sees (DaemonProcess::
// PrivateStateDir). A job taken from one and run on the other — from the shared store, or by a
// live migration there and back — must need nothing of the first node's files: one shared
// filesystem, as in the first tests of these paths, hid a restore that kept writing to the first
// node's logs (issue 18). What the nodes share is what machines share: the store, the program's
// own data directory, the binaries.

#include <filesystem>
#include <thread>

#include "daemon_harness.h"

namespace cairn::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class PrivateNodesTest : public DaemonFixture {
 protected:
  // The python3 hash chain (PythonJob) as job "py" on `d`, mid-computation after a second.
  void RunPython(const DaemonProcess& d, const std::string& out, std::vector<std::string> flags = {}) {
    std::vector<std::string> run = {"job", "run", "--name", "py"};
    run.insert(run.end(), flags.begin(), flags.end());
    run.push_back("--");
    for (auto& arg : PythonJob(out)) run.push_back(arg);
    CommandResult r = d.Cairn(run);
    ASSERT_TRUE(r.Exited(0)) << r.Describe() << d.Log();
    std::this_thread::sleep_for(1s);
  }
  // The daemon's own state directory is hidden from the test (and so from the other node).
  static ::testing::AssertionResult Hidden(const DaemonProcess& d) {
    if (!fs::is_directory(d.state_dir()) || !fs::is_empty(d.state_dir())) {
      return ::testing::AssertionFailure() << d.node() << "'s state directory is visible outside its namespace";
    }
    return ::testing::AssertionSuccess();
  }
};

TEST_F(PrivateNodesTest, ACheckpointFromTheStoreRunsOnANodeThatCannotSeeTheFirstNodesFiles) {
  std::string expected = Expected();
  ASSERT_FALSE(expected.empty());
  std::string store = Dir() + "/store";
  fs::create_directories(store);
  DaemonProcess a(Dir(), "node-a", {"--storage", "dir:" + store});
  DaemonProcess b(Dir(), "node-b", {"--storage", "dir:" + store});
  a.PrivateStateDir();
  b.PrivateStateDir();
  ASSERT_TRUE(a.Start());
  ASSERT_TRUE(b.Start());
  EXPECT_TRUE(Hidden(a));
  EXPECT_TRUE(Hidden(b));

  std::string out = Dir() + "/py";
  ASSERT_NO_FATAL_FAILURE(RunPython(a, out));
  json c = a.Json({"job", "checkpoint", "py", "--kill"})["checkpoint"];
  ASSERT_EQ(c["state"], "complete") << c.dump() << a.Log();
  ASSERT_TRUE(WaitState(a, "py", "killed"));
  std::string id = c["id"];
  EXPECT_TRUE(Hidden(a)) << "the checkpoint was written outside node a's own directory";

  CommandResult r = b.Cairn({"job", "restore", "py", "--checkpoint", id});
  ASSERT_TRUE(r.Exited(0)) << r.Describe() << b.Log();
  Release(out);
  ASSERT_TRUE(WaitState(b, "py", "exited", 120s)) << b.Log();
  EXPECT_EQ(Job(b, "py")["health"]["exit_code"], 0);
  EXPECT_EQ(ReadFile(out + "/result"), expected);
  EXPECT_EQ(b.Cairn({"job", "logs", "py"}).out, "done\n") << "the job's output after the restore, on node b";
  EXPECT_EQ(a.Cairn({"job", "logs", "py"}).out, "") << "the restored job wrote to node a's log";
}

TEST_F(PrivateNodesTest, AJobMigratesThereAndBackBetweenNodesThatCannotSeeEachOthersFiles) {
  std::string expected = Expected();
  ASSERT_FALSE(expected.empty());
  std::string token_a = Token("token-a", "token-of-node-a-0123456789");
  std::string token_b = Token("token-b", "token-of-node-b-0123456789");
  std::string addr_a = "127.0.0.1:" + std::to_string(FreeTcpPort());
  std::string addr_b = "127.0.0.1:" + std::to_string(FreeTcpPort());
  DaemonProcess a(Dir(), "node-a", {"--listen", addr_a, "--token-file", token_a, "--peer-token-file", token_b});
  DaemonProcess b(Dir(), "node-b", {"--listen", addr_b, "--token-file", token_b, "--peer-token-file", token_a});
  a.PrivateStateDir();
  b.PrivateStateDir();
  ASSERT_TRUE(a.Start());
  ASSERT_TRUE(b.Start());

  std::string out = Dir() + "/py";
  ASSERT_NO_FATAL_FAILURE(RunPython(a, out, {"--checkpoint-every", "0", "--keep", "2"}));
  json there = a.Json({"job", "migrate", "py", "--to", addr_b});
  ASSERT_FALSE(there.is_null()) << a.Log() << b.Log();
  EXPECT_EQ(there["to_node"], b.node());
  EXPECT_EQ(Job(a, "py")["state"], "migrated");
  EXPECT_EQ(Job(b, "py")["state"], "running");
  std::this_thread::sleep_for(500ms);  // it computes on b a while

  json back = b.Json({"job", "migrate", "py", "--to", addr_a});
  ASSERT_FALSE(back.is_null()) << a.Log() << b.Log();
  EXPECT_EQ(back["to_node"], a.node());
  EXPECT_EQ(Job(b, "py")["state"], "migrated");
  EXPECT_TRUE(Hidden(a));
  EXPECT_TRUE(Hidden(b));

  Release(out);
  ASSERT_TRUE(WaitState(a, "py", "exited", 120s)) << a.Log();
  EXPECT_EQ(Job(a, "py")["health"]["exit_code"], 0);
  EXPECT_EQ(ReadFile(out + "/result"), expected);
  EXPECT_EQ(a.Cairn({"job", "logs", "py"}).out, "done\n");
  EXPECT_EQ(b.Cairn({"job", "logs", "py"}).out, "") << "the job wrote to node b's log after it moved back";
}

}  // namespace
}  // namespace cairn::testing
