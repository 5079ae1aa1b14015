// Lazy restore through `cairn page-server`: the checkpoint (metadata and pages) is served over
// TCP on loopback to `cairn restore --lazy --page-server`, which holds no copy of it. Round trips
// of a single process, threads, fork/remap events, a tree, an incremental chain and compressed
// blocks (the workloads check their own memory and print PASS); then what must fail cleanly: the
// server dying mid-way (the process is killed, never left running with missing memory), a wrong
// token, an unreachable server, and a server started on bad input.

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <thread>

#include "absl/strings/match.h"
#include "harness.h"

namespace cairn::testing {
namespace {

namespace fs = std::filesystem;

class PageServerTest : public CairnTest {
 protected:
  struct Server {
    pid_t pid = -1;
    std::string addr;  // 127.0.0.1:PORT
    std::string out, err;
  };

  std::string Token(const std::string& name, const std::string& secret) {
    std::string path = *temp_ / name;
    WriteFile(path, secret + "\n");
    ::chmod(path.c_str(), 0600);
    return path;
  }

  // Starts `cairn page-server` on a free loopback port and waits until it listens.
  ::testing::AssertionResult StartServer(const std::string& ckpt, const std::string& token, Server* s,
                                         const std::vector<std::string>& extra = {}) {
    s->out = *temp_ / ("server" + std::to_string(servers_) + ".out");
    s->err = *temp_ / ("server" + std::to_string(servers_) + ".err");
    ++servers_;
    std::vector<std::string> argv = {CAIRN_BIN, "-v", "page-server", "--dir", ckpt, "--listen", "127.0.0.1:0",
                                     "--token-file", token};
    argv.insert(argv.end(), extra.begin(), extra.end());
    WriteFile(*temp_ / "empty", "");
    s->pid = SpawnProgram(argv, *temp_ / "empty", s->out, s->err);
    if (s->pid < 0) return ::testing::AssertionFailure() << "cannot start cairn page-server";
    Track(s->pid, CAIRN_BIN);
    std::regex re("serving .* on (127\\.0\\.0\\.1:[0-9]+)");
    for (int i = 0; i < 1000; ++i) {
      std::smatch m;
      std::string out = ReadFile(s->out);
      if (std::regex_search(out, m, re)) {
        s->addr = m[1];
        return ::testing::AssertionSuccess();
      }
      if (!IsAlive(s->pid)) break;
      std::this_thread::sleep_for(10ms);
    }
    return ::testing::AssertionFailure() << "page server did not start: " << ReadFile(s->out) << ReadFile(s->err);
  }

  CommandResult RestoreFrom(const Server& s, const std::string& token, bool detach = true) {
    std::vector<std::string> args = {"restore", "--lazy", "--page-server", s.addr, "--token-file", token};
    if (detach) args.push_back("--detach");
    return Cairn(args, WithTimeout(60s));
  }

  // A detached lazy restore from `s` whose stderr goes to `err_path`: the page handler writes
  // there after the command has returned.
  // With `exec_handler`, the handler execs `cairn lazy-pages --pid PID ...` (CAIRN_LAZY_EXEC),
  // so that a test can find it by its command line.
  CommandResult RestoreDetachedTo(const Server& s, const std::string& token, const std::string& err_path,
                                  const std::string& cwd, bool exec_handler = false) {
    std::vector<std::string> argv = {"/bin/sh", "-c",
                                     "exec \"$0\" restore --lazy --detach --page-server \"$1\" --token-file \"$2\" 2>\"$3\"",
                                     CAIRN_BIN, s.addr, token, err_path};
    if (exec_handler) argv.insert(argv.begin(), {"/usr/bin/env", "CAIRN_LAZY_EXEC=1"});
    return RunCommand(argv, cwd);
  }

  // The server is one-shot: once the restore has every page, it exits 0.
  ::testing::AssertionResult ServerFinished(const Server& s) {
    Ending end = WaitGone(s.pid, 30s);
    if (!end.ExitedWith(0)) {
      return ::testing::AssertionFailure() << "page server " << end.Describe() << " (want exited 0 once every page was "
                                           << "delivered)\n" << ReadFile(s.out) << ReadFile(s.err);
    }
    return ::testing::AssertionSuccess();
  }

  ::testing::AssertionResult DumpAndKill(Workload& w, const std::string& ckpt, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"dump", "--pid", std::to_string(w.pid()), "--dir", ckpt};
    args.insert(args.end(), extra.begin(), extra.end());
    CommandResult dump = Cairn(args, WithTimeout(60s));
    if (!dump.Exited(0)) return ::testing::AssertionFailure() << "cairn dump failed " << dump.Describe();
    Ending end = WaitGone(w.pid(), 10s);
    if (!end.gone) return ::testing::AssertionFailure() << "pid " << w.pid() << " still runs after cairn dump";
    return ::testing::AssertionSuccess();
  }

  // Serves `ckpt`, restores `w` from the server, lets it finish, checks PASS and the server's exit.
  void RoundTrip(Workload& w, const std::string& ckpt, const std::string& out_before, const std::string& err_before) {
    std::string token = Token("token", "page-server-test-token-0123456789");
    Server s;
    ASSERT_TRUE(StartServer(ckpt, token, &s));
    CommandResult restore = RestoreFrom(s, token);
    ASSERT_TRUE(restore.Exited(0)) << "restore --lazy --page-server failed " << restore.Describe() << ReadFile(s.err);
    EXPECT_TRUE(Matches(restore.out, "restored pid [0-9]+ from page server 127.0.0.1")) << restore.Describe();
    ASSERT_TRUE(IsAlive(w.pid())) << "pid " << w.pid() << " not running after restore " << restore.Describe();
    EXPECT_EQ(ProcessArgv0(w.pid()), WorkloadPath(w.name()));
    w.Go();
    ASSERT_TRUE(FinishedWithPass(w, out_before, err_before, "workload restored from a page server"));
    EXPECT_TRUE(ServerFinished(s));
  }

  // The page handler of `pid` and its watcher (a fork of it: the same command line; named
  // cairn-lazywatch once it has run that far), started with CAIRN_LAZY_EXEC: the handler is the
  // one whose parent is not one of them. 0 for one not found.
  static std::pair<pid_t, pid_t> HandlerAndWatcherOf(pid_t pid) {
    std::map<pid_t, pid_t> found;  // pid -> parent
    for (const auto& e : std::filesystem::directory_iterator("/proc")) {
      std::string name = e.path().filename();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::string cmd = ReadFile(e.path() / "cmdline");
      if (cmd.find("lazy-pages") == std::string::npos ||
          cmd.find(std::string("--pid") + '\0' + std::to_string(pid) + '\0') == std::string::npos) {
        continue;
      }
      std::string stat = ReadFile(e.path() / "stat");
      size_t close = stat.rfind(')');
      if (close == std::string::npos) continue;
      found[std::stoi(name)] = std::atoi(stat.c_str() + close + 4);  // ") S PPID"
    }
    pid_t handler = 0, watcher = 0;
    for (const auto& [p, parent] : found) {
      if (found.count(parent) == 0) handler = p;
    }
    for (const auto& [p, parent] : found) {
      if (parent == handler) watcher = p;
    }
    return {handler, watcher};
  }

  // A `cairn run` job of `workload` (the JobTest conventions: state in TMP/state, the job's
  // logs in TMP/job, its work directory TMP/work), checkpointed with `dump --job` into
  // TMP/ckpt once ready; the job is gone after it.
  struct LazyJob {
    std::string name, state, work, logs, ckpt;
    CommandOptions env;
  };
  ::testing::AssertionResult RunAndDumpJob(const std::string& name, const std::string& workload, LazyJob* j) {
    j->name = name;
    j->state = *temp_ / "state";
    j->work = *temp_ / "work";
    j->logs = *temp_ / "job";
    j->ckpt = *temp_ / "ckpt";
    ::mkdir(j->work.c_str(), 0755);
    j->env = WithEnv({"CAIRN_STATE_DIR=" + j->state, "CAIRN_LAZY_EXEC=1"});
    CommandResult run = RunCommand({CAIRN_BIN, "run", "--name", name, "--dir", j->logs, "--", WorkloadPath(workload),
                                    j->work}, temp_->path(), j->env);
    if (!run.Exited(0)) return ::testing::AssertionFailure() << "cairn run: " << run.Describe();
    for (int i = 0; i < 1000 && !Exists(j->work + "/ready"); ++i) std::this_thread::sleep_for(20ms);
    if (!Exists(j->work + "/ready")) return ::testing::AssertionFailure() << "the job never got ready";
    pid_t init = InitOf(*j);
    CommandResult dump = RunCommand({CAIRN_BIN, "dump", "--job", name, "--dir", j->ckpt}, temp_->path(), j->env);
    if (!dump.Exited(0)) return ::testing::AssertionFailure() << "dump --job: " << dump.Describe();
    if (!WaitGone(init, 10s).gone) return ::testing::AssertionFailure() << "the job's init runs on after its dump";
    return ::testing::AssertionSuccess();
  }
  static pid_t InitOf(const LazyJob& j) {
    std::string text = ReadFile(j.state + "/jobs/" + j.name + ".job");
    std::string v = LineStartingWith(text, "host_pid=");
    return v.size() > 9 ? std::atoi(v.c_str() + 9) : 0;
  }
  // The command of the job whose init is `init`: the init's one child.
  // The job init's fuses (engine/lazy/fuse.h): its descriptors at 64 and above.
  static std::vector<int> FusesOf(pid_t init) {
    std::vector<int> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(init) + "/fd", ec)) {
      int n = std::atoi(e.path().filename().c_str());
      if (n >= 64) out.push_back(n);
    }
    return out;
  }
  static unsigned long FdFlags(pid_t pid, int fd) {
    std::string flags =
        LineStartingWith(ReadFile("/proc/" + std::to_string(pid) + "/fdinfo/" + std::to_string(fd)), "flags:");
    return flags.size() > 6 ? std::strtoul(flags.substr(6).c_str(), nullptr, 8) : 0;
  }
  static pid_t CommandOf(pid_t init) {
    std::ifstream in("/proc/" + std::to_string(init) + "/task/" + std::to_string(init) + "/children");
    pid_t child = 0;
    in >> child;
    return child;
  }

  int servers_ = 0;
};

class PageServerRoundTrip : public PageServerTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(PageServerRoundTrip, RestoresThroughThePageServer) {
  Workload w = MakeWorkload(GetParam());
  ASSERT_TRUE(StartReady(w));
  std::string out_before = w.Stdout(), err_before = w.Stderr();
  std::string ckpt = w.workdir() + "/ckpt";
  ASSERT_TRUE(DumpAndKill(w, ckpt));
  RoundTrip(w, ckpt, out_before, err_before);
}

// Single process with a large anonymous area, heap, threads, fork/mremap/munmap during prefetch.
INSTANTIATE_TEST_SUITE_P(Workloads, PageServerRoundTrip,
                         ::testing::Values("wl_mmap_anon", "wl_heap", "wl_threads", "wl_lazy_events"),
                         [](const ::testing::TestParamInfo<const char*>& i) { return std::string(i.param); });

TEST_F(PageServerTest, CompressedBlocks) {
  Workload w = MakeWorkload("wl_mmap_anon");
  ASSERT_TRUE(StartReady(w));
  std::string out_before = w.Stdout(), err_before = w.Stderr();
  std::string ckpt = w.workdir() + "/ckpt";
  ASSERT_TRUE(DumpAndKill(w, ckpt, {"--compress", "zstd"}));
  RoundTrip(w, ckpt, out_before, err_before);
}

// A chain: ck0 in full (tracking writes), ck1 incremental on it; the server serves both links and the
// restore takes each page from the newest link that holds it.
TEST_F(PageServerTest, IncrementalChain) {
  Workload w = MakeWorkload("wl_heap");
  ASSERT_TRUE(StartReady(w));
  std::string out_before = w.Stdout(), err_before = w.Stderr();
  std::string ck0 = w.workdir() + "/ck0", ck1 = w.workdir() + "/ck1";
  CommandResult c0 = Cairn({"dump", "--pid", std::to_string(w.pid()), "--dir", ck0, "--leave-running", "--track"});
  ASSERT_TRUE(c0.Exited(0)) << c0.Describe();
  CommandResult c1 = Cairn({"dump", "--pid", std::to_string(w.pid()), "--dir", ck1, "--parent", ck0});
  ASSERT_TRUE(c1.Exited(0)) << c1.Describe();
  ASSERT_TRUE(Matches(c1.out, "incremental")) << c1.Describe();
  ASSERT_TRUE(WaitGone(w.pid(), 10s).gone);
  RoundTrip(w, ck1, out_before, err_before);
}

TEST_F(PageServerTest, ProcessTree) {
  Workload w = MakeWorkload("tree/wl_tree_pipes");
  ASSERT_TRUE(StartReady(w));
  std::string out_before = w.Stdout(), err_before = w.Stderr();
  std::string ckpt = w.workdir() + "/ckpt";
  ASSERT_TRUE(DumpAndKill(w, ckpt, {"--tree"}));
  // Every process of the tree (announced in WORKDIR/proc-ROLE) must be gone and reaped: their pids are reused.
  for (const auto& e : fs::directory_iterator(w.workdir())) {
    std::string name = e.path().filename();
    if (name.rfind("proc-", 0) != 0 || name.find(".tmp") != std::string::npos) continue;
    ASSERT_TRUE(WaitGone(std::stoi(ReadFile(e.path())), 10s).gone) << name;
  }
  RoundTrip(w, ckpt, out_before, err_before);
}

// The server dies while the restored process runs and pages are still to come: the page handler
// must kill the process and say which server failed. The server sends slowly (--max-rate), so the
// 16 MiB area cannot be complete when it is killed: no timing luck.
TEST_F(PageServerTest, ServerKilledMidwayKillsTheProcess) {
  Workload w = MakeWorkload("wl_mmap_anon");
  ASSERT_TRUE(StartReady(w));
  std::string ckpt = w.workdir() + "/ckpt";
  ASSERT_TRUE(DumpAndKill(w, ckpt));
  std::string token = Token("token", "page-server-test-token-0123456789");
  Server s;
  ASSERT_TRUE(StartServer(ckpt, token, &s, {"--max-rate", "1024"}));  // 1 MiB/s: 16 s for the big area
  std::string err_path = w.workdir() + "/restore.err";
  CommandResult restore = RestoreDetachedTo(s, token, err_path, w.workdir());
  ASSERT_TRUE(restore.Exited(0)) << restore.Describe() << ReadFile(err_path);
  ASSERT_TRUE(IsAlive(w.pid())) << "the process must run before all its pages are in";
  ASSERT_EQ(::kill(s.pid, SIGKILL), 0);
  WaitGone(s.pid, 10s);
  std::string err;
  ASSERT_TRUE(KilledByPageHandler(w.pid(), err_path, &err)) << "(its page server died)";
  EXPECT_TRUE(Matches(err, "lazy restore of pid [0-9]+ failed; the process was killed")) << err;
  EXPECT_TRUE(Matches(err, "page server " + s.addr)) << "the error must name the server: " << err;
  EXPECT_TRUE(Matches(err, "connection (closed|lost)")) << err;
  EXPECT_EQ(w.Stdout().find("PASS"), std::string::npos) << w.Describe();
}

// The page handler itself killed (SIGKILL) while the process runs with pages still missing:
// those pages must not read as zeros. The handler's watcher keeps the userfaultfd registered
// (a fault waits) and kills the process, saying why. Before it, the process ran on with zero
// pages where its data had been.
TEST_F(PageServerTest, HandlerKilledMidwayKillsTheProcessInsteadOfLeavingZeros) {
  Workload w = MakeWorkload("wl_mmap_anon");
  ASSERT_TRUE(StartReady(w));
  std::string ckpt = w.workdir() + "/ckpt";
  ASSERT_TRUE(DumpAndKill(w, ckpt));
  std::string token = Token("token", "page-server-test-token-0123456789");
  Server s;
  ASSERT_TRUE(StartServer(ckpt, token, &s, {"--max-rate", "1024"}));  // 1 MiB/s: 16 s for the big area
  std::string err_path = w.workdir() + "/restore.err";
  CommandResult restore = RestoreDetachedTo(s, token, err_path, w.workdir(), /*exec_handler=*/true);
  ASSERT_TRUE(restore.Exited(0)) << restore.Describe() << ReadFile(err_path);
  ASSERT_TRUE(IsAlive(w.pid())) << "the process must run before all its pages are in";
  auto [handler, watcher] = HandlerAndWatcherOf(w.pid());
  ASSERT_GT(handler, 0) << "no page handler found for pid " << w.pid();
  ASSERT_EQ(::kill(handler, SIGKILL), 0);
  std::string err;
  ASSERT_TRUE(KilledByPageHandler(w.pid(), err_path, &err)) << "(its page handler was killed)";
  EXPECT_TRUE(Matches(err, "page handler died before every page was in")) << err;
  EXPECT_EQ(w.Stdout().find("PASS"), std::string::npos) << w.Describe();
  ::kill(s.pid, SIGKILL);
}

// A job's lazily restored command has a fuse (engine/lazy/fuse.h) that its init holds: with the
// page handler and its watcher SIGKILLed together, nothing of cairn's is left to kill the process,
// and the kernel does. Without the fuse the command would wait for its go file with missing
// pages (and then read zeros where its data was); here it dies at once, and so the job.
TEST_F(PageServerTest, AJobWhoseHandlerAndWatcherAreKilledTogetherDiesInsteadOfReadingZeros) {
  BecomeSubreaper();
  LazyJob j;
  ASSERT_TRUE(RunAndDumpJob("lz-fuse", "wl_mmap_anon", &j));
  std::string token = Token("token", "page-server-test-token-0123456789");
  Server s;
  // 1 MiB/s: 16 s for the big area. The job's checkpoint is sealed with its state directory's key.
  ASSERT_TRUE(StartServer(j.ckpt, token, &s, {"--max-rate", "1024", "--image-key", j.state + "/image.key"}));
  CommandResult restore = RunCommand({CAIRN_BIN, "restore", "--lazy", "--detach", "--page-server", s.addr,
                                      "--token-file", token}, temp_->path(), j.env);
  ASSERT_TRUE(restore.Exited(0)) << restore.Describe();
  pid_t init = InitOf(j);
  ASSERT_TRUE(IsAlive(init)) << restore.Describe();
  pid_t command = CommandOf(init);
  ASSERT_GT(command, 0);
  // The fuse as the job's init holds it: one pipe's read end, armed (O_ASYNC), high up.
  std::vector<int> fuses = FusesOf(init);
  ASSERT_EQ(fuses.size(), 1u) << "the job's init holds no fuse";
  std::string fuse = "/proc/" + std::to_string(init) + "/fd/" + std::to_string(fuses[0]);
  std::error_code ec;
  EXPECT_TRUE(absl::StartsWith(fs::read_symlink(fuse, ec).string(), "pipe:")) << fuse << ": " << ec.message();
  EXPECT_NE(FdFlags(init, fuses[0]) & O_ASYNC, 0u);
  auto [handler, watcher] = HandlerAndWatcherOf(command);
  ASSERT_GT(handler, 0) << "no page handler found for pid " << command;
  ASSERT_GT(watcher, 0) << "no watcher found for the page handler " << handler;
  ASSERT_EQ(::kill(watcher, SIGKILL), 0);
  ASSERT_EQ(::kill(handler, SIGKILL), 0);
  EXPECT_TRUE(WaitGone(command, 10s).gone) << "the job's command runs on with its page handler and watcher gone";
  // The init (this test's child once the restorer has exited: a subreaper) ends with its
  // command's status: killed by SIGKILL, not by the SIGSEGV of reading zeros.
  Ending end = WaitGone(init, 10s);
  EXPECT_TRUE(end.ExitedWith(128 + SIGKILL)) << "the job's init: " << end.Describe();
  EXPECT_EQ(ReadFile(j.logs + "/stdout.log").find("PASS"), std::string::npos);
  ::kill(s.pid, SIGKILL);
}

// The other side of the fuse: once every page is in, the handler disarms it and exits, and the
// job runs on; the init's fuse is not part of the job's next checkpoint, which restores whole
// and finishes.
TEST_F(PageServerTest, AJobLazilyRestoredRunsOnAfterItsPagesAreInAndCheckpointsAgain) {
  LazyJob j;
  ASSERT_TRUE(RunAndDumpJob("lz-on", "wl_mmap_anon", &j));
  CommandResult restore = RunCommand({CAIRN_BIN, "restore", "--lazy", "--detach", "--dir", j.ckpt}, temp_->path(), j.env);
  ASSERT_TRUE(restore.Exited(0)) << restore.Describe();
  pid_t init = InitOf(j);
  pid_t command = CommandOf(init);
  ASSERT_GT(command, 0);
  std::vector<int> fuses = FusesOf(init);
  ASSERT_EQ(fuses.size(), 1u) << "no fuse in the job's init";
  for (int i = 0; i < 1500 && HandlerAndWatcherOf(command).first != 0; ++i) std::this_thread::sleep_for(20ms);
  ASSERT_EQ(HandlerAndWatcherOf(command).first, 0) << "the page handler never finished";
  std::this_thread::sleep_for(200ms);
  ASSERT_TRUE(IsAlive(command)) << "the job's command died once its page handler had finished: "
                                << ReadFile(j.logs + "/stderr.log");
  EXPECT_EQ(FdFlags(init, fuses[0]) & O_ASYNC, 0u) << "fuse still armed";

  std::string again = *temp_ / "ckpt2";
  CommandResult dump = RunCommand({CAIRN_BIN, "dump", "--job", j.name, "--dir", again}, temp_->path(), j.env);
  ASSERT_TRUE(dump.Exited(0)) << dump.Describe();
  ASSERT_TRUE(WaitGone(init, 10s).gone);
  CommandResult eager = RunCommand({CAIRN_BIN, "restore", "--verify", "--detach", "--dir", again}, temp_->path(), j.env);
  ASSERT_TRUE(eager.Exited(0)) << eager.Describe();
  init = InitOf(j);
  EXPECT_TRUE(FusesOf(init).empty()) << "the old fuse came back with the job";
  WriteFileAtomic(j.work + "/go", "");
  EXPECT_TRUE(WaitGone(init, 60s).gone) << "the restored job did not finish";
  EXPECT_EQ(LastLine(ReadFile(j.logs + "/stdout.log")), "PASS") << ReadFile(j.logs + "/stderr.log");
}

// Same, attached: `cairn restore` waits for the process and must exit non-zero.
TEST_F(PageServerTest, ServerKilledMidwayAttachedRestoreFails) {
  Workload w = MakeWorkload("wl_mmap_anon");
  ASSERT_TRUE(StartReady(w));
  std::string ckpt = w.workdir() + "/ckpt";
  ASSERT_TRUE(DumpAndKill(w, ckpt));
  std::string token = Token("token", "page-server-test-token-0123456789");
  Server s;
  ASSERT_TRUE(StartServer(ckpt, token, &s, {"--max-rate", "1024"}));
  pid_t server_pid = s.pid;
  std::string server_err = s.err;
  // The restorer tells the server (logged with -v) once the processes run; then the server dies.
  std::thread killer([&] {
    for (int i = 0; i < 3000 && !Matches(ReadFile(server_err), "event=page_server_done who=0"); ++i) {
      std::this_thread::sleep_for(5ms);
    }
    ::kill(server_pid, SIGKILL);
  });
  CommandResult restore = RestoreFrom(s, token, /*detach=*/false);
  killer.join();
  WaitGone(s.pid, 10s);
  EXPECT_FALSE(restore.exit_code == 0) << "attached restore must fail when the page server dies " << restore.Describe();
  EXPECT_FALSE(restore.timed_out) << restore.Describe();
  EXPECT_TRUE(Matches(restore.err, "page server " + s.addr)) << restore.Describe();
  EXPECT_TRUE(Matches(restore.err, "the process was killed")) << restore.Describe();
  Ending end = WaitGone(w.pid(), 10s);
  EXPECT_TRUE(end.gone) << "the restored process still runs";
}

// A block damaged on the server's disk: the restoring side verifies every block it receives, so
// the handler meets the checksum mismatch (in its read-ahead stream or on a fault) and kills the
// process, naming the server.
TEST_F(PageServerTest, DamagedBlockOnTheServerKillsTheProcess) {
  Workload w = MakeWorkload("wl_mmap_anon");
  ASSERT_TRUE(StartReady(w));
  std::string ckpt = w.workdir() + "/ckpt";
  ASSERT_TRUE(DumpAndKill(w, ckpt));
  ASSERT_TRUE(DamageLargestPageBlock(ckpt));
  std::string token = Token("token", "page-server-test-token-0123456789");
  // The server checks the seal of what it would serve: it refuses this one.
  CommandResult refused = Cairn({"page-server", "--dir", ckpt, "--listen", "127.0.0.1:0", "--token-file", token});
  EXPECT_TRUE(refused.FailedCleanly()) << refused.Describe();
  EXPECT_TRUE(Matches(refused.err, "pages.img does not match its seal")) << refused.err;
  // Told to serve it unchecked, the restoring side still verifies every block it receives.
  Server s;
  ASSERT_TRUE(StartServer(ckpt, token, &s, {"--trust-unsigned"}));
  std::string err_path = w.workdir() + "/restore.err";
  CommandResult restore = RestoreDetachedTo(s, token, err_path, w.workdir());
  ASSERT_TRUE(restore.Exited(0)) << restore.Describe() << ReadFile(err_path);
  std::string err;
  ASSERT_TRUE(KilledByPageHandler(w.pid(), err_path, &err)) << "(a damaged page block)";
  EXPECT_TRUE(Matches(err, "checksum mismatch")) << err;
  EXPECT_TRUE(Matches(err, "page server " + s.addr)) << err;
  EXPECT_TRUE(Matches(err, "lazy restore of pid [0-9]+ failed; the process was killed")) << err;
  EXPECT_EQ(w.Stdout().find("PASS"), std::string::npos) << w.Describe();
}

TEST_F(PageServerTest, WrongTokenIsRefusedAndNothingIsRestored) {
  Workload w = MakeWorkload("wl_heap");
  ASSERT_TRUE(StartReady(w));
  std::string ckpt = w.workdir() + "/ckpt";
  ASSERT_TRUE(DumpAndKill(w, ckpt));
  Server s;
  ASSERT_TRUE(StartServer(ckpt, Token("token", "the-right-token-0123456789"), &s));
  CommandResult restore = RestoreFrom(s, Token("wrong", "the-wrong-token-0123456789"));
  EXPECT_TRUE(restore.FailedCleanly()) << restore.Describe();
  EXPECT_TRUE(Matches(restore.err, "page server " + s.addr + " refused the connection: wrong token")) << restore.Describe();
  EXPECT_FALSE(IsAlive(w.pid())) << "nothing may be restored with a wrong token";
  EXPECT_TRUE(IsAlive(s.pid)) << "a refused client must not stop the server";
  // The server logs the refusal once the answer is sent: give it a moment.
  for (int i = 0; i < 250 && !Matches(ReadFile(s.err), "page_server_refused.*wrong token"); ++i) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(Matches(ReadFile(s.err), "page_server_refused.*wrong token")) << ReadFile(s.err);
  // Without a token file at all: refused before connecting.
  CommandResult none = Cairn({"restore", "--lazy", "--page-server", s.addr});
  EXPECT_TRUE(none.FailedCleanly()) << none.Describe();
  EXPECT_TRUE(Matches(none.err, "needs --token-file")) << none.Describe();
}

TEST_F(PageServerTest, UnreachableServer) {
  // A port nobody listens on: bind one, then close it.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  std::string addr = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  CommandResult restore = Cairn({"restore", "--lazy", "--page-server", addr, "--token-file",
                                 Token("token", "page-server-test-token-0123456789")});
  EXPECT_TRUE(restore.FailedCleanly()) << restore.Describe();
  EXPECT_TRUE(Matches(restore.err, "cannot connect to page server " + addr + ": connection refused")) << restore.Describe();
  CommandResult both = Cairn({"restore", "--dir", *temp_ / "x", "--page-server", addr});
  EXPECT_TRUE(both.FailedCleanly()) << both.Describe();
  EXPECT_TRUE(Matches(both.err, "exactly one of --dir")) << both.Describe();
}

TEST_F(PageServerTest, BadServerInputFailsClearly) {
  std::string token = Token("token", "page-server-test-token-0123456789");
  CommandResult no_dir = Cairn({"page-server", "--dir", *temp_ / "nothing", "--listen", "127.0.0.1:0", "--token-file", token});
  EXPECT_TRUE(no_dir.FailedCleanly()) << no_dir.Describe();
  EXPECT_TRUE(Matches(no_dir.err, "cannot serve .*nothing.*does not exist")) << no_dir.Describe();

  Workload w = MakeWorkload("wl_heap");
  ASSERT_TRUE(StartReady(w));
  std::string ckpt = w.workdir() + "/ckpt";
  ASSERT_TRUE(DumpAndKill(w, ckpt));
  CommandResult no_token = Cairn({"page-server", "--dir", ckpt, "--listen", "127.0.0.1:0", "--token-file", *temp_ / "none"});
  EXPECT_TRUE(no_token.FailedCleanly()) << no_token.Describe();
  EXPECT_TRUE(Matches(no_token.err, "token file")) << no_token.Describe();
  std::string open_token = *temp_ / "open";
  WriteFile(open_token, "page-server-test-token-0123456789\n");
  ::chmod(open_token.c_str(), 0644);
  CommandResult unsafe = Cairn({"page-server", "--dir", ckpt, "--listen", "127.0.0.1:0", "--token-file", open_token});
  EXPECT_TRUE(unsafe.FailedCleanly()) << unsafe.Describe();
  EXPECT_TRUE(Matches(unsafe.err, "chmod 600")) << unsafe.Describe();

  Server s;
  ASSERT_TRUE(StartServer(ckpt, token, &s));
  CommandResult in_use = Cairn({"page-server", "--dir", ckpt, "--listen", s.addr, "--token-file", token});
  EXPECT_TRUE(in_use.FailedCleanly()) << in_use.Describe();
  EXPECT_TRUE(Matches(in_use.err, "already in use")) << in_use.Describe();
  CommandResult bad_addr = Cairn({"page-server", "--dir", ckpt, "--listen", "localhost", "--token-file", token});
  EXPECT_TRUE(bad_addr.FailedCleanly()) << bad_addr.Describe();
  EXPECT_TRUE(Matches(bad_addr.err, "must be HOST:PORT")) << bad_addr.Describe();
}

}  // namespace
}  // namespace cairn::testing
