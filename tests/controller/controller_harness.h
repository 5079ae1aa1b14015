// Test harness for cairn-controller: starts real controller processes (and real etcd members),
// plays a node daemon through the real gRPC API, and runs the real `cairn` CLI.
//
// Paths come from compile definitions: CONTROLLER_BIN and CAIRN_BIN. Not thread-safe except
// NodeAgent, whose heartbeats run on their own thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "controller.grpc.pb.h"
#include "harness.h"

namespace cairn::testing {

// A port on 127.0.0.1 that was free a moment ago.
int FreePort();

// One cairn-controller process. Stopped (SIGKILL) on destruction if still running.
class ControllerProcess {
 public:
  // `store`: the --store argument; `extra`: more arguments.
  ControllerProcess(std::string dir, std::string name, std::string store, std::vector<std::string> extra = {});
  ~ControllerProcess();

  // Starts it and waits until its socket answers Leader(). Returns false (with the log in the
  // failure message) when it exits or does not answer in time.
  ::testing::AssertionResult Start(std::chrono::milliseconds timeout = 15s);
  // Waits until it reports itself leader.
  ::testing::AssertionResult WaitLeader(std::chrono::milliseconds timeout);
  std::optional<api::LeaderResponse> Leader() const;
  void Kill(int sig = SIGKILL);
  // Waits for it to exit; returns its ending.
  Ending Wait(std::chrono::milliseconds timeout = 10s);

  pid_t pid() const { return pid_; }
  const std::string& socket() const { return socket_; }
  std::string address() const { return "unix:" + socket_; }
  std::string Log() const { return ReadFile(log_); }

 private:
  std::string dir_, name_, store_, socket_, log_;
  std::vector<std::string> extra_;
  pid_t pid_ = -1;
};

// Plays a node daemon: registers a node with the controller(s) and heartbeats on a thread
// until Stop(). Tries each address in turn, as a daemon would after a leader change.
class NodeAgent {
 public:
  NodeAgent(std::vector<std::string> addresses, api::NodeSpec spec);
  ~NodeAgent();
  // Registers; retries for up to `timeout` while no controller leads.
  ::testing::AssertionResult Register(std::chrono::milliseconds timeout = 10s);
  void StartHeartbeats(std::chrono::milliseconds every);
  void Stop();
  // Heartbeats acknowledged so far, and when the last one was (steady clock).
  int acked() const { return acked_.load(); }
  std::chrono::steady_clock::time_point last_ack() const {
    return std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(last_ack_.load()));
  }

 private:
  grpc::Status CallAny(const std::function<grpc::Status(api::Controller::Stub&)>& f);

  std::vector<std::string> addresses_;
  api::NodeSpec spec_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> acked_{0};
  std::atomic<std::chrono::steady_clock::rep> last_ack_{0};
};

api::NodeSpec MakeNode(const std::string& id, double price, bool spot, int gpus, const std::string& gpu_type,
                       double cpus = 8, int64_t memory_mb = 61 * 1024);

// Runs `cairn ARGS...` and returns what it did.
CommandResult RunCairn(const std::vector<std::string>& args, const std::string& scratch_dir,
                       std::vector<std::string> env = {});
// Parses a command's stdout as JSON; fails the test (and returns null) when it is not.
nlohmann::json ParseJson(const CommandResult& r);

// A 3-member etcd cluster on loopback, each member with its own ports and data directory under
// `dir`. Skips the test when Debian's etcd-server is not installed.
class EtcdCluster {
 public:
  explicit EtcdCluster(std::string dir) : dir_(std::move(dir)) {}
  ~EtcdCluster();
  static std::string Binary();  // "" when etcd is not installed.
  ::testing::AssertionResult Start(int members = 3, std::chrono::milliseconds timeout = 30s);
  // "etcd://127.0.0.1:C1,127.0.0.1:C2,..."
  std::string StoreSpec() const;
  // SIGKILLs member i (the cluster keeps its quorum with one of three gone).
  void KillMember(int i);
  const std::vector<int>& client_ports() const { return client_ports_; }

 private:
  std::string dir_;
  std::vector<pid_t> pids_;
  std::vector<int> client_ports_;
};

// A TCP path on loopback that can be cut like a partition: it listens on a port of its own and
// forwards every connection to `to_port`, both ways, on threads, until Cut(). Cut, it forwards
// nothing more and answers nothing, but keeps every connection open and accepts new ones (as a
// network that drops packets does: the peer sees silence, not a reset).
class Partitionable {
 public:
  explicit Partitionable(int to_port);
  ~Partitionable();
  int port() const { return port_; }
  void Cut() { cut_.store(true); }

 private:
  void Accept();
  void Pump(int from, int to);

  int to_port_, port_ = 0, listener_ = -1;
  std::atomic<bool> cut_{false}, stop_{false};
  std::thread acceptor_;
  std::vector<std::thread> pumps_;
  std::vector<int> fds_;
  std::mutex mu_;
};

// The etcd store spec of `etcd`, every member reached through a Partitionable of `paths`.
std::string PartitionableStoreSpec(const EtcdCluster& etcd, std::vector<std::unique_ptr<Partitionable>>* paths);

}  // namespace cairn::testing
