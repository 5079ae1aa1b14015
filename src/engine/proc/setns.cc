#include "engine/proc/setns.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace cairn::proc {

absl::Status InNamespaceOf(pid_t pid, int nstype, const char* name, const std::function<absl::Status()>& fn) {
  std::string path = absl::StrCat("/proc/", pid, "/ns/", name);
  UniqueFd ns(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!ns.valid()) return ErrnoStatus("open " + path);
  absl::Status result;
  std::thread t([&] {
    if (::setns(ns.get(), nstype) != 0) {
      result = ErrnoStatus("setns " + path);
      return;
    }
    result = fn();
  });
  t.join();
  return result;
}

}  // namespace cairn::proc
