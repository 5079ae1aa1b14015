// `cairn gc` and the cancel (daemon/gc.cc) with real daemons: a job's checkpoints on the node it
// migrated away from go (local copies at once; stored ones only once the shared store holds a
// newer checkpoint of the job from elsewhere), a cancelled job's go with it, ended jobs' cgroups
// go; pinned checkpoints, running jobs and their checkpoints stay; --dry-run only lists.

#include <filesystem>
#include <thread>

#include "daemon_harness.h"

namespace cairn::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class GcTest : public DaemonFixture {
 protected:
  std::string Checkpoint(const DaemonProcess& d, bool pin = false) {
    std::vector<std::string> args = {"job", "checkpoint", "py"};
    if (pin) args.push_back("--pin");
    json c = d.Json(args)["checkpoint"];
    EXPECT_EQ(c.value("state", ""), "complete") << c.dump() << d.Log();
    return c.value("id", "");
  }
  static std::vector<std::string> Ids(const DaemonProcess& d) {
    std::vector<std::string> ids;
    json list = d.Json({"checkpoint", "list", "--job", "py"});  // (alive through the loop)
    for (const json& c : list["checkpoints"]) ids.push_back(c["id"]);
    return ids;
  }
  static std::string Cgroup(const DaemonProcess& d) { return "/sys/fs/cgroup/freezer/cairn/" + d.node() + ".py"; }
  // The items of a gc answer as "KIND WHAT", in order.
  static std::vector<std::string> Items(const json& gc) {
    std::vector<std::string> out;
    for (const json& i : gc["items"]) out.push_back(i.value("kind", "") + " " + i.value("what", ""));
    return out;
  }
};

TEST_F(GcTest, TheNodeAJobMigratedFromFreesItsCheckpointsButNotPinnedOnes) {
  std::string expected = Expected();
  ASSERT_FALSE(expected.empty());
  std::string token_b = Token("token-b", "token-of-node-b-0123456789");
  std::string addr_b = "127.0.0.1:" + std::to_string(FreeTcpPort());
  DaemonProcess b(Dir(), "node-b", {"--listen", addr_b, "--token-file", token_b});
  ASSERT_TRUE(b.Start());
  DaemonProcess a(Dir(), "node-a", {"--peer-token-file", token_b});
  ASSERT_TRUE(a.Start());
  std::string out = Dir() + "/py";
  ASSERT_TRUE(RunPythonJob(a, out, {"--checkpoint-every", "0", "--keep", "5"}));
  std::string pinned = Checkpoint(a, /*pin=*/true);
  std::string plain = Checkpoint(a);
  std::string plain_dir = a.state_dir() + "/checkpoints/py/" + plain;
  ASSERT_TRUE(fs::is_directory(plain_dir));

  // While the job runs here, nothing of it is garbage.
  json none = a.Json({"gc"});
  EXPECT_TRUE(none["items"].empty()) << none.dump();

  json m = a.Json({"job", "migrate", "py", "--to", addr_b});
  ASSERT_FALSE(m.is_null()) << a.Log() << b.Log();
  ASSERT_EQ(Job(a, "py")["state"], "migrated");
  ASSERT_TRUE(fs::is_directory(Cgroup(a)));

  json dry = a.Json({"gc", "--dry-run"});
  EXPECT_EQ(Items(dry), (std::vector<std::string>{"cgroup cairn/" + a.node() + ".py", "checkpoint " + plain}))
      << dry.dump();
  EXPECT_TRUE(dry.value("dry_run", false));
  EXPECT_GT(JsonInt(dry["bytes"]), 1 << 20) << dry.dump();
  EXPECT_TRUE(fs::is_directory(plain_dir)) << "a dry run removed a checkpoint";
  EXPECT_TRUE(fs::is_directory(Cgroup(a))) << "a dry run removed a cgroup";

  json gc = a.Json({"gc"});
  EXPECT_EQ(Items(gc), Items(dry)) << gc.dump();
  EXPECT_EQ(JsonInt(gc["bytes"]), JsonInt(dry["bytes"]));
  EXPECT_FALSE(fs::exists(plain_dir));
  EXPECT_FALSE(fs::exists(Cgroup(a)));
  EXPECT_EQ(Ids(a), std::vector<std::string>{pinned}) << "the pinned checkpoint stays";
  EXPECT_TRUE(a.Json({"gc"})["items"].empty()) << "a second gc found more";
  CommandResult text = a.Cairn({"gc", "--dry-run"});
  EXPECT_TRUE(text.Exited(0)) << text.Describe();
  EXPECT_TRUE(Matches(text.out, "would free 0.0 B in 0 item")) << text.out;

  // Where the job runs now, nothing of it is touched; it finishes right.
  EXPECT_TRUE(b.Json({"gc"})["items"].empty());
  Release(out);
  ASSERT_TRUE(WaitState(b, "py", "exited", 120s)) << b.Log();
  EXPECT_EQ(ReadFile(out + "/result"), expected);
  // Ended there, its cgroup is garbage there; its checkpoint (the received image) is not.
  json after = b.Json({"gc"});
  EXPECT_EQ(Items(after), std::vector<std::string>{"cgroup cairn/" + b.node() + ".py"}) << after.dump();
  EXPECT_EQ(Ids(b).size(), 1u);
}

TEST_F(GcTest, AStoredCheckpointOfAMigratedJobStaysUntilTheStoreHoldsANewerOne) {
  std::string store = Dir() + "/store";
  fs::create_directories(store);
  std::string token_b = Token("token-b", "token-of-node-b-0123456789");
  std::string addr_b = "127.0.0.1:" + std::to_string(FreeTcpPort());
  DaemonProcess b(Dir(), "node-b", {"--listen", addr_b, "--token-file", token_b, "--storage", "dir:" + store});
  ASSERT_TRUE(b.Start());
  DaemonProcess a(Dir(), "node-a", {"--peer-token-file", token_b, "--storage", "dir:" + store});
  ASSERT_TRUE(a.Start());
  std::string out = Dir() + "/py";
  ASSERT_TRUE(RunPythonJob(a, out, {"--checkpoint-every", "0", "--keep", "5"}));
  std::string mine = Checkpoint(a);
  ASSERT_TRUE(fs::is_directory(store + "/py/" + mine));

  json m = a.Json({"job", "migrate", "py", "--to", addr_b});
  ASSERT_FALSE(m.is_null()) << a.Log() << b.Log();
  // The destination stores the image it took the job over with after its commit.
  ASSERT_TRUE(WaitFor([&] { return b.Json({"checkpoint", "list", "--job", "py"})["checkpoints"][0]["state"] == "complete"; }, 20s));
  std::vector<std::string> theirs = Ids(b);
  ASSERT_EQ(theirs.size(), 1u);
  ASSERT_NE(theirs[0], mine);
  // Without it in the store, a's stored checkpoint is the newest any node can restore the job
  // from: it stays.
  ASSERT_TRUE(b.Cairn({"checkpoint", "delete", theirs[0]}).Exited(0));
  ASSERT_FALSE(fs::exists(store + "/py/" + theirs[0]));
  json kept = a.Json({"gc"});
  EXPECT_EQ(Items(kept), std::vector<std::string>{"cgroup cairn/" + a.node() + ".py"}) << kept.dump();
  EXPECT_TRUE(fs::is_directory(store + "/py/" + mine));
  EXPECT_EQ(Ids(a), std::vector<std::string>{mine});

  // A newer one there: a's goes, from the store too.
  std::string newer = Checkpoint(b);
  ASSERT_TRUE(fs::is_directory(store + "/py/" + newer));
  json gc = a.Json({"gc"});
  EXPECT_EQ(Items(gc), std::vector<std::string>{"checkpoint " + mine}) << gc.dump();
  EXPECT_TRUE(Matches(gc["items"][0].value("why", ""), "newer checkpoint " + newer)) << gc.dump();
  EXPECT_FALSE(fs::exists(store + "/py/" + mine));
  EXPECT_TRUE(Ids(a).empty());
  EXPECT_TRUE(fs::is_directory(store + "/py/" + newer)) << "the newer one went too";
  Release(out);
  EXPECT_TRUE(WaitState(b, "py", "exited", 120s)) << b.Log();
}

TEST_F(GcTest, ACancelledJobLeavesItsLogsButNotItsCheckpoints) {
  DaemonProcess a(Dir(), "node-a");
  ASSERT_TRUE(a.Start());
  std::string out = Dir() + "/py";
  ASSERT_TRUE(RunPythonJob(a, out, {"--checkpoint-every", "0", "--keep", "5"}));
  std::string pinned = Checkpoint(a, /*pin=*/true);
  std::string plain = Checkpoint(a);

  CommandResult both = a.Cairn({"job", "kill", "py", "--cancel", "--signal", "15"});
  EXPECT_TRUE(both.FailedCleanly()) << both.Describe();
  json k = a.Json({"job", "kill", "py", "--cancel"});
  EXPECT_EQ(k["job"]["state"], "killed") << k.dump();
  EXPECT_TRUE(k["job"].value("cancelled", false)) << k.dump();
  EXPECT_EQ(Ids(a), std::vector<std::string>{pinned});
  EXPECT_FALSE(fs::exists(a.state_dir() + "/checkpoints/py/" + plain));
  bool said = false;
  json shown = a.Json({"job", "show", "py"});
  for (const json& e : shown["events"]) {
    said |= e.value("kind", "") == "cancelled" && Matches(e.value("detail", ""), "1 checkpoint\\(s\\) removed");
  }
  EXPECT_TRUE(said) << a.Json({"job", "show", "py"})["events"].dump();
  EXPECT_TRUE(a.Cairn({"job", "logs", "py"}).Exited(0)) << "its logs went with it";

  // Cancelling again (it has ended) is no error; its cgroup is gc's.
  json again = a.Json({"job", "kill", "py", "--cancel"});
  EXPECT_TRUE(again["job"].value("cancelled", false)) << again.dump();
  json gc = a.Json({"gc"});
  EXPECT_EQ(Items(gc), std::vector<std::string>{"cgroup cairn/" + a.node() + ".py"}) << gc.dump();
  EXPECT_EQ(Ids(a), std::vector<std::string>{pinned});
}

}  // namespace
}  // namespace cairn::testing
