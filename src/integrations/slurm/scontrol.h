#pragma once
// SLURM's own command line, for what cairn asks of slurmctld: `scontrol` (found on PATH; it
// reads SLURM_CONF like every SLURM command). Linking libslurm instead would tie cairn's binary
// to one SLURM release's ABI; scontrol's one-line output (-o) is stable across them.

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cairn::slurm {

// Runs `scontrol ARGS...`; its stdout, or an error with its stderr. `timeout_s` > 0: killed after
// that long, DeadlineExceeded then.
absl::StatusOr<std::string> Scontrol(const std::vector<std::string>& args, int timeout_s = 0);

// `scontrol -o show job ID` (or `show config`, `show node N`...) as NAME=VALUE fields; a name
// given twice keeps its last value. Values with spaces are cut at them: a job's own JobName,
// Comment or output paths can make up fields, which misleads only what cairn decides about that
// same job (its owner's).
absl::StatusOr<std::map<std::string, std::string>> ScontrolShow(const std::string& what, const std::string& id,
                                                                int timeout_s = 0);

}  // namespace cairn::slurm
