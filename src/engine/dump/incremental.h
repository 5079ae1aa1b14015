#pragma once
// Incremental checkpoints: the parent a dump builds on, and per process whether its
// writes since that parent are known (see tracker.h).

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/image/image.h"
#include "image.pb.h"

namespace cairn::dump {

struct Parent {
  std::string name;  // the sibling directory's name, as recorded in the child
  std::unique_ptr<image::ImageReader> chain;  // the parent, opened with its own parents
  const image::Checkpoint& meta() const { return chain->meta(); }
};

// Opens `parent` for a new checkpoint at `dir`: it must be a complete checkpoint (with a
// complete chain) in the same folder as `dir`.
absl::StatusOr<Parent> OpenParent(const std::string& dir, const std::string& parent);

// A fresh random image id (32 hex digits).
std::string NewImageId();

// The id the checkpoint records for `pid` (its id inside its own PID namespace, as
// LocalizeIds writes it, for a job; the host id otherwise).
int ImagePid(pid_t pid, bool own_pid_ns);

}  // namespace cairn::dump
