#pragma once
// The processes jobs live no longer than (RunJobRequest.owner, RestoreJobRequest.owner: a SLURM
// task's agent). One thread waits on a pidfd of each owner; when one exits, `gone` is called
// with its job's name (on a thread of its own: ending a job waits for a checkpoint in progress).
// A job whose owner changed since (a restore with another owner) is not told about the old one.

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"

namespace cairn::daemon {

class OwnerWatch {
 public:
  // `gone(job, stopping)`: `stopping` turns true once the watch is being destroyed (a call that
  // waits should give up then).
  using Gone = std::function<void(const std::string& job, const std::function<bool()>& stopping)>;
  explicit OwnerWatch(Gone gone);
  ~OwnerWatch();  // stops the watch and waits for the `gone` calls under way
  OwnerWatch(const OwnerWatch&) = delete;
  OwnerWatch& operator=(const OwnerWatch&) = delete;

  // A pidfd of process `pid` started at `start_time`; FailedPrecondition when no such process
  // runs (it exited, or the pid is another's now).
  static absl::StatusOr<UniqueFd> Open(pid_t pid, uint64_t start_time);

  // Job `job` is owned by the process `pidfd` refers to now (replacing any owner it had).
  void Watch(const std::string& job, UniqueFd pidfd);
  // Job `job` has no owner any more.
  void Forget(const std::string& job);
  // Job `job`'s owner is gone already (a restarted daemon found it so): `gone` is called as for
  // an owner that exits.
  void Lost(const std::string& job);

 private:
  void Loop();
  void Wake();
  // Starts the `gone` call for `job` on a thread of its own. REQUIRES: mu_ held.
  void CallGoneLocked(const std::string& job);

  Gone gone_;
  UniqueFd wake_;  // an eventfd: the set of owners changed, or stop
  std::mutex mu_;
  struct Owner {
    UniqueFd pidfd;
    uint64_t serial = 0;  // which Watch call (a pidfd's number may be reused)
  };
  std::map<std::string, Owner> owners_;  // job -> its owner
  uint64_t serial_ = 0;
  struct Call {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Call> calls_;  // `gone` calls under way or ended (joined as the next one starts, and at the end)
  std::atomic<bool> stopping_{false};
  std::thread loop_;
};

}  // namespace cairn::daemon
