#include "engine/dump/in_flight.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "absl/strings/str_format.h"
#include "common/status.h"

namespace cairn::dump {
namespace {

constexpr int kKcmpFile = 0;  // KCMP_FILE

bool SameDescription(pid_t a, int afd, pid_t b, int bfd) {
  return ::syscall(SYS_kcmp, a, b, kKcmpFile, afd, bfd) == 0;
}

}  // namespace

absl::StatusOr<image::FdRef> InFlightFiles::Resolve(int received, bool* added, pid_t queue_pid, int queue_fd) {
  *added = false;
  struct stat st {};
  if (::fstat(received, &st) != 0) return ErrnoStatus("fstat a descriptor in flight");
  pid_t self = ::getpid();
  image::FdRef ref;
  if (!held_) held_ = list_held_();
  for (const Held& h : *held_) {
    if (h.ino == st.st_ino && SameDescription(self, received, h.pid, h.fd)) {
      ref.set_pid(h.pid);
      ref.set_fd(h.fd);
      return ref;
    }
  }
  for (const Copy& k : kept_) {
    if (k.ino == st.st_ino && SameDescription(self, received, self, k.copy.get())) {
      ref.set_pid(kInFlightHolder);
      ref.set_fd(k.copy.get());
      return ref;
    }
  }
  UniqueFd copy(::fcntl(received, F_DUPFD_CLOEXEC, 0));
  if (!copy.valid()) return ErrnoStatus("keep a copy of a descriptor in flight");
  ref.set_pid(kInFlightHolder);
  ref.set_fd(copy.get());
  kept_.push_back({std::move(copy), st.st_ino, queue_pid, queue_fd});
  *added = true;
  return ref;
}

std::vector<int> InFlightFiles::Kept() const {
  std::vector<int> out;
  for (const Copy& k : kept_) out.push_back(k.copy.get());
  return out;
}

std::string InFlightFiles::FoundIn(int kept) const {
  for (const Copy& k : kept_) {
    if (k.copy.get() != kept) continue;
    if (k.queue_pid == ::getpid()) return "the queue of a socket in flight";
    return absl::StrFormat("the queue of pid %d fd %d", k.queue_pid, k.queue_fd);
  }
  return "a queue";
}

}  // namespace cairn::dump
