#include "daemon/owner_watch.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/status.h"
#include "common/proc_identity.h"

namespace cairn::daemon {

OwnerWatch::OwnerWatch(Gone gone)
    : gone_(std::move(gone)), wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  loop_ = std::thread([this] { Loop(); });
}

OwnerWatch::~OwnerWatch() {
  stopping_ = true;
  Wake();
  loop_.join();
  std::vector<Call> calls;
  {
    std::lock_guard<std::mutex> l(mu_);
    calls.swap(calls_);
  }
  for (Call& c : calls) c.thread.join();
}

absl::StatusOr<UniqueFd> OwnerWatch::Open(pid_t pid, uint64_t start_time) {
  auto not_running = [&] {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the job's owner, pid %d (started at tick %u), does not run: a job is not started for an owner that is gone",
        pid, start_time));
  };
  if (pid <= 0) return absl::InvalidArgumentError(absl::StrFormat("owner pid %d is not a process id", pid));
  UniqueFd fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!fd.valid()) {
    if (errno == ESRCH) return not_running();
    return ErrnoStatus(absl::StrFormat("pidfd_open of the job's owner, pid %d", pid));
  }
  // Checked after the pidfd is open: the pidfd is of the process that had the start time.
  if (!SameProcess(pid, start_time)) return not_running();
  return fd;
}

void OwnerWatch::Watch(const std::string& job, UniqueFd pidfd) {
  {
    std::lock_guard<std::mutex> l(mu_);
    owners_[job] = Owner{std::move(pidfd), ++serial_};
  }
  Wake();
}

void OwnerWatch::Forget(const std::string& job) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (owners_.erase(job) == 0) return;
  }
  Wake();
}

void OwnerWatch::Wake() {
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);
}

void OwnerWatch::Loop() {
  while (!stopping_) {
    std::vector<pollfd> fds = {{wake_.get(), POLLIN, 0}};
    std::vector<std::pair<std::string, uint64_t>> jobs = {{"", 0}};
    {
      std::lock_guard<std::mutex> l(mu_);
      for (const auto& [job, owner] : owners_) {
        fds.push_back({owner.pidfd.get(), POLLIN, 0});
        jobs.emplace_back(job, owner.serial);
      }
    }
    int n = ::poll(fds.data(), fds.size(), -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      CAIRN_LOG_WARN("event=owner_watch_failed errno={}", errno);
      return;
    }
    if (fds[0].revents != 0) {
      uint64_t count = 0;
      (void)!::read(wake_.get(), &count, sizeof count);
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      std::lock_guard<std::mutex> l(mu_);
      auto it = owners_.find(jobs[i].first);
      if (it == owners_.end() || it->second.serial != jobs[i].second) continue;  // forgotten or replaced since
      owners_.erase(it);
      CAIRN_LOG_INFO("event=owner_gone job={}", jobs[i].first);
      CallGoneLocked(jobs[i].first);
    }
  }
}

void OwnerWatch::Lost(const std::string& job) {
  std::lock_guard<std::mutex> l(mu_);
  owners_.erase(job);
  CAIRN_LOG_INFO("event=owner_gone job={} when=before_the_restart", job);
  CallGoneLocked(job);
}

void OwnerWatch::CallGoneLocked(const std::string& job) {
  for (auto c = calls_.begin(); c != calls_.end();) {  // the ended ones
    if (!c->done->load()) {
      ++c;
      continue;
    }
    c->thread.join();
    c = calls_.erase(c);
  }
  auto done = std::make_shared<std::atomic<bool>>(false);
  calls_.push_back({std::thread([this, job, done] {
                      gone_(job, [this] { return stopping_.load(); });
                      *done = true;
                    }),
                    done});
}

}  // namespace cairn::daemon
