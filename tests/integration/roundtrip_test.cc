// Round trips through `cairn dump` and `cairn restore` for every workload in tests/workloads: each
// workload must PASS when run uninterrupted, and again after being checkpointed, killed and restored.
// A few also go through `dump --leave-running` (the original carries on and the checkpoint restores
// too) and through an attached `cairn restore` (which must exit with the workload's status).

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <regex>
#include <set>
#include <thread>

#include "harness.h"

namespace cairn::testing {
namespace {

struct Spec {
  const char* name;
  bool waits_for_go = true;    // false: runs to completion by itself once ready (wl_compute)
  bool deterministic = false;  // prints "RESULT ..." that a round trip must reproduce exactly
  bool leave_running = false;  // also tested with dump --leave-running
  bool attached = false;       // also restored without --detach
};

// Every workload built in tests/workloads, with what else is tested on it. Workloads that change
// files outside their memory after go (files, shared mappings, stdio with O_APPEND stderr...) are
// not in the leave-running set: the original's phase 2 would already have changed what the restored
// copy expects to find.
const Spec kSpecs[] = {
    {"wl_brk"},
    {"wl_clear_tid"},
    {"wl_comm"},
    {"wl_compute", /*waits_for_go=*/false, /*deterministic=*/true, /*leave_running=*/true, /*attached=*/true},
    {"wl_condvar"},
    {"wl_cwd_umask"},
    {"wl_deleted_file"},
    {"wl_devices"},
    {"wl_exe_auxv"},
    {"wl_exit_status", true, false, true, true},
    {"wl_files", true, false, false, true},
    {"wl_many_fds"},
    {"wl_many_maps"},
    {"wl_fpu", true, false, true, false},
    {"wl_futex"},
    {"wl_guard_pages"},
    {"wl_heap", true, false, true, false},
    {"wl_itimer"},
    {"wl_mmap_anon"},
    {"wl_lazy_events"},
    {"wl_mmap_private_file"},
    {"wl_mmap_shared_file"},
    {"wl_scratch_files"},
    {"wl_nanosleep"},
    {"wl_personality"},
    {"wl_seccomp", true, false, true, false},
    {"wl_poll"},
    {"wl_posix_timers", true, false, true, false},
    {"wl_rlimits"},
    {"wl_robust_futex"},
    {"wl_rseq"},
    {"wl_setsid", true, false, false, true},
    {"wl_sighandlers", true, false, true, false},
    {"wl_sigmask"},
    {"wl_sigpending", true, false, true, true},
    {"wl_stdio", true, false, false, true},
    {"wl_threads", true, false, true, true},
    {"wl_vdso"},
    {"wl_eventfd", true, false, true, false},
    {"wl_locks"},
    {"wl_timerfd", true, false, true, false},
    {"wl_signalfd", true, false, true, false},
    {"wl_epoll", true, false, true, false},
    {"wl_epoll_sockets", true, false, true, false},
    {"wl_sockets_inet"},
    {"wl_sockets_raw"},
    {"wl_sockets_unix"},
    {"wl_memfd", true, false, true, false},
    {"wl_fifo"},
    {"wl_inotify"},
    {"wl_pipe_flags", true, false, true, false},
    {"wl_deleted_sparse"},
    {"wl_fown", true, false, true, false},
    {"wl_lease", true, false, true, false},
    {"wl_proc_self_files", true, false, true, false},
    {"wl_kernel_files", true, false, true, false},
    {"wl_ns_fds", true, false, true, false},
    {"wl_hardlinked_deleted"},
    {"wl_fifo_unlinked", true, false, true, false},
    {"wl_ppoll_mask", true, false, true, false},
    {"wl_aio"},
    {"wl_no_vdso", true, false, true, false},
    {"wl_unix_dgram_server"},
    {"wl_unix_pending"},
    {"wl_scm_rights", true, false, true, false},
    {"wl_memfd_exec", true, false, true, false},
    {"wl_mtime"},
    {"wl_shared_map_mayw"},
    {"wl_mlock", true, false, true, false},
    {"wl_wipeonfork", true, false, true, false},
    {"wl_thp_disable", true, false, true, false},
    {"wl_membarrier", true, false, true, false},
    {"wl_oom_loginuid", true, false, true, false},
    {"wl_udp_shutdown"},
    {"wl_sock_filter"},
    {"wl_unix_dgram_self"},
    {"wl_sockets_unix_shutdown", true, false, true, false},
    {"wl_guard_regions", true, false, true, false},
    {"wl_ambient_caps", true, false, true, false},
    {"wl_opath", true, false, true, false},
    {"wl_deleted_cwd"},
    {"wl_inotify_deleted"},
    {"wl_tmpfile"},
    {"wl_epoll_closed", true, false, true, false},
    {"wl_unix_dir_removed"},
};

// So that gtest names the workload in failure messages instead of dumping the struct's bytes.
void PrintTo(const Spec& spec, std::ostream* os) { *os << spec.name; }

std::vector<Spec> Select(bool (*pred)(const Spec&)) {
  std::vector<Spec> out;
  for (const Spec& s : kSpecs) {
    if (pred(s)) out.push_back(s);
  }
  return out;
}

std::string SpecName(const ::testing::TestParamInfo<Spec>& info) { return info.param.name; }

class RoundTrip : public CairnTest, public ::testing::WithParamInterface<Spec> {
 protected:
  // Runs workload `w` from start to end without a checkpoint; returns its stdout.
  ::testing::AssertionResult RunUninterrupted(Workload& w) {
    auto ready = StartReady(w);
    if (!ready) return ready;
    w.Go();
    Ending end = WaitGone(w.pid(), 60s);
    if (!end.ExitedWith(0)) return ::testing::AssertionFailure() << "uninterrupted run " << end.Describe() << "\n" << w.Describe();
    return OutputPasses(w);
  }

  // Dumps `w` into `ckpt` (killing it) and checks what the contract promises about that.
  ::testing::AssertionResult DumpAndKill(Workload& w, const std::string& ckpt) {
    CommandResult dump = Dump(w.pid(), ckpt);
    if (!dump.Exited(0)) return ::testing::AssertionFailure() << "cairn dump failed " << dump.Describe() << "\n" << w.Describe();
    Ending end = WaitGone(w.pid(), 10s);
    if (!end.gone) return ::testing::AssertionFailure() << "pid " << w.pid() << " still runs after cairn dump";
    if (!end.status || !WIFSIGNALED(*end.status) || WTERMSIG(*end.status) != SIGKILL) {
      return ::testing::AssertionFailure() << "after dump the workload " << end.Describe() << ", want killed by SIGKILL\n"
                                           << w.Describe();
    }
    if (!std::filesystem::is_directory(ckpt)) return ::testing::AssertionFailure() << ckpt << " is not a directory";
    if (Exists(ckpt + ".partial")) return ::testing::AssertionFailure() << ckpt << ".partial left behind";
    CommandResult inspect = Inspect(ckpt);
    if (!inspect.Exited(0)) return ::testing::AssertionFailure() << "cairn inspect of a fresh checkpoint failed " << inspect.Describe();
    return ::testing::AssertionSuccess();
  }

  // After `cairn restore --detach`: the PID must run the workload again.
  ::testing::AssertionResult RestoredAndRunning(const Workload& w) {
    if (!IsAlive(w.pid())) {
      Ending end = WaitGone(w.pid(), 1s);
      return ::testing::AssertionFailure() << "pid " << w.pid() << " is not running after restore (" << end.Describe() << ")\n"
                                           << w.Describe();
    }
    std::string argv0 = ProcessArgv0(w.pid());
    if (argv0 != WorkloadPath(w.name())) {
      return ::testing::AssertionFailure() << "pid " << w.pid() << " runs '" << argv0 << "', not the restored workload";
    }
    return ::testing::AssertionSuccess();
  }

  // Waits for the restored workload to finish and checks its output: PASS, and the output from
  // before the checkpoint still at the start of each file.
  ::testing::AssertionResult FinishedWithPass(const Workload& w, const std::string& out_before, const std::string& err_before) {
    return cairn::testing::FinishedWithPass(w, out_before, err_before, "restored workload");
  }
};

TEST_P(RoundTrip, Uninterrupted) {
  const Spec& spec = GetParam();
  Workload w = MakeWorkload(spec.name);
  ASSERT_TRUE(RunUninterrupted(w));
  if (spec.deterministic) {
    EXPECT_NE(LineStartingWith(w.Stdout(), "RESULT "), "") << w.Describe();
  }
}

TEST_P(RoundTrip, DumpKillRestoreDetached) {
  const Spec& spec = GetParam();
  std::string reference;
  if (spec.deterministic) {
    Workload plain = MakeWorkload(spec.name, "plain");
    ASSERT_TRUE(RunUninterrupted(plain));
    reference = LineStartingWith(plain.Stdout(), "RESULT ");
  }

  Workload w = MakeWorkload(spec.name);
  ASSERT_TRUE(StartReady(w));
  std::string out_before = w.Stdout(), err_before = w.Stderr();
  std::string ckpt = w.workdir() + "/ckpt";
  ASSERT_TRUE(DumpAndKill(w, ckpt));

  CommandResult restore = Restore(ckpt, /*detach=*/true);
  ASSERT_TRUE(restore.Exited(0)) << "cairn restore --detach failed " << restore.Describe();
  if (spec.waits_for_go) {
    ASSERT_TRUE(RestoredAndRunning(w));
  }
  w.Go();
  ASSERT_TRUE(FinishedWithPass(w, out_before, err_before));
  if (spec.deterministic) {
    EXPECT_EQ(LineStartingWith(w.Stdout(), "RESULT "), reference) << "the round trip changed the computation's result";
  }
}

class LeaveRunning : public RoundTrip {};

TEST_P(LeaveRunning, OriginalContinuesAndCheckpointRestores) {
  const Spec& spec = GetParam();
  Workload w = MakeWorkload(spec.name);
  ASSERT_TRUE(StartReady(w));
  std::string out_before = w.Stdout(), err_before = w.Stderr();
  std::string ckpt = w.workdir() + "/ckpt";

  CommandResult dump = Dump(w.pid(), ckpt, /*leave_running=*/true);
  ASSERT_TRUE(dump.Exited(0)) << "cairn dump --leave-running failed " << dump.Describe();
  auto state = ProcessState(w.pid());
  ASSERT_TRUE(state && (*state == 'R' || *state == 'S' || *state == 'D'))
      << "after dump --leave-running the workload is in state '" << (state ? *state : '?') << "', want running or sleeping";

  // The original finishes as if nothing happened.
  w.Go();
  Ending original = WaitGone(w.pid(), 30s);
  ASSERT_TRUE(original.ExitedWith(0)) << "original " << original.Describe() << "\n" << w.Describe();
  ASSERT_TRUE(OutputPasses(w));
  std::string original_out = w.Stdout();

  // The checkpoint, restored into the now free PID, writes the same bytes at the same offsets.
  w.RemoveGo();
  CommandResult restore = Restore(ckpt, /*detach=*/true);
  ASSERT_TRUE(restore.Exited(0)) << "cairn restore --detach failed " << restore.Describe();
  if (spec.waits_for_go) {
    ASSERT_TRUE(RestoredAndRunning(w));
  }
  w.Go();
  ASSERT_TRUE(FinishedWithPass(w, out_before, err_before));
  EXPECT_EQ(w.Stdout(), original_out) << "the restored copy did not reproduce the original's output at the same offsets";
}

// Incremental: a full checkpoint taken with --leave-running --track, then one holding only the
// pages written since (--parent), which kills the workload; the chain of two must restore it.
class Incremental : public RoundTrip {};

TEST_P(Incremental, ChainOfTwoRestores) {
  const Spec& spec = GetParam();
  Workload w = MakeWorkload(spec.name);
  ASSERT_TRUE(StartReady(w));
  std::string out_before = w.Stdout(), err_before = w.Stderr();
  std::string base = w.workdir() + "/base", incr = w.workdir() + "/incr";
  CommandResult full = Cairn({"dump", "--pid", std::to_string(w.pid()), "--dir", base, "--leave-running", "--track"});
  ASSERT_TRUE(full.Exited(0)) << "cairn dump --leave-running --track failed " << full.Describe();
  ASSERT_TRUE(Matches(full.out, "tracking writes")) << full.Describe();
  CommandResult inc = Cairn({"dump", "--pid", std::to_string(w.pid()), "--dir", incr, "--parent", base});
  ASSERT_TRUE(inc.Exited(0)) << "cairn dump --parent failed " << inc.Describe();
  ASSERT_TRUE(Matches(inc.out, "incremental: only pages written since")) << "not incremental: " << inc.Describe();
  Ending end = WaitGone(w.pid(), 10s);
  ASSERT_TRUE(end.gone) << "pid " << w.pid() << " still runs after the incremental dump";
  CommandResult inspect = Inspect(incr);
  ASSERT_TRUE(inspect.Exited(0)) << inspect.Describe();
  EXPECT_TRUE(Matches(inspect.out, "chain \\(newest first\\)")) << inspect.Describe();

  CommandResult restore = Restore(incr, /*detach=*/true);
  ASSERT_TRUE(restore.Exited(0)) << "cairn restore --detach of an incremental checkpoint failed " << restore.Describe();
  if (spec.waits_for_go) {
    ASSERT_TRUE(RestoredAndRunning(w));
  }
  w.Go();
  ASSERT_TRUE(FinishedWithPass(w, out_before, err_before));
}

// Lazy: restored with --lazy, the workload runs before its private anonymous memory is in; a
// page handler process serves each page on first touch and prefetches the rest. The workload
// checks its own memory, so a page served wrong or not at all makes it FAIL.
class LazyRestore : public RoundTrip {};

TEST_P(LazyRestore, DumpKillRestoreLazy) {
  const Spec& spec = GetParam();
  Workload w = MakeWorkload(spec.name);
  ASSERT_TRUE(StartReady(w));
  std::string out_before = w.Stdout(), err_before = w.Stderr();
  std::string ckpt = w.workdir() + "/ckpt";
  ASSERT_TRUE(DumpAndKill(w, ckpt));

  CommandResult restore = Cairn({"restore", "--dir", ckpt, "--detach", "--lazy"});
  ASSERT_TRUE(restore.Exited(0)) << "cairn restore --detach --lazy failed " << restore.Describe();
  if (spec.waits_for_go) {
    ASSERT_TRUE(RestoredAndRunning(w));
  }
  w.Go();
  ASSERT_TRUE(FinishedWithPass(w, out_before, err_before));
}

// A lazy restore whose image is damaged where the process has not been served yet: the
// process runs (restore succeeds, the damaged block is a lazily filled one), then the page
// handler meets the bad block (on a fault or in its prefetch) and must kill the process with a
// clear error rather than leave it running with missing memory.
class LazyDamage : public RoundTrip {};

TEST_F(LazyDamage, BadBlockKillsTheProcessWithAClearError) {
  Workload w = MakeWorkload("wl_mmap_anon");
  ASSERT_TRUE(StartReady(w));
  std::string ckpt = w.workdir() + "/ckpt";
  ASSERT_TRUE(DumpAndKill(w, ckpt));
  // The largest page block is in the 16 MiB private anonymous area, which --lazy leaves to the
  // handler.
  ASSERT_TRUE(DamageLargestPageBlock(ckpt));
  // Sealed (the default), the damage is found before the process runs: refused, nothing runs.
  CommandResult sealed = Cairn({"restore", "--dir", ckpt, "--detach", "--lazy"});
  EXPECT_TRUE(sealed.FailedCleanly()) << sealed.Describe();
  EXPECT_TRUE(Matches(sealed.err, "pages.img does not match its seal")) << sealed.err;
  EXPECT_FALSE(IsAlive(w.pid())) << "a process runs from a damaged image";
  // Unchecked, the page handler meets the damage once the process runs.
  // The handler keeps writing to cairn's stderr after `restore --detach` has returned.
  std::string err_path = w.workdir() + "/restore.err";
  CommandResult restore = RunCommand({"/bin/sh", "-c", "exec \"$0\" restore --dir \"$1\" --detach --lazy --trust-unsigned 2>\"$2\"",
                                      CAIRN_BIN, ckpt, err_path},
                                     w.workdir());
  ASSERT_TRUE(restore.Exited(0)) << "restore --lazy must let the process run before the damaged block is needed "
                                 << restore.Describe() << ReadFile(err_path);
  std::string err;
  ASSERT_TRUE(KilledByPageHandler(w.pid(), err_path, &err)) << "(a damaged page block)";
  EXPECT_TRUE(Matches(err, "checksum|corrupt")) << "the error must say the image is damaged: " << err;
  EXPECT_TRUE(Matches(err, "lazy restore of pid [0-9]+ failed; the process was killed")) << err;
  EXPECT_TRUE(Matches(err, "pages.img|" + ckpt)) << "the error must name the image: " << err;
  EXPECT_EQ(w.Stdout().find("PASS"), std::string::npos) << w.Describe();
}

class Attached : public RoundTrip {
 protected:
  // Runs `cairn restore` (attached) on `ckpt` in the background, sends go with `go_content` once the
  // workload's PID runs again, and returns cairn's result.
  CommandResult RestoreAttached(Workload& w, const std::string& ckpt, const std::string& go_content) {
    std::atomic<bool> done{false};
    auto restore = std::async(std::launch::async, [&] {
      CommandResult r = Restore(ckpt, /*detach=*/false, WithTimeout(90s));
      done = true;
      return r;
    });
    auto deadline = std::chrono::steady_clock::now() + 30s;
    while (!done && std::chrono::steady_clock::now() < deadline &&
           !(IsAlive(w.pid()) && ProcessArgv0(w.pid()) == WorkloadPath(w.name()))) {
      std::this_thread::sleep_for(5ms);
    }
    w.Go(go_content);
    return restore.get();
  }
};

TEST_P(Attached, RestoreWaitsAndReportsExit) {
  Workload w = MakeWorkload(GetParam().name);
  ASSERT_TRUE(StartReady(w));
  std::string out_before = w.Stdout(), err_before = w.Stderr();
  std::string ckpt = w.workdir() + "/ckpt";
  ASSERT_TRUE(DumpAndKill(w, ckpt));
  CommandResult restore = RestoreAttached(w, ckpt, "");
  EXPECT_TRUE(restore.Exited(0)) << "cairn restore (attached) " << restore.Describe() << "\n" << w.Describe();
  EXPECT_TRUE(FinishedWithPass(w, out_before, err_before));
}

// wl_exit_status ends as WORKDIR/go tells it; attached restore must pass its status on.
class ExitStatus : public Attached {};

TEST_F(ExitStatus, RestoreExitsWithTheProcessExitCode) {
  Workload w = MakeWorkload("wl_exit_status");
  ASSERT_TRUE(StartReady(w));
  std::string ckpt = w.workdir() + "/ckpt";
  ASSERT_TRUE(DumpAndKill(w, ckpt));
  CommandResult restore = RestoreAttached(w, ckpt, "exit 7");
  EXPECT_TRUE(restore.Exited(7)) << "cairn restore must exit with the restored process's status " << restore.Describe();
  EXPECT_EQ(LastLine(w.Stdout()), "EXIT 7") << w.Describe();
}

TEST_F(ExitStatus, RestoreExits128PlusSignal) {
  Workload w = MakeWorkload("wl_exit_status");
  ASSERT_TRUE(StartReady(w));
  std::string ckpt = w.workdir() + "/ckpt";
  ASSERT_TRUE(DumpAndKill(w, ckpt));
  CommandResult restore = RestoreAttached(w, ckpt, "signal " + std::to_string(SIGTERM));
  EXPECT_TRUE(restore.Exited(128 + SIGTERM)) << "a restored process killed by SIGTERM must give 128+15 " << restore.Describe();
  EXPECT_EQ(LastLine(w.Stdout()), "SIGNAL " + std::to_string(SIGTERM)) << w.Describe();
}

INSTANTIATE_TEST_SUITE_P(Workloads, RoundTrip, ::testing::ValuesIn(kSpecs), SpecName);
INSTANTIATE_TEST_SUITE_P(Workloads, Incremental, ::testing::ValuesIn(kSpecs), SpecName);
INSTANTIATE_TEST_SUITE_P(Workloads, LazyRestore, ::testing::ValuesIn(kSpecs), SpecName);
INSTANTIATE_TEST_SUITE_P(Workloads, LeaveRunning,
                         ::testing::ValuesIn(Select([](const Spec& s) { return s.leave_running; })), SpecName);
INSTANTIATE_TEST_SUITE_P(Workloads, Attached, ::testing::ValuesIn(Select([](const Spec& s) { return s.attached; })),
                         SpecName);

// A workload added to tests/workloads without an entry here would silently go untested.
TEST(WorkloadList, EveryBuiltWorkloadIsTested) {
  std::set<std::string> specs;
  for (const Spec& s : kSpecs) specs.insert(s.name);
  std::vector<std::string> built = BuiltWorkloads();
  ASSERT_FALSE(built.empty()) << "no workloads in " << WORKLOAD_DIR;
  for (const auto& name : built) EXPECT_TRUE(specs.count(name)) << name << " is built but has no entry in kSpecs";
  for (const auto& name : specs) {
    EXPECT_TRUE(std::find(built.begin(), built.end(), name) != built.end()) << name << " is in kSpecs but not built";
  }
}

// Files of the node's scratch space the process holds (dump/scratch_files.h), their names gone
// between the dump and the restore (the program's cleanup, another machine): made again from the
// checkpoint, directories and all; the workload checks names, modes, contents and mappings.
TEST_F(RoundTrip, ScratchFilesComeBackWhereTheirNamesWereRemoved) {
  Workload w = MakeWorkload("wl_scratch_files");
  ASSERT_TRUE(StartReady(w));
  std::string out_before = w.Stdout(), err_before = w.Stderr();
  std::string ckpt = w.workdir() + "/ckpt";
  ASSERT_TRUE(DumpAndKill(w, ckpt));
  std::error_code ec;
  ASSERT_GT(std::filesystem::remove_all(w.workdir() + "/session", ec), 0u) << ec.message();
  CommandResult restore = Restore(ckpt, /*detach=*/true);
  ASSERT_TRUE(restore.Exited(0)) << "cairn restore --detach failed " << restore.Describe();
  EXPECT_TRUE(Exists(w.workdir() + "/session/run/sess.dat"));
  w.Go();
  ASSERT_TRUE(FinishedWithPass(w, out_before, err_before));
}

// Files of /proc and /sys the process holds, their in-memory inodes evicted between the dump and
// the restore (drop_caches, as memory pressure or another machine would): the kernel makes them
// anew under other inode numbers and times, and the restore finds them by name.
TEST_F(RoundTrip, KernelFilesWhoseInodesWereEvictedAreFoundByName) {
  Workload w = MakeWorkload("wl_kernel_files");
  ASSERT_TRUE(StartReady(w));
  std::string out_before = w.Stdout(), err_before = w.Stderr();
  std::string ckpt = w.workdir() + "/ckpt";
  struct stat before {};
  ASSERT_EQ(::stat("/proc/sys/kernel/hostname", &before), 0);
  ASSERT_TRUE(DumpAndKill(w, ckpt));
  struct stat after {};
  for (int i = 0; i < 50 && (::stat("/proc/sys/kernel/hostname", &after) != 0 || after.st_ino == before.st_ino); ++i) {
    std::ofstream("/proc/sys/vm/drop_caches") << "2\n";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_NE(after.st_ino, before.st_ino) << "the sysctl's inode was not evicted: the test would prove nothing";
  CommandResult restore = Restore(ckpt, /*detach=*/true);
  ASSERT_TRUE(restore.Exited(0)) << "cairn restore --detach failed " << restore.Describe();
  ASSERT_TRUE(RestoredAndRunning(w));
  w.Go();
  ASSERT_TRUE(FinishedWithPass(w, out_before, err_before));
}

// A process stopped by SIGSTOP is checkpointed as stopped and comes back stopped; SIGCONT
// lets it carry on.
TEST_F(RoundTrip, StoppedProcessComesBackStopped) {
  Workload w = MakeWorkload("wl_threads");
  ASSERT_TRUE(StartReady(w));
  std::string out_before = w.Stdout(), err_before = w.Stderr();
  ASSERT_EQ(::kill(w.pid(), SIGSTOP), 0);
  for (int i = 0; i < 100 && ProcessState(w.pid()) != std::optional<char>('T'); ++i) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_EQ(ProcessState(w.pid()), std::optional<char>('T'));
  std::string ckpt = w.workdir() + "/ckpt";
  ASSERT_TRUE(DumpAndKill(w, ckpt));
  CommandResult restore = Restore(ckpt, /*detach=*/true);
  ASSERT_TRUE(restore.Exited(0)) << restore.Describe();
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(ProcessState(w.pid()), std::optional<char>('T')) << "the restored process is not stopped";
  ASSERT_EQ(::kill(w.pid(), SIGCONT), 0);
  w.Go();
  ASSERT_TRUE(FinishedWithPass(w, out_before, err_before));
}

// SIGSTOP cannot be blocked, so one that arrives while cairn injects its calls stops the
// injected thread for delivery. Here it is already waiting when the dump starts (a second
// SIGSTOP to a stopped process stays pending), so every dump meets it: the dump must succeed,
// with --leave-running the process must be stopped after it, and the checkpoint must come
// back stopped.
TEST_F(RoundTrip, PendingSigstopDuringTheDumpIsKept) {
  for (bool leave_running : {true, false}) {
    SCOPED_TRACE(leave_running ? "dump --leave-running" : "dump");
    Workload w = MakeWorkload("wl_threads", leave_running ? "leave" : "kill");
    ASSERT_TRUE(StartReady(w));
    std::string out_before = w.Stdout(), err_before = w.Stderr();
    ASSERT_EQ(::kill(w.pid(), SIGSTOP), 0);
    for (int i = 0; i < 100 && ProcessState(w.pid()) != std::optional<char>('T'); ++i) {
      std::this_thread::sleep_for(10ms);
    }
    ASSERT_EQ(ProcessState(w.pid()), std::optional<char>('T'));
    ASSERT_EQ(::kill(w.pid(), SIGSTOP), 0);
    ASSERT_NE(LineStartingWith(ReadFile("/proc/" + std::to_string(w.pid()) + "/status"), "ShdPnd:"),
              "ShdPnd:\t0000000000000000")
        << "the second SIGSTOP is not pending: the test does not test what it should";
    std::string ckpt = w.workdir() + "/ckpt";
    if (leave_running) {
      CommandResult dump = Dump(w.pid(), ckpt, /*leave_running=*/true);
      ASSERT_TRUE(dump.Exited(0)) << dump.Describe();
    } else {
      ASSERT_TRUE(DumpAndKill(w, ckpt));
      CommandResult restore = Restore(ckpt, /*detach=*/true);
      ASSERT_TRUE(restore.Exited(0)) << restore.Describe();
    }
    std::this_thread::sleep_for(100ms);
    EXPECT_EQ(ProcessState(w.pid()), std::optional<char>('T')) << "the process is not stopped after the dump";
    ASSERT_EQ(::kill(w.pid(), SIGCONT), 0);
    w.Go();
    ASSERT_TRUE(FinishedWithPass(w, out_before, err_before));
  }
}

}  // namespace
}  // namespace cairn::testing
