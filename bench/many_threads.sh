#!/usr/bin/env bash
# Dump and restore of one process holding many threads (issue 23's scale table): N threads
# blocked in pause() (bench/threads_holder.c). Whole commands
# timed (what the user waits for); the dump's own "frozen" figure from its summary line. Images
# on tmpfs. Prints a markdown table for docs/performance.md.
#
#   sudo bash bench/many_threads.sh [N...]        (default: 100 1000; BUILD=build, REPS=3)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build-bench}
[[ -f $build/build.ninja ]] || cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCAIRN_TESTS=OFF >/dev/null
ninja -C "$build" cairn threads_holder >/dev/null
counts=("$@")
((${#counts[@]})) || counts=(100 1000)
reps=${REPS:-3}
where=${BENCH_DIR:-/dev/shm}
now() { date +%s.%N; }
# Until the killed holder has been reaped (restore needs its pid free).
gone() { for _ in $(seq 200); do [[ -d /proc/$1 ]] || return 0; sleep 0.02; done; }
echo "this machine: $(nproc) CPUs"
echo "| threads | dump s | frozen s | restore s | restored process's threads |"
echo "|---:|---:|---:|---:|---:|"
for n in "${counts[@]}"; do
  for ((rep = 1; rep <= reps; rep++)); do
    work=$(mktemp -d "$where/cairn-maps-bench.XXXXXX")
    (
      for fd in $(ls /proc/$BASHPID/fd); do if ((fd > 2)); then eval "exec $fd>&-"; fi; done
      exec "$build/bench/threads_holder" "$n" "$work/ready" </dev/null >"$work/holder.out" 2>&1
    ) &
    pid=$!
    disown "$pid"  # bash reaps it when the dump kills it, without a "Killed" line
    while [[ ! -f $work/ready ]]; do
      if ! kill -0 "$pid" 2>/dev/null; then echo "| $n | holder failed: $(cat "$work/holder.out") | | | |"; continue 2; fi
      sleep 0.05
    done
    t0=$(now)
    if ! "$build/cairn" dump --pid "$pid" --dir "$work/ckpt" >"$work/dump.out" 2>&1; then
      echo "| $n | dump failed: $(tail -1 "$work/dump.out") | | | |"
      kill -9 "$pid" 2>/dev/null || true; gone "$pid"; rm -rf "$work"; continue
    fi
    t1=$(now)
    frozen=$(grep -o 'frozen [0-9.]*' "$work/dump.out" | awk '{print $2}')
    gone "$pid"
    t2=$(now)
    if "$build/cairn" restore --dir "$work/ckpt" --detach >"$work/restore.out" 2>&1; then
      t3=$(now)
      held=$(ls /proc/$pid/task 2>/dev/null | wc -l)
      restore=$(awk -v c="$t2" -v d="$t3" 'BEGIN { printf "%.3f", d - c }')
    else
      restore="failed: $(tail -1 "$work/restore.out")"
      held=0
    fi
    kill -9 "$pid" 2>/dev/null || true
    sleep 0.2
    rm -rf "$work"
    awk -v n="$n" -v a="$t0" -v b="$t1" -v f="${frozen:-?}" -v r="$restore" -v h="$held" 'BEGIN {
      printf "| %d | %.3f | %s | %s | %d |\n", n, b - a, f, r, h }'
  done
done
