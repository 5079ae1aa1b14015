#!/usr/bin/env bash
# Dump and restore of process trees of 1, 8 and 64 processes sharing SIZE MiB
# (MAP_SHARED|MAP_ANONYMOUS): total time and cost per process. Images go to tmpfs, so the
# figures show the engine's own cost. Prints a markdown table for docs/performance.md.
#
#   sudo bash bench/tree_dump_restore.sh [SIZE_MIB]     (default 1024; NPROCS="1 8 64" the tree sizes)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
bench_build cairn tree_holder
mib=${1:-1024}
where=${BENCH_DIR:-/dev/shm}
now() { date +%s.%N; }
echo "| processes | shared | dump s | dump per process ms | restore s | restore per process ms |"
echo "|---:|---:|---:|---:|---:|---:|"
for n in ${NPROCS:-1 8 64}; do
  for rep in 1 2; do
    work=$(mktemp -d "$where/cairn-tree-bench.XXXXXX")
    (
      for fd in $(ls /proc/$BASHPID/fd); do if ((fd > 2)); then eval "exec $fd>&-"; fi; done
      exec "$build/bench/tree_holder" "$n" "$mib" "$work/ready" </dev/null >/dev/null 2>&1
    ) &
    pid=$!
    while [[ ! -f $work/ready ]]; do sleep 0.05; done
    t0=$(now)
    "$build/cairn" dump --tree --pid "$pid" --dir "$work/ckpt" >/dev/null
    t1=$(now)
    { wait "$pid"; } 2>/dev/null || true
    # The killed children are reaped by init; restore needs their pids free.
    while pgrep -x tree_holder >/dev/null; do sleep 0.05; done
    t2=$(now)
    "$build/cairn" restore --dir "$work/ckpt" --detach >/dev/null
    t3=$(now)
    kill -9 "$pid" 2>/dev/null || true  # the children die with it (PR_SET_PDEATHSIG)
    sleep 0.3
    rm -rf "$work"
    awk -v n="$n" -v m="$mib" -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" 'BEGIN {
      printf "| %d | %d MiB | %.3f | %.1f | %.3f | %.1f |\n", n, m, b - a, 1000 * (b - a) / n, d - c, 1000 * (d - c) / n }'
  done
done
