// proc/cpu_share_boost.h: the cpu cgroup of the given processes (a dump's killed ones, a
// container's restorer) gets the most CPU share for a moment — only a cgroup that holds nothing
// else — and its own share back after. (Its effect is measured in bench/container_runc.sh:
// docs/performance.md.)

#include "engine/proc/cpu_share_boost.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "harness.h"

namespace cairn::testing {
namespace {

namespace fs = std::filesystem;

constexpr char kCpu[] = "/sys/fs/cgroup/cpu";

class CpuShareBoostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(std::string(kCpu) + "/cpu.shares")) GTEST_SKIP() << "no cgroup v1 cpu hierarchy at " << kCpu;
    dir_ = std::string(kCpu) + "/cairn-share-boost-" + std::to_string(::getpid());
    ASSERT_TRUE(fs::create_directory(dir_));
    Write(dir_ + "/cpu.shares", "512");
  }
  void TearDown() override {
    for (pid_t p : children_) {
      ::kill(p, SIGKILL);
      ::waitpid(p, nullptr, 0);
    }
    if (!dir_.empty()) ::rmdir(dir_.c_str());
  }
  static void Write(const std::string& path, const std::string& value) { std::ofstream(path) << value; }
  static std::string Shares(const std::string& dir) {
    std::string s = ReadFile(dir + "/cpu.shares");
    while (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  // A sleeping child, in the test's cgroup if `inside`.
  pid_t Child(bool inside) {
    pid_t p = ::fork();
    if (p == 0) {
      for (;;) ::pause();
    }
    children_.push_back(p);
    if (inside) Write(dir_ + "/cgroup.procs", std::to_string(p));
    return p;
  }

  std::string dir_;
  std::vector<pid_t> children_;
};

TEST_F(CpuShareBoostTest, ACgroupOfOnlyTheKilledGetsTheMostShareThenItsOwnBack) {
  pid_t a = Child(true), b = Child(true);
  {
    proc::CpuShareBoost boost({a, b});
    EXPECT_EQ(Shares(dir_), "262144");
  }
  EXPECT_EQ(Shares(dir_), "512");
}

TEST_F(CpuShareBoostTest, ACgroupHoldingAnythingElseIsLeftAlone) {
  pid_t a = Child(true);
  Child(true);  // not among the killed
  pid_t outside = Child(false);
  // The cpu cgroup the outside child is in (the test's own: the root, or a session's).
  std::string theirs = kCpu;
  std::istringstream lines(ReadFile("/proc/" + std::to_string(outside) + "/cgroup"));
  for (std::string line; std::getline(lines, line);) {
    size_t at = line.find(":cpu,cpuacct:") != std::string::npos ? line.find(":cpu,cpuacct:") + 13
                : line.find(":cpu:") != std::string::npos       ? line.find(":cpu:") + 5
                                                                : std::string::npos;
    if (at != std::string::npos && line.substr(at) != "/") theirs += line.substr(at);
  }
  std::string theirs_before = Shares(theirs);
  ASSERT_FALSE(theirs_before.empty()) << theirs;
  {
    proc::CpuShareBoost boost({a, outside});
    EXPECT_EQ(Shares(dir_), "512");
    EXPECT_EQ(Shares(theirs), theirs_before) << "a cgroup holding others (" << theirs << ") is never raised";
  }
  EXPECT_EQ(Shares(dir_), "512");
}

// A dump killed while its processes die with their cgroup's share raised: its guardian finishes
// the kill and gives the share its value back (the journal has it), so no cgroup keeps the most
// CPU share for good.
TEST_F(CpuShareBoostTest, AShareRaisedByADumpKilledMeanwhileIsPutBackByItsGuardian) {
  // (Its stdio /dev/null: the test's pipes would be refused by the dump.)
  pid_t target = SpawnProgram({"/bin/sleep", "1000"}, "/dev/null", "/dev/null", "/dev/null");
  ASSERT_GT(target, 0);
  children_.push_back(target);
  Write(dir_ + "/cgroup.procs", std::to_string(target));
  std::string dir = "/tmp/cairn-share-boost-ckpt-" + std::to_string(::getpid());
  std::string err = dir + ".err";
  pid_t dump = SpawnProgram({CairnBinary(), "dump", "--pid", std::to_string(target), "--dir", dir}, "/dev/null",
                            "/dev/null", err, {"CAIRN_FAULT_PAUSE=killing"});
  ASSERT_GT(dump, 0);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (ReadFile(err).find("fault point killing") == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_NE(ReadFile(err).find("fault point killing"), std::string::npos) << ReadFile(err);
  EXPECT_EQ(Shares(dir_), "262144") << "raised while its processes die";
  ::kill(dump, SIGKILL);
  ::waitpid(dump, nullptr, 0);
  deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (Shares(dir_) != "512" && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(Shares(dir_), "512") << "the guardian gives the share back: " << ReadFile(err);
  EXPECT_NE(ReadFile(err).find("its processes were killed"), std::string::npos) << ReadFile(err);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::remove(err, ec);
}

}  // namespace
}  // namespace cairn::testing
