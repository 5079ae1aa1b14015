#include "engine/inject/injector.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <new>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "engine/inject/batch.h"
#include "engine/inject/stop_loop.h"
#include "engine/inject/ptrace.h"
#include "engine/inject/trampoline.h"
#include "engine/proc/maps.h"
#include "engine/proc/stat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cairn::inject {
namespace {

using ::testing::HasSubstr;

// Exit codes of the pipe-reading child.
constexpr int kReadOk = 0;
constexpr int kReadEintr = 2;
constexpr int kReadError = 3;
constexpr int kReadWrongData = 4;

// A forked child that is killed and reaped when the test ends, however it ends.
class Child {
 public:
  // Runs `body` in a child process; `body` must only use async-signal-safe calls and
  // must not return. The child dies on its own after `lifetime_s` so nothing outlives a
  // crashed test binary.
  explicit Child(const std::function<void()>& body, unsigned lifetime_s = 20) {
    pid_ = ::fork();
    if (pid_ == 0) {
      ::alarm(lifetime_s);
      body();
      ::_exit(100);
    }
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      int status;
      ::waitpid(pid_, &status, __WALL);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  // True (and the wait status in `status`) if the child has already exited.
  bool ExitedNow(int* status) {
    if (::waitpid(pid_, status, __WALL | WNOHANG) != pid_) return false;
    reaped_ = true;
    return true;
  }
  // For a test whose own waitpid (WaitStop) already collected the child.
  void MarkReaped() { reaped_ = true; }
  // Waits for the child to exit; returns the raw wait status.
  int Reap() {
    int status = 0;
    pid_t r;
    do r = ::waitpid(pid_, &status, __WALL);
    while (r < 0 && errno == EINTR);
    reaped_ = r == pid_;
    return status;
  }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
};

// Seizes `pid`, stops it in a PTRACE_EVENT_STOP and blocks its signals, as the engine does
// before injecting. Returns the signal mask it had.
uint64_t StopAndBlockSignals(pid_t pid) {
  absl::Status st = Seize(pid, PTRACE_O_EXITKILL);
  EXPECT_TRUE(st.ok()) << st;
  st = Interrupt(pid);
  EXPECT_TRUE(st.ok()) << st;
  auto stop = WaitStop(pid);
  EXPECT_TRUE(stop.ok()) << stop.status();
  if (!stop.ok()) return 0;
  EXPECT_EQ(stop->kind, StopInfo::Kind::kEventStop);
  EXPECT_EQ(stop->event, PTRACE_EVENT_STOP);
  EXPECT_EQ(stop->signal, SIGTRAP);

  auto old_mask = GetSigmask(pid);
  EXPECT_TRUE(old_mask.ok()) << old_mask.status();
  st = SetSigmask(pid, ~0ULL);
  EXPECT_TRUE(st.ok()) << st;
  auto mask = GetSigmask(pid);
  EXPECT_TRUE(mask.ok()) << mask.status();
  // The kernel never lets SIGKILL or SIGSTOP be blocked.
  const uint64_t unblockable = (1ULL << (SIGKILL - 1)) | (1ULL << (SIGSTOP - 1));
  if (mask.ok()) {
    EXPECT_EQ(*mask, ~unblockable);
  }
  return old_mask.ok() ? *old_mask : 0;
}

// The address of a `syscall` instruction in `pid`'s vDSO.
uint64_t VdsoSyscall(pid_t pid) {
  auto maps = proc::ReadSmaps(pid);
  EXPECT_TRUE(maps.ok()) << maps.status();
  if (!maps.ok()) return 0;
  for (const proc::MapEntry& e : *maps) {
    if (e.path != "[vdso]") continue;
    auto insn = FindSyscallInsn(pid, e.start, e.end);
    EXPECT_TRUE(insn.ok()) << insn.status();
    if (!insn.ok()) return 0;
    EXPECT_GE(*insn, e.start);
    EXPECT_LT(*insn + 1, e.end);
    unsigned char code[2] = {};
    EXPECT_TRUE(ReadRemote(pid, *insn, code, 2).ok());
    EXPECT_EQ(code[0], 0x0f);
    EXPECT_EQ(code[1], 0x05);
    return *insn;
  }
  ADD_FAILURE() << "pid " << pid << " has no [vdso]";
  return 0;
}

void ExpectSameRegs(const user_regs_struct& a, const user_regs_struct& b) {
  EXPECT_EQ(a.rip, b.rip);
  EXPECT_EQ(a.rsp, b.rsp);
  EXPECT_EQ(a.rbp, b.rbp);
  EXPECT_EQ(a.rax, b.rax);
  EXPECT_EQ(a.orig_rax, b.orig_rax);
  EXPECT_EQ(a.rdi, b.rdi);
  EXPECT_EQ(a.rsi, b.rsi);
  EXPECT_EQ(a.rdx, b.rdx);
  EXPECT_EQ(a.r10, b.r10);
  EXPECT_EQ(a.r8, b.r8);
  EXPECT_EQ(a.r9, b.r9);
  EXPECT_EQ(a.rcx, b.rcx);  // clobbered by `syscall`
  EXPECT_EQ(a.r11, b.r11);  // clobbered by `syscall`
  EXPECT_EQ(a.eflags, b.eflags);
  EXPECT_EQ(a.fs_base, b.fs_base);
  EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0) << "some other register differs";
}

// True when the pipe-reading child sits in read(2) on the pipe.
bool BlockedInRead(pid_t pid) {
  auto sc = ReadFile(absl::StrCat("/proc/", pid, "/syscall"));
  if (sc.ok()) return sc->rfind(absl::StrCat(SYS_read, " "), 0) == 0;
  auto st = proc::ReadStat(pid);  // no /proc/PID/syscall: settle for "sleeping"
  return st.ok() && st->state == 'S';
}

class InjectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    counter_ = new (p) std::atomic<uint64_t>(0);
  }
  void TearDown() override {
    spinner_.reset();  // kill the child before its counter page goes away
    ::munmap(counter_, 4096);
  }

  uint64_t Count() const { return counter_->load(); }

  // Waits up to 5 s for the counter to pass `than`.
  bool CounterPasses(uint64_t than) const {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < deadline) {
      if (Count() > than) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
  }

  // Forks a child that spins incrementing the shared counter, stops it, blocks its signals
  // and points `inj_` at a syscall instruction in its vDSO. Check HasFailure() after.
  void StartStoppedSpinner() {
    std::atomic<uint64_t>* counter = counter_;
    spinner_ = std::make_unique<Child>([counter] {
      for (;;) counter->fetch_add(1, std::memory_order_relaxed);
    });
    pid_ = spinner_->pid();
    ASSERT_GT(pid_, 0);
    ASSERT_TRUE(CounterPasses(0)) << "child never ran";
    old_mask_ = StopAndBlockSignals(pid_);
    ASSERT_FALSE(HasFailure());
    const uint64_t insn = VdsoSyscall(pid_);
    ASSERT_FALSE(HasFailure());
    inj_ = std::make_unique<Injector>(pid_, insn);
  }

  std::atomic<uint64_t>* counter_ = nullptr;
  std::unique_ptr<Child> spinner_;
  pid_t pid_ = 0;
  uint64_t old_mask_ = 0;
  std::unique_ptr<Injector> inj_;
};

TEST_F(InjectorTest, StoppedChildDoesNotRun) {
  StartStoppedSpinner();
  ASSERT_FALSE(HasFailure());
  const uint64_t frozen = Count();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(Count(), frozen);
  EXPECT_EQ(inj_->tid(), pid_);
}

TEST_F(InjectorTest, GetpidAnswersWithTheChildsPid) {
  StartStoppedSpinner();
  ASSERT_FALSE(HasFailure());
  auto got_pid = inj_->Call("getpid", SYS_getpid);
  ASSERT_TRUE(got_pid.ok()) << got_pid.status();
  EXPECT_EQ(*got_pid, pid_);
  auto got_ppid = inj_->Raw(SYS_getppid);
  ASSERT_TRUE(got_ppid.ok()) << got_ppid.status();
  EXPECT_EQ(*got_ppid, ::getpid());
}

TEST_F(InjectorTest, FailingSyscallGivesErrno) {
  StartStoppedSpinner();
  ASSERT_FALSE(HasFailure());
  auto raw = inj_->Raw(SYS_close, {12345});
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(*raw, -EBADF);
  auto call = inj_->Call("close fd 12345", SYS_close, 12345);
  ASSERT_FALSE(call.ok());
  EXPECT_EQ(call.status().code(), absl::StatusCode::kInvalidArgument);  // EBADF
  EXPECT_THAT(std::string(call.status().message()), HasSubstr("close fd 12345"));
  EXPECT_THAT(std::string(call.status().message()), HasSubstr(std::to_string(pid_)));
  EXPECT_THAT(std::string(call.status().message()), HasSubstr(std::strerror(EBADF)));
}

TEST_F(InjectorTest, ScratchAreaRoundTrip) {
  StartStoppedSpinner();
  ASSERT_FALSE(HasFailure());
  auto scratch = RemoteScratch::Map(*inj_);
  ASSERT_TRUE(scratch.ok()) << scratch.status();
  EXPECT_NE(scratch->addr(), 0u);
  EXPECT_EQ(scratch->addr() % 4096, 0u);
  EXPECT_EQ(scratch->size(), RemoteScratch::kSize);
  {
    auto maps = proc::ReadSmaps(pid_);
    ASSERT_TRUE(maps.ok()) << maps.status();
    bool found = false;
    for (const proc::MapEntry& e : *maps) {
      if (e.start <= scratch->addr() && scratch->addr() < e.end) {
        found = true;
        EXPECT_EQ(e.prot, static_cast<uint32_t>(PROT_READ | PROT_WRITE));
        EXPECT_FALSE(e.shared);
        EXPECT_GE(e.end - scratch->addr(), RemoteScratch::kSize);
      }
    }
    EXPECT_TRUE(found) << "scratch area is not in the child's maps";
  }

  const char msg[] = "hello from the tracer";
  auto at = scratch->Put(100, msg, sizeof msg);
  ASSERT_TRUE(at.ok()) << at.status();
  EXPECT_EQ(*at, scratch->addr() + 100);
  char back[sizeof msg] = {};
  ASSERT_TRUE(scratch->Get(100, back, sizeof back).ok());
  EXPECT_STREQ(back, msg);
  auto str_at = scratch->PutString(RemoteScratch::kSize - 4, "abc");
  ASSERT_TRUE(str_at.ok()) << str_at.status();
  char z[4] = {'x', 'x', 'x', 'x'};
  ASSERT_TRUE(ReadRemote(pid_, *str_at, z, 4).ok());
  EXPECT_EQ(std::string(z, 4), std::string("abc\0", 4));
  EXPECT_EQ(scratch->PutString(RemoteScratch::kSize - 3, "abc").status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(scratch->Put(RemoteScratch::kSize, msg, 1).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(scratch->Get(RemoteScratch::kSize - 1, back, 2).code(), absl::StatusCode::kOutOfRange);

  // The child's own view of the area: give it a pipe (injected pipe2), have it write(2)
  // the bytes we Put and read(2) them back elsewhere in the scratch area.
  auto fds_at = scratch->Put(0, "\0\0\0\0\0\0\0\0", 8);
  ASSERT_TRUE(fds_at.ok());
  auto piped = inj_->Call("pipe2", SYS_pipe2, *fds_at, O_CLOEXEC);
  ASSERT_TRUE(piped.ok()) << piped.status();
  int child_fds[2] = {-1, -1};
  ASSERT_TRUE(scratch->Get(0, child_fds, sizeof child_fds).ok());
  EXPECT_GE(child_fds[0], 0);
  EXPECT_GE(child_fds[1], 0);
  auto wrote = inj_->Call("write", SYS_write, static_cast<uint64_t>(child_fds[1]), scratch->addr() + 100,
                          sizeof msg);
  ASSERT_TRUE(wrote.ok()) << wrote.status();
  EXPECT_EQ(*wrote, static_cast<long>(sizeof msg));
  char via_child[sizeof msg] = {};
  auto nread = inj_->Call("read", SYS_read, static_cast<uint64_t>(child_fds[0]), scratch->addr() + 1000,
                          sizeof via_child);
  ASSERT_TRUE(nread.ok()) << nread.status();
  EXPECT_EQ(*nread, static_cast<long>(sizeof msg));
  ASSERT_TRUE(scratch->Get(1000, via_child, sizeof via_child).ok());
  EXPECT_STREQ(via_child, msg);
  EXPECT_TRUE(inj_->Call("close", SYS_close, static_cast<uint64_t>(child_fds[0])).ok());
  EXPECT_TRUE(inj_->Call("close", SYS_close, static_cast<uint64_t>(child_fds[1])).ok());

  const uint64_t scratch_addr = scratch->addr();
  ASSERT_TRUE(scratch->Unmap(*inj_).ok());
  EXPECT_TRUE(scratch->Unmap(*inj_).ok()) << "second Unmap is a no-op";
  auto maps = proc::ReadSmaps(pid_);
  ASSERT_TRUE(maps.ok()) << maps.status();
  for (const proc::MapEntry& e : *maps) {
    EXPECT_FALSE(e.start <= scratch_addr && scratch_addr < e.end) << "scratch still mapped";
  }
}

TEST_F(InjectorTest, RegistersAreUnchangedAndChildResumesAfterDetach) {
  StartStoppedSpinner();
  ASSERT_FALSE(HasFailure());
  const uint64_t frozen = Count();
  auto before = GetRegs(pid_);
  ASSERT_TRUE(before.ok()) << before.status();

  ASSERT_TRUE(inj_->Call("getpid", SYS_getpid).ok());
  EXPECT_EQ(*inj_->Raw(SYS_close, {12345}), -EBADF);
  auto scratch = RemoteScratch::Map(*inj_);
  ASSERT_TRUE(scratch.ok()) << scratch.status();
  ASSERT_TRUE(scratch->Unmap(*inj_).ok());

  auto after = GetRegs(pid_);
  ASSERT_TRUE(after.ok()) << after.status();
  ExpectSameRegs(*before, *after);
  EXPECT_EQ(Count(), frozen) << "the child ran during injection";

  ASSERT_TRUE(SetSigmask(pid_, old_mask_).ok());
  ASSERT_TRUE(Detach(pid_).ok());
  EXPECT_TRUE(CounterPasses(frozen + 1000)) << "child did not resume after detach";
  auto st = proc::ReadStat(pid_);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_NE(st->state, 't') << "child still traced-stopped";
  EXPECT_NE(st->state, 'Z');
}

// Runs getpid, getppid, a failing close and prctl(PR_GET_NAME) as one batch and checks
// each answer, the thread's registers afterwards, and that its code page is gone.
void ExpectBatchAnswers(Injector& inj, pid_t pid, CallBatch& batch) {
  auto before = GetRegs(pid);
  ASSERT_TRUE(before.ok()) << before.status();
  auto scratch = RemoteScratch::Map(inj);
  ASSERT_TRUE(scratch.ok()) << scratch.status();
  std::vector<BatchedCall> calls = {
      {SYS_getpid, {}},
      {SYS_getppid, {}},
      {SYS_close, {12345}},
      {SYS_prctl, {PR_GET_NAME, scratch->addr()}},
  };
  // Enough rows that a loop stopping early or running over would show.
  for (int i = 0; i < 100; ++i) calls.push_back({SYS_getpid, {}});
  ASSERT_TRUE(batch.Run(inj, *scratch, 4096, calls).ok());
  EXPECT_EQ(calls[0].result, pid);
  EXPECT_EQ(calls[1].result, ::getpid());
  EXPECT_EQ(calls[2].result, -EBADF);
  EXPECT_EQ(calls[3].result, 0);
  for (size_t i = 4; i < calls.size(); ++i) EXPECT_EQ(calls[i].result, pid) << "row " << i;
  char name[16] = {};
  ASSERT_TRUE(scratch->Get(0, name, sizeof name).ok());
  auto comm = ReadFile(absl::StrCat("/proc/", pid, "/comm"));
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_EQ(std::string(name) + "\n", *comm);

  ASSERT_TRUE(scratch->Unmap(inj).ok());
  auto after = GetRegs(pid);
  ASSERT_TRUE(after.ok()) << after.status();
  ExpectSameRegs(*before, *after);
}

// The [vdso] area of `pid` and its bytes.
std::pair<uint64_t, std::string> ReadVdso(pid_t pid) {
  auto maps = proc::ReadMaps(pid);
  if (!maps.ok()) return {};
  for (const proc::MapEntry& e : *maps) {
    if (e.path != "[vdso]") continue;
    std::string bytes(e.end - e.start, '\0');
    if (!ReadRemote(pid, e.start, bytes.data(), bytes.size()).ok()) return {};
    return {e.start, bytes};
  }
  return {};
}

TEST_F(InjectorTest, CallBatchRunsEveryCallInOneGoAndLeavesNoTrace) {
  StartStoppedSpinner();
  ASSERT_FALSE(HasFailure());
  const uint64_t frozen = Count();
  auto maps_before = proc::ReadMaps(pid_);
  ASSERT_TRUE(maps_before.ok()) << maps_before.status();
  auto [vdso, vdso_before] = ReadVdso(pid_);
  ASSERT_NE(vdso, 0u);
  auto tramp = Trampoline::Install(pid_, {vdso, vdso + vdso_before.size(), true});
  ASSERT_TRUE(tramp.ok()) << tramp.status();
  EXPECT_NE(ReadVdso(pid_).second, vdso_before) << "the trampoline is not in the vDSO";
  EXPECT_EQ(ReadVdso(::getpid()).second.substr(tramp->addr() - vdso, Trampoline::kSize),
            std::string(Trampoline::kSize, '\0'))
      << "the trampoline reached this process's vDSO: the page was not copied for the child alone";
  CallBatch batch(*tramp);
  ASSERT_TRUE(batch.batched());
  ExpectBatchAnswers(*inj_, pid_, batch);
  EXPECT_EQ(Count(), frozen) << "the child ran its own code during the batch";
  ASSERT_TRUE(tramp->Remove().ok());
  EXPECT_EQ(ReadVdso(pid_).second, vdso_before) << "the vDSO's tail was not put back";
  auto maps_after = proc::ReadMaps(pid_);
  ASSERT_TRUE(maps_after.ok()) << maps_after.status();
  EXPECT_EQ(maps_after->size(), maps_before->size()) << "the batch left an area behind";

  ASSERT_TRUE(SetSigmask(pid_, old_mask_).ok());
  ASSERT_TRUE(Detach(pid_).ok());
  EXPECT_TRUE(CounterPasses(frozen + 1000)) << "child did not resume after the batch";
}

// The restore's loop of calls (stop_loop.h), in an executable page of the child: every call
// answers, in chunks when the table outgrows the scratch area, and the thread's registers and
// mask are as they were; the child runs on after.
TEST_F(InjectorTest, StopLoopRunsEveryCallAndPutsTheThreadBack) {
  StartStoppedSpinner();
  ASSERT_FALSE(HasFailure());
  const uint64_t frozen = Count();
  constexpr uint64_t kArea = 4096 + RemoteScratch::kSize;
  auto area = inj_->Call("mmap", SYS_mmap, 0, kArea, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS,
                         static_cast<uint64_t>(-1), 0);
  ASSERT_TRUE(area.ok()) << area.status();
  uint64_t loop = static_cast<uint64_t>(*area);
  ASSERT_TRUE(WriteRemote(pid_, loop, kStopLoop, sizeof kStopLoop).ok());
  RemoteScratch scratch(pid_, loop + 4096, RemoteScratch::kSize, /*owned=*/false);
  auto regs_before = GetRegs(pid_);
  auto mask_before = GetSigmask(pid_);
  ASSERT_TRUE(regs_before.ok() && mask_before.ok());
  std::vector<BatchedCall> calls(1500);  // more than one table's worth (1024 rows)
  for (size_t i = 0; i < calls.size(); ++i) calls[i].nr = i % 2 == 0 ? SYS_getpid : SYS_getppid;
  ASSERT_TRUE(RunStopLoop(*inj_, scratch, loop, 0, calls).ok());
  for (size_t i = 0; i < calls.size(); ++i) {
    ASSERT_EQ(calls[i].result, i % 2 == 0 ? pid_ : ::getpid()) << "call " << i;
  }
  auto regs_after = GetRegs(pid_);
  auto mask_after = GetSigmask(pid_);
  ASSERT_TRUE(regs_after.ok() && mask_after.ok());
  EXPECT_EQ(regs_after->rip, regs_before->rip);
  EXPECT_EQ(regs_after->rsp, regs_before->rsp);
  EXPECT_EQ(regs_after->r12, regs_before->r12);
  EXPECT_EQ(regs_after->r13, regs_before->r13);
  EXPECT_EQ(*mask_after, *mask_before);
  EXPECT_EQ(Count(), frozen) << "the child ran its own code during the loop";
  ASSERT_TRUE(inj_->Call("munmap", SYS_munmap, loop, kArea).ok());
  ASSERT_TRUE(SetSigmask(pid_, old_mask_).ok());
  ASSERT_TRUE(Detach(pid_).ok());
  EXPECT_TRUE(CounterPasses(frozen + 1000)) << "child did not resume after the loop";
}

// A guarded call (syscall stops at the trampoline) answers, leaves the registers and
// the thread's own mask as they were, and never forces a trap: a process that ignores
// SIGTRAP still does afterwards (a forced trap resets an ignored signal to SIG_DFL).
TEST_F(InjectorTest, GuardedCallKeepsRegistersMaskAndSigtrapAction) {
  Child child([] {
    ::signal(SIGTRAP, SIG_IGN);
    for (;;) ::pause();
  });
  pid_t pid = child.pid();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(Seize(pid, PTRACE_O_TRACESYSGOOD).ok());
  ASSERT_TRUE(Interrupt(pid).ok());
  auto stop = WaitStop(pid);
  ASSERT_TRUE(stop.ok()) << stop.status();
  auto mask = GetSigmask(pid);
  ASSERT_TRUE(mask.ok());
  auto before = GetRegs(pid);
  ASSERT_TRUE(before.ok());
  auto [vdso, bytes] = ReadVdso(pid);
  auto tramp = Trampoline::Install(pid, {vdso, vdso + bytes.size(), true});
  ASSERT_TRUE(tramp.ok()) << tramp.status();
  Injector inj(pid, tramp->syscall_insn(), Injector::Drive::kGuarded);
  for (int i = 0; i < 3; ++i) {
    auto got = inj.Call("getpid", SYS_getpid);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, pid);
  }
  auto after = GetRegs(pid);
  ASSERT_TRUE(after.ok());
  ExpectSameRegs(*before, *after);
  auto mask_after = GetSigmask(pid);
  ASSERT_TRUE(mask_after.ok());
  EXPECT_EQ(*mask_after, *mask) << "the thread's mask was left blocked";
  ASSERT_TRUE(tramp->Remove().ok());
  ASSERT_TRUE(Detach(pid).ok());
  auto status = proc::ReadStatus(pid);
  ASSERT_TRUE(status.ok());
  EXPECT_TRUE(status->sig_ignored & (1ULL << (SIGTRAP - 1))) << "SIGTRAP is no longer ignored";
}

TEST_F(InjectorTest, CallBatchOneByOneGivesTheSameAnswers) {
  StartStoppedSpinner();
  ASSERT_FALSE(HasFailure());
  CallBatch batch = CallBatch::OneByOne();
  EXPECT_FALSE(batch.batched());
  ExpectBatchAnswers(*inj_, pid_, batch);
}

TEST_F(InjectorTest, RemoteMemoryReadWrite) {
  // A private page, read-only in the child: process_vm_writev cannot write it, so
  // WriteRemote must fall back to /proc/PID/mem.
  auto* ro = static_cast<char*>(
      ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(ro, MAP_FAILED);
  std::strcpy(ro, "original");
  ASSERT_EQ(::mprotect(ro, 4096, PROT_READ), 0);
  char rw[64] = "parent data";

  Child child([] {
    for (;;) ::pause();
  });
  ASSERT_GT(child.pid(), 0);
  StopAndBlockSignals(child.pid());
  ASSERT_FALSE(HasFailure());

  char buf[64] = {};
  ASSERT_TRUE(ReadRemote(child.pid(), reinterpret_cast<uint64_t>(rw), buf, sizeof rw).ok());
  EXPECT_STREQ(buf, "parent data");
  const char news[] = "child data";
  ASSERT_TRUE(WriteRemote(child.pid(), reinterpret_cast<uint64_t>(rw), news, sizeof news).ok());
  ASSERT_TRUE(ReadRemote(child.pid(), reinterpret_cast<uint64_t>(rw), buf, sizeof news).ok());
  EXPECT_STREQ(buf, "child data");
  EXPECT_STREQ(rw, "parent data") << "copy-on-write: the parent keeps its own page";

  absl::Status w = WriteRemote(child.pid(), reinterpret_cast<uint64_t>(ro), "patched", 8);
  ASSERT_TRUE(w.ok()) << w;
  ASSERT_TRUE(ReadRemote(child.pid(), reinterpret_cast<uint64_t>(ro), buf, 8).ok());
  EXPECT_STREQ(buf, "patched");
  EXPECT_STREQ(ro, "original");

  // Unmapped memory is an error, not a crash or silent success.
  EXPECT_FALSE(ReadRemote(child.pid(), 8, buf, 8).ok());
  EXPECT_FALSE(WriteRemote(child.pid(), 8, buf, 8).ok());
  ::munmap(ro, 4096);
}

TEST_F(InjectorTest, BlockedReadRestartsAfterInjection) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  Child child([p] {
    ::close(p[1]);
    char buf[8] = {};
    ssize_t n = ::read(p[0], buf, 5);
    if (n < 0) ::_exit(errno == EINTR ? kReadEintr : kReadError);
    ::_exit(n == 5 && std::memcmp(buf, "ping!", 5) == 0 ? kReadOk : kReadWrongData);
  });
  ASSERT_GT(child.pid(), 0);
  ::close(p[0]);
  const pid_t pid = child.pid();

  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!BlockedInRead(pid) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(BlockedInRead(pid)) << "child never blocked in read()";

  const uint64_t old_mask = StopAndBlockSignals(pid);
  ASSERT_FALSE(HasFailure());
  auto before = GetRegs(pid);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(before->orig_rax, static_cast<uint64_t>(SYS_read)) << "interrupted inside read()";

  Injector inj(pid, VdsoSyscall(pid));
  ASSERT_FALSE(HasFailure());
  auto got = inj.Call("getpid", SYS_getpid);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, pid);
  auto scratch = RemoteScratch::Map(inj);
  ASSERT_TRUE(scratch.ok()) << scratch.status();
  ASSERT_TRUE(scratch->Unmap(inj).ok());

  auto after = GetRegs(pid);
  ASSERT_TRUE(after.ok()) << after.status();
  ExpectSameRegs(*before, *after);

  ASSERT_TRUE(SetSigmask(pid, old_mask).ok());
  ASSERT_TRUE(Detach(pid).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  int status = 0;
  ASSERT_FALSE(child.ExitedNow(&status)) << "child did not wait for data after detach: status " << status;
  // Keep a broken child from killing the test with SIGPIPE; a short write then shows as such.
  struct sigaction ign {}, old_pipe {};
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ign, &old_pipe);
  ssize_t wrote = ::write(p[1], "ping!", 5);
  ::sigaction(SIGPIPE, &old_pipe, nullptr);
  ::close(p[1]);
  EXPECT_EQ(wrote, 5);
  status = child.Reap();
  ASSERT_TRUE(WIFEXITED(status)) << "child died: status " << status;
  EXPECT_EQ(WEXITSTATUS(status), kReadOk)
      << "2: read failed with EINTR, 3: other error, 4: wrong data";
}

TEST_F(InjectorTest, ExitedChildIsReported) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  Child child([p] {
    char c;
    (void)::read(p[0], &c, 1);  // wait until the test has seized us
    ::_exit(7);
  });
  ASSERT_GT(child.pid(), 0);
  ::close(p[0]);
  ASSERT_TRUE(Seize(child.pid(), 0).ok());
  ASSERT_EQ(::write(p[1], "x", 1), 1);
  ::close(p[1]);
  auto stop = WaitStop(child.pid());
  ASSERT_TRUE(stop.ok()) << stop.status();
  child.MarkReaped();
  EXPECT_EQ(stop->kind, StopInfo::Kind::kExited);
  EXPECT_EQ(stop->signal, 7);
}

TEST_F(InjectorTest, KilledChildIsReportedAndPtraceFailsAfterwards) {
  Child child([] {
    for (;;) ::pause();
  });
  ASSERT_GT(child.pid(), 0);
  StopAndBlockSignals(child.pid());
  ASSERT_FALSE(HasFailure());
  ASSERT_EQ(::kill(child.pid(), SIGKILL), 0);
  auto stop = WaitStop(child.pid());
  ASSERT_TRUE(stop.ok()) << stop.status();
  EXPECT_EQ(stop->kind, StopInfo::Kind::kKilled);
  EXPECT_EQ(stop->signal, SIGKILL);
  child.MarkReaped();
  auto regs = GetRegs(child.pid());
  ASSERT_FALSE(regs.ok());
  EXPECT_EQ(regs.status().code(), absl::StatusCode::kNotFound);  // ESRCH
}

// A second thread for a Child: it waits forever.
int IdleThread(void*) {
  for (;;) ::pause();
}

// A process killed while its leader runs a call of ours and its other thread stands in our
// stop: the kernel reports the leader's death only once the other thread's is collected, which
// no one asked for — WaitStop must still return (its watchdog collects it) instead of waiting
// forever.
TEST_F(InjectorTest, WaitForALeaderWhoseProcessIsKilledReturns) {
  Child child([] {
    static char stack[64 * 1024];
    ::clone(IdleThread, stack + sizeof stack,
            CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM, nullptr);
    for (;;) ::pause();
  });
  ASSERT_GT(child.pid(), 0);
  pid_t other = 0;
  for (int i = 0; i < 200 && other == 0; ++i) {
    auto list = proc::ListTasks(child.pid());
    if (list.ok() && list->size() == 2) other = (*list)[0] == child.pid() ? (*list)[1] : (*list)[0];
    if (other == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_GT(other, 0) << "the child's second thread did not start";
  StopAndBlockSignals(child.pid());
  ASSERT_TRUE(Seize(other, 0).ok());
  ASSERT_TRUE(Interrupt(other).ok());
  ASSERT_TRUE(WaitStop(other).ok());
  ASSERT_FALSE(HasFailure());

  ASSERT_TRUE(Cont(child.pid()).ok());  // the leader runs (as it would run a call of ours)
  ASSERT_EQ(::kill(child.pid(), SIGKILL), 0);
  std::promise<absl::StatusOr<StopInfo>> done;
  std::future<absl::StatusOr<StopInfo>> result = done.get_future();
  std::thread waiter([&] { done.set_value(WaitStop(child.pid())); });
  bool returned = result.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  if (!returned) {
    int status;
    ::waitpid(other, &status, __WALL);  // what the watchdog should have done: let the waiter go
  }
  waiter.join();
  ASSERT_TRUE(returned) << "WaitStop on the killed leader did not return";
  auto stop = result.get();
  ASSERT_TRUE(stop.ok()) << stop.status();
  EXPECT_EQ(stop->kind, StopInfo::Kind::kKilled);
  child.MarkReaped();
}

TEST(FindSyscallInsnTest, AreaWithoutSyscallIsNotFound) {
  // Our own data: a buffer with no 0f 05 pair in it.
  static char data[256];
  std::memset(data, 0x90, sizeof data);
  data[sizeof data - 1] = 0x0f;  // a lone 0f at the very end must not match
  auto insn = FindSyscallInsn(::getpid(), reinterpret_cast<uint64_t>(data),
                              reinterpret_cast<uint64_t>(data) + sizeof data);
  ASSERT_FALSE(insn.ok());
  EXPECT_EQ(insn.status().code(), absl::StatusCode::kNotFound);

  data[17] = 0x0f;
  data[18] = 0x05;
  insn = FindSyscallInsn(::getpid(), reinterpret_cast<uint64_t>(data),
                         reinterpret_cast<uint64_t>(data) + sizeof data);
  ASSERT_TRUE(insn.ok()) << insn.status();
  EXPECT_EQ(*insn, reinterpret_cast<uint64_t>(data) + 17);
}

}  // namespace
}  // namespace cairn::inject
