#pragma once
// cairnd's core: managed jobs, their checkpoints and their health, independent of how it is
// reached (the gRPC service in service.h calls it). Jobs run as with `cairn run` (engine/job:
// own PID, mount and IPC namespaces, cgroup cairn/NAME) with optional CPU and memory limits.
//
// Checkpoints are full dumps through dump::Dump (leave running, whole tree) into
// STATE/checkpoints/JOB/ID; the catalog records them 'writing' first and 'complete' only after
// the engine's atomic commit and, with a remote --storage (DaemonOptions::store), once the store
// holds it and has been checked (daemon_storage.cc). CheckpointJobRequest already carries `incremental` and
// `pre_copy` so the engine's low-downtime modes (issue 4) can be passed through later; today
// they are refused with a clear message.
//
// Crash safety: a restarted daemon (Open) marks 'writing' checkpoints failed and removes their
// files (also from a remote store: an upload cut off is rolled back), thaws a freezer left
// frozen, and adopts every job still running by its recorded host pid and start time; jobs whose
// process is gone are marked exited (status unknown). A restore records the job `restoring`
// before it fetches or creates anything and commits with the record that says `running`; a job
// found `restoring` at the start has whatever runs in its cgroup killed and is marked exited
// (event restore-interrupted): RollBackRestore.
// Fault points (common/stop_points.h), each cut in tests/daemon/upload_restore_kill_test.cc:
// upload-begun / upload-stored (StoreCheckpoint, before Put / after it, the row still
// `writing`; the store's own are in storage/storage.h), restore-fetched (the image on this node,
// the engine not started), restore-building (engine: every task created and held, no memory in),
// restore-running (the restored job runs, its record not yet written); group-frozen (a group's
// rank frozen with its state captured, its part not yet recorded; tests/daemon/group_test.cc).
//
// Migration to another daemon (Migrate / ReceiveJob) lives in migrate.cc (see migrate.h).
//
// Thread safety: all public methods may be called from any thread. Engine work on a job
// (checkpoint, restore) is exclusive per job: a second one is refused while the first runs.

#include <sys/types.h>

#include <atomic>
#include <thread>
#include <condition_variable>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon.pb.h"
#include "daemon/catalog.h"
#include "daemon/gpu_watch.h"
#include "daemon/health.h"
#include "daemon/histogram.h"
#include "daemon/owner_watch.h"
#include "daemon/storage/storage.h"
#include "daemon/spot_watch.h"
#include "engine/image/seal.h"
#include "engine/job/job.h"
#include "engine/net/claim.h"

namespace cairn::daemon {

// A job's logs, in STATE/jobs/JOB (job_files.cc): private to root, as they often hold secrets.
inline constexpr const char* kJobLogs[] = {"stdout.log", "stderr.log"};
inline constexpr mode_t kJobDirMode = 0700;
inline constexpr mode_t kJobLogMode = 0600;
// A job's health detail while it is being restored (state `restoring`), then the checkpoint's id.
inline constexpr char kRestoringFrom[] = "restoring from checkpoint ";

struct DaemonOptions {
  std::string node;
  std::string state_dir;
  // Seals every checkpoint this daemon writes and checks the seal of every one it restores
  // (engine/image/seal.h): the cluster's key, the same file on every node. Null only in
  // tests that build a Daemon without one (then nothing is sealed or checked).
  std::shared_ptr<image::ImageKey> image_key;
  // Test hook (fault injection): seconds to pause inside every checkpoint's memory copy, while
  // the job is frozen and the checkpoint is half-written. 0 in production.
  double pause_in_checkpoint_s = 0;
  // The `cairn` executable that starts jobs (`cairn run`). REQUIRES: the daemon is a child
  // subreaper (PR_SET_CHILD_SUBREAPER), so started jobs become its children.
  std::string cairn_bin;
  // Periodic checkpoints of different jobs taken at the same time, at most.
  int checkpoint_workers = 2;
  // Where complete checkpoints live (daemon_storage.cc, docs/daemon.md "Storage"); null: local.
  std::shared_ptr<storage::CheckpointStore> store;
  // With a remote store: keep the local copy too, for fast restores on this node.
  bool keep_local = false;
  // Migration (migrate.h): other daemons by node name -> HOST:PORT, the token they take,
  // where outgoing images are staged, and whether arriving jobs are restored lazily.
  std::map<std::string, std::string> peers;
  std::string peer_token;
  std::string spool_dir;
  bool lazy_migrations = true;
  // Test hooks (fault injection) for arriving migrations: fail the restore, or pause this
  // many seconds once the whole image is in, before restoring. Off in production.
  bool fail_migration_restore = false;
  double pause_before_migration_restore_s = 0;
  // Seconds between garbage collections (gc.cc) on the daemon's tick; 0: only `cairn gc`.
  double gc_interval_s = 600;
};

// The UTC time `t` as checkpoint ids end in it, YYYYMMDDTHHMMSSmmm (restore_newest.cc): a job's
// checkpoint is JOB-STAMP, the job's name whole (a SLURM step's has dots: slurm-7.0.0-u0).
std::string CheckpointStamp(absl::Time t);

class Daemon {
 public:
  // Opens the catalog in the state directory and recovers from a previous run (see above).
  static absl::StatusOr<std::unique_ptr<Daemon>> Open(const DaemonOptions& opts);
  ~Daemon();

  absl::StatusOr<api::Job> RunJob(const api::JobSpec& spec);
  std::vector<api::Job> ListJobs();
  absl::StatusOr<api::GetJobResponse> GetJob(const std::string& name);
  // The job's log, all of it (up to 4 MiB from the end) or its last `tail_lines` lines, or its
  // last `tail_bytes` bytes from a line's start (log_tail.h).
  absl::StatusOr<std::string> Logs(const std::string& name, bool stderr_log, int64_t tail_lines, int64_t tail_bytes);
  // Streams the job's output to `send` as it is written (attach.cc), until the job no longer
  // runs (the last message says how it ended), `send` returns false, or `stop` returns true.
  // A restore of the job carries on appending to the same logs, so attach survives one.
  absl::Status Attach(const api::AttachJobRequest& req,
                      const std::function<bool(const api::AttachJobOutput&)>& send,
                      const std::function<bool()>& stop);
  // The caller an attach was bound to (AttachJobRequest.bound), or the job's owner, went away
  // while the job ran (`who` says which, for its event): kills the job once no checkpoint,
  // restore or migration of it is in progress (attach.cc).
  void EndBoundJob(const std::string& name, const std::function<bool()>& stopping,
                   const std::string& who = "the caller its attach was bound to (a SLURM task's agent)");
  // The job lives no longer than the process `pidfd` refers to, `owner` (RunJobRequest.owner;
  // owner_watch.h), replacing any owner it had; an invalid `pidfd`: it has none any more. Recorded
  // on the job: a restarted daemon watches it again.
  void SetOwner(const std::string& name, UniqueFd pidfd, const api::Owner* owner);
  // Sends `sig` (0: SIGKILL) to the job's init, after a checkpoint or restore in progress ends;
  // with SIGKILL waits (up to 5 s) until it is gone.
  absl::StatusOr<api::Job> KillJob(const std::string& name, int sig);
  // Removes a job that does not run, with its checkpoints, logs and cgroup.
  // `keep_stored`: what this node put in the shared store stays; `purge_stored`: every checkpoint
  // of the job there goes, whichever node stored it (DeleteJobRequest).
  absl::Status DeleteJob(const std::string& name, bool keep_stored = false, bool purge_stored = false);
  // The controller's cancel (gc.cc): KillJob with SIGKILL (a job that already ended is
  // cancelled as it is), then the job is marked cancelled and its unpinned checkpoints here
  // removed; its record and logs stay. Refused for a job running elsewhere or held mid-migration.
  absl::StatusOr<api::Job> CancelJob(const std::string& name);
  // What nothing on this node needs any more (gc.cc): removed, or with `dry_run` only listed.
  absl::StatusOr<api::CollectGarbageResponse> CollectGarbage(bool dry_run);

  absl::StatusOr<api::Checkpoint> Checkpoint(const api::CheckpointJobRequest& req, const std::string& reason);
  // Restores a job that does not run from `checkpoint` (empty: its newest complete one). With
  // `from` (a location in a shared store), or a `checkpoint` id of a job this node does not know
  // while its store is shared, the checkpoint is fetched from the store first and the job is
  // created from the spec stored with it (ImportCheckpoint).
  // `hold_network`: its connections stay behind the restore's network lock (RestoreJobRequest).
  absl::StatusOr<api::RestoreJobResponse> Restore(const std::string& name, const std::string& checkpoint,
                                                  const std::string& from = "", bool hold_network = false);
  // Lifts the network lock a restore with hold_network left for job `name` (group.cc).
  absl::StatusOr<api::Job> ReleaseNetwork(const std::string& name);

  // The location of job `name`'s newest complete checkpoint in the shared store taken at or
  // before `taken_before` (unix seconds; 0: any), whichever node took it (restore_newest.cc).
  absl::StatusOr<std::string> NewestStored(const std::string& name, double taken_before);

  std::vector<api::Checkpoint> ListCheckpoints(const std::string& job);
  absl::StatusOr<api::Checkpoint> GetCheckpoint(const std::string& id);
  absl::Status DeleteCheckpoint(const std::string& id);
  absl::StatusOr<api::Checkpoint> PinCheckpoint(const std::string& id, bool pinned);

  // Migration, source side (migrate.cc): moves the running job to another daemon, which
  // restores it; the job is left running here unless the destination confirms it runs.
  absl::StatusOr<api::MigrateJobResponse> Migrate(const api::MigrateJobRequest& req);
  // How a migration of job `name` away from here stands (phase empty when none runs).
  api::MigrationProgressResponse MigrationProgress(const std::string& name);
  // Migration, destination side: the stream from the source daemon. `read` returns false at
  // the end of the stream (or when it broke); `write` false when the source is gone.
  // `cancelled`: the source gave up (it thawed the job): nothing may be restored any more.
  absl::Status ReceiveJob(const std::function<bool(api::MigrationMessage*)>& read,
                          const std::function<bool(const api::MigrationReply&)>& write,
                          const std::function<bool()>& cancelled);
  // Migration, destination side: how the migration `migration` (its checkpoint id) of job
  // `name` to this node ended: committed, in-progress or aborted (migrate.h).
  absl::StatusOr<api::MigrationOutcomeResponse> MigrationOutcome(const std::string& name, const std::string& migration);
  // Migration, source side: asks the destination of every migration this daemon does not
  // know the end of (state "migrating": the job held frozen, or gone) and settles it.
  // Called by Tick, each such job at most every 2 s.
  void ResolveMigrations();
  // The operator settles a migration the destination cannot answer for (SettleMigrationRequest).
  absl::StatusOr<api::Job> SettleMigration(const std::string& name, bool here);

  // A rank's part in a group checkpoint (group.cc; RankCheckpointMessage in daemon.proto): `read`
  // returns false once the coordinator's stream ended (or `cancel` was called: the rank waits
  // for a decision at most Prepare.decide_timeout_s, then cancels), `write` false when it is gone.
  absl::Status CheckpointRank(const std::function<bool(api::RankCheckpointMessage*)>& read,
                              const std::function<bool(const api::RankCheckpointReply&)>& write,
                              const std::function<void()>& cancel);

  // Events after `after_seq` for `job` (all when empty); waits up to `wait_ms` for one to arrive.
  std::vector<api::Event> WaitEvents(const std::string& job, uint64_t after_seq, int wait_ms);
  uint64_t LastEventSeq();

  api::NodeInfoResponse Info();
  // Prometheus text exposition of the daemon's and its jobs' figures.
  std::string Metrics();

  // One pass of the daemon's own work: reap ended jobs, sample health, take due periodic
  // checkpoints. Called by the policy thread about every `tick` seconds.
  void Tick();
  // Planned shutdown: checkpoints every running job whose policy asks for it. Jobs keep running.
  void CheckpointForShutdown();
  // SIGUSR1: checkpoints every running job whose policy says on_signal. Jobs keep running.
  void CheckpointOnSignal();

  // ---- Node signals (node_signals.cc; docs/daemon.md "Node signals") ----
  // The status line of a node-level part ("spot-watcher", "gpu-watcher", "controller") shown
  // in NodeInfo; a changed line that starts with "warning" is also a node event.
  void SetComponentStatus(const std::string& component, const std::string& line);
  // A controller's term, heard from a registration or heartbeat answer or carried by a call
  // (`cairn-controller-term` metadata): the highest heard is kept in the catalog. A lower one
  // means the call comes from a deposed leader: FailedPrecondition, and nothing is done.
  absl::Status HearControllerTerm(uint64_t term, const std::string& what);
  // The cloud announced this node's reclaim: a node event (job "") and NodeInfo's spot_notice;
  // then every running job is checkpointed at once, pinned, reason "spot-notice" (a job busy
  // with another checkpoint gets its own after that one). Returns when those checkpoints ended.
  void OnSpotNotice(const SpotNoticeInfo& notice);
  // The GPUs NVML found (NodeInfo's gpus and gpu_type).
  void SetGpus(const std::vector<GpuDevice>& gpus);
  // A GPU health event: a node event and a line in NodeInfo's gpu_events.
  void OnGpuSignal(const GpuSignal& signal);

 private:
  struct JobState {
    api::Job job;
    std::unique_ptr<HealthTracker> tracker;
    bool child = false;          // started or restored by this daemon process: waitid works
    bool busy = false;           // a checkpoint or restore is in progress
    bool stop_after_checkpoint = false;
    bool killed_by_user = false;
    double next_checkpoint = 0;  // monotonic seconds
    double next_resolve = 0;     // state migrating: when to ask the destination again
    bool warned_no_token = false;  // state migrating: said once that it cannot ask
    // The claims (net/claim.h) on the locks its record names: job.network_hold, job.network_lock_kept,
    // and a migration's (job.migration: held while it is in doubt). `cairn check --fix` leaves a
    // lock the daemon still needs. Kept in step by ClaimNetwork.
    net::LockClaim hold_claim;
    net::LockClaim kept_claim;
    net::LockClaim migration_claim;
    // A restore under way holds the GPUs it picked from its first step (the record says
    // `restoring` with them only later): daemon/gpus.cc counts these too.
    std::vector<int> reserved_gpus;
  };
  // Claims the network locks `s`'s record names and lets go of those it no longer names. Waits
  // at most a few seconds for a `cairn check --fix` removing one (then warns: unclaimed).
  static void ClaimNetwork(JobState& s);
  // Deletes network lock `table` of job `job` (its connections' peers then see them reset, or
  // they flow); a failure is logged (`cairn check --fix` removes what is left).
  static void RemoveJobNetworkLock(const std::string& job, const std::string& table);
  // Watches job `name`'s recorded owner again (a restart, a migration settled here): one gone
  // meanwhile ends the job; one that cannot be watched for another reason is logged.
  void WatchOwnerAgain(const std::string& name, const api::Owner& owner);

  // A group checkpoint's rank (group.cc): the group checkpoint's id, and its coordinator's
  // say, asked while the rank stands frozen with its state captured (with kill: its checkpoint
  // committed and recorded complete): commit (true), call off (false), or none (gone).
  struct RankPart {
    std::string group_checkpoint;
    // Called just before the freeze: OK once every rank is ready (the coordinator says Freeze).
    std::function<absl::Status()> ready;
    std::function<std::optional<bool>(const api::Checkpoint&, double dump_s)> decide;
    std::optional<bool> decision;  // what decide answered
  };
  // Checkpoint, or a rank's part of a group checkpoint with `rank` (always full, never pre-copy;
  // frozen once ready() says so, until decide answers; kill then applies only to a commit; a
  // live rank's checkpoint is committed after its thaw).
  absl::StatusOr<api::Checkpoint> CheckpointWith(const api::CheckpointJobRequest& req, const std::string& reason,
                                                 RankPart* rank);

  struct Received;  // migrate.cc: a job arriving from another daemon
  // Ends a migration held in doubt as `committed` (the copy here dies) or not (it runs on
  // here), as `who` says (the destination, or the operator); `there` adds what the destination
  // said of its copy. mu_ held.
  void SettleLocked(const std::string& name, JobState& s, bool committed, const std::string& there,
                    const std::string& who);
  explicit Daemon(DaemonOptions opts, std::unique_ptr<Catalog> catalog);
  absl::Status RestoreReceived(Received& in, const std::function<bool()>& cancelled);
  void AbandonReceived(Received& in, const absl::Status& why);
  absl::Status Recover();
  void CleanUnrecorded(const std::vector<api::Checkpoint>& checkpoints);
  // Recover's part for a job whose restore a crash cut off (state `restoring`; daemon.cc).
  void RollBackRestore(api::Job& j);
  void DropFetchedCopies(const std::vector<api::Checkpoint>& checkpoints);
  absl::StatusOr<job::JobRecord> StartWithCairnRun(const std::string& name, const api::JobSpec& spec,
                                                   const std::vector<int>& gpus);
  // GPUs (daemon/gpus.cc). The node's count, through NVML (0 without).
  int NodeGpuCount();
  // `n` of the node's GPUs that no other job holds, for job `name`; FailedPrecondition naming
  // what holds the others. REQUIRES mu_.
  absl::StatusOr<std::vector<int>> PickGpusLocked(const std::string& name, int n, int node_gpus);
  // Whether each of `devices` exists here and no job but `name` holds it. REQUIRES mu_.
  bool GpusFreeLocked(const std::string& name, const google::protobuf::RepeatedField<int32_t>& devices, int node_gpus);
  // Garbage collection (gc.cc): job `job`'s checkpoints that may go, each with `why` (unpinned,
  // complete or failed; with `stored_need_newer`, a stored one only once the shared store holds
  // a newer checkpoint of the job this node did not take), children before parents; and their
  // removal (an item that could not go gets its error).
  std::vector<api::GarbageItem> CheckpointGarbage(const std::string& job, const std::string& why,
                                                  bool stored_need_newer);
  void RemoveGarbage(std::vector<api::GarbageItem>& items);
  bool StillGarbage(const api::GarbageItem& item);  // checked again, under mu_, just before removal
  void Event(const std::string& job, const std::string& kind, const std::string& detail);
  absl::Status Persist(const api::Job& job);
  // Writes `s`'s record, claiming first the network locks it names and letting go of those it no
  // longer names (ClaimNetwork): every change of the record carries the claims with it.
  absl::Status Persist(JobState& s);
  // Reaps the job if it ended. REQUIRES: mu_ held.
  void ReapLocked(JobState& s);
  void SampleLocked(JobState& s, double now);
  std::string EngineName(const std::string& job) const;
  // InvalidArgument when NODE.JOB (EngineName) is longer than a job name may be.
  absl::Status CheckEngineName(const std::string& job) const;
  // Checkpoints, one after another, every running job whose policy `wants` it; `reason` names why.
  void CheckpointEach(const std::string& reason, bool (*wants)(const api::CheckpointPolicy&));
  std::string CgroupOf(const std::string& job) const;
  std::string CheckpointDir(const std::string& job) const;
  std::string JobDir(const std::string& job) const;
  // Job files (job_files.cc). Creates the job's directory (kJobDirMode) or sets its mode, and sets
  // its logs' (kJobLogMode) where they exist. Called before a job's logs are written or restored.
  absl::Status PrepareJobDir(const std::string& name);
  // At start: STATE/jobs and every job directory and log in it made private, whatever an earlier
  // version left; what cannot be set (a symlink, ...) is logged and left alone.
  void TightenJobFiles();
  // Checkpoints `names` on up to `checkpoint_workers` threads (the caller's included); a job
  // busy with another checkpoint or restore is retried until `retry_until` (monotonic seconds).
  void CheckpointJobs(const std::vector<std::string>& names, const std::string& reason, bool pin,
                      double retry_until = 0);
  void FillNodeSignals(api::NodeInfoResponse* r);

  // Storage (daemon_storage.cc).
  // Puts the engine's committed checkpoint `c` (c.location(), local) into the store and points
  // c.location() at it; writes the job's spec beside the image first (kJobSpecFile).
  absl::Status StoreCheckpoint(api::Checkpoint& c, const api::JobSpec& spec);
  // A local directory holding checkpoint `c`, verified against c.checksum(): the engine's own for
  // the local store; else the kept local copy, or one fetched from the store (*fetched set).
  absl::StatusOr<std::string> LocalCheckpoint(const api::Checkpoint& c, bool* fetched);
  // Removes a checkpoint's files: its local copy and its objects in the store (not an imported
  // checkpoint's: those belong to the node that took it).
  absl::Status DropCheckpointFiles(const api::Checkpoint& c, bool from_store = true);
  // Fetches the checkpoint at `from` into this node, creating the job `name` from the stored spec
  // when this node lacks it, and records it (reason "imported"); returns its id.
  // `depth`: how many children down a chain this call imports the parent of.
  absl::StatusOr<std::string> ImportCheckpoint(const std::string& name, const std::string& from, int depth = 0);
  // A checkpoint taken on another node (its stored kJobDirFile names that node's job
  // directory) made this node's before it is restored: its descriptors of the job's logs name
  // this node's (created, empty, where missing), its cgroup and engine name this node's
  // (RewriteForNode); the image is checked against its seal first and sealed again after.
  // Nothing to do for a checkpoint of this node's job directory, or one stored without it.
  absl::Status AdoptForThisNode(const std::string& name, const std::string& dir);
  // Holds a job still in its freezer cgroup (true once FROZEN), or lets it go.
  bool FreezeJob(const std::string& name);

  // A job's service addresses (addresses.cc, JobSpec.addresses): on the node where it runs.
  // Puts on this node each address of `spec` it lacks (an event names each one added); an error
  // names the address that could not be.
  absl::Status BringAddresses(const std::string& name, const api::JobSpec& spec);
  // Takes every address of `spec` off this node (`why`: for the event); best effort, logged.
  void DropAddresses(const std::string& name, const api::JobSpec& spec, const std::string& why);
  // A migration's destination records what it is about to put on this node for the job before
  // it does (JobDir/arrival: the restore's network lock, the job's addresses), so that a restart
  // that finds the migration uncommitted takes them off again (RecoverArrivals, migrate.cc).
  std::string ArrivalPath(const std::string& name) const;
  void RecoverArrivals();  // REQUIRES: mu_ held, jobs_ loaded

  // The job `name`, once no checkpoint, restore or migration of it is in progress (waits up to
  // 60 s, `l` on mu_ released meanwhile and held on return).
  absl::StatusOr<JobState*> IdleJobLocked(std::unique_lock<std::mutex>& l, const std::string& name);

  // Incremental checkpoints (incremental.cc).
  // The id of the checkpoint an incremental checkpoint of `name` builds on: its newest complete
  // one, when that one's files are on this node's disk and its chain is shorter than the
  // policy's full_every. "" for a full one, with the reason in *why.
  std::string IncrementalParent(const std::string& name, const api::JobSpec& spec, std::string* why);
  // LocalCheckpoint of `c` and of every checkpoint it builds on (a chain is restored from one
  // folder); the directories fetched from the store are added to *fetched.
  absl::StatusOr<std::string> LocalChain(const api::Checkpoint& c, std::vector<std::string>* fetched);
  // The checkpoint of `name` that builds on `id`, if any (it must not be deleted alone).
  std::optional<std::string> ChildOf(const std::string& name, const std::string& id);

  DaemonOptions opts_;
  std::unique_ptr<Catalog> catalog_;
  double started_ = 0;

  std::mutex mu_;
  // Migrations being received (their checkpoint ids), until committed or abandoned.
  std::set<std::string> receiving_;  // GUARDED_BY(mu_)
  double next_gc_ = 0;               // monotonic seconds; the tick thread's
  std::thread gc_thread_;            // the timer's collection (the tick thread's; joined at the end)
  // The jobs' owners (SetOwner); destroyed first, as its calls end jobs.
  std::unique_ptr<OwnerWatch> owners_;
  std::atomic<bool> gc_running_{false};
  // Migrations away from here under way, by job (MigrationProgress; migrate.cc).
  struct Progress {
    std::string phase;
    int64_t bytes = 0, expected_bytes = 0;
    double started = 0;  // monotonic seconds
    bool frozen = false;
  };
  std::mutex progress_mu_;
  std::map<std::string, Progress> progress_;  // GUARDED_BY(progress_mu_)
  void SetProgress(const std::string& name, const std::string& phase, bool frozen);
  void SetProgressBytes(const std::string& name, int64_t bytes);
  // The token a migration in doubt was started with, when it was not --peer-token-file's.
  std::map<std::string, std::string> doubt_tokens_;  // GUARDED_BY(mu_)
  // Where a migration's credential is kept while it is in doubt (JobDir/migration.token, 0600).
  std::string MigrationTokenPath(const std::string& name) const;
  void ForgetMigrationTokenLocked(const std::string& name);
  std::map<std::string, JobState> jobs_;  // GUARDED_BY(mu_)
  std::mutex ev_mu_;
  std::condition_variable events_cv_;     // notified when an event is added
  uint64_t last_seq_ = 0;                 // GUARDED_BY(ev_mu_)

  std::mutex node_mu_;
  std::map<std::string, std::string> components_;  // GUARDED_BY(node_mu_)
  std::optional<api::SpotNotice> spot_notice_;       // GUARDED_BY(node_mu_)
  std::vector<GpuDevice> gpus_;                      // GUARDED_BY(node_mu_)
  std::map<int, double> gpu_checkpointed_at_;        // GPU -> monotonic s of its last event checkpoint; GUARDED_BY(node_mu_)
  // A GPU event's checkpoint of the jobs on that GPU runs on a thread of its own, not the watcher's
  // (a GPU that hangs the driver's call must not hold the next event): one per GPU at a time,
  // joined when the next starts and at the end. GUARDED_BY(node_mu_)
  struct GpuCheckpointRun {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::map<int, GpuCheckpointRun> gpu_checkpoints_;
  std::vector<std::string> gpu_events_;              // GUARDED_BY(node_mu_), newest 20
  std::optional<uint64_t> controller_term_;          // GUARDED_BY(node_mu_); loaded on first use

  // Figures for Metrics().
  std::atomic<uint64_t> checkpoints_ok_{0}, checkpoints_failed_{0}, checkpoint_bytes_{0}, restores_{0};
  std::mutex lat_mu_;
  Histogram checkpoint_seconds_, frozen_seconds_;  // GUARDED_BY(lat_mu_)
};

}  // namespace cairn::daemon
