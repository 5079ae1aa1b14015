// cairnd's checkpoint storage end to end: real daemons with --storage s3://… against a real S3
// server (s3rver) on loopback, and with a shared directory; a python3 job checkpointed on one
// node and restored on another finishes with the uninterrupted run's result. Failed uploads
// (wrong credentials, an endpoint nobody answers on) leave the job running and no checkpoint
// that claims to be complete.

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "daemon/storage/s3_client.h"
#include "daemon_harness.h"
#include "s3rver.h"

namespace cairn::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class StorageTest : public DaemonFixture {
 protected:
  void StartS3() {
    if (std::string why = S3rver::Missing(); !why.empty()) GTEST_SKIP() << "no S3 server to test against: " << why;
    s3_ = std::make_unique<S3rver>(Dir() + "/s3", "bkt");
    ASSERT_TRUE(s3_->Start());
  }
  std::vector<std::string> S3Args(const std::string& endpoint) const {
    return {"--storage", "s3://bkt/ckpt", "--s3-endpoint", endpoint};
  }
  static std::vector<std::string> S3Env(const std::string& key = S3rver::kKey) {
    return {"AWS_ACCESS_KEY_ID=" + key, std::string("AWS_SECRET_ACCESS_KEY=") + S3rver::kSecret};
  }
  daemon::storage::S3Client Client() const { return daemon::storage::S3Client(s3_->Config()); }
  std::vector<std::string> Keys(const std::string& prefix) {
    auto l = Client().List(prefix);
    EXPECT_TRUE(l.ok()) << l.status();
    std::vector<std::string> keys;
    if (l.ok()) {
      for (auto& o : *l) keys.push_back(o.key);
    }
    return keys;
  }

  // Starts the python3 hash chain (PythonJob) as job `name`, mid-computation after a second.
  ::testing::AssertionResult RunPython(const DaemonProcess& d, const std::string& name, const std::string& out) {
    std::vector<std::string> run = {"job", "run", "--name", name, "--"};
    for (auto& arg : PythonJob(out)) run.push_back(arg);
    CommandResult r = d.Cairn(run);
    if (!r.Exited(0)) return ::testing::AssertionFailure() << r.Describe();
    std::this_thread::sleep_for(1s);
    return ::testing::AssertionSuccess();
  }

  // A checkpoint that must fail in the store: the job keeps running, the row says failed, and
  // nothing of it is left locally or in the bucket.
  void ExpectFailedUploadLeavesJobRunning(const DaemonProcess& a, const std::string& must_say) {
    std::string out = Dir() + "/py";
    ASSERT_TRUE(RunPython(a, "py", out));
    int pid = a.Json({"job", "show", "py"})["job"]["host_pid"];
    for (const char* kill : {"", "--kill"}) {
      std::vector<std::string> args = {"job", "checkpoint", "py"};
      if (*kill) args.push_back(kill);
      CommandResult r = a.Cairn(args);
      EXPECT_TRUE(r.FailedCleanly()) << r.Describe();
      EXPECT_NE(r.err.find(must_say), std::string::npos) << r.Describe();
      EXPECT_NE(r.err.find("s3://bkt/ckpt/py/"), std::string::npos) << "the error names the object: " << r.Describe();
      EXPECT_TRUE(IsAlive(pid)) << "a failed upload stopped the job (" << kill << ")";
      EXPECT_EQ(a.Json({"job", "show", "py"})["job"]["state"], "running");
    }
    json list = a.Json({"checkpoint", "list", "--job", "py"});
    ASSERT_EQ(list["checkpoints"].size(), 2u) << list.dump();
    for (auto& c : list["checkpoints"]) {
      EXPECT_EQ(c["state"], "failed") << c.dump();
      EXPECT_FALSE(c.value("error", "").empty()) << c.dump();
    }
    std::error_code ec;
    EXPECT_TRUE(fs::is_empty(a.state_dir() + "/checkpoints/py", ec)) << "local files of a failed checkpoint remain";
    EXPECT_TRUE(Keys("ckpt/").empty());
    // The job goes on to finish with its own result: it was never frozen for good.
    std::string expected = Expected();
    Release(out);
    ASSERT_TRUE(WaitState(a, "py", "exited", 120s));
    EXPECT_EQ(ReadFile(out + "/result"), expected);
  }

  std::unique_ptr<S3rver> s3_;
};

TEST_F(StorageTest, S3RoundTripRestoresOnASecondDaemon) {
  StartS3();
  if (IsSkipped() || HasFatalFailure()) return;
  std::string expected = Expected();
  ASSERT_FALSE(expected.empty());
  DaemonProcess a(Dir(), "node-a", S3Args(s3_->endpoint()), S3Env());
  DaemonProcess b(Dir(), "node-b", S3Args(s3_->endpoint()), S3Env());
  ASSERT_TRUE(a.Start());
  ASSERT_TRUE(b.Start());
  std::string out = Dir() + "/py";
  ASSERT_TRUE(RunPython(a, "py", out));
  int pid = a.Json({"job", "show", "py"})["job"]["host_pid"];

  json c1 = a.Json({"job", "checkpoint", "py", "--pin"})["checkpoint"];
  ASSERT_EQ(c1["state"], "complete") << c1.dump() << a.Log();
  EXPECT_TRUE(IsAlive(pid));
  json c2 = a.Json({"job", "checkpoint", "py", "--kill"})["checkpoint"];
  ASSERT_EQ(c2["state"], "complete") << c2.dump() << a.Log();
  ASSERT_TRUE(WaitGone(pid, 10s).gone);
  ASSERT_TRUE(WaitState(a, "py", "killed"));
  ASSERT_FALSE(Exists(out + "/result"));
  std::string id = c2["id"], location = c2["location"];
  EXPECT_EQ(location, "s3://bkt/ckpt/py/" + id);
  EXPECT_FALSE(fs::exists(a.state_dir() + "/checkpoints/py/" + id)) << "no local copy without --keep-local-copy";
  std::vector<std::string> keys = Keys("ckpt/py/" + id + "/");
  EXPECT_NE(std::find(keys.begin(), keys.end(), "ckpt/py/" + id + "/cairn-manifest"), keys.end());
  EXPECT_NE(std::find(keys.begin(), keys.end(), "ckpt/py/" + id + "/checkpoint.meta"), keys.end());

  // Node b has never seen the job: it fetches the checkpoint and restores it from there.
  CommandResult restore = b.Cairn({"job", "restore", "py", "--from", location});
  ASSERT_TRUE(restore.Exited(0)) << restore.Describe() << b.Log();
  Release(out);
  ASSERT_TRUE(WaitState(b, "py", "exited", 120s));
  json j = b.Json({"job", "show", "py"})["job"];
  EXPECT_EQ(j["health"]["exit_code"], 0) << j.dump();
  EXPECT_EQ(j["node"], b.node());
  EXPECT_EQ(ReadFile(out + "/result"), expected);
  json imported = b.Json({"checkpoint", "show", id})["checkpoint"];
  EXPECT_EQ(imported["reason"], "imported");
  EXPECT_EQ(imported["checksum"], c2["checksum"]);

  // Deleting on b forgets b's record only (the objects belong to a); deleting on a removes them.
  ASSERT_TRUE(b.Cairn({"job", "delete", "py"}).Exited(0));
  EXPECT_FALSE(Keys("ckpt/py/" + id + "/").empty());
  ASSERT_TRUE(a.Cairn({"checkpoint", "delete", id}).Exited(0));
  EXPECT_TRUE(Keys("ckpt/py/" + id + "/").empty());
  ASSERT_TRUE(a.Cairn({"job", "delete", "py"}).Exited(0));
  EXPECT_TRUE(Keys("ckpt/").empty()) << "job delete leaves objects behind";
}

// The same through S3 between two nodes as two machines: each daemon's state directory is its
// own (a mount namespace of its own, DaemonProcess::PrivateStateDir), so nothing of node a's files
// can serve node b's restore.
TEST_F(StorageTest, S3CheckpointRunsOnANodeThatCannotSeeTheFirstNodesFiles) {
  StartS3();
  if (IsSkipped() || HasFatalFailure()) return;
  std::string expected = Expected();
  ASSERT_FALSE(expected.empty());
  DaemonProcess a(Dir(), "node-a", S3Args(s3_->endpoint()), S3Env());
  DaemonProcess b(Dir(), "node-b", S3Args(s3_->endpoint()), S3Env());
  a.PrivateStateDir();
  b.PrivateStateDir();
  ASSERT_TRUE(a.Start());
  ASSERT_TRUE(b.Start());
  ASSERT_TRUE(fs::is_empty(a.state_dir())) << "node a's state directory is visible outside its namespace";
  std::string out = Dir() + "/py";
  ASSERT_TRUE(RunPython(a, "py", out));
  json c = a.Json({"job", "checkpoint", "py", "--kill"})["checkpoint"];
  ASSERT_EQ(c["state"], "complete") << c.dump() << a.Log();
  ASSERT_TRUE(WaitState(a, "py", "killed"));
  CommandResult restore = b.Cairn({"job", "restore", "py", "--from", c["location"].get<std::string>()});
  ASSERT_TRUE(restore.Exited(0)) << restore.Describe() << b.Log();
  Release(out);
  ASSERT_TRUE(WaitState(b, "py", "exited", 120s)) << b.Log();
  EXPECT_EQ(ReadFile(out + "/result"), expected);
  EXPECT_EQ(b.Cairn({"job", "logs", "py"}).out, "done\n");
}

TEST_F(StorageTest, S3RetentionDeletesObjectsAndKeepLocalCopy) {
  StartS3();
  if (IsSkipped() || HasFatalFailure()) return;
  std::vector<std::string> args = S3Args(s3_->endpoint());
  args.push_back("--keep-local-copy");
  DaemonProcess a(Dir(), "node-a", args, S3Env());
  ASSERT_TRUE(a.Start());
  ASSERT_TRUE(a.Cairn({"job", "run", "--name", "sl", "--keep", "1", "--", "/bin/sleep", "600"}).Exited(0));
  json c1 = a.Json({"job", "checkpoint", "sl"})["checkpoint"];
  ASSERT_EQ(c1["state"], "complete") << c1.dump();
  EXPECT_TRUE(fs::exists(a.state_dir() + "/checkpoints/sl/" + c1["id"].get<std::string>() + "/checkpoint.meta"));
  json c2 = a.Json({"job", "checkpoint", "sl"})["checkpoint"];
  ASSERT_EQ(c2["state"], "complete") << c2.dump();
  EXPECT_TRUE(Keys("ckpt/sl/" + c1["id"].get<std::string>() + "/").empty()) << "retention left the objects";
  EXPECT_FALSE(fs::exists(a.state_dir() + "/checkpoints/sl/" + c1["id"].get<std::string>()));
  EXPECT_FALSE(Keys("ckpt/sl/" + c2["id"].get<std::string>() + "/").empty());
  // Restores from the kept local copy.
  ASSERT_TRUE(a.Cairn({"job", "kill", "sl"}).Exited(0));
  CommandResult r = a.Cairn({"job", "restore", "sl"});
  ASSERT_TRUE(r.Exited(0)) << r.Describe() << a.Log();
  EXPECT_EQ(a.Json({"job", "show", "sl"})["job"]["state"], "running");
  a.KillJobs();
}

TEST_F(StorageTest, WrongS3CredentialsFailCleanlyAndTheJobRuns) {
  StartS3();
  if (IsSkipped() || HasFatalFailure()) return;
  DaemonProcess a(Dir(), "node-a", S3Args(s3_->endpoint()), S3Env("NOT-A-KEY"));
  ASSERT_TRUE(a.Start());
  ExpectFailedUploadLeavesJobRunning(a, "InvalidAccessKeyId");
}

TEST_F(StorageTest, UnreachableS3EndpointFailsCleanlyAndTheJobRuns) {
  StartS3();  // only to look into the bucket afterwards; the daemon talks to a closed port
  if (IsSkipped() || HasFatalFailure()) return;
  DaemonProcess a(Dir(), "node-a", S3Args("http://127.0.0.1:" + std::to_string(FreeTcpPort())), S3Env());
  ASSERT_TRUE(a.Start());
  ExpectFailedUploadLeavesJobRunning(a, "check --s3-endpoint");
}

TEST_F(StorageTest, BadStorageOptionsAreRefusedAtStart) {
  auto refused = [&](std::vector<std::string> args, std::vector<std::string> env, const std::string& says) {
    std::vector<std::string> argv = {CAIRND_BIN, "--node", "x", "--state-dir", Dir() + "/st", "--socket", Dir() + "/x.sock"};
    argv.insert(argv.end(), args.begin(), args.end());
    CommandOptions o = WithEnv(env);
    CommandResult r = RunCommand(argv, Dir(), o);
    EXPECT_TRUE(r.FailedCleanly()) << r.Describe();
    EXPECT_NE(r.err.find(says), std::string::npos) << r.Describe();
  };
  refused({"--storage", "ftp://x"}, {}, "use local, dir:/PATH");
  refused({"--storage", "dir:" + Dir() + "/nope"}, {}, "not an existing directory");
  refused({"--storage", "s3://bkt"}, {"AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY="}, "no S3 credentials");
  std::string cred = Dir() + "/cred";
  WriteFile(cred, "[default]\naws_access_key_id = S3RVER\naws_secret_access_key = S3RVER\n");
  ::chmod(cred.c_str(), 0644);
  refused({"--storage", "s3://bkt", "--s3-credentials", cred}, {}, "chmod 600");
}

// An incremental checkpoint in a shared store is restored on another node with the chain it
// builds on: the node fetches the parent stored beside it.
TEST_F(StorageTest, IncrementalCheckpointRestoresOnAnotherNodeWithItsParent) {
  std::string shared = Dir() + "/nfs";
  fs::create_directories(shared);
  // The parent must stay on a's disk for a's next checkpoint to build on it.
  DaemonProcess a(Dir(), "node-a", {"--storage", "dir:" + shared, "--keep-local-copy"});
  DaemonProcess b(Dir(), "node-b", {"--storage", "dir:" + shared});
  ASSERT_TRUE(a.Start());
  ASSERT_TRUE(b.Start());
  std::string work = Dir() + "/writer";
  fs::create_directories(work);
  ASSERT_TRUE(a.Cairn({"job", "run", "--name", "w", "--incremental", "--", WORKLOAD_DIR "/incremental/inc_writer", work,
                       "32", "2000"})
                  .Exited(0));
  ASSERT_TRUE(WaitFor([&] { return Exists(work + "/ready"); }, 30s));
  json full = a.Json({"job", "checkpoint", "w"})["checkpoint"];
  ASSERT_EQ(full["state"], "complete") << full.dump() << a.Log();
  std::this_thread::sleep_for(500ms);
  json inc = a.Json({"job", "checkpoint", "w", "--incremental", "--kill"})["checkpoint"];
  ASSERT_EQ(inc["state"], "complete") << inc.dump() << a.Log();
  ASSERT_EQ(inc.value("parent", ""), full["id"]) << inc.dump();
  ASSERT_TRUE(WaitState(a, "w", "killed"));

  CommandResult r = b.Cairn({"job", "restore", "w", "--checkpoint", inc["id"]});
  ASSERT_TRUE(r.Exited(0)) << r.Describe() << b.Log();
  json parent = b.Json({"checkpoint", "show", full["id"]})["checkpoint"];
  EXPECT_EQ(parent["reason"], "imported") << parent.dump();
  EXPECT_EQ(b.Json({"checkpoint", "show", inc["id"]})["checkpoint"]["parent"], full["id"]);
  WriteFile(work + "/go", "");
  ASSERT_TRUE(WaitState(b, "w", "exited"));
  // The restored program writes on to this node's log of the job, not to a's (its descriptors
  // were made b's: Daemon::AdoptForThisNode).
  std::string log = ReadFile(b.state_dir() + "/jobs/w/stdout.log");
  EXPECT_TRUE(Matches(log, "PASS")) << log;
  EXPECT_FALSE(Matches(log, "FAIL")) << log;
  EXPECT_FALSE(Matches(ReadFile(a.state_dir() + "/jobs/w/stdout.log"), "PASS")) << "it wrote to a's log";
}

TEST_F(StorageTest, SharedDirectoryRestoresOnAnotherNodeByCheckpointId) {
  std::string expected = Expected();
  std::string shared = Dir() + "/nfs";
  fs::create_directories(shared);
  DaemonProcess a(Dir(), "node-a", {"--storage", "dir:" + shared});
  DaemonProcess b(Dir(), "node-b", {"--storage", "dir:" + shared});
  ASSERT_TRUE(a.Start());
  ASSERT_TRUE(b.Start());
  std::string out = Dir() + "/py";
  ASSERT_TRUE(RunPython(a, "py", out));
  json c = a.Json({"job", "checkpoint", "py", "--kill"})["checkpoint"];
  ASSERT_EQ(c["state"], "complete") << c.dump() << a.Log();
  std::string id = c["id"];
  EXPECT_EQ(c["location"], shared + "/py/" + id);
  EXPECT_TRUE(Exists(shared + "/py/" + id + "/cairn-manifest"));
  ASSERT_TRUE(WaitState(a, "py", "killed"));

  // A damaged stored file is refused, naming it.
  std::string meta = shared + "/py/" + id + "/checkpoint.meta";
  std::string good = ReadFile(meta);
  WriteFile(meta, good + "x");
  CommandResult bad = b.Cairn({"job", "restore", "py", "--checkpoint", id});
  EXPECT_TRUE(bad.FailedCleanly()) << bad.Describe();
  EXPECT_NE(bad.err.find("checkpoint.meta"), std::string::npos) << bad.Describe();
  WriteFile(meta, good);

  // By id: b shares the store, so it finds the job's checkpoint there.
  CommandResult r = b.Cairn({"job", "restore", "py", "--checkpoint", id});
  ASSERT_TRUE(r.Exited(0)) << r.Describe() << b.Log();
  Release(out);
  ASSERT_TRUE(WaitState(b, "py", "exited", 120s));
  EXPECT_EQ(ReadFile(out + "/result"), expected);
  ASSERT_TRUE(a.Cairn({"job", "delete", "py"}).Exited(0));
  EXPECT_FALSE(Exists(shared + "/py/" + id));
}

// A checkpoint taken on one node and restored from the shared store on another is that node's job
// there: its descriptors of the job's logs name the new node's logs (the first node's state
// directory is gone), so the job's output after the restore is in `cairn job logs` there.
TEST_F(StorageTest, ARestoreOnAnotherNodeWritesToThatNodesLogsNotTheFirstNodes) {
  std::string expected = Expected();
  std::string shared = Dir() + "/nfs";
  fs::create_directories(shared);
  auto a = std::make_unique<DaemonProcess>(Dir(), "node-a", std::vector<std::string>{"--storage", "dir:" + shared});
  DaemonProcess b(Dir(), "node-b", {"--storage", "dir:" + shared});
  ASSERT_TRUE(a->Start());
  ASSERT_TRUE(b.Start());
  ASSERT_NE(a->state_dir(), b.state_dir());
  std::string out = Dir() + "/py";
  ASSERT_TRUE(RunPython(*a, "py", out));
  json c = a->Json({"job", "checkpoint", "py", "--kill"})["checkpoint"];
  ASSERT_EQ(c["state"], "complete") << c.dump() << a->Log();
  std::string id = c["id"];
  ASSERT_TRUE(WaitState(*a, "py", "killed"));
  std::string a_state = a->state_dir();
  a.reset();  // node a goes away with its state
  fs::remove_all(a_state);

  CommandResult r = b.Cairn({"job", "restore", "py", "--checkpoint", id});
  ASSERT_TRUE(r.Exited(0)) << r.Describe() << b.Log();
  Release(out);
  ASSERT_TRUE(WaitState(b, "py", "exited", 120s));
  EXPECT_EQ(Job(b, "py")["health"]["exit_code"], 0);
  EXPECT_EQ(ReadFile(out + "/result"), expected);
  EXPECT_EQ(b.Cairn({"job", "logs", "py"}).out, "done\n") << "the job's output after the restore";
  EXPECT_FALSE(Exists(a_state)) << "the restored job wrote into the first node's state directory";
}

}  // namespace
}  // namespace cairn::testing
