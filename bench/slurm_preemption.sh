#!/usr/bin/env bash
# Work lost per preemption: a batch job with `--cairn` against the same job without it (SLURM's
# own requeue, which starts it over), on a real SLURM cluster of this host (tests/slurm/cluster.sh:
# slurmctld, slurmd n1..n3, PreemptMode=REQUEUE, GraceTime=4, KillWait=30, cred_expire=5) with one
# cairnd per node on a shared directory store.
#
#   BUILD=build RUNS=3 JOB_S=60 bash bench/slurm_preemption.sh
#
# Each run submits tests/slurm/hash_steps.py (about JOB_S seconds of steps) to partition low on n1,
# waits a random fraction (0.2..0.8) of it, and has SLURM requeue it (`scontrol requeue`: what a
# preemption does once its grace time is over, without the grace time and slurmctld's up to 30 s
# of noticing its end, which both modes would wait alike). From the job's own output (each
# start's steps stay: --open-mode=append) it measures:
#   lost    the steps computed twice (the first start's last step minus where the second began),
#           in seconds of the job's own step time;
#   pause   from the first start's last step to the second start's first: what the job waited
#           (SLURM's requeue and start, cairn's checkpoint and restore);
# and prints one line per run (with --cairn, the agent's lines too: the job's pause at the
# checkpoint, the time to store it, the restore's) and the means. For a job of any length preempted at a uniformly
# random time, SLURM alone loses on average half the job (30 minutes of a 1-hour job); with
# --cairn the loss does not grow with the job.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
RUNS=${RUNS:-3}
JOB_S=${JOB_S:-60}
PER_STEP=100000
[[ $(id -u) -eq 0 ]] || { echo "slurm_preemption: run as root" >&2; exit 1; }
cairn=$(realpath "$BUILD/cairn")
cairnd=$(realpath "$BUILD/cairnd")
plugin=$(realpath "$BUILD/cairn_spank.so")
dir=$(mktemp -d /tmp/cairn-bench-slurm-XXXXXX)
pids=()
cleanup() {
  SLURM_CONF=$dir/slurm/slurm.conf scancel -u root 2>/dev/null || true
  for n in n1 n2 n3; do
    "$cairn" job list --socket "$dir/$n.sock" --json 2>/dev/null |
      python3 -c 'import json,sys,os
for j in json.load(sys.stdin).get("jobs", []):
    if j.get("state") == "running": os.kill(j["host_pid"], 9)' 2>/dev/null || true
  done
  bash tests/slurm/cluster.sh stop "$dir/slurm" >/dev/null 2>&1 || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
mkdir -p "$dir/store" "$dir/jobs"
od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$dir/key" && chmod 0600 "$dir/key"
for n in n1 n2 n3; do
  "$cairnd" --node "$n" --state-dir "$dir/$n-state" --socket "$dir/$n.sock" --storage "dir:$dir/store" \
    --image-key "$dir/key" >"$dir/$n.log" 2>&1 251>&- &
  pids+=($!)
done
GRACE_TIME=4 KILL_WAIT=30 bash tests/slurm/cluster.sh start "$dir/slurm" \
  "required $plugin cairn=$cairn socket=$dir/%n.sock" >/dev/null
export SLURM_CONF=$dir/slurm/slurm.conf

# Steps of about 40 ms here: calibrate JOB_S into steps.
step_s=$(python3 - "$PER_STEP" <<'EOF'
import hashlib, sys, time
n = int(sys.argv[1]); h = b"x" * 32; t = time.time()
for _ in range(n): h = hashlib.sha256(h).digest()
print("%.4f" % (time.time() - t))
EOF
)
steps=$(python3 -c "print(max(50, int($JOB_S / $step_s)))")
printf '#!/bin/bash\nexec /usr/bin/python3 -u %s %s %s\n' "$(realpath tests/slurm/hash_steps.py)" "$steps" "$PER_STEP" \
  >"$dir/jobs/job.sh"
chmod +x "$dir/jobs/job.sh"
echo "machine: $(nproc) CPUs, $(uname -r); job: $steps steps of ${step_s} s; runs: $RUNS per mode"

wait_state() {  # JOBID STATE TIMEOUT_S
  local i
  for ((i = 0; i < $3 * 5; i++)); do
    [[ $(scontrol -o show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z]*') == "JobState=$2" ]] && return 0
    sleep 0.2
  done
  echo "job $1 not $2 after $3 s" >&2
  return 1
}

measure() {  # MODE RUN
  local mode=$1 run=$2 out=$dir/jobs/$1-$2.out flags=()
  [[ $mode == cairn ]] && flags=(--cairn=10m)
  local id
  id=$(sbatch --parsable -o "$out" --open-mode=append -p low -w n1 -c 2 --requeue "${flags[@]}" "$dir/jobs/job.sh")
  local at
  at=$(python3 -c "import random; print(int($steps * random.uniform(0.2, 0.8)))")
  until [[ $(grep -c '^step' "$out" 2>/dev/null || true) -ge $at ]]; do sleep 0.1; done
  scontrol requeue "$id"
  wait_state "$id" COMPLETED $((JOB_S * 4 + 120))
  python3 - "$out" "$mode" "$run" "$step_s" <<'EOF'
import sys
out, mode, run, step_s = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
steps, restored = [], False
before = after = None
for line in open(out):
    if "restored on node" in line:
        restored = True
    f = line.split()
    if len(f) == 3 and f[0] == "step":
        i, t = int(f[1]), float(f[2])
        if not restored and steps and i <= steps[-1][0]:
            restored = True
        if restored and after is None:
            after = (i, t)
        if not restored:
            before = (i, t)
        steps.append((i, t))
lost = (before[0] - (after[0] - 1)) * step_s
pause = after[1] - before[1]
print("%-6s run %s: preempted at step %d, went on at step %d: lost %.1f s of work, paused %.1f s" %
      (mode, run, before[0], after[0], lost, pause))
# The agent's own account (checkpoint at the stop: the job's pause, the time to store it; the restore).
for line in open(out):
    if line.startswith("cairn: ") and ("checkpointed (" in line or "restored on node" in line):
        print("         " + line.strip())
with open(out + ".m", "w") as m:
    m.write("%f %f\n" % (lost, pause))
EOF
}

for ((r = 1; r <= RUNS; r++)); do
  measure plain "$r"
  measure cairn "$r"
done
for mode in plain cairn; do
  cat "$dir"/jobs/"$mode"-*.out.m | python3 -c "
import sys
rows = [tuple(map(float, l.split())) for l in sys.stdin]
print('%-6s mean of %d: lost %.1f s of work per preemption, paused %.1f s' % ('$mode', len(rows),
      sum(r[0] for r in rows) / len(rows), sum(r[1] for r in rows) / len(rows)))"
done
