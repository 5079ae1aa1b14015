#include "daemon/daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/cpu_levels.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/status.h"
#include "common/stop_points.h"
#include "common/unique_fd.h"
#include "common/validate.h"
#include "daemon/cgroup.h"
#include "daemon/job_spec_check.h"
#include "daemon/log_tail.h"
#include "daemon/migrate.h"
#include "daemon/node_cpu.h"
#include "common/proc_identity.h"
#include "engine/dump/dump.h"
#include "engine/dump/guardian.h"
#include "engine/image/format.h"
#include "engine/job/job.h"
#include "engine/net/netlock.h"
#include "engine/net/silence.h"
#include "engine/restore/restore.h"

namespace cairn::daemon {
namespace {

namespace fs = std::filesystem;

double MonoNow() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double UnixNow() { return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()); }


int64_t DirBytes(const std::string& dir) {
  int64_t total = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_regular_file(ec)) total += static_cast<int64_t>(it->file_size(ec));
  }
  return total;
}

void RemoveTree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  fs::remove_all(path + ".partial", ec);
}

}  // namespace

// `cairn run` does the starting, in its own single-threaded process: the job's init is forked
// from it, not from this multi-threaded daemon (a fork here could copy a lock another thread
// holds). When `cairn run` exits, the init is re-parented to the daemon, a child subreaper, so
// the daemon still learns the job's exit status.
absl::StatusOr<job::JobRecord> Daemon::StartWithCairnRun(const std::string& name, const api::JobSpec& spec,
                                                          const std::vector<int>& gpus) {
  std::vector<std::string> args = {opts_.cairn_bin, "run", "--name", EngineName(name), "--dir", JobDir(name)};
  if (!spec.user().empty()) args.insert(args.end(), {"--user", spec.user()});
  if (!spec.cpu_baseline().empty()) args.insert(args.end(), {"--cpu-baseline", spec.cpu_baseline()});
  if (!spec.workdir().empty()) args.insert(args.end(), {"--workdir", spec.workdir()});
  // The environment (a SLURM task's, with its secrets) in a memfd `cairn run` reads as its fd 3:
  // on no file system, gone with the last descriptor.
  UniqueFd env_fd;
  std::vector<std::string> job_env(spec.env().begin(), spec.env().end());
  if (!gpus.empty()) {
    // Its GPUs, in the environment it would have had (the spec's, else the daemon's).
    if (job_env.empty()) {
      for (char** e = environ; *e != nullptr; ++e) job_env.emplace_back(*e);
    }
    // NVML's indices, which follow the PCI bus order; CUDA's own order is fastest first.
    std::erase_if(job_env, [](const std::string& e) {
      return absl::StartsWith(e, "CUDA_VISIBLE_DEVICES=") || absl::StartsWith(e, "CUDA_DEVICE_ORDER=");
    });
    job_env.push_back("CUDA_DEVICE_ORDER=PCI_BUS_ID");
    job_env.push_back(absl::StrCat("CUDA_VISIBLE_DEVICES=", absl::StrJoin(gpus, ",")));
  }
  if (!job_env.empty()) {
    std::string env;
    for (const std::string& e : job_env) env.append(e).push_back('\0');
    ASSIGN_OR_RETURN(int fd, MemoryFileWith("cairn-job-env", env));
    env_fd = UniqueFd(fd);
    args.insert(args.end(), {"--env-file", "/dev/fd/3"});
  }
  args.push_back("--");
  args.insert(args.end(), spec.command().begin(), spec.command().end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::string out_path = opts_.state_dir + "/jobs/." + name + ".start";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  if (env_fd.valid()) posix_spawn_file_actions_adddup2(&fa, env_fd.get(), 3);  // dup2 clears close-on-exec
  pid_t pid = 0;
  int rc = ::posix_spawn(&pid, opts_.cairn_bin.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return ErrnoStatus("run " + opts_.cairn_bin + " (--cairn-bin)", rc);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::string out = ReadFile(out_path).value_or("");
  ::unlink(out_path.c_str());
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("job ", name, ": cairn run failed: ",
                                                      absl::StripAsciiWhitespace(out)));
  }
  return job::Load(EngineName(name));
}

Daemon::Daemon(DaemonOptions opts, std::unique_ptr<Catalog> catalog)
    : opts_(std::move(opts)), catalog_(std::move(catalog)), started_(UnixNow()) {
  if (!opts_.store) opts_.store = storage::LocalStore();
  owners_ = std::make_unique<OwnerWatch>([this](const std::string& job, const std::function<bool()>& stopping) {
    std::string state;
    bool owned = false;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (auto it = jobs_.find(job); it != jobs_.end()) {
        state = it->second.job.state();
        owned = it->second.job.has_owner();
      }
    }
    if (state != "running" && state != "restoring" && state != "starting") return;  // it ended before its owner
    if (!owned) return;  // restored since for no owner, or another (a stale call of the one it had)
    EndBoundJob(job, stopping, "its owner (a SLURM task's agent)");
  });
}

Daemon::~Daemon() {
  owners_.reset();
  if (gc_thread_.joinable()) gc_thread_.join();
  std::map<int, GpuCheckpointRun> gpu_checkpoints;
  {
    std::lock_guard<std::mutex> l(node_mu_);
    gpu_checkpoints.swap(gpu_checkpoints_);
  }
  for (auto& [device, run] : gpu_checkpoints) {
    if (run.thread.joinable()) run.thread.join();
  }
}

void Daemon::SetOwner(const std::string& name, UniqueFd pidfd, const api::Owner* owner) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (auto it = jobs_.find(name); it != jobs_.end()) {
      JobState& s = it->second;
      const bool owned = owner != nullptr && pidfd.valid();
      const bool same = owned ? s.job.has_owner() && s.job.owner().pid() == owner->pid() &&
                                    s.job.owner().start_time() == owner->start_time()
                              : !s.job.has_owner();
      if (!same) {  // (a run or restore without an owner, the common case, writes nothing more)
        if (owned) {
          *s.job.mutable_owner() = *owner;
        } else {
          s.job.clear_owner();
        }
        if (absl::Status st = Persist(s); !st.ok()) CAIRN_LOG_WARN("job={} owner not saved: {}", name, st.ToString());
      }
    }
  }
  if (pidfd.valid()) {
    owners_->Watch(name, std::move(pidfd));
  } else {
    owners_->Forget(name);
  }
}

// Jobs of several daemons on one machine must not share a cgroup or a registry entry: the
// engine knows each job as NODE.JOB.
std::string Daemon::EngineName(const std::string& job) const { return opts_.node + "." + job; }
std::string Daemon::CgroupOf(const std::string& job) const { return "cairn/" + EngineName(job); }
absl::Status Daemon::CheckEngineName(const std::string& job) const {
  if (EngineName(job).size() <= kMaxJobName) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "job name '%s' is too long for node %s: the engine knows the job as NODE.JOB, at most %d characters; "
      "give a name of at most %d",
      job, opts_.node, kMaxJobName, static_cast<int>(kMaxJobName) - static_cast<int>(opts_.node.size()) - 1));
}

std::string Daemon::CheckpointDir(const std::string& job) const { return opts_.state_dir + "/checkpoints/" + job; }
std::string Daemon::JobDir(const std::string& job) const { return opts_.state_dir + "/jobs/" + job; }

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Open(const DaemonOptions& opts) {
  for (const std::string& d : {opts.state_dir, opts.state_dir + "/jobs", opts.state_dir + "/checkpoints"}) {
    if (::mkdir(d.c_str(), 0700) != 0 && errno != EEXIST) {
      return Annotate(ErrnoStatus("mkdir " + d), "--state-dir");
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Catalog> catalog, Catalog::Open(opts.state_dir + "/catalog.db"));
  std::unique_ptr<Daemon> d(new Daemon(opts, std::move(catalog)));
  d->TightenJobFiles();
  RETURN_IF_ERROR(d->Recover());
  return d;
}

absl::Status Daemon::Recover() {
  // A dump this daemon ran when it was killed, with its guardian (a SIGKILL to the whole
  // service): what the dump changed in the job is put back first (dump/guardian.h, point 8),
  // before its freezer cgroup is thawed below.
  absl::StatusOr<std::vector<std::string>> repaired = dump::RepairOrphanedDumps(dump::JournalDir());
  if (!repaired.ok()) {
    CAIRN_LOG_WARN("event=orphan_repair_failed error=\"{}\"", repaired.status().ToString());
  } else {
    for (const std::string& line : *repaired) CAIRN_LOG_WARN("event=orphan_repaired what=\"{}\"", line);
  }
  ASSIGN_OR_RETURN(last_seq_, catalog_->LastSeq());
  ASSIGN_OR_RETURN(std::vector<api::Checkpoint> all, catalog_->ListCheckpoints(""));
  for (api::Checkpoint& c : all) {
    if (c.state() != "writing") continue;
    (void)DropCheckpointFiles(c);
    c.set_state("failed");
    c.set_parent("");
    c.set_error("interrupted: the daemon stopped while writing it; its files were removed on restart");
    RETURN_IF_ERROR(catalog_->PutCheckpoint(c));
    Event(c.job(), "checkpoint-cleaned", absl::StrCat("checkpoint ", c.id(), " was left half-written by a crash: removed"));
  }
  ASSIGN_OR_RETURN(std::vector<api::Job> jobs, catalog_->ListJobs());
  std::lock_guard<std::mutex> l(mu_);
  double now = MonoNow();
  for (api::Job& j : jobs) {
    JobState s;
    s.tracker = std::make_unique<HealthTracker>(j.spec().health());
    bool was_running = j.state() == "running" || j.state() == "checkpointing" || j.state() == "migrating";
    if (j.state() == "restoring") {
      RollBackRestore(j);
      RETURN_IF_ERROR(catalog_->PutJob(j));
    } else if (was_running && !j.migration().empty()) {
      // It stopped in the middle of migrating the job away (migrate.h). Held frozen (or gone):
      // the destination may have taken it over, so it is asked (ResolveMigrations). Alive and
      // not frozen: the commit was never asked for, so the migration did not happen.
      bool alive = j.host_pid() > 0 && SameProcess(j.host_pid(), j.start_time());
      std::string freezer = FreezerState(CgroupOf(j.name()));
      if (alive && (freezer == "THAWED" || freezer.empty())) {
        Event(j.name(), "migrate-failed",
              absl::StrCat("to node ", j.migrating_to(), ": the daemon stopped before the migration could commit; the "
                           "job runs on here as pid ", j.host_pid(), " (adopted after the restart)"));
        ClearMigration(j);
        j.set_state("running");
      } else {
        j.set_state("migrating");
        Event(j.name(), "migrate-in-doubt",
              absl::StrCat("to node ", j.migrating_to(), ": the daemon restarted in the middle of it; the job ",
                           alive ? "stands frozen here" : "is gone here", " until node ", j.migrating_to(),
                           " says whether it took it over (asked every 2 s)"));
      }
      RETURN_IF_ERROR(catalog_->PutJob(j));
    } else if (was_running) {
      // A dump the crash interrupted may have left the job's freezer frozen.
      ThawFreezer(CgroupOf(j.name()));
      if (j.host_pid() > 0 && SameProcess(j.host_pid(), j.start_time())) {
        j.set_state("running");
        Event(j.name(), "adopted", absl::StrFormat("still running as pid %d; adopted after a daemon restart", j.host_pid()));
      } else {
        KillCgroup(CgroupOf(j.name()));
        DropAddresses(j.name(), j.spec(), "the job was gone when the daemon restarted");
        j.set_state("exited");
        j.set_ended(UnixNow());
        *j.mutable_health() = HealthTracker::Exited(false, 0, 0);
        Event(j.name(), "exited", "gone when the daemon restarted: " + j.health().detail());
      }
      RETURN_IF_ERROR(catalog_->PutJob(j));
    } else {
      // Nothing of a job that does not run may run in its cgroup (e.g. a migration to here
      // whose commit the crash cut off: restored, never recorded as running; its connections
      // are its source's).
      KillCgroupSilently(CgroupOf(j.name()));
    }
    if (j.spec().checkpoint().interval_s() > 0) s.next_checkpoint = now + j.spec().checkpoint().interval_s();
    s.job = std::move(j);
    ClaimNetwork(s);  // what it still needs of its locks, before `cairn check --fix` may look
    std::string name = s.job.name();
    jobs_.emplace(name, std::move(s));
  }
  CleanUnrecorded(all);
  DropFetchedCopies(all);
  RecoverArrivals();
  for (auto& [name, s] : jobs_) {
    if (s.job.state() != "running") continue;
    // A job runs with its addresses (one whose migration away failed while the daemon was
    // down may have lost them), and a migration's restore that committed before the crash
    // no longer holds its connections (a group's rank waits for its coordinator).
    if (absl::Status st = BringAddresses(name, s.job.spec()); !st.ok()) {
      CAIRN_LOG_WARN("job={} runs without its addresses: {}", name, st.ToString());
    }
    if (s.job.has_owner()) WatchOwnerAgain(name, s.job.owner());  // one gone while the daemon was down ends it
    if (!s.job.network_hold().empty() && s.job.spec().group().empty()) {
      absl::Status lifted = net::RemoveNetworkLock(s.job.network_hold());
      if (!lifted.ok()) CAIRN_LOG_WARN("job={} network lock not lifted: {}", name, lifted.ToString());
      Event(name, "network-released", absl::StrCat("network lock ", s.job.network_hold(), " lifted after the restart"));
      s.job.clear_network_hold();
      if (absl::Status st = Persist(s); !st.ok()) CAIRN_LOG_WARN("job={} not saved: {}", name, st.ToString());
    }
  }
  return absl::OkStatus();
}

// A restore the daemon did not live to record (its record still says `restoring`): it never
// committed, so nothing it created may run on. Whatever is in the job's cgroup (tasks still
// being built died with their tracer; a restored process that already ran did not) is killed,
// and the job is left not running, with an event saying so: it is restored again by asking
// again. Its image is untouched (a fetched copy is removed by DropFetchedCopies).
void Daemon::RollBackRestore(api::Job& j) {
  std::string cgroup = CgroupOf(j.name());
  const int killed = KillCgroupSilently(cgroup);  // its connections live on in the checkpoint
  ThawFreezer(cgroup);
  std::string from(absl::StripPrefix(j.health().detail(), kRestoringFrom));
  j.set_state("exited");
  j.set_ended(UnixNow());
  *j.mutable_health() = HealthTracker::Exited(false, 0, 0);
  std::string what = absl::StrCat("the restore from checkpoint ", from,
                                  " was cut off by a daemon restart before the job was recorded as running; ",
                                  killed == 0 ? "nothing of it ran" : "what it had restored was killed",
                                  "; the checkpoint is intact: restore again (cairn job restore ", j.name(), ")");
  j.mutable_health()->set_detail(what);
  Event(j.name(), "restore-interrupted", what);
}

// With a remote store and no --keep-local-copy, a checkpoint's local directory exists only while
// it is being stored or restored from: one found at the start was left by a crash (a restore's
// fetched copy, an import), one found after a restore was imported for it. Removed, so that the
// store stays the only copy.
void Daemon::DropFetchedCopies(const std::vector<api::Checkpoint>& checkpoints) {
  if (!opts_.store->Remote() || opts_.keep_local) return;
  for (const api::Checkpoint& c : checkpoints) {
    std::string local = CheckpointDir(c.job()) + "/" + c.id();
    if (c.state() != "complete" || c.location() == local) continue;
    std::error_code ec;
    if (!fs::exists(local, ec)) continue;
    RemoveTree(local);
    CAIRN_LOG_INFO("event=stray_copy dir={}: a local copy of stored checkpoint {} (no --keep-local-copy): removed", local,
                   c.id());
  }
}

// What a crash left that no record owns: a cgroup of this node's (NODE.JOB) for a job the
// catalog does not know (a migration to here cut off before its commit, the job's first
// time here), and received images: DIR.partial, or a migration's image (ID-from-NODE) with
// no checkpoint row. REQUIRES: mu_ held, jobs_ loaded.
void Daemon::CleanUnrecorded(const std::vector<api::Checkpoint>& checkpoints) {
  std::error_code ec;
  const std::string prefix = opts_.node + ".";
  for (auto it = fs::directory_iterator("/sys/fs/cgroup/freezer/cairn", ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    std::string engine_name = it->path().filename().string();
    if (!absl::StartsWith(engine_name, prefix) || jobs_.count(engine_name.substr(prefix.size())) != 0) continue;
    std::string cgroup = "cairn/" + engine_name;
    KillCgroupSilently(cgroup);
    ThawFreezer(cgroup);
    CAIRN_LOG_INFO("event=stray_cgroup cgroup={}: no job of this node owns it; its processes were killed", cgroup);
  }
  std::set<std::string> ids;
  for (const api::Checkpoint& c : checkpoints) ids.insert(c.id());
  for (auto job = fs::directory_iterator(opts_.state_dir + "/checkpoints", ec); !ec && job != fs::directory_iterator();
       job.increment(ec)) {
    std::error_code ec2;
    for (auto it = fs::directory_iterator(job->path(), ec2); !ec2 && it != fs::directory_iterator(); it.increment(ec2)) {
      std::string f = it->path().filename().string();
      bool partial = absl::EndsWith(f, ".partial");
      bool received = f.find("-from-") != std::string::npos && ids.count(f) == 0;
      if (!it->is_directory(ec2) || (!partial && !received)) continue;
      std::error_code rm;
      fs::remove_all(it->path(), rm);
      CAIRN_LOG_INFO("event=stray_image dir={}: left by a crash, no checkpoint record: removed", it->path().string());
    }
  }
}

void Daemon::Event(const std::string& job, const std::string& kind, const std::string& detail) {
  auto e = catalog_->AddEvent(job, kind, detail);
  if (!e.ok()) {
    CAIRN_LOG_WARN("event not recorded job={} kind={} error=\"{}\"", job, kind, std::string(e.status().message()));
    return;
  }
  spdlog::info("event seq={} node={} job={} kind={} detail=\"{}\"", e->seq(), opts_.node, job, kind, absl::CEscape(detail));
  {
    std::lock_guard<std::mutex> l(ev_mu_);
    last_seq_ = std::max<uint64_t>(last_seq_, e->seq());
  }
  events_cv_.notify_all();
}

absl::Status Daemon::Persist(const api::Job& job) { return catalog_->PutJob(job); }

absl::Status Daemon::Persist(JobState& s) {
  ClaimNetwork(s);
  return catalog_->PutJob(s.job);
}

absl::StatusOr<api::Job> Daemon::RunJob(const api::JobSpec& spec_in) {
  api::JobSpec spec = spec_in;
  if (spec.command().empty()) {
    return absl::InvalidArgumentError("job run: no command given (cairn job run [--name NAME] -- CMD ARGS...)");
  }
  static std::atomic<int> counter{0};
  if (spec.name().empty()) spec.set_name(absl::StrCat("job-", ::time(nullptr), "-", counter++));
  RETURN_IF_ERROR(Annotate(CheckJobSpec(spec), "job run"));
  RETURN_IF_ERROR(CheckEngineName(spec.name()));
  if (spec.checkpoint().incremental() && spec.checkpoint().pre_copy()) {
    return absl::InvalidArgumentError("job run: periodic checkpoints are either incremental or pre-copy: give one of "
                                      "--incremental, --pre-copy");
  }
  const std::string name = spec.name();
  const int node_gpus = spec.gpus() > 0 ? NodeGpuCount() : 0;
  std::vector<int> gpus;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (jobs_.count(name)) {
      return absl::AlreadyExistsError(absl::StrCat("job '", name, "' already exists on node ", opts_.node,
                                                   " (cairn job delete ", name, " first, or pick another --name)"));
    }
    if (spec.gpus() > 0) {
      absl::StatusOr<std::vector<int>> picked = PickGpusLocked(name, spec.gpus(), node_gpus);
      if (!picked.ok()) return Annotate(picked.status(), "job run");
      gpus = std::move(*picked);
    }
    JobState placeholder;
    placeholder.busy = true;
    placeholder.job.set_name(name);
    placeholder.job.set_state("starting");
    placeholder.job.mutable_gpu_devices()->Add(gpus.begin(), gpus.end());  // held from now on
    jobs_.emplace(name, std::move(placeholder));
  }
  auto give_up = [&](absl::Status st) {
    std::lock_guard<std::mutex> l(mu_);
    jobs_.erase(name);
    return st;
  };
  if (absl::Status st = SetLimits(CgroupOf(name), spec.limits().cpus(), spec.limits().memory_bytes()); !st.ok()) {
    return give_up(Annotate(st, "job " + name + ": set limits"));
  }
  if (absl::Status st = PrepareJobDir(name); !st.ok()) return give_up(Annotate(st, "job " + name));
  if (absl::Status st = BringAddresses(name, spec); !st.ok()) return give_up(st);
  auto rec = StartWithCairnRun(name, spec, gpus);
  if (!rec.ok()) return give_up(rec.status());
  api::Job j;
  j.set_name(name);
  *j.mutable_spec() = spec;
  j.mutable_gpu_devices()->Add(gpus.begin(), gpus.end());
  j.set_state("running");
  j.set_host_pid(rec->host_pid);
  j.set_start_time(ProcessStartTime(rec->host_pid).value_or(0));
  j.set_created(UnixNow());
  j.set_dir(rec->dir);
  j.set_node(opts_.node);
  j.mutable_health()->set_state("running");
  if (absl::Status st = Persist(j); !st.ok()) {
    ::kill(rec->host_pid, SIGKILL);
    ::waitpid(rec->host_pid, nullptr, 0);
    return give_up(st);
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    JobState& s = jobs_[name];
    s.job = j;
    s.tracker = std::make_unique<HealthTracker>(spec.health());
    s.child = true;
    s.busy = false;
    if (spec.checkpoint().interval_s() > 0) s.next_checkpoint = MonoNow() + spec.checkpoint().interval_s();
  }
  Event(name, "started", absl::StrFormat("pid %d: %s", j.host_pid(), absl::StrJoin(spec.command(), " ")));
  return j;
}

std::vector<api::Job> Daemon::ListJobs() {
  std::vector<api::Job> out;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [name, s] : jobs_) {
      if (s.job.state() != "starting") out.push_back(s.job);
    }
  }
  for (api::Job& j : out) {
    auto cps = catalog_->ListCheckpoints(j.name());
    uint32_t n = 0;
    if (cps.ok()) {
      for (const auto& c : *cps) n += c.state() == "complete";
    }
    j.set_checkpoints(n);
  }
  return out;
}

absl::StatusOr<api::GetJobResponse> Daemon::GetJob(const std::string& name) {
  api::GetJobResponse resp;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = jobs_.find(name);
    if (it == jobs_.end() || it->second.job.state() == "starting") {
      return absl::NotFoundError(absl::StrCat("no job '", name, "' on node ", opts_.node, " (cairn job list)"));
    }
    *resp.mutable_job() = it->second.job;
  }
  ASSIGN_OR_RETURN(std::vector<api::Checkpoint> cps, catalog_->ListCheckpoints(name));
  uint32_t n = 0;
  for (auto& c : cps) {
    n += c.state() == "complete";
    *resp.add_checkpoints() = std::move(c);
  }
  resp.mutable_job()->set_checkpoints(n);
  ASSIGN_OR_RETURN(std::vector<api::Event> events, catalog_->Events(name, 0, 100000));
  size_t from = events.size() > 50 ? events.size() - 50 : 0;
  for (size_t i = from; i < events.size(); ++i) *resp.add_events() = std::move(events[i]);
  return resp;
}

absl::StatusOr<std::string> Daemon::Logs(const std::string& name, bool stderr_log, int64_t tail_lines,
                                         int64_t tail_bytes) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!jobs_.count(name)) return absl::NotFoundError(absl::StrCat("no job '", name, "' on node ", opts_.node));
  }
  std::string path = JobDir(name) + (stderr_log ? "/stderr.log" : "/stdout.log");
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus("open " + path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus("stat " + path);
  constexpr off_t kMax = 4 << 20;
  off_t from = tail_lines > 0 || tail_bytes > 0 ? LogTailOffset(fd.get(), st.st_size, tail_lines, tail_bytes, kMax)
                                                : std::max<off_t>(0, st.st_size - kMax);
  std::string text(static_cast<size_t>(st.st_size - from), '\0');
  ssize_t n = text.empty() ? 0 : ::pread(fd.get(), text.data(), text.size(), from);
  if (n < 0) return ErrnoStatus("read " + path);
  text.resize(static_cast<size_t>(n));
  return text;
}

void Daemon::ReapLocked(JobState& s) {
  if (s.job.state() != "running" || s.busy) return;
  pid_t pid = s.job.host_pid();
  bool ended = false, known = false;
  int code = 0, sig = 0;
  if (s.child) {
    siginfo_t info{};
    int r = ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG);
    if (r == 0 && info.si_pid == pid) {
      ended = known = true;
      if (info.si_code == CLD_EXITED) {
        code = info.si_status;
      } else {
        sig = info.si_status;
      }
    } else if (r != 0 && errno == ECHILD) {
      s.child = false;  // reaped elsewhere (the engine reaps a job it killed after a dump)
    }
  }
  if (!ended && !s.child && !SameProcess(pid, s.job.start_time())) {
    ended = true;
    if (s.stop_after_checkpoint) {
      known = true;
      sig = SIGKILL;
    }
  }
  if (!ended) return;
  bool stopped = s.stop_after_checkpoint || s.job.state() == "killing";
  s.job.set_state(stopped || s.killed_by_user ? "killed" : "exited");
  if (!s.job.network_hold().empty()) {
    // Restored with its network held (a group's rank) and gone before it was let go: no lock
    // outlives the job's connections.
    RemoveJobNetworkLock(s.job.name(), s.job.network_hold());
    s.job.clear_network_hold();
  }
  DropAddresses(s.job.name(), s.job.spec(), absl::StrCat("the job ", s.job.state(), " here"));
  s.job.set_ended(UnixNow());
  *s.job.mutable_health() = HealthTracker::Exited(known, code, sig);
  if (s.stop_after_checkpoint) s.job.mutable_health()->set_detail("stopped after its checkpoint");
  s.stop_after_checkpoint = false;
  s.killed_by_user = false;
  if (absl::Status st = Persist(s); !st.ok()) CAIRN_LOG_WARN("job={} not saved: {}", s.job.name(), st.ToString());
  Event(s.job.name(), s.job.state(), s.job.health().detail());
}

void Daemon::SampleLocked(JobState& s, double now) {
  if (s.job.state() != "running" || s.busy || !s.tracker) return;
  std::string cgroup = CgroupOf(s.job.name());
  CgroupUsage u = ReadUsage(cgroup);
  HealthSample hs;
  hs.now = now;
  hs.cpu_seconds = u.cpu_seconds;
  hs.memory_bytes = u.memory_bytes;
  hs.memory_limit = u.memory_limit;
  hs.psi_some_avg10 = NodeMemoryPsi();
  if (!s.job.spec().health().heartbeat_file().empty()) {
    struct stat st;
    if (::stat(s.job.spec().health().heartbeat_file().c_str(), &st) == 0) {
      hs.heartbeat_mtime = static_cast<double>(st.st_mtim.tv_sec) + static_cast<double>(st.st_mtim.tv_nsec) / 1e9;
    }
  }
  api::Health h = s.tracker->Update(hs);
  std::string before = s.job.health().state();
  *s.job.mutable_health() = h;
  if (h.state() != before) {
    if (absl::Status st = Persist(s); !st.ok()) CAIRN_LOG_WARN("job={} not saved: {}", s.job.name(), st.ToString());
    Event(s.job.name(), h.state() == "running" ? "healthy" : h.state(), h.detail());
  }
}

absl::StatusOr<Daemon::JobState*> Daemon::IdleJobLocked(std::unique_lock<std::mutex>& l, const std::string& name) {
  for (int waited = 0;; ++waited) {
    auto it = jobs_.find(name);
    if (it == jobs_.end()) {
      return absl::NotFoundError(absl::StrCat("no job '", name, "' on node ", opts_.node, " (cairn job list)"));
    }
    if (!it->second.busy) return &it->second;
    if (waited >= 1200) {
      return absl::FailedPreconditionError(absl::StrCat("a checkpoint, restore or migration of job ", name,
                                                        " is still in progress after 60 s; try again when it ends"));
    }
    l.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    l.lock();
  }
}

absl::StatusOr<api::Job> Daemon::KillJob(const std::string& name, int sig) {
  if (sig == 0) sig = SIGKILL;
  if (sig < 1 || sig > 64) return absl::InvalidArgumentError(absl::StrCat("job kill: no signal ", sig));
  {
    // Killing a job the engine holds frozen would leave its checkpoint half-done: IdleJobLocked.
    std::unique_lock<std::mutex> l(mu_);
    ASSIGN_OR_RETURN(JobState * found, IdleJobLocked(l, name));
    JobState& s = *found;
    if (s.job.state() == "migrating") {
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", name, " stands frozen in a migration to node ", s.job.migrating_to(),
          " that has not told how it ended (it is asked every 2 s); if that node is gone for good, `cairn job settle ",
          name, " --here` runs the job on here, and `--there` ends the copy here (it runs there)"));
    }
    if (s.job.state() != "running") {
      return absl::FailedPreconditionError(absl::StrCat("job ", name, " does not run (", s.job.state(), ")"));
    }
    if (!SameProcess(s.job.host_pid(), s.job.start_time())) {
      ReapLocked(s);
      return s.job;
    }
    if (sig == SIGKILL && !s.job.network_hold().empty()) {
      // Its connections are still held (a group restore called off): closed in repair mode, they
      // send no FIN the lock would drop and keep no address (net/silence.h).
      absl::Status silenced = net::SilenceTcpConnections(CgroupPids(CgroupOf(name)));
      if (!silenced.ok()) CAIRN_LOG_WARN("job={} connections not silenced before the kill: {}", name, silenced.ToString());
    }
    if (::kill(s.job.host_pid(), sig) != 0) return ErrnoStatus(absl::StrCat("kill job ", name, " pid ", s.job.host_pid()));
    s.killed_by_user = sig == SIGKILL;
  }
  Event(name, "signal", absl::StrCat("sent signal ", sig));
  for (int i = 0; i < 100; ++i) {
    {
      std::lock_guard<std::mutex> l(mu_);
      JobState& s = jobs_[name];
      ReapLocked(s);
      if (s.job.state() != "running" || sig != SIGKILL) return s.job;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::DeadlineExceededError(absl::StrCat("job ", name, " still runs 5 s after SIGKILL"));
}

absl::Status Daemon::DeleteJob(const std::string& name, bool keep_stored, bool purge_stored) {
  if (keep_stored && purge_stored) {
    return absl::InvalidArgumentError("delete job " + name + ": keep what is stored, or purge it, not both");
  }
  std::string kept_lock;  // the network lock its last checkpoint kept for a restore
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = jobs_.find(name);
    if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job '", name, "' on node ", opts_.node));
    ReapLocked(it->second);
    if (it->second.busy || it->second.job.state() == "running") {
      return absl::FailedPreconditionError(absl::StrCat("job ", name, " still runs: cairn job kill ", name, " first"));
    }
    kept_lock = it->second.job.network_lock_kept();
    jobs_.erase(it);
  }
  owners_->Forget(name);  // a job of the same name later is not its
  ASSIGN_OR_RETURN(std::vector<api::Checkpoint> cps, catalog_->ListCheckpoints(name));
  if (!keep_stored) {
    for (const auto& c : cps) (void)DropCheckpointFiles(c);
  }
  size_t purged = 0;
  if (purge_stored && opts_.store->Remote()) {
    // Other nodes' too: the starts of the job elsewhere stored theirs under the same name.
    absl::StatusOr<std::vector<std::string>> stored = opts_.store->List(name);
    if (!stored.ok()) {
      CAIRN_LOG_WARN("job={} cannot list its stored checkpoints to remove them: {}", name, stored.status().ToString());
    }
    for (const std::string& id : stored.value_or(std::vector<std::string>{})) {
      absl::Status s = opts_.store->Remove(opts_.store->LocationOf(name, id));
      if (s.ok()) {
        ++purged;
      } else {
        CAIRN_LOG_WARN("job={} checkpoint={} cannot be removed from the store: {}", name, id, s.ToString());
      }
    }
  }
  if (!keep_stored && !kept_lock.empty()) {
    // No checkpoint of it is left to bring its connections back: their peers see them reset.
    // (Kept stored, a restore may come here under a new record: the lock waits for it, unclaimed.)
    RemoveJobNetworkLock(name, kept_lock);
  }
  std::error_code ec;
  fs::remove_all(CheckpointDir(name), ec);
  fs::remove_all(JobDir(name), ec);
  fs::remove(opts_.state_dir + "/jobs/" + EngineName(name) + ".job", ec);
  RemoveCgroup(CgroupOf(name));
  RETURN_IF_ERROR(catalog_->DeleteJob(name));
  Event(name, "deleted",
        absl::StrFormat("with %d checkpoint record(s)%s", cps.size(),
                        keep_stored    ? " (what the store holds kept)"
                        : purge_stored ? absl::StrFormat(" and the %d checkpoint(s) of it the store held", purged)
                                       : ""));
  return absl::OkStatus();
}

absl::StatusOr<api::Checkpoint> Daemon::Checkpoint(const api::CheckpointJobRequest& req, const std::string& reason) {
  return CheckpointWith(req, reason, nullptr);
}

absl::StatusOr<api::Checkpoint> Daemon::CheckpointWith(const api::CheckpointJobRequest& req, const std::string& reason,
                                                       RankPart* rank) {
  if (req.incremental() && req.pre_copy()) {
    return absl::InvalidArgumentError("a checkpoint is either incremental or pre-copy: give one of --incremental, "
                                      "--pre-copy");
  }
  const std::string& name = req.name();
  pid_t pid = 0;
  uint32_t keep = 0;
  api::JobSpec spec;
  google::protobuf::RepeatedField<int32_t> gpus;  // the GPUs it holds as it is taken
  {
    std::unique_lock<std::mutex> l(mu_);
    ASSIGN_OR_RETURN(JobState * found, IdleJobLocked(l, name));
    JobState& s = *found;
    ReapLocked(s);
    if (s.job.state() != "running") {
      return absl::FailedPreconditionError(absl::StrCat("job ", name, " does not run (", s.job.state(),
                                                        "): only a running job can be checkpointed"));
    }
    s.busy = true;
    pid = s.job.host_pid();
    keep = s.job.spec().checkpoint().keep_last();
    spec = s.job.spec();
    gpus = s.job.gpu_devices();
  }
  // Set when the dump killed the job and kept its connections' network lock for their restore
  // (dump.h DumpResult::network_claim): recorded on the job, and claimed, as it stops being busy.
  std::string kept_lock;
  auto done = [&](bool stop) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = jobs_.find(name);
    if (it == jobs_.end()) return;
    JobState& s = it->second;
    s.busy = false;
    if (stop) s.stop_after_checkpoint = true;
    if (!kept_lock.empty()) {
      s.job.set_network_lock_kept(kept_lock);
      if (absl::Status st = Persist(s); !st.ok()) CAIRN_LOG_WARN("job={} not saved: {}", name, st.ToString());
    }
  };

  api::Checkpoint c;
  absl::Time now = absl::Now();
  c.set_id(absl::StrCat(name, "-", CheckpointStamp(now)));
  c.set_job(name);
  c.set_state("writing");
  c.set_location(CheckpointDir(name) + "/" + c.id());
  c.set_pinned(req.pin());
  c.set_reason(reason);
  c.set_created(absl::ToDoubleSeconds(now - absl::UnixEpoch()));
  if (rank) c.set_group_checkpoint(rank->group_checkpoint);
  *c.mutable_gpu_devices() = gpus;
  // Incremental: asked for on this checkpoint, or by the job's policy for its periodic ones. It
  // builds on the job's newest checkpoint when it can (IncrementalParent), else it is full. The
  // row names its parent while it is written, so that the parent is neither deleted nor expired
  // under it (cleared below if the dump turns out full).
  const bool incremental_job = spec.checkpoint().incremental();
  const bool incremental = !rank && (req.incremental() || (reason == "periodic" && incremental_job));
  std::string full_why;
  const std::string parent = incremental ? IncrementalParent(name, spec, &full_why) : "";
  c.set_parent(parent);
  std::error_code ec;
  fs::create_directories(CheckpointDir(name), ec);
  if (ec) {
    done(false);
    return absl::InternalError(absl::StrCat("create ", CheckpointDir(name), ": ", ec.message()));
  }
  if (absl::Status st = catalog_->PutCheckpoint(c); !st.ok()) {
    done(false);
    return st;
  }
  Event(name, "checkpoint-writing", absl::StrCat("checkpoint ", c.id(), " (", reason, ")"));

  dump::DumpOptions d;
  d.seal_key = opts_.image_key.get();
  d.pid = pid;
  d.dir = c.location();
  d.tree = true;
  // With a remote store, --kill stops the job only once the checkpoint is stored: until then
  // the job is held in its freezer, and a failed upload lets it go on.
  // (A group's rank is stored once its coordinator decided, as it runs again: below.)
  const bool hold = !rank && req.kill() && opts_.store->Remote();
  d.leave_running = !req.kill() || hold || rank;
  d.job_name = EngineName(name);
  d.freezer_cgroup = "/sys/fs/cgroup/freezer/" + CgroupOf(name);
  // A job held for a remote store (hold) runs on until it is stored, then is killed as any
  // process is: its connections close for real, so they are saved as reset (what its peers
  // will have seen), not whole.
  d.tcp_established = spec.checkpoint().tcp() == api::CheckpointPolicy::TCP_ESTABLISHED && !hold;
  d.tcp_close = spec.checkpoint().tcp() == api::CheckpointPolicy::TCP_CLOSE ||
                (spec.checkpoint().tcp() == api::CheckpointPolicy::TCP_ESTABLISHED && hold);
  // Pre-copy: memory is copied while the job runs and the job is frozen only for what it wrote
  // meanwhile. Asked for on this checkpoint, or by the job's policy for its periodic ones.
  d.pre_copy = !rank && !incremental && (req.pre_copy() || (reason == "periodic" && spec.checkpoint().pre_copy()));
  if (!parent.empty()) d.parent = CheckpointDir(name) + "/" + parent;
  // A job that keeps running after a checkpoint of an incremental job has its writes tracked
  // from here, so that the next checkpoint can build on this one.
  d.track = !rank && d.leave_running && !hold && !d.pre_copy && (incremental_job || req.incremental());
  if (opts_.pause_in_checkpoint_s > 0) {
    double pause = opts_.pause_in_checkpoint_s;
    d.progress = [pause, paused = false](uint64_t, uint64_t) mutable {
      if (paused) return;
      paused = true;
      std::this_thread::sleep_for(std::chrono::duration<double>(pause));
    };
  }
  // A group's rank (group.cc): frozen when every rank is ready, its state captured, and held
  // until its coordinator decides: commit — a live rank is thawed and commits after, one that is
  // to die was committed and recorded complete before the decision and is killed; abort —
  // thawed, its checkpoint removed. A remote store gets its copy once the rank runs again
  // (below): the upload is no downtime, and a failed one leaves the part complete here.
  absl::Status rank_failure;
  absl::StatusOr<std::vector<api::Checkpoint>> expired;
  // The size and metadata checksum of a checkpoint the engine committed (DIR.partial renamed).
  auto measure = [&] {
    (void)SyncDir(CheckpointDir(name));
    c.set_size_bytes(DirBytes(c.location()));
    if (auto meta = ReadFile(c.location() + "/" + image::kMetaFile); meta.ok()) {
      c.set_checksum(absl::StrFormat("xxh3:%016x", image::Checksum(meta->data(), meta->size())));
    }
  };
  if (rank) {
    d.hand_off_decides = true;
    // A live rank is thawed as soon as the group decides, and commits after (no downtime for
    // its writes); one that is to die commits first, and is recorded complete before it may.
    d.hand_off_commits_after = !req.kill();
    d.before_freeze = [&] { return rank->ready(); };
    d.hand_off = [&](const dump::DumpResult& r, const dump::HandOffControl&) {
      FaultPoint("group-frozen");  // frozen, its state captured, not recorded: no part yet
      if (req.kill()) {
        measure();
        c.set_state("complete");
        c.set_frozen_s(r.frozen_seconds);
        c.set_total_s(r.frozen_seconds);
        // Retention waits for the decision: a group checkpoint called off must not cost an older one.
        rank_failure = catalog_->PutCheckpoint(c);
        if (!rank_failure.ok()) return dump::HandOff::kThaw;
      }
      rank->decision = rank->decide(c, r.frozen_seconds);
      if (rank->decision.value_or(false) && req.kill()) return dump::HandOff::kKill;
      return dump::HandOff::kThaw;
    };
  }
  auto r = dump::Dump(d);
  // (Its claim, in r, holds until done() has taken the job's own.)
  if (r.ok() && r->network_claim.held()) kept_lock = r->network_lock;
  absl::Status stored = r.status();
  if (stored.ok()) stored = rank_failure;
  if (stored.ok() && rank && !rank->decision.has_value()) {
    if (req.kill()) {
      // The coordinator went away before it decided: it may have recorded the group checkpoint,
      // so this rank's part is kept; the rank runs on.
      c.set_frozen_s(r->frozen_seconds);
      (void)catalog_->PutCheckpoint(c);
      done(false);
      Event(name, "checkpoint", absl::StrCat("checkpoint ", c.id(), " of group checkpoint ", rank->group_checkpoint,
                                             " kept; the job runs on: its coordinator left before deciding"));
      return absl::UnavailableError(absl::StrCat("group checkpoint ", rank->group_checkpoint, " of job ", name,
                                                 ": the coordinator left before deciding; the job was thawed"));
    }
    // A live group checkpoint is recorded only once every part is committed: none is now.
    stored = absl::UnavailableError(absl::StrCat("group checkpoint ", rank->group_checkpoint,
                                                 ": the coordinator left before deciding; the job was thawed"));
  }
  if (stored.ok() && rank && !*rank->decision) {
    stored = absl::AbortedError(absl::StrCat("group checkpoint ", rank->group_checkpoint,
                                             " was called off by its coordinator (another rank failed); the job was "
                                             "thawed untouched"));
  }
  if (stored.ok() && rank && !req.kill()) measure();  // a live rank, committed after its thaw
  if (r.ok() && !rank) {
    // Committed by the engine (DIR.partial renamed to DIR); complete once it is in the store.
    measure();
    if (hold && !FreezeJob(name)) {
      stored = absl::FailedPreconditionError("could not freeze the job to hold it still while the checkpoint is stored");
    } else {
      stored = StoreCheckpoint(c, spec);
    }
    if (hold && !stored.ok()) ThawFreezer(CgroupOf(name));
  }
  if (!stored.ok() && rank && c.state() == "complete" && rank->decision.value_or(true)) {
    // A part committed and recorded complete before the decision (kill), which the group's
    // record names or may name (committed, or no decision heard): kept whatever failed after.
    done(false);
    Event(name, "checkpoint", absl::StrCat("checkpoint ", c.id(), " of group checkpoint ", rank->group_checkpoint,
                                           " kept after: ", stored.message()));
    return Annotate(stored, absl::StrCat("checkpoint of job ", name, " (its part ", c.id(), " is kept)"));
  }
  if (!stored.ok()) {
    (void)DropCheckpointFiles(c, /*from_store=*/false);  // a failed Put has cleaned the store itself
    if (!kept_lock.empty()) {
      // No checkpoint is left to bring the connections back: their peers see them reset.
      RemoveJobNetworkLock(name, kept_lock);
      kept_lock.clear();
    }
    c.set_state("failed");
    c.set_parent("");  // it builds on nothing: its parent may go
    c.set_error(std::string(stored.message()));
    (void)catalog_->PutCheckpoint(c);
    checkpoints_failed_++;
    done(false);
    Event(name, "checkpoint-failed", absl::StrCat("checkpoint ", c.id(), ": ", stored.message()));
    return Annotate(stored, absl::StrCat("checkpoint of job ", name));
  }
  if (hold) {
    ::kill(pid, SIGKILL);  // the job's init; the kernel then kills the rest of its PID namespace
    ThawFreezer(CgroupOf(name));
  }
  c.set_frozen_s(r->frozen_seconds);
  c.set_total_s(r->total_seconds);
  c.set_gpu_processes(static_cast<int32_t>(r->gpu_processes.size()));
  c.set_state("complete");
  if (!r->incremental) c.set_parent("");
  if (rank) {
    if (absl::Status up = StoreCheckpoint(c, spec); !up.ok()) {
      c.set_location(CheckpointDir(name) + "/" + c.id());
      Event(name, "checkpoint-not-stored",
            absl::StrCat("checkpoint ", c.id(), " of group checkpoint ", rank->group_checkpoint,
                         " is kept on this node only: the store refused it: ", up.message()));
    }
  }
  expired = catalog_->CompleteCheckpoint(c, keep);  // for a rank: its figures and where it is now
  std::string kind;
  if (incremental) {
    kind = r->incremental ? absl::StrCat(", incremental on ", parent)
                          : absl::StrCat(", full (", parent.empty() ? full_why : "no process's writes were tracked", ")");
    for (const std::string& note : r->notes) absl::StrAppend(&kind, "; ", note);
  }
  // Retention is applied in the same catalog transaction (above); the expired checkpoints' files go after.
  done(req.kill());
  if (!expired.ok()) {
    if (!rank) (void)DropCheckpointFiles(c);  // a rank's part is recorded complete already: kept
    return expired.status();
  }
  checkpoints_ok_++;
  checkpoint_bytes_ += static_cast<uint64_t>(c.size_bytes());
  {
    std::lock_guard<std::mutex> l(lat_mu_);
    checkpoint_seconds_.Observe(r->total_seconds);
    frozen_seconds_.Observe(r->frozen_seconds);
  }
  Event(name, "checkpoint", absl::StrFormat("checkpoint %s complete: %d bytes, frozen %.3f s, total %.3f s%s%s", c.id(),
                                            c.size_bytes(), c.frozen_s(), c.total_s(), kind,
                                            req.kill() ? ", job stopped" : ""));
  for (const api::Checkpoint& old : *expired) {
    absl::Status gone = DropCheckpointFiles(old);
    Event(name, "checkpoint-expired", absl::StrCat("checkpoint ", old.id(), " removed (keep last ", keep, ")",
                                                   gone.ok() ? "" : absl::StrCat("; its stored files were not: ", gone.message())));
  }
  if (req.kill()) {
    // The job was killed just now (by the engine, or above after the upload): wait until it is gone.
    for (int i = 0; i < 100; ++i) {
      {
        std::lock_guard<std::mutex> l(mu_);
        ReapLocked(jobs_[name]);
        if (jobs_[name].job.state() != "running") break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  return c;
}

void Daemon::RemoveJobNetworkLock(const std::string& job, const std::string& table) {
  absl::Status removed = net::RemoveNetworkLock(table);
  if (!removed.ok()) CAIRN_LOG_WARN("job={} network lock {} not removed: {}", job, table, removed.ToString());
}

void Daemon::WatchOwnerAgain(const std::string& name, const api::Owner& owner) {
  absl::StatusOr<UniqueFd> pidfd = OwnerWatch::Open(owner.pid(), owner.start_time());
  if (pidfd.ok()) {
    owners_->Watch(name, std::move(*pidfd));
  } else if (absl::IsFailedPrecondition(pidfd.status())) {
    owners_->Lost(name);  // (its call waits for mu_)
  } else {
    CAIRN_LOG_WARN("job={} its owner cannot be watched again (it runs on unwatched): {}", name,
                   pidfd.status().ToString());
  }
}

void Daemon::ClaimNetwork(JobState& s) {
  auto keep_in_step = [&](const std::string& table, net::LockClaim& claim) {
    if (claim.held() && claim.table() == table) return;
    // The new claim is taken before the old one goes (at the end of this call): never a moment
    // without one on a lock still named.
    net::LockClaim old = std::exchange(claim, net::LockClaim());
    if (table.empty()) return;
    absl::StatusOr<net::LockClaim> taken = net::LockClaim::Take(table);
    if (!taken.ok()) {
      CAIRN_LOG_WARN("job={} network lock {} not claimed (`cairn check --fix` could remove it): {}", s.job.name(), table,
                     taken.status().ToString());
      return;
    }
    claim = std::move(*taken);
  };
  keep_in_step(s.job.network_hold(), s.hold_claim);
  keep_in_step(s.job.network_lock_kept(), s.kept_claim);
  // A migration away holds its lock from its freeze until it is settled (migrate.cc: in doubt,
  // the job stands frozen here with its connections' packets held).
  keep_in_step(s.job.migration().empty() ? "" : net::LockTableName(s.job.migration()), s.migration_claim);
}

absl::StatusOr<api::RestoreJobResponse> Daemon::Restore(const std::string& name, const std::string& checkpoint_in,
                                                        const std::string& from_in, bool hold_network) {
  std::string checkpoint = checkpoint_in, from = from_in;
  if (from.empty() && !checkpoint.empty() && opts_.store->Remote()) {
    std::lock_guard<std::mutex> l(mu_);  // a job this node lacks, by id in the shared store
    if (!jobs_.count(name)) from = opts_.store->LocationOf(name, checkpoint);
  }
  if (!from.empty()) {
    ASSIGN_OR_RETURN(checkpoint, ImportCheckpoint(name, from));
  }
  std::vector<api::Checkpoint> cps;
  const api::Checkpoint* chosen = nullptr;  // in cps
  api::JobSpec spec;
  api::Job before;  // the job's record before this restore
  const int node_gpus = NodeGpuCount();
  std::map<int, int> gpu_map;  // onto other GPUs than it was taken on: the dump's -> these
  std::vector<int> new_gpus;   // the GPUs it holds once restored, when not the record's
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = jobs_.find(name);
    if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job '", name, "' on node ", opts_.node));
    JobState& s = it->second;
    ReapLocked(s);
    if (s.busy) return absl::FailedPreconditionError(absl::StrCat("job ", name, " is being checkpointed or restored"));
    if (s.job.state() == "running") {
      return absl::FailedPreconditionError(absl::StrFormat(
          "job %s still runs (pid %d): kill it first (cairn job kill %s), or checkpoint it with --kill", name,
          s.job.host_pid(), name));
    }
    if (s.job.state() == "migrated") {
      return absl::FailedPreconditionError(absl::StrCat("job ", name, " ", s.job.health().detail(),
                                                        " and runs there: restoring it here would run it twice"));
    }
    // The checkpoint first (chosen while the job is held: no checkpoint of it ends or expires
    // meanwhile): its GPUs are the ones its device state comes from.
    ASSIGN_OR_RETURN(cps, catalog_->ListCheckpoints(name));
    for (const auto& c : cps) {
      if (c.state() != "complete") continue;
      if (checkpoint.empty() || c.id() == checkpoint) chosen = &c;
    }
    // The GPUs the chosen checkpoint was taken on (a catalog from before it recorded them: the
    // job's latest run's); a restore of an older checkpoint taken on others goes back to those.
    const google::protobuf::RepeatedField<int32_t>& taken_on =
        chosen != nullptr && chosen->gpu_devices_size() > 0 ? chosen->gpu_devices() : s.job.gpu_devices();
    if (taken_on.size() > 0 && !GpusFreeLocked(name, taken_on, node_gpus)) {
      // Held or missing here: as many others, free, of the same model and with room for its
      // device memory (the engine checks those against what the checkpoint recorded).
      absl::StatusOr<std::vector<int>> picked = PickGpusLocked(name, taken_on.size(), node_gpus);
      if (!picked.ok()) {
        return Annotate(picked.status(), absl::StrCat("restore: its checkpoint was taken on GPU ",
                                                      absl::StrJoin(taken_on, ", "), ", held or missing here"));
      }
      for (int i = 0; i < taken_on.size(); ++i) gpu_map[taken_on[i]] = (*picked)[static_cast<size_t>(i)];
      new_gpus = std::move(*picked);
    } else if (!std::equal(taken_on.begin(), taken_on.end(), s.job.gpu_devices().begin(), s.job.gpu_devices().end())) {
      new_gpus.assign(taken_on.begin(), taken_on.end());  // its own, free: the record follows it
    }
    // Held from here on (released by `fail`, or taken over by the `restoring` record).
    s.reserved_gpus = new_gpus.empty() ? std::vector<int>(s.job.gpu_devices().begin(), s.job.gpu_devices().end())
                                       : new_gpus;
    s.busy = true;
    spec = s.job.spec();
    before = s.job;
  }
  bool recorded = false;  // the job's record says `restoring` (put back on failure)
  auto fail = [&](absl::Status st) {
    {
      std::lock_guard<std::mutex> l(mu_);
      JobState& s = jobs_[name];
      s.busy = false;
      s.reserved_gpus.clear();
      if (recorded) {
        s.job = before;
        if (absl::Status p = Persist(s); !p.ok()) CAIRN_LOG_WARN("job={} not saved: {}", name, p.ToString());
      }
    }
    Event(name, "restore-failed", std::string(st.message()));
    return st;
  };
  if (chosen == nullptr) {
    return fail(absl::NotFoundError(
        checkpoint.empty() ? absl::StrCat("job ", name, " has no complete checkpoint to restore (cairn job checkpoint ", name, ")")
                           : absl::StrCat("job ", name, " has no complete checkpoint ", checkpoint,
                                          " (cairn checkpoint list --job ", name, ")")));
  }
  // Recorded before anything is fetched or created: a daemon that dies from here on finds the
  // record at its restart and rolls the restore back (Recover). The restore commits with the
  // record that says `running`, written once the restored job runs.
  {
    std::lock_guard<std::mutex> l(mu_);
    JobState& s = jobs_[name];
    s.job.set_state("restoring");
    s.job.mutable_health()->set_detail(absl::StrCat(kRestoringFrom, chosen->id()));
    if (!new_gpus.empty()) {  // held from now on
      s.job.clear_gpu_devices();
      s.job.mutable_gpu_devices()->Add(new_gpus.begin(), new_gpus.end());
    }
    if (absl::Status st = Persist(s); !st.ok()) {
      s.job = before;
      s.busy = false;
      s.reserved_gpus.clear();
      return st;
    }
    s.reserved_gpus.clear();  // the record holds them now
    recorded = true;
  }
  Event(name, "restoring",
        absl::StrCat("from checkpoint ", chosen->id(),
                     gpu_map.empty() ? "" : absl::StrCat(" onto GPU ", absl::StrJoin(new_gpus, ", "), " (it was taken on GPU ",
                                                         absl::StrJoin(chosen->gpu_devices_size() > 0 ? chosen->gpu_devices()
                                                                                                      : before.gpu_devices(),
                                                                       ", "),
                                                         ")")));
  if (absl::Status st = SetLimits(CgroupOf(name), spec.limits().cpus(), spec.limits().memory_bytes()); !st.ok()) {
    return fail(st);
  }
  if (absl::Status st = PrepareJobDir(name); !st.ok()) return fail(Annotate(st, "job " + name));
  std::vector<std::string> fetched;
  auto local = LocalChain(*chosen, &fetched);
  auto drop_fetched = [&] {
    if (!opts_.keep_local) {
      for (const std::string& dir : fetched) RemoveTree(dir);
      DropFetchedCopies(cps);  // what ImportCheckpoint brought in, which LocalChain found here
    }
  };
  if (!local.ok()) {
    drop_fetched();
    return fail(Annotate(local.status(), absl::StrCat("restore job ", name, " from ", chosen->id())));
  }
  FaultPoint("restore-fetched");
  if (absl::Status st = AdoptForThisNode(name, *local); !st.ok()) {
    drop_fetched();
    return fail(Annotate(st, absl::StrCat("restore job ", name, " from ", chosen->id(), " taken on another node")));
  }
  restore::RestoreOptions ro;
  ro.dir = *local;
  ro.seal_key = opts_.image_key.get();
  if (!spec.user().empty()) {
    // A job comes back only with its owner's credentials (this node's user of that name).
    absl::StatusOr<restore::RestoreOptions::Owner> owner = job::OwnerOf(spec.user());
    if (!owner.ok()) {
      drop_fetched();
      return fail(Annotate(owner.status(), absl::StrCat("restore job ", name)));
    }
    ro.only_as = *owner;
  }
  ro.cgroup = CgroupOf(name);
  ro.verify = true;  // a restore that differs from its image fails instead of running
  ro.hold_network = hold_network;
  ro.gpu_map = gpu_map;
  ro.gpu_map_lenient = true;  // the job's GPUs: its processes may have used fewer
  if (absl::Status st = BringAddresses(name, spec); !st.ok()) {
    drop_fetched();
    return fail(st);
  }
  auto r = restore::Restore(ro);
  drop_fetched();
  if (!r.ok()) return fail(Annotate(r.status(), absl::StrCat("restore job ", name, " from ", chosen->id())));
  FaultPoint("restore-running");
  restores_++;
  api::RestoreJobResponse resp;
  std::string stale_lock;
  {
    std::lock_guard<std::mutex> l(mu_);
    JobState& s = jobs_[name];
    s.job.set_state("running");
    s.job.set_host_pid(r->pid);
    s.job.set_start_time(ProcessStartTime(r->pid).value_or(0));
    s.job.set_ended(0);
    s.job.set_restores(s.job.restores() + 1);
    s.job.set_cancelled(false);  // wanted again: its checkpoints are no longer gc's
    // Its previous owner is not this run's (SetOwner records the new one, if any, next): a
    // record that committed the restore with it would have a restart end the job for its exit.
    s.job.clear_owner();
    owners_->Forget(name);
    s.job.set_network_hold(r->network_hold);
    // The restore lifted the lock of the checkpoint it came from (on this host); one a newer
    // checkpoint kept, when an older one was restored, holds packets of nothing now.
    if (s.job.network_lock_kept() != r->dump_network_lock) stale_lock = s.job.network_lock_kept();
    s.job.clear_network_lock_kept();
    s.job.mutable_health()->Clear();
    s.job.mutable_health()->set_state("running");
    s.tracker = std::make_unique<HealthTracker>(spec.health());
    s.child = true;
    s.busy = false;
    s.killed_by_user = s.stop_after_checkpoint = false;
    if (spec.checkpoint().interval_s() > 0) s.next_checkpoint = MonoNow() + spec.checkpoint().interval_s();
    if (absl::Status st = Persist(s); !st.ok()) CAIRN_LOG_WARN("job={} not saved: {}", name, st.ToString());
    *resp.mutable_job() = s.job;
  }
  if (!stale_lock.empty()) RemoveJobNetworkLock(name, stale_lock);
  // Keep `cairn dump --job` working on the restored job.
  if (auto rec = job::Load(EngineName(name)); rec.ok()) {
    rec->host_pid = r->pid;
    (void)job::Save(*rec);
  }
  resp.set_seconds(r->seconds);
  Event(name, "restored", absl::StrFormat("from checkpoint %s as pid %d in %.3f s", chosen->id(), r->pid, r->seconds));
  return resp;
}

std::vector<api::Checkpoint> Daemon::ListCheckpoints(const std::string& job) {
  auto cps = catalog_->ListCheckpoints(job);
  return cps.ok() ? *cps : std::vector<api::Checkpoint>{};
}

absl::StatusOr<api::Checkpoint> Daemon::GetCheckpoint(const std::string& id) {
  ASSIGN_OR_RETURN(std::optional<api::Checkpoint> c, catalog_->GetCheckpoint(id));
  if (!c) return absl::NotFoundError(absl::StrCat("no checkpoint '", id, "' on node ", opts_.node, " (cairn checkpoint list)"));
  return *c;
}

absl::Status Daemon::DeleteCheckpoint(const std::string& id) {
  ASSIGN_OR_RETURN(api::Checkpoint c, GetCheckpoint(id));
  if (c.state() == "writing") {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint ", id, " is still being written"));
  }
  if (std::optional<std::string> child = ChildOf(c.job(), id)) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint ", id, " is the parent of incremental checkpoint ",
                                                      *child, ", which is restored through it: delete ", *child,
                                                      " first"));
  }
  // The stored files first (a store can refuse: then the row stays, to try again), then the row.
  if (absl::Status st = DropCheckpointFiles(c); !st.ok()) {
    return Annotate(st, absl::StrCat("delete checkpoint ", id, " (still listed; try again)"));
  }
  RETURN_IF_ERROR(catalog_->DeleteCheckpoint(id));
  Event(c.job(), "checkpoint-deleted", absl::StrCat("checkpoint ", id));
  return absl::OkStatus();
}

absl::StatusOr<api::Checkpoint> Daemon::PinCheckpoint(const std::string& id, bool pinned) {
  ASSIGN_OR_RETURN(api::Checkpoint c, GetCheckpoint(id));
  c.set_pinned(pinned);
  RETURN_IF_ERROR(catalog_->PutCheckpoint(c));
  return c;
}

std::vector<api::Event> Daemon::WaitEvents(const std::string& job, uint64_t after_seq, int wait_ms) {
  auto events = catalog_->Events(job, after_seq, 500);
  if (events.ok() && !events->empty()) return *events;
  {
    std::unique_lock<std::mutex> l(ev_mu_);
    events_cv_.wait_for(l, std::chrono::milliseconds(wait_ms), [&] { return last_seq_ > after_seq; });
  }
  events = catalog_->Events(job, after_seq, 500);
  return events.ok() ? *events : std::vector<api::Event>{};
}

uint64_t Daemon::LastEventSeq() {
  std::lock_guard<std::mutex> l(ev_mu_);
  return last_seq_;
}

api::NodeInfoResponse Daemon::Info() {
  api::NodeInfoResponse r;
  r.set_node(opts_.node);
  r.set_version(CAIRN_VERSION);
  r.set_state_dir(opts_.state_dir);
  r.set_pid(::getpid());
  r.set_started(started_);
  std::lock_guard<std::mutex> l(mu_);
  uint32_t n = 0;
  for (auto& [name, s] : jobs_) n += s.job.state() == "running";
  r.set_jobs_running(n);
  if (opts_.store) r.set_storage(opts_.store->Describe());
  for (const auto& [name, address] : opts_.peers) (*r.mutable_peers())[name] = address;
  FillNodeSignals(&r);
  std::set<std::string> features = NodeCpuFeatures();
  r.set_cpu_level(LevelOf(features));
  for (const std::string& f : features) r.add_cpu_features(f);
  return r;
}

void Daemon::Tick() {
  std::vector<std::string> due;
  {
    std::lock_guard<std::mutex> l(mu_);
    double now = MonoNow();
    for (auto& [name, s] : jobs_) {
      ReapLocked(s);
      SampleLocked(s, now);
      double every = s.job.spec().checkpoint().interval_s();
      if (every > 0 && s.job.state() == "running" && !s.busy && now >= s.next_checkpoint) {
        due.push_back(name);
        s.next_checkpoint = now + every;
      }
    }
  }
  CheckpointJobs(due, "periodic", /*pin=*/false);
  ResolveMigrations();
  if (opts_.gc_interval_s > 0) {
    double now = MonoNow();
    if (next_gc_ == 0) next_gc_ = now + opts_.gc_interval_s;
    // On a thread of its own, one at a time: a store's deletions can take minutes, and the tick
    // must go on (periodic and spot-notice checkpoints, health, migrations in doubt).
    if (now >= next_gc_ && !gc_running_) {
      next_gc_ = now + opts_.gc_interval_s;
      if (gc_thread_.joinable()) gc_thread_.join();
      gc_running_ = true;
      gc_thread_ = std::thread([this] {
        absl::StatusOr<api::CollectGarbageResponse> gc = CollectGarbage(/*dry_run=*/false);
        if (!gc.ok()) CAIRN_LOG_WARN("gc failed: {}", gc.status().ToString());
        gc_running_ = false;
      });
    }
  }
}

// Each job's checkpoint runs wholly on one thread, which is the tracer of that job while it runs.
void Daemon::CheckpointJobs(const std::vector<std::string>& names, const std::string& reason, bool pin,
                            double retry_until) {
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next++) < names.size();) {
      api::CheckpointJobRequest req;
      req.set_name(names[i]);
      req.set_pin(pin);
      auto c = Checkpoint(req, reason);
      while (!c.ok() && c.status().code() == absl::StatusCode::kFailedPrecondition && MonoNow() < retry_until &&
             absl::StrContains(c.status().message(), "in progress")) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        c = Checkpoint(req, reason);
      }
      if (!c.ok()) CAIRN_LOG_WARN("{} checkpoint job={} failed: {}", reason, names[i], std::string(c.status().message()));
    }
  };
  size_t workers = std::min<size_t>(std::max(1, opts_.checkpoint_workers), names.size());
  std::vector<std::thread> helpers;
  for (size_t k = 1; k < workers; ++k) helpers.emplace_back(work);
  work();
  for (auto& t : helpers) t.join();
}

void Daemon::CheckpointEach(const std::string& reason, bool (*wants)(const api::CheckpointPolicy&)) {
  std::vector<std::string> names;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [name, s] : jobs_) {
      ReapLocked(s);
      if (s.job.state() == "running" && wants(s.job.spec().checkpoint())) names.push_back(name);
    }
  }
  for (const std::string& name : names) {
    api::CheckpointJobRequest req;
    req.set_name(name);
    auto c = Checkpoint(req, reason);
    if (!c.ok()) CAIRN_LOG_WARN("{} checkpoint job={} failed: {}", reason, name, std::string(c.status().message()));
  }
}

void Daemon::CheckpointForShutdown() {
  CheckpointEach("shutdown", [](const api::CheckpointPolicy& p) { return p.on_shutdown(); });
}

void Daemon::CheckpointOnSignal() {
  CheckpointEach("signal", [](const api::CheckpointPolicy& p) { return p.on_signal(); });
}

std::string Daemon::Metrics() {
  std::string out;
  auto line = [&out](const std::string& s) { absl::StrAppend(&out, s, "\n"); };
  std::map<std::string, int> by_state;
  std::vector<api::Job> jobs;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [name, s] : jobs_) {
      by_state[s.job.state()]++;
      jobs.push_back(s.job);
    }
  }
  line("# HELP cairnd_up The daemon answers.");
  line("# TYPE cairnd_up gauge");
  line(absl::StrCat("cairnd_up{node=\"", opts_.node, "\"} 1"));
  line("# HELP cairnd_jobs Jobs known to the daemon, by state.");
  line("# TYPE cairnd_jobs gauge");
  for (const char* st : {"running", "exited", "killed", "migrating", "migrated", "restoring"}) {
    line(absl::StrCat("cairnd_jobs{state=\"", st, "\"} ", by_state[st]));  // every state, always: a fixed set
  }
  line("# HELP cairnd_checkpoints_total Checkpoints taken, by result.");
  line("# TYPE cairnd_checkpoints_total counter");
  line(absl::StrCat("cairnd_checkpoints_total{result=\"complete\"} ", checkpoints_ok_.load()));
  line(absl::StrCat("cairnd_checkpoints_total{result=\"failed\"} ", checkpoints_failed_.load()));
  line("# HELP cairnd_checkpoint_bytes_total Bytes of complete checkpoints written.");
  line("# TYPE cairnd_checkpoint_bytes_total counter");
  line(absl::StrCat("cairnd_checkpoint_bytes_total ", checkpoint_bytes_.load()));
  line("# HELP cairnd_restores_total Jobs restored from a checkpoint.");
  line("# TYPE cairnd_restores_total counter");
  line(absl::StrCat("cairnd_restores_total ", restores_.load()));
  {
    std::lock_guard<std::mutex> l(lat_mu_);
    line("# HELP cairnd_checkpoint_seconds How long each complete checkpoint took, start to commit.");
    line("# TYPE cairnd_checkpoint_seconds histogram");
    out += checkpoint_seconds_.Render("cairnd_checkpoint_seconds", "");
    line("# HELP cairnd_checkpoint_frozen_seconds How long the job stood still for each complete checkpoint.");
    line("# TYPE cairnd_checkpoint_frozen_seconds histogram");
    out += frozen_seconds_.Render("cairnd_checkpoint_frozen_seconds", "");
  }
  line("# HELP cairnd_job_cpu_seconds CPU time of the job's processes.");
  line("# TYPE cairnd_job_cpu_seconds gauge");
  for (const auto& j : jobs) {
    if (j.state() == "running") line(absl::StrFormat("cairnd_job_cpu_seconds{job=\"%s\"} %.3f", j.name(), j.health().cpu_seconds()));
  }
  line("# HELP cairnd_job_memory_bytes Memory the job's cgroup uses.");
  line("# TYPE cairnd_job_memory_bytes gauge");
  for (const auto& j : jobs) {
    if (j.state() == "running") line(absl::StrCat("cairnd_job_memory_bytes{job=\"", j.name(), "\"} ", j.health().memory_bytes()));
  }
  // One series per job and signal, its value the state (never a label whose value changes with
  // the job's state: a series that changes labels breaks rate() and alerts).
  const std::pair<const char*, const char*> kSignals[] = {
      {"healthy", "1 while the job runs without a health signal"},
      {"hung", "1 while the job shows no CPU progress and no heartbeat (health hung)"},
      {"memory_pressure", "1 while the job nears its memory limit (health memory-pressure)"}};
  for (const auto& [signal, help] : kSignals) {
    line(absl::StrCat("# HELP cairnd_job_", signal, " ", help, "."));
    line(absl::StrCat("# TYPE cairnd_job_", signal, " gauge"));
    for (const auto& j : jobs) {
      if (j.state() != "running") continue;
      const std::string& h = j.health().state();
      bool on = std::string(signal) == "healthy" ? h == "running"
                : std::string(signal) == "hung"  ? h == "hung"
                                                 : h == "memory-pressure";
      line(absl::StrCat("cairnd_job_", signal, "{job=\"", j.name(), "\"} ", on ? 1 : 0));
    }
  }
  return out;
}

}  // namespace cairn::daemon
