// Job groups, the rank's side (docs/daemon.md "Job groups"): this node's part in a group
// checkpoint that a coordinator (the controller, controller/service/group_checkpoint.h) drives on
// one stream per rank, so that the group's checkpoint is one consistent cut:
//
//   Prepare  -> the rank's dump checks what it can while the rank runs: reply `ready`.
//   Freeze   -> the rank is locked and frozen (every rank at once) and its state captured; it
//               stays frozen: reply `prepared` (with `kill`, once its checkpoint is committed,
//               stored and recorded complete: it must be durable before the rank may die).
//   Decide   -> commit: thawed with its connections released, then its checkpoint committed
//               (or, with `kill`, killed with the lock kept for the restore); abort: thawed,
//               its checkpoint removed. Reply `done`.
//
// No rank runs again before every rank is frozen with its state captured, and the locks hold
// every packet between them meanwhile, so what one rank sent and another had not received
// stays in the sender's queue (saved with the sender) — no message is in two checkpoints or
// in none. The stream ending (the coordinator died, the network broke), or no message within
// decide_timeout_s, thaws the rank; a checkpoint already complete (`kill`) is kept, as the
// coordinator may have recorded it. The daemon dying meanwhile: the dump's guardian thaws the
// rank and releases its connections (its frozen cgroup holds it until then).

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/cleanup/cleanup.h"
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
  // The coordinator's next message, waited for at most `limit` (then the stream is cancelled).
  // One watchdog for the whole exchange, armed for each read: a read that returns wakes no other
  // thread (the decision's read is inside the ranks' frozen time).
  std::mutex wd_mu;
  std::condition_variable wd_cv;
  std::optional<std::chrono::steady_clock::time_point> deadline;  // armed while a read waits
  bool exchange_over = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> l(wd_mu);
    while (!exchange_over) {
      if (!deadline) {
        wd_cv.wait(l);
      } else if (wd_cv.wait_until(l, *deadline) == std::cv_status::timeout && deadline &&
                 std::chrono::steady_clock::now() >= *deadline) {
        deadline.reset();
        cancel();
      }
    }
  });
  absl::Cleanup end_watchdog = [&] {
    {
      std::lock_guard<std::mutex> l(wd_mu);
      exchange_over = true;
    }
    wd_cv.notify_all();
    watchdog.join();
  };
  auto next = [&](api::RankCheckpointMessage* m) {
    {
      std::lock_guard<std::mutex> l(wd_mu);
      deadline = std::chrono::steady_clock::now() +
                 std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(limit));
    }
    wd_cv.notify_all();
    bool ok = read(m);
    std::lock_guard<std::mutex> l(wd_mu);
    deadline.reset();  // the watchdog sees it when it wakes; nothing to wake it for now
    return ok;
  };
  RankPart part;
  part.group_checkpoint = p.group_checkpoint();
  part.ready = [&]() -> absl::Status {
    api::RankCheckpointReply ready;
    ready.set_state("ready");
    api::RankCheckpointMessage m;
    if (!write(ready) || !next(&m)) {
      return absl::UnavailableError("the group's coordinator left before it said to freeze");
    }
    if (m.has_freeze()) return absl::OkStatus();
    if (m.has_decide() && !m.decide().commit()) {
      return absl::AbortedError(absl::StrCat("group checkpoint ", p.group_checkpoint(),
                                             " was called off before the freeze (another rank failed)"));
    }
    return absl::InvalidArgumentError("the coordinator sent something else than Freeze or Decide abort");
  };
  part.decide = [&](const api::Checkpoint& c, double dump_s) -> std::optional<bool> {
    api::RankCheckpointReply prepared;
    prepared.set_state("prepared");
    *prepared.mutable_checkpoint() = c;
    prepared.set_dump_s(dump_s);
    api::RankCheckpointMessage decision;
    if (!write(prepared) || !next(&decision) || !decision.has_decide()) {
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
  if (absl::Status st = Persist(it->second); !st.ok()) CAIRN_LOG_WARN("job={} not saved: {}", name, st.ToString());
  return j;
}

}  // namespace cairn::daemon
