// Incremental checkpoints (`dump --parent`, `--track`) and `cairn compact`, against
// tests/workloads/incremental/inc_chain: a program that makes numbered rounds of random writes
// and, told a round number, checks that its whole memory is exactly as it was after that round.

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "harness.h"

namespace cairn::testing {
namespace {

std::string ChainProgram() { return std::string(WORKLOAD_DIR) + "/incremental/inc_chain"; }

uint64_t FileSize(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

class IncrementalTest : public CairnTest {
 protected:
  // Starts inc_chain in WORKDIR = temp/work; waits until it has filled its memory.
  ::testing::AssertionResult StartChain() {
    work_ = *temp_ / "work";
    std::filesystem::create_directories(work_);
    WriteFile(work_ + "/stdin", "");
    pid_ = SpawnProgram({ChainProgram(), work_}, work_ + "/stdin", work_ + "/stdout", work_ + "/stderr");
    if (pid_ < 0) return ::testing::AssertionFailure() << "cannot start " << ChainProgram();
    Track(pid_, ChainProgram());
    auto deadline = std::chrono::steady_clock::now() + 20s;
    while (!Exists(work_ + "/ready")) {
      if (!IsAlive(pid_) || std::chrono::steady_clock::now() > deadline) {
        return ::testing::AssertionFailure() << "inc_chain did not get ready: " << ReadFile(work_ + "/stdout");
      }
      std::this_thread::sleep_for(5ms);
    }
    return ::testing::AssertionSuccess();
  }

  // Makes the program run round `k`; returns how many pages of its big area that round wrote.
  int Round(int k) {
    WriteFile(work_ + "/step" + std::to_string(k), "");
    std::string done = work_ + "/done" + std::to_string(k);
    auto deadline = std::chrono::steady_clock::now() + 20s;
    while (!Exists(done) && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(2ms);
    return std::atoi(ReadFile(done).c_str());
  }

  CommandResult DumpTo(const std::string& dir, const std::string& parent, bool leave_running, bool track = false) {
    std::vector<std::string> args = {"dump", "--pid", std::to_string(pid_), "--dir", dir};
    if (!parent.empty()) args.insert(args.end(), {"--parent", parent});
    if (leave_running) args.push_back("--leave-running");
    if (track) args.push_back("--track");
    return Cairn(args);
  }

  // Restores `dir` (attached) with the program told to check it is exactly at round `k`.
  ::testing::AssertionResult RestoreChecks(const std::string& dir, int k) {
    // The program may have been checkpointed between its look at `check` and its look for the
    // next step's file: the files of the steps the original run made after k must be gone, or
    // the restored program makes step k+1 before it checks (it did: "at step 4, expected 3").
    for (int later = k + 1; later <= 64; ++later) std::filesystem::remove(work_ + "/step" + std::to_string(later));
    WriteFileAtomic(work_ + "/check", std::to_string(k));
    CommandResult r = Restore(dir, /*detach=*/false, WithTimeout(60s));
    std::string out = ReadFile(work_ + "/stdout");
    if (!r.Exited(0) || LastLine(out) != "PASS") {
      return ::testing::AssertionFailure() << "restore of " << dir << " (round " << k << ") " << r.Describe()
                                           << "\nprogram says: " << LastLine(out);
    }
    return ::testing::AssertionSuccess();
  }

  std::string Ck(int k) { return *temp_ / ("ck" + std::to_string(k)); }

  std::string work_;
  pid_t pid_ = -1;
};

// Ten incremental checkpoints with random writes, discards, heap growth and replaced mappings
// between them: every link restores exactly its moment, each link's size follows the pages
// written, and compacting (in place, in the middle of the chain, and to a new directory) keeps
// every link restorable.
TEST_F(IncrementalTest, ChainOfTenEveryLinkRestoresItsMoment) {
  ASSERT_TRUE(StartChain());
  CommandResult full = DumpTo(Ck(0), "", true, true);
  ASSERT_TRUE(full.Exited(0)) << full.Describe();
  std::vector<int> written = {0};
  for (int k = 1; k <= 10; ++k) {
    written.push_back(Round(k));
    ASSERT_GT(written[k], 0) << "round " << k << " did not finish: " << ReadFile(work_ + "/stdout");
    CommandResult inc = DumpTo(Ck(k), Ck(k - 1), /*leave_running=*/k < 10);
    ASSERT_TRUE(inc.Exited(0)) << inc.Describe();
    ASSERT_TRUE(Matches(inc.out, "incremental: only pages written since")) << inc.Describe();
  }
  ASSERT_TRUE(WaitGone(pid_, 10s).gone) << "the last dump did not kill the program";

  // Sizes: the full image holds the 64 MiB area; each link about the pages its round wrote (plus a
  // little: heap growth, the replaced mapping, stack and libc data).
  EXPECT_GE(FileSize(Ck(0) + "/pages.img"), 64u << 20);
  for (int k = 1; k <= 10; ++k) {
    uint64_t size = FileSize(Ck(k) + "/pages.img");
    EXPECT_GE(size, static_cast<uint64_t>(written[k]) * 4096) << "link " << k;
    EXPECT_LE(size, static_cast<uint64_t>(written[k]) * 4096 + (1u << 20)) << "link " << k << " wrote " << written[k]
                                                                         << " pages";
  }
  CommandResult inspect = Inspect(Ck(10));
  ASSERT_TRUE(inspect.Exited(0)) << inspect.Describe();
  EXPECT_TRUE(Matches(inspect.out, "ck0 +id [0-9a-f]{32} +full")) << inspect.out;
  EXPECT_TRUE(Matches(inspect.out, "ck9 +id [0-9a-f]{32} +incremental")) << inspect.out;

  for (int k = 10; k >= 0; --k) ASSERT_TRUE(RestoreChecks(Ck(k), k));

  // Fold the middle of the chain: later links still resolve through it.
  CommandResult c5 = Cairn({"compact", Ck(5)});
  ASSERT_TRUE(c5.Exited(0)) << c5.Describe();
  EXPECT_FALSE(Exists(Ck(5) + ".compact")) << "compact left its work directory behind";
  EXPECT_GE(FileSize(Ck(5) + "/pages.img"), 60u << 20) << "a compacted link holds every page";
  ASSERT_TRUE(RestoreChecks(Ck(5), 5));
  ASSERT_TRUE(RestoreChecks(Ck(8), 8));
  std::string standalone = *temp_ / "standalone";
  CommandResult c10 = Cairn({"compact", Ck(10), "--out", standalone});
  ASSERT_TRUE(c10.Exited(0)) << c10.Describe();
  std::filesystem::remove_all(Ck(0));  // the standalone image needs no parent
  ASSERT_TRUE(RestoreChecks(standalone, 10));
}

// Compressed checkpoints (--compress): a chain mixing zstd and lz4 links restores exactly, each
// compressed block is verified alone, and a flipped byte in one is found by inspect and refused by
// restore.
TEST_F(IncrementalTest, CompressedChainRestoresAndCorruptionIsFound) {
  ASSERT_TRUE(StartChain());
  std::vector<std::string> base = {"dump", "--pid", std::to_string(pid_), "--dir", Ck(0), "--leave-running", "--track",
                                   "--compress", "zstd"};
  CommandResult c0 = Cairn(base);
  ASSERT_TRUE(c0.Exited(0)) << c0.Describe();
  // Half of each page compresses away: the image is well under the 64 MiB it holds.
  EXPECT_LT(FileSize(Ck(0) + "/pages.img"), 48u << 20);
  EXPECT_GE(FileSize(Ck(0) + "/pages.img"), 32u << 20);
  Round(1);
  CommandResult c1 = Cairn({"dump", "--pid", std::to_string(pid_), "--dir", Ck(1), "--parent", Ck(0), "--compress", "lz4"});
  ASSERT_TRUE(c1.Exited(0)) << c1.Describe();
  ASSERT_TRUE(WaitGone(pid_, 10s).gone);
  CommandResult bad = Cairn({"dump", "--pid", "1", "--dir", *temp_ / "never", "--compress", "gzip"});
  EXPECT_TRUE(bad.FailedCleanly() && Matches(bad.err, "give lz4, zstd or zstd:LEVEL")) << bad.Describe();
  ASSERT_TRUE(RestoreChecks(Ck(1), 1));
  ASSERT_TRUE(RestoreChecks(Ck(0), 0));

  // Flip one byte in the middle of the first compressed block of ck0.
  CommandResult json = Cairn({"inspect", "--json", Ck(0)});
  ASSERT_TRUE(json.Exited(0)) << json.Describe();
  size_t at = json.out.find("\"codec\": \"ZSTD\"");
  ASSERT_NE(at, std::string::npos) << "no compressed block in " << Ck(0);
  size_t block = json.out.rfind('{', at);
  auto number = [&](const std::string& key) {
    size_t k = json.out.find("\"" + key + "\":", block);
    size_t q = json.out.find('"', k + key.size() + 3);
    return std::stoull(json.out.substr(q + 1));
  };
  uint64_t offset = number("file_offset"), stored = number("stored_length");
  {
    std::fstream f(Ck(0) + "/pages.img", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(offset + stored / 2));
    char c = 0;
    f.get(c);
    f.seekp(static_cast<std::streamoff>(offset + stored / 2));
    f.put(static_cast<char>(c ^ 0x40));
  }
  CommandResult insp = Inspect(Ck(0));
  EXPECT_TRUE(insp.FailedCleanly() && Matches(insp.err, "checksum mismatch in the compressed block")) << insp.Describe();
  CommandResult r = Restore(Ck(1), /*detach=*/true);
  EXPECT_TRUE(r.FailedCleanly() && Matches(r.err, "checksum mismatch")) << r.Describe();
  EXPECT_FALSE(IsAlive(pid_)) << "a failed restore must leave no process";
}

// A parent replaced by another checkpoint under the same name is refused, naming the problem.
TEST_F(IncrementalTest, ReplacedParentIsRefused) {
  ASSERT_TRUE(StartChain());
  ASSERT_TRUE(DumpTo(Ck(0), "", true, true).Exited(0));
  Round(1);
  ASSERT_TRUE(DumpTo(Ck(1), Ck(0), true).Exited(0));
  std::filesystem::rename(Ck(0), *temp_ / "original0");
  CommandResult other = DumpTo(Ck(0), "", true);  // same process, another checkpoint
  ASSERT_TRUE(other.Exited(0)) << other.Describe();
  CommandResult r = Restore(Ck(1), /*detach=*/true);
  EXPECT_TRUE(r.FailedCleanly()) << r.Describe();
  EXPECT_TRUE(Matches(r.err, "parent was replaced")) << r.Describe();
  CommandResult insp = Inspect(Ck(1));
  EXPECT_TRUE(insp.FailedCleanly() && Matches(insp.err, "parent was replaced")) << insp.Describe();
  EXPECT_TRUE(IsAlive(pid_)) << "a refused restore must not touch the original";
}

// --parent must be next to --dir (chains are kept in one folder); nothing is written otherwise.
TEST_F(IncrementalTest, ParentOutsideTheFolderIsRefused) {
  ASSERT_TRUE(StartChain());
  std::string elsewhere = *temp_ / "elsewhere";
  std::filesystem::create_directories(elsewhere);
  ASSERT_TRUE(DumpTo(elsewhere + "/base", "", true, true).Exited(0));
  CommandResult r = DumpTo(Ck(1), elsewhere + "/base", true);
  EXPECT_TRUE(r.FailedCleanly()) << r.Describe();
  EXPECT_TRUE(Matches(r.err, "same folder")) << r.Describe();
  EXPECT_FALSE(Exists(Ck(1))) << "a refused dump left a checkpoint";
  EXPECT_FALSE(Exists(Ck(1) + ".partial"));
  EXPECT_TRUE(IsAlive(pid_));
}

// Without tracking since the parent (not started, or started for a later checkpoint), a dump
// --parent saves the process in full and says why; the result is standalone and restores.
TEST_F(IncrementalTest, UntrackedParentFallsBackToFull) {
  ASSERT_TRUE(StartChain());
  ASSERT_TRUE(DumpTo(Ck(0), "", true).Exited(0));  // no --track
  Round(1);
  CommandResult r1 = DumpTo(Ck(1), Ck(0), true);
  ASSERT_TRUE(r1.Exited(0)) << r1.Describe();
  EXPECT_TRUE(Matches(r1.out, "note: pid [0-9]+ saved in full: the parent was taken without tracking")) << r1.Describe();
  EXPECT_FALSE(Matches(r1.out, "incremental:")) << r1.Describe();
  EXPECT_GE(FileSize(Ck(1) + "/pages.img"), 64u << 20);
  // ck1 started tracking (--parent implies it); ck2 on ck1 is incremental, ck3 on ck1 again is not.
  Round(2);
  CommandResult r2 = DumpTo(Ck(2), Ck(1), true);
  ASSERT_TRUE(Matches(r2.out, "incremental:")) << r2.Describe();
  Round(3);
  CommandResult r3 = DumpTo(Ck(3), Ck(1), false);
  ASSERT_TRUE(r3.Exited(0)) << r3.Describe();
  EXPECT_TRUE(Matches(r3.out, "saved in full: its writes are tracked since another checkpoint")) << r3.Describe();
  ASSERT_TRUE(WaitGone(pid_, 10s).gone);
  std::filesystem::remove_all(Ck(1));  // ck3 is standalone
  ASSERT_TRUE(RestoreChecks(Ck(3), 3));
}

// Pre-copy of a program that keeps writing (and discarding) pages all along: most memory is copied
// while it runs, and after restore every page holds exactly what the program last wrote there.
class PreCopyTest : public CairnTest {
 protected:
  ::testing::AssertionResult StartWriter() {
    writer_ = std::make_unique<Workload>("inc_writer", *temp_ / "writer");
    std::filesystem::create_directories(writer_->workdir());
    WriteFile(writer_->workdir() + "/stdin", "");
    std::string bin = std::string(WORKLOAD_DIR) + "/incremental/inc_writer";
    pid_ = SpawnProgram({bin, writer_->workdir(), "64", "20000"}, writer_->workdir() + "/stdin",
                        writer_->workdir() + "/stdout", writer_->workdir() + "/stderr");
    if (pid_ < 0) return ::testing::AssertionFailure() << "cannot start " << bin;
    Track(pid_, bin);
    auto deadline = std::chrono::steady_clock::now() + 20s;
    while (!Exists(writer_->workdir() + "/ready")) {
      if (!IsAlive(pid_) || std::chrono::steady_clock::now() > deadline) {
        return ::testing::AssertionFailure() << "inc_writer did not get ready";
      }
      std::this_thread::sleep_for(5ms);
    }
    std::this_thread::sleep_for(200ms);  // writing for a while
    return ::testing::AssertionSuccess();
  }

  // The pages the final (frozen) copy saved, from the dump's summary line.
  static long FrozenPages(const std::string& out) {
    std::string line = LineStartingWith(out, "dumped pid");
    size_t at = line.find(" pages (");
    if (at == std::string::npos) return -1;
    size_t start = line.rfind(' ', at - 1);
    return std::atol(line.substr(start + 1, at - start - 1).c_str());
  }

  ::testing::AssertionResult PassesAfterGo() {
    WriteFileAtomic(writer_->workdir() + "/go", "");
    Ending end = WaitGone(pid_, 30s);
    std::string out = ReadFile(writer_->workdir() + "/stdout");
    if (!end.ExitedWith(0) || LastLine(out) != "PASS") {
      return ::testing::AssertionFailure() << "writer " << end.Describe() << ": " << out;
    }
    return ::testing::AssertionSuccess();
  }

  std::unique_ptr<Workload> writer_;
  pid_t pid_ = -1;
};

TEST_F(PreCopyTest, KeepsWritingDuringTheDumpAndEveryPageSurvives) {
  ASSERT_TRUE(StartWriter());
  std::string ckpt = *temp_ / "ckpt";
  CommandResult dump = Cairn({"dump", "--pid", std::to_string(pid_), "--dir", ckpt, "--pre-copy"});
  ASSERT_TRUE(dump.Exited(0)) << dump.Describe();
  EXPECT_TRUE(Matches(dump.out, "pre-copy: [0-9]+ rounds? copied .* while the process ran; downtime [0-9.]+ s"))
      << dump.Describe();
  long frozen = FrozenPages(dump.out);
  EXPECT_GE(frozen, 0) << dump.Describe();
  EXPECT_LT(frozen, 16384 / 4) << "the frozen copy saved most of the 64 MiB: pre-copy did not work " << dump.Describe();
  ASSERT_TRUE(WaitGone(pid_, 10s).gone);
  CommandResult inspect = Inspect(ckpt);
  ASSERT_TRUE(inspect.Exited(0)) << inspect.Describe();
  EXPECT_TRUE(Matches(inspect.out, "pre-copy: [0-9]+ rounds while running")) << inspect.out;
  CommandResult restore = Restore(ckpt, /*detach=*/true);
  ASSERT_TRUE(restore.Exited(0)) << restore.Describe();
  ASSERT_TRUE(PassesAfterGo());
}

TEST_F(PreCopyTest, LeaveRunningThenTrackForAnIncremental) {
  ASSERT_TRUE(StartWriter());
  std::string base = *temp_ / "base", next = *temp_ / "next";
  CommandResult dump = Cairn({"dump", "--pid", std::to_string(pid_), "--dir", base, "--pre-copy", "--leave-running",
                              "--track", "--pre-copy-rate", "256"});
  ASSERT_TRUE(dump.Exited(0)) << dump.Describe();
  ASSERT_TRUE(IsAlive(pid_));
  std::this_thread::sleep_for(100ms);
  CommandResult inc = Cairn({"dump", "--pid", std::to_string(pid_), "--dir", next, "--parent", base});
  ASSERT_TRUE(inc.Exited(0)) << inc.Describe();
  EXPECT_TRUE(Matches(inc.out, "incremental: only pages written since")) << inc.Describe();
  ASSERT_TRUE(WaitGone(pid_, 10s).gone);
  CommandResult restore = Restore(next, /*detach=*/true);
  ASSERT_TRUE(restore.Exited(0)) << restore.Describe();
  ASSERT_TRUE(PassesAfterGo());
}

// (Pre-copy of a tree is tested through the daemon's migrations: tests/daemon/migrate_test.cc.)
TEST_F(PreCopyTest, RefusedWithParent) {
  ASSERT_TRUE(StartWriter());
  CommandResult r =
      Cairn({"dump", "--pid", std::to_string(pid_), "--dir", *temp_ / "x", "--pre-copy", "--parent", "earlier"});
  EXPECT_TRUE(r.FailedCleanly() && Matches(r.err, "pre-copy .* cannot be combined")) << r.Describe();
  EXPECT_FALSE(Exists(*temp_ / "x"));
  EXPECT_TRUE(IsAlive(pid_));
}

}  // namespace
}  // namespace cairn::testing
