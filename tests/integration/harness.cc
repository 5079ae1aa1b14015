#include "harness.h"

#include <dirent.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#ifndef CAIRN_BIN
#error "CAIRN_BIN must name the cairn binary"
#endif
#ifndef WORKLOAD_DIR
#error "WORKLOAD_DIR must name the directory of the wl_* workloads"
#endif

extern char** environ;

namespace cairn::testing {
namespace fs = std::filesystem;

std::string CairnBinary() { return CAIRN_BIN; }

std::string WorkloadPath(const std::string& name) { return std::string(WORKLOAD_DIR) + "/" + name; }

std::vector<std::string> BuiltWorkloads() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(WORKLOAD_DIR, ec)) {
    std::string name = entry.path().filename().string();
    if (name.rfind("wl_", 0) == 0 && entry.is_regular_file() && ::access(entry.path().c_str(), X_OK) == 0) {
      names.push_back(name);
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

// ---------------------------------------------------------------------------------------------
// Files

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
}

void WriteFileAtomic(const std::string& path, const std::string& content) {
  WriteFile(path + ".tmp", content);
  ::rename((path + ".tmp").c_str(), path.c_str());
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

std::vector<std::string> ListFilesRecursive(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    if (it->is_regular_file()) files.push_back(fs::relative(it->path(), dir).string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

TempDir::TempDir() {
  char tmpl[] = "/tmp/cairn-test-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    ADD_FAILURE() << "mkdtemp: " << strerror(errno);
    path_ = "/tmp/cairn-test-failed";
    return;
  }
  path_ = tmpl;
}

TempDir::~TempDir() {
  const char* keep = ::getenv("CAIRN_TEST_KEEP");
  if (keep && std::string(keep) == "1") {
    std::fprintf(stderr, "keeping %s (CAIRN_TEST_KEEP=1)\n", path_.c_str());
    return;
  }
  std::error_code ec;
  fs::remove_all(path_, ec);
}

// ---------------------------------------------------------------------------------------------
// Processes

std::vector<pid_t> ChildrenNamed(const std::string& comm, pid_t parent) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  for (dirent* e; d != nullptr && (e = ::readdir(d)) != nullptr;) {
    pid_t pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
    size_t close = stat.rfind(')');
    size_t open = stat.find('(');
    if (close == std::string::npos || open == std::string::npos) continue;
    if (stat.substr(open + 1, close - open - 1) != comm) continue;
    pid_t ppid = std::atoi(stat.c_str() + close + 4);  // ") S PPID"
    if (ppid == parent) out.push_back(pid);
  }
  if (d != nullptr) ::closedir(d);
  return out;
}

std::optional<char> ProcessState(pid_t pid) {
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return std::nullopt;
  return stat[paren + 2];
}

bool IsAlive(pid_t pid) {
  auto state = ProcessState(pid);
  return state.has_value() && *state != 'Z' && *state != 'X';
}

std::string ProcessArgv0(pid_t pid) {
  std::string cmdline = ReadFile("/proc/" + std::to_string(pid) + "/cmdline");
  return cmdline.substr(0, cmdline.find('\0'));
}

int ThreadCount(pid_t pid) {
  int n = 0;
  std::error_code ec;
  for (auto it = fs::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    n++;
  }
  return n;
}

std::string Ending::Describe() const {
  if (!gone) return "still running";
  if (!status) return "gone (exit status not visible to the harness)";
  if (WIFEXITED(*status)) return "exited " + std::to_string(WEXITSTATUS(*status));
  if (WIFSIGNALED(*status)) return "killed by signal " + std::to_string(WTERMSIG(*status));
  return "wait status " + std::to_string(*status);
}

bool Ending::ExitedWith(int code) const { return gone && status && WIFEXITED(*status) && WEXITSTATUS(*status) == code; }

Ending WaitGone(pid_t pid, std::chrono::milliseconds timeout) {
  Ending ending;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(pid, &status, WNOHANG | __WALL);
    if (r == pid) {
      ending.gone = true;
      ending.status = status;
      return ending;
    }
    if (r < 0 && errno == ECHILD) {
      // Not our child (yet): a restored process before cairn exits, or one re-parented elsewhere.
      auto state = ProcessState(pid);
      if (!state || *state == 'X') {
        ending.gone = true;
        return ending;
      }
      if (*state == 'Z') {
        // Someone else's zombie; it may still be re-parented to us when its parent exits.
        std::this_thread::sleep_for(20ms);
        if (::waitpid(pid, &status, WNOHANG | __WALL) == pid) ending.status = status;
        ending.gone = true;
        return ending;
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) return ending;
    std::this_thread::sleep_for(10ms);
  }
}

void KillAndWait(pid_t pid) {
  if (pid <= 0) return;
  if (ProcessState(pid).has_value()) ::kill(pid, SIGKILL);
  WaitGone(pid, 10s);
}

void BecomeSubreaper() { ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); }

// ---------------------------------------------------------------------------------------------
// Commands

namespace {

std::atomic<int> g_command_counter{0};

// Everything the child needs, prepared before fork: only async-signal-safe calls happen after it.
struct ExecPlan {
  std::vector<std::string> argv_storage;
  std::vector<std::string> env_storage;
  std::vector<char*> argv;
  std::vector<char*> envp;
  std::string stdin_path, stdout_path, stderr_path;
  int stdout_flags = O_WRONLY | O_CREAT | O_TRUNC;
  int stderr_flags = O_WRONLY | O_CREAT | O_TRUNC;
  std::optional<unsigned long> rlimit_fsize;

  void Finish(const std::vector<std::string>& extra_env) {
    for (auto& a : argv_storage) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (char** e = environ; *e; ++e) {
      std::string entry = *e;
      std::string name = entry.substr(0, entry.find('='));
      bool overridden = std::any_of(extra_env.begin(), extra_env.end(),
                                    [&](const std::string& x) { return x.substr(0, x.find('=')) == name; });
      if (!overridden) env_storage.push_back(entry);
    }
    for (const auto& e : extra_env) env_storage.push_back(e);
    for (auto& e : env_storage) envp.push_back(e.data());
    envp.push_back(nullptr);
  }
};

[[noreturn]] void ExecChild(const ExecPlan& plan) {
  // Fresh signal state: the test runner's dispositions and mask must not leak into the child.
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig = 1; sig < NSIG; sig++) {
    if (sig != SIGKILL && sig != SIGSTOP) ::signal(sig, SIG_DFL);
  }
  if (plan.rlimit_fsize) {
    struct rlimit rl = {*plan.rlimit_fsize, *plan.rlimit_fsize};
    ::setrlimit(RLIMIT_FSIZE, &rl);
    ::signal(SIGXFSZ, SIG_IGN);  // writes past the limit fail with EFBIG instead of killing
  }
  int in = ::open(plan.stdin_path.c_str(), O_RDONLY);
  int out = ::open(plan.stdout_path.c_str(), plan.stdout_flags, 0644);
  int err = ::open(plan.stderr_path.c_str(), plan.stderr_flags, 0644);
  if (in < 0 || out < 0 || err < 0) ::_exit(126);
  ::dup2(in, 0);
  ::dup2(out, 1);
  ::dup2(err, 2);
  ::close_range(3, ~0U, 0);
  ::execve(plan.argv[0], plan.argv.data(), plan.envp.data());
  const char msg[] = "exec failed\n";
  ssize_t ignored = ::write(2, msg, sizeof msg - 1);
  (void)ignored;
  ::_exit(127);
}

pid_t Spawn(const ExecPlan& plan) {
  pid_t pid = ::fork();
  if (pid == 0) ExecChild(plan);
  return pid;
}

}  // namespace

CommandOptions WithTimeout(std::chrono::milliseconds timeout) {
  CommandOptions o;
  o.timeout = timeout;
  return o;
}

CommandOptions WithEnv(std::vector<std::string> env) {
  CommandOptions o;
  o.env = std::move(env);
  return o;
}

CommandOptions WithFileSizeLimit(unsigned long bytes) {
  CommandOptions o;
  o.rlimit_fsize = bytes;
  return o;
}

std::string CommandResult::Describe() const {
  std::ostringstream ss;
  ss << "[pid " << pid << ", ";
  if (timed_out) {
    ss << "timed out";
  } else if (term_signal) {
    ss << "killed by signal " << term_signal;
  } else {
    ss << "exit " << exit_code;
  }
  ss << "]\n  stdout: " << out << "\n  stderr: " << err;
  return ss.str();
}

CommandResult RunCommand(const std::vector<std::string>& argv, const std::string& scratch_dir,
                         const CommandOptions& options) {
  int n = g_command_counter.fetch_add(1);
  ExecPlan plan;
  plan.argv_storage = argv;
  plan.stdin_path = "/dev/null";
  plan.stdout_path = scratch_dir + "/cmd-" + std::to_string(n) + ".out";
  plan.stderr_path = scratch_dir + "/cmd-" + std::to_string(n) + ".err";
  plan.rlimit_fsize = options.rlimit_fsize;
  plan.Finish(options.env);

  CommandResult result;
  result.pid = Spawn(plan);
  if (result.pid < 0) {
    result.err = std::string("fork: ") + strerror(errno);
    return result;
  }
  auto deadline = std::chrono::steady_clock::now() + options.timeout;
  int status = 0;
  for (;;) {
    pid_t r = ::waitpid(result.pid, &status, WNOHANG);
    if (r == result.pid) break;
    if (r < 0 && errno != EINTR) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      result.timed_out = true;
      ::kill(result.pid, SIGKILL);
      ::waitpid(result.pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(5ms);
  }
  if (!result.timed_out) {
    if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) result.term_signal = WTERMSIG(status);
  }
  result.out = ReadFile(plan.stdout_path);
  result.err = ReadFile(plan.stderr_path);
  return result;
}

pid_t SpawnProgram(const std::vector<std::string>& argv, const std::string& stdin_path, const std::string& stdout_path,
                   const std::string& stderr_path, const std::vector<std::string>& env) {
  ExecPlan plan;
  plan.argv_storage = argv;
  plan.stdin_path = stdin_path;
  plan.stdout_path = stdout_path;
  plan.stderr_path = stderr_path;
  plan.Finish(env);
  return Spawn(plan);
}

// ---------------------------------------------------------------------------------------------
// Workloads

void Workload::Start() {
  fs::create_directories(workdir_);
  WriteFile(workdir_ + "/stdin", "");
  ExecPlan plan;
  plan.argv_storage = through_;
  plan.argv_storage.insert(plan.argv_storage.end(), {WorkloadPath(name_), workdir_});
  plan.stdin_path = workdir_ + "/stdin";
  plan.stdout_path = workdir_ + "/stdout";
  plan.stderr_path = workdir_ + "/stderr";
  // stdout at an offset the restore must keep; stderr in append mode, as `2>>` would open it.
  plan.stdout_flags = O_WRONLY | O_CREAT | O_TRUNC;
  plan.stderr_flags = O_WRONLY | O_CREAT | O_TRUNC | O_APPEND;
  plan.Finish({});
  pid_ = Spawn(plan);
}

::testing::AssertionResult Workload::WaitReady(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return ::testing::AssertionFailure() << name_ << " did not start";
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!Exists(workdir_ + "/ready")) {
    if (!IsAlive(pid_)) {
      Ending e = WaitGone(pid_, 1s);
      return ::testing::AssertionFailure() << name_ << " ended before it was ready (" << e.Describe() << ")\n"
                                           << Describe();
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return ::testing::AssertionFailure() << name_ << " not ready after " << timeout.count() << " ms\n" << Describe();
    }
    std::this_thread::sleep_for(5ms);
  }
  std::string content = ReadFile(workdir_ + "/ready");
  if (content != std::to_string(pid_) + "\n") {
    return ::testing::AssertionFailure() << name_ << ": ready holds '" << content << "', want its pid " << pid_;
  }
  return ::testing::AssertionSuccess();
}

void Workload::Go(const std::string& content) { WriteFileAtomic(workdir_ + "/go", content); }

void Workload::RemoveGo() { ::unlink((workdir_ + "/go").c_str()); }

std::string Workload::Describe() const {
  std::ostringstream ss;
  ss << "workload " << name_ << " (pid " << pid_ << ", dir " << workdir_ << ")\n  stdout: " << Stdout()
     << "\n  stderr: " << Stderr().substr(0, 2000);
  return ss.str();
}

std::string LastLine(const std::string& text) {
  size_t end = text.find_last_not_of('\n');
  if (end == std::string::npos) return "";
  size_t start = text.rfind('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1, end - (start == std::string::npos ? 0 : start + 1) + 1);
}

std::string LineStartingWith(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) return line;
  }
  return "";
}

bool Matches(const std::string& text, const std::string& pattern) {
  return std::regex_search(text, std::regex(pattern, std::regex::extended | std::regex::icase));
}

::testing::AssertionResult OutputPasses(const Workload& w) {
  std::string out = w.Stdout();
  if (LastLine(out) != "PASS" || !LineStartingWith(out, "FAIL").empty()) {
    return ::testing::AssertionFailure() << "expected PASS from " << w.Describe();
  }
  return ::testing::AssertionSuccess();
}

// ---------------------------------------------------------------------------------------------
// Fixture

void CairnTest::SetUp() {
  BecomeSubreaper();
  temp_ = std::make_unique<TempDir>();
  // Readable by other users: some tests run cairn as nobody.
  ::chmod(temp_->path().c_str(), 0755);
}

namespace {
uint64_t PidNamespaceOf(pid_t pid) {
  struct stat st {};
  return ::stat(("/proc/" + std::to_string(pid) + "/ns/pid").c_str(), &st) == 0 ? st.st_ino : 0;
}
}  // namespace

void CairnTest::Track(pid_t pid, const std::string& argv0) { tracked_.push_back({pid, argv0, PidNamespaceOf(pid)}); }

void CairnTest::TearDown() {
  for (const Tracked& t : tracked_) {
    // A program may retitle itself: redis-server's argv reads "/usr/bin/redis-server 127.0.0.1:PORT".
    std::string argv0 = ProcessArgv0(t.pid);
    if (argv0 != t.argv0 && argv0.rfind(t.argv0 + " ", 0) != 0) continue;
    if (t.pid_ns != 0 && PidNamespaceOf(t.pid) != t.pid_ns) continue;  // the PID was reused elsewhere
    KillAndWait(t.pid);
  }
  // Reap anything else re-parented to us (helpers cairn left behind).
  while (::waitpid(-1, nullptr, WNOHANG | __WALL) > 0) {
  }
  if (HasFailure()) std::fprintf(stderr, "test directory: %s\n", temp_->path().c_str());
  temp_.reset();
}

::testing::AssertionResult CairnTest::KilledByPageHandler(pid_t pid, const std::string& err_path, std::string* err) {
  Ending end = WaitGone(pid, 20s);
  if (!end.gone) return ::testing::AssertionFailure() << "the restored process still runs: " << ReadFile(err_path);
  if (!end.status || !WIFSIGNALED(*end.status) || WTERMSIG(*end.status) != SIGKILL) {
    return ::testing::AssertionFailure() << "want killed by SIGKILL, got " << end.Describe();
  }
  err->clear();
  for (int i = 0; i < 200 && !Matches(*err, "killed"); ++i) {
    std::this_thread::sleep_for(20ms);
    *err = ReadFile(err_path);
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult CairnTest::DamageLargestPageBlock(const std::string& ckpt) {
  // Blocks are listed as {"vaddr", "length", "fileOffset", ...} by inspect --json. Dumps cut
  // memory into blocks of about 1 MiB, so the largest stretch of memory saved in one piece
  // (blocks that follow each other) is found, and its last block damaged.
  CommandResult meta = Cairn({"inspect", ckpt, "--json"});
  if (!meta.Exited(0)) return ::testing::AssertionFailure() << meta.Describe();
  std::regex block_re(
      "\"vaddr\":\\s*\"?(\\d+)\"?,\\s*\"length\":\\s*\"?(\\d+)\"?,\\s*\"(?:fileOffset|file_offset)\":\\s*\"?(\\d+)");
  uint64_t best_len = 0, best_off = 0, best_block = 0;
  uint64_t run_end = 0, run_len = 0;
  for (std::sregex_iterator it(meta.out.begin(), meta.out.end(), block_re), end; it != end; ++it) {
    uint64_t vaddr = std::stoull((*it)[1]), len = std::stoull((*it)[2]), off = std::stoull((*it)[3]);
    run_len = vaddr == run_end ? run_len + len : len;
    run_end = vaddr + len;
    if (run_len > best_len) best_len = run_len, best_off = off, best_block = len;
  }
  if (best_len < (1u << 20)) {
    return ::testing::AssertionFailure() << "no large page block found in " << meta.out.substr(0, 2000);
  }
  std::fstream f(ckpt + "/pages.img", std::ios::in | std::ios::out | std::ios::binary);
  uint64_t at = best_off + best_block - 4096 + 100;  // in the block's last page
  f.seekg(static_cast<std::streamoff>(at));
  char c = 0;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(at));
  f.put(static_cast<char>(c ^ 0x5a));
  if (!f) return ::testing::AssertionFailure() << "could not rewrite " << ckpt << "/pages.img at " << at;
  return ::testing::AssertionSuccess();
}

CommandResult CairnTest::Cairn(const std::vector<std::string>& args, const CommandOptions& options) {
  std::vector<std::string> argv = {CairnBinary()};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, temp_->path(), options);
}

CommandResult CairnTest::Dump(pid_t pid, const std::string& dir, bool leave_running, const CommandOptions& options) {
  std::vector<std::string> args = {"dump", "--pid", std::to_string(pid), "--dir", dir};
  if (leave_running) args.push_back("--leave-running");
  return Cairn(args, options);
}

CommandResult CairnTest::Restore(const std::string& dir, bool detach, const CommandOptions& options) {
  // Every round trip of the suite is also a test of --verify: a restore it finds different
  // from its image fails the test with the difference named.
  std::vector<std::string> args = {"restore", "--verify", "--dir", dir};
  if (detach) args.push_back("--detach");
  return Cairn(args, options);
}

CommandResult CairnTest::Inspect(const std::string& dir) { return Cairn({"inspect", dir}); }

Workload CairnTest::MakeWorkload(const std::string& name, const std::string& subdir) {
  return Workload(name, *temp_ / subdir);
}

::testing::AssertionResult CairnTest::StartReady(Workload& w) {
  w.Start();
  Track(w.pid(), WorkloadPath(w.name()));
  return w.WaitReady();
}

::testing::AssertionResult FinishedWithPass(const Workload& w, const std::string& out_before,
                                            const std::string& err_before, const std::string& who) {
  Ending end = WaitGone(w.pid(), 30s);
  if (!end.gone) return ::testing::AssertionFailure() << who << " did not finish within 30 s\n" << w.Describe();
  if (end.status && !end.ExitedWith(0)) return ::testing::AssertionFailure() << who << " " << end.Describe() << "\n" << w.Describe();
  auto pass = OutputPasses(w);
  if (!pass) return pass;
  std::string out = w.Stdout(), err = w.Stderr();
  if (out.compare(0, out_before.size(), out_before) != 0) {
    return ::testing::AssertionFailure() << "stdout from before the checkpoint was overwritten:\nbefore: " << out_before
                                         << "\nafter: " << out;
  }
  if (err.compare(0, err_before.size(), err_before) != 0) {
    return ::testing::AssertionFailure() << "stderr from before the checkpoint was overwritten";
  }
  return ::testing::AssertionSuccess();
}

const char kPythonHashChain[] = R"(
import hashlib, os, sys, time
out, n = sys.argv[1], int(sys.argv[2])
gate = sys.argv[3] if len(sys.argv) > 3 else None
h = hashlib.sha256(b"cairn").digest()
acc = 0
table = {}
for i in range(n):
    h = hashlib.sha256(h).digest()
    acc = (acc * 31 + h[0]) % 1000000007
    if i % 1000 == 0:
        table[i] = h.hex()
while gate and not os.path.exists(gate):
    time.sleep(0.02)
with open(out + ".tmp", "w") as f:
    f.write("%s %d %d %s\n" % (h.hex(), acc, len(table), table[max(table)]))
os.rename(out + ".tmp", out)
print("done")
)";

bool MakeSelfSignedCert(const std::string& dir, const std::string& name) {
  std::string key = dir + "/" + name + ".key";
  CommandResult r = RunCommand({"/usr/bin/openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                                "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                                "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", key, "-out",
                                dir + "/" + name + ".pem"},
                               dir);
  return r.Exited(0) && ::chmod(key.c_str(), 0600) == 0;
}

std::string UppercaseEchoServerPy(const std::string& host, int port, bool reuseaddr) {
  return "import socket\n"
         "l = socket.socket()\n" +
         std::string(reuseaddr ? "l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n" : "") +
         "l.bind(('" + host + "', " + std::to_string(port) + "))\n"
         "l.listen()\n"
         "c, _ = l.accept()\n"
         "while True:\n"
         "    d = c.recv(100)\n"
         "    if not d:\n"
         "        break\n"
         "    c.sendall(d.upper())\n";
}

int FreeLoopbackPort() {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), len) == 0 && ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(s);
  return port;
}

}  // namespace cairn::testing
