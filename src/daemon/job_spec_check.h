#pragma once
// What a job given to cairnd may ask for: a safe name and every number it carries within a sane
// range (common/validate.h). cairnd checks each spec it is given — RunJob, a job arriving by
// migration, the spec stored with a checkpoint it imports — and the CLI checks before it sends,
// so that both refuse with the same words. Errors are InvalidArgument naming the first bad field
// (with its CLI option), the value and what is allowed.

#include "absl/status/status.h"
#include "daemon.pb.h"

namespace cairn::daemon {

// The spec's name (when not empty: empty means "generate one") and its numbers.
absl::Status CheckJobSpec(const api::JobSpec& spec);

// The numbers of a restore request (taken_before).
absl::Status CheckRestoreRequest(const api::RestoreJobRequest& req);

// A rank's Prepare (CheckpointRank): the names and the decide timeout.
absl::Status CheckRankPrepare(const api::RankCheckpointMessage::Prepare& p);

// The numbers of a migration request (restore_timeout_s).
absl::Status CheckMigrateRequest(const api::MigrateJobRequest& req);

}  // namespace cairn::daemon
