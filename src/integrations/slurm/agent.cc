#include "integrations/slurm/agent.h"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "common/proc_identity.h"
#include "common/validate.h"
#include "daemon.grpc.pb.h"
#include "integrations/slurm/scontrol.h"
#include "integrations/slurm/task_wire.h"


namespace cairn::slurm {
namespace dapi = cairn::daemon::api;
namespace {

using Clock = std::chrono::system_clock;

// What the agent tells the job's user: on the task's stderr, which SLURM writes to the job's
// output (slurm-JOBID.out unless -e says otherwise).
class Say {
 public:
  void To(int fd) { fd_ = fd; }
  template <typename... Args>
  void operator()(const absl::FormatSpec<Args...>& format, const Args&... args) {
    std::string line = "cairn: " + absl::StrFormat(format, args...) + "\n";
    std::lock_guard<std::mutex> l(mu_);
    if (::write(fd_, line.data(), line.size()) < 0) {
      // Nothing to tell it with: the task's output is gone.
    }
  }

 private:
  std::mutex mu_;
  int fd_ = 2;
};

bool WriteAll(int fd, const std::string& data) {
  for (size_t off = 0; off < data.size();) {
    ssize_t w = ::write(fd, data.data() + off, data.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    off += static_cast<size_t>(w);
  }
  return true;
}

// The verdict for the relay: one line, "managed" or "direct REASON".
void Tell(int channel, const std::string& line) { (void)WriteAll(channel, line + "\n"); }

std::string Describe(const grpc::Status& s) {
  return s.error_message().empty() ? absl::StrCat("gRPC code ", s.error_code()) : s.error_message();
}

// This process as a job's owner (RunJobRequest.owner): the daemon kills the job if the agent
// dies, even before its bound attach (a SLURM step killed right after the job started).
dapi::Owner Self() {
  dapi::Owner o;
  o.set_pid(::getpid());
  o.set_start_time(ProcessStartTime(::getpid()).value_or(0));
  return o;
}

class Agent {
 public:
  explicit Agent(const AgentOptions& o) : o_(o) {}

  int Run() {
    // Every signal SLURM sends goes to the watcher (a signalfd), from the start: a TERM that
    // arrives while the job is being started is acted on once it runs.
    // (What slurmstepd left ignored would never reach a signalfd: defaults first.)
    sigset_t set;
    sigemptyset(&set);
    for (int sig : {SIGTERM, SIGINT, SIGUSR1, SIGUSR2, SIGHUP, SIGCONT}) {
      ::signal(sig, SIG_DFL);
      sigaddset(&set, sig);
    }
    ::sigprocmask(SIG_BLOCK, &set, nullptr);
    sigfd_ = ::signalfd(-1, &set, SFD_CLOEXEC);
    ::signal(SIGPIPE, SIG_IGN);

    TaskRequest req;
    int out = -1, err = -1;
    std::string error;
    if (!ReceiveTaskRequest(o_.channel, &req, &out, &err, &error)) {
      ::dprintf(2, "cairn slurm agent: job %u: %s\n", o_.job, error.c_str());
      return 1;
    }
    out_ = out;
    say_.To(err);
    err_ = err;
    // The relay's word that it runs: without it (SLURM could not exec it) the task runs without
    // cairn, and nothing may be started here.
    if (!AwaitRelay()) return 0;
    // The restart count from root's side: SLURM's item (0 for a batch script in 22.05) and
    // slurmctld's record (never the task's environment, which the user can set).
    if (auto job = ScontrolShow("job", std::to_string(o_.job)); job.ok()) {
      uint32_t n = 0;
      if (absl::SimpleAtoi((*job)["Restarts"], &n)) o_.restart_count = std::max(o_.restart_count, n);
    }
    name_ = JobName(o_.job, o_.step, o_.task, o_.uid);
    absl::Status node_ok = req.node.empty() ? absl::OkStatus() : CheckJobName(req.node, "SLURM node name");
    if (!node_ok.ok()) return Direct(std::string(node_ok.message()));
    socket_ = absl::StrReplaceAll(o_.socket, {{"%n", req.node}});
    stub_ = dapi::Daemon::NewStub(grpc::CreateChannel("unix:" + socket_, grpc::InsecureChannelCredentials()));

    // cairnd must answer, with a store every node shares (or a requeued job could not come back
    // elsewhere: said, but the job runs under cairn all the same).
    dapi::NodeInfoResponse info;
    {
      grpc::ClientContext c;
      c.set_deadline(Clock::now() + std::chrono::seconds(10));
      grpc::Status st = stub_->NodeInfo(&c, dapi::NodeInfoRequest(), &info);
      if (!st.ok()) {
        return Direct(absl::StrCat("cairnd does not answer at ", socket_, " on node ", req.node, " (", Describe(st),
                                   "): job ", o_.job, " runs without checkpoints; start cairnd there "
                                   "(`cairn slurm setup` checks every node)"));
      }
    }
    if (info.storage().empty() || info.storage() == "local") {
      say_("cairnd on node %s keeps checkpoints on its own disk (--storage local): job %u can come back only on "
           "this node; give every node's cairnd the same --storage dir:/PATH or s3://",
           info.node(), o_.job);
    }

    // What this node's logs of the job hold already (a start here before): the attach begins
    // after it, so that the job's output reaches SLURM's once and whole.
    if (std::optional<dapi::Job> before = Get(); before.has_value()) {
      struct stat st {};
      if (::stat((before->dir() + "/stdout.log").c_str(), &st) == 0) out_offset_ = st.st_size;
      if (::stat((before->dir() + "/stderr.log").c_str(), &st) == 0) err_offset_ = st.st_size;
    }
    bool restored = o_.restart_count > 0 && Restore(info.node());
    if (o_.restart_count == 0) {
      Forget(false);  // a record of this name here is an older job's (SLURM reuses ids after a reset)
      out_offset_ = err_offset_ = 0;
    }
    if (!restored && !Start(req, info.node())) return 0;
    int expected = kStarting;
    state_.compare_exchange_strong(expected, kRunning);
    Tell(o_.channel, "managed");
    std::thread watcher([this] { Watch(); });
    int status = Follow();
    done_ = true;
    watcher.join();
    return status;
  }

 private:
  enum State { kStarting, kRunning, kStopping, kEnded };

  // The relay writes 'g' once it runs; EOF (its exec failed, the task is gone) or 60 s: no.
  bool AwaitRelay() {
    pollfd p{o_.channel, POLLIN, 0};
    unsigned char b = 0;
    if (::poll(&p, 1, 60000) != 1 || ::read(o_.channel, &b, 1) != 1 || b != 'g') {
      ::dprintf(2, "cairn slurm agent: job %u: the task's relay did not start; the task runs without cairn\n", o_.job);
      return false;
    }
    return true;
  }

  std::optional<dapi::Job> Get() {
    dapi::GetJobRequest r;
    r.set_name(name_);
    dapi::GetJobResponse resp;
    grpc::ClientContext c;
    c.set_deadline(Clock::now() + std::chrono::seconds(30));
    if (!stub_->GetJob(&c, r, &resp).ok()) return std::nullopt;
    return resp.job();
  }
  bool Runs() {
    std::optional<dapi::Job> j = Get();
    return j.has_value() && j->state() == "running";
  }

  // The newest stored checkpoint, restored here; false: the job starts from the beginning.
  // Stored checkpoints are never removed on the way: a later start may still restore them.
  bool Restore(const std::string& node) {
    auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      dapi::RestoreJobRequest r;
      r.set_name(name_);
      r.set_newest_stored(true);
      *r.mutable_owner() = Self();
      dapi::RestoreJobResponse resp;
      grpc::ClientContext c;
      c.set_deadline(Clock::now() + std::chrono::minutes(30));
      grpc::Status st = stub_->RestoreJob(&c, r, &resp);
      double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      // A call cut off (its deadline) may still have restored it.
      if (st.ok() || Runs()) {
        say_("job %u (start %u) restored on node %s from its newest checkpoint, %s, in %.2f s; it goes on from there",
             o_.job, o_.restart_count + 1, node, NewestCheckpoint(), took);
        return true;
      }
      if (st.error_code() == grpc::StatusCode::NOT_FOUND) {
        say_("job %u (start %u): no checkpoint of it in the store (%s): it starts from the beginning", o_.job,
             o_.restart_count + 1, Describe(st));
        Forget(true);
        return false;
      }
      // The previous start's checkpoint at its stop still being written here (SLURM killed its
      // agent first): wait for it, up to 5 minutes.
      if (st.error_code() == grpc::StatusCode::FAILED_PRECONDITION && took < 300 &&
          (absl::StrContains(st.error_message(), "being checkpointed") ||
           absl::StrContains(st.error_message(), "in progress") || absl::StrContains(st.error_message(), "busy"))) {
        std::this_thread::sleep_for(std::chrono::seconds(1));
        continue;
      }
      say_("job %u (start %u): its newest checkpoint could not be restored (%s): it starts from the beginning",
           o_.job, o_.restart_count + 1, Describe(st));
      Forget(true);
      return false;
    }
  }

  // Runs the task's command under cairnd; false: the relay runs it (said why).
  bool Start(const TaskRequest& req, const std::string& node) {
    dapi::RunJobRequest r;
    *r.mutable_owner() = Self();
    dapi::JobSpec* s = r.mutable_spec();
    s->set_name(name_);
    for (const std::string& a : req.argv) s->add_command(a);
    for (const std::string& e : req.env) s->add_env(e);
    s->set_workdir(req.workdir);
    // SLURM's ids for the job (its --gid, its groups), not the node's idea of the user's.
    if (o_.uid != 0) s->set_user(absl::StrCat(o_.uid, ":", o_.gid, o_.groups.empty() ? "" : ":", o_.groups));
    s->mutable_checkpoint()->set_interval_s(o_.interval_s);
    s->mutable_checkpoint()->set_keep_last(2);
    // The allocation, enforced here: the job's processes run in cairnd's cgroups, not the step's.
    s->mutable_limits()->set_cpus(o_.cpus);
    s->mutable_limits()->set_memory_bytes(static_cast<int64_t>(o_.memory_mb) * 1024 * 1024);
    dapi::RunJobResponse resp;
    grpc::ClientContext c;
    c.set_deadline(Clock::now() + std::chrono::seconds(60));
    grpc::Status st = stub_->RunJob(&c, r, &resp);
    if (st.ok() || Runs()) return true;  // a call cut off may still have started it
    Direct(absl::StrCat("cairnd on node ", node, " could not start job ", o_.job, " (", Describe(st),
                        "): it runs without checkpoints"));
    return false;
  }

  // cairnd cannot take the task: the relay runs it as SLURM would.
  int Direct(const std::string& why) {
    say_("%s", why);
    Tell(o_.channel, "direct");
    return 0;
  }

  // The job's newest checkpoint here (the one just restored), and when it was taken: its id
  // ends in the UTC time (JOB-YYYYMMDDTHHMMSSmmm).
  std::string NewestCheckpoint() {
    dapi::GetJobRequest r;
    r.set_name(name_);
    dapi::GetJobResponse resp;
    grpc::ClientContext c;
    c.set_deadline(Clock::now() + std::chrono::seconds(10));
    if (!stub_->GetJob(&c, r, &resp).ok()) return "(unknown)";
    std::string id;
    for (const dapi::Checkpoint& cp : resp.checkpoints()) {
      if (cp.state() == "complete" && cp.id() > id) id = cp.id();
    }
    if (id.empty()) return "(unknown)";
    // YYYYMMDDTHHMMSSmmm (absl's %Y would take every digit: read the fields by position).
    std::string stamp = id.substr(id.find_last_of('-') + 1);
    int f[7] = {};
    const int at[7][2] = {{0, 4}, {4, 2}, {6, 2}, {9, 2}, {11, 2}, {13, 2}, {15, 3}};
    bool ok = stamp.size() == 18 && stamp[8] == 'T';
    for (int i = 0; ok && i < 7; ++i) ok = absl::SimpleAtoi(stamp.substr(at[i][0], at[i][1]), &f[i]);
    if (ok) {
      absl::Time t = absl::FromCivil(absl::CivilSecond(f[0], f[1], f[2], f[3], f[4], f[5]), absl::UTCTimeZone());
      return absl::StrFormat("%s (taken %.1f s ago)", id, absl::ToDoubleSeconds(absl::Now() - t) - f[6] / 1000.0);
    }
    return id;
  }

  // Removes the record of this job's name that does not run (its logs and local copies too); with
  // `keep_stored` what it put in the store stays (a later start restores it), with `purge_stored`
  // every stored checkpoint of the job goes, any node's.
  void Forget(bool keep_stored, bool purge_stored = false) {
    dapi::DeleteJobRequest d;
    d.set_name(name_);
    d.set_keep_stored(keep_stored);
    d.set_purge_stored(purge_stored);
    dapi::DeleteJobResponse resp;
    grpc::ClientContext c;
    c.set_deadline(Clock::now() + std::chrono::seconds(60));
    (void)stub_->DeleteJob(&c, d, &resp);
  }

  // Copies the job's output to the task's until it ends, from exact offsets (nothing missed,
  // nothing twice, also across a cairnd restart); returns the task's exit status.
  int Follow() {
    bool said_lost = false;
    for (;;) {
      dapi::AttachJobRequest r;
      r.set_name(name_);
      r.set_bound(true);
      r.set_from_offsets(true);
      r.set_stdout_offset(out_offset_);
      r.set_stderr_offset(err_offset_);
      grpc::ClientContext c;
      auto stream = stub_->AttachJob(&c, r);
      dapi::AttachJobOutput o;
      while (stream->Read(&o)) {
        if (!o.data().empty()) {
          (void)WriteAll(o.stderr() ? err_ : out_, o.data());
          (o.stderr() ? err_offset_ : out_offset_) += static_cast<int64_t>(o.data().size());
        }
        if (!o.state().empty()) {
          stream->Finish();
          return Ended(o);
        }
      }
      grpc::Status st = stream->Finish();
      if (st.error_code() == grpc::StatusCode::NOT_FOUND && state_ != kRunning) {
        // Stopped (its record removed meanwhile): it ended as the stop made it.
        dapi::AttachJobOutput gone;
        gone.set_state("killed");
        return Ended(gone);
      }
      // cairnd restarted (its jobs run on): attach again until it answers; SLURM ends this task
      // when it must.
      if (!said_lost) {
        say_("cairnd at %s stopped answering (%s): waiting for it; job %u runs on", socket_, Describe(st), o_.job);
        said_lost = true;
      }
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }

  int Ended(const dapi::AttachJobOutput& o) {
    int expected = kRunning;
    if (!state_.compare_exchange_strong(expected, kEnded)) {
      // A stop is under way (or done): its checkpoint stays for the next start, unless the job
      // had ended by itself meanwhile.
      while (!stop_done_) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (!exited_itself_) {
        if (purge_at_end_) Forget(false, /*purge_stored=*/true);
        return 128 + SIGTERM;
      }
    }
    const dapi::Health& h = o.health();
    if (o.state() != "exited" && o.state() != "killed") {
      say_("job %u left node %s under cairnd (%s): this task ends", o_.job, socket_, o.state());
      return 0;
    }
    // The job is over: its checkpoints are not needed by any later start. One that ended by
    // itself leaves none anywhere (earlier starts' included); one killed from outside (an
    // operator's checkpoint --kill, the OOM killer) keeps what other nodes stored.
    Forget(false, /*purge_stored=*/o.state() == "exited");
    return h.signal() != 0 ? 128 + h.signal() : h.exit_code();
  }

  // SLURM's signals (directly, and through the relay's channel) until the job ends.
  void Watch() {
    while (!done_) {
      pollfd p[2] = {{sigfd_, POLLIN, 0}, {o_.channel, POLLIN, 0}};
      int n = ::poll(p, channel_open_ ? 2 : 1, 200);
      if (n <= 0) continue;
      int sig = 0;
      if (p[0].revents & POLLIN) {
        signalfd_siginfo si{};
        if (::read(sigfd_, &si, sizeof si) == sizeof si) sig = static_cast<int>(si.ssi_signo);
      } else if (channel_open_ && (p[1].revents & (POLLIN | POLLHUP))) {
        unsigned char b = 0;
        ssize_t r = ::read(o_.channel, &b, 1);
        if (r == 1) sig = b;
        if (r <= 0) {
          // The relay is gone: SLURM's task ended under us (killed). Keep the work, as on TERM.
          channel_open_ = false;
          sig = SIGTERM;
        }
      }
      if (sig == SIGTERM || sig == SIGINT) Stop(false);
      if (sig == SIGUSR1) Stop(true);
      if (sig == SIGUSR2 || sig == SIGHUP) Signal(sig);  // the job's own business
    }
  }

  // Sends the job `sig` (cairnd waits, up to 60 s, for a checkpoint in progress first).
  void Signal(int sig) {
    dapi::KillJobRequest k;
    k.set_name(name_);
    k.set_signal(sig);
    dapi::KillJobResponse kr;
    grpc::ClientContext kc;
    kc.set_deadline(Clock::now() + std::chrono::seconds(90));
    (void)stub_->KillJob(&kc, k, &kr);
  }

  // Why SLURM's SIGTERM ends the job for good, as `scontrol show job` tells it then (`job`):
  // scancel or the time limit (the job COMPLETING with its end time set, not preempted, its
  // restart count unchanged);
  // nullopt when it is to come back (preempted and requeueable: the agent requeues it; `scontrol
  // requeue` and requeuehold, which count the restart before the signal), when it goes on (a
  // signal sent with scancel -s: RUNNING), or when SLURM cannot say.
  std::optional<std::string> EndsForGood(const absl::StatusOr<std::map<std::string, std::string>>& job) {
    if (!job.ok()) return std::nullopt;
    auto field = [&](const char* k) {
      auto it = job->find(k);
      return it == job->end() ? std::string() : it->second;
    };
    uint32_t restarts = 0;
    if (!absl::SimpleAtoi(field("Restarts"), &restarts) || restarts > o_.restart_count) return std::nullopt;
    // A requeue also resets the job's end (EndTime=Unknown) and puts its next start in the
    // future; a cancelled job has its end time set. Checked too, so that a restart count read
    // after a requeue (the agent's, at its start) cannot make a requeue look like an end.
    if (field("EndTime") == "Unknown" || field("EndTime").empty()) return std::nullopt;
    std::string preempted = field("PreemptTime");
    if (!preempted.empty() && preempted != "None") {
      if (field("Requeue") == "1") return std::nullopt;
      return std::string("preempted, and not requeueable (--no-requeue)");
    }
    std::string state = field("JobState");
    if (state != "COMPLETING" && state != "CANCELLED" && state != "TIMEOUT") return std::nullopt;
    if (field("Reason") == "TimeLimit" || state == "TIMEOUT") return std::string("it reached its time limit");
    return std::string("cancelled");
  }

  // Checkpoints the job and stops it (once); with `requeue`, then asks SLURM to requeue the job.
  // A job SLURM ends for good (EndsForGood) is stopped without one, and its checkpoints go: no
  // later start could restore them (a new submission is another job).
  void Stop(bool requeue) {
    int expected = kRunning;
    if (!state_.compare_exchange_strong(expected, kStopping)) return;  // stopping, or ended by itself
    // Asked before the checkpoint (bounded: a slow slurmctld must not eat the time SLURM leaves
    // before its SIGKILL); not for SIGUSR1, which requeues whatever SLURM says.
    absl::StatusOr<std::map<std::string, std::string>> job =
        requeue ? absl::StatusOr<std::map<std::string, std::string>>(absl::UnavailableError("not asked"))
                : ScontrolShow("job", std::to_string(o_.job), /*timeout_s=*/3);
    if (std::optional<std::string> why = requeue ? std::nullopt : EndsForGood(job)) {
      say_("job %u: SLURM ends it (%s) and will not start it again: it is stopped without a checkpoint and its "
           "checkpoints are removed",
           o_.job, *why);
      purge_at_end_ = true;  // by Ended, once the attach has seen it end (the job's record goes then)
      Signal(SIGKILL);
      stop_done_ = true;
      return;
    }
    // Said first: if SLURM's SIGKILL comes before the checkpoint is done, the output shows that
    // it began and never ended (the next start says which checkpoint it went on from).
    say_("job %u: SLURM stops it (%s): checkpointing it first", o_.job, requeue ? "SIGUSR1: then requeued" : "SIGTERM");
    auto t0 = std::chrono::steady_clock::now();
    dapi::CheckpointJobRequest r;
    r.set_name(name_);
    r.set_kill(true);
    dapi::CheckpointJobResponse resp;
    grpc::ClientContext c;
    c.set_deadline(Clock::now() + std::chrono::minutes(30));
    grpc::Status st = stub_->CheckpointJob(&c, r, &resp);
    double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (st.ok()) {
      say_("job %u checkpointed (%s, the job paused %.2f s) and stopped in %.2f s: a requeued start goes on from here",
           o_.job, resp.checkpoint().id(), resp.checkpoint().frozen_s(), took);
    } else if (!Runs()) {
      // It ended by itself meanwhile: nothing to stop, nothing to requeue.
      exited_itself_ = true;
      stop_done_ = true;
      return;
    } else {
      // The job keeps its older checkpoints; SLURM ends the task anyway: end the job now.
      say_("job %u: the checkpoint at the stop failed after %.2f s (%s): a requeued start goes on from its previous "
           "checkpoint, if it has one",
           o_.job, took, Describe(st));
      Signal(SIGKILL);
    }
    // A job SLURM preempts (its PreemptTime set) that ends within its grace time is counted as
    // cancelled, not requeued: requeue it now (which also frees its node at once). Any other
    // SIGTERM (scancel, the time limit, scontrol requeue) leaves the decision to SLURM.
    if (!requeue) {
      // Asked again if the bounded question went unanswered (slurmctld deciding a preemption can
      // be busy for seconds): this answer decides the requeue.
      if (!job.ok()) job = ScontrolShow("job", std::to_string(o_.job));
      requeue = job.ok() && (*job)["PreemptTime"] != "None" && !(*job)["PreemptTime"].empty() &&
                (*job)["Requeue"] == "1";
    }
    if (requeue) Requeue();
    stop_done_ = true;
  }

  void Requeue() {
    absl::StatusOr<std::string> r = Scontrol({"requeue", std::to_string(o_.job)});
    if (!r.ok()) say_("job %u: %s", o_.job, r.status().message());
  }

  AgentOptions o_;
  std::string name_, socket_;
  std::unique_ptr<dapi::Daemon::Stub> stub_;
  Say say_;
  int out_ = 1, err_ = 2, sigfd_ = -1;
  int64_t out_offset_ = 0, err_offset_ = 0;
  std::atomic<int> state_{kStarting};
  std::atomic<bool> done_{false}, stop_done_{false}, exited_itself_{false}, channel_open_{true};
  std::atomic<bool> purge_at_end_{false};  // Stop found SLURM ends the job for good (EndsForGood)
};

}  // namespace

std::string JobName(uint32_t job, uint32_t step, uint32_t task, uid_t uid) {
  if (step == kBatchStep) return absl::StrCat("slurm-", job, "-u", uid);
  return absl::StrCat("slurm-", job, ".", step, ".", task, "-u", uid);
}

int RunAgent(const AgentOptions& opts) { return Agent(opts).Run(); }

namespace {
int g_channel = -1;
// Async-signal-safe: one byte per signal to the agent, which is root (a user's process may not
// signal it).
void ForwardSignal(int sig) {
  unsigned char b = static_cast<unsigned char>(sig);
  int saved = errno;
  (void)::send(g_channel, &b, 1, MSG_NOSIGNAL);
  errno = saved;
}
}  // namespace

int RunRelay(pid_t agent, int channel, const std::vector<std::string>& argv) {
  g_channel = channel;
  ::signal(SIGCHLD, SIG_DFL);  // waitpid below must see the agent end
  // The agent starts nothing before this: had this exec failed, the task would run without it.
  unsigned char go = 'g';
  (void)::send(channel, &go, 1, MSG_NOSIGNAL);
  struct sigaction sa {};
  sa.sa_handler = ForwardSignal;
  sa.sa_flags = SA_RESTART;
  const int forwarded[] = {SIGTERM, SIGINT, SIGUSR1, SIGUSR2, SIGHUP};
  sigset_t set;
  sigemptyset(&set);
  for (int sig : forwarded) {
    ::sigaction(sig, &sa, nullptr);
    sigaddset(&set, sig);
  }
  ::sigprocmask(SIG_UNBLOCK, &set, nullptr);
  std::string verdict;
  char c = 0;
  for (;;) {
    ssize_t r = ::read(channel, &c, 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0 || c == '\n') break;
    verdict.push_back(c);
  }
  auto wait_agent = [&]() -> int {
    int status = 0;
    for (;;) {
      pid_t w = ::waitpid(agent, &status, 0);
      if (w == agent) break;
      if (w < 0 && errno != EINTR) return 1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  };
  if (verdict == "managed") return wait_agent();
  // cairnd cannot take the task (the agent said why on stderr), or the agent died first: run
  // the command as SLURM would have.
  if (verdict.empty()) ::dprintf(2, "cairn: the task's agent ended before it took the task: it runs without cairn\n");
  (void)wait_agent();
  ::close(channel);
  for (int sig : forwarded) ::signal(sig, SIG_DFL);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execvp(args[0], args.data());
  ::dprintf(2, "cairn: cannot run %s: %s\n", args[0], std::strerror(errno));
  return 127;
}

}  // namespace cairn::slurm
