// Round trips of whole process trees through `cairn dump --tree` and `cairn restore`, one workload
// per feature (tests/workloads/wl_tree_*.c): pipes between processes, shared open file descriptions,
// sessions and process groups, zombies, the child-subreaper flag and parent-death signal, shared
// memory (anonymous, memfd, POSIX), and a tree that forks and reaps while it is being checkpointed.
//
// Besides the workloads' own checks (they PASS only if their state survived), the tests check the
// tree from outside: the checkpoint holds exactly the processes the tree had, `dump` leaves none of
// them behind, and after `restore` every process is back with its pid, parent, process group,
// session, and zombie or live state.

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "harness.h"

namespace cairn::testing {
namespace {

namespace fs = std::filesystem;

struct TreeSpec {
  const char* name;
  bool dumpable = true;        // false: cairn must refuse it (tested in bad_input_test.cc); here only run plainly
  bool static_tree = true;     // false: processes come and go between ready and go (wl_tree_fork_during)
  bool leave_running = false;  // also tested with dump --leave-running
  const char* dump_flag = nullptr;        // an extra `cairn dump` flag for the round trip
  const char* says_uninterrupted = "";    // a line its output must hold when run plainly
  const char* says_restored = "";         // ... and after the round trip
};

// Every workload built in tests/workloads/tree.
const TreeSpec kTreeSpecs[] = {
    {"wl_tree_fork_during", true, /*static_tree=*/false, false},
    {"wl_tree_pipe_eof"},
    {"wl_tree_pipes", true, true, /*leave_running=*/true},
    {"wl_tree_session_split"},
    {"wl_tree_sessions"},
    {"wl_tree_shared_fd", true, true, /*leave_running=*/true},
    {"wl_tree_socketpair"},
    {"wl_tree_socketpair_messages", true, true, /*leave_running=*/true},
    {"wl_tree_scm_rights", true, true, /*leave_running=*/true},
    {"wl_tree_io_uring", /*dumpable=*/false},
    {"wl_tree_memfd", true, true, /*leave_running=*/true},
    {"wl_tree_tcp_close", true, true, false, "--tcp-close", "CONNECTION kept", "CONNECTION reset"},
    {"wl_tree_tcp_established", true, true, false, "--tcp-established", "CONNECTIONS kept", "CONNECTIONS kept"},
    {"wl_tree_unix_server"},
    {"wl_tree_orphaned_group"},
    {"wl_tree_orphaned_session"},
    {"wl_tree_posix_shm"},
    {"wl_tree_shared_anon", true, true, /*leave_running=*/true},
    {"wl_tree_subreaper_pdeathsig"},
    {"wl_tree_zombie"},
    {"wl_tree_lock_owner"},
    {"wl_tree_stop_signal"},
    {"wl_tree_clone_files", true, true, /*leave_running=*/true},
    {"wl_tree_clone_vm", /*dumpable=*/false},
    {"wl_tree_pidfd"},
    {"wl_tree_proc_files"},
    {"wl_tree_ctty"},
};

void PrintTo(const TreeSpec& spec, std::ostream* os) { *os << spec.name; }

std::string SpecName(const ::testing::TestParamInfo<TreeSpec>& info) { return info.param.name; }

std::vector<TreeSpec> SelectTree(bool (*pred)(const TreeSpec&)) {
  std::vector<TreeSpec> out;
  for (const TreeSpec& s : kTreeSpecs) {
    if (pred(s)) out.push_back(s);
  }
  return out;
}

// Tree workloads live in their own directory under WORKLOAD_DIR.
std::string TreeWorkloadName(const std::string& name) { return "tree/" + name; }

// One process as /proc or a checkpoint describes it.
struct ProcInfo {
  pid_t pid = 0;
  pid_t ppid = 0;
  pid_t pgid = 0;
  pid_t sid = 0;
  bool zombie = false;
};

std::ostream& operator<<(std::ostream& os, const ProcInfo& p) {
  return os << "pid " << p.pid << " ppid " << p.ppid << " pgid " << p.pgid << " sid " << p.sid
            << (p.zombie ? " (zombie)" : "");
}

std::string Describe(const std::vector<ProcInfo>& procs) {
  std::ostringstream ss;
  for (const ProcInfo& p : procs) ss << "\n    " << p;
  return ss.str();
}

std::optional<ProcInfo> ReadProc(pid_t pid) {
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return std::nullopt;
  std::istringstream fields(stat.substr(paren + 2));
  char state = 0;
  ProcInfo p;
  p.pid = pid;
  if (!(fields >> state >> p.ppid >> p.pgid >> p.sid)) return std::nullopt;
  p.zombie = state == 'Z';
  return p;
}

// `root` and its descendants as /proc shows them now, parents before children.
std::vector<ProcInfo> ProcTree(pid_t root) {
  std::vector<ProcInfo> out;
  std::vector<pid_t> queue = {root};
  for (size_t i = 0; i < queue.size(); ++i) {
    auto p = ReadProc(queue[i]);
    if (!p) continue;
    out.push_back(*p);
    std::error_code ec;
    for (const auto& task : fs::directory_iterator("/proc/" + std::to_string(queue[i]) + "/task", ec)) {
      std::istringstream children(ReadFile(task.path() / "children"));
      pid_t c;
      while (children >> c) queue.push_back(c);
    }
  }
  return out;
}

std::set<pid_t> Pids(const std::vector<ProcInfo>& procs) {
  std::set<pid_t> s;
  for (const ProcInfo& p : procs) s.insert(p.pid);
  return s;
}

// The processes a checkpoint holds, from `cairn inspect` (root first).
std::vector<ProcInfo> ParseInspect(const std::string& text) {
  static const std::regex kRoot(R"(^process (\d+) \(.*\), parent (-?\d+), group (\d+), session (\d+), cwd)");
  static const std::regex kDescendant(
      R"(^descendant process (\d+) \(.*\), parent (\d+), group (\d+), session (\d+): (zombie)?)");
  std::vector<ProcInfo> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, kRoot) || std::regex_search(line, m, kDescendant)) {
      ProcInfo p;
      p.pid = std::stoi(m[1]);
      p.ppid = std::stoi(m[2]);
      p.pgid = std::stoi(m[3]);
      p.sid = std::stoi(m[4]);
      p.zombie = m.size() > 5 && m[5].matched;
      out.push_back(p);
    }
  }
  return out;
}

class TreeTest : public CairnTest {
 protected:
  Workload MakeTreeWorkload(const std::string& name, const std::string& subdir = "work") {
    return MakeWorkload(TreeWorkloadName(name), subdir);
  }

  CommandResult DumpTree(pid_t pid, const std::string& dir, bool leave_running = false,
                         const char* flag = nullptr) {
    std::vector<std::string> args = {"dump", "--pid", std::to_string(pid), "--tree", "--dir", dir};
    if (leave_running) args.push_back("--leave-running");
    if (flag != nullptr) args.push_back(flag);
    return Cairn(args, WithTimeout(60s));
  }

  // role -> pid, from the WORKDIR/proc-<role> files the workload's processes wrote.
  std::map<std::string, pid_t> Announced(const Workload& w) {
    std::map<std::string, pid_t> out;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(w.workdir(), ec)) {
      std::string name = entry.path().filename();
      if (name.rfind("proc-", 0) != 0 || name.find(".tmp") != std::string::npos) continue;
      out[name.substr(5)] = std::stoi(ReadFile(entry.path()));
    }
    return out;
  }

  // Registers every announced process for cleanup.
  void TrackTree(const Workload& w) {
    for (const auto& [role, pid] : Announced(w)) Track(pid, WorkloadPath(w.name()));
  }

  ::testing::AssertionResult StartTree(Workload& w) {
    auto ready = StartReady(w);
    TrackTree(w);
    return ready;
  }

  // Waits until none of `pids` exists any more, reaping those that are (or become) our children:
  // processes of a killed tree are re-parented to this process, the subreaper.
  ::testing::AssertionResult AllGone(const std::set<pid_t>& pids, std::chrono::milliseconds timeout) {
    std::set<pid_t> left = pids;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!left.empty()) {
      for (auto it = left.begin(); it != left.end();) {
        int status;
        pid_t r = ::waitpid(*it, &status, WNOHANG | __WALL);
        bool gone = r == *it || (r < 0 && errno == ECHILD && !ProcessState(*it).has_value());
        it = gone ? left.erase(it) : std::next(it);
      }
      if (left.empty()) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        std::ostringstream ss;
        for (pid_t p : left) ss << " " << p << " (state " << ProcessState(p).value_or('-') << ", " << ProcessArgv0(p) << ")";
        return ::testing::AssertionFailure() << "processes still there after " << timeout.count() << " ms:" << ss.str();
      }
      std::this_thread::sleep_for(5ms);
    }
    return ::testing::AssertionSuccess();
  }

  // Every announced process (role -> pid) is in `procs`.
  ::testing::AssertionResult HoldsAnnounced(const Workload& w, const std::vector<ProcInfo>& procs) {
    std::set<pid_t> pids = Pids(procs);
    for (const auto& [role, pid] : Announced(w)) {
      if (!pids.count(pid)) {
        return ::testing::AssertionFailure() << "process " << role << " (pid " << pid << ") is missing from the checkpoint:"
                                             << Describe(procs);
      }
    }
    return ::testing::AssertionSuccess();
  }

  // Dumps the tree of `w` into `ckpt` (killing it) and checks what the contract promises: the
  // checkpoint holds the tree as /proc showed it, and no process of it is left. Returns the
  // checkpoint's processes in *saved.
  ::testing::AssertionResult DumpTreeAndKill(Workload& w, const std::string& ckpt, bool static_tree,
                                             std::vector<ProcInfo>* saved, const char* flag = nullptr) {
    std::vector<ProcInfo> before = ProcTree(w.pid());
    CommandResult dump = DumpTree(w.pid(), ckpt, false, flag);
    if (!dump.Exited(0)) return ::testing::AssertionFailure() << "cairn dump --tree failed " << dump.Describe() << "\n" << w.Describe();
    Ending end = WaitGone(w.pid(), 10s);
    if (!end.gone) return ::testing::AssertionFailure() << "root pid " << w.pid() << " still runs after cairn dump";
    if (!end.status || !WIFSIGNALED(*end.status) || WTERMSIG(*end.status) != SIGKILL) {
      return ::testing::AssertionFailure() << "after dump the root " << end.Describe() << ", want killed by SIGKILL\n" << w.Describe();
    }
    if (!fs::is_directory(ckpt)) return ::testing::AssertionFailure() << ckpt << " is not a directory";
    if (Exists(ckpt + ".partial")) return ::testing::AssertionFailure() << ckpt << ".partial left behind";
    CommandResult inspect = Inspect(ckpt);
    if (!inspect.Exited(0)) return ::testing::AssertionFailure() << "cairn inspect of a fresh checkpoint failed " << inspect.Describe();
    *saved = ParseInspect(inspect.out);
    if (saved->empty() || saved->front().pid != w.pid()) {
      return ::testing::AssertionFailure() << "cannot read the processes from cairn inspect:\n" << inspect.out;
    }
    std::set<pid_t> all = Pids(*saved);
    for (pid_t p : Pids(before)) all.insert(p);
    auto gone = AllGone(all, 10s);
    if (!gone) return gone << " after cairn dump --tree (it must kill the whole tree)";
    if (static_tree && Pids(before) != Pids(*saved)) {
      return ::testing::AssertionFailure() << "the checkpoint holds" << Describe(*saved) << "\nbut the tree was" << Describe(before);
    }
    return HoldsAnnounced(w, *saved);
  }

  // After restore: every saved process is back with its parent (except the root's, which is the
  // restorer's), group, session and state; live ones run the workload again. In a tree that is not
  // static only the root is checked: its restored children may already have exited and been reaped
  // (the workload's own bookkeeping checks them).
  ::testing::AssertionResult TreeRestored(const Workload& w, const std::vector<ProcInfo>& saved, bool static_tree = true) {
    std::ostringstream wrong;
    for (size_t i = 0; i < (static_tree ? saved.size() : std::min<size_t>(1, saved.size())); ++i) {
      const ProcInfo& want = saved[i];
      std::optional<ProcInfo> now = ReadProc(want.pid);
      // A zombie is made to exit once the rest of the tree runs; give it a moment.
      for (int tries = 0; want.zombie && now && !now->zombie && tries < 200; ++tries) {
        std::this_thread::sleep_for(5ms);
        now = ReadProc(want.pid);
      }
      if (!now) {
        wrong << "\n  pid " << want.pid << " does not exist; want " << want;
      } else if ((i > 0 && now->ppid != want.ppid) || now->pgid != want.pgid || now->sid != want.sid ||
                 now->zombie != want.zombie) {
        wrong << "\n  " << *now << "; want " << want;
      } else if (!want.zombie && ProcessArgv0(want.pid) != WorkloadPath(w.name())) {
        wrong << "\n  pid " << want.pid << " runs '" << ProcessArgv0(want.pid) << "'";
      }
    }
    if (!wrong.str().empty()) {
      return ::testing::AssertionFailure() << "after restore (root's parent is not compared):" << wrong.str()
                                           << "\nthe tree now:" << Describe(ProcTree(w.pid()));
    }
    return ::testing::AssertionSuccess();
  }

  // Waits for the root to finish and checks its output: PASS, with what it printed before the
  // checkpoint still in front.
  ::testing::AssertionResult FinishedWithPass(const Workload& w, const std::string& out_before, const std::string& err_before) {
    return cairn::testing::FinishedWithPass(w, out_before, err_before, "root");
  }

  // Runs the tree from start to end without a checkpoint.
  ::testing::AssertionResult RunUninterrupted(Workload& w) {
    auto ready = StartTree(w);
    if (!ready) return ready;
    std::set<pid_t> tree = Pids(ProcTree(w.pid()));
    w.Go();
    Ending end = WaitGone(w.pid(), 30s);
    if (!end.ExitedWith(0)) return ::testing::AssertionFailure() << "uninterrupted run " << end.Describe() << "\n" << w.Describe();
    auto pass = OutputPasses(w);
    if (!pass) return pass;
    tree.erase(w.pid());
    return AllGone(tree, 5s);
  }
};

class TreeRoundTrip : public TreeTest, public ::testing::WithParamInterface<TreeSpec> {};

TEST_P(TreeRoundTrip, Uninterrupted) {
  Workload w = MakeTreeWorkload(GetParam().name);
  EXPECT_TRUE(RunUninterrupted(w));
  const char* says = GetParam().says_uninterrupted;
  if (*says != '\0') {
    EXPECT_TRUE(Matches(w.Stdout(), says)) << w.Describe();
  }
}

TEST_P(TreeRoundTrip, DumpKillRestoreDetached) {
  const TreeSpec& spec = GetParam();
  if (!spec.dumpable) GTEST_SKIP() << spec.name << " is refused by design (see bad_input_test.cc)";
  Workload w = MakeTreeWorkload(spec.name);
  ASSERT_TRUE(StartTree(w));
  std::string out_before = w.Stdout(), err_before = w.Stderr();
  std::string ckpt = w.workdir() + "/ckpt";
  std::vector<ProcInfo> saved;
  ASSERT_TRUE(DumpTreeAndKill(w, ckpt, spec.static_tree, &saved, spec.dump_flag));

  CommandResult restore = Restore(ckpt, /*detach=*/true);
  ASSERT_TRUE(restore.Exited(0)) << "cairn restore --detach failed " << restore.Describe();
  EXPECT_TRUE(Matches(restore.out, std::to_string(saved.size()) + " process")) << restore.out;
  ASSERT_TRUE(TreeRestored(w, saved, spec.static_tree));
  w.Go();
  ASSERT_TRUE(FinishedWithPass(w, out_before, err_before));
  if (*spec.says_restored != '\0') {
    EXPECT_TRUE(Matches(w.Stdout(), spec.says_restored)) << w.Describe();
  }
  EXPECT_TRUE(AllGone(Pids(saved), 5s)) << "the restored tree left processes behind";
}

class TreeLeaveRunning : public TreeRoundTrip {};

TEST_P(TreeLeaveRunning, OriginalContinuesAndCheckpointRestores) {
  const TreeSpec& spec = GetParam();
  Workload w = MakeTreeWorkload(spec.name);
  ASSERT_TRUE(StartTree(w));
  std::string out_before = w.Stdout(), err_before = w.Stderr();
  std::string ckpt = w.workdir() + "/ckpt";
  std::vector<ProcInfo> before = ProcTree(w.pid());

  CommandResult dump = DumpTree(w.pid(), ckpt, /*leave_running=*/true);
  ASSERT_TRUE(dump.Exited(0)) << "cairn dump --tree --leave-running failed " << dump.Describe();
  CommandResult inspect = Inspect(ckpt);
  ASSERT_TRUE(inspect.Exited(0)) << inspect.Describe();
  std::vector<ProcInfo> saved = ParseInspect(inspect.out);
  ASSERT_EQ(Pids(saved), Pids(before)) << "checkpoint:" << Describe(saved) << "\ntree:" << Describe(before);
  // Every process carries on untraced, in the same place.
  for (const ProcInfo& p : before) {
    auto state = ProcessState(p.pid);
    ASSERT_TRUE(state && (*state == 'R' || *state == 'S' || *state == 'D'))
        << "after dump --leave-running pid " << p.pid << " is in state '" << state.value_or('-') << "'";
    EXPECT_EQ(LineStartingWith(ReadFile("/proc/" + std::to_string(p.pid) + "/status"), "TracerPid:"), "TracerPid:\t0")
        << "pid " << p.pid << " is still traced";
  }
  EXPECT_EQ(Pids(ProcTree(w.pid())), Pids(before)) << "the tree changed shape across the dump";

  w.Go();
  Ending original = WaitGone(w.pid(), 30s);
  ASSERT_TRUE(original.ExitedWith(0)) << "original " << original.Describe() << "\n" << w.Describe();
  ASSERT_TRUE(OutputPasses(w));
  ASSERT_TRUE(AllGone(Pids(before), 5s));
  std::string original_out = w.Stdout();

  // The checkpoint, restored into the now free pids, writes the same bytes at the same offsets.
  w.RemoveGo();
  CommandResult restore = Restore(ckpt, /*detach=*/true);
  ASSERT_TRUE(restore.Exited(0)) << "cairn restore --detach failed " << restore.Describe();
  ASSERT_TRUE(TreeRestored(w, saved));
  w.Go();
  ASSERT_TRUE(FinishedWithPass(w, out_before, err_before));
  EXPECT_EQ(w.Stdout(), original_out) << "the restored copy did not reproduce the original's output at the same offsets";
  EXPECT_TRUE(AllGone(Pids(saved), 5s));
}

// Checkpoints taken one after another while the tree forks and reaps must all succeed and leave the
// tree running; the last one must restore.
TEST_F(TreeTest, RepeatedLeaveRunningDumpsWhileForking) {
  Workload w = MakeTreeWorkload("wl_tree_fork_during");
  ASSERT_TRUE(StartTree(w));
  std::string out_before = w.Stdout(), err_before = w.Stderr();
  constexpr int kDumps = 5;
  std::string ckpt;
  std::vector<ProcInfo> saved;
  for (int i = 0; i < kDumps; ++i) {
    ckpt = w.workdir() + "/ckpt-" + std::to_string(i);
    CommandResult dump = DumpTree(w.pid(), ckpt, /*leave_running=*/true);
    ASSERT_TRUE(dump.Exited(0)) << "dump " << i << " of " << kDumps << " failed " << dump.Describe() << "\n" << w.Describe();
    ASSERT_TRUE(IsAlive(w.pid())) << "root died after dump " << i << "\n" << w.Describe();
    CommandResult inspect = Inspect(ckpt);
    ASSERT_TRUE(inspect.Exited(0)) << inspect.Describe();
    saved = ParseInspect(inspect.out);
    ASSERT_FALSE(saved.empty());
    for (size_t k = 1; k < saved.size(); ++k) {
      EXPECT_EQ(saved[k].ppid, w.pid()) << "checkpoint " << i << " holds a process that is not root's child:" << Describe(saved);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(30 + 17 * i));  // land in different phases of the children
  }
  w.Go();
  Ending original = WaitGone(w.pid(), 30s);
  ASSERT_TRUE(original.ExitedWith(0)) << "original " << original.Describe() << "\n" << w.Describe();
  ASSERT_TRUE(OutputPasses(w));
  std::string original_out = w.Stdout();
  std::set<pid_t> pids = Pids(saved);
  pids.erase(w.pid());
  ASSERT_TRUE(AllGone(pids, 5s));

  w.RemoveGo();
  CommandResult restore = Restore(ckpt, /*detach=*/true);
  ASSERT_TRUE(restore.Exited(0)) << "cairn restore --detach of the last checkpoint failed " << restore.Describe();
  ASSERT_TRUE(TreeRestored(w, saved, /*static_tree=*/false));
  w.Go();
  ASSERT_TRUE(FinishedWithPass(w, out_before, err_before));
}

INSTANTIATE_TEST_SUITE_P(Workloads, TreeRoundTrip, ::testing::ValuesIn(kTreeSpecs), SpecName);
INSTANTIATE_TEST_SUITE_P(Workloads, TreeLeaveRunning,
                         ::testing::ValuesIn(SelectTree([](const TreeSpec& s) { return s.leave_running; })), SpecName);

// A tree workload added without an entry here would silently go untested.
TEST(TreeWorkloadList, EveryBuiltTreeWorkloadIsTested) {
  std::set<std::string> specs;
  for (const TreeSpec& s : kTreeSpecs) specs.insert(s.name);
  std::set<std::string> built;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(std::string(WORKLOAD_DIR) + "/tree", ec)) {
    std::string name = entry.path().filename();
    if (name.rfind("wl_", 0) == 0 && entry.is_regular_file()) built.insert(name);
  }
  ASSERT_FALSE(built.empty()) << "no tree workloads in " << WORKLOAD_DIR << "/tree";
  EXPECT_EQ(built, specs);
}

}  // namespace
}  // namespace cairn::testing
