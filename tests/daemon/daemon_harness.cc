#include "daemon_harness.h"

#include <arpa/inet.h>
#include <time.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <thread>

namespace cairn::testing {

DaemonProcess::DaemonProcess(std::string dir, std::string node, std::vector<std::string> extra,
                             std::vector<std::string> env)
    : dir_(std::move(dir)), extra_(std::move(extra)), env_(std::move(env)) {
  // Unique per test directory: tests running at the same time must not share job cgroups
  // (cairn/NODE.JOB); the same directory gives the same name, so a restarted daemon is the same node.
  node_ = node + "-" + dir_.substr(dir_.size() - std::min<size_t>(6, dir_.size()));
  state_ = dir_ + "/" + node_ + "-state";
  socket_ = dir_ + "/" + node_ + ".sock";
  log_ = dir_ + "/" + node_ + ".log";
}

DaemonProcess::~DaemonProcess() {
  if (pid_ > 0 && IsAlive(pid_)) {
    KillJobs();
    Kill(SIGKILL);
    Wait(10s);
  }
  // The daemon's default spool for outgoing migrations (cairnd --spool-dir), outside the test
  // directory; it is empty once its migrations are done.
  ::rmdir(("/dev/shm/cairnd-" + node_).c_str());
}

void DaemonProcess::PrivateStateDir() {
  // sh's $0 is the state directory, "$@" the daemon's command line that Start appends.
  for (const char* arg : {"/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
                          "mkdir -p \"$0\" && mount -t tmpfs -o mode=0700 cairnd-state \"$0\" && exec \"$@\""}) {
    prefix_.push_back(arg);
  }
  prefix_.push_back(state_);
}

::testing::AssertionResult DaemonProcess::Start(std::chrono::milliseconds timeout) {
  std::vector<std::string> argv = {CAIRND_BIN, "--node", node_, "--state-dir", state_, "--socket", socket_,
                                   "--tick", "0.2", "--cairn-bin", CAIRN_BIN};
  // The daemons of a test are one cluster: one image key (made by the first to start).
  if (std::find(extra_.begin(), extra_.end(), "--image-key") == extra_.end()) {
    argv.insert(argv.end(), {"--image-key", dir_ + "/cluster-image.key"});
  }
  argv.insert(argv.end(), extra_.begin(), extra_.end());
  argv.insert(argv.begin(), prefix_.begin(), prefix_.end());
  WriteFile(dir_ + "/empty", "");
  // Appends, so the log of a restarted daemon keeps the earlier run's.
  std::string prev = ReadFile(log_);
  pid_ = SpawnProgram(argv, dir_ + "/empty", log_ + ".run", log_ + ".run", env_);
  if (pid_ <= 0) return ::testing::AssertionFailure() << "cannot start cairnd";
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!IsAlive(pid_)) {
      WriteFile(log_, prev + ReadFile(log_ + ".run"));
      return ::testing::AssertionFailure() << "cairnd " << node_ << " exited: " << ReadFile(log_ + ".run");
    }
    if (Exists(socket_)) {
      CommandResult r = Cairn({"job", "list"}, 10s);
      if (r.Exited(0)) return ::testing::AssertionSuccess();
    }
    std::this_thread::sleep_for(50ms);
  }
  return ::testing::AssertionFailure() << "cairnd " << node_ << " did not answer in time: " << ReadFile(log_ + ".run");
}

void DaemonProcess::Kill(int sig) {
  if (pid_ > 0) ::kill(pid_, sig);
}

Ending DaemonProcess::Wait(std::chrono::milliseconds timeout) {
  Ending e = WaitGone(pid_, timeout);
  WriteFile(log_, ReadFile(log_) + ReadFile(log_ + ".run"));
  return e;
}

void DaemonProcess::KillJobs() {
  CommandResult r = Cairn({"job", "list", "--json"}, 10s);
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  if (j.is_discarded() || !j.contains("jobs")) return;
  for (const auto& job : j["jobs"]) {
    if (job.value("state", "") == "running" && job.value("host_pid", 0) > 0) ::kill(job["host_pid"].get<int>(), SIGKILL);
  }
}

CommandResult DaemonProcess::Cairn(std::vector<std::string> args, std::chrono::milliseconds timeout) const {
  std::vector<std::string> argv = {CAIRN_BIN};
  // Before a "--" that starts the job's command, if there is one.
  auto dashes = std::find(args.begin(), args.end(), "--");
  args.insert(dashes, {"--socket", socket_});
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, dir_, WithTimeout(timeout));
}

nlohmann::json DaemonProcess::Json(std::vector<std::string> args) const {
  args.insert(std::find(args.begin(), args.end(), "--"), "--json");
  CommandResult r = Cairn(args);
  EXPECT_TRUE(r.Exited(0)) << r.Describe();
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << "not JSON: " << r.Describe();
  return j.is_discarded() ? nlohmann::json() : j;
}

::testing::AssertionResult MetadataResponder::Start(std::chrono::milliseconds timeout) {
  std::filesystem::create_directories(dir_);
  WriteFile(dir_ + "/stdin", "");
  pid_ = SpawnProgram({"/usr/bin/python3", METADATA_RESPONDER, dir_, dir_ + "/port"}, dir_ + "/stdin",
                      dir_ + "/stdout", dir_ + "/stderr", {});
  if (pid_ <= 0) return ::testing::AssertionFailure() << "cannot start " << METADATA_RESPONDER;
  if (!WaitFor([&] { return Exists(dir_ + "/port") || !IsAlive(pid_); }, timeout) || !Exists(dir_ + "/port")) {
    return ::testing::AssertionFailure() << "metadata responder did not start: " << ReadFile(dir_ + "/stderr");
  }
  port_ = std::stoi(ReadFile(dir_ + "/port"));
  return ::testing::AssertionSuccess();
}

void MetadataResponder::Stop() {
  if (pid_ > 0 && IsAlive(pid_)) KillAndWait(pid_);
  pid_ = -1;
}

void MetadataResponder::SetNotice(const std::string& cloud, const std::string& content) {
  WriteFileAtomic(dir_ + "/" + cloud, content);
}

int FreeTcpPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::string JobFreezer(const std::string& node, const std::string& job) {
  std::string s = ReadFile("/sys/fs/cgroup/freezer/cairn/" + node + "." + job + "/freezer.state");
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

FaultCut KillAtFaultPoint(const DaemonProcess& caller, const std::vector<std::string>& args, DaemonProcess& victim,
                          const std::string& stage) {
  FaultCut cut;
  std::thread call([&] { cut.call = caller.Cairn(args, 90s); });
  cut.reached = WaitFor([&] { return victim.RunLog().find("fault point " + stage) != std::string::npos; }, 60s);
  victim.Kill(SIGKILL);
  victim.Wait();
  call.join();
  return cut;
}

int DaemonProcess::MetricsPort() const {
  std::string log = ReadFile(log_ + ".run");
  const std::string mark = "metrics=http://127.0.0.1:";
  size_t at = log.find(mark);
  if (at == std::string::npos) return 0;
  return std::atoi(log.c_str() + at + mark.size());
}

std::string HttpExchange(int port, const std::string& request) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string resp;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0 &&
      ::write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) resp.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return resp;
}

std::string ScrapeMetrics(const DaemonProcess& d, const std::string& token) {
  std::string req = "GET /metrics HTTP/1.0\r\n";
  if (!token.empty()) req += "Authorization: Bearer " + token + "\r\n";
  return HttpExchange(d.MetricsPort(), req + "\r\n");
}

bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(50ms);
  }
  return pred();
}

double UnixSeconds(const nlohmann::json& v) {
  if (!v.is_string()) return 0;
  std::string s = v.get<std::string>();
  struct tm tm {};
  const char* rest = ::strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (rest == nullptr) return 0;
  double frac = 0;
  if (*rest == '.') frac = std::atof(rest);  // ".558Z" -> 0.558
  return static_cast<double>(::timegm(&tm)) + frac;
}

int64_t JsonInt(const nlohmann::json& v) {
  if (v.is_string()) return std::stoll(v.get<std::string>());
  if (v.is_number()) return v.get<int64_t>();
  return 0;
}

::testing::AssertionResult DaemonFixture::RunPythonJob(const DaemonProcess& d, const std::string& out,
                                                       const std::vector<std::string>& flags) {
  std::vector<std::string> run = {"job", "run", "--name", "py"};
  run.insert(run.end(), flags.begin(), flags.end());
  run.push_back("--");
  for (auto& arg : PythonJob(out)) run.push_back(arg);
  CommandResult r = d.Cairn(run);
  if (!r.Exited(0)) return ::testing::AssertionFailure() << r.Describe() << d.Log();
  std::this_thread::sleep_for(1s);
  return ::testing::AssertionSuccess();
}

std::string DaemonFixture::Token(const std::string& name, const std::string& value) {
  std::string path = Dir() + "/" + name;
  WriteFile(path, value + "\n");
  ::chmod(path.c_str(), 0600);
  return path;
}

::testing::AssertionResult DaemonFixture::WaitState(const DaemonProcess& d, const std::string& name,
                                                    const std::string& state, std::chrono::milliseconds timeout) {
  std::string last;
  bool ok = WaitFor(
      [&] {
        nlohmann::json j = nlohmann::json::parse(d.Cairn({"job", "show", name, "--json"}).out, nullptr, false);
        if (j.is_discarded()) return false;
        last = j["job"].value("state", "");
        return last == state;
      },
      timeout);
  if (ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "job " << name << " on " << d.node() << " is " << last << ", not " << state
                                       << "; daemon log:\n"
                                       << d.Log() << ReadFile(d.state_dir() + "/jobs/" + name + "/stderr.log");
}

std::string DaemonFixture::Expected() {
  std::string dir = Dir() + "/plain";
  std::filesystem::create_directories(dir);
  WriteFile(dir + "/stdin", "");
  pid_t pid = SpawnProgram({kPython, "-I", "-c", kPythonHashChain, dir + "/result", kRounds}, dir + "/stdin",
                           dir + "/stdout", dir + "/stderr", {"PYTHONHASHSEED=0"});
  Track(pid, kPython);
  Ending e = WaitGone(pid, 120s);
  EXPECT_TRUE(e.ExitedWith(0)) << e.Describe() << ReadFile(dir + "/stderr");
  return ReadFile(dir + "/result");
}

::testing::AssertionResult DaemonFixture::WriterPasses(const DaemonProcess& d, const std::string& name,
                                                       const std::string& work) {
  WriteFile(work + "/go", "");
  if (auto exited = WaitState(d, name, "exited"); !exited) return exited;
  std::string log = d.Cairn({"job", "logs", name}).out;
  if (!Matches(log, "PASS") || Matches(log, "FAIL")) return ::testing::AssertionFailure() << "job " << name << " says: " << log;
  return ::testing::AssertionSuccess();
}

std::vector<std::string> DaemonFixture::PythonJob(const std::string& out) {
  std::filesystem::create_directories(out);
  return {"/usr/bin/env", "PYTHONHASHSEED=0", kPython, "-I", "-c", kPythonHashChain, out + "/result", kRounds, out + "/go"};
}

}  // namespace cairn::testing
