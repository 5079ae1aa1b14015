#include "engine/dump/in_flight.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/status.h"

namespace cairn::dump {
namespace {

constexpr int kKcmpFile = 0;  // KCMP_FILE

bool SameDescription(pid_t a, int afd, pid_t b, int bfd) {
  return ::syscall(SYS_kcmp, a, b, kKcmpFile, afd, bfd) == 0;
}

}  // namespace

absl::StatusOr<image::FdRef> InFlightFiles::Resolve(int received, bool* added) {
  *added = false;
  struct stat st {};
  if (::fstat(received, &st) != 0) return ErrnoStatus("fstat a descriptor in flight");
  pid_t self = ::getpid();
  image::FdRef ref;
  for (const Held& h : held_) {
    if (h.ino == st.st_ino && SameDescription(self, received, h.pid, h.fd)) {
      ref.set_pid(h.pid);
      ref.set_fd(h.fd);
      return ref;
    }
  }
  for (const auto& [copy, ino] : kept_) {
    if (ino == st.st_ino && SameDescription(self, received, self, copy.get())) {
      ref.set_pid(kInFlightHolder);
      ref.set_fd(copy.get());
      return ref;
    }
  }
  UniqueFd copy(::fcntl(received, F_DUPFD_CLOEXEC, 0));
  if (!copy.valid()) return ErrnoStatus("keep a copy of a descriptor in flight");
  ref.set_pid(kInFlightHolder);
  ref.set_fd(copy.get());
  kept_.emplace_back(std::move(copy), st.st_ino);
  *added = true;
  return ref;
}

std::vector<int> InFlightFiles::Kept() const {
  std::vector<int> out;
  for (const auto& [copy, ino] : kept_) out.push_back(copy.get());
  return out;
}

}  // namespace cairn::dump
