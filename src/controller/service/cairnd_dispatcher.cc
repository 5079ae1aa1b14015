#include "controller/service/cairnd_dispatcher.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/cpu_levels.h"
#include "common/grpc_server.h"
#include "common/log.h"
#include "controller/service/group_checkpoint.h"

namespace cairn::controller {
namespace {

namespace dapi = ::cairn::daemon::api;

// The deadline of calls to a node that was lost or has just come back (seconds).
constexpr double kLostNodeCallS = 5;
// A migration's deadline beyond the call timeout (seconds): the source waits up to 60 s for a
// checkpoint in progress and up to 60 s for the target's restore.
constexpr double kMigrationExtraS = 150;

// An error after which the job surely runs on where it was (the daemon refused, or the migration
// failed and was rolled back), as against no answer at all.
bool IsFinal(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kInternal:
      return false;
    default:
      return true;
  }
}

std::string Why(const grpc::Status& s) {
  return absl::StrCat(s.error_message(), " (gRPC code ", s.error_code(), ")");
}

absl::Status ToAbsl(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

}  // namespace

CairndDispatcher::CairndDispatcher(double call_timeout_s, std::string tls_ca)
    : call_timeout_s_(call_timeout_s), tls_ca_(std::move(tls_ca)) {}

std::string CairndDispatcher::Describe() const {
  std::lock_guard<std::mutex> l(mu_);
  int with = 0;
  for (const auto& [id, d] : daemons_) with += d.stub != nullptr;
  return absl::StrFormat("cairnd: decisions are carried out by the node daemons over their gRPC API "
                         "(%d of %d registered nodes gave a daemon address); jobs move by live migration "
                         "between the daemons, else through checkpoint storage the nodes share "
                         "(cairnd --storage dir:/PATH or s3://...)",
                         with, daemons_.size());
}

void CairndDispatcher::NodeRegistered(const std::string& node_id, const std::string& daemon_address,
                                      const std::string& daemon_token) {
  std::lock_guard<std::mutex> l(mu_);
  NodeDaemon& d = daemons_[node_id];
  d.address = daemon_address;
  d.token = daemon_token;
  d.stub.reset();
  d.error.clear();
  if (daemon_address.empty()) return;
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds = ClientCredentials(daemon_address, tls_ca_);
  if (!creds.ok()) {
    d.error = std::string(creds.status().message());
    CAIRN_LOG_WARN("dispatcher: cannot reach node {}'s daemon at {}: {}", node_id, daemon_address, d.error);
    return;
  }
  grpc::ChannelArguments args;  // a restarted daemon is reached again within a second
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  d.stub = dapi::Daemon::NewStub(grpc::CreateCustomChannel(daemon_address, *creds, args));
}

bool CairndDispatcher::Reaches(const std::string& node_id) const {
  std::lock_guard<std::mutex> l(mu_);
  return daemons_.count(node_id) > 0;
}

CairndDispatcher::NodeDaemon* CairndDispatcher::Find(const std::string& node_id, std::string* why) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = daemons_.find(node_id);
  if (it == daemons_.end()) {
    *why = absl::StrCat("not carried out: node ", node_id,
                        " has not registered with this controller since it started (its daemon is asked to)");
    return nullptr;
  }
  if (it->second.stub == nullptr) {
    *why = it->second.address.empty()
               ? absl::StrCat("not carried out: node ", node_id,
                              " registered without a daemon address (start cairnd there with --controller)")
               : absl::StrCat("not carried out: node ", node_id, "'s daemon at ", it->second.address,
                              " cannot be reached: ", it->second.error);
    return nullptr;
  }
  return &it->second;
}


DispatchResult CairndDispatcher::Run(const std::string& job_id, const std::vector<std::string>& command,
                                     const std::string& node_id) {
  std::string why;
  NodeDaemon* d = Find(node_id, &why);
  if (d == nullptr) return {false, why};
  if (command.empty()) {
    return {false,
            absl::StrCat("not carried out: job ", job_id,
                         " has no command for the node daemon to run (cairn submit ... -- CMD ARGS)"),
            false, /*final=*/true};
  }
  dapi::RunJobRequest req;
  dapi::JobSpec* s = req.mutable_spec();
  s->set_name(job_id);
  for (const std::string& a : command) s->add_command(a);
  if (auto u = users_.find(job_id); u != users_.end()) s->set_user(u->second);
  if (auto b = baselines_.find(job_id); b != baselines_.end()) s->set_cpu_baseline(LevelName(b->second));
  if (auto g = ranks_.find(job_id); g != ranks_.end()) {
    s->set_group(g->second.first);
    s->set_rank(g->second.second);
  }
  if (auto a = addresses_.find(job_id); a != addresses_.end()) {
    for (const std::string& text : a->second) s->add_addresses(text);
  }
  s->mutable_checkpoint()->set_on_shutdown(true);
  if (auto p = intervals_.find(job_id); p != intervals_.end()) s->mutable_checkpoint()->set_interval_s(p->second);
  // What placement counted it for is what it may use there: a CPU quota and a memory limit of
  // its cgroup on the node (kept across its checkpoints, restores and migrations).
  if (auto r = requests_.find(job_id); r != requests_.end()) {
    s->mutable_limits()->set_cpus(r->second.cpus);
    s->mutable_limits()->set_memory_bytes(r->second.memory_mb * 1024 * 1024);
  }
  dapi::RunJobResponse resp;
  grpc::Status st = Call(*d, &dapi::Daemon::Stub::RunJob, req, &resp);
  if (st.error_code() == grpc::StatusCode::ALREADY_EXISTS) {
    // A retry after a lost reply finds the job there already: started if it runs.
    dapi::GetJobRequest g;
    g.set_name(job_id);
    dapi::GetJobResponse got;
    if (Call(*d, &dapi::Daemon::Stub::GetJob, g, &got).ok() && got.job().state() == "running") {
      return {true, absl::StrFormat("already running on %s (cairnd at %s, pid %d)", node_id, d->address,
                                    got.job().host_pid())};
    }
  }
  if (!st.ok()) {
    return {false,
            absl::StrCat("not carried out: cairnd on ", node_id, " at ", d->address, " refused RunJob: ", Why(st)), true};
  }
  return {true, absl::StrFormat("started on %s by cairnd at %s: pid %d", node_id, d->address, resp.job().host_pid())};
}

void CairndDispatcher::KnowJob(const Job& job) {
  if (!job.spec.command.empty()) commands_[job.spec.id] = job.spec.command;
  if (!job.spec.user.empty()) users_[job.spec.id] = job.spec.user;
  if (job.spec.cpu_baseline > 0) baselines_[job.spec.id] = job.spec.cpu_baseline;
  if (!job.spec.group.empty()) ranks_[job.spec.id] = {job.spec.group, job.spec.rank};
  if (!job.spec.addresses.empty()) addresses_[job.spec.id] = job.spec.addresses;
  if (job.spec.checkpoint.interval_s > 0) intervals_[job.spec.id] = job.spec.checkpoint.interval_s;
  requests_[job.spec.id] = job.spec.request;
}

DispatchResult CairndDispatcher::StartJob(const Job& job, const Node& node) {
  KnowJob(job);
  return Run(job.spec.id, job.spec.command, node.spec.id);
}

absl::StatusOr<dapi::Checkpoint> CairndDispatcher::Checkpoint(const std::string& job_id, const std::string& node_id,
                                                              bool stop) {
  std::string why;
  NodeDaemon* d = Find(node_id, &why);
  if (d == nullptr) return absl::UnavailableError(why);
  dapi::CheckpointJobRequest req;
  req.set_name(job_id);
  req.set_pin(true);
  req.set_kill(stop);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    dapi::CheckpointJobResponse resp;
    grpc::Status st = Call(*d, &dapi::Daemon::Stub::CheckpointJob, req, &resp);
    if (st.ok()) return resp.checkpoint();
    bool busy = st.error_code() == grpc::StatusCode::FAILED_PRECONDITION &&
                absl::StrContains(st.error_message(), "in progress");
    if (!busy || std::chrono::steady_clock::now() > until) {
      return absl::Status(ToAbsl(st).code(), absl::StrCat("cairnd on ", node_id, " at ", d->address,
                                                           " refused CheckpointJob ", job_id, ": ", Why(st)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

absl::StatusOr<dapi::MigrateJobResponse> CairndDispatcher::Migrate(const std::string& job_id, NodeDaemon& src,
                                                                    const NodeDaemon& dst) {
  dapi::MigrateJobRequest req;
  req.set_name(job_id);
  req.set_to(dst.address);
  req.set_token(dst.token);
  // Bounded as this call's deadline assumes (the daemon's own default grows with the job's memory).
  req.set_restore_timeout_s(60);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    dapi::MigrateJobResponse resp;
    // A migration may wait up to 60 s for a checkpoint in progress and up to 60 s for the
    // target's restore, on top of the copy: its deadline is longer than other calls'.
    grpc::Status st = Call(src, &dapi::Daemon::Stub::MigrateJob, req, &resp, call_timeout_s_ + kMigrationExtraS);
    if (st.ok()) return resp;
    // A checkpoint the daemon takes on its own (a spot notice's) is let finish first.
    bool busy = st.error_code() == grpc::StatusCode::FAILED_PRECONDITION &&
                absl::StrContains(st.error_message(), "in progress");
    if (!busy || std::chrono::steady_clock::now() > until) return ToAbsl(st);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

DispatchResult CairndDispatcher::Move(const Decision& d) {
  // The ways a job's state reaches another node, best first:
  //   (1) daemon-to-daemon live migration (MigrateJob): the job runs on while most of its memory
  //       moves; on failure it runs on at the source, untouched;
  //   (2) a checkpoint into the storage both nodes share, restored on the target (below);
  //   otherwise a pinned checkpoint is taken where the job runs, and the move is not carried out.
  std::string why;
  NodeDaemon* src = d.node_id.empty() ? nullptr : Find(d.node_id, &why);
  if (src == nullptr) {
    return {false, absl::StrCat("not yet available: moving job ", d.job_id, " to ", d.target_node_id,
                                " needs the node it runs on, and ", d.node_id.empty() ? "the job runs nowhere" : why)};
  }
  NodeDaemon* dst = Find(d.target_node_id, &why);
  if (dst == nullptr) return {false, why};
  // Live migration sends the target's token to the source; daemons migrate to each other in the
  // clear, so with TLS in the cluster moves go through the store.
  absl::StatusOr<dapi::MigrateJobResponse> live =
      tls_ca_.empty() ? Migrate(d.job_id, *src, *dst)
                      : absl::StatusOr<dapi::MigrateJobResponse>(absl::FailedPreconditionError(
                            "not tried: daemons migrate to each other without TLS, and this cluster uses TLS"));
  if (!live.ok() && !IsFinal(live.status())) {
    // No answer (a deadline, a broken connection): the migration may have gone through. The
    // source says where the job is.
    dapi::GetJobRequest g;
    g.set_name(d.job_id);
    dapi::GetJobResponse got;
    grpc::Status gst = Call(*src, &dapi::Daemon::Stub::GetJob, g, &got);
    if (gst.ok() && got.job().state() == "migrated") {
      return {true, absl::StrCat("migrated live from ", d.node_id, " to ", d.target_node_id, " (the reply was lost: ",
                                 live.status().message(), "; ", d.node_id, " says: ", got.job().health().detail(), ")")};
    }
    if (!gst.ok() || got.job().state() != "running") {
      std::string where = gst.ok() ? absl::StrCat(" says the job is ", got.job().state())
                                   : absl::StrCat(" does not answer: ", Why(gst));
      return {false,
              absl::StrCat("not carried out: live migration to ", d.target_node_id, " ended without an answer (",
                           live.status().message(), ") and cairnd on ", d.node_id, where, "; nothing else was tried"),
              true};
    }
  }
  if (live.ok()) {
    return {true, absl::StrFormat("migrated live from %s to %s: job frozen %.3f s, %d bytes moved (%d while it ran) "
                                  "in %.3f s; %s keeps checkpoint %s",
                                  d.node_id, d.target_node_id, live->downtime_s(), live->bytes(), live->precopy_bytes(),
                                  live->total_s(), d.target_node_id, live->checkpoint())};
  }
  std::string not_live = absl::StrCat("live migration failed (", live.status().message(), "); ");
  CAIRN_LOG_WARN("dispatcher: {}: {}trying checkpoint storage", d.job_id, not_live);
  dapi::NodeInfoResponse info;
  {
    grpc::Status st = Call(*src, &dapi::Daemon::Stub::NodeInfo, dapi::NodeInfoRequest(), &info);
    if (!st.ok()) {
      return {false, absl::StrCat(not_live, "not carried out: cairnd on ", d.node_id, " does not answer NodeInfo: ", Why(st)),
              true};
    }
  }
  if (info.storage().empty() || info.storage() == "local") {
    absl::StatusOr<dapi::Checkpoint> ck = Checkpoint(d.job_id, d.node_id, /*stop=*/false);
    std::string saved = ck.ok() ? absl::StrFormat("checkpoint %s taken on %s (pinned; the job keeps running there)",
                                                  ck->id(), d.node_id)
                                : absl::StrCat("no checkpoint taken on ", d.node_id, ": ", ck.status().message());
    return {false, absl::StrCat(not_live, "moving job ", d.job_id, " from ", d.node_id, " to ", d.target_node_id,
                                " through checkpoint storage needs a store both nodes share, and ", d.node_id,
                                " keeps its checkpoints on its local disk (cairnd --storage dir:/SHARED or "
                                "s3://BUCKET on both); ", saved),
            false, /*final=*/true};
  }
  // Stop the job at its checkpoint, so no work is done twice or lost.
  absl::StatusOr<dapi::Checkpoint> ck = Checkpoint(d.job_id, d.node_id, /*stop=*/true);
  if (!ck.ok()) {
    return {false, absl::StrCat(not_live, "not carried out (the job runs on where it was): ", ck.status().message()),
            true};
  }
  dapi::RestoreJobRequest req;
  req.set_name(d.job_id);
  req.set_from(ck->location());
  dapi::RestoreJobResponse resp;
  grpc::Status st = Call(*dst, &dapi::Daemon::Stub::RestoreJob, req, &resp);
  if (st.ok()) {
    return {true, absl::StrFormat("moved through %s: checkpoint %s on %s (%d bytes, job frozen %.3f s) restored on %s "
                                  "as pid %d in %.3f s (%s)",
                                  info.storage(), ck->id(), d.node_id, ck->size_bytes(), ck->frozen_s(),
                                  d.target_node_id, resp.job().host_pid(), resp.seconds(),
                                  absl::StripSuffix(not_live, "; "))};
  }
  // The target could not take it: the job goes back to running where it was, from that checkpoint.
  dapi::RestoreJobRequest back;
  back.set_name(d.job_id);
  back.set_checkpoint(ck->id());
  dapi::RestoreJobResponse back_resp;
  grpc::Status bst = Call(*src, &dapi::Daemon::Stub::RestoreJob, back, &back_resp);
  return {false,
          absl::StrCat(not_live, "not carried out: cairnd on ", d.target_node_id, " refused RestoreJob from ", ck->location(), ": ",
                       Why(st), bst.ok() ? absl::StrCat("; the job runs again on ", d.node_id, " from that checkpoint")
                                         : absl::StrCat("; and restoring it on ", d.node_id, " failed too: ", Why(bst))),
          true};
}

std::string CairndDispatcher::StopOld(const Decision& d) {
  // A lost node is not asked: it does not answer, or (cut off by a partition) would take the
  // request only when it comes back -- and then it is fenced (the controller's Kill), which says so.
  if (d.rule == "node-lost") return absl::StrCat(d.node_id, " is lost: its copy is stopped when it comes back; ");
  std::string why;
  NodeDaemon* old = d.node_id.empty() ? nullptr : Find(d.node_id, &why);
  if (old == nullptr) return "";
  dapi::KillJobRequest k;
  k.set_name(d.job_id);
  dapi::KillJobResponse kr;
  // A node that does not answer would hold the call (and the controller) to its deadline, so it
  // is short.
  grpc::Status st = Call(*old, &dapi::Daemon::Stub::KillJob, k, &kr, kLostNodeCallS);
  return st.ok() ? absl::StrCat("stopped on ", d.node_id, "; ")
                 : absl::StrCat("not stopped on ", d.node_id, " (", Why(st), "); ");
}

ActionDispatcher::JobWhere CairndDispatcher::Locate(const std::string& job_id, const std::string& node_id) {
  std::string why;
  NodeDaemon* d = Find(node_id, &why);
  if (d == nullptr) return {JobWhere::kUnreachable, why, 0};
  dapi::GetJobRequest g;
  g.set_name(job_id);
  dapi::GetJobResponse got;
  grpc::Status st = Call(*d, &dapi::Daemon::Stub::GetJob, g, &got, kLostNodeCallS);
  if (st.error_code() == grpc::StatusCode::NOT_FOUND) return {JobWhere::kAbsent, "no such job", 0};
  if (!st.ok()) return {JobWhere::kUnreachable, absl::StrCat("cairnd does not answer GetJob: ", Why(st)), 0};
  const std::string& state = got.job().state();
  JobWhere::Kind kind = JobWhere::kGone;
  if (state == "running") {
    kind = JobWhere::kRunning;
  } else if (state == "starting" || state == "checkpointing" || state == "restoring" || state == "migrating") {
    kind = JobWhere::kBusy;
  }
  return {kind, state, got.job().host_pid()};
}

absl::StatusOr<std::vector<std::pair<std::string, int>>> CairndDispatcher::RunningJobs(const std::string& node_id) {
  std::string why;
  NodeDaemon* d = Find(node_id, &why);
  if (d == nullptr) return absl::UnavailableError(why);
  dapi::ListJobsResponse jobs;
  if (grpc::Status st = Call(*d, &dapi::Daemon::Stub::ListJobs, dapi::ListJobsRequest(), &jobs, kLostNodeCallS); !st.ok()) {
    return absl::UnavailableError(absl::StrCat("its daemon does not answer ListJobs: ", Why(st)));
  }
  std::vector<std::pair<std::string, int>> out;
  for (const dapi::Job& j : jobs.jobs()) {
    if (j.state() == "running") out.emplace_back(j.name(), j.host_pid());
  }
  return out;
}

DispatchResult CairndDispatcher::Kill(const std::string& job_id, const std::string& node_id) {
  std::string why;
  NodeDaemon* d = Find(node_id, &why);
  if (d == nullptr) return {false, why, true};
  dapi::KillJobRequest k;
  k.set_name(job_id);
  dapi::KillJobResponse kr;
  grpc::Status st = Call(*d, &dapi::Daemon::Stub::KillJob, k, &kr, kLostNodeCallS);
  if (st.ok()) return {true, absl::StrCat("stopped there")};
  return {false, absl::StrCat("could not be stopped there: ", Why(st)), true};
}

DispatchResult CairndDispatcher::RestoreNewest(const Decision& d, const std::string& stopped) {
  std::string why;
  NodeDaemon* dst = Find(d.target_node_id, &why);
  if (dst == nullptr) return {false, stopped + why};
  // The target's daemon picks the job's newest checkpoint complete in the store it shares with
  // the old node, taken no later than the one the decision names (the controller's record of it
  // is the time the node reported it complete, at or after the time in its id).
  dapi::RestoreJobRequest req;
  req.set_name(d.job_id);
  req.set_newest_stored(true);
  req.set_taken_before(d.restore_from_time);
  dapi::RestoreJobResponse resp;
  grpc::Status st = Call(*dst, &dapi::Daemon::Stub::RestoreJob, req, &resp);
  if (!st.ok()) {
    return {false,
            absl::StrCat(stopped, "not carried out: cairnd on ", d.target_node_id, " at ", dst->address,
                         " refused RestoreJob of job ", d.job_id, "'s newest stored checkpoint up to t=",
                         absl::StrFormat("%.3f", d.restore_from_time), ": ", Why(st)),
            true};
  }
  return {true, absl::StrFormat("%srestored on %s from its newest checkpoint in the shared store (up to t=%.3f) as "
                                "pid %d in %.3f s",
                                stopped, d.target_node_id, d.restore_from_time, resp.job().host_pid(), resp.seconds())};
}

DispatchResult CairndDispatcher::StopJob(const Job& job, const Node& node) {
  std::string why;
  NodeDaemon* d = Find(node.spec.id, &why);
  // A node without a daemon has nobody to ask; one not registered yet (or unreachable) is retried.
  if (d == nullptr) return {false, why, !absl::StrContains(why, "without a daemon address")};
  dapi::KillJobRequest req;
  req.set_name(job.spec.id);
  req.set_cancel(true);  // its checkpoints there go with it (cairnd's CancelJob); its logs stay
  dapi::KillJobResponse resp;
  grpc::Status st = Call(*d, &dapi::Daemon::Stub::KillJob, req, &resp);
  if (st.ok()) {
    return {true, absl::StrCat("cancelled on ", node.spec.id, " by cairnd at ", d->address,
                               " (killed, its checkpoints there removed)")};
  }
  if (st.error_code() == grpc::StatusCode::NOT_FOUND ||
      (st.error_code() == grpc::StatusCode::FAILED_PRECONDITION && absl::StrContains(st.error_message(), "does not run"))) {
    return {true, absl::StrCat("no longer running on ", node.spec.id, ": ", st.error_message())};
  }
  return {false, absl::StrCat("cairnd on ", node.spec.id, " at ", d->address, " refused KillJob: ", Why(st)), true};
}

DispatchResult CairndDispatcher::Carry(const Decision& d) {
  std::string why;
  switch (d.action) {
    case Action::kDrainNode:
      return {true, absl::StrCat("node ", d.node_id, " drained: no daemon call, the controller places nothing there")};
    case Action::kCheckpoint: {
      absl::StatusOr<dapi::Checkpoint> ck = Checkpoint(d.job_id, d.node_id, /*stop=*/false);
      if (!ck.ok()) return {false, absl::StrCat("not carried out: ", ck.status().message()), true};
      return {true, absl::StrFormat("checkpoint %s complete on %s: %d bytes, job frozen %.3f s (pinned)", ck->id(),
                                    d.node_id, ck->size_bytes(), ck->frozen_s())};
    }
    case Action::kSuspend: {
      if (d.node_id.empty()) return {true, "suspended: the job was not running on any node"};
      absl::StatusOr<dapi::Checkpoint> ck = Checkpoint(d.job_id, d.node_id, /*stop=*/true);
      if (!ck.ok()) return {false, absl::StrCat("not carried out: ", ck.status().message()), true};
      Suspended& s = suspended_[d.job_id];
      s.node = d.node_id;
      s.id = ck->id();
      s.location = ck->location();
      s.shared = absl::StartsWith(s.location, "s3://");
      if (!s.shared) {  // a directory: shared when the node's store is a dir: store
        dapi::NodeInfoResponse info;
        if (NodeDaemon* nd = Find(d.node_id, &why); nd != nullptr) {
          s.shared = Call(*nd, &dapi::Daemon::Stub::NodeInfo, dapi::NodeInfoRequest(), &info).ok() &&
                     absl::StartsWith(info.storage(), "dir:");
        }
      }
      return {true, absl::StrFormat("checkpoint %s on %s complete and the job stopped; it resumes from %s", ck->id(),
                                    d.node_id, s.shared ? s.location : "it on " + d.node_id)};
    }
    case Action::kResume: {
      auto it = suspended_.find(d.job_id);
      if (it == suspended_.end() || (it->second.node != d.target_node_id && !it->second.shared)) {
        return {false, absl::StrCat("not yet available: resuming job ", d.job_id, " on ", d.target_node_id,
                                    it == suspended_.end()
                                        ? " needs its suspend checkpoint, which this controller did not take (since it started)"
                                        : absl::StrCat(" needs its checkpoint, which is on ", it->second.node,
                                                       "'s local disk (shared --storage on both nodes moves it)"))};
      }
      NodeDaemon* nd = Find(d.target_node_id, &why);
      if (nd == nullptr) return {false, why};
      dapi::RestoreJobRequest req;
      req.set_name(d.job_id);
      if (it->second.node == d.target_node_id) {
        req.set_checkpoint(it->second.id);
      } else {
        req.set_from(it->second.location);
      }
      dapi::RestoreJobResponse resp;
      grpc::Status st = Call(*nd, &dapi::Daemon::Stub::RestoreJob, req, &resp);
      if (!st.ok()) {
        return {false, absl::StrCat("not carried out: cairnd on ", d.target_node_id, " refused RestoreJob: ", Why(st)),
                true};
      }
      suspended_.erase(it);
      return {true, absl::StrFormat("restored on %s as pid %d in %.3f s", d.target_node_id, resp.job().host_pid(),
                                    resp.seconds())};
    }
    case Action::kRestore: {
      // The old copy must not run on beside the new one.
      std::string stopped = StopOld(d);
      if (d.restore_from_time >= 0) return RestoreNewest(d, stopped);
      // The command is the one the job was submitted with, as given to StartJob.
      auto cmd = commands_.find(d.job_id);
      if (cmd == commands_.end()) {
        return {false, absl::StrCat(stopped, "not carried out: the command of job ", d.job_id,
                                    " is not known to this dispatcher")};
      }
      DispatchResult r = Run(d.job_id, cmd->second, d.target_node_id);
      r.note = stopped + r.note;
      return r;
    }
    case Action::kMigrate:
      return Move(d);
  }
  return {false, "not carried out: unknown action", false, /*final=*/true};
}

absl::StatusOr<std::vector<RankPart>> CairndDispatcher::CheckpointGroup(
    const std::string& group, const std::string& id, const std::vector<RankRef>& ranks, bool stop,
    const std::function<absl::Status(const std::vector<RankPart>&)>& record) {
  std::vector<RankTarget> targets;
  for (const RankRef& r : ranks) {
    std::string why;
    NodeDaemon* d = Find(r.node_id, &why);
    if (d == nullptr) {
      return absl::UnavailableError(absl::StrCat("rank ", r.rank, " (job ", r.job_id, "): ", why));
    }
    RankTarget t;
    t.ref = r;
    t.stub = d->stub.get();
    t.authorize = [this, token = d->token](grpc::ClientContext& c) {
      if (!token.empty()) c.AddMetadata("authorization", "Bearer " + token);
      if (uint64_t term = term_.load(); term > 0) c.AddMetadata("cairn-controller-term", std::to_string(term));
    };
    targets.push_back(std::move(t));
  }
  GroupCheckpointOptions opts;
  opts.stop = stop;
  opts.prepare_timeout_s = call_timeout_s_;
  // Longer than any rank's capture may take: a rank that waits that long thaws on its own.
  opts.decide_timeout_s = call_timeout_s_ + 60;
  return RunGroupCheckpoint(group, id, targets, opts, record);
}

absl::Status CairndDispatcher::RestoreRank(const RankPart& part, const std::string& node_id) {
  std::string why;
  NodeDaemon* d = Find(node_id, &why);
  if (d == nullptr) return absl::UnavailableError(why);
  dapi::RestoreJobRequest req;
  req.set_name(part.ref.job_id);
  // On another node, which lacks the job, the id is looked up in the store the nodes share.
  req.set_checkpoint(part.checkpoint);
  req.set_hold_network(true);
  dapi::RestoreJobResponse resp;
  grpc::Status st = Call(*d, &dapi::Daemon::Stub::RestoreJob, req, &resp);
  if (!st.ok()) {
    return absl::Status(ToAbsl(st).code(), absl::StrCat("cairnd on ", node_id, " at ", d->address,
                                                        " refused to restore job ", part.ref.job_id, " from ",
                                                        part.checkpoint, ": ", Why(st)));
  }
  return absl::OkStatus();
}

absl::Status CairndDispatcher::ReleaseRankNetwork(const std::string& job_id, const std::string& node_id) {
  std::string why;
  NodeDaemon* d = Find(node_id, &why);
  if (d == nullptr) return absl::UnavailableError(why);
  dapi::ReleaseNetworkRequest req;
  req.set_name(job_id);
  dapi::ReleaseNetworkResponse resp;
  grpc::Status st = Call(*d, &dapi::Daemon::Stub::ReleaseNetwork, req, &resp);
  if (!st.ok()) {
    return absl::Status(ToAbsl(st).code(), absl::StrCat("cairnd on ", node_id, " could not lift the network lock of job ",
                                                        job_id, ": ", Why(st)));
  }
  return absl::OkStatus();
}

}  // namespace cairn::controller
