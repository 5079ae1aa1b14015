#!/usr/bin/env bash
# Dump and restore of one process holding many of one thing (issue 23's scale table):
#   fds      N descriptors, three ways (bench/fd_holder.c): N regular files each its own
#            ("files"), one file opened N times ("one": N descriptions of one inode), and one
#            description dup'd N times ("dups");
#   maps     N private anonymous areas of two pages side by side, alternating protections
#            (bench/maps_holder.c);
#   threads  N threads blocked in pause() (bench/threads_holder.c).
# Whole commands timed (what the user waits for); the dump's "frozen" figure from its summary
# line; the last column counts what the restored process holds. Images on tmpfs. Prints a
# markdown table for docs/performance.md.
#
#   sudo BUILD=build bash bench/many.sh fds|maps|threads [N...]     (REPS=3)
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:?usage: bench/many.sh fds|maps|threads [N...]}
shift
case $kind in
  fds) holder=fd_holder modes=(files one dups) defaults=(1000 9000 19000)
    echo "hard RLIMIT_NOFILE: $(ulimit -Hn)" ;;
  maps) holder=maps_holder modes=(-) defaults=(5000 50000)
    echo "vm.max_map_count: $(cat /proc/sys/vm/max_map_count)" ;;
  threads) holder=threads_holder modes=(-) defaults=(100 1000)
    echo "this machine: $(nproc) CPUs" ;;
  *) echo "bench/many.sh: unknown kind $kind (fds, maps or threads)" >&2; exit 2 ;;
esac
source bench/common.sh
bench_build cairn "$holder"
counts=("$@")
((${#counts[@]})) || counts=("${defaults[@]}")
reps=${REPS:-3}
where=${BENCH_DIR:-/dev/shm}
now() { date +%s.%N; }
# Until the killed holder has been reaped (restore needs its pid free).
gone() { for _ in $(seq 200); do [[ -d /proc/$1 ]] || return 0; sleep 0.02; done; }
# What the restored process holds of the kind.
held() {
  case $kind in
    fds) ls "/proc/$1/fd" 2>/dev/null | wc -l ;;
    maps) wc -l <"/proc/$1/maps" 2>/dev/null || echo 0 ;;
    threads) ls "/proc/$1/task" 2>/dev/null | wc -l ;;
  esac
}
echo "| $kind | kind | dump s | frozen s | restore s | restored process holds |"
echo "|---:|---|---:|---:|---:|---:|"
for n in "${counts[@]}"; do
  for mode in "${modes[@]}"; do
    for ((rep = 1; rep <= reps; rep++)); do
      work=$(mktemp -d "$where/cairn-many-bench.XXXXXX")
      args=("$n")
      [[ $mode == - ]] || args+=("$mode")
      (
        for fd in $(ls /proc/$BASHPID/fd); do if ((fd > 2)); then eval "exec $fd>&-"; fi; done
        exec "$build/bench/$holder" "${args[@]}" "$work/ready" </dev/null >"$work/holder.out" 2>&1
      ) &
      pid=$!
      disown "$pid"  # bash reaps it when the dump kills it, without a "Killed" line
      while [[ ! -f $work/ready ]]; do
        if ! kill -0 "$pid" 2>/dev/null; then echo "| $n | $mode | holder failed: $(cat "$work/holder.out") | | | |"; continue 3; fi
        sleep 0.05
      done
      t0=$(now)
      if ! "$build/cairn" dump --pid "$pid" --dir "$work/ckpt" >"$work/dump.out" 2>&1; then
        echo "| $n | $mode | dump failed: $(tail -1 "$work/dump.out") | | | $(kill -0 "$pid" 2>/dev/null && echo "left running" || echo "**process gone**") |"
        kill -9 "$pid" 2>/dev/null || true; gone "$pid"; rm -rf "$work"; continue
      fi
      t1=$(now)
      frozen=$(grep -o 'frozen [0-9.]*' "$work/dump.out" | awk '{print $2}')
      gone "$pid"
      t2=$(now)
      if "$build/cairn" restore --dir "$work/ckpt" --detach >"$work/restore.out" 2>&1; then
        t3=$(now)
        got=$(held "$pid")
        restore=$(awk -v c="$t2" -v d="$t3" 'BEGIN { printf "%.3f", d - c }')
      else
        restore="failed: $(tail -1 "$work/restore.out")"
        got=0
      fi
      kill -9 "$pid" 2>/dev/null || true
      sleep 0.2
      rm -rf "$work"
      awk -v n="$n" -v m="$mode" -v a="$t0" -v b="$t1" -v f="${frozen:-?}" -v r="$restore" -v h="$got" 'BEGIN {
        printf "| %d | %s | %.3f | %s | %s | %d |\n", n, m, b - a, f, r, h }'
    done
  done
done
