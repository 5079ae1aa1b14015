#!/bin/bash
# How long a dump's killed process takes to die (dump.log's `kill` stage: SIGKILL sent until its
# exit is reaped, its memory freed) for a process holding SIZE_MIB (default 1024) beside BUSY
# (default 2) busy loops, RUNS times (default 5). CGROUP=own (default) puts it in a v1 cpu
# cgroup of its own, as a container runtime does; CGROUP=root leaves it in the root cgroup.
# The dump raises the share of such a cgroup while its processes die (proc/cpu_share_boost.h);
# to see the kill without it, run this on a checkout before that commit (e15cf30~1).
# Usage: bash bench/dump_kill_busy.sh  (as root, from the repository's root)
set -euo pipefail
source bench/common.sh
bench_build cairn
size=${SIZE_MIB:-1024}
runs=${RUNS:-5}
where=${CGROUP:-own}
work=$(mktemp -d /tmp/cairn-bench-kill-XXXXXX)
cg=/sys/fs/cgroup/cpu/cairn-bench-kill-$$
cleanup() {
  stop_busy
  rmdir "$cg" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
gcc -O2 -static -o "$work/mem_holder" bench/mem_holder.c
[[ $where == root ]] || mkdir "$cg"
echo "$size MiB process, ${BUSY:-2} busy loops, cpu cgroup: $where, $(nproc) cores"
start_busy "${BUSY:-2}"
for ((i = 1; i <= runs; i++)); do
  rm -rf "$work/ck" "$work/ready"
  (exec 251>&- 2>/dev/null; exec setsid "$work/mem_holder" "$size" "$work/ready" </dev/null >/dev/null 2>&1) &
  pid=$!
  [[ $where == root ]] || echo "$pid" >"$cg/cgroup.procs"
  while [[ ! -e $work/ready ]]; do sleep 0.05; done
  "$build/cairn" -vv dump --pid "$pid" --dir "$work/ck" 2>&1 | grep -o 'stage=kill ms=[0-9.]*' || echo "run $i: no kill stage"
  wait "$pid" 2>/dev/null || true  # (killed: its status is not the point)
done
