#pragma once
// Jobs: work started by `cairn run` so that it can be checkpointed and restored anywhere
// with the same PIDs. A job's first process is a small init (PID 1 of the job's own PID
// namespace, in its own mount namespace and cgroup) that starts the command as PID 2,
// forwards SIGTERM/SIGINT/SIGHUP to it, reaps orphans, and exits with its status.
//
// Jobs are recorded in a registry directory (/var/lib/cairn/jobs by default, or
// CAIRN_STATE_DIR/jobs), one NAME.job file each.

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/restore/restore.h"

namespace cairn::job {

struct JobRecord {
  std::string name;
  std::string dir;       // stdout.log, stderr.log and default checkpoints live here
  pid_t host_pid = 0;    // the job's init, as this machine sees it
  std::string command;   // for display
  std::string cgroup;    // "cairn/NAME"
};

struct UserIds {
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<uint32_t> groups;
};

struct RunOptions {
  std::string name;               // empty: generated
  std::string dir;                // empty: <state dir>/jobs/NAME
  std::vector<std::string> argv;  // the command
  // Run the job (its init and command) as this user (LookupUser). Unset: root.
  std::optional<UserIds> user;
  // 1..4: the job uses only that x86-64 level's CPU features (machine/cpu.h
  // BaselineEnvironment goes into its environment); 0: all of this machine's.
  int cpu_baseline = 0;
  // The job's environment, KEY=VALUE entries, instead of this process's (a CPU baseline's
  // variables still go on top). Unset: this process's.
  std::optional<std::vector<std::string>> env;
  // The directory the command starts in, entered as the job's user. Empty: this process's.
  std::string workdir;
};

// The user `name` (or a numeric uid) of this machine: its uid, primary gid and supplementary
// groups; or `UID:GID[:G1,G2,...]`: exactly those ids (not root's). Errors: NotFound naming the user.
absl::StatusOr<UserIds> LookupUser(const std::string& name);
// The same user as a restore's owner (restore::RestoreOptions::only_as).
absl::StatusOr<restore::RestoreOptions::Owner> OwnerOf(const std::string& name);

// Starts a job; returns once its command has been started.
absl::StatusOr<JobRecord> Run(const RunOptions& opts);

// The registry.
absl::StatusOr<JobRecord> Load(const std::string& name);
absl::Status Save(const JobRecord& rec);

// Puts `pid` (before it forks anything) into `cgroup` (e.g. "cairn/NAME") in every
// mounted v1 hierarchy cairn uses (freezer, memory, cpu, pids), creating it if needed.
absl::Status JoinCgroup(const std::string& cgroup, pid_t pid);

// Checks a job name: common/validate.h's CheckJobName (1 to 64 letters, digits, '.', '_', '-', the
// first a letter or digit).
absl::Status CheckName(const std::string& name);

}  // namespace cairn::job
