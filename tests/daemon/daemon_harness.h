// Test harness for cairnd: starts real daemon processes (each with its own node name, state
// directory and socket) and runs the real `cairn` CLI against them.
//
// Paths come from compile definitions: CAIRND_BIN and CAIRN_BIN. Not thread-safe.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "harness.h"

namespace cairn::testing {

// One cairnd process. SIGKILLed on destruction if still running (its jobs are killed too).
class DaemonProcess {
 public:
  // State and socket live under `dir`; the node is named `node`-SUFFIX (SUFFIX from `dir`);
  // `extra`: more arguments; `env`: NAME=value entries.
  DaemonProcess(std::string dir, std::string node, std::vector<std::string> extra = {},
                std::vector<std::string> env = {});
  ~DaemonProcess();

  // Runs it under `prefix` (e.g. nsenter --net=PATH, to start it in a network namespace).
  void RunUnder(std::vector<std::string> prefix) { prefix_ = std::move(prefix); }
  // Runs it (after any RunUnder prefix) in a mount namespace of its own, where its state
  // directory is a tmpfs no other process sees: its node's files are its own, as on a machine of
  // its own (the jobs it starts or restores live in that namespace too). From outside, the state
  // directory stays empty.
  void PrivateStateDir();
  // Starts it and waits until `cairn job list` answers through its socket.
  ::testing::AssertionResult Start(std::chrono::milliseconds timeout = 20s);
  void Kill(int sig = SIGKILL);
  Ending Wait(std::chrono::milliseconds timeout = 30s);
  // Kills every job of this daemon that still runs (by the pids it reports).
  void KillJobs();

  // Runs `cairn ARGS... --socket SOCKET`.
  CommandResult Cairn(std::vector<std::string> args, std::chrono::milliseconds timeout = 120s) const;
  // Same with --json (also placed before "--"), parsed; fails the test (returning null) when the command fails.
  nlohmann::json Json(std::vector<std::string> args) const;

  pid_t pid() const { return pid_; }
  const std::string& socket() const { return socket_; }
  const std::string& state_dir() const { return state_; }
  const std::string& node() const { return node_; }
  std::string Log() const { return ReadFile(log_); }
  // What the daemon running now has logged so far (Log() has the runs that ended).
  std::string RunLog() const { return ReadFile(log_ + ".run"); }
  // The port its metrics server (--metrics-port) serves on, from the running daemon's log; 0 if none.
  int MetricsPort() const;

 private:
  std::string dir_, node_, state_, socket_, log_;
  std::vector<std::string> extra_, env_, prefix_;
  pid_t pid_ = -1;
};

// tests/daemon/metadata_responder.py on 127.0.0.1: the AWS, GCP and Azure metadata protocols,
// with a spot notice out once SetNotice wrote it. Stopped (SIGKILL) on destruction.
class MetadataResponder {
 public:
  explicit MetadataResponder(std::string dir) : dir_(std::move(dir)) {}
  ~MetadataResponder() { Stop(); }
  ::testing::AssertionResult Start(std::chrono::milliseconds timeout = 10s);
  void Stop();
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // `cloud`: aws (the instance-action JSON), gcp (any content: preempted), azure (the Events array).
  void SetNotice(const std::string& cloud, const std::string& content);
  // Requests served so far, one "METHOD PATH ok|refused" line each.
  std::string Requests() const { return ReadFile(dir_ + "/requests.log"); }

 private:
  std::string dir_;
  pid_t pid_ = -1;
  int port_ = 0;
};

// A free TCP port on 127.0.0.1 a moment ago.
int FreeTcpPort();

// Sends `request` (a whole HTTP/1.0 request) to 127.0.0.1:`port` and returns the whole response
// ("" when the connection fails).
std::string HttpExchange(int port, const std::string& request);
// `GET /metrics` from `d`'s metrics server, with `Authorization: Bearer TOKEN` when `token` is given.
std::string ScrapeMetrics(const DaemonProcess& d, const std::string& token = "");

// Polls `pred` every 50 ms until it holds or `timeout` passes.
bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout);

// The v1 freezer state (THAWED, FROZEN...) of job `job`'s cgroup on node `node`; "" when none.
std::string JobFreezer(const std::string& node, const std::string& job);

// A daemon cut at a fault point (issue 21's kill tests): runs `cairn ARGS` against `caller` on a
// thread; once `victim` (started with CAIRN_FAULT_PAUSE=stage) logs that it reached `stage`
// (waited for up to 60 s), SIGKILLs it and waits for it, then for the command. `caller` may be
// `victim`.
struct FaultCut {
  bool reached = false;  // the victim got to the stage (false: killed after 60 s all the same)
  CommandResult call;
};
FaultCut KillAtFaultPoint(const DaemonProcess& caller, const std::vector<std::string>& args, DaemonProcess& victim,
                          const std::string& stage);

// A JSON field that proto3 JSON may print as a string (64-bit integers) as a number.
int64_t JsonInt(const nlohmann::json& v);
// A time the CLI's JSON gives as RFC 3339 ("2026-12-06T04:15:10.558Z", UTC) in unix seconds;
// 0 for null or anything else.
double UnixSeconds(const nlohmann::json& v);

// What the tests with real daemons share: their scratch directory, token files, a job's record,
// waiting for a job's state, and the result of an uninterrupted run of kPythonHashChain.
class DaemonFixture : public CairnTest {
 protected:
  static constexpr char kPython[] = "/usr/bin/python3";
  static constexpr char kRounds[] = "4000000";

  std::string Dir() const { return temp_->path(); }
  // Writes `value` to DIR/NAME, mode 0600 (as a token file must be); returns the path.
  std::string Token(const std::string& name, const std::string& value);
  nlohmann::json Job(const DaemonProcess& d, const std::string& name) {
    return d.Json({"job", "show", name})["job"];
  }
  // Waits until the job's state on `d` is `state`; the failure shows the daemon's and job's logs.
  ::testing::AssertionResult WaitState(const DaemonProcess& d, const std::string& name, const std::string& state,
                                       std::chrono::milliseconds timeout = 60s);
  // The result file of an uninterrupted run of kPythonHashChain (in DIR/plain).
  std::string Expected();
  // The command line (for `job run -- ...`) of a kPythonHashChain job that writes OUT/result
  // only once OUT/go exists (Release); creates OUT.
  std::vector<std::string> PythonJob(const std::string& out);
  // Runs PythonJob(out) as job "py" on `d` (`flags` before the command: --checkpoint-every ...),
  // and lets it compute a second (mid-computation).
  ::testing::AssertionResult RunPythonJob(const DaemonProcess& d, const std::string& out,
                                          const std::vector<std::string>& flags = {});
  // Tells the inc_writer job `name` on `d` (workdir `work`) to check its pages (WORK/go), waits
  // for it to exit and checks that its log says PASS and no FAIL.
  ::testing::AssertionResult WriterPasses(const DaemonProcess& d, const std::string& name, const std::string& work);
  // Lets the PythonJob writing to `out` finish.
  void Release(const std::string& out) { WriteFile(out + "/go", ""); }
};

}  // namespace cairn::testing
