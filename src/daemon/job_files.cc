// Who may read a job's files. Job logs (STATE/jobs/JOB/stdout.log, stderr.log) often hold
// secrets (tokens printed by a tool, a connection string in a stack trace): they are 0600 in a
// 0700 job directory, in STATE/jobs (0700), whoever made them — `cairn run` for a job started
// here, the migration receiver for one arriving, a restore or an import for one restored — and
// a daemon starting on an older state directory tightens what an earlier version left more open.
// Jobs run as root and have no owner or group of their own (docs/daemon.md, "Security"), so
// nobody but root needs to read them: `cairn job logs` goes through the daemon's socket.
//
// Modes are set without following symlinks (common/file_util.h's ChmodNoFollow): a link
// planted in the state directory is left alone and reported, never chmod'ed through.

#include <sys/stat.h>

#include <cerrno>
#include <filesystem>

#include "common/file_util.h"
#include "common/log.h"
#include "common/status.h"
#include "daemon/daemon.h"

namespace cairn::daemon {

absl::Status Daemon::PrepareJobDir(const std::string& name) {
  const std::string dir = JobDir(name);
  if (::mkdir(dir.c_str(), kJobDirMode) != 0 && errno != EEXIST) return ErrnoStatus("mkdir " + dir);
  RETURN_IF_ERROR(ChmodNoFollow(dir, kJobDirMode));
  for (const char* log : kJobLogs) {
    absl::Status s = ChmodNoFollow(dir + "/" + log, kJobLogMode);
    if (!s.ok() && !absl::IsNotFound(s)) return s;
  }
  return absl::OkStatus();
}

void Daemon::TightenJobFiles() {
  const std::string jobs = opts_.state_dir + "/jobs";
  int dirs = 0, problems = 0;
  auto report = [&](const absl::Status& s) {
    if (s.ok() || absl::IsNotFound(s)) return;
    ++problems;
    CAIRN_LOG_WARN("job files not made private: {}", std::string(s.message()));
  };
  report(ChmodNoFollow(jobs, kJobDirMode));
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(jobs, ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    // Only real directories (symlink_status): a link is not a job's directory.
    if (!std::filesystem::is_directory(it->symlink_status(ec))) continue;
    const std::string dir = it->path().string();
    report(ChmodNoFollow(dir, kJobDirMode));
    for (const char* log : kJobLogs) report(ChmodNoFollow(dir + "/" + log, kJobLogMode));
    ++dirs;
  }
  CAIRN_LOG_DEBUG("job files: {} job directories {:o}, their logs {:o}{}", dirs, kJobDirMode, kJobLogMode,
               problems > 0 ? fmt::format(" ({} could not be set, see the warnings)", problems) : "");
}

}  // namespace cairn::daemon
