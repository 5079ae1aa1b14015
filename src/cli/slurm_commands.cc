#include "cli/slurm_commands.h"

#include <cstdio>
#include <string>
#include <vector>

#include <unistd.h>

#include <chrono>
#include <functional>
#include <filesystem>
#include <fstream>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "daemon.grpc.pb.h"
#include "integrations/slurm/agent.h"
#include "integrations/slurm/scontrol.h"
#include "integrations/slurm/task_wire.h"

namespace cairn::cli {

struct SlurmCommands::Options {
  CLI::App* slurm = nullptr;
  CLI::App* agent = nullptr;
  CLI::App* task = nullptr;
  slurm::AgentOptions a;
  std::string interval;
  pid_t agent_pid = 0;
  int channel = -1;
  std::vector<std::string> command;
  CLI::App* migrate = nullptr;
  std::string job, to;
  double timeout_s = 300;
  CLI::App* setup = nullptr;
  std::string plugin, socket = "/run/cairn/cairnd.sock", node;
  bool write = false;
};

SlurmCommands::SlurmCommands(CLI::App& app) : o_(std::make_unique<Options>()) {
  Options& o = *o_;
  o.slurm = app.add_subcommand("slurm", "SLURM: jobs submitted with --cairn (the SPANK plugin) run under cairnd");
  o.agent = o.slurm->add_subcommand("agent", "A task's agent (started by the SPANK plugin)")->group("");
  o.agent->add_option("--channel", o.a.channel)->required();
  o.agent->add_option("--job", o.a.job)->required();
  o.agent->add_option("--step", o.a.step)->required();
  o.agent->add_option("--task", o.a.task)->required();
  o.agent->add_option("--restart-count", o.a.restart_count);
  o.agent->add_option("--cpus", o.a.cpus);
  o.agent->add_option("--memory-mb", o.a.memory_mb);
  o.agent->add_option("--uid", o.a.uid)->required();
  o.agent->add_option("--gid", o.a.gid)->required();
  o.agent->add_option("--groups", o.a.groups);
  o.agent->add_option("--socket", o.a.socket);
  o.agent->add_option("--interval", o.interval);
  o.task = o.slurm->add_subcommand("task", "A task's relay (exec'd by the SPANK plugin)")->group("");
  o.task->add_option("--agent", o.agent_pid)->required();
  o.task->add_option("--channel", o.channel)->required();
  o.task->add_option("command", o.command)->required();

  o.migrate = o.slurm->add_subcommand(
      "migrate", "Move a running --cairn job to another node: checkpoint and stop it, requeue it there, restore it");
  o.migrate->add_option("job", o.job, "The SLURM job id")->required();
  o.migrate->add_option("--to", o.to, "The SLURM node to run it on")->required();
  o.migrate->add_option("--timeout", o.timeout_s, "Seconds to wait for it to run there (default 300)");

  o.setup = o.slurm->add_subcommand(
      "setup", "Print what slurm.conf and plugstack.conf need for --cairn jobs, and check this node's part");
  o.setup->add_option("--plugin", o.plugin, "The SPANK plugin cairn_spank.so (default: the one installed with cairn)");
  o.setup->add_option("--socket", o.socket, "cairnd's socket on the nodes (%n: the SLURM node name)");
  o.setup->add_flag("--write", o.write, "Add the plugin's line to the plugstack.conf slurm.conf names, if missing");
  o.setup->add_option("--node", o.node, "This node's SLURM name, for the socket's %n (default: the host name)");
}

SlurmCommands::~SlurmCommands() = default;

bool SlurmCommands::Parsed() const { return o_->slurm->parsed(); }

int SlurmCommands::Run() {
  Options& o = *o_;
  if (o.agent->parsed()) {
    if (!o.interval.empty() && !slurm::ParseInterval(o.interval.c_str(), &o.a.interval_s)) {
      std::fprintf(stderr, "cairn slurm agent: --interval %s: give seconds, or 90s, 10m, 2h\n", o.interval.c_str());
      return 2;
    }
    return slurm::RunAgent(o.a);
  }
  if (o.task->parsed()) return slurm::RunRelay(o.agent_pid, o.channel, o.command);
  if (o.migrate->parsed()) return Migrate();
  if (o.setup->parsed()) return Setup();
  std::printf("%s", o.slurm->help().c_str());
  return 2;
}

namespace {

int Failed(const std::string& what) {
  std::fprintf(stderr, "cairn slurm: %s\n", what.c_str());
  return 1;
}

// The installed plugin: LIBDIR/cairn/cairn_spank.so under the prefix of this executable, or
// beside it (a build tree).
std::string DefaultPlugin() {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  for (const std::filesystem::path& p :
       {self.parent_path() / "cairn_spank.so", self.parent_path().parent_path() / "lib/cairn/cairn_spank.so",
        self.parent_path().parent_path() / "lib/x86_64-linux-gnu/cairn/cairn_spank.so"}) {
    if (std::filesystem::exists(p, ec)) return p.string();
  }
  return (self.parent_path().parent_path() / "lib/cairn/cairn_spank.so").string();
}

}  // namespace

// requeuehold (SLURM sends the job SIGTERM: its agent checkpoints it and stops it), the node
// requested while it is pending, release: it starts there and its agent restores the checkpoint.
int SlurmCommands::Migrate() {
  Options& o = *o_;
  auto job = slurm::ScontrolShow("job", o.job);
  if (!job.ok()) return Failed(std::string(job.status().message()));
  if ((*job)["JobState"] != "RUNNING") {
    return Failed(absl::StrCat("job ", o.job, " is ", (*job)["JobState"], ", not RUNNING: only a running job is moved"));
  }
  std::string from = (*job)["BatchHost"];
  if (from == o.to) return Failed(absl::StrCat("job ", o.job, " already runs on node ", o.to));
  auto node = slurm::ScontrolShow("node", o.to);
  if (!node.ok()) return Failed(absl::StrCat("--to ", o.to, ": ", node.status().message()));
  auto t0 = std::chrono::steady_clock::now();
  auto deadline = t0 + std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  auto wait_for = [&](const std::string& what, const std::function<bool(std::map<std::string, std::string>&)>& done)
      -> absl::Status {
    for (;;) {
      auto j = slurm::ScontrolShow("job", o.job);
      if (j.ok() && done(*j)) return absl::OkStatus();
      if (std::chrono::steady_clock::now() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat("job ", o.job, " did not ", what, " within ", o.timeout_s,
                                                        " s (it is ", j.ok() ? (*j)["JobState"] : "unknown", ")"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
  };
  if (auto r = slurm::Scontrol({"requeuehold", o.job}); !r.ok()) return Failed(std::string(r.status().message()));
  std::printf("job %s on node %s: checkpointing and stopping it (requeued, held)\n", o.job.c_str(), from.c_str());
  absl::Status st = wait_for("stop", [](auto& j) { return j["JobState"] == "PENDING"; });
  if (!st.ok()) return Failed(std::string(st.message()));
  auto moved = slurm::Scontrol({"update", "jobid=" + o.job, "nodelist=" + o.to});
  auto released = slurm::Scontrol({"release", o.job});
  if (!moved.ok()) return Failed(absl::StrCat(moved.status().message(), "; the job was released where SLURM puts it"));
  if (!released.ok()) return Failed(absl::StrCat(released.status().message(), "; `scontrol release ", o.job, "` by hand"));
  st = wait_for("start on " + o.to, [&](auto& j) { return j["JobState"] == "RUNNING" && j["BatchHost"] == o.to; });
  if (!st.ok()) return Failed(std::string(st.message()));
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("job %s moved from node %s to node %s in %.1f s: it goes on from the checkpoint taken when it stopped "
              "(its ReqNodeList stays %s: `scontrol update jobid=%s nodelist=` clears it once it ends)\n",
              o.job.c_str(), from.c_str(), o.to.c_str(), took, o.to.c_str(), o.job.c_str());
  return 0;
}

// What the cluster needs, then this node's part checked (the others': run it there).
int SlurmCommands::Setup() {
  Options& o = *o_;
  std::string plugin = o.plugin.empty() ? DefaultPlugin() : o.plugin;
  std::error_code ec;
  std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  std::string line = absl::StrCat("optional ", plugin, " cairn=", self, " socket=", o.socket);
  std::printf(
      "plugstack.conf (slurm.conf's PlugStackConfig; every node, and where sbatch/srun run):\n  %s\n"
      "slurm.conf:\n"
      "  JobRequeue=1                  requeued jobs come back (or sbatch --requeue per job)\n"
      "  PreemptMode=REQUEUE           on the partitions that may be preempted, with a GraceTime\n"
      "  KillWait=30                   at least what a job's checkpoint takes: SLURM sends SIGTERM (the agent\n"
      "                                checkpoints and stops the job), then SIGKILL KillWait seconds later\n"
      "  SlurmctldParameters=preempt_send_user_signal\n"
      "                                with sbatch --signal=B:TERM, a preempted job is checkpointed at the start\n"
      "                                of its grace time instead of its end\n"
      "every node: cairnd with the same --storage (dir:/SHARED/PATH or s3://BUCKET) and --image-key file\n\n",
      line.c_str());
  bool all = true;
  auto report = [&](bool ok, const std::string& what) {
    all = all && ok;
    std::printf("%-4s %s\n", ok ? "ok" : "MISSING", what.c_str());
  };
  report(std::filesystem::exists(plugin, ec), "the plugin " + plugin);
  auto config = slurm::ScontrolShow("config", "");
  if (!config.ok()) {
    report(false, absl::StrCat("slurmctld's configuration: ", config.status().message()));
  } else {
    std::string plugstack = (*config)["PlugStackConfig"];
    std::ifstream in(plugstack);
    std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    bool listed = absl::StrContains(content, "cairn_spank.so");
    if (!listed && o.write) {
      std::ofstream out(plugstack, std::ios::app);
      out << line << "\n";
      listed = static_cast<bool>(out);
      if (listed) std::printf("added to %s: %s\n", plugstack.c_str(), line.c_str());
    }
    report(listed, absl::StrCat("cairn_spank.so in ", plugstack.empty() ? "(no PlugStackConfig)" : plugstack,
                                listed ? "" : " (cairn slurm setup --write adds it)"));
    report((*config)["JobRequeue"] == "1", "JobRequeue=1 (now " + (*config)["JobRequeue"] + ")");
    int kill_wait = 0;
    (void)absl::SimpleAtoi(absl::StripSuffix((*config)["KillWait"], " sec"), &kill_wait);
    report(kill_wait >= 10, absl::StrCat("KillWait of at least 10 s for the checkpoint at SIGTERM (now ",
                                         (*config)["KillWait"], ")"));
    report(absl::StrContains((*config)["PreemptMode"], "REQUEUE"),
           "PreemptMode REQUEUE (now " + (*config)["PreemptMode"] + ")");
  }
  char host[256] = "";
  ::gethostname(host, sizeof host);
  std::string socket = o.socket;
  if (size_t at = socket.find("%n"); at != std::string::npos) socket.replace(at, 2, o.node.empty() ? host : o.node);
  auto stub = cairn::daemon::api::Daemon::NewStub(
      grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
  cairn::daemon::api::NodeInfoResponse info;
  grpc::ClientContext c;
  c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Status st = stub->NodeInfo(&c, cairn::daemon::api::NodeInfoRequest(), &info);
  report(st.ok(), absl::StrCat("cairnd on this node at ", socket, st.ok() ? "" : ": " + st.error_message()));
  if (st.ok()) {
    bool shared = info.storage() != "local" && !info.storage().empty();
    report(shared, absl::StrCat("a shared --storage for cairnd (now ", info.storage(), ")"));
  }
  std::printf(all ? "this node is ready for --cairn jobs\n" : "some parts are missing: see above\n");
  return all ? 0 : 1;
}

}  // namespace cairn::cli
