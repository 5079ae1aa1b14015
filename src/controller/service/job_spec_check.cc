#include "controller/service/job_spec_check.h"

#include "absl/strings/str_cat.h"
#include "common/cpu_levels.h"
#include "common/ip_prefix.h"
#include "common/status.h"
#include "common/validate.h"

namespace cairn::controller {

absl::Status CheckSubmittedJob(const api::JobSpec& s) {
  // The id becomes the job's name on the node daemon that runs it.
  if (!s.id().empty()) RETURN_IF_ERROR(CheckJobName(s.id(), "job id"));
  // A user name or uid of the nodes (the daemon checks it exists); never an option.
  const bool user_ok = s.user().size() <= 32 && (s.user().empty() || s.user()[0] != '-') &&
                       s.user().find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") ==
                           std::string::npos;
  if (!user_ok) {
    return absl::InvalidArgumentError(absl::StrCat("user (--user) `", s.user(),
                                                   "`: give a user name or uid of the nodes (letters, digits, . _ -; "
                                                   "at most 32, not starting with -)"));
  }
  if (!s.cpu_baseline().empty()) {
    RETURN_IF_ERROR(Annotate(ParseBaseline(s.cpu_baseline()).status(), "CPU baseline (--cpu-baseline)"));
  }
  if (!s.group().empty()) RETURN_IF_ERROR(CheckJobName(s.group(), "group name (--group)"));
  RETURN_IF_ERROR(CheckInteger("rank (--rank)", s.rank(), {0, 65535}));
  if (s.group().empty() && s.rank() != 0) {
    return absl::InvalidArgumentError("rank (--rank) is given without a group: add --group NAME");
  }
  // Each must parse (placement reads them: common/ip_prefix.h); the node daemon refuses one it
  // cannot put on (engine/net/address.h: loopback, multicast, ...).
  if (s.addresses_size() > 16) {
    return absl::InvalidArgumentError(absl::StrCat("addresses (--address): ", s.addresses_size(), " given; a job has at most 16"));
  }
  for (const std::string& a : s.addresses()) {
    if (a.size() > 64) return absl::InvalidArgumentError(absl::StrCat("address (--address) `", a.substr(0, 64), "...`: too long"));
    if (absl::StatusOr<IpPrefix> p = ParseIpPrefix(a); !p.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("address (--address) ", p.status().message()));
    }
  }
  RETURN_IF_ERROR(CheckNumber("cpus (--cpus)", s.cpus(), {0, kMaxCpus}));
  RETURN_IF_ERROR(CheckInteger("memory_mb (--memory)", s.memory_mb(), {0, kMaxMemoryMb}));
  RETURN_IF_ERROR(CheckInteger("gpus (--gpus)", s.gpus(), {0, kMaxGpus}));
  RETURN_IF_ERROR(CheckInteger("priority (--priority)", s.priority(), {-1000000, 1000000}));
  RETURN_IF_ERROR(CheckNumber("deadline (--deadline, unix seconds)", s.deadline(), {1, kMaxUnixTime, "none"}));
  RETURN_IF_ERROR(CheckNumber("max_downtime_s (--max-downtime)", s.max_downtime_s(), {0, kYearSeconds}));
  RETURN_IF_ERROR(CheckNumber("budget_usd (--budget)", s.budget_usd(), {0, kMaxUsd}));
  RETURN_IF_ERROR(CheckNumber("work_s (--work-hours x 3600)", s.work_s(), {0, 10 * kYearSeconds}));
  RETURN_IF_ERROR(CheckNumber("downtime_cost_per_hour (--downtime-cost)", s.downtime_cost_per_hour(), {0, kMaxUsd}));
  const api::CheckpointPolicy& c = s.checkpoint();
  RETURN_IF_ERROR(CheckNumber("checkpoint.interval_s (--checkpoint-every)", c.interval_s(), {0, kYearSeconds}));
  RETURN_IF_ERROR(CheckNumber("checkpoint.pause_s (--checkpoint-pause)", c.pause_s(), {0, kDaySeconds}));
  RETURN_IF_ERROR(
      CheckNumber("checkpoint.notice_checkpoint_s (--notice-checkpoint)", c.notice_checkpoint_s(), {0, kDaySeconds}));
  RETURN_IF_ERROR(CheckInteger("checkpoint.bytes (--checkpoint-bytes)", c.bytes(), {0, kMaxMemoryBytes}));
  RETURN_IF_ERROR(CheckNumber("checkpoint.restore_s (--restore-time)", c.restore_s(), {0, kDaySeconds}));
  return absl::OkStatus();
}

absl::Status CheckNodeSpec(const api::NodeSpec& s) {
  if (!s.id().empty()) RETURN_IF_ERROR(CheckJobName(s.id(), "node id"));
  RETURN_IF_ERROR(CheckNumber("node cpus (cairnd --cpus)", s.cpus(), {0.01, kMaxCpus}));
  RETURN_IF_ERROR(CheckInteger("node memory_mb (cairnd --memory)", s.memory_mb(), {1, kMaxMemoryMb}));
  RETURN_IF_ERROR(CheckInteger("node gpus", s.gpus(), {0, kMaxGpus}));
  RETURN_IF_ERROR(CheckNumber("node price_per_hour (cairnd --price-per-hour)", s.price_per_hour(), {0, 1e6}));
  RETURN_IF_ERROR(CheckNumber("node interruptions_per_hour", s.interruptions_per_hour(), {0, 1e6}));
  return absl::OkStatus();
}

}  // namespace cairn::controller
