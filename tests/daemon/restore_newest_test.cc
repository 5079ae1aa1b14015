// `cairn job restore JOB --newest-stored` (RestoreJobRequest.newest_stored): a daemon restores a
// job another node ran from that job's newest complete checkpoint in the store they share. Only
// checkpoints with a manifest count, `--taken-before` bounds them, and the restored python3 job
// ends with an uninterrupted run's result.

#include <sys/stat.h>

#include <filesystem>
#include <thread>

#include "absl/strings/match.h"
#include "daemon_harness.h"

namespace cairn::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class RestoreNewestTest : public DaemonFixture {
 protected:
  static std::string RestoredFrom(const DaemonProcess& d) {
    std::string from;
    for (const json& e : d.Json({"job", "show", "py"}).value("events", json::array())) {
      if (e.value("kind", "") == "restored") from = e.value("detail", "");
    }
    return from;
  }
};

TEST_F(RestoreNewestTest, NewestCompleteStoredCheckpointIsRestoredOnAnotherNode) {
  std::string shared = Dir() + "/shared";
  ASSERT_EQ(::mkdir(shared.c_str(), 0700), 0);
  DaemonProcess a(Dir(), "a", {"--storage", "dir:" + shared});
  DaemonProcess b(Dir(), "b", {"--storage", "dir:" + shared});
  DaemonProcess local(Dir(), "l");
  ASSERT_TRUE(a.Start());
  ASSERT_TRUE(b.Start());
  ASSERT_TRUE(local.Start());

  std::string expected = Expected();
  std::string out = Dir() + "/out";

  // Nothing stored yet: a clear refusal.
  CommandResult none = b.Cairn({"job", "restore", "py", "--newest-stored"});
  EXPECT_TRUE(none.FailedCleanly()) << none.Describe();
  EXPECT_TRUE(absl::StrContains(none.err, "has no complete checkpoint in dir:" + shared)) << none.Describe();

  std::vector<std::string> run = {"job", "run", "--name", "py", "--"};
  for (auto& arg : PythonJob(out)) run.push_back(arg);
  ASSERT_TRUE(a.Cairn(run).Exited(0));
  std::this_thread::sleep_for(500ms);
  json first = a.Json({"job", "checkpoint", "py"});
  std::this_thread::sleep_for(500ms);
  json second = a.Json({"job", "checkpoint", "py", "--kill"});
  ASSERT_FALSE(first.is_null());
  ASSERT_FALSE(second.is_null());
  std::string id1 = first["checkpoint"].value("id", ""), id2 = second["checkpoint"].value("id", "");
  ASSERT_LT(id1, id2);

  // Newer-looking but incomplete ones in the store never count: no manifest, or still .partial.
  std::string later = "py-29991231T235959999";
  fs::copy(shared + "/py/" + id2, shared + "/py/" + later, fs::copy_options::recursive);
  fs::remove(shared + "/py/" + later + "/cairn-manifest");
  fs::copy(shared + "/py/" + id2, shared + "/py/" + later + "9.partial", fs::copy_options::recursive);

  // The local store cannot list other nodes' checkpoints.
  CommandResult loc = local.Cairn({"job", "restore", "py", "--newest-stored"});
  EXPECT_TRUE(loc.FailedCleanly()) << loc.Describe();
  EXPECT_TRUE(absl::StrContains(loc.err, "shared --storage")) << loc.Describe();

  // Bounded by --taken-before: the first checkpoint (taken at its `created`, in its id to the ms).
  double bound = UnixSeconds(first["checkpoint"]["created"]) + 0.001;
  ASSERT_TRUE(b.Cairn({"job", "restore", "py", "--newest-stored", "--taken-before", std::to_string(bound)}).Exited(0));
  EXPECT_TRUE(absl::StartsWith(RestoredFrom(b), "from checkpoint " + id1 + " ")) << RestoredFrom(b);
  // While it runs here, a second restore is refused: the job never runs twice.
  CommandResult twice = b.Cairn({"job", "restore", "py", "--newest-stored"});
  EXPECT_TRUE(twice.FailedCleanly()) << twice.Describe();
  EXPECT_TRUE(absl::StrContains(twice.err, "kill it first")) << twice.Describe();
  ASSERT_TRUE(b.Cairn({"job", "kill", "py"}).Exited(0));

  // Unbounded: the newest complete one, the second.
  ASSERT_TRUE(b.Cairn({"job", "restore", "py", "--newest-stored"}).Exited(0));
  EXPECT_TRUE(absl::StartsWith(RestoredFrom(b), "from checkpoint " + id2 + " ")) << RestoredFrom(b);
  Release(out);
  ASSERT_TRUE(WaitState(b, "py", "exited", 120s));
  EXPECT_EQ(ReadFile(out + "/result"), expected);
  a.KillJobs();
  b.KillJobs();
}

// A job whose name has dots (a SLURM step's, slurm-JOB.STEP.TASK-uUID): its checkpoint ids keep
// the name whole, so the newest one is found by it.
TEST_F(RestoreNewestTest, AJobNamedWithDotsIsRestoredFromItsNewestStoredCheckpoint) {
  std::string shared = Dir() + "/shared";
  ASSERT_EQ(::mkdir(shared.c_str(), 0700), 0);
  DaemonProcess a(Dir(), "a", {"--storage", "dir:" + shared});
  DaemonProcess b(Dir(), "b", {"--storage", "dir:" + shared});
  ASSERT_TRUE(a.Start());
  ASSERT_TRUE(b.Start());
  const std::string name = "slurm-7.0.1-u0";
  ASSERT_TRUE(a.Cairn({"job", "run", "--name", name, "--", "/bin/sh", "-c", "while :; do sleep 0.1; done"}).Exited(0));
  json taken = a.Json({"job", "checkpoint", name, "--kill"});
  std::string id = taken["checkpoint"].value("id", "");
  EXPECT_TRUE(absl::StartsWith(id, name + "-")) << id;
  CommandResult r = b.Cairn({"job", "restore", name, "--newest-stored"});
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  EXPECT_EQ(b.Json({"job", "show", name})["job"].value("state", ""), "running");
  b.KillJobs();
}

}  // namespace
}  // namespace cairn::testing
