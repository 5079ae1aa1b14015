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
  ASSERT_TRUE(RunPythonJob(a, out));
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
  ASSERT_TRUE(RunPythonJob(a, out, {"--checkpoint-every", "0", "--keep", "2"}));
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

// Three machines: the job hops a -> b -> c, each hop leaving the image it arrived with on the
// node it then left; `cairn gc` there frees it (nothing on that node can use it any more), and
// the job finishes right on c.
TEST_F(PrivateNodesTest, EveryHopOfAJobAcrossThreeNodesIsFreedWhereItLeft) {
  std::string expected = Expected();
  ASSERT_FALSE(expected.empty());
  std::string token = Token("token", "token-of-the-nodes-0123456789");
  std::vector<std::unique_ptr<DaemonProcess>> nodes;
  std::vector<std::string> addr;
  for (const char* n : {"node-a", "node-b", "node-c"}) {
    addr.push_back("127.0.0.1:" + std::to_string(FreeTcpPort()));
    nodes.push_back(std::make_unique<DaemonProcess>(
        Dir(), n, std::vector<std::string>{"--listen", addr.back(), "--token-file", token, "--peer-token-file", token}));
    nodes.back()->PrivateStateDir();
    ASSERT_TRUE(nodes.back()->Start());
  }
  DaemonProcess &a = *nodes[0], &b = *nodes[1], &c = *nodes[2];
  std::string out = Dir() + "/py";
  ASSERT_TRUE(RunPythonJob(a, out, {"--checkpoint-every", "0"}));
  ASSERT_FALSE(a.Json({"job", "migrate", "py", "--to", addr[1]}).is_null()) << a.Log() << b.Log();
  ASSERT_FALSE(b.Json({"job", "migrate", "py", "--to", addr[2]}).is_null()) << b.Log() << c.Log();
  EXPECT_EQ(Job(c, "py")["state"], "running");

  // b kept the image it took the job over with; the job left, so nothing on b needs it.
  json kept = b.Json({"checkpoint", "list", "--job", "py"});
  ASSERT_EQ(kept["checkpoints"].size(), 1u) << kept.dump();
  EXPECT_EQ(kept["checkpoints"][0]["reason"], "migration");
  json freed = b.Json({"gc"});
  bool image = false;
  for (const json& i : freed["items"]) image |= i["kind"] == "checkpoint" && i["what"] == kept["checkpoints"][0]["id"];
  EXPECT_TRUE(image) << freed.dump();
  EXPECT_GT(freed["bytes"].get<int64_t>(), 1 << 20) << freed.dump();
  EXPECT_TRUE(b.Json({"checkpoint", "list", "--job", "py"})["checkpoints"].empty());
  EXPECT_TRUE(a.Json({"gc"})["items"].size() >= 1u) << "a's cgroup of the job that left";
  // c, where it runs, keeps its image.
  EXPECT_TRUE(c.Json({"gc"})["items"].empty());
  EXPECT_EQ(c.Json({"checkpoint", "list", "--job", "py"})["checkpoints"].size(), 1u);

  Release(out);
  ASSERT_TRUE(WaitState(c, "py", "exited", 120s)) << c.Log();
  EXPECT_EQ(ReadFile(out + "/result"), expected);
  EXPECT_EQ(c.Cairn({"job", "logs", "py"}).out, "done\n");
}

}  // namespace
}  // namespace cairn::testing
