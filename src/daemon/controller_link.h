#pragma once
// cairnd's link to cairn-controller (docs/daemon.md, "Joining a controller"): registers this node
// with its facts (CPUs, memory, GPUs, price, spot or on-demand, zone, cloud, labels) and the
// address and token the controller uses to reach this daemon; sends heartbeats at the interval
// the controller asks for; and reports signals with ReportSignal: spot notices and GPU health
// events (handed in by the watchers) and jobs that hang or come under memory pressure (followed
// in the daemon's own event stream), and checkpoints complete in a shared store. A controller that is away is retried; signals wait (up to
// 100) until it answers; a controller that forgot the node (restart, re-election) gets a fresh
// registration.
//
// Jobs are known to the controller by the daemon's job name (the controller's dispatcher runs
// them under its job id); signals about jobs the controller does not know are dropped.
//
// Thread safety: the link works on its own thread; Report* may be called from any thread.

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "controller.grpc.pb.h"
#include "daemon.pb.h"
#include "daemon/gpu_watch.h"
#include "daemon/spot_watch.h"

namespace CLI {
class App;
}

namespace cairn::daemon {

class Daemon;

struct ControllerLinkOptions {
  std::string address;     // --controller: HOST:PORT (TCP, needs the token) or unix:PATH; empty: off
  std::string token_file;  // --controller-token-file
  std::string tls_ca;      // --controller-tls-ca: verify a controller serving TCP in TLS
  double price_per_hour = 0;
  bool spot = false;
  std::string zone, cloud;
  std::string labels;      // k=v,k=v
  double cpus = 0;         // 0: detected
  int64_t memory_mb = 0;   // 0: detected
  std::string advertise;   // how the controller reaches this daemon (default: --listen, else unix:SOCKET)
};

// Adds --controller, --controller-token-file, --controller-tls-ca, --price-per-hour, --spot, --zone, --cloud,
// --labels, --cpus, --memory (or --memory-mb) and --advertise to cairnd's command line.
void AddControllerLinkOptions(CLI::App& app, ControllerLinkOptions* o);

class ControllerLink {
 public:
  // Builds the node's facts and starts registering (in the background: a controller that is not
  // up yet is retried). Fails on bad options (labels, token file, address).
  // REQUIRES: `daemon` outlives the link.
  static absl::StatusOr<std::unique_ptr<ControllerLink>> Start(Daemon* daemon, const std::string& node,
                                                               ControllerLinkOptions opts,
                                                               const std::string& daemon_address,
                                                               const std::string& daemon_token,
                                                               const std::vector<GpuDevice>& gpus);
  ~ControllerLink();  // stops and joins

  void ReportSpotNotice(const SpotNoticeInfo& notice);
  void ReportGpu(const GpuSignal& signal);

  const ::cairn::api::NodeSpec& spec() const { return spec_; }

 private:
  ControllerLink(Daemon* daemon, ControllerLinkOptions opts, ::cairn::api::NodeSpec spec, std::string daemon_address,
                 std::string daemon_token, std::string token);
  void Loop();
  // Sets the deadline and token on `c` and makes it the call the destructor cancels.
  grpc::ClientContext* Context(grpc::ClientContext* c, double timeout_s);
  void Done();  // the call of the last Context() ended
  bool Register();
  // The leader's term from an answer: kept by the daemon, which refuses older terms' calls.
  void HearTerm(uint64_t term);
  void Queue(::cairn::api::NodeSignal s);
  void SendQueued();
  void FollowEvents(int wait_ms);
  // A complete checkpoint in a shared store: reported (CHECKPOINT) so that the controller can
  // have it restored elsewhere should this node be lost.
  void ReportCheckpoint(const api::Event& e);
  void Status(const std::string& line);

  Daemon* const daemon_;
  const ControllerLinkOptions opts_;
  const ::cairn::api::NodeSpec spec_;
  const std::string daemon_address_, daemon_token_, token_;
  // One per controller address (--controller A,B,...): the link talks to one at a time and moves
  // to the next when it does not answer or does not lead (Unavailable), then registers there.
  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<::cairn::api::Controller::Stub>> stubs_;
  size_t current_ = 0;  // link thread only
  ::cairn::api::Controller::Stub* stub() { return stubs_[current_].get(); }
  const std::string& address() const { return addresses_[current_]; }
  // The current controller did not answer or does not lead: the next one, to register with.
  void Next();

  std::mutex mu_;
  std::deque<::cairn::api::NodeSignal> queue_;  // GUARDED_BY(mu_)
  grpc::ClientContext* inflight_ = nullptr;       // GUARDED_BY(mu_): cancelled on stop
  std::atomic<bool> stop_{false};
  std::thread thread_;

  // Link thread only.
  bool registered_ = false;
  double heartbeat_s_ = 1;
  uint64_t seq_ = 0;
};

}  // namespace cairn::daemon
