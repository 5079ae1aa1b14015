// `cairn job attach`: a job's output as it is written.
//
// The logs are files the job appends to (stdout.log, stderr.log in its directory), also after a
// restore, so attaching is following both files from where they end (or a little before, with
// tail_bytes) while the job runs. Polling every 50 ms keeps it simple and costs nothing that
// matters; output written just before the job ends is still sent, because the files are read
// once more after the job is seen to have ended.

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "daemon/daemon.h"
#include "daemon/log_tail.h"

namespace cairn::daemon {
namespace {

constexpr size_t kChunk = 64 << 10;

// One log followed from an offset.
struct Follower {
  std::string path;
  bool is_stderr = false;
  UniqueFd fd;
  off_t offset = 0;

  // Opens the log (it may not exist yet) and starts `lines` lines or about `bytes` bytes before
  // its end, at a line's start (log_tail.h); neither: at its end.
  void Open(int64_t lines, int64_t bytes) {
    if (fd.valid()) return;
    fd = UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) return;
    struct stat st {};
    if (::fstat(fd.get(), &st) == 0) offset = LogTailOffset(fd.get(), st.st_size, lines, bytes);
  }
  // At byte `at` exactly (from the start if the log is shorter, or missing so far).
  void OpenAt(int64_t at) {
    if (fd.valid()) return;
    fd = UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    struct stat st {};
    offset = fd.valid() && ::fstat(fd.get(), &st) == 0 && at <= st.st_size ? at : 0;
  }
  // A log that appears after the attach began is followed from its start.
  void OpenFromStart() {
    if (fd.valid()) return;
    fd = UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    offset = 0;
  }

  // Sends what was appended since the last call; false when `send` refused (the caller is gone).
  bool Pump(const std::function<bool(const api::AttachJobOutput&)>& send, bool* sent) {
    if (!fd.valid()) return true;
    std::string buf(kChunk, '\0');
    for (;;) {
      ssize_t n = ::pread(fd.get(), buf.data(), buf.size(), offset);
      if (n <= 0) return true;
      offset += n;
      api::AttachJobOutput out;
      out.set_data(buf.data(), static_cast<size_t>(n));
      out.set_stderr(is_stderr);
      *sent = true;
      if (!send(out)) return false;
    }
  }
};

}  // namespace

absl::Status Daemon::Attach(const api::AttachJobRequest& req,
                            const std::function<bool(const api::AttachJobOutput&)>& send,
                            const std::function<bool()>& stop) {
  const std::string& name = req.name();
  auto state = [&]() -> absl::StatusOr<api::Job> {
    std::lock_guard<std::mutex> l(mu_);
    auto it = jobs_.find(name);
    if (it == jobs_.end() || it->second.job.state() == "starting") {
      return absl::NotFoundError(absl::StrCat("no job '", name, "' on node ", opts_.node, " (cairn job list)"));
    }
    ReapLocked(it->second);
    return it->second.job;
  };
  ASSIGN_OR_RETURN(api::Job job, state());
  Follower logs[2] = {{JobDir(name) + "/stdout.log", false, {}, 0}, {JobDir(name) + "/stderr.log", true, {}, 0}};
  if (req.from_offsets()) {
    logs[0].OpenAt(req.stdout_offset());
    logs[1].OpenAt(req.stderr_offset());
  } else {
    for (Follower& f : logs) f.Open(req.tail_lines(), req.tail_bytes());
  }
  for (;;) {
    bool sent = false;
    for (Follower& f : logs) {
      f.OpenFromStart();
      if (!f.Pump(send, &sent)) return absl::OkStatus();
    }
    if (stop()) return absl::OkStatus();
    if (sent) continue;
    // Ended (exited or killed, and no checkpoint or restore in progress): one last read of both
    // logs above happened after the job was last seen running, so nothing it wrote is lost.
    if (job.state() != "running" && job.state() != "checkpointing" && job.state() != "restoring") {
      api::AttachJobOutput last;
      last.set_ended(absl::StrCat(job.state(), job.health().detail().empty() ? "" : ": " + job.health().detail()));
      *last.mutable_health() = job.health();
      last.set_state(job.state());
      send(last);
      return absl::OkStatus();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSIGN_OR_RETURN(job, state());
  }
}

void Daemon::EndBoundJob(const std::string& name, const std::function<bool()>& stopping, const std::string& who) {
  Event(name, "unbound", who + " went away: the job is killed");
  // KillJob waits up to 60 s for a checkpoint in progress (whose --kill may end the job first).
  for (int i = 0; i < 60 && !stopping(); ++i) {
    absl::StatusOr<api::Job> r = KillJob(name, SIGKILL);
    if (r.ok() || !absl::StrContains(r.status().message(), "in progress")) return;
  }
  CAIRN_LOG_WARN("job={} still busy an hour after {} went away; not killed", name, who);
}

}  // namespace cairn::daemon
