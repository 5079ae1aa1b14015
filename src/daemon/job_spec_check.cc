#include "daemon/job_spec_check.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/job/job.h"
#include "engine/net/address.h"

#include "common/status.h"
#include "common/validate.h"
#include "engine/image/chain.h"
#include "engine/machine/cpu.h"

namespace cairn::daemon {

absl::Status CheckJobSpec(const api::JobSpec& spec) {
  if (!spec.name().empty()) RETURN_IF_ERROR(CheckJobName(spec.name()));
  if (!spec.user().empty()) RETURN_IF_ERROR(Annotate(job::LookupUser(spec.user()).status(), "user (--user)"));
  if (!spec.group().empty()) RETURN_IF_ERROR(CheckJobName(spec.group(), "group name (--group)"));
  if (!spec.cpu_baseline().empty()) {
    RETURN_IF_ERROR(Annotate(machine::ParseBaseline(spec.cpu_baseline()).status(), "CPU baseline (--cpu-baseline)"));
  }
  RETURN_IF_ERROR(CheckInteger("rank (--rank)", spec.rank(), {0, 65535}));
  RETURN_IF_ERROR(CheckInteger("gpus (--gpus)", spec.gpus(), {0, 64}));
  if (spec.group().empty() && spec.rank() != 0) {
    return absl::InvalidArgumentError("rank (--rank) is given without a group: add --group NAME");
  }
  if (spec.addresses_size() > 16) {
    return absl::InvalidArgumentError(absl::StrCat("addresses (--address): ", spec.addresses_size(),
                                                   " given; a job has at most 16"));
  }
  std::set<std::string> seen;
  for (const std::string& text : spec.addresses()) {
    ASSIGN_OR_RETURN(net::ServiceAddress a, net::ParseServiceAddress(text));
    if (!seen.insert(a.addr).second) {
      return absl::InvalidArgumentError(absl::StrCat("addresses (--address): ", text, " is given twice"));
    }
  }
  // The environment goes to `cairn run` in a file: entries must be KEY=VALUE, and 4 MiB (a
  // generous ARG_MAX) is the most an exec could take anyway.
  size_t env_bytes = 0;
  for (const std::string& e : spec.env()) {
    size_t eq = e.find('=');
    if (eq == std::string::npos || eq == 0 || e.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("env (--env): '", e.substr(0, 64), "' is not KEY=VALUE (a non-empty KEY, no NUL byte)"));
    }
    env_bytes += e.size() + 1;
  }
  if (env_bytes > (4u << 20)) {
    return absl::InvalidArgumentError(absl::StrCat("env (--env): ", env_bytes, " bytes; a job's environment has at most 4 MiB"));
  }
  if (!spec.workdir().empty() && (spec.workdir()[0] != '/' || spec.workdir().find('\0') != std::string::npos)) {
    return absl::InvalidArgumentError(absl::StrCat("workdir (--workdir) '", spec.workdir(), "': give an absolute path"));
  }
  const api::Limits& l = spec.limits();
  // cgroup v1 takes a CPU quota of at least 1 ms per 100 ms period.
  RETURN_IF_ERROR(CheckNumber("limits.cpus (--cpus)", l.cpus(), {0.01, kMaxCpus, "no limit"}));
  RETURN_IF_ERROR(CheckInteger("limits.memory_bytes (--memory)", l.memory_bytes(), {1 << 20, kMaxMemoryBytes, "no limit"}));
  const api::CheckpointPolicy& c = spec.checkpoint();
  RETURN_IF_ERROR(CheckNumber("checkpoint.interval_s (--checkpoint-every)", c.interval_s(),
                              {0.1, kYearSeconds, "only on demand"}));
  RETURN_IF_ERROR(CheckInteger("checkpoint.keep_last (--keep)", c.keep_last(), {1, 100000, "keep all"}));
  RETURN_IF_ERROR(CheckInteger("checkpoint.full_every (--full-every)", c.full_every(),
                               {1, image::kMaxChainLength, "every 8th"}));
  const api::HealthConfig& h = spec.health();
  RETURN_IF_ERROR(CheckNumber("health.hang_after_s (--hang-after)", h.hang_after_s(), {0.1, kYearSeconds, "off"}));
  RETURN_IF_ERROR(CheckNumber("health.memory_pressure_ratio (--memory-pressure)", h.memory_pressure_ratio(),
                              {0.01, 1, "0.9"}));
  // Negative means "never" (proto/daemon.proto).
  RETURN_IF_ERROR(CheckNumber("health.oom_horizon_s (--oom-horizon)", h.oom_horizon_s(),
                              {-kYearSeconds, kYearSeconds, "120 s; negative: never"}));
  return absl::OkStatus();
}

absl::Status CheckRestoreRequest(const api::RestoreJobRequest& req) {
  return CheckNumber("taken_before (--taken-before, unix seconds)", req.taken_before(), {1, kMaxUnixTime, "any time"});
}

absl::Status CheckRankPrepare(const api::RankCheckpointMessage::Prepare& p) {
  RETURN_IF_ERROR(CheckJobName(p.name()));
  RETURN_IF_ERROR(CheckJobName(p.group(), "group name"));
  RETURN_IF_ERROR(CheckJobName(p.group_checkpoint(), "group checkpoint id"));
  return CheckNumber("decide_timeout_s", p.decide_timeout_s(), {0.1, kDaySeconds, "60 s"});
}

absl::Status CheckMigrateRequest(const api::MigrateJobRequest& req) {
  return CheckNumber("restore_timeout_s (--restore-timeout)", req.restore_timeout_s(),
                     {0.1, 3600, "60 s plus 10 s per GiB of the job's memory"});
}

}  // namespace cairn::daemon
