// The dump's guardian, against a real child whose tracer dies inside an injected call.
#include "engine/dump/guardian.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "engine/dump/freeze.h"
#include "engine/inject/ptrace.h"
#include "engine/proc/stat.h"
#include "gtest/gtest.h"

namespace cairn::dump {
namespace {

using namespace std::chrono_literals;

uint64_t MaskOf(int sig) { return uint64_t{1} << (sig - 1); }

std::string VdsoBytes(pid_t pid) {
  auto range = inject::VdsoRange(pid);
  if (!range.ok()) return "";
  std::string bytes(range->second - range->first, '\0');
  if (!inject::ReadRemote(pid, range->first, bytes.data(), bytes.size()).ok()) return "";
  return bytes;
}

uint64_t BlockedMask(pid_t pid) {
  auto status = ReadFile(absl::StrCat("/proc/", pid, "/status"));
  size_t at = status.ok() ? status->find("SigBlk:") : std::string::npos;
  return at == std::string::npos ? ~0ULL : std::stoull(status->substr(at + 7), nullptr, 16);
}

class GuardianTest : public ::testing::Test {
 protected:
  void SetUp() override {
    void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    counter_ = new (p) std::atomic<uint64_t>(0);
    void* j = ::mmap(nullptr, sizeof(GuardJournal), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(j, MAP_FAILED);
    journal_ = static_cast<GuardJournal*>(j);  // zero pages, as Guardian::Start makes it
    std::atomic<uint64_t>* counter = counter_;
    child_ = ::fork();
    if (child_ == 0) {
      ::alarm(30);
      sigset_t set;
      sigemptyset(&set);
      sigaddset(&set, SIGUSR2);
      ::sigprocmask(SIG_SETMASK, &set, nullptr);
      for (;;) counter->fetch_add(1, std::memory_order_relaxed);
    }
    ASSERT_TRUE(CounterPasses(0));
  }
  void TearDown() override {
    if (child_ > 0) {
      ::kill(child_, SIGKILL);
      ::waitpid(child_, nullptr, __WALL);
    }
    ::munmap(journal_, sizeof(GuardJournal));
    ::munmap(counter_, 4096);
  }

  bool CounterPasses(uint64_t than) const {
    auto deadline = std::chrono::steady_clock::now() + 5s;
    while (std::chrono::steady_clock::now() < deadline) {
      if (counter_->load() > than) return true;
      std::this_thread::sleep_for(1ms);
    }
    return false;
  }

  // Runs `body` as a "dumper": a process that traces the child and exits (dies) as `body`
  // returns, leaving whatever it did in place.
  void AsDyingDumper(const std::function<void()>& body) {
    pid_t dumper = ::fork();
    if (dumper == 0) {
      body();
      ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(dumper, &status, 0), dumper);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the dumper failed before it died";
  }

  // The guardian's body, once its pipe says the dumper is gone.
  int Guard() {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    ::close(fds[1]);
    int rc = RunGuardian(*journal_, fds[0]);
    ::close(fds[0]);
    return rc;
  }

  std::atomic<uint64_t>* counter_ = nullptr;
  GuardJournal* journal_ = nullptr;
  pid_t child_ = -1;
};

// The worst instant: the thread's registers are an injected call's and its mask blocks
// everything, the scratch area is mapped and the trampoline written. The child must not die
// (no trap is forced), must not run its own code meanwhile, and must come back exactly.
TEST_F(GuardianTest, PutsBackAThreadWhoseTracerDiedInsideAnInjectedCall) {
  auto maps_before = ReadFile(absl::StrCat("/proc/", child_, "/maps"));
  ASSERT_TRUE(maps_before.ok());
  std::string vdso_before = VdsoBytes(child_);
  ASSERT_FALSE(vdso_before.empty());
  AsDyingDumper([&] {
    auto fp = FrozenProcess::Freeze(child_, journal_);
    auto vdso = inject::VdsoRange(child_);
    if (!fp.ok() || !vdso.ok() || !fp->InstallTrampoline({vdso->first, vdso->second, true}).ok()) ::_exit(1);
    inject::Injector inj = fp->injector(child_);
    auto scratch = inject::RemoteScratch::Map(inj, /*shared=*/true);
    if (!scratch.ok()) ::_exit(1);
    journal_->ScratchAt(fp->journal_index(), scratch->addr(), scratch->size());
    // Into a call, as Injector::Guarded enters one, and no further.
    auto regs = inject::GetRegs(child_);
    if (!regs.ok()) ::_exit(1);
    user_regs_struct call = *regs;
    call.rip = fp->trampoline().syscall_insn();
    call.rax = SYS_getpid;
    call.orig_rax = static_cast<uint64_t>(-1);
    if (!inject::SetRegs(child_, call).ok() || !inject::SetSigmask(child_, ~0ULL).ok()) ::_exit(1);
    ::_exit(0);  // dies here, still tracing it
  });
  // Detached by the kernel, the child ran the call and now spins in the trampoline.
  std::this_thread::sleep_for(50ms);
  auto st = proc::ReadStat(child_);
  ASSERT_TRUE(st.ok());
  EXPECT_NE(st->state, 'Z') << "the child died with its tracer";
  uint64_t frozen = counter_->load();
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(counter_->load(), frozen) << "the child ran its own code with the call's registers";

  EXPECT_EQ(Guard(), 0);

  EXPECT_TRUE(CounterPasses(frozen)) << "the child did not carry on";
  EXPECT_EQ(BlockedMask(child_) & ~(MaskOf(SIGKILL) | MaskOf(SIGSTOP)), MaskOf(SIGUSR2)) << "its mask was not put back";
  auto maps_after = ReadFile(absl::StrCat("/proc/", child_, "/maps"));
  ASSERT_TRUE(maps_after.ok());
  EXPECT_EQ(*maps_after, *maps_before) << "the scratch area (or something else) was left";
  EXPECT_EQ(VdsoBytes(child_), vdso_before) << "the trampoline was left in the vDSO";
}

// Frozen and let go by its tracer's death between two calls: the child carries on by
// itself (nothing of it needed putting back), and the guardian only clears the trampoline.
TEST_F(GuardianTest, AThreadFrozenBetweenCallsCarriesOnWhenItsTracerDies) {
  std::string vdso_before = VdsoBytes(child_);
  AsDyingDumper([&] {
    auto fp = FrozenProcess::Freeze(child_, journal_);
    auto vdso = inject::VdsoRange(child_);
    if (!fp.ok() || !vdso.ok() || !fp->InstallTrampoline({vdso->first, vdso->second, true}).ok()) ::_exit(1);
    inject::Injector inj = fp->injector(child_);
    if (!inj.Call("getpid", SYS_getpid).ok()) ::_exit(1);
    ::_exit(0);
  });
  uint64_t now = counter_->load();
  EXPECT_TRUE(CounterPasses(now)) << "the child did not carry on after its tracer died";
  EXPECT_EQ(BlockedMask(child_) & ~(MaskOf(SIGKILL) | MaskOf(SIGSTOP)), MaskOf(SIGUSR2));
  EXPECT_EQ(Guard(), 0);
  EXPECT_EQ(VdsoBytes(child_), vdso_before) << "the trampoline was left in the vDSO";
  EXPECT_TRUE(CounterPasses(counter_->load()));
}

// The network lock a running dump journals is named by its journal while the dump (or its
// guardian) lives, and no longer once its table is gone or the dump is over: `cairn check
// --fix` leaves the lock of a dump in progress (net/claim.h).
TEST(RunningDumps, NameTheirNetworkLocksWhileTheyRun) {
  char tmpl[] = "/tmp/cairn-journals-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = std::string(tmpl) + "/journals";
  ASSERT_EQ(::setenv("CAIRN_JOURNAL_DIR", dir.c_str(), 1), 0);
  absl::StatusOr<std::unique_ptr<Guardian>> g = Guardian::Start();
  ::unsetenv("CAIRN_JOURNAL_DIR");
  ASSERT_TRUE(g.ok()) << g.status();
  using Tables = std::vector<std::string>;
  EXPECT_EQ(NetworkLocksOfRunningDumps(dir).value_or(Tables{"error"}), Tables{});
  (*g)->journal().NetworkLock("cairn_lock_running", 0);
  EXPECT_EQ(NetworkLocksOfRunningDumps(dir).value_or(Tables{"error"}), Tables{"cairn_lock_running"});
  (*g)->journal().LockGone();
  EXPECT_EQ(NetworkLocksOfRunningDumps(dir).value_or(Tables{"error"}), Tables{});
  (*g)->journal().NetworkLock("cairn_lock_running", 0);
  (*g)->journal().SetOutcome(GuardJournal::Outcome::kDone);  // nothing for the guardian to undo
  g->reset();  // the dump is over: its guardian removes the journal
  EXPECT_EQ(NetworkLocksOfRunningDumps(dir).value_or(Tables{"error"}), Tables{});
  std::filesystem::remove_all(tmpl);
}

}  // namespace
}  // namespace cairn::dump
