#pragma once
// Where cairn-controller keeps its state: a small key-value interface with two implementations,
// an embedded SQLite database (sqlite_store.h; one controller) and etcd v3 through its JSON
// gateway (etcd_store.h; several controllers, one leader). The controller stores one serialized
// record per node, job and event under "nodes/", "jobs/" and "events/".
//
// Leadership is part of the store because it must fence the store's writes: a controller that
// has lost its leadership must not be able to overwrite what the new leader writes. With etcd
// every write is a transaction conditioned on the leader key still naming this controller.
//
// Thread safety: implementations are thread-safe.

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cairn::controller {

struct Leadership {
  bool leader = false;
  std::string leader_id;  // who leads now; empty when nobody does.
};

class Store {
 public:
  virtual ~Store() = default;

  // The value under `key`, or nullopt when absent. Errors: Unavailable (store unreachable).
  virtual absl::StatusOr<std::optional<std::string>> Get(absl::string_view key) = 0;
  // Writes `value` under `key`. Errors: FailedPrecondition when this controller no longer
  // leads (nothing was written); Unavailable.
  virtual absl::Status Put(absl::string_view key, absl::string_view value) = 0;
  // Removes `key` (absent is fine). Errors as Put.
  virtual absl::Status Delete(absl::string_view key) = 0;
  // Every key starting with `prefix`, in key order, with its value.
  virtual absl::StatusOr<std::vector<std::pair<std::string, std::string>>> List(
      absl::string_view prefix) = 0;

  // One round of leader election for the controller `id`: takes the leadership when nobody
  // holds it, renews it when this controller holds it. Call it at least every ttl/3 seconds
  // (the implementation's lease). Returns who leads after the round; leader=false also when
  // this controller's leadership lapsed, in which case it must stop acting at once. When the
  // store does not answer, the etcd store keeps a leader leading until most of its lease has
  // passed without a renewal, then says leader=false; errors are for malformed replies.
  virtual absl::StatusOr<Leadership> Campaign(const std::string& id) = 0;
  // Gives up leadership (on a clean shutdown), so a follower takes over without waiting for
  // the lease to expire. Best effort.
  virtual void Resign() = 0;

  // "sqlite:PATH" or "etcd://host:port,...", for status output.
  virtual std::string Describe() const = 0;
};

// Opens the store named by `spec`: "sqlite:PATH", a bare PATH (SQLite), or
// "etcd://host:port[,host:port...]". `lease_ttl_s` is the etcd leadership lease.
// Errors: InvalidArgument (bad spec), and whatever opening the store gives.
absl::StatusOr<std::unique_ptr<Store>> OpenStore(const std::string& spec, double lease_ttl_s);

}  // namespace cairn::controller
