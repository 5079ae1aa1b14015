#!/bin/bash
# cairnd under periodic checkpoints: N jobs, each checkpointed every S seconds, for D seconds.
# Reports the daemon's CPU use (its own utime+stime over the run, as a share of one core), the
# checkpoint latency p50/p99 and the jobs' frozen time p50/p99 (from the daemon's metrics), and the
# jobs' slowdown: each job counts in a loop; its rate with checkpoints against a run without.
#
# Usage: bench/daemon_periodic.sh [BUILD_DIR] [JOBS] [EVERY_S] [DURATION_S]   (root)
set -euo pipefail
BUILD=${1:-build}; N=${2:-50}; EVERY=${3:-10}; DUR=${4:-60}
CAIRN=$(realpath "$BUILD/cairn"); CAIRND=$(realpath "$BUILD/cairnd")
T=$(mktemp -d /tmp/cairnd-bench-XXXXXX); chmod 700 "$T"
# Everything this script starts is found again from files, since phases run in subshells: the
# daemons' pids in $T/daemons, the jobs in the cgroups cairn/bench-$$.* .
NODE=bench-$$
kill_jobs() {
  for d in /sys/fs/cgroup/freezer/cairn/$NODE.*; do
    [ -d "$d" ] && for p in $(cat "$d/cgroup.procs"); do kill -9 "$p" 2>/dev/null || true; done
  done
  sleep 0.5
  for h in freezer memory cpu pids; do rmdir /sys/fs/cgroup/$h/cairn/$NODE.* 2>/dev/null || true; done
}
cleanup() {
  kill_jobs
  [ -f "$T/daemons" ] && for p in $(cat "$T/daemons"); do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$T"
}
trap cleanup EXIT
# The metrics answer only a scrape with the daemon's token (docs/daemon.md, Metrics); curl reads
# the header from a file, so the token never shows in ps.
TOKEN=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
(umask 077; echo "$TOKEN" > "$T/token"; echo "Authorization: Bearer $TOKEN" > "$T/auth-header")
# A job that counts as fast as bash can and writes its count every second (forking nothing).
JOB='i=0; s=$SECONDS; while true; do i=$((i+1)); if [ $SECONDS != $s ]; then echo $i; i=0; s=$SECONDS; fi; done'

run_phase() {  # $1: checkpoint interval (0: none); prints the mean count per second per job
  SOCK=$T/d-$1.sock
  "$CAIRND" --node "$NODE" --state-dir "$T/state-$1" --socket "$SOCK" --metrics-port 0 --token-file "$T/token" \
    --cairn-bin "$CAIRN" \
    > "$T/log-$1" 2>&1 &
  DPID=$!
  echo "$DPID" >> "$T/daemons"
  for _ in $(seq 100); do [ -S "$SOCK" ] && "$CAIRN" job list --socket "$SOCK" >/dev/null 2>&1 && break; sleep 0.1; done
  for k in $(seq "$N"); do
    "$CAIRN" job run --socket "$SOCK" --name "j$k" --checkpoint-every "$1" --keep 2 -- /bin/bash -c "$JOB" >/dev/null
  done
  local t0; t0=$(awk '{print $14+$15}' "/proc/$DPID/stat")
  sleep "$DUR"
  local t1; t1=$(awk '{print $14+$15}' "/proc/$DPID/stat")
  local port; port=$(grep -o 'metrics=http://127.0.0.1:[0-9]*' "$T/log-$1" | grep -o '[0-9]*$')
  curl -s -H @"$T/auth-header" "http://127.0.0.1:$port/metrics" > "$T/metrics-$1"
  local rate; rate=$(for k in $(seq "$N"); do tail -n +3 "$T/state-$1/jobs/j$k/stdout.log" | head -n -1; done |
    awk '{s+=$1; n++} END {if (n) printf "%.0f", s/n; else print 0}')
  echo "$1 $(( (t1 - t0) )) $rate"
  kill_jobs
  kill "$DPID"; wait "$DPID" 2>/dev/null || true; DPID=
}

HZ=$(getconf CLK_TCK)
read -r _ base_ticks base_rate < <(run_phase 0)
read -r _ ticks rate < <(run_phase "$EVERY")
M=$T/metrics-$EVERY
q() { grep "^$1{quantile=\"$2\"}" "$M" | awk '{printf "%.3f", $2}'; }
echo "machine: $(nproc) CPUs, $(uname -r); $N jobs, checkpoint every $EVERY s, $DUR s per phase"
echo "checkpoints complete: $(grep '^cairnd_checkpoints_total{result="complete"}' "$M" | awk '{print $2}'), failed: $(grep '^cairnd_checkpoints_total{result="failed"}' "$M" | awk '{print $2}')"
echo "checkpoint latency s: p50 $(q cairnd_checkpoint_seconds 0.5) p99 $(q cairnd_checkpoint_seconds 0.99)"
echo "job frozen s:         p50 $(q cairnd_checkpoint_frozen_seconds 0.5) p99 $(q cairnd_checkpoint_frozen_seconds 0.99)"
awk -v t="$ticks" -v b="$base_ticks" -v hz="$HZ" -v d="$DUR" 'BEGIN {printf "daemon CPU: %.1f%% of one core with checkpoints, %.1f%% without\n", 100*t/hz/d, 100*b/hz/d}'
awk -v r="$rate" -v b="$base_rate" 'BEGIN {if (b > 0) printf "job rate: %d/s with checkpoints, %d/s without: slowdown %.1f%%\n", r, b, 100*(1-r/b)}'
