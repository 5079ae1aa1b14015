// Garbage collection: what nothing on this node needs any more (docs/daemon.md, "Garbage
// collection"), and the cancel that makes a job's checkpoints such garbage.
//
// - The checkpoints of a job that migrated away. This node's record of it cannot be restored
//   (the job runs where it went, from the image the destination committed and keeps), so their
//   local copies are dead weight: every hop used to leave its image on the node it left. Stored
//   ones (a shared store other nodes restore from) go only once the store holds a newer complete
//   checkpoint of the job that this node did not take (the destination's, stored after its
//   commit): until then they are the newest copies of the job other nodes can reach.
// - The checkpoints of a cancelled job: its user said it is not wanted (its logs stay).
// - The cgroups of jobs that do not run and hold no process (ended jobs used to keep theirs, in
//   four hierarchies, until `cairn job delete`).
// Pinned checkpoints are kept whatever their job; a job in the middle of a checkpoint, restore
// or migration is left alone. An incremental checkpoint goes before its parent.

#include <signal.h>

#include <algorithm>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "daemon/cgroup.h"
#include "daemon/daemon.h"

namespace cairn::daemon {
namespace {

bool Ended(const std::string& state) { return state == "exited" || state == "killed" || state == "migrated"; }

}  // namespace

std::vector<api::GarbageItem> Daemon::CheckpointGarbage(const std::string& job, const std::string& why,
                                                        bool stored_need_newer) {
  std::vector<api::GarbageItem> out;
  absl::StatusOr<std::vector<api::Checkpoint>> cps = catalog_->ListCheckpoints(job);
  if (!cps.ok()) {
    CAIRN_LOG_WARN("gc job={}: checkpoints not listed: {}", job, cps.status().ToString());
    return out;
  }
  // The newest complete checkpoint of the job in a shared store that this node did not take.
  std::string newest_elsewhere;
  bool listed = false;
  if (stored_need_newer && opts_.store->Remote()) {
    absl::StatusOr<std::vector<std::string>> ids = opts_.store->List(job);
    if (ids.ok()) {
      listed = true;
      for (const std::string& id : *ids) {
        bool ours = std::any_of(cps->begin(), cps->end(), [&](const api::Checkpoint& c) { return c.id() == id; });
        if (!ours) newest_elsewhere = std::max(newest_elsewhere, id);
      }
    } else {
      CAIRN_LOG_WARN("gc job={}: the store's checkpoints not listed ({}); its stored ones here are kept", job,
                     ids.status().ToString());
    }
  }
  std::sort(cps->begin(), cps->end(), [](const api::Checkpoint& a, const api::Checkpoint& b) {
    return a.created() != b.created() ? a.created() > b.created() : a.id() > b.id();  // children first
  });
  for (const api::Checkpoint& c : *cps) {
    // (A rank's part of a group checkpoint stays: the group's consistent cut needs every part,
    // and no single checkpoint of the rank replaces it.)
    if (c.pinned() || c.state() == "writing" || !c.group_checkpoint().empty()) continue;
    bool stored = opts_.store->Remote() && c.location() != CheckpointDir(job) + "/" + c.id();
    std::string reason = why;
    if (stored && stored_need_newer) {
      // ("JOB-YYYYMMDDTHHMMSSmmm..." ids sort by the time they were taken.)
      if (!listed || newest_elsewhere <= c.id()) continue;
      reason += absl::StrCat("; the store holds its newer checkpoint ", newest_elsewhere);
    }
    api::GarbageItem item;
    item.set_kind("checkpoint");
    item.set_what(c.id());
    item.set_job(job);
    item.set_bytes(c.size_bytes());
    item.set_why(reason);
    out.push_back(std::move(item));
  }
  return out;
}

bool Daemon::StillGarbage(const api::GarbageItem& item) {
  // What was decided with the lock released (the store listed, …) is checked again: the job may
  // have come back (restored, migrated back here), begun a checkpoint, restore or migration, or
  // the checkpoint been pinned meanwhile.
  std::lock_guard<std::mutex> l(mu_);
  auto it = jobs_.find(item.job());
  if (it == jobs_.end() || it->second.busy || !Ended(it->second.job.state())) return false;
  if (item.kind() == "cgroup") return true;
  if (it->second.job.state() != "migrated" && !it->second.job.cancelled()) return false;
  absl::StatusOr<std::optional<api::Checkpoint>> c = catalog_->GetCheckpoint(item.what());
  return c.ok() && c->has_value() && !(*c)->pinned() && (*c)->state() != "writing";
}

void Daemon::RemoveGarbage(std::vector<api::GarbageItem>& items) {
  for (api::GarbageItem& item : items) {
    if (!StillGarbage(item)) {
      item.set_error("no longer garbage: the job or the checkpoint changed meanwhile (kept)");
      continue;
    }
    if (item.kind() == "checkpoint") {
      if (absl::Status st = DeleteCheckpoint(item.what()); !st.ok()) item.set_error(std::string(st.message()));
    } else if (item.kind() == "cgroup") {
      RemoveCgroup(item.what());
      if (!FreezerState(item.what()).empty()) item.set_error("still there (a process joined it, or it is busy)");
    }
  }
}

absl::StatusOr<api::CollectGarbageResponse> Daemon::CollectGarbage(bool dry_run) {
  std::vector<std::pair<std::string, std::string>> migrated;  // job, where it went
  std::vector<std::string> cancelled;
  std::vector<api::GarbageItem> items;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [name, s] : jobs_) {
      if (s.busy) continue;
      ReapLocked(s);
      const std::string& state = s.job.state();
      if (!Ended(state)) continue;
      std::string cgroup = CgroupOf(name);
      if (!FreezerState(cgroup).empty() && CgroupPids(cgroup).empty()) {
        api::GarbageItem item;
        item.set_kind("cgroup");
        item.set_what(cgroup);
        item.set_job(name);
        item.set_why(absl::StrCat("the job ", state == "migrated" ? "runs elsewhere" : "ended", " (", state, ")"));
        items.push_back(std::move(item));
      }
      if (s.job.cancelled()) {
        cancelled.push_back(name);
      } else if (state == "migrated") {
        migrated.emplace_back(name, s.job.health().detail());
      }
    }
  }
  auto add = [&items](std::vector<api::GarbageItem> more) {
    items.insert(items.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  };
  for (const auto& [name, where] : migrated) {
    add(CheckpointGarbage(
        name, absl::StrCat("the job ", where.empty() ? "migrated away" : where, "; its record here cannot restore it"),
        /*stored_need_newer=*/true));
  }
  for (const std::string& name : cancelled) add(CheckpointGarbage(name, "the job was cancelled", /*stored_need_newer=*/false));
  if (!dry_run) RemoveGarbage(items);
  api::CollectGarbageResponse r;
  r.set_dry_run(dry_run);
  int64_t bytes = 0;
  for (api::GarbageItem& item : items) {
    if (item.error().empty()) bytes += item.bytes();
    if (!dry_run) {
      CAIRN_LOG_INFO("event=gc kind={} what={} job={} bytes={} why=\"{}\"{}", item.kind(), item.what(), item.job(),
                     item.bytes(), item.why(), item.error().empty() ? "" : " error=\"" + item.error() + "\"");
    }
    *r.add_items() = std::move(item);
  }
  r.set_bytes(bytes);
  return r;
}

absl::StatusOr<api::Job> Daemon::CancelJob(const std::string& name) {
  absl::StatusOr<api::Job> killed = KillJob(name, SIGKILL);
  bool ended_before = !killed.ok() && absl::IsFailedPrecondition(killed.status());
  if (!killed.ok() && !ended_before) return killed.status();
  api::Job job;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = jobs_.find(name);
    if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job '", name, "' on node ", opts_.node));
    JobState& s = it->second;
    if (s.busy || (s.job.state() != "exited" && s.job.state() != "killed")) {
      // Running still, held in a migration, or moved away: not this node's to cancel.
      return killed.ok() ? absl::FailedPreconditionError(absl::StrCat("job ", name, " still ", s.job.state()))
                         : killed.status();
    }
    s.job.set_cancelled(true);
    // Its checkpoints go: no restore will bring its connections back, so their lock goes too
    // (their peers see them reset).
    if (!s.job.network_lock_kept().empty()) {
      RemoveJobNetworkLock(name, s.job.network_lock_kept());
      s.job.clear_network_lock_kept();
    }
    if (absl::Status st = Persist(s); !st.ok()) return st;
    job = s.job;
  }
  std::vector<api::GarbageItem> items = CheckpointGarbage(name, "the job was cancelled", /*stored_need_newer=*/false);
  RemoveGarbage(items);
  int64_t bytes = 0;
  int removed = 0, kept = 0;
  for (const api::GarbageItem& item : items) {
    if (item.error().empty()) {
      bytes += item.bytes();
      ++removed;
    } else {
      ++kept;
      CAIRN_LOG_WARN("job={} cancelled, its checkpoint {} not removed: {}", name, item.what(), item.error());
    }
  }
  Event(name, "cancelled",
        absl::StrFormat("%s; %d checkpoint(s) removed (%d bytes)%s; its logs stay", ended_before ? "it had ended" : "killed",
                        removed, bytes, kept > 0 ? absl::StrFormat(", %d could not be (cairn gc tries again)", kept) : ""));
  return job;
}

}  // namespace cairn::daemon
