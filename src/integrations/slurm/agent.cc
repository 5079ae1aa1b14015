#include "integrations/slurm/agent.h"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
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

class Agent {
 public:
  explicit Agent(const AgentOptions& o) : o_(o), name_(JobName(o.job, o.step, o.task)) {}

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
    // slurmstepd gives a batch script's restart count (S_SLURM_RESTART_COUNT) as 0; the task's
    // environment, which SLURM sets up after the user's, has it.
    for (const std::string& e : req.env) {
      uint32_t n = 0;
      if (absl::StartsWith(e, "SLURM_RESTART_COUNT=") && absl::SimpleAtoi(e.substr(20), &n)) {
        o_.restart_count = std::max(o_.restart_count, n);
      }
    }
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

    bool restored = false;
    if (o_.restart_count > 0) {
      auto t0 = std::chrono::steady_clock::now();
      dapi::RestoreJobRequest r;
      r.set_name(name_);
      r.set_newest_stored(true);
      dapi::RestoreJobResponse resp;
      grpc::ClientContext c;
      c.set_deadline(Clock::now() + std::chrono::minutes(30));
      grpc::Status st = stub_->RestoreJob(&c, r, &resp);
      double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (st.ok()) {
        restored = true;
        say_("job %u (start %u) restored on node %s from its newest checkpoint, %s, in %.2f s; it goes on from there",
             o_.job, o_.restart_count + 1, info.node(), NewestCheckpoint(), took);
      } else if (st.error_code() == grpc::StatusCode::NOT_FOUND) {
        say_("job %u (start %u): no checkpoint of it in the store (%s): it starts from the beginning", o_.job,
             o_.restart_count + 1, Describe(st));
      } else {
        say_("job %u (start %u): its newest checkpoint could not be restored (%s): it starts from the beginning",
             o_.job, o_.restart_count + 1, Describe(st));
        Forget();
      }
    } else {
      Forget();  // a record of this name here is an older job's (SLURM reuses ids after a reset)
    }
    if (!restored) {
      dapi::RunJobRequest r;
      dapi::JobSpec* s = r.mutable_spec();
      s->set_name(name_);
      for (const std::string& a : req.argv) s->add_command(a);
      for (const std::string& e : req.env) s->add_env(e);
      s->set_workdir(req.workdir);
      if (o_.uid != 0) s->set_user(std::to_string(o_.uid));
      s->mutable_checkpoint()->set_interval_s(o_.interval_s);
      s->mutable_checkpoint()->set_keep_last(2);
      dapi::RunJobResponse resp;
      grpc::ClientContext c;
      c.set_deadline(Clock::now() + std::chrono::seconds(60));
      grpc::Status st = stub_->RunJob(&c, r, &resp);
      if (!st.ok()) {
        return Direct(absl::StrCat("cairnd on node ", info.node(), " could not start job ", o_.job, " (",
                                   Describe(st), "): it runs without checkpoints"));
      }
    }
    Tell(o_.channel, "managed");
    std::thread watcher([this] { Watch(); });
    int status = Follow(restored);
    done_ = true;
    watcher.join();
    return status;
  }

 private:
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
    if (!stub_->GetJob(&c, r, &resp).ok() || resp.checkpoints().empty()) return "(unknown)";
    const dapi::Checkpoint* newest = &resp.checkpoints(0);
    for (const dapi::Checkpoint& cp : resp.checkpoints()) {
      if (cp.state() == "complete" && cp.id() > newest->id()) newest = &cp;
    }
    std::string id = newest->id();
    absl::Time t;
    std::string stamp = id.substr(id.find_last_of('-') + 1);
    if (stamp.size() == 18 && absl::ParseTime("%Y%m%dT%H%M%S", stamp.substr(0, 15), &t, nullptr)) {
      double age = absl::ToDoubleSeconds(absl::Now() - t) - std::stoi(stamp.substr(15)) / 1000.0;
      return absl::StrFormat("%s (taken %.1f s ago)", id, age);
    }
    return id;
  }

  // Removes a record of this job's name that does not run (and its checkpoints).
  void Forget() {
    dapi::DeleteJobRequest d;
    d.set_name(name_);
    dapi::DeleteJobResponse resp;
    grpc::ClientContext c;
    c.set_deadline(Clock::now() + std::chrono::seconds(60));
    (void)stub_->DeleteJob(&c, d, &resp);
  }

  // Copies the job's output to the task's until it ends; returns the task's exit status.
  int Follow(bool restored) {
    int64_t tail = restored ? 0 : int64_t{1} << 40;  // a new job: all it wrote; a restored one: what is new
    auto lost_since = std::chrono::steady_clock::time_point();
    for (;;) {
      dapi::AttachJobRequest r;
      r.set_name(name_);
      r.set_tail_bytes(tail);
      r.set_bound(true);
      grpc::ClientContext c;
      auto stream = stub_->AttachJob(&c, r);
      dapi::AttachJobOutput o;
      bool got_any = false;
      while (stream->Read(&o)) {
        got_any = true;
        if (!o.data().empty()) (void)WriteAll(o.stderr() ? err_ : out_, o.data());
        if (!o.state().empty()) {
          stream->Finish();
          return Ended(o);
        }
      }
      grpc::Status st = stream->Finish();
      // cairnd restarted (its jobs run on): attach again, for up to 2 minutes.
      if (got_any) lost_since = std::chrono::steady_clock::time_point();
      if (lost_since == std::chrono::steady_clock::time_point()) lost_since = std::chrono::steady_clock::now();
      if (std::chrono::steady_clock::now() - lost_since > std::chrono::minutes(2)) {
        say_("lost job %u: cairnd at %s has not answered for 2 minutes (%s)", o_.job, socket_, Describe(st));
        return 1;
      }
      tail = 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  }

  int Ended(const dapi::AttachJobOutput& o) {
    if (stopping_) {
      // Checkpointed and stopped for SLURM's requeue (cairnd may end the job before it answers
      // the checkpoint call): its checkpoints stay for the next start.
      while (!stopped_) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      return 128 + SIGTERM;
    }
    const dapi::Health& h = o.health();
    int status = h.signal() != 0 ? 128 + h.signal() : h.exit_code();
    // The job is over: its checkpoints are not needed by any later start.
    Forget();
    return status;
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
    }
  }

  // Checkpoints the job and stops it (once); with `requeue`, then asks SLURM to requeue the job.
  void Stop(bool requeue) {
    if (stopping_.exchange(true)) return;
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
      stopped_ = true;
      say_("job %u checkpointed (%s, the job paused %.2f s) and stopped in %.2f s: a requeued start goes on from here",
           o_.job, resp.checkpoint().id(), resp.checkpoint().frozen_s(), took);
    } else {
      // The job keeps its older checkpoints; SLURM ends the task anyway: end the job now.
      stopped_ = true;
      say_("job %u: the checkpoint at the stop failed after %.2f s (%s): a requeued start goes on from its previous "
           "checkpoint, if it has one",
           o_.job, took, Describe(st));
      dapi::KillJobRequest k;
      k.set_name(name_);
      dapi::KillJobResponse kr;
      grpc::ClientContext kc;
      kc.set_deadline(Clock::now() + std::chrono::seconds(90));
      (void)stub_->KillJob(&kc, k, &kr);
    }
    // A job SLURM preempts (its PreemptTime set) that ends within its grace time is counted as
    // cancelled, not requeued: requeue it now (which also frees its node at once). Any other
    // SIGTERM (scancel, the time limit, scontrol requeue) leaves the decision to SLURM.
    if (!requeue) {
      auto job = ScontrolShow("job", std::to_string(o_.job));
      requeue = job.ok() && (*job)["PreemptTime"] != "None" && !(*job)["PreemptTime"].empty() &&
                (*job)["Requeue"] == "1";
    }
    if (requeue) Requeue();
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
  std::atomic<bool> done_{false}, stopping_{false}, stopped_{false}, channel_open_{true};
};

}  // namespace

std::string JobName(uint32_t job, uint32_t step, uint32_t task) {
  if (step == kBatchStep) return absl::StrCat("slurm-", job);
  return absl::StrCat("slurm-", job, ".", step, ".", task);
}

int RunAgent(const AgentOptions& opts) { return Agent(opts).Run(); }

namespace {
int g_channel = -1;
// Async-signal-safe: one byte per signal to the agent, which is root (a user's process may not
// signal it).
void ForwardSignal(int sig) {
  unsigned char b = static_cast<unsigned char>(sig);
  int saved = errno;
  (void)::write(g_channel, &b, 1);
  errno = saved;
}
}  // namespace

int RunRelay(pid_t agent, int channel, const std::vector<std::string>& argv) {
  g_channel = channel;
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
