#include "cli/controller_commands.h"

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "cli/output.h"
#include "common/cpu_levels.h"
#include "common/grpc_server.h"
#include "common/status.h"
#include "common/validate.h"
#include "controller/service/job_spec_check.h"
#include "controller.grpc.pb.h"

namespace cairn::cli {

struct ControllerCommands::Options {
  // Where and how to reach the controller (shared by every command).
  std::string controllers;
  std::string token_file;
  std::string tls_ca;
  bool json = false;
  double timeout_s = 10;

  CLI::App* submit = nullptr;
  CLI::App* cluster_status = nullptr;
  CLI::App* scale_down = nullptr;
  int scale_gpus = 0;
  CLI::App* job_explain = nullptr;
  CLI::App* job_cancel = nullptr;
  CLI::App* remove_node = nullptr;
  CLI::App* events = nullptr;
  CLI::App* group_checkpoint = nullptr;
  CLI::App* group_restore = nullptr;
  CLI::App* group_list = nullptr;
  std::string group, group_ckpt;
  int rank = 0;
  bool stop = false;

  // submit
  api::JobSpec spec;
  double cpus = 0, work_h = 0;
  int64_t memory_mb = 0;
  std::string memory;
  int gpus = 0, priority = 0;
  bool service = false, on_notice = false;
  std::string deadline, gpu_type, id, user, cpu_baseline;
  double max_downtime_s = 0, budget = 0, ckpt_interval = 0, ckpt_pause = 0, notice_ckpt = 0, restore_s = 0;
  double downtime_cost = 0;
  int64_t ckpt_bytes = 0;
  std::vector<std::string> selector, command, addresses;

  // job explain / events
  std::string job;
  std::string node;
  unsigned limit = 0;
  uint64_t after = 0;
};

namespace {

std::string ReadFile(const std::string& path, bool* ok) {
  std::ifstream in(path);
  *ok = static_cast<bool>(in);
  std::stringstream ss;
  ss << in.rdbuf();
  return std::string(absl::StripAsciiWhitespace(ss.str()));
}

// A connection that tries each controller address in turn and keeps the first that answers
// as the leader: followers answer UNAVAILABLE, naming the leader.
class Client {
 public:
  Client(const std::string& addresses, std::string token, double timeout_s, std::string tls_ca)
      : token_(std::move(token)), timeout_s_(timeout_s), tls_ca_(std::move(tls_ca)) {
    for (absl::string_view a : absl::StrSplit(addresses, ',', absl::SkipWhitespace())) {
      std::string addr(absl::StripAsciiWhitespace(a));
      if (absl::StartsWith(addr, "/")) addr = "unix:" + addr;
      addresses_.push_back(addr);
    }
  }

  static constexpr std::chrono::seconds kPerControllerWait{3};
  // Tries every address in turn. When a controller answers that it does not lead (or cannot reach
  // its store), tries them all again shortly, until the timeout: a leader change takes a lease.
  template <typename Req, typename Resp>
  grpc::Status Call(grpc::Status (api::Controller::Stub::*method)(grpc::ClientContext*, const Req&, Resp*),
                    const Req& req, Resp* resp) {
    auto deadline = std::chrono::system_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s_ * 1000));
    std::vector<std::string> errors, waited;  // waited: the last round in which a controller said "retry"
    for (;;) {
      errors.clear();
      bool retry = false;
      for (const std::string& addr : addresses_) {
        auto creds = ClientCredentials(addr, tls_ca_);
        if (!creds.ok()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::string(creds.status().message()));
        auto channel = grpc::CreateChannel(addr, *creds);
        auto stub = api::Controller::NewStub(channel);
        grpc::ClientContext ctx;
        // With several controllers, one that does not answer within a few seconds (stopped, cut
        // off, busy carrying a move out) is passed over for this round.
        ctx.set_deadline(addresses_.size() > 1 ? std::min(deadline, std::chrono::system_clock::now() + kPerControllerWait)
                                               : deadline);
        if (!token_.empty() && !absl::StartsWith(addr, "unix:")) {
          ctx.AddMetadata("authorization", "Bearer " + token_);
        }
        resp->Clear();
        grpc::Status s = ((*stub).*method)(&ctx, req, resp);
        if (s.error_code() != grpc::StatusCode::UNAVAILABLE && s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
          if (!s.ok()) return grpc::Status(s.error_code(), absl::StrCat("controller ", addr, ": ", s.error_message()));
          return s;
        }
        retry = retry || ctx.GetServerTrailingMetadata().count("cairn-retry") > 0 ||
                (addresses_.size() > 1 && s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
        errors.push_back(absl::StrCat(addr, ": ", s.error_message()));
      }
      if (addresses_.empty()) errors.push_back("no address given");
      if (retry) waited = errors;
      auto now = std::chrono::system_clock::now();
      if (!retry || now >= deadline) break;
      std::this_thread::sleep_for(std::min<std::chrono::system_clock::duration>(std::chrono::milliseconds(200),
                                                                                deadline - now));
    }
    if (!waited.empty()) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          absl::StrFormat("no controller led within --timeout %.1f s (%s)", timeout_s_,
                                          absl::StrJoin(waited, "; ")));
    }
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        absl::StrCat("no leading controller answered (", absl::StrJoin(errors, "; "),
                                     "); is cairn-controller running? (--controller ADDR or CAIRN_CONTROLLER)",
                                     tls_ca_.empty() ? "; a TCP address served in TLS needs --tls-ca" : ""));
  }

 private:
  std::vector<std::string> addresses_;
  std::string token_;
  double timeout_s_;
  std::string tls_ca_;
};

void PrintEvent(const api::Event& e) {
  std::string what = e.kind();
  if (!e.rule().empty()) what = absl::StrCat(e.kind(), " ", e.rule(), " -> ", e.action());
  std::string subject;
  if (!e.job_id().empty()) absl::StrAppend(&subject, " job ", e.job_id());
  if (!e.node_id().empty()) absl::StrAppend(&subject, " node ", e.node_id());
  if (!e.target_node_id().empty()) absl::StrAppend(&subject, " target ", e.target_node_id());
  std::printf("%6llu %s %s%s: %s%s\n", static_cast<unsigned long long>(e.seq()), TimeString(e.time()).c_str(),
              what.c_str(), subject.c_str(), e.reason().c_str(),
              e.dispatch().empty() ? "" : absl::StrCat(" [", e.dispatch(), "]").c_str());
}

}  // namespace

ControllerCommands::ControllerCommands(CLI::App& app) : o_(std::make_unique<Options>()) {
  Options& o = *o_;
  const char* env = std::getenv("CAIRN_CONTROLLER");
  o.controllers = env != nullptr ? env : "unix:/run/cairn/controller.sock";
  auto common = [&o](CLI::App* c) {
    c->add_option("--controller", o.controllers,
                  "Controller addresses, tried in order until the leader answers: unix:PATH or HOST:PORT, "
                  "comma-separated (default $CAIRN_CONTROLLER or unix:/run/cairn/controller.sock)");
    c->add_option("--token-file", o.token_file, "File with the token for TCP addresses (default $CAIRN_TOKEN)");
    c->add_option("--tls-ca", o.tls_ca, "Reach TCP addresses in TLS, trusting these PEM CA certificates "
                                        "(default $CAIRN_TLS_CA)");
    c->add_flag("--json", o.json, "Print the controller's reply as JSON");
    c->add_option("--timeout", o.timeout_s,
                  "Seconds to wait for an answer, including for a leader to be elected")->capture_default_str();
  };

  o.submit = app.add_subcommand("submit", "Submit a job to the controller; it places the job on the best node");
  common(o.submit);
  o.submit->add_option("--id", o.id, "Job id (default: generated)");
  o.submit->add_option("--cpus", o.cpus, "CPUs the job needs");
  auto* memory = o.submit->add_option("--memory", o.memory, "Memory the job needs, e.g. 512M, 2G (as job run's --memory)");
  o.submit->add_option("--memory-mb", o.memory_mb, "The same in MiB (older spelling)")->excludes(memory);
  o.submit->add_option("--gpus", o.gpus, "GPUs the job needs");
  o.submit->add_option("--gpu-type", o.gpu_type, "Required GPU type (V100, A100, ...)");
  o.submit->add_option("--priority", o.priority, "Higher runs first and is suspended last");
  o.submit->add_flag("--service", o.service, "A service (SLA: --max-downtime) rather than a batch job (SLA: --deadline)");
  o.submit->add_option("--deadline", o.deadline, "Batch: finish within this duration from now (e.g. 6h, 90m)");
  o.submit->add_option("--max-downtime", o.max_downtime_s, "Service: total downtime allowance, seconds");
  o.submit->add_option("--budget", o.budget, "Budget in USD (0 = unlimited)");
  o.submit->add_option("--work-hours", o.work_h, "Batch: work in hours on a reference (V100) GPU");
  o.submit->add_option("--downtime-cost", o.downtime_cost, "What an hour of downtime costs, USD");
  o.submit->add_option("--checkpoint-every,--checkpoint-interval", o.ckpt_interval,
                       "Seconds between periodic checkpoints (0 = none; as job run's --checkpoint-every)");
  o.submit->add_option("--checkpoint-pause", o.ckpt_pause, "Seconds the job stops per checkpoint");
  o.submit->add_flag("--checkpoint-on-notice", o.on_notice, "Checkpoint when a spot interruption notice arrives");
  o.submit->add_option("--notice-checkpoint", o.notice_ckpt, "Seconds to take and upload a checkpoint on a notice");
  o.submit->add_option("--checkpoint-bytes", o.ckpt_bytes, "Size of one checkpoint, bytes");
  o.submit->add_option("--restore-time", o.restore_s, "Seconds from a ready node to the job running again");
  o.submit->add_option("--node-label", o.selector, "Required node label KEY=VALUE (repeatable)")
      ->allow_extra_args(false);
  o.submit->add_option("--user", o.user,
                       "The node user the command runs as (nothing of the job as root; its checkpoints come back "
                       "only as that user)");
  o.submit->add_option("--cpu-baseline", o.cpu_baseline,
                       "Keep to the CPU features of this x86-64 level (x86-64-v2, v3 or v4), so that the job can move "
                       "to any node of that level; `cluster`: the level every registered node has. Default: the job "
                       "moves only to nodes with all of its first node's CPU features");
  o.submit->add_option("--group", o.group,
                       "A rank of this job group: processes on several nodes checkpointed together as one consistent "
                       "cut (cairn group checkpoint) and restored together (cairn group restore)");
  o.submit->add_option("--rank", o.rank, "The job's rank in its --group (0 to 65535)");
  o.submit->add_option("--address", o.addresses,
                       "A service address of the job, ADDR/PREFIX or ADDR/PREFIX@DEVICE (repeatable): on the node "
                       "that runs it and only there; a live migration moves it, and the job's established "
                       "connections to it, with the job")
      ->allow_extra_args(false);  // one per --address: a list would swallow the "--" before the command
  o.submit->add_option("command", o.command, "The command the node runs, after --");

  CLI::App* group = app.add_subcommand("group", "Job groups: ranks on several nodes checkpointed and restored together");
  group->require_subcommand(1);
  o.group_checkpoint = group->add_subcommand(
      "checkpoint", "One consistent checkpoint of every rank: all frozen and dumped before any runs again");
  common(o.group_checkpoint);
  o.group_checkpoint->add_option("group", o.group, "Group name")->required();
  o.group_checkpoint->add_flag("--stop", o.stop, "Stop every rank once the group checkpoint is recorded");
  o.group_restore = group->add_subcommand(
      "restore", "Every rank back from one group checkpoint, each on the node that took its part");
  common(o.group_restore);
  o.group_restore->add_option("group", o.group, "Group name")->required();
  o.group_restore->add_option("--checkpoint", o.group_ckpt, "The group checkpoint's id (default: the newest)");
  o.group_list = group->add_subcommand("list", "The group's checkpoints, oldest first");
  common(o.group_list);
  o.group_list->add_option("group", o.group, "Group name")->required();

  CLI::App* cluster = app.add_subcommand("cluster", "The controller's view of the cluster");
  cluster->require_subcommand(1);
  o.cluster_status = cluster->add_subcommand("status", "Nodes, their health and free resources; jobs and where they run");
  common(o.cluster_status);
  o.scale_down = cluster->add_subcommand("scale-down", "Free GPUs: the scale-down rule suspends the lowest-priority jobs");
  common(o.scale_down);
  o.scale_down->add_option("--gpus", o.scale_gpus, "GPUs to free")->required();

  CLI::App* job = app.add_subcommand("job", "Jobs known to the controller");
  job->require_subcommand(1);
  o.job_explain = job->add_subcommand("explain", "Why a job runs where it does, with every node's score");
  common(o.job_explain);
  o.job_explain->add_option("job", o.job, "Job id")->required();
  o.job_cancel = job->add_subcommand("cancel", "Cancel a job: its node stops it and the controller forgets it");
  common(o.job_cancel);
  o.job_cancel->add_option("job", o.job, "Job id")->required();
  o.remove_node = cluster->add_subcommand("remove-node", "Take a node out of the cluster (no job may be bound to it)");
  common(o.remove_node);
  o.remove_node->add_option("node", o.node, "Node id")->required();

  o.events = app.add_subcommand("events", "The controller's decisions and what led to them, oldest first");
  common(o.events);
  o.events->add_option("--job", o.job, "Only events about this job");
  o.events->add_option("--node", o.node, "Only events about this node");
  o.events->add_option("--last", o.limit, "Only the newest N");
  o.events->add_option("--after", o.after, "Only events after this sequence number");
}

ControllerCommands::~ControllerCommands() = default;

bool ControllerCommands::Parsed() const {
  return o_->submit->parsed() || o_->cluster_status->parsed() || o_->scale_down->parsed() ||
         o_->job_explain->parsed() || o_->events->parsed() || o_->job_cancel->parsed() ||
         o_->remove_node->parsed() || o_->group_checkpoint->parsed() || o_->group_restore->parsed() ||
         o_->group_list->parsed();
}

int ControllerCommands::Run() {
  Options& o = *o_;
  std::string token;
  if (!o.token_file.empty()) {
    bool ok = false;
    token = ReadFile(o.token_file, &ok);
    if (!ok) return Fail(absl::StatusCode::kInvalidArgument, absl::StrCat("--token-file ", o.token_file, ": cannot read it"));
  } else if (const char* t = std::getenv("CAIRN_TOKEN")) {
    token = t;
  }
  if (o.tls_ca.empty() && std::getenv("CAIRN_TLS_CA") != nullptr) o.tls_ca = std::getenv("CAIRN_TLS_CA");
  // A group checkpoint or restore takes as long as its slowest rank: wait for it unless told.
  for (CLI::App* slow : {o.group_checkpoint, o.group_restore}) {
    if (slow->parsed() && slow->get_option("--timeout")->count() == 0) o.timeout_s = 900;
  }
  Client client(o.controllers, token, o.timeout_s, o.tls_ca);
  using Stub = api::Controller::Stub;

  if (o.submit->parsed()) {
    api::SubmitJobRequest req;
    api::JobSpec* s = req.mutable_spec();
    s->set_id(o.id);
    s->set_cpus(o.cpus);
    if (!o.memory.empty()) {
      int64_t bytes = ParseSize(o.memory);
      if (bytes <= 0) {
        return Fail(absl::StatusCode::kInvalidArgument,
                    absl::StrCat("--memory ", o.memory, ": not a size; write e.g. 512M or 2G"));
      }
      o.memory_mb = (bytes + (int64_t{1} << 20) - 1) >> 20;  // MiB, rounded up
    }
    s->set_memory_mb(o.memory_mb);
    s->set_gpus(o.gpus);
    s->set_gpu_type(o.gpu_type);
    s->set_priority(o.priority);
    s->set_service(o.service);
    if (!o.deadline.empty()) {
      absl::Duration d;
      if (!absl::ParseDuration(o.deadline, &d) || d <= absl::ZeroDuration() || d == absl::InfiniteDuration()) {
        return Fail(absl::StatusCode::kInvalidArgument, absl::StrCat("--deadline ", o.deadline, ": not a positive finite duration; write e.g. 6h, 90m, 1h30m"));
      }
      s->set_deadline(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch() + d));
    }
    s->set_max_downtime_s(o.max_downtime_s);
    s->set_budget_usd(o.budget);
    s->set_work_s(o.work_h * 3600);
    s->set_downtime_cost_per_hour(o.downtime_cost);
    api::CheckpointPolicy* c = s->mutable_checkpoint();
    c->set_interval_s(o.ckpt_interval);
    c->set_pause_s(o.ckpt_pause);
    c->set_on_notice(o.on_notice);
    c->set_notice_checkpoint_s(o.notice_ckpt);
    c->set_bytes(o.ckpt_bytes);
    c->set_restore_s(o.restore_s);
    for (const std::string& kv : o.selector) {
      std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
      if (p.first.empty() || !absl::StrContains(kv, '=')) {
        return Fail(absl::StatusCode::kInvalidArgument, absl::StrCat("--node-label ", kv, ": write KEY=VALUE"));
      }
      (*s->mutable_node_selector())[p.first] = p.second;
    }
    for (const std::string& a : o.command) s->add_command(a);
    s->set_user(o.user);
    s->set_group(o.group);
    s->set_rank(o.rank);
    for (const std::string& a : o.addresses) s->add_addresses(a);
    if (o.cpu_baseline == "cluster") {  // the level every node that reported one has
      api::ClusterStatusResponse cluster;
      grpc::Status st = client.Call(&Stub::ClusterStatus, api::ClusterStatusRequest(), &cluster);
      if (!st.ok()) {
        return Fail(static_cast<absl::StatusCode>(st.error_code()),
                    absl::StrCat("submit --cpu-baseline cluster: ", st.error_message()));
      }
      int common = 0;
      for (const api::NodeStatus& n : cluster.nodes()) {
        if (n.spec().cpu_level() > 0) common = common == 0 ? n.spec().cpu_level() : std::min(common, n.spec().cpu_level());
      }
      if (common == 0) {
        return Fail(absl::StatusCode::kFailedPrecondition,
                    "submit --cpu-baseline cluster: no registered node has said what its CPU is");
      }
      s->set_cpu_baseline(LevelName(common));
    } else {
      s->set_cpu_baseline(o.cpu_baseline);
    }
    // The controller refuses the same; checked here first so that nothing is sent.
    if (absl::Status bad = controller::CheckSubmittedJob(*s); !bad.ok()) return Fail(Annotate(bad, "submit"));
    api::SubmitJobResponse resp;
    grpc::Status st = client.Call(&Stub::SubmitJob, req, &resp);
    if (!st.ok()) return Fail(static_cast<absl::StatusCode>(st.error_code()), st.error_message());
    if (o.json) return PrintJson(resp);
    if (resp.node_id().empty()) {
      std::printf("job %s pending: %s\n", resp.job_id().c_str(), resp.reason().c_str());
    } else {
      std::printf("job %s placed on %s: %s\n", resp.job_id().c_str(), resp.node_id().c_str(), resp.reason().c_str());
    }
    return 0;
  }

  if (o.cluster_status->parsed()) {
    api::ClusterStatusResponse resp;
    grpc::Status st = client.Call(&Stub::ClusterStatus, api::ClusterStatusRequest(), &resp);
    if (!st.ok()) return Fail(static_cast<absl::StatusCode>(st.error_code()), st.error_message());
    if (o.json) return PrintJson(resp);
    std::printf("controller %s, store %s\ndispatcher: %s\n\n", resp.controller_id().c_str(), resp.store().c_str(),
                resp.dispatcher().c_str());
    std::printf("%-20s %-9s %-9s %9s %-6s %11s %15s %17s %-9s %-12s %7s  %s\n", "NODE", "HEALTH", "MARKET", "$/H",
                "GPU", "GPUS free", "CPUS free", "MEM MB free", "CPU", "ZONE", "HB AGO", "JOBS");
    for (const api::NodeStatus& n : resp.nodes()) {
      const api::NodeSpec& s = n.spec();
      std::printf("%-20s %-9s %-9s %9.4f %-6s %5d/%-5d %7.1f/%-7.1f %8lld/%-8lld %-9s %-12s %6.1fs  %s\n",
                  s.id().c_str(), n.health().c_str(), s.spot() ? "spot" : "on-demand", s.price_per_hour(),
                  s.gpu_type().empty() ? "-" : s.gpu_type().c_str(), n.free_gpus(), s.gpus(), n.free_cpus(), s.cpus(),
                  static_cast<long long>(n.free_memory_mb()), static_cast<long long>(s.memory_mb()),
                  s.cpu_level() > 0 ? LevelName(s.cpu_level()).c_str() : "-", s.zone().empty() ? "-" : s.zone().c_str(), n.seconds_since_heartbeat(),
                  n.job_ids().empty() ? "-" : absl::StrJoin(n.job_ids(), ",").c_str());
    }
    // The baseline every node meets: what a job must keep to to move anywhere in the cluster.
    int lowest = 0, highest = 0;
    for (const api::NodeStatus& n : resp.nodes()) {
      int level = n.spec().cpu_level();
      if (level <= 0) continue;
      lowest = lowest == 0 ? level : std::min(lowest, level);
      highest = std::max(highest, level);
    }
    if (lowest > 0) {
      std::printf("\nCPU baseline every node meets: %s%s\n", LevelName(lowest).c_str(),
                  highest > lowest ? absl::StrFormat(" (some are %s: a job started there may use what the others lack; "
                                                     "cairn submit --cpu-baseline cluster keeps it movable to all)",
                                                     LevelName(highest)).c_str()
                                   : "");
    }
    std::printf("\n%-20s %-10s %-20s %8s %5s %6s %9s  %s\n", "JOB", "STATE", "NODE", "PRIORITY", "GPUS", "CPUS",
                "MEM MB", "PENDING ACTION");
    for (const api::JobStatus& j : resp.jobs()) {
      const api::JobSpec& s = j.spec();
      std::printf("%-20s %-10s %-20s %8d %5d %6.1f %9lld  %s\n", s.id().c_str(), j.state().c_str(),
                  j.node_id().empty() ? "-" : j.node_id().c_str(), s.priority(), s.gpus(), s.cpus(),
                  static_cast<long long>(s.memory_mb()), j.pending_action().empty() ? "-" : j.pending_action().c_str());
      // A job no node can take says why (cairn job explain JOB has each node's figures).
      if (!j.waiting().empty()) std::printf("%-20s waits: %s\n", "", j.waiting().c_str());
    }
    return 0;
  }

  // Calls whose answer is the events they caused.
  auto events_call = [&](auto method, const auto& req, auto resp) {
    grpc::Status st = client.Call(method, req, &resp);
    if (!st.ok()) return Fail(static_cast<absl::StatusCode>(st.error_code()), st.error_message());
    if (o.json) return PrintJson(resp);
    for (const api::Event& e : resp.events()) PrintEvent(e);
    return 0;
  };
  if (o.scale_down->parsed()) {
    api::ScaleDownRequest req;
    req.set_gpus(o.scale_gpus);
    return events_call(&Stub::ScaleDown, req, api::ScaleDownResponse());
  }
  if (o.job_cancel->parsed()) {
    api::CancelJobRequest req;
    req.set_job_id(o.job);
    return events_call(&Stub::CancelJob, req, api::CancelJobResponse());
  }
  if (o.remove_node->parsed()) {
    api::RemoveNodeRequest req;
    req.set_node_id(o.node);
    return events_call(&Stub::RemoveNode, req, api::RemoveNodeResponse());
  }

  if (o.group_checkpoint->parsed() || o.group_restore->parsed() || o.group_list->parsed()) {
    if (absl::Status bad = CheckJobName(o.group, "group name"); !bad.ok()) return Fail(Annotate(bad, "group"));
    auto print = [](const api::GroupCheckpoint& g) {
      std::printf("%s  %s  %d ranks  slowest dump %.3f s  longest frozen %.3f s%s\n", g.id().c_str(),
                  TimeString(g.created()).c_str(), g.ranks_size(), g.dump_max_s(), g.frozen_max_s(),
                  g.stopped() ? "  (ranks stopped)" : "");
      for (const api::RankCheckpoint& r : g.ranks()) {
        std::printf("  rank %-4d job %-20s node %-16s %s  dump %.3f s  frozen %.3f s\n", r.rank(), r.job_id().c_str(),
                    r.node_id().c_str(), r.checkpoint().c_str(), r.dump_s(), r.frozen_s());
      }
    };
    grpc::Status st;
    if (o.group_checkpoint->parsed()) {
      api::CheckpointGroupRequest req;
      req.set_group(o.group);
      req.set_stop(o.stop);
      api::CheckpointGroupResponse resp;
      st = client.Call(&Stub::CheckpointGroup, req, &resp);
      if (!st.ok()) return Fail(static_cast<absl::StatusCode>(st.error_code()), st.error_message());
      if (o.json) return PrintJson(resp);
      print(resp.checkpoint());
    } else if (o.group_restore->parsed()) {
      api::RestoreGroupRequest req;
      req.set_group(o.group);
      req.set_checkpoint(o.group_ckpt);
      api::RestoreGroupResponse resp;
      st = client.Call(&Stub::RestoreGroup, req, &resp);
      if (!st.ok()) return Fail(static_cast<absl::StatusCode>(st.error_code()), st.error_message());
      if (o.json) return PrintJson(resp);
      std::printf("group %s restored from %s\n", o.group.c_str(), resp.checkpoint().id().c_str());
      for (const std::string& n : resp.notes()) std::printf("  %s\n", n.c_str());
    } else {
      api::ListGroupCheckpointsRequest req;
      req.set_group(o.group);
      api::ListGroupCheckpointsResponse resp;
      st = client.Call(&Stub::ListGroupCheckpoints, req, &resp);
      if (!st.ok()) return Fail(static_cast<absl::StatusCode>(st.error_code()), st.error_message());
      if (o.json) return PrintJson(resp);
      for (const api::GroupCheckpoint& g : resp.checkpoints()) print(g);
    }
    return 0;
  }

  if (o.job_explain->parsed()) {
    api::ExplainJobRequest req;
    req.set_job_id(o.job);
    api::ExplainJobResponse resp;
    grpc::Status st = client.Call(&Stub::ExplainJob, req, &resp);
    if (!st.ok()) return Fail(static_cast<absl::StatusCode>(st.error_code()), st.error_message());
    if (o.json) return PrintJson(resp);
    std::printf("%s", resp.text().c_str());
    return 0;
  }

  if (o.events->parsed()) {
    api::ListEventsRequest req;
    req.set_job_id(o.job);
    req.set_node_id(o.node);
    req.set_limit(o.limit);
    req.set_after_seq(o.after);
    api::ListEventsResponse resp;
    grpc::Status st = client.Call(&Stub::ListEvents, req, &resp);
    if (!st.ok()) return Fail(static_cast<absl::StatusCode>(st.error_code()), st.error_message());
    if (o.json) return PrintJson(resp);
    for (const api::Event& e : resp.events()) PrintEvent(e);
    return 0;
  }
  return 2;
}

}  // namespace cairn::cli
