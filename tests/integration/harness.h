// Test harness for the cairn integration tests: runs the `cairn` binary and the test workloads as
// real processes, and waits for them without pipes.
//
// Paths come from compile definitions: CAIRN_BIN (the cairn executable) and WORKLOAD_DIR (where the
// wl_* programs are built).
//
// Processes: the test process makes itself a child subreaper, so a process restored by
// `cairn restore --detach` is re-parented to it when cairn exits and its exit status can be collected
// with waitpid. WaitGone() also copes with a process that is not (or not yet) its child by polling
// /proc. Not thread-safe except where stated: tests drive it from one thread, plus RunCommand() from
// a background thread for attached restores.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace cairn::testing {

using namespace std::chrono_literals;

// The cairn binary under test.
std::string CairnBinary();

// Full path of workload `name` (e.g. "wl_threads").
std::string WorkloadPath(const std::string& name);

// Names of every wl_* executable in WORKLOAD_DIR, sorted.
std::vector<std::string> BuiltWorkloads();

struct CommandOptions {
  std::vector<std::string> env;  // extra "NAME=value" entries added to the test's environment
  std::chrono::milliseconds timeout = 60s;
  std::optional<unsigned long> rlimit_fsize;  // RLIMIT_FSIZE for the command, with SIGXFSZ ignored
};

// Shorthands for the common option sets.
CommandOptions WithTimeout(std::chrono::milliseconds timeout);
CommandOptions WithEnv(std::vector<std::string> env);
CommandOptions WithFileSizeLimit(unsigned long bytes);

struct CommandResult {
  pid_t pid = -1;
  bool timed_out = false;  // killed by the harness after CommandOptions::timeout
  int exit_code = -1;      // when it exited normally
  int term_signal = 0;     // when a signal killed it
  std::string out;
  std::string err;

  bool Exited(int code) const { return exit_code == code; }
  bool FailedCleanly() const { return !timed_out && exit_code > 0 && exit_code < 126; }
  // One line for failure messages: how it ended, then stdout and stderr.
  std::string Describe() const;
};

// Runs argv[0] (a path) with stdin from /dev/null and stdout/stderr captured through files in
// `scratch_dir` (not pipes: a restored process that inherited them must not keep a reader waiting).
// Thread-safe.
CommandResult RunCommand(const std::vector<std::string>& argv, const std::string& scratch_dir,
                         const CommandOptions& options = {});

// Makes a self-signed certificate for 127.0.0.1 and localhost with openssl: DIR/NAME.pem and
// DIR/NAME.key (0600). False when openssl is missing or fails.
bool MakeSelfSignedCert(const std::string& dir, const std::string& name);

// Creates /tmp/cairn-test-XXXXXX; removes it on destruction unless CAIRN_TEST_KEEP=1 is set.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// File helpers. ReadFile returns "" for a missing file.
std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& content);
// Writes path.tmp, then renames it to path.
void WriteFileAtomic(const std::string& path, const std::string& content);
bool Exists(const std::string& path);
// Regular files under `dir`, recursively, as paths relative to it, sorted.
std::vector<std::string> ListFilesRecursive(const std::string& dir);

// State letter of `pid` from /proc/PID/stat ('R', 'S', 'Z', 't', ...), or std::nullopt if it is gone.
std::optional<char> ProcessState(pid_t pid);
// True while `pid` exists and is not a zombie.
bool IsAlive(pid_t pid);
// argv[0] of `pid` from /proc/PID/cmdline ("" if unreadable).
std::string ProcessArgv0(pid_t pid);
// The children of `parent` (default: this process) named `comm` (a dump's guardian is
// re-parented to the test, a subreaper, when the dump dies).
std::vector<pid_t> ChildrenNamed(const std::string& comm, pid_t parent = ::getpid());
// Number of threads of `pid` (entries of /proc/PID/task), 0 if gone.
int ThreadCount(pid_t pid);

// How a process ended, if the harness could see it.
struct Ending {
  bool gone = false;             // the process no longer runs (exited, killed, or a zombie of another)
  std::optional<int> status;     // wait status, when this process reaped it
  std::string Describe() const;  // "exited 0", "killed by signal 9", "gone (status unknown)"
  bool ExitedWith(int code) const;
};

// Waits until `pid` is gone: reaps it when it is (or becomes) this process's child, otherwise polls
// /proc/PID until it disappears or is a zombie. Returns gone=false on timeout.
Ending WaitGone(pid_t pid, std::chrono::milliseconds timeout);

// Sends SIGKILL to `pid` if it is still alive and waits for it to go.
void KillAndWait(pid_t pid);

// Marks the calling process as a child subreaper (idempotent).
void BecomeSubreaper();

// A TCP port on 127.0.0.1 free at the time of the call (bound and released), or 0.
int FreeLoopbackPort();

// A python3 program (for `python3 -c`) serving one client on `host`:`port`: it sends back in
// upper case what it reads, until the client closes. `reuseaddr`: its listener sets SO_REUSEADDR.
std::string UppercaseEchoServerPy(const std::string& host, int port, bool reuseaddr);

// Starts argv[0] (a path) as a child with stdin, stdout and stderr redirected to the given regular
// files (stdout and stderr truncated). Returns its PID, or -1 if fork failed.
pid_t SpawnProgram(const std::vector<std::string>& argv, const std::string& stdin_path, const std::string& stdout_path,
                   const std::string& stderr_path, const std::vector<std::string>& env = {});

// A test workload started as `wl_<name> WORKDIR`, stdin from an empty regular file, stdout
// (O_TRUNC) and stderr (O_APPEND) into WORKDIR/stdout and WORKDIR/stderr.
class Workload {
 public:
  Workload(std::string name, std::string workdir) : name_(std::move(name)), workdir_(std::move(workdir)) {}

  // Forks and execs the workload (as a child of the calling process, in its session).
  void Start();
  // Makes Start exec `argv` with the workload's command line appended: a program that sets
  // something up and execs the rest in the same process (`unshare --time ...`).
  void ExecThrough(std::vector<std::string> argv) { through_ = std::move(argv); }
  // Waits for WORKDIR/ready; fails if the process exits first or the timeout passes.
  ::testing::AssertionResult WaitReady(std::chrono::milliseconds timeout = 20s);
  // Creates WORKDIR/go atomically with `content` (the workload's instructions, usually none).
  void Go(const std::string& content = "");
  void RemoveGo();

  pid_t pid() const { return pid_; }
  const std::string& name() const { return name_; }
  const std::string& workdir() const { return workdir_; }
  std::string Stdout() const { return ReadFile(workdir_ + "/stdout"); }
  std::string Stderr() const { return ReadFile(workdir_ + "/stderr"); }
  // Everything a failure message needs about this workload.
  std::string Describe() const;

 private:
  std::string name_;
  std::string workdir_;
  std::vector<std::string> through_;
  pid_t pid_ = -1;
};

// The last non-empty line of `text`.
std::string LastLine(const std::string& text);
// The first line starting with `prefix` ("" if none).
std::string LineStartingWith(const std::string& text, const std::string& prefix);
// True when `text` (case-insensitively) matches the extended regular expression `pattern`.
bool Matches(const std::string& text, const std::string& pattern);

// A deterministic python3 computation of a few CPU seconds (about 2 million rounds a second
// here): `python3 -I -c kPythonHashChain OUT ROUNDS [GATE]` writes "<digest> <acc> ..." to OUT
// through a rename, so a partial result never shows, then prints "done". Given GATE, it waits
// for that file to exist before it writes: a test that checkpoints or moves it cannot lose the
// race with its end, however slow the machine. Real-program round trips compare its result
// with an uninterrupted run's.
extern const char kPythonHashChain[];

// Checks the workload's output says PASS and nothing says FAIL.
::testing::AssertionResult OutputPasses(const Workload& w);

// Waits for a restored workload (`who`, for messages: "restored workload", "root"...) to
// finish, then checks it exited 0 with PASS, and that the stdout and stderr it wrote before
// the checkpoint are still at the start of each file.
::testing::AssertionResult FinishedWithPass(const Workload& w, const std::string& out_before,
                                            const std::string& err_before, const std::string& who);

// Base fixture: a fresh temp dir per test; every process the test registers is killed in TearDown.
class CairnTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // Registers a PID to kill after the test if it still runs `argv0` in the PID namespace it was in
  // when tracked (checked so that a PID reused by an unrelated process is left alone: PIDs wrap
  // at 32768 here, and another test's python3 job in a daemon's PID namespace can get the PID of
  // this test's finished python3). A process restored with the same PID in the same namespace
  // is still killed.
  void Track(pid_t pid, const std::string& argv0);

  // Flips a byte in the last page block of the checkpoint's largest stretch of memory saved in
  // one piece (found with `cairn inspect --json`), which must be at least 1 MiB: a damaged
  // image for the checksum tests.
  ::testing::AssertionResult DamageLargestPageBlock(const std::string& ckpt);

  // Waits for lazily restored process `pid` to be killed (SIGKILL) by its page handler, and sets
  // *err to the handler's message from `err_path` (written as it kills it): the failure tests of
  // a lazy restore (damaged image, page server gone).
  ::testing::AssertionResult KilledByPageHandler(pid_t pid, const std::string& err_path, std::string* err);

  // Runs `cairn ARGS...`; its output files go to the temp dir.
  CommandResult Cairn(const std::vector<std::string>& args, const CommandOptions& options = {});
  CommandResult Dump(pid_t pid, const std::string& dir, bool leave_running = false, const CommandOptions& options = {});
  CommandResult Restore(const std::string& dir, bool detach = true, const CommandOptions& options = {});
  CommandResult Inspect(const std::string& dir);

  // Makes a Workload for `name` in a new directory under the temp dir (not started yet).
  Workload MakeWorkload(const std::string& name, const std::string& subdir = "work");
  // Starts `w`, tracks its PID and waits until it is ready.
  ::testing::AssertionResult StartReady(Workload& w);

  std::unique_ptr<TempDir> temp_;
  struct Tracked {
    pid_t pid;
    std::string argv0;
    uint64_t pid_ns;  // inode of /proc/PID/ns/pid when tracked; 0 when it had already gone
  };
  std::vector<Tracked> tracked_;
};

}  // namespace cairn::testing
