// Issue 22 on one machine: what a checkpoint records of its machine, the check a restore makes
// before it touches anything (CPU features, a baseline's, XSAVE components, kernel features,
// a thread inside a vDSO that must be redirected), and the vDSO redirection itself, forced
// here with CAIRN_TEST_VDSO_PROXY=1 (the guest-machine tests, tests/machines, meet a really
// different vDSO). A machine that lacks a feature is simulated by adding one to the image's
// record (its checksum recomputed; restored with --trust-unsigned, since the seal would refuse
// any change).
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>

#include "engine/image/format.h"
#include "engine/machine/cpu.h"
#include "harness.h"
#include "image.pb.h"

namespace cairn::testing {
namespace {

class MachineTest : public CairnTest {
 protected:
  static image::Checkpoint ReadMeta(const std::string& dir) {
    std::string raw = ReadFile(dir + "/" + image::kMetaFile);
    image::Checkpoint meta;
    if (raw.size() > sizeof(image::FileHeader)) meta.ParseFromString(raw.substr(sizeof(image::FileHeader)));
    return meta;
  }

  static void EditMeta(const std::string& dir, const std::function<void(image::Checkpoint&)>& edit) {
    image::Checkpoint meta = ReadMeta(dir);
    edit(meta);
    std::string payload = meta.SerializeAsString();
    image::FileHeader h =
        image::MakeHeader(image::kMetaMagic, payload.size(), image::Checksum(payload.data(), payload.size()));
    WriteFile(dir + "/" + image::kMetaFile, std::string(reinterpret_cast<const char*>(&h), sizeof h) + payload);
  }

  CommandResult RestoreUnsigned(const std::string& dir, const std::vector<std::string>& env = {}) {
    return Cairn({"restore", "--verify", "--dir", dir, "--detach", "--trust-unsigned"}, WithEnv(env));
  }

  // A workload dumped (killed) into DIR/ckpt; what it had written by then in out_/err_.
  ::testing::AssertionResult Dumped(Workload& w, std::string* ckpt) {
    if (auto r = StartReady(w); !r) return r;
    out_ = w.Stdout();
    err_ = w.Stderr();
    *ckpt = w.workdir() + "/ckpt";
    CommandResult d = Dump(w.pid(), *ckpt);
    if (!d.Exited(0)) return ::testing::AssertionFailure() << d.Describe();
    if (!WaitGone(w.pid(), 10s).gone) return ::testing::AssertionFailure() << "still running after the dump";
    return ::testing::AssertionSuccess();
  }

  static std::string VdsoLine(pid_t pid) {
    std::string maps = ReadFile("/proc/" + std::to_string(pid) + "/maps");
    for (size_t at = 0; at < maps.size();) {
      size_t end = maps.find('\n', at);
      std::string line = maps.substr(at, end - at);
      if (line.find("[vdso]") != std::string::npos) return line;
      at = end == std::string::npos ? maps.size() : end + 1;
    }
    return "";
  }

  std::string out_, err_;
};

TEST_F(MachineTest, TheCheckpointRecordsItsMachine) {
  Workload w = MakeWorkload("wl_threads");
  std::string ckpt;
  ASSERT_TRUE(Dumped(w, &ckpt));
  image::Checkpoint meta = ReadMeta(ckpt);
  ASSERT_TRUE(meta.has_machine());
  const image::Machine& m = meta.machine();
  const machine::Cpu& cpu = machine::ThisCpu();
  EXPECT_EQ(std::set<std::string>(m.cpu_features().begin(), m.cpu_features().end()), cpu.features);
  EXPECT_EQ(static_cast<int>(m.cpu_level()), cpu.level);
  EXPECT_EQ(m.xcr0(), cpu.xcr0);
  EXPECT_EQ(m.xsave_size(), cpu.xsave_size);
  EXPECT_EQ(m.xsave_components_size(), static_cast<int>(cpu.components.size()));
  utsname uts{};
  ::uname(&uts);
  EXPECT_EQ(m.kernel_release(), uts.release);
  EXPECT_EQ(m.cpu_baseline(), 0u);
  ASSERT_FALSE(m.vdso().empty());
  EXPECT_EQ(std::memcmp(m.vdso().data(), "\177ELF", 4), 0);
  EXPECT_EQ(image::Checksum(m.vdso().data(), m.vdso().size()), m.vdso_xxh3());
  EXPECT_EQ(meta.process().vdso_xxh3(), m.vdso_xxh3());
  for (const image::Thread& t : meta.process().threads()) EXPECT_GE(t.xstate().size(), 512u);
  // The XSAVE components it may use: those of every process here (it asked for no AMX).
  uint64_t perm = 0;
  ASSERT_EQ(::syscall(SYS_arch_prctl, 0x1022 /* ARCH_GET_XCOMP_PERM */, &perm), 0);
  EXPECT_EQ(meta.process().xcomp_perm(), perm);
  CommandResult r = Restore(ckpt);
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  w.Go();
  EXPECT_TRUE(FinishedWithPass(w, out_, err_, "restored workload"));
}

// A CPU feature this machine lacks: refused up front, naming it and the way out; nothing runs.
// With the job's baseline recorded, only the baseline's features count: the same image restores.
TEST_F(MachineTest, AMissingCpuFeatureIsRefusedUnlessTheJobKeptToABaseline) {
  Workload w = MakeWorkload("wl_threads");
  std::string ckpt;
  ASSERT_TRUE(Dumped(w, &ckpt));
  EditMeta(ckpt, [](image::Checkpoint& m) {
    m.mutable_machine()->add_cpu_features("avx1024");
    m.mutable_machine()->set_cpu_model("a future CPU");
  });
  CommandResult refused = RestoreUnsigned(ckpt);
  EXPECT_TRUE(refused.FailedCleanly()) << refused.Describe();
  EXPECT_TRUE(Matches(refused.err, "refused \\(nothing was restored\\)")) << refused.err;
  EXPECT_TRUE(Matches(refused.err, "a future CPU")) << refused.err;
  EXPECT_TRUE(Matches(refused.err, "lacks avx1024")) << refused.err;
  EXPECT_TRUE(Matches(refused.err, "SIGILL")) << refused.err;
  EXPECT_TRUE(Matches(refused.err, "--cpu-baseline x86-64-v")) << refused.err;
  EXPECT_FALSE(IsAlive(w.pid())) << "a refused restore left the process running";

  EditMeta(ckpt, [](image::Checkpoint& m) { m.mutable_machine()->set_cpu_baseline(2); });
  CommandResult r = RestoreUnsigned(ckpt);
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  w.Go();
  EXPECT_TRUE(FinishedWithPass(w, out_, err_, "restored workload"));
}

// XSAVE state a thread holds that this CPU lacks (component 8, which no x86 CPU enables for
// user code), and a kernel feature this kernel lacks: each named, nothing runs.
TEST_F(MachineTest, RegisterStateAndKernelFeaturesThisMachineLacksAreNamed) {
  Workload w = MakeWorkload("wl_threads");
  std::string ckpt;
  ASSERT_TRUE(Dumped(w, &ckpt));
  int tid = 0;
  EditMeta(ckpt, [&](image::Checkpoint& m) {
    image::Thread* t = m.mutable_process()->mutable_threads(m.process().threads_size() - 1);
    tid = t->tid();
    std::string x = t->xstate();
    ASSERT_GE(x.size(), 576u);
    x[513] |= 1;  // XSTATE_BV bit 8
    t->set_xstate(x);
    m.mutable_machine()->add_kernel_needs("time-travel");
  });
  CommandResult refused = RestoreUnsigned(ckpt);
  EXPECT_TRUE(refused.FailedCleanly()) << refused.Describe();
  EXPECT_TRUE(Matches(refused.err, "thread " + std::to_string(tid) + " of pid [0-9]+ holds XSAVE component 8"))
      << refused.err;
  EXPECT_TRUE(Matches(refused.err, "kernel feature 'time-travel'")) << refused.err;
  EXPECT_FALSE(IsAlive(w.pid()));
}

// The vDSO redirection on one machine: the restored processes' clocks (wl_vdso checks them
// against system calls, through the proxy glibc's pointers lead to) and every thread work;
// --verify accepts the proxy; the kernel's [vdso] is somewhere else than before.
TEST_F(MachineTest, ProcessesRunThroughAProxyOfTheirOldVdso) {
  for (const char* name : {"wl_vdso", "wl_threads"}) {
    SCOPED_TRACE(name);
    Workload w = MakeWorkload(name, name);
    ASSERT_TRUE(StartReady(w));
    std::string before = VdsoLine(w.pid());
    std::string out_before = w.Stdout(), err_before = w.Stderr();
    std::string ckpt = w.workdir() + "/ckpt";
    CommandResult d = Dump(w.pid(), ckpt);
    ASSERT_TRUE(d.Exited(0)) << d.Describe();
    ASSERT_TRUE(WaitGone(w.pid(), 10s).gone);
    CommandResult r = Cairn({"restore", "--verify", "--dir", ckpt, "--detach"}, WithEnv({"CAIRN_TEST_VDSO_PROXY=1"}));
    ASSERT_TRUE(r.Exited(0)) << r.Describe();
    std::string after = VdsoLine(w.pid());
    ASSERT_FALSE(after.empty());
    EXPECT_NE(after.substr(0, after.find(' ')), before.substr(0, before.find(' ')))
        << "the kernel's [vdso] did not move: no proxy was made\nbefore: " << before << "\nafter: " << after;
    w.Go();
    EXPECT_TRUE(FinishedWithPass(w, out_before, err_before, "restored workload"));
  }
}

// A process that asked for AMX may use it at any time: on a CPU without AMX it is refused up
// front, naming it. (On an AMX machine the restore asks for the permission again; not run here.)
TEST_F(MachineTest, AProcessThatAskedForAmxIsRefusedWhereThereIsNone) {
  if (machine::ThisCpu().xcr0 >> 18 & 1) GTEST_SKIP() << "this CPU has AMX";
  Workload w = MakeWorkload("wl_threads");
  std::string ckpt;
  ASSERT_TRUE(Dumped(w, &ckpt));
  EditMeta(ckpt, [](image::Checkpoint& m) { m.mutable_process()->set_xcomp_perm(m.process().xcomp_perm() | 1ULL << 18); });
  CommandResult refused = RestoreUnsigned(ckpt);
  EXPECT_TRUE(refused.FailedCleanly()) << refused.Describe();
  EXPECT_TRUE(Matches(refused.err, "refused \\(nothing was restored\\)")) << refused.err;
  EXPECT_TRUE(Matches(refused.err, "asked for AMX")) << refused.err;
  EXPECT_FALSE(IsAlive(w.pid()));
}

// The clocks. A process that used the machine's clocks keeps them on the same boot (no time
// namespace of its own). Restored on another boot it gets a time namespace whose monotonic and
// boot-time clocks go on from where they were. The other machine here: a process whose clocks
// read one day ahead of this machine's (started in a time namespace offset by a day), recorded as
// one that used its machine's clocks on another boot — a machine up one day longer. Restored
// with the machine's clocks it would see them go back a day (wl_vdso checks they do not).
TEST_F(MachineTest, AProcessRestoredOnAnotherBootHasItsClocksContinued) {
  auto time_ns = [](pid_t pid) {
    std::error_code ec;
    auto link = std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/ns/time", ec);
    return ec ? "(none: " + ec.message() + ")" : link.string();
  };
  Workload same = MakeWorkload("wl_threads");
  std::string ckpt;
  ASSERT_TRUE(Dumped(same, &ckpt));
  image::Checkpoint meta = ReadMeta(ckpt);
  ASSERT_TRUE(meta.has_time_ns());
  EXPECT_TRUE(meta.time_ns().machine_clocks());
  EXPECT_EQ(meta.time_ns().boot_id() + "\n", ReadFile("/proc/sys/kernel/random/boot_id"));
  CommandResult r = Restore(ckpt);
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  EXPECT_EQ(time_ns(same.pid()), time_ns(::getpid())) << "the same boot: the machine's clocks\n" << same.Describe();
  same.Go();
  EXPECT_TRUE(FinishedWithPass(same, out_, err_, "restored workload"));

  constexpr int64_t kDay = 86400LL * 1000000000;
  Workload moved = MakeWorkload("wl_vdso", "work-moved");
  moved.ExecThrough({"/usr/bin/unshare", "--time", "--monotonic", "86400", "--boottime", "86400"});
  ASSERT_TRUE(Dumped(moved, &ckpt));
  meta = ReadMeta(ckpt);
  EXPECT_FALSE(meta.time_ns().machine_clocks());
  EXPECT_EQ(meta.time_ns().monotonic_offset_ns(), kDay);
  EditMeta(ckpt, [&](image::Checkpoint& m) {
    m.mutable_time_ns()->set_boot_id("another-machine");
    m.mutable_time_ns()->set_machine_clocks(true);
    m.mutable_time_ns()->set_monotonic_offset_ns(0);
    m.mutable_time_ns()->set_boottime_offset_ns(0);
  });
  r = RestoreUnsigned(ckpt);
  ASSERT_TRUE(r.Exited(0)) << r.Describe();
  EXPECT_NE(time_ns(moved.pid()), time_ns(::getpid())) << moved.Describe();
  long long secs = 0, nsecs = 0;
  std::string offsets = ReadFile("/proc/" + std::to_string(moved.pid()) + "/timens_offsets");
  EXPECT_EQ(std::sscanf(offsets.c_str(), "monotonic %lld %lld", &secs, &nsecs), 2) << offsets;
  EXPECT_NEAR(static_cast<double>(secs), 86400.0, 30.0) << offsets;
  moved.Go();
  EXPECT_TRUE(FinishedWithPass(moved, out_, err_, "restored workload"));
}

// A thread caught inside the vDSO cannot go on in a redirected one (its code reads the old
// kernel's data pages): refused, naming the thread.
TEST_F(MachineTest, AThreadInsideAVdsoThatMustBeRedirectedIsRefused) {
  Workload w = MakeWorkload("wl_threads");
  std::string ckpt;
  ASSERT_TRUE(Dumped(w, &ckpt));
  EditMeta(ckpt, [](image::Checkpoint& m) {
    uint64_t vdso = 0;
    for (const image::Vma& v : m.process().vmas()) {
      if (v.kind() == image::Vma::VDSO) vdso = v.start();
    }
    ASSERT_NE(vdso, 0u);
    image::Thread* t = m.mutable_process()->mutable_threads(0);
    std::string regs = t->regs().raw();
    uint64_t rip = vdso + 0x700;
    std::memcpy(regs.data() + 16 * 8, &rip, 8);  // user_regs_struct.rip
    t->mutable_regs()->set_raw(regs);
  });
  CommandResult plain = RestoreUnsigned(ckpt, {"CAIRN_TEST_VDSO_PROXY=1"});
  EXPECT_TRUE(plain.FailedCleanly()) << plain.Describe();
  EXPECT_TRUE(Matches(plain.err, "was running code of its vDSO")) << plain.err;
  EXPECT_FALSE(IsAlive(w.pid()));
}

// A restore of a multi-threaded process that fails at a thread's registers (an image without
// a machine record, so nothing is checked before: the kernel refuses the XSAVE area) returns
// an error and leaves no task behind — it used to wait forever for the main thread while the
// other threads were still traced.
TEST_F(MachineTest, AFailedMultiThreadedRestoreReapsEveryThreadAndReturns) {
  Workload w = MakeWorkload("wl_threads");
  std::string ckpt;
  ASSERT_TRUE(Dumped(w, &ckpt));
  std::vector<int> tids;
  EditMeta(ckpt, [&](image::Checkpoint& m) {
    m.clear_machine();
    ASSERT_GE(m.process().threads_size(), 3);
    for (const image::Thread& t : m.process().threads()) tids.push_back(t.tid());
    image::Thread* t = m.mutable_process()->mutable_threads(m.process().threads_size() - 1);
    std::string x = t->xstate();
    x[513] |= 1;  // XSTATE_BV bit 8: the kernel refuses it
    t->set_xstate(x);
  });
  CommandResult r = Cairn({"restore", "--dir", ckpt, "--detach", "--trust-unsigned"}, WithTimeout(30s));
  EXPECT_FALSE(r.timed_out) << "the failed restore hung";
  EXPECT_TRUE(r.FailedCleanly()) << r.Describe();
  EXPECT_TRUE(Matches(r.err, "SETREGSET xstate")) << r.err;
  for (int tid : tids) EXPECT_FALSE(ProcessState(tid).has_value()) << "task " << tid << " left behind";
}

}  // namespace
}  // namespace cairn::testing
