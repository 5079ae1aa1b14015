#!/usr/bin/env bash
# Time to the program's first useful work after a restore (issue 23): bench/first_work.c holds
# SIZE MiB of random data and, when kicked, sums 1000 words at random places and prints a line
# with the time. After `cairn dump`, each run starts `cairn restore --detach` (eager, or --lazy),
# kicks the program as soon as the command returns, and reports the line's time counted from the
# restore's start; also when the restore returned. Alternates eager and lazy. BUSY=N runs N
# CPU-bound loops beside it. Images on tmpfs. Prints a markdown table for docs/performance.md.
#
#   sudo BUILD=build bash bench/first_work.sh [SIZE_MIB...]   (default 1024; REPS=3, BUSY=0)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
bench_build cairn first_work
sizes=("$@")
((${#sizes[@]})) || sizes=(1024)
reps=${REPS:-3}
busy=${BUSY:-0}
where=${BENCH_DIR:-/dev/shm}
now_ns() { date +%s%N; }
gone() { for _ in $(seq 500); do [[ -d /proc/$1 ]] || return 0; sleep 0.02; done; }
start_busy "$busy"
trap stop_busy EXIT
echo "| MiB | restore | busy loops | restore returned ms | first work ms (from the restore's start) | sum right |"
echo "|---:|---|---:|---:|---:|---|"
# Starts first_work in a new directory: sets pid and work.
start() {
  work=$(mktemp -d "$where/cairn-first-work.XXXXXX")
  (
    for fd in $(ls /proc/$BASHPID/fd); do if ((fd > 2)); then eval "exec $fd>&-"; fi; done
    exec "$build/bench/first_work" "$1" "$work" </dev/null >/dev/null 2>&1
  ) &
  pid=$!
  disown "$pid"
  while [[ ! -f $work/ready ]]; do sleep 0.05; done
}
# Kicks it and waits for its next line.
kick() {
  local lines
  lines=$(wc -l <"$work/out" 2>/dev/null || echo 0)
  printf x >"$work/kick"
  for _ in $(seq 3000); do (($(wc -l <"$work/out" 2>/dev/null || echo 0) > lines)) && break; sleep 0.005; done
}
for mib in "${sizes[@]}"; do
  # What an uninterrupted run sums at its second kick (its data and its random places are the
  # same in every run): the first kick after a restore from a checkpoint taken after one kick.
  start "$mib"
  kick
  kick
  want=$(tail -1 "$work/out" | awk '{print $3}')
  kill -9 "$pid"
  gone "$pid"
  rm -rf "$work"
  for ((rep = 1; rep <= reps; rep++)); do
    for mode in eager lazy; do
      start "$mib"
      kick
      : >"$work/out"
      "$build/cairn" dump --pid "$pid" --dir "$work/ckpt" >/dev/null
      gone "$pid"
      t0=$(now_ns)
      if [[ $mode == lazy ]]; then
        "$build/cairn" restore --dir "$work/ckpt" --detach --lazy >/dev/null
      else
        "$build/cairn" restore --dir "$work/ckpt" --detach >/dev/null
      fi
      t1=$(now_ns)
      printf x >"$work/kick"
      for _ in $(seq 3000); do [[ -s $work/out ]] && break; sleep 0.005; done
      line=$(cat "$work/out")
      t2=$(awk '{print $2}' <<<"$line")
      got=$(awk '{print $3}' <<<"$line")
      kill -9 "$pid" 2>/dev/null || true
      gone "$pid"
      rm -rf "$work"
      awk -v m="$mib" -v mode="$mode" -v b="$busy" -v a="$t0" -v r="$t1" -v w="$t2" \
        -v ok="$([[ -n $got && $got == "$want" ]] && echo yes || echo "NO (got ${got:-no line}, want $want)")" 'BEGIN {
        printf "| %d | %s | %d | %.0f | %.0f | %s |\n", m, mode, b, (r - a) / 1e6, (w - a) / 1e6, ok }'
    done
  done
done
