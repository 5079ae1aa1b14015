#include "daemon/controller_link.h"

#include <unistd.h>

#include <chrono>

#include <CLI/CLI.hpp>
#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/cpu_levels.h"
#include "common/grpc_server.h"
#include "common/log.h"
#include "common/status.h"
#include "common/token.h"
#include "controller/service/job_spec_check.h"
#include "daemon/daemon.h"
#include "daemon/node_addresses.h"
#include "daemon/node_cpu.h"

namespace cairn::daemon {
namespace {

namespace capi = ::cairn::api;

constexpr size_t kMaxQueued = 100;

double UnixSeconds() { return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()); }

std::string Code(const grpc::Status& s) {
  return absl::StrCat(s.error_code(), " ", s.error_message());
}

}  // namespace

void AddControllerLinkOptions(CLI::App& app, ControllerLinkOptions* o) {
  app.add_option("--controller", o->address,
                 "Register this node with cairn-controller at HOST:PORT (TCP, needs --controller-token-file) "
                 "or unix:PATH, heartbeat and report signals; several controllers (one leads): A,B,...");
  app.add_option("--controller-token-file", o->token_file, "File holding the controller's TCP token");
  app.add_option("--controller-tls-ca", o->tls_ca, "PEM CA certificates to verify a controller serving TCP in TLS");
  app.add_option("--price-per-hour", o->price_per_hour, "This node's price in USD per hour (told to the controller)");
  app.add_flag("--spot", o->spot, "This node is spot/preemptible capacity (default: on-demand)");
  app.add_option("--zone", o->zone, "This node's zone (told to the controller)");
  app.add_option("--cloud", o->cloud, "This node's cloud (told to the controller)");
  app.add_option("--labels", o->labels, "Node labels k=v,k=v (told to the controller; jobs select nodes by them)");
  app.add_option("--cpus", o->cpus, "CPUs offered to the controller (default: those online)");
  auto* memory_mb = app.add_option("--memory-mb", o->memory_mb, "The same in MiB (older spelling)");
  app.add_option_function<int64_t>(
         "--memory", [o](const int64_t& bytes) { o->memory_mb = (bytes + (int64_t{1} << 20) - 1) >> 20; },
         "Memory offered to the controller, e.g. 64G (default: physical memory)")
      ->transform(CLI::AsSizeValue(false))
      ->excludes(memory_mb);
  app.add_option("--advertise", o->advertise,
                 "Address the controller reaches this daemon at (default: the --listen address, else unix:SOCKET)");
}

ControllerLink::ControllerLink(Daemon* daemon, ControllerLinkOptions opts, capi::NodeSpec spec,
                               std::string daemon_address, std::string daemon_token, std::string token)
    : daemon_(daemon),
      opts_(std::move(opts)),
      spec_(std::move(spec)),
      daemon_address_(std::move(daemon_address)),
      daemon_token_(std::move(daemon_token)),
      token_(std::move(token)) {}

absl::StatusOr<std::unique_ptr<ControllerLink>> ControllerLink::Start(Daemon* daemon, const std::string& node,
                                                                      ControllerLinkOptions opts,
                                                                      const std::string& daemon_address,
                                                                      const std::string& daemon_token,
                                                                      const std::vector<GpuDevice>& gpus) {
  std::vector<std::string> addresses = absl::StrSplit(opts.address, ',', absl::SkipWhitespace());
  if (addresses.empty()) return absl::InvalidArgumentError("--controller: give HOST:PORT or unix:PATH (or several, A,B)");
  std::string token;
  for (const std::string& a : addresses) {
    if (!absl::StartsWith(a, "unix:") && opts.token_file.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--controller ", a,
                                                     " is TCP: give --controller-token-file (TCP calls carry a token)"));
    }
  }
  if (!opts.token_file.empty()) {
    absl::StatusOr<std::string> t = ReadTokenFile(opts.token_file);
    if (!t.ok()) return t.status();
    token = *t;
  }
  if (opts.price_per_hour < 0) return absl::InvalidArgumentError("--price-per-hour cannot be negative");
  capi::NodeSpec spec;
  spec.set_id(node);
  long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  spec.set_cpus(opts.cpus > 0 ? opts.cpus : static_cast<double>(cpus > 0 ? cpus : 1));
  int64_t mem = static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE) / (1 << 20);
  spec.set_memory_mb(opts.memory_mb > 0 ? opts.memory_mb : mem);
  spec.set_gpus(static_cast<int32_t>(gpus.size()));
  if (!gpus.empty()) spec.set_gpu_type(GpuTypeOf(gpus.front().name));
  spec.set_price_per_hour(opts.price_per_hour);
  spec.set_spot(opts.spot);
  spec.set_zone(opts.zone);
  spec.set_cloud(opts.cloud);
  const std::set<std::string> cpu = NodeCpuFeatures();
  spec.set_cpu_level(LevelOf(cpu));
  for (const std::string& f : cpu) spec.add_cpu_features(f);
  // Where a job's service address may go: the node's own addresses (and the devices they are on).
  for (const std::string& a : NodeAddresses()) spec.add_addresses(a);
  for (const std::string& d : NodeDevices()) spec.add_devices(d);
  for (absl::string_view kv : absl::StrSplit(opts.labels, ',', absl::SkipWhitespace())) {
    std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
    std::string k(absl::StripAsciiWhitespace(p.first));
    if (k.empty() || !absl::StrContains(kv, '=')) {
      return absl::InvalidArgumentError(absl::StrCat("--labels: `", kv, "` is not k=v (give k=v,k=v)"));
    }
    (*spec.mutable_labels())[k] = std::string(absl::StripAsciiWhitespace(p.second));
  }
  // The controller refuses what this node would say of itself: refused here, at start, instead.
  RETURN_IF_ERROR(::cairn::controller::CheckNodeSpec(spec));
  std::unique_ptr<ControllerLink> link(
      new ControllerLink(daemon, std::move(opts), std::move(spec), daemon_address, daemon_token, std::move(token)));
  for (const std::string& a : addresses) {
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds = ClientCredentials(a, link->opts_.tls_ca);
    if (!creds.ok()) return Annotate(creds.status(), "--controller-tls-ca");
    // A controller that restarts is back in about a second: reconnect at least that often.
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    link->stubs_.push_back(capi::Controller::NewStub(grpc::CreateCustomChannel(a, *creds, args)));
  }
  link->addresses_ = std::move(addresses);
  link->seq_ = daemon->LastEventSeq();
  link->thread_ = std::thread([p = link.get()] { p->Loop(); });
  return link;
}

ControllerLink::~ControllerLink() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    if (inflight_ != nullptr) inflight_->TryCancel();
  }
  if (thread_.joinable()) thread_.join();
}

grpc::ClientContext* ControllerLink::Context(grpc::ClientContext* c, double timeout_s) {
  c->set_deadline(std::chrono::system_clock::now() +
                  std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(timeout_s)));
  if (!token_.empty()) c->AddMetadata("authorization", "Bearer " + token_);
  std::lock_guard<std::mutex> l(mu_);
  inflight_ = c;
  return c;
}

void ControllerLink::Done() {
  std::lock_guard<std::mutex> l(mu_);
  inflight_ = nullptr;
}

void ControllerLink::Status(const std::string& line) {
  daemon_->SetComponentStatus("controller", line);
}

void ControllerLink::Next() {
  if (addresses_.size() < 2) return;  // one controller: wait for it
  current_ = (current_ + 1) % addresses_.size();
  registered_ = false;
}

void ControllerLink::HearTerm(uint64_t term) {
  if (term == 0) return;  // a controller that predates terms
  if (absl::Status s = daemon_->HearControllerTerm(term, "controller answer"); !s.ok()) {
    CAIRN_LOG_WARN("controller link: {}", s.ToString());
  }
}

bool ControllerLink::Register() {
  capi::RegisterNodeRequest req;
  *req.mutable_spec() = spec_;
  req.set_daemon_address(daemon_address_);
  req.set_daemon_token(daemon_token_);
  capi::RegisterNodeResponse resp;
  grpc::ClientContext c;
  // With several controllers, one that does not answer soon is passed over (it may be dead or
  // cut off, and a new leader gives nodes only a heartbeat timeout to reach it).
  grpc::Status st = stub()->RegisterNode(Context(&c, addresses_.size() > 1 ? 3 : 10), req, &resp);
  Done();
  if (stop_) return false;
  if (!st.ok()) {
    Status(absl::StrCat("warning: cannot register with controller ", address(), ": ", Code(st),
                        addresses_.size() > 1 ? " (trying the next one)" : " (retrying every second)"));
    Next();
    return false;
  }
  heartbeat_s_ = resp.heartbeat_interval_s() > 0 ? resp.heartbeat_interval_s() : 1;
  HearTerm(resp.controller_term());
  registered_ = true;
  Status(absl::StrFormat("registered with %s as %s (%.1f CPU, %d MB, %d GPU, $%.4f/h %s); heartbeat every %.1f s",
                         address(), spec_.id(), spec_.cpus(), spec_.memory_mb(), spec_.gpus(),
                         spec_.price_per_hour(), spec_.spot() ? "spot" : "on-demand", heartbeat_s_));
  return true;
}

void ControllerLink::Queue(capi::NodeSignal s) {
  s.set_node_id(spec_.id());
  std::lock_guard<std::mutex> l(mu_);
  if (queue_.size() >= kMaxQueued) {
    CAIRN_LOG_WARN("controller link: {} signals wait for the controller; dropping the oldest", queue_.size());
    queue_.pop_front();
  }
  queue_.push_back(std::move(s));
}

void ControllerLink::ReportSpotNotice(const SpotNoticeInfo& n) {
  capi::NodeSignal s;
  s.set_kind(capi::NodeSignal::SPOT_NOTICE);
  s.set_notice_s(std::max(1.0, n.deadline - UnixSeconds()));
  Queue(std::move(s));
}

void ControllerLink::ReportGpu(const GpuSignal& g) {
  if (!g.report) return;
  capi::NodeSignal s;
  s.set_kind(capi::NodeSignal::GPU_HEALTH);
  s.set_xid(g.xid);
  s.set_ecc_uncorrectable(g.ecc_uncorrectable);
  Queue(std::move(s));
}

void ControllerLink::SendQueued() {
  for (;;) {
    capi::NodeSignal s;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (queue_.empty()) return;
      s = queue_.front();
    }
    capi::ReportSignalResponse resp;
    grpc::ClientContext c;
    // The controller answers once its decisions are carried out (daemon calls: checkpoints).
    grpc::Status st = stub()->ReportSignal(Context(&c, 120), s, &resp);
    Done();
    if (stop_) return;
    // Unavailable: it did not get the signal; send it again later. (A deadline exceeded means
    // it did and is still acting on it: sending it again would act twice.)
    if (st.error_code() == grpc::StatusCode::UNAVAILABLE) {
      Status(absl::StrCat("warning: controller ", address(), " does not take signals: ", Code(st),
                          " (kept, retried)"));
      Next();
      return;
    }
    if (st.ok()) {
      spdlog::info("controller link: reported {} job={}: {} decision(s)/event(s)",
                   capi::NodeSignal::Kind_Name(s.kind()), s.job_id(), resp.events_size());
    } else if (st.error_code() == grpc::StatusCode::NOT_FOUND && !s.job_id().empty()) {
      CAIRN_LOG_DEBUG("controller link: job {} is not the controller's: {}", s.job_id(), st.error_message());
    } else {
      CAIRN_LOG_WARN("controller link: signal {} refused: {}", capi::NodeSignal::Kind_Name(s.kind()), Code(st));
      if (st.error_code() == grpc::StatusCode::NOT_FOUND) registered_ = false;  // the node was forgotten
    }
    std::lock_guard<std::mutex> l(mu_);
    if (!queue_.empty()) queue_.pop_front();
  }
}

void ControllerLink::FollowEvents(int wait_ms) {
  std::vector<api::Event> events = daemon_->WaitEvents("", seq_, wait_ms);
  for (const api::Event& e : events) {
    seq_ = std::max(seq_, e.seq());
    if (e.kind() == "checkpoint" && !e.job().empty()) {
      ReportCheckpoint(e);
      continue;
    }
    bool ended = e.kind() == "exited";  // by itself: a job cairn stops ends "killed"
    if (e.job().empty() || (e.kind() != "hung" && e.kind() != "memory-pressure" && !ended)) continue;
    absl::StatusOr<api::GetJobResponse> j = daemon_->GetJob(e.job());
    if (!j.ok()) continue;
    const api::Health& h = j->job().health();
    capi::NodeSignal s;
    s.set_job_id(e.job());
    if (ended && j->job().state() != "exited") continue;  // it runs again: the end of an old incarnation
    if (ended) {
      s.set_kind(capi::NodeSignal::JOB_ENDED);
      s.set_exit_known(h.exit_known());
      s.set_exit_code(h.exit_code());
      s.set_exit_signal(h.signal());
      s.set_ended_time(j->job().ended() > 0 ? j->job().ended() : e.time());
    } else if (e.kind() == "hung") {
      s.set_kind(capi::NodeSignal::JOB_HUNG);
      s.set_last_progress_time(UnixSeconds() - h.seconds_since_progress());
    } else {
      s.set_kind(capi::NodeSignal::MEMORY_PRESSURE);
      s.set_memory_used_mb(h.memory_bytes() >> 20);
      s.set_memory_limit_mb(h.memory_limit_bytes() >> 20);
      s.set_memory_growth_mb_per_s(h.memory_growth_bytes_per_s() / (1 << 20));
    }
    Queue(std::move(s));
  }
}

void ControllerLink::ReportCheckpoint(const api::Event& e) {
  // Only a checkpoint other nodes can restore (one in a shared store) is worth telling about.
  std::string storage = daemon_->Info().storage();
  if (storage.empty() || storage == "local") return;
  for (const api::Checkpoint& c : daemon_->ListCheckpoints(e.job())) {
    if (c.state() != "complete" || !absl::StartsWith(e.detail(), "checkpoint " + c.id() + " ")) continue;
    capi::NodeSignal s;
    s.set_kind(capi::NodeSignal::CHECKPOINT);
    s.set_job_id(e.job());
    s.set_checkpoint_id(c.id());
    s.set_checkpoint_time(e.time());
    Queue(std::move(s));
    return;
  }
}

void ControllerLink::Loop() {
  auto next_heartbeat = std::chrono::steady_clock::now();
  while (!stop_) {
    if (!registered_) {
      if (!Register()) {
        // A pause before the next try (the next controller of several sooner), following events
        // meanwhile (signals found wait in the queue). An event does not end it: each failed
        // try is one (its warning), which made the link retry at once, hundreds of times a second.
        auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(addresses_.size() > 1 ? 250 : 1000);
        for (auto now = std::chrono::steady_clock::now(); !stop_ && now < until; now = std::chrono::steady_clock::now()) {
          FollowEvents(static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count()) + 1);
        }
        continue;
      }
      next_heartbeat = std::chrono::steady_clock::now() +
                       std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(heartbeat_s_));
    }
    if (std::chrono::steady_clock::now() >= next_heartbeat) {
      capi::HeartbeatRequest req;
      req.set_node_id(spec_.id());
      capi::HeartbeatResponse resp;
      grpc::ClientContext c;
      grpc::Status st = stub()->Heartbeat(Context(&c, std::max(2.0, heartbeat_s_)), req, &resp);
      Done();
      if (stop_) return;
      if (st.ok()) HearTerm(resp.controller_term());
      if (st.error_code() == grpc::StatusCode::NOT_FOUND || (st.ok() && resp.register_again())) {
        registered_ = false;
        continue;
      }
      if (!st.ok()) {
        Status(absl::StrCat("warning: heartbeat to controller ", address(), " failed: ", Code(st)));
        // Another controller may lead now (this one died, was cut off, or was deposed).
        if (st.error_code() == grpc::StatusCode::UNAVAILABLE ||
            st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
          Next();
          continue;
        }
      } else {
        Status(absl::StrFormat("registered with %s as %s; heartbeats ok", address(), spec_.id()));
      }
      next_heartbeat = std::chrono::steady_clock::now() +
                       std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(heartbeat_s_));
    }
    SendQueued();
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next_heartbeat - std::chrono::steady_clock::now());
    FollowEvents(static_cast<int>(std::clamp<int64_t>(left.count(), 10, 200)));
  }
}

}  // namespace cairn::daemon
