#pragma once
// SLURM's own command line, for what cairn asks of slurmctld: `scontrol` (found on PATH; it
// reads SLURM_CONF like every SLURM command). Linking libslurm instead would tie cairn's binary
// to one SLURM release's ABI; scontrol's one-line output (-o) is stable across them.

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cairn::slurm {

// Runs `scontrol ARGS...`; its stdout, or an error with its stderr.
absl::StatusOr<std::string> Scontrol(const std::vector<std::string>& args);

// `scontrol -o show job ID` (or `show config`, `show node N`...) as NAME=VALUE fields.
absl::StatusOr<std::map<std::string, std::string>> ScontrolShow(const std::string& what, const std::string& id);

}  // namespace cairn::slurm
