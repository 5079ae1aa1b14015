#pragma once
// Ids of restored tasks. A checkpoint records ids as its processes saw them — inside
// their own PID namespace for a job — while ptrace and /proc need the ids the restorer
// sees. The map is filled as tasks are created; an id not in it maps to itself (no
// namespace).

#include <sys/types.h>

#include <map>

namespace cairn::restore {

class IdMap {
 public:
  void Set(pid_t image_id, pid_t host_id) { map_[image_id] = host_id; }
  pid_t Host(pid_t image_id) const {
    auto it = map_.find(image_id);
    return it == map_.end() ? image_id : it->second;
  }

 private:
  std::map<pid_t, pid_t> map_;
};

}  // namespace cairn::restore
