// Issue 21: cairnd SIGKILLed in the middle of the two operations the other fault tests do not
// cut: storing a checkpoint in a remote store (s3:// against s3rver on loopback, and dir:), and
// restoring a job (from its own node's checkpoint, and from the shared store, --newest-stored).
// Each case pauses the daemon at a named fault point (CAIRN_FAULT_PAUSE=STAGE; the points are
// listed in docs/reliability.md), kills it there and starts it again on the same state directory.
//
// An upload cut anywhere: the job runs on, adopted under its old pid, and passes its own check
// (tests/faults/fault_target); no checkpoint in the store has a manifest without every file
// it names; the interrupted checkpoint's row is `failed`, not `writing`, and its files are gone
// from the store and from the node (the restart rolls an unfinished upload back); a later
// checkpoint is stored and the newest stored one restores into a process that passes its check.
//
// A restore cut anywhere: no copy of the job runs (nothing in its cgroup, no process of it
// anywhere), the job says `exited` with a `restore-interrupted` event (or, cut while the image
// was still being imported, the node does not know the job at all), no fetched or half-fetched
// image is left, and a second restore of the same checkpoint runs the job to an uninterrupted
// run's result.

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "daemon/storage/manifest.h"
#include "daemon/storage/s3_client.h"
#include "daemon_harness.h"
#include "s3rver.h"

namespace cairn::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kTargetMib = 40;  // pages.img over 16 MiB: uploaded to S3 in parts

// Processes running python3 (the job, not its init) whose command line mentions `needle`.
std::vector<pid_t> ProcessesMentioning(const std::string& needle) {
  std::vector<pid_t> found;
  std::error_code ec;
  for (auto it = fs::directory_iterator("/proc", ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = ReadFile(it->path().string() + "/cmdline");
    if (cmd.rfind("/usr/bin/python3", 0) == 0 && cmd.find(needle) != std::string::npos) found.push_back(std::atoi(name.c_str()));
  }
  return found;
}

std::string CgroupProcs(const std::string& node, const std::string& job) {
  return ReadFile("/sys/fs/cgroup/freezer/cairn/" + node + "." + job + "/cgroup.procs");
}

bool HasEvent(const json& show, const std::string& kind) {
  for (const json& e : show.value("events", json::array())) {
    if (e.value("kind", "") == kind) return true;
  }
  return false;
}

// Whatever was left under the job's local checkpoint directory that is a directory.
std::vector<std::string> LocalDirs(const std::string& state_dir, const std::string& job) {
  std::vector<std::string> dirs;
  std::error_code ec;
  for (auto it = fs::directory_iterator(state_dir + "/checkpoints/" + job, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    if (it->is_directory()) dirs.push_back(it->path().filename().string());
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

// ---------------------------------------------------------------------------------------------
// Uploads

struct UploadCut {
  const char* name;
  const char* store;  // "s3" or "dir"
  const char* stage;
  bool kill = false;  // `job checkpoint --kill`: the job is held frozen while it is stored
};
std::ostream& operator<<(std::ostream& os, const UploadCut& c) { return os << c.name; }

class UploadKillTest : public DaemonFixture, public ::testing::WithParamInterface<UploadCut> {
 protected:
  void SetUp() override {
    DaemonFixture::SetUp();
    const UploadCut& cut = GetParam();
    if (std::string(cut.store) == "s3") {
      if (std::string why = S3rver::Missing(); !why.empty()) GTEST_SKIP() << "no S3 server to test against: " << why;
      s3_ = std::make_unique<S3rver>(Dir() + "/s3", "bkt");
      ASSERT_TRUE(s3_->Start());
      args_ = {"--storage", "s3://bkt/ckpt", "--s3-endpoint", s3_->endpoint()};
      env_ = {std::string("AWS_ACCESS_KEY_ID=") + S3rver::kKey, std::string("AWS_SECRET_ACCESS_KEY=") + S3rver::kSecret};
    } else {
      shared_ = Dir() + "/shared";
      ASSERT_EQ(::mkdir(shared_.c_str(), 0700), 0);
      args_ = {"--storage", "dir:" + shared_};
    }
  }

  daemon::storage::S3Client Client() const { return daemon::storage::S3Client(s3_->Config()); }

  // What the store holds of job `job`: checkpoint id -> {relative path -> size}, a manifest
  // included as "cairn-manifest"; ".partial" directories of dir: under their own name.
  std::map<std::string, std::map<std::string, uint64_t>> Stored(const std::string& job) {
    std::map<std::string, std::map<std::string, uint64_t>> out;
    if (s3_) {
      auto l = Client().List("ckpt/" + job + "/");
      EXPECT_TRUE(l.ok()) << l.status();
      if (!l.ok()) return out;
      for (const auto& o : *l) {
        std::string rest = o.key.substr(("ckpt/" + job + "/").size());
        size_t slash = rest.find('/');
        if (slash == std::string::npos) continue;
        out[rest.substr(0, slash)][rest.substr(slash + 1)] = o.size;
      }
      return out;
    }
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(shared_ + "/" + job, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
      if (!it->is_regular_file()) continue;
      std::string rel = fs::relative(it->path(), shared_ + "/" + job).string();
      size_t slash = rel.find('/');
      out[rel.substr(0, slash)][rel.substr(slash + 1)] = fs::file_size(it->path());
    }
    return out;
  }

  std::string ReadStored(const std::string& job, const std::string& id, const std::string& file) {
    if (s3_) {
      auto b = Client().GetBytes("ckpt/" + job + "/" + id + "/" + file);
      return b.ok() ? *b : "";
    }
    return ReadFile(shared_ + "/" + job + "/" + id + "/" + file);
  }

  // Every stored checkpoint with a manifest holds every file it names, at its size (what a
  // restore of it needs); returns the newest such id ("" if none).
  std::string CheckNoHalfCheckpointLooksComplete(const std::string& job) {
    std::string newest;
    for (const auto& [id, files] : Stored(job)) {
      if (!files.count(daemon::storage::kManifestFile)) continue;
      EXPECT_FALSE(id.ends_with(".partial")) << "a manifest in a .partial directory: " << id;
      auto m = daemon::storage::Manifest::Parse(ReadStored(job, id, daemon::storage::kManifestFile), id);
      EXPECT_TRUE(m.ok()) << m.status();
      if (!m.ok()) continue;
      for (const auto& f : m->files) {
        auto it = files.find(f.path);
        EXPECT_TRUE(it != files.end() && it->second == f.size)
            << "checkpoint " << id << " has a manifest but " << f.path << " is "
            << (it == files.end() ? "missing" : std::to_string(it->second) + " bytes, not " + std::to_string(f.size));
      }
      newest = std::max(newest, id);
    }
    return newest;
  }

  // Asks the job's fault_target to check itself: "PASS N", "FAIL ..." or what went wrong.
  static std::string Ask(pid_t target, const std::string& log) {
    size_t before = ReadFile(log).size();
    if (!IsAlive(target)) return "DEAD";
    ::kill(target, SIGUSR1);
    for (auto deadline = Clock::now() + 30s; Clock::now() < deadline;) {
      std::string out = ReadFile(log);
      size_t at = out.find_first_of("PF", before);
      if (at != std::string::npos && out.find('\n', at) != std::string::npos) return out.substr(at, out.find('\n', at) - at);
      if (!IsAlive(target)) return "DEAD after the question";
      std::this_thread::sleep_for(20ms);
    }
    return "NO ANSWER in 30 s";
  }
  static pid_t ChildOf(pid_t init) {
    std::string c = ReadFile("/proc/" + std::to_string(init) + "/task/" + std::to_string(init) + "/children");
    return c.empty() ? 0 : std::atoi(c.c_str());
  }

  std::unique_ptr<S3rver> s3_;
  std::string shared_;
  std::vector<std::string> args_, env_;
};

TEST_P(UploadKillTest, TheJobRunsOnAndNoHalfCheckpointLooksComplete) {
  const UploadCut& cut = GetParam();
  auto a = std::make_unique<DaemonProcess>(Dir(), "node-a", args_, env_);
  ASSERT_TRUE(a->Start());
  const std::string node = a->node();
  ASSERT_TRUE(a->Cairn({"job", "run", "--name", "ft", "--checkpoint-every", "0", "--", "/usr/bin/env",
                        "FAULT_TARGET_TRACKED=0", FAULT_TARGET, std::to_string(kTargetMib)})
                  .Exited(0));
  const std::string log = a->state_dir() + "/jobs/ft/stdout.log";
  ASSERT_TRUE(WaitFor([&] { return ReadFile(log).find("ready") != std::string::npos; }, 60s)) << ReadFile(log);
  const int init = Job(*a, "ft")["host_pid"];
  const pid_t target = ChildOf(init);
  ASSERT_GT(target, 0);

  // One complete stored checkpoint first: the one a restore must find after the cut.
  json c1 = a->Json({"job", "checkpoint", "ft"})["checkpoint"];
  ASSERT_EQ(c1.value("state", ""), "complete") << c1.dump() << a->Log();
  const std::string id1 = c1["id"];

  // The daemon again, with the fault point (its job adopted), then the checkpoint it dies in.
  a->Kill(SIGKILL);
  a->Wait();
  std::vector<std::string> fault_env = env_;
  fault_env.push_back(std::string("CAIRN_FAULT_PAUSE=") + cut.stage);
  a = std::make_unique<DaemonProcess>(Dir(), "node-a", args_, fault_env);
  ASSERT_TRUE(a->Start());
  ASSERT_EQ(Job(*a, "ft")["host_pid"], init);
  std::vector<std::string> take = {"job", "checkpoint", "ft"};
  if (cut.kill) take.push_back("--kill");
  FaultCut killed = KillAtFaultPoint(*a, take, *a, cut.stage);
  const CommandResult& ck = killed.call;
  ASSERT_TRUE(killed.reached) << "cairnd never reached " << cut.stage << ": " << a->RunLog();
  EXPECT_FALSE(ck.Exited(0)) << "the checkpoint reported success although the daemon died in it: " << ck.Describe();
  if (!cut.kill) {
    // Its upload never touches the job: it runs on while the daemon is down.
    std::string answer = Ask(target, log);
    EXPECT_EQ(answer.rfind("PASS", 0), 0u) << "with the daemon dead at " << cut.stage << ": " << answer;
  }
  // The cut as another node would see it now: what has a manifest is whole.
  std::string newest = CheckNoHalfCheckpointLooksComplete("ft");
  if (std::string(cut.stage) == "upload-stored") {
    EXPECT_GE(newest, id1);
  } else {
    EXPECT_EQ(newest, id1) << "the newest checkpoint with a manifest is not the one stored before the cut";
  }
  std::string id2;
  for (const auto& [id, files] : Stored("ft")) {
    if (id != id1) id2 = id.ends_with(".partial") ? id.substr(0, id.size() - 8) : id;
  }

  // Started again: the job is adopted as it was and runs (thawed, if it was held for --kill).
  a = std::make_unique<DaemonProcess>(Dir(), "node-a", args_, env_);
  ASSERT_TRUE(a->Start());
  json show = a->Json({"job", "show", "ft"});
  EXPECT_EQ(show["job"]["state"], "running") << show.dump();
  EXPECT_EQ(show["job"]["host_pid"], init);
  EXPECT_EQ(JobFreezer(node, "ft"), "THAWED");
  std::string answer = Ask(target, log);
  EXPECT_EQ(answer.rfind("PASS", 0), 0u) << "after the restart: " << answer;

  // The interrupted checkpoint is rolled back: its row failed, its files gone everywhere.
  std::string failed_id;
  for (const json& c : show.value("checkpoints", json::array())) {
    EXPECT_NE(c.value("state", ""), "writing") << c.dump();
    if (c.value("id", "") != id1) {
      EXPECT_EQ(c.value("state", ""), "failed") << c.dump();
      failed_id = c.value("id", "");
    } else {
      EXPECT_EQ(c.value("state", ""), "complete") << c.dump();
    }
  }
  ASSERT_FALSE(failed_id.empty()) << "no row for the interrupted checkpoint: " << show.dump();
  if (!id2.empty()) {
    EXPECT_EQ(id2, failed_id) << "the store held objects of another checkpoint";
  }
  EXPECT_TRUE(HasEvent(show, "checkpoint-cleaned")) << show.dump();
  auto stored = Stored("ft");
  for (const auto& [id, files] : stored) {
    EXPECT_TRUE(id == id1) << "left in the store after the restart: " << id << " (" << files.size() << " files)";
  }
  EXPECT_EQ(LocalDirs(a->state_dir(), "ft"), std::vector<std::string>{}) << "local copies or .partial left";
  if (s3_) {
    // A multipart upload cut before its completion stays pending in the bucket (invisible to
    // listings and restores; a lifecycle rule aborts it: docs/daemon.md). Reported, not failed.
    std::cerr << "cut " << cut.name << ": pending multipart uploads in the bucket: " << s3_->PendingUploads() << "\n";
  }

  // Later checkpoints are stored, and the newest stored one restores into a process that passes.
  json c3 = a->Json({"job", "checkpoint", "ft"})["checkpoint"];
  ASSERT_EQ(c3.value("state", ""), "complete") << c3.dump() << a->Log();
  EXPECT_EQ(CheckNoHalfCheckpointLooksComplete("ft"), c3["id"]);
  ASSERT_TRUE(a->Cairn({"job", "kill", "ft"}).Exited(0));
  ASSERT_TRUE(WaitGone(target, 10s).gone);
  CommandResult r = a->Cairn({"job", "restore", "ft", "--newest-stored"});
  ASSERT_TRUE(r.Exited(0)) << r.Describe() << a->Log();
  show = a->Json({"job", "show", "ft"});
  pid_t restored = ChildOf(show["job"]["host_pid"].get<int>());
  ASSERT_GT(restored, 0);
  answer = Ask(restored, log);
  EXPECT_EQ(answer.rfind("PASS", 0), 0u) << "restored from " << c3["id"] << ": " << answer;
  a->KillJobs();
}

INSTANTIATE_TEST_SUITE_P(
    Cuts, UploadKillTest,
    ::testing::Values(UploadCut{"S3Begun", "s3", "upload-begun"},
                      UploadCut{"S3SomeObjects", "s3", "upload-partial"},
                      UploadCut{"S3PartsSentNotCompleted", "s3", "upload-multipart"},
                      UploadCut{"S3BeforeManifest", "s3", "upload-before-manifest"},
                      UploadCut{"S3BeforeManifestHeldForKill", "s3", "upload-before-manifest", true},
                      UploadCut{"S3StoredNotRecorded", "s3", "upload-stored"},
                      UploadCut{"S3StoredNotRecordedHeldForKill", "s3", "upload-stored", true},
                      UploadCut{"DirSomeFiles", "dir", "upload-partial"},
                      UploadCut{"DirBeforeManifest", "dir", "upload-before-manifest"},
                      UploadCut{"DirStoredNotRecorded", "dir", "upload-stored"}),
    [](const ::testing::TestParamInfo<UploadCut>& i) { return std::string(i.param.name); });

// ---------------------------------------------------------------------------------------------
// Restores

struct RestoreCut {
  const char* name;
  bool stored;  // restored on a second node with --newest-stored from a shared dir: store
  const char* stage;
};
std::ostream& operator<<(std::ostream& os, const RestoreCut& c) { return os << c.name; }

class RestoreKillTest : public DaemonFixture, public ::testing::WithParamInterface<RestoreCut> {};

TEST_P(RestoreKillTest, NoCopyRunsAndASecondRestoreFinishesTheJob) {
  const RestoreCut& cut = GetParam();
  std::string expected = Expected();
  ASSERT_FALSE(expected.empty());
  const std::string fault = std::string("CAIRN_FAULT_PAUSE=") + cut.stage;
  std::vector<std::string> args;
  if (cut.stored) {
    std::string shared = Dir() + "/shared";
    ASSERT_EQ(::mkdir(shared.c_str(), 0700), 0);
    args = {"--storage", "dir:" + shared};
  }
  // The job runs and is checkpointed (and stopped) on a; b restores it (a itself when local).
  auto a = std::make_unique<DaemonProcess>(Dir(), "node-a", args, cut.stored ? std::vector<std::string>{}
                                                                               : std::vector<std::string>{fault});
  ASSERT_TRUE(a->Start());
  std::unique_ptr<DaemonProcess> other;
  if (cut.stored) {
    other = std::make_unique<DaemonProcess>(Dir(), "node-b", args, std::vector<std::string>{fault});
    ASSERT_TRUE(other->Start());
  }
  std::unique_ptr<DaemonProcess>& b = cut.stored ? other : a;
  const std::string node_b = b->node();

  std::string out = Dir() + "/py";
  std::vector<std::string> run = {"job", "run", "--name", "py", "--checkpoint-every", "0", "--"};
  for (auto& arg : PythonJob(out)) run.push_back(arg);
  ASSERT_TRUE(a->Cairn(run).Exited(0)) << a->Log();
  std::this_thread::sleep_for(1s);  // mid-computation
  json c1 = a->Json({"job", "checkpoint", "py", "--kill"})["checkpoint"];
  ASSERT_EQ(c1.value("state", ""), "complete") << c1.dump() << a->Log();
  ASSERT_TRUE(WaitState(*a, "py", "killed"));
  std::vector<std::string> restore = {"job", "restore", "py"};
  if (cut.stored) restore.push_back("--newest-stored");

  FaultCut killed = KillAtFaultPoint(*b, restore, *b, cut.stage);
  const CommandResult& r = killed.call;
  ASSERT_TRUE(killed.reached) << "cairnd never reached " << cut.stage << ": " << b->RunLog();
  EXPECT_FALSE(r.Exited(0)) << "the restore reported success although the daemon died in it: " << r.Describe();

  b = std::make_unique<DaemonProcess>(Dir(), cut.stored ? "node-b" : "node-a", args);
  ASSERT_TRUE(b->Start());
  // No copy runs: nothing in the job's cgroup, no process of the job anywhere.
  EXPECT_TRUE(WaitFor([&] { return CgroupProcs(node_b, "py").empty(); }, 10s))
      << "left in the job's cgroup: " << CgroupProcs(node_b, "py");
  EXPECT_TRUE(WaitFor([&] { return ProcessesMentioning(out + "/result").empty(); }, 10s))
      << "a copy of the job runs: pid " << ProcessesMentioning(out + "/result").front();
  // The job's record says what happened (or, cut while importing, the node never knew the job).
  CommandResult show_r = b->Cairn({"job", "show", "py"});
  if (cut.stored && std::string(cut.stage) == "fetch-partial") {
    EXPECT_FALSE(show_r.Exited(0)) << "the job was recorded although its import was cut: " << show_r.out;
  } else {
    json show = b->Json({"job", "show", "py"});
    EXPECT_EQ(show["job"]["state"], "exited") << show.dump();
    EXPECT_TRUE(HasEvent(show, "restore-interrupted")) << show.dump();
    EXPECT_NE(show["job"]["health"].value("detail", "").find("cut off by a daemon restart"), std::string::npos) << show.dump();
  }
  // No fetched image is left (only the node's own checkpoint, for a local restore).
  EXPECT_EQ(LocalDirs(b->state_dir(), "py"),
            cut.stored ? std::vector<std::string>{} : std::vector<std::string>{c1["id"].get<std::string>()});

  // A second restore of the same checkpoint runs the job to the uninterrupted result.
  CommandResult again = b->Cairn(restore);
  ASSERT_TRUE(again.Exited(0)) << again.Describe() << b->Log();
  json show = b->Json({"job", "show", "py"});
  EXPECT_NE(show.dump().find("from checkpoint " + c1["id"].get<std::string>()), std::string::npos) << show.dump();
  EXPECT_EQ(ProcessesMentioning(out + "/result").size(), 1u) << "not exactly one copy runs";
  Release(out);
  ASSERT_TRUE(WaitState(*b, "py", "exited", 120s));
  EXPECT_EQ(ReadFile(out + "/result"), expected);
  if (cut.stored) {
    EXPECT_EQ(LocalDirs(b->state_dir(), "py"), std::vector<std::string>{});
  }
  std::cerr << "cut " << cut.name << ": rolled back, restored again, result right\n";
  b->KillJobs();
  a->KillJobs();
}

INSTANTIATE_TEST_SUITE_P(
    Cuts, RestoreKillTest,
    ::testing::Values(RestoreCut{"LocalBeforeTheEngine", false, "restore-fetched"},
                      RestoreCut{"LocalEngineBuilding", false, "restore-building"},
                      RestoreCut{"LocalRunningNotRecorded", false, "restore-running"},
                      RestoreCut{"StoredHalfFetched", true, "fetch-partial"},
                      RestoreCut{"StoredFetched", true, "restore-fetched"},
                      RestoreCut{"StoredEngineBuilding", true, "restore-building"},
                      RestoreCut{"StoredRunningNotRecorded", true, "restore-running"}),
    [](const ::testing::TestParamInfo<RestoreCut>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace cairn::testing
