// The controller's job groups (docs/controller.md "Job groups"): jobs submitted with --group and
// --rank are the ranks of one distributed job. CheckpointGroup takes one consistent cut of all
// of them through the dispatcher (group_checkpoint.h) and records it in the store, under
// groups/GROUP/ID, only once every rank's part is complete and before any rank runs again;
// RestoreGroup brings every rank back from one such record, each on the node that holds its part.
//
// The ranks stay bound to their nodes in the cluster model while stopped (their resources
// held): a stopped group is restored where it was.

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/log.h"
#include "common/status.h"
#include "common/validate.h"
#include "controller/placement.h"
#include "controller/service/controller.h"

namespace cairn::controller {
namespace {

constexpr char kGroups[] = "groups/";
// A group its user stopped (`group checkpoint --stop`), until it is restored: a lost node does
// not bring it back.
constexpr char kStoppedGroups[] = "stopped-groups/";

std::string GroupPrefix(const std::string& group) { return absl::StrCat(kGroups, group, "/"); }

}  // namespace

absl::StatusOr<std::vector<RankRef>> Controller::GroupRanksLocked(const std::string& group, bool running) {
  std::map<int, RankRef> by_rank;
  std::string problem;
  cluster_->ForEachJob([&](const Job& j) {
    if (j.spec.group != group) return;
    RankRef r{j.spec.id, j.spec.rank, j.node_id};
    if (by_rank.count(r.rank) != 0) {
      problem = absl::StrFormat("rank %d is given twice (jobs %s and %s): cancel one", r.rank, by_rank[r.rank].job_id,
                                r.job_id);
    } else if (running && (j.state != JobState::kRunning || j.node_id.empty() || !started_[j.spec.id])) {
      problem = absl::StrFormat("rank %d (job %s) does not run (%s%s): a group checkpoint needs every rank running",
                                r.rank, r.job_id, JobStateName(j.state),
                                j.node_id.empty() ? "" : absl::StrCat(" on ", j.node_id, ", not confirmed started"));
    }
    by_rank[r.rank] = r;
  });
  if (by_rank.empty()) {
    return absl::NotFoundError(absl::StrCat("no job of group ", group,
                                            " is known: submit its ranks with cairn submit --group ", group,
                                            " --rank R -- CMD"));
  }
  if (!problem.empty()) return absl::FailedPreconditionError(absl::StrCat("group ", group, ": ", problem));
  std::vector<RankRef> out;
  for (auto& [rank, r] : by_rank) out.push_back(r);
  return out;
}

absl::Status Controller::CheckpointGroup(const api::CheckpointGroupRequest& req, api::CheckpointGroupResponse* resp) {
  RETURN_IF_ERROR(CheckJobName(req.group(), "group name"));
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(RequireLeaderLocked());
  ASSIGN_OR_RETURN(std::vector<RankRef> ranks, GroupRanksLocked(req.group(), /*running=*/true));
  absl::Time now = absl::Now();
  api::GroupCheckpoint g;
  g.set_id(absl::StrCat(req.group(), "-", absl::FormatTime("%Y%m%dT%H%M%E3S", now, absl::UTCTimeZone())));
  g.set_id(absl::StrReplaceAll(g.id(), {{".", ""}}));
  g.set_group(req.group());
  g.set_created(absl::ToDoubleSeconds(now - absl::UnixEpoch()));
  g.set_stopped(req.stop());
  auto fill = [&g](const std::vector<RankPart>& parts) {
    g.clear_ranks();
    double frozen = 0, dump = 0;
    for (const RankPart& p : parts) {
      api::RankCheckpoint* r = g.add_ranks();
      r->set_job_id(p.ref.job_id);
      r->set_rank(p.ref.rank);
      r->set_node_id(p.ref.node_id);
      r->set_checkpoint(p.checkpoint);
      r->set_location(p.location);
      r->set_dump_s(p.dump_s);
      r->set_frozen_s(p.frozen_s);
      frozen = std::max(frozen, p.frozen_s);
      dump = std::max(dump, p.dump_s);
    }
    g.set_frozen_max_s(frozen);
    g.set_dump_max_s(dump);
  };
  const std::string key = absl::StrCat(GroupPrefix(req.group()), g.id());
  // Recorded once every rank is prepared, before any is told to go on: a record names only
  // parts that are complete on their nodes.
  auto record = [&](const std::vector<RankPart>& parts) -> absl::Status {
    fill(parts);
    absl::Status s = store_->Put(key, g.SerializeAsString());
    if (!s.ok()) return StoreFailedLocked(s);
    return absl::OkStatus();
  };
  absl::StatusOr<std::vector<RankPart>> parts =
      dispatcher_->CheckpointGroup(req.group(), g.id(), ranks, req.stop(), record);
  api::Event ev;
  ev.set_kind(parts.ok() ? "group-checkpoint" : "group-checkpoint-failed");
  if (!parts.ok()) {
    if (req.stop() && absl::IsUnknown(parts.status())) {
      // Recorded, the stop not confirmed by every rank: a lost node does not bring it back.
      (void)store_->Put(absl::StrCat(kStoppedGroups, req.group()), g.id());
    }
    ev.set_reason(std::string(parts.status().message()));
    RETURN_IF_ERROR(RecordLocked(std::move(ev)));
    return parts.status();
  }
  if (req.stop()) {
    if (absl::Status s = store_->Put(absl::StrCat(kStoppedGroups, req.group()), g.id()); !s.ok()) {
      return StoreFailedLocked(s);
    }
  }
  if (req.stop()) {
    // Recorded before the decision: the frozen times and the stored locations come after.
    fill(*parts);
    if (absl::Status s = store_->Put(key, g.SerializeAsString()); !s.ok()) return StoreFailedLocked(s);
  }
  ev.set_reason(absl::StrFormat("group %s checkpoint %s: %d ranks, slowest dump %.3f s, longest frozen %.3f s%s",
                                req.group(), g.id(), g.ranks_size(), g.dump_max_s(), g.frozen_max_s(),
                                req.stop() ? ", ranks stopped" : ""));
  RETURN_IF_ERROR(RecordLocked(std::move(ev)));
  *resp->mutable_checkpoint() = g;
  return absl::OkStatus();
}

absl::Status Controller::ListGroupCheckpoints(const api::ListGroupCheckpointsRequest& req,
                                              api::ListGroupCheckpointsResponse* resp) {
  RETURN_IF_ERROR(CheckJobName(req.group(), "group name"));
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(RequireLeaderLocked());
  ASSIGN_OR_RETURN(auto rows, store_->List(GroupPrefix(req.group())));
  std::vector<api::GroupCheckpoint> all;
  for (const auto& [key, value] : rows) {
    api::GroupCheckpoint g;
    if (!g.ParseFromString(value)) {
      return absl::DataLossError(absl::StrCat("group checkpoint record ", key, " in the store is unreadable"));
    }
    all.push_back(std::move(g));
  }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.created() < b.created(); });
  for (auto& g : all) *resp->add_checkpoints() = std::move(g);
  return absl::OkStatus();
}

absl::Status Controller::RestoreGroup(const api::RestoreGroupRequest& req, api::RestoreGroupResponse* resp) {
  RETURN_IF_ERROR(CheckJobName(req.group(), "group name"));
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(RequireLeaderLocked());
  ASSIGN_OR_RETURN(std::optional<api::GroupCheckpoint> g, GroupCheckpointLocked(req.group(), req.checkpoint()));
  if (!g) {
    return absl::NotFoundError(req.checkpoint().empty()
                                   ? absl::StrCat("group ", req.group(), " has no group checkpoint: take one with ",
                                                  "cairn group checkpoint ", req.group())
                                   : absl::StrCat("group ", req.group(), " has no group checkpoint ", req.checkpoint(),
                                                  ": cairn group list ", req.group(), " lists them"));
  }
  // Each rank where the controller has it now (a failover may have moved it since the record).
  std::map<int, std::string> moved;
  for (const api::RankCheckpoint& r : g->ranks()) {
    const Job* j = cluster_->FindJob(r.job_id());
    const std::string now = j != nullptr && !j->node_id.empty() ? j->node_id : r.node_id();
    if (now != r.node_id()) moved[r.rank()] = now;
    ActionDispatcher::JobWhere w = dispatcher_->Locate(r.job_id(), now);
    if (w.kind == ActionDispatcher::JobWhere::kRunning || w.kind == ActionDispatcher::JobWhere::kBusy) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "restore group %s: rank %d (job %s) is %s on %s: stop the group first (cairn group checkpoint %s --stop)",
          req.group(), r.rank(), r.job_id(), w.state, now, req.group()));
    }
  }
  std::vector<std::string> notes;
  RETURN_IF_ERROR(RestoreGroupLocked(*g, moved, &notes));
  *resp->mutable_checkpoint() = *g;
  for (std::string& n : notes) resp->add_notes(std::move(n));
  return absl::OkStatus();
}

absl::StatusOr<std::optional<api::GroupCheckpoint>> Controller::GroupCheckpointLocked(const std::string& group,
                                                                                      const std::string& id) {
  ASSIGN_OR_RETURN(auto rows, store_->List(GroupPrefix(group)));
  std::optional<api::GroupCheckpoint> found;
  for (const auto& [key, value] : rows) {
    api::GroupCheckpoint g;
    if (!g.ParseFromString(value)) {
      return absl::DataLossError(absl::StrCat("group checkpoint record ", key, " in the store is unreadable"));
    }
    if (id.empty() ? (!found || g.created() > found->created()) : g.id() == id) found = std::move(g);
  }
  return found;
}

absl::Status Controller::RestoreGroupLocked(const api::GroupCheckpoint& g, const std::map<int, std::string>& moved,
                                            std::vector<std::string>* notes) {
  // Every rank is rebuilt with its connections held behind its node's network lock, and only
  // once all are back are they let go: a rank that ran alone would reach a peer not rebuilt yet,
  // whose host answers with a reset. All or nothing: a rank that fails stops those restored.
  std::vector<std::pair<std::string, std::string>> restored;  // job, node
  group_failed_over_at_[g.group()] = Now();  // a rank's end before this is not news (JobEndedLocked)
  for (const api::RankCheckpoint& r : g.ranks()) {
    RankPart part;
    part.ref = {r.job_id(), r.rank(), r.node_id()};
    part.checkpoint = r.checkpoint();
    part.location = r.location();
    auto to = moved.find(r.rank());
    const std::string node = to == moved.end() ? r.node_id() : to->second;
    absl::Status st = dispatcher_->RestoreRank(part, node);
    if (!st.ok()) {
      // Stopped with their connections still held: the daemon closes them in repair mode
      // (nothing sent, no port kept, net/silence.h), so that the restore can be tried again at
      // once, and removes the lock once the rank is gone.
      for (const auto& [job, on] : restored) (void)dispatcher_->Kill(job, on);
      api::Event ev;
      ev.set_kind("group-restore-failed");
      ev.set_job_id(r.job_id());
      ev.set_node_id(node);
      ev.set_reason(absl::StrFormat("group %s from %s: %s; the %d rank(s) restored before it were stopped again",
                                    g.group(), g.id(), st.message(), restored.size()));
      RETURN_IF_ERROR(RecordLocked(std::move(ev)));
      std::string what = absl::StrFormat("restore group %s from %s: rank %d (the %d restored before it were stopped again)",
                                         g.group(), g.id(), r.rank(), restored.size());
      // A node that does not answer is the group's trouble, not the controller's: a caller must not
      // take it for an unavailable controller and retry.
      if (absl::IsUnavailable(st) || absl::IsDeadlineExceeded(st)) {
        return absl::FailedPreconditionError(absl::StrCat(what, ": ", st.message()));
      }
      return Annotate(st, what);
    }
    restored.emplace_back(r.job_id(), node);
    notes->push_back(absl::StrFormat("rank %d: job %s restored on %s from %s", r.rank(), r.job_id(), node,
                                     r.checkpoint()));
  }
  for (const auto& [job, node] : restored) {
    absl::Status st = dispatcher_->ReleaseRankNetwork(job, node);
    if (!st.ok()) notes->push_back(absl::StrCat("job ", job, ": ", st.message(), " (cairn job release-network ", job, " on ", node, ")"));
    // The model follows each rank to where it runs now, once all run.
    const Job* j = cluster_->FindJob(job);
    if (j == nullptr || j->node_id == node) continue;
    if (!j->node_id.empty()) RETURN_IF_ERROR(cluster_->Unbind(job, JobState::kPending));
    RETURN_IF_ERROR(cluster_->Bind(job, node, /*runs_there=*/true));
    started_[job] = true;
    RETURN_IF_ERROR(SaveJobLocked(job));
  }
  if (absl::Status s = store_->Delete(absl::StrCat(kStoppedGroups, g.group())); !s.ok()) return StoreFailedLocked(s);
  api::Event ev;
  ev.set_kind("group-restored");
  ev.set_reason(absl::StrFormat("group %s restored from %s: %d ranks; %s", g.group(), g.id(), g.ranks_size(),
                                absl::StrJoin(*notes, "; ")));
  return RecordLocked(std::move(ev));
}

absl::Status Controller::FailOverGroupsLocked(const std::string& lost_node) {
  const Node* lost = cluster_->FindNode(lost_node);
  if (lost == nullptr) return absl::OkStatus();
  std::set<std::string> groups;
  for (const std::string& id : lost->job_ids) {
    if (const Job* j = cluster_->FindJob(id); j != nullptr && !j->spec.group.empty()) groups.insert(j->spec.group);
  }
  for (const std::string& group : groups) {
    RETURN_IF_ERROR(FailOverGroupLocked(group, lost_node, lost_node, "",
                                        absl::StrCat("group ", group, " lost a rank on ", lost_node)));
  }
  return absl::OkStatus();
}

absl::Status Controller::FailOverGroupLocked(const std::string& group, const std::string& lost_node,
                                             const std::string& node, const std::string& dead_job,
                                             const std::string& why, std::vector<api::Event>* out) {
  auto record = [&](const std::string& kind, const std::string& reason) {
    api::Event ev;
    ev.set_kind(kind);
    ev.set_node_id(node);
    ev.set_job_id(dead_job);
    ev.set_reason(reason);
    return RecordLocked(std::move(ev), out);
  };
  ASSIGN_OR_RETURN(std::optional<std::string> stopped, store_->Get(absl::StrCat(kStoppedGroups, group)));
  if (stopped) {
    return record("group-failover-skipped", absl::StrCat(why, ", but its user stopped it (group checkpoint ", *stopped,
                                                         "): it comes back with cairn group restore"));
  }
  ASSIGN_OR_RETURN(std::optional<api::GroupCheckpoint> g, GroupCheckpointLocked(group, ""));
  if (!g) {
    return record("group-failover-failed",
                  absl::StrCat(why, " and has no group checkpoint to come back from: its ranks are left as they are "
                                    "(cancel and submit the group again)"));
  }
  // Each rank of the lost node goes where placement puts it now, away from the lost node.
  std::map<int, std::string> moved;
  Placer placer(*cluster_);
  for (const api::RankCheckpoint& r : g->ranks()) {
    const Job* j = cluster_->FindJob(r.job_id());
    if (j == nullptr) {
      return record("group-failover-failed", absl::StrCat(why, ": rank ", r.rank(), " (job ", r.job_id(),
                                                          ") is no longer known"));
    }
    if (lost_node.empty() || (j->node_id != lost_node && r.node_id() != lost_node)) {
      // Where it runs now, if a failover moved it since the group checkpoint (from the store).
      if (!j->node_id.empty() && j->node_id != r.node_id()) moved[r.rank()] = j->node_id;
      continue;
    }
    PlacementRequest pr;
    pr.job = j;
    pr.exclude_nodes.insert(lost_node);
    absl::StatusOr<Placement> p = placer.Place(pr);
    if (!p.ok()) {
      return record("group-failover-failed", absl::StrCat(why, ": no node fits rank ", r.rank(), " (job ", r.job_id(),
                                                          "): ", p.status().message()));
    }
    moved[r.rank()] = p->node_id;
  }
  // The ranks still running go back too: stopped first, as their peers are gone.
  for (const api::RankCheckpoint& r : g->ranks()) {
    const Job* j = cluster_->FindJob(r.job_id());
    if (j->node_id.empty() || j->node_id == lost_node || r.job_id() == dead_job) continue;
    DispatchResult k = dispatcher_->Kill(r.job_id(), j->node_id);
    if (!k.done) CAIRN_LOG_WARN("group={} job={} not stopped on {}: {}", group, r.job_id(), j->node_id, k.note);
  }
  RETURN_IF_ERROR(record("group-failover", absl::StrFormat("%s: every rank restored from group checkpoint %s", why,
                                                           g->id())));
  std::vector<std::string> notes;
  if (absl::Status st = RestoreGroupLocked(*g, moved, &notes); !st.ok()) {
    return record("group-failover-failed", absl::StrCat(why, ": from ", g->id(), ": ", st.message()));
  }
  return absl::OkStatus();
}

std::string Controller::UnreachableRankNodeLocked(const std::string& group) {
  std::vector<std::pair<std::string, std::string>> ranks;  // job, node
  cluster_->ForEachJob([&](const Job& j) {
    if (j.spec.group == group && !j.node_id.empty()) ranks.emplace_back(j.spec.id, j.node_id);
  });
  for (const auto& [job, node] : ranks) {
    if (dispatcher_->Locate(job, node).kind == ActionDispatcher::JobWhere::kUnreachable) return node;
  }
  return "";
}

absl::Status Controller::JobEndedLocked(const api::NodeSignal& req, api::ReportSignalResponse* resp) {
  const Job* job = cluster_->FindJob(req.job_id());
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("signal job-ended: unknown job `", req.job_id(), "`"));
  // Only the node the job is placed on speaks for it (a copy stopped elsewhere is not news).
  if (req.node_id() != job->node_id) {
    CAIRN_LOG_INFO("controller {}: job {} ended on {}, but it is placed on {}: ignored", options_.id, req.job_id(),
                   req.node_id(), job->node_id.empty() ? "no node" : job->node_id);
    return absl::OkStatus();
  }
  std::vector<api::Event> out;
  auto record = [&](const std::string& kind, const std::string& reason) {
    api::Event ev;
    ev.set_kind(kind);
    ev.set_node_id(req.node_id());
    ev.set_job_id(req.job_id());
    ev.set_reason(reason);
    return RecordLocked(std::move(ev), &out);
  };
  // An end whose status the node could not see (it was not the job's parent, after a restart) is
  // not taken for a death: a group that finished must not be rolled back.
  bool died = req.exit_known() && (req.exit_signal() != 0 || req.exit_code() != 0);
  std::string how = !req.exit_known()       ? std::string("ended while its node's daemon was down (how is unknown)")
                    : req.exit_signal() != 0 ? absl::StrCat("was killed by signal ", req.exit_signal())
                                             : absl::StrCat("exited with code ", req.exit_code());
  RETURN_IF_ERROR(record("job-ended", absl::StrCat("job ", req.job_id(), " ", how, " on ", req.node_id())));
  const std::string& group = job->spec.group;
  if (died && !group.empty()) {
    std::string why = absl::StrFormat("group %s lost rank %d: job %s %s on %s", group, job->spec.rank, req.job_id(),
                                      how, req.node_id());
    auto at = group_failed_over_at_.find(group);
    if (at != group_failed_over_at_.end() && req.ended_time() <= at->second) {
      CAIRN_LOG_INFO("controller {}: rank job {} of group {} ended before its group's last failover: not news",
                     options_.id, req.job_id(), group);
    } else if (dispatcher_->Locate(req.job_id(), req.node_id()).kind == ActionDispatcher::JobWhere::kRunning) {
      // Its node runs it again (a failover or a restore brought it back since it ended): an old end.
      CAIRN_LOG_INFO("controller {}: rank job {} of group {} ended, but runs again on {}: not news", options_.id,
                     req.job_id(), group, req.node_id());
    } else if (in_flight_.count(req.job_id())) {
      CAIRN_LOG_WARN("controller {}: rank job {} of group {} ended while a decision about it is carried out",
                     options_.id, req.job_id(), group);
    } else if (std::string away = UnreachableRankNodeLocked(group); !away.empty()) {
      // A rank's end may be the first sign that another rank's node died (the survivor loses its
      // peer): a failover now would fail on that node. The node-lost rule acts if it is lost.
      RETURN_IF_ERROR(record("group-failover-deferred",
                             absl::StrFormat("%s, but node %s of another rank does not answer: if it is lost, the "
                                             "group comes back with the node-lost failover",
                                             why, away)));
    } else {
      ASSIGN_OR_RETURN(std::optional<api::GroupCheckpoint> g, GroupCheckpointLocked(group, ""));
      constexpr int kMaxRankDeathFailovers = 3;
      if (g && ++rank_death_failovers_[g->id()] > kMaxRankDeathFailovers) {
        RETURN_IF_ERROR(record("group-failover-failed",
                               absl::StrFormat("%s, its ranks died %d times since group checkpoint %s was taken: it "
                                               "is not brought back again (look at its logs; cairn group restore "
                                               "brings it back)",
                                               why, kMaxRankDeathFailovers, g->id())));
      } else {
        RETURN_IF_ERROR(FailOverGroupLocked(group, "", req.node_id(), req.job_id(), why, &out));
      }
    }
  }
  for (api::Event& o : out) *resp->add_events() = std::move(o);
  return absl::OkStatus();
}

}  // namespace cairn::controller
