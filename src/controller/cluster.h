#pragma once
// The controller's view of the cluster: nodes (what a daemon registers), jobs (what a user submits)
// and which job is bound to which node. Placement (placement.h) and policies (policy.h) read it;
// only Cluster's own methods change it, so its capacity bookkeeping and its placement index can
// never disagree with the bindings.
//
// Thread safety: none. A Cluster belongs to one thread (the controller's event loop, or the
// simulator); callers that share one must serialize access themselves.

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/ip_prefix.h"

namespace cairn::controller {

// CPUs, memory and GPUs: what a node offers and what a job asks for.
struct Resources {
  double cpus = 0;
  int64_t memory_mb = 0;
  int gpus = 0;

  // True when every dimension of *this is <= the same dimension of `free`.
  bool FitsIn(const Resources& free) const {
    return cpus <= free.cpus + 1e-9 && memory_mb <= free.memory_mb && gpus <= free.gpus;
  }
  Resources& operator+=(const Resources& o) {
    cpus += o.cpus;
    memory_mb += o.memory_mb;
    gpus += o.gpus;
    return *this;
  }
  Resources& operator-=(const Resources& o) {
    cpus -= o.cpus;
    memory_mb -= o.memory_mb;
    gpus -= o.gpus;
    return *this;
  }
};

enum class Market { kOnDemand, kSpot };
absl::string_view MarketName(Market m);

// kDraining: no new jobs (a sick GPU, a scale-down); kLost: heartbeats stopped.
enum class NodeHealth { kHealthy, kDraining, kLost };
absl::string_view HealthName(NodeHealth h);

// What a node's daemon registers. Everything placement scores comes from here or from Node.
struct NodeSpec {
  std::string id;
  Resources capacity;
  std::string gpu_type;  // "V100", "A100", ...; empty for a CPU-only node.
  double price_per_hour = 0;
  Market market = Market::kOnDemand;
  std::string zone;
  std::string cloud;
  std::map<std::string, std::string> labels;
  int cpu_level = 0;                    // x86-64 level 1..4; 0: not reported (any job may go there)
  std::set<std::string> cpu_features;   // common/cpu_levels.h names
  std::vector<IpPrefix> addresses;      // its own (ADDR/PREFIX@DEV); empty: not reported
  std::set<std::string> devices;        // its network interfaces' names
};

struct Node {
  NodeSpec spec;
  NodeHealth health = NodeHealth::kHealthy;
  // Observed interruptions (spot reclaims, crashes) per hour of this node or its pool.
  double interruptions_per_hour = 0;
  Resources allocated;
  std::vector<std::string> job_ids;

  Resources Free() const {
    Resources f = spec.capacity;
    f -= allocated;
    return f;
  }
};

enum class JobKind { kBatch, kService };
absl::string_view JobKindName(JobKind k);

// How and how often a job is checkpointed, and what a checkpoint and a restore cost it.
struct CheckpointPolicy {
  double interval_s = 0;     // periodic checkpoints; 0 = none.
  double pause_s = 0;        // time the job is stopped per periodic checkpoint.
  double notice_checkpoint_s = 0;  // time to take and upload a checkpoint on a notice.
  int64_t bytes = 0;         // size of one checkpoint.
  double restore_s = 0;      // from a ready node to the job running again.
  bool on_notice = false;    // checkpoint when an interruption notice arrives.
};

// A batch job's deadline (absolute seconds on the controller's clock; 0 = none) or a
// service's downtime allowance (seconds; 0 = none).
struct Sla {
  double deadline = 0;
  double max_downtime_s = 0;
};

struct JobSpec {
  std::string id;
  Resources request;
  int priority = 0;  // higher runs first, is suspended last.
  JobKind kind = JobKind::kBatch;
  Sla sla;
  CheckpointPolicy checkpoint;
  double budget_usd = 0;              // 0 = unlimited.
  double work_s = 0;                  // batch: total work in seconds on a reference (factor 1.0) GPU.
  double submit_time = 0;             // when it was submitted (the start of its deadline window).
  double downtime_cost_per_hour = 0;  // what an hour of this job not running costs its owner.
  std::string gpu_type;               // required GPU type; empty = any.
  std::map<std::string, std::string> node_selector;  // required node labels.
  std::vector<std::string> command;   // what the node daemon runs; placement ignores it.
  std::string user;                   // the node user it runs as (empty: root); placement ignores it.
  std::string group;                  // the job group it is a rank of (empty: none); placement ignores it.
  int rank = 0;
  std::vector<std::string> addresses;  // its service addresses: placed only where they can go (AddressRejection)
  int cpu_baseline = 0;                // keeps to this x86-64 level's features (0: to its first node's CPU)
};

struct CheckpointRecord {
  double time = 0;    // when it completed.
  double work_s = 0;  // work it captured.
};

enum class JobState { kPending, kRunning, kSuspended, kDone };
// Why a suspended job is off the cluster: it decides where it may be resumed.
enum class SuspendReason { kNone, kWaitingForCheapCapacity, kScaleDown };
absl::string_view JobStateName(JobState s);

struct Job {
  JobSpec spec;
  JobState state = JobState::kPending;
  std::string node_id;  // empty unless bound.
  double work_done_s = 0;    // as of progress_time.
  double progress_time = 0;  // last time progress was observed.
  double spent_usd = 0;
  double downtime_s = 0;  // services: time not serving since first start.
  SuspendReason suspended_for = SuspendReason::kNone;
  std::vector<CheckpointRecord> checkpoints;  // ascending time.
  // The CPU features the job's processes may use: those of the first node it was bound to (they
  // chose their code by them at start-up); empty with a baseline, or before it first ran.
  std::set<std::string> cpu_features;

  double RemainingWork() const {
    return spec.work_s > work_done_s ? spec.work_s - work_done_s : 0;
  }
  // The newest checkpoint completed strictly before `before`, or nullptr.
  const CheckpointRecord* LatestCheckpoint(
      double before = std::numeric_limits<double>::infinity()) const;
};

// Weights that turn a node's free resources into one "slack" number for best-fit packing:
// slack = sum over dimensions of weight * free / capacity. Placement prefers the feasible node
// whose slack after placing is smallest, so GPUs are filled before memory before CPUs.
struct PackingWeights {
  double gpus = 1.0;
  double memory = 0.5;
  double cpus = 0.25;
};

// Slack of `free` resources on a node of `capacity`, as defined above.
double Slack(const Resources& free, const Resources& capacity, const PackingWeights& w);

class Cluster {
 public:
  explicit Cluster(PackingWeights packing = {}) : packing_(packing) {}

  // Registers a node. Errors: InvalidArgument (empty id, negative capacity), AlreadyExists.
  absl::Status AddNode(NodeSpec spec);
  // Forgets a node. Errors: NotFound; FailedPrecondition while jobs are bound to it.
  absl::Status RemoveNode(absl::string_view node_id);
  absl::Status SetNodeHealth(absl::string_view node_id, NodeHealth health);
  absl::Status SetInterruptionRate(absl::string_view node_id, double per_hour);
  absl::Status SetPrice(absl::string_view node_id, double price_per_hour);

  // Adds a job in state kPending. Errors: InvalidArgument, AlreadyExists.
  absl::Status AddJob(JobSpec spec);
  absl::Status RemoveJob(absl::string_view job_id);
  // Binds a pending or suspended job to a node and marks it running.
  // Errors: NotFound; FailedPrecondition (already bound, node not healthy);
  // ResourceExhausted (does not fit). `runs_there`: the node's daemon says the job runs there
  // already, so the model records it whatever the node's health or free resources.
  absl::Status Bind(absl::string_view job_id, absl::string_view node_id, bool runs_there = false);
  // Releases a job's resources; the job becomes `next` (kSuspended, kPending or kDone).
  absl::Status Unbind(absl::string_view job_id, JobState next = JobState::kSuspended);

  const Node* FindNode(absl::string_view id) const;
  const Job* FindJob(absl::string_view id) const;
  Job* MutableJob(absl::string_view id);

  size_t node_count() const { return index_.size(); }
  size_t job_count() const { return jobs_.size(); }
  const PackingWeights& packing() const { return packing_; }

  // Calls f(const Node&) for every node, in registration order (stable; used as tie-break).
  template <typename F>
  void ForEachNode(F&& f) const {
    for (const Slot& s : slots_) {
      if (s.node) f(*s.node, s.order);
    }
  }
  template <typename F>
  void ForEachJob(F&& f) const {
    for (const auto& [id, job] : jobs_) f(job);
  }
  // Job ids sorted, for deterministic iteration.
  std::vector<std::string> SortedJobIds() const;

  // A pool is a set of nodes that placement cannot tell apart except by free resources: same
  // type, market, zone, cloud, price, capacity, labels, health and interruption rate. Each pool
  // keeps its nodes ordered by slack so the best-fit node is found without scanning the pool.
  struct Pool {
    const Node* representative = nullptr;  // any member; for the attributes only.
    // (slack, registration order, slot index), ascending.
    std::set<std::tuple<double, uint64_t, size_t>> by_slack;
  };
  template <typename F>
  void ForEachPool(F&& f) const {
    for (const auto& [key, pool] : pools_) {
      if (!pool.by_slack.empty()) f(pool);
    }
  }
  const Node& NodeAt(size_t slot) const { return *slots_[slot].node; }
  // Registration order of a node (the placement tie-break); 0 when unknown.
  uint64_t OrderOf(absl::string_view node_id) const {
    auto it = index_.find(node_id);
    return it == index_.end() ? 0 : slots_[it->second].order;
  }
  uint64_t OrderAt(size_t slot) const { return slots_[slot].order; }

 private:
  struct Slot {
    std::unique_ptr<Node> node;  // null when the slot is free.
    uint64_t order = 0;
    std::string pool_key;
    double slack = 0;
  };
  std::string PoolKey(const Node& n) const;
  void IndexInsert(size_t slot);
  void IndexErase(size_t slot);
  Node* MutableNode(absl::string_view id, size_t* slot);

  PackingWeights packing_;
  std::vector<Slot> slots_;
  std::vector<size_t> free_slots_;
  uint64_t next_order_ = 0;
  absl::flat_hash_map<std::string, size_t> index_;
  std::map<std::string, Pool> pools_;
  absl::node_hash_map<std::string, Job> jobs_;
};

}  // namespace cairn::controller
