#pragma once
// Descriptors in flight: files a process sent over a unix socket with SCM_RIGHTS that the
// receiver has not taken yet. A peek at the queue (MSG_PEEK) hands the dumper a copy of each.
// kcmp then tells whether a process of the checkpoint holds the same open file description —
// the message refers to that descriptor — or none does, because the sender closed its own: the
// description lives only in the queue. The dumper keeps a copy of each of those while the
// checkpoint is written; they are saved as the descriptors of a holder that is no process
// (Checkpoint.in_flight, pid 0), which restore makes only to send them again.

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"
#include "image.pb.h"

namespace cairn::dump {

// The pid that names the holder in an image::FdRef.
inline constexpr pid_t kInFlightHolder = 0;

class InFlightFiles {
 public:
  struct Held {
    pid_t pid;
    int fd;
    uint64_t ino;
  };
  // `held` lists every descriptor of the checkpoint's processes, when first needed (most
  // checkpoints have no descriptor in flight).
  explicit InFlightFiles(std::function<std::vector<Held>()> held) : list_held_(std::move(held)) {}

  // The descriptor the description of `received` (the dumper's, from a peek) is known by: one
  // of the checkpoint's, or the holder's — a copy of `received` kept from now on when the
  // description is new (`*added` is set then).
  // `queue_pid`, `queue_fd`: the socket whose queue it was found in, for messages.
  absl::StatusOr<image::FdRef> Resolve(int received, bool* added, pid_t queue_pid, int queue_fd);

  // The holder's descriptors: the dumper's copies, in the order they were found.
  std::vector<int> Kept() const;

  // Where the holder's descriptor `kept` was found first, for messages: "the queue of pid P fd F".
  std::string FoundIn(int kept) const;

 private:
  struct Copy {
    UniqueFd copy;
    uint64_t ino;
    pid_t queue_pid;
    int queue_fd;
  };
  std::function<std::vector<Held>()> list_held_;
  std::optional<std::vector<Held>> held_;
  std::vector<Copy> kept_;
};

}  // namespace cairn::dump
