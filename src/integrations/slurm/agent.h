#pragma once
// The two processes a SLURM task with --cairn becomes (spank_plugin.cc starts both):
//
// The agent (`cairn slurm agent`, root, forked before SLURM drops to the job's user): takes the
// task's command, environment and directory from the task (task_wire.h), and has the node's
// cairnd run it as job `slurm-JOBID-uUID` (a step's task: `slurm-JOBID.STEP.TASK-uUID`) as the job's user,
// checkpointed every --interval into cairnd's shared store, or, when SLURM started the job again
// (restart count > 0), restores its newest stored checkpoint (whichever node took it). It copies
// the job's output to the task's stdout and stderr, and exits with the job's status. On SIGTERM
// (preemption's grace time, scontrol requeue, scancel, the time limit) and SIGINT it takes a
// checkpoint that stops the job, so that a requeued job goes on from there; on SIGUSR1 (sbatch
// --signal=B:USR1@T) it does the same and then requeues the job itself. Its attach is bound to the
// job (AttachJobRequest.bound): if the agent dies, cairnd kills the job.
//
// The relay (`cairn slurm task`, the job's user, in the task's own process: SLURM's task pid):
// waits for the agent's word; "managed": passes the signals SLURM sends it to the agent (over
// the channel: a user cannot signal a root process) and exits with the agent's status;
// otherwise (cairnd down, not set up) says why on stderr and execs the command itself, so that
// the job runs as it would without cairn.
#include <sys/types.h>

#include <string>
#include <vector>

namespace cairn::slurm {

struct AgentOptions {
  int channel = 3;
  uint32_t job = 0;
  uint32_t step = 0;
  uint32_t task = 0;
  uint32_t restart_count = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::string groups;  // supplementary gids, "G1,G2,..."
  std::string socket = "/run/cairn/cairnd.sock";  // %n: the SLURM node's name
  double interval_s = 600;
  // What SLURM allocated the task on this node (from the plugin's SPANK items, not from anything
  // the user sets): its CPUs and its memory in MB; 0: not known (no limit).
  double cpus = 0;
  uint64_t memory_mb = 0;
};

// SLURM's step id of a batch script (SLURM_BATCH_SCRIPT in slurm.h).
constexpr uint32_t kBatchStep = 0xfffffffb;

// The cairnd job a task runs as: slurm-JOB-uUID for a batch script, slurm-JOB.STEP.TASK-uUID
// otherwise (the user's uid in it: a job id SLURM reuses, after a reset, for another user's job
// never finds the first one's checkpoints).
std::string JobName(uint32_t job, uint32_t step, uint32_t task, uid_t uid);

// Returns the process's exit status.
int RunAgent(const AgentOptions& opts);
int RunRelay(pid_t agent, int channel, const std::vector<std::string>& argv);

}  // namespace cairn::slurm
