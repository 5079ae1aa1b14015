// Restoring the newest checkpoint of a job from the shared store (RestoreJobRequest.newest_stored):
// how a job whose node was lost comes back on another node. The store lists the job's complete
// checkpoints (those with a manifest: a checkpoint cut off half-stored never counts); cairnd's
// checkpoint ids end in the UTC time they were taken (JOB-YYYYMMDDTHHMMSSmmm), which orders them
// and bounds them by `taken_before`.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/status.h"
#include "daemon/daemon.h"
#include "engine/job/job.h"

namespace cairn::daemon {

std::string CheckpointStamp(absl::Time t) {
  std::string stamp = absl::FormatTime("%Y%m%dT%H%M%E3S", t, absl::UTCTimeZone());  // ...SS.mmm
  stamp.erase(std::remove(stamp.begin(), stamp.end(), '.'), stamp.end());
  return stamp;
}

namespace {

// The unix time a cairnd checkpoint id names (JOB-YYYYMMDDTHHMMSSmmm), or -1.
double IdTime(const std::string& job, const std::string& id) {
  if (id.size() != job.size() + 19 || id.compare(0, job.size(), job) != 0 || id[job.size()] != '-') return -1;
  std::string stamp = id.substr(job.size() + 1);  // YYYYMMDDTHHMMSSmmm
  if (stamp[8] != 'T') return -1;
  auto num = [&](size_t at, size_t len) {
    int v = 0;
    for (size_t i = at; i < at + len; ++i) {
      if (stamp[i] < '0' || stamp[i] > '9') return -1;
      v = v * 10 + (stamp[i] - '0');
    }
    return v;
  };
  int y = num(0, 4), mo = num(4, 2), d = num(6, 2), h = num(9, 2), mi = num(11, 2), s = num(13, 2), ms = num(15, 3);
  if (y < 0 || mo < 0 || d < 0 || h < 0 || mi < 0 || s < 0 || ms < 0) return -1;
  absl::Time t = absl::FromCivil(absl::CivilSecond(y, mo, d, h, mi, s), absl::UTCTimeZone());
  return absl::ToDoubleSeconds(t - absl::UnixEpoch()) + ms / 1000.0;
}

}  // namespace

absl::StatusOr<std::string> Daemon::NewestStored(const std::string& name, double taken_before) {
  RETURN_IF_ERROR(job::CheckName(name));
  if (!opts_.store->Remote()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "restore the newest stored checkpoint of job ", name, " on node ", opts_.node,
        ": this daemon keeps checkpoints locally; it needs the shared --storage (dir:/PATH or s3://) the job's node used"));
  }
  ASSIGN_OR_RETURN(std::vector<std::string> ids, opts_.store->List(name));
  std::string newest;
  double newest_t = -1;
  for (const std::string& id : ids) {
    double t = IdTime(name, id);
    if (t < 0 || (taken_before > 0 && t > taken_before)) continue;
    if (t >= newest_t) newest = id, newest_t = t;
  }
  if (newest.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "job ", name, " has no complete checkpoint in ", opts_.store->Describe(),
        taken_before > 0 ? absl::StrFormat(" taken at or before %.3f", taken_before) : std::string(),
        ids.empty() ? "" : absl::StrCat(" (", ids.size(), " stored, none of them eligible)")));
  }
  return opts_.store->LocationOf(name, newest);
}

}  // namespace cairn::daemon
