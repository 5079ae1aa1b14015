// cairn_spank.so: the SPANK plugin that runs a SLURM job's tasks under cairnd, so that a
// preempted, requeued or lost job comes back from its newest checkpoint instead of from zero.
//
//   plugstack.conf:  optional /usr/local/lib/cairn/cairn_spank.so [cairn=PATH] [socket=PATH]
//   (`cairn slurm setup` prints the line; socket's %n is the SLURM node's name)
//   job:             sbatch --cairn[=INTERVAL] job.sh   (or #SBATCH --cairn, srun --cairn)
//
// A job without --cairn is not touched: every callback returns at once. With it, in each task
// (slurmstepd's child, before the user's command):
//   1. task_init_privileged (root): a socket pair, and the agent forked from the task and run as
//      root (`cairn slurm agent`, src/integrations/slurm/agent.h): it talks to the node's cairnd
//      over its root-only socket. Its uid, gid and groups come from SLURM here, not from the user.
//   2. task_init (the job's user, its environment, working directory and output set up): the
//      task sends the agent its command, environment, directory and node name, with its stdout
//      and stderr descriptors, and execs the relay (`cairn slurm task`), which waits for the
//      agent, forwards SLURM's signals to it, and exits with the job's status; or, when the agent
//      says cairnd cannot take the job, runs the command itself.
// The plugin links nothing but libc and libstdc++: it is loaded by slurmd, slurmstepd, sbatch and srun.
// Nothing here fails a job because of cairn: when the agent cannot be started the task runs as
// SLURM would run it, and the log says why.
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <string>
#include <vector>

extern "C" {
#include <slurm/slurm.h>
#include <slurm/spank.h>
}

#include "integrations/slurm/task_wire.h"

// SPANK_PLUGIN() defines these as const, which C++ gives internal linkage: SLURM could not find them.
extern "C" {
extern const char plugin_name[] = "cairn";
extern const char plugin_type[] = "spank";
extern const unsigned int plugin_version = SLURM_VERSION_NUMBER;
extern const unsigned int spank_plugin_version = 0;
}

namespace {

constexpr char kDefaultCairn[] = CAIRN_INSTALLED_BIN;  // where `cmake --install` puts it
constexpr char kDefaultSocket[] = "/run/cairn/cairnd.sock";

// The agent of this task (set in task_init_privileged, used in task_init: the same process).
pid_t g_agent = -1;
int g_channel = -1;

int OnCairnOption(int, const char* optarg, int) {
  if (optarg == nullptr || *optarg == '\0') return 0;
  double seconds = 0;
  if (!cairn::slurm::ParseInterval(optarg, &seconds)) {
    slurm_error("cairn: --cairn=%s: give the checkpoint interval as a number of seconds, or with a unit: 90s, 10m, 2h",
                optarg);
    return -1;
  }
  return 0;
}

struct spank_option g_option = {
    const_cast<char*>("cairn"), const_cast<char*>("[INTERVAL]"),
    const_cast<char*>("Run the job's tasks under cairn: checkpointed every INTERVAL (default 10m; 90s, 10m, 2h) into "
                      "the cluster's shared store, and restored from the newest checkpoint when SLURM requeues the "
                      "job (preemption, node failure, scontrol requeue)"),
    2 /* optional argument */, 0, OnCairnOption};

struct PluginArgs {
  std::string cairn = kDefaultCairn;
  std::string socket = kDefaultSocket;
};

PluginArgs ParseArgs(int ac, char** av) {
  PluginArgs a;
  for (int i = 0; i < ac; ++i) {
    if (strncmp(av[i], "cairn=", 6) == 0) a.cairn = av[i] + 6;
    else if (strncmp(av[i], "socket=", 7) == 0) a.socket = av[i] + 7;
    else slurm_error("cairn: plugstack.conf: unknown argument '%s' (cairn=PATH, socket=PATH)", av[i]);
  }
  return a;
}

// Whether this job asked for cairn (and its argument).
bool Asked(spank_t sp, std::string* interval) {
  char* arg = nullptr;
  if (spank_option_getopt(sp, &g_option, &arg) != ESPANK_SUCCESS) return false;
  *interval = arg != nullptr ? arg : "";
  return true;
}

template <typename T>
std::string Item(spank_t sp, spank_item_t item) {
  T v{};
  if (spank_get_item(sp, item, &v) != ESPANK_SUCCESS) return "";
  return std::to_string(v);
}

}  // namespace

extern "C" int slurm_spank_init(spank_t sp, int, char**) {
  spank_context_t ctx = spank_context();
  if (ctx == S_CTX_LOCAL || ctx == S_CTX_ALLOCATOR || ctx == S_CTX_REMOTE) {
    if (spank_option_register(sp, &g_option) != ESPANK_SUCCESS) {
      slurm_error("cairn: cannot register the --cairn option");
    }
  }
  return 0;
}

// Root, in the task's process, before SLURM drops to the job's user.
extern "C" int slurm_spank_task_init_privileged(spank_t sp, int ac, char** av) {
  std::string interval;
  if (!spank_remote(sp) || !Asked(sp, &interval)) return 0;
  PluginArgs args = ParseArgs(ac, av);
  uid_t uid = 0;
  gid_t gid = 0;
  if (spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS || spank_get_item(sp, S_JOB_GID, &gid) != ESPANK_SUCCESS) {
    slurm_error("cairn: cannot read the job's user: the task runs without cairn");
    return 0;
  }
  std::string groups;
  gid_t* gids = nullptr;
  int ngids = 0;
  if (spank_get_item(sp, S_JOB_SUPPLEMENTARY_GIDS, &gids, &ngids) == ESPANK_SUCCESS) {
    for (int i = 0; i < ngids; ++i) groups += (i > 0 ? "," : "") + std::to_string(gids[i]);
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    slurm_error("cairn: socketpair: %s: the task runs without cairn", strerror(errno));
    return 0;
  }
  std::vector<std::string> argv = {args.cairn,
                                   "slurm",
                                   "agent",
                                   "--channel",
                                   "3",
                                   "--job",
                                   Item<uint32_t>(sp, S_JOB_ID),
                                   "--step",
                                   Item<uint32_t>(sp, S_JOB_STEPID),
                                   "--task",
                                   Item<uint32_t>(sp, S_TASK_GLOBAL_ID),
                                   "--restart-count",
                                   Item<uint32_t>(sp, S_SLURM_RESTART_COUNT),
                                   "--uid",
                                   std::to_string(uid),
                                   "--gid",
                                   std::to_string(gid),
                                   "--groups",
                                   groups,
                                   "--socket",
                                   args.socket};
  if (!interval.empty()) argv.insert(argv.end(), {"--interval", interval});
  // The allocation, for the cairnd job's limits (its processes leave the step's cgroup): the batch
  // script has the job's CPUs on the node; a step's task its CPUs per task; memory is the step's
  // on this node shared by its tasks here (MB; 0 when SLURM tracks none).
  uint32_t step = 0, local_tasks = 0, cpus = 0, per_task = 0;  // each item's own type (spank.h)
  uint16_t job_cpus = 0;
  uint64_t mem = 0;
  (void)spank_get_item(sp, S_JOB_STEPID, &step);
  if (step == SLURM_BATCH_SCRIPT) {
    if (spank_get_item(sp, S_JOB_NCPUS, &job_cpus) == ESPANK_SUCCESS) cpus = job_cpus;
  } else if (spank_get_item(sp, S_STEP_CPUS_PER_TASK, &per_task) == ESPANK_SUCCESS) {
    cpus = per_task;
  }
  if (spank_get_item(sp, S_STEP_ALLOC_MEM, &mem) != ESPANK_SUCCESS) mem = 0;
  if (spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &local_tasks) == ESPANK_SUCCESS && local_tasks > 1) {
    mem /= local_tasks;
  }
  if (cpus > 0) argv.insert(argv.end(), {"--cpus", std::to_string(cpus)});
  if (mem > 0) argv.insert(argv.end(), {"--memory-mb", std::to_string(mem)});
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) {
    slurm_error("cairn: fork the agent: %s: the task runs without cairn", strerror(errno));
    close(sv[0]);
    close(sv[1]);
    return 0;
  }
  if (pid == 0) {
    // The agent: its channel on fd 3, stdin from /dev/null; it keeps SLURM's stdout/stderr
    // (slurmstepd's log) for what it says before it has the task's own. Only async-signal-safe
    // calls between fork and exec (this is a child of a threaded slurmstepd's child).
    int fd = sv[1];
    if (fd == 3) {
      fcntl(3, F_SETFD, 0);
    } else if (dup2(fd, 3) != 3) {
      _exit(127);
    }
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, 0);
    close_range(4, ~0U, 0);
    execv(cargv[0], cargv.data());
    static const char kFailed[] = "cairn: cannot run the agent (the plugin's cairn= path)\n";
    (void)!write(2, kFailed, sizeof kFailed - 1);
    _exit(127);
  }
  close(sv[1]);
  g_agent = pid;
  g_channel = sv[0];
  return 0;
}

// The job's user, its environment, directory and output in place: hand the task to the agent and
// become the relay.
extern "C" int slurm_spank_task_init(spank_t sp, int ac, char** av) {
  if (g_agent <= 0 || !spank_remote(sp)) return 0;
  PluginArgs args = ParseArgs(ac, av);
  int argc = 0;
  char** task_argv = nullptr;
  char** env = nullptr;
  // Whatever goes wrong here, the task runs as SLURM would run it: closing the channel before
  // the relay's word tells the agent to start nothing.
  if (spank_get_item(sp, S_JOB_ARGV, &argc, &task_argv) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_ENV, &env) != ESPANK_SUCCESS || argc < 1) {
    slurm_error("cairn: cannot read the task's command or environment: the task runs without cairn");
    close(g_channel);
    return 0;
  }
  if (access(args.cairn.c_str(), X_OK) != 0) {
    slurm_error("cairn: %s: %s (as the job's user): the task runs without cairn", args.cairn.c_str(), strerror(errno));
    close(g_channel);
    return 0;
  }
  cairn::slurm::TaskRequest req;
  req.argv.assign(task_argv, task_argv + argc);
  for (char** e = env; *e != nullptr; ++e) req.env.emplace_back(*e);
  char cwd[4096];
  req.workdir = getcwd(cwd, sizeof cwd) != nullptr ? cwd : "/";
  char node[256] = "";
  if (spank_getenv(sp, "SLURMD_NODENAME", node, sizeof node) == ESPANK_SUCCESS) req.node = node;
  std::string error;
  if (!cairn::slurm::SendTaskRequest(g_channel, req, &error)) {
    slurm_error("cairn: hand the task to its agent: %s: the task runs without cairn", error.c_str());
    close(g_channel);
    return 0;
  }
  // The relay: `cairn slurm task --agent PID --channel FD -- COMMAND...`, in the task's own
  // environment (it runs COMMAND itself when cairnd cannot take the task).
  int flags = fcntl(g_channel, F_GETFD);
  if (flags >= 0) fcntl(g_channel, F_SETFD, flags & ~FD_CLOEXEC);
  std::vector<std::string> relay = {args.cairn, "slurm", "task", "--agent", std::to_string(g_agent),
                                    "--channel", std::to_string(g_channel), "--"};
  relay.insert(relay.end(), req.argv.begin(), req.argv.end());
  std::vector<char*> cargv;
  for (std::string& a : relay) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  execve(cargv[0], cargv.data(), env);
  // The agent waits for the relay's word before it starts anything: without it, it ends.
  slurm_error("cairn: cannot run %s: %s: the task runs without cairn", cargv[0], strerror(errno));
  close(g_channel);
  return 0;
}
