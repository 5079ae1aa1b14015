// Job groups, the rank's side (docs/daemon.md "Job groups"): this node's part in a group
// checkpoint that a coordinator (the controller, controller/group_checkpoint.h) drives on one
// stream per rank. Two phases, so that the group's checkpoint is one consistent cut:
//
//   Prepare  -> the rank is dumped as any checkpoint is (its connections locked first, then
//               frozen), but stays frozen once its checkpoint is committed, stored and
//               recorded complete: reply `prepared`.
//   Decide   -> commit: thawed with its connections released (or killed, with `kill`: the lock
//               stays for the restore); call off: thawed, its checkpoint removed. Reply `done`.
//
// No rank runs again before every rank is frozen with its state saved, and the locks hold
// every packet between them meanwhile, so what one rank sent and another had not received
// stays in the sender's queue (saved with the sender) — no message is in two checkpoints or
// in none. The stream ending before the decision (the coordinator died, the network broke)
// or no decision within decide_timeout_s thaws the rank and keeps its checkpoint: the
// coordinator may have recorded the group. The daemon dying meanwhile: the dump's guardian
// thaws the rank and releases its connections.

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status.h"
#include "daemon/daemon.h"
#include "daemon/job_spec_check.h"
#include "engine/net/netlock.h"
#include "common/validate.h"

namespace cairn::daemon {

absl::Status Daemon::CheckpointRank(const std::function<bool(api::RankCheckpointMessage*)>& read,
                                    const std::function<bool(const api::RankCheckpointReply&)>& write,
                                    const std::function<void()>& cancel) {
  api::RankCheckpointMessage m;
  if (!read(&m) || !m.has_prepare()) {
    return absl::InvalidArgumentError("a rank's part in a group checkpoint starts with Prepare");
  }
  const api::RankCheckpointMessage::Prepare& p = m.prepare();
  RETURN_IF_ERROR(Annotate(CheckRankPrepare(p), "group checkpoint"));
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = jobs_.find(p.name());
    if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job '", p.name(), "' on node ", opts_.node));
    const std::string& group = it->second.job.spec().group();
    if (group != p.group()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", p.name(), " is not a rank of group ", p.group(),
          group.empty() ? " (it belongs to no group)" : absl::StrCat(" (its group is ", group, ")")));
    }
  }
  const double limit = p.decide_timeout_s() > 0 ? p.decide_timeout_s() : 60;
  RankPart part;
  part.group_checkpoint = p.group_checkpoint();
  part.decide = [&](const api::Checkpoint& c, double dump_s) -> std::optional<bool> {
    api::RankCheckpointReply prepared;
    prepared.set_state("prepared");
    *prepared.mutable_checkpoint() = c;
    prepared.set_dump_s(dump_s);
    if (!write(prepared)) return std::nullopt;
    // The rank stands frozen while it waits: not longer than the limit.
    std::mutex wd_mu;
    std::condition_variable wd_cv;
    bool answered = false;
    std::thread watchdog([&] {
      std::unique_lock<std::mutex> l(wd_mu);
      if (!wd_cv.wait_for(l, std::chrono::duration<double>(limit), [&] { return answered; })) cancel();
    });
    api::RankCheckpointMessage decision;
    bool ok = read(&decision) && decision.has_decide();
    {
      std::lock_guard<std::mutex> l(wd_mu);
      answered = true;
    }
    wd_cv.notify_all();
    watchdog.join();
    if (!ok) {
      CAIRN_LOG_WARN("event=group_rank_undecided job={} group_checkpoint={} limit_s={}", p.name(), p.group_checkpoint(),
                     limit);
      return std::nullopt;
    }
    return decision.decide().commit();
  };
  api::CheckpointJobRequest req;
  req.set_name(p.name());
  req.set_kill(p.kill());
  ASSIGN_OR_RETURN(api::Checkpoint c, CheckpointWith(req, "group", &part));
  api::RankCheckpointReply done;
  done.set_state("done");
  done.set_frozen_s(c.frozen_s());
  *done.mutable_checkpoint() = c;
  (void)write(done);
  return absl::OkStatus();
}

absl::StatusOr<api::Job> Daemon::ReleaseNetwork(const std::string& name) {
  RETURN_IF_ERROR(CheckJobName(name));
  std::lock_guard<std::mutex> l(mu_);
  auto it = jobs_.find(name);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job '", name, "' on node ", opts_.node));
  api::Job& j = it->second.job;
  if (j.network_hold().empty()) return j;
  // In the restorer's network namespace, where the restore took it (this daemon's).
  RETURN_IF_ERROR(Annotate(net::RemoveNetworkLock(j.network_hold()), absl::StrCat("job ", name)));
  Event(name, "network-released", absl::StrCat("network lock ", j.network_hold(), " lifted: its connections flow"));
  j.clear_network_hold();
  if (absl::Status st = Persist(j); !st.ok()) CAIRN_LOG_WARN("job={} not saved: {}", name, st.ToString());
  return j;
}

}  // namespace cairn::daemon
