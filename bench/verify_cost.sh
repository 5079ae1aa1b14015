#!/usr/bin/env bash
# What `restore --verify` costs: the same checkpoint restored with and without it, alternately,
# REPS times each (image in the page cache), for one process holding SIZE MiB and for a tree of
# NPROC processes sharing SIZE MiB between them. Restore is timed from the command's start until
# the processes run (--detach); the verify share is what the restore itself reports.
#
#   sudo bash bench/verify_cost.sh [SIZE_MIB] [NPROC]     (default: 1024 16)
#   BUILD=build selects the build directory (default build-bench, made Release if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
bench_build cairn mem_holder tree_holder timed
mib=${1:-1024}
nproc=${2:-16}
reps=${REPS:-5}
work=$(mktemp -d /var/tmp/cairn-verify.XXXXXX)
trap 'rm -rf "$work"' EXIT

# Starts `$@` with no inherited descriptors; waits for its ready file; echoes its pid.
start() {
  local ready=$1
  shift
  (
    for fd in $(ls /proc/$BASHPID/fd); do if ((fd > 2)); then eval "exec $fd>&-"; fi; done
    exec "$@" </dev/null >/dev/null 2>&1
  ) &
  local pid=$!
  while [[ ! -f $ready ]]; do sleep 0.05; done
  echo "$pid"
}

# restore_once CKPT VERIFY: prints "seconds verify_seconds" and kills what it restored.
restore_once() {
  local ckpt=$1 flag=$2 out pid
  out=$("$build/cairn" restore $flag --detach --dir "$ckpt" 2>/dev/null)
  pid=$(sed -n 's/^restored pid \([0-9]*\) .*/\1/p' <<<"$out")
  local s v
  s=$(sed -n 's/.*B in \([0-9.]*\) s.*/\1/p' <<<"$out" | head -1)
  v=$(sed -n 's/.*verified in \([0-9.]*\) s.*/\1/p' <<<"$out")
  pkill -KILL -P "$pid" 2>/dev/null || true
  kill -KILL "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.02; done
  sleep 0.2
  echo "$s ${v:-0}"
}

echo "| workload | restore s (no verify) | restore s (--verify) | verify s | verify share |"
echo "|---|---:|---:|---:|---:|"
for kind in single tree; do
  rm -rf "$work/ckpt" "$work/ready"
  if [[ $kind == single ]]; then
    pid=$(start "$work/ready" "$build/bench/mem_holder" "$mib" "$work/ready")
    label="1 process, $mib MiB"
    "$build/cairn" dump --pid "$pid" --dir "$work/ckpt" >/dev/null
  else
    pid=$(start "$work/ready" "$build/bench/tree_holder" "$nproc" "$mib" "$work/ready")
    label="tree of $nproc processes, $mib MiB"
    "$build/cairn" dump --tree --pid "$pid" --dir "$work/ckpt" >/dev/null
  fi
  while kill -0 "$pid" 2>/dev/null; do sleep 0.02; done
  sleep 0.3
  plain=() verified=() vs=()
  for ((r = 0; r < reps; r++)); do
    read -r s _ < <(restore_once "$work/ckpt" "")
    plain+=("$s")
    read -r s v < <(restore_once "$work/ckpt" "--verify")
    verified+=("$s")
    vs+=("$v")
  done
  med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
  p=$(med "${plain[@]}") q=$(med "${verified[@]}") v=$(med "${vs[@]}")
  share=$(awk -v v="$v" -v q="$q" 'BEGIN { printf "%.1f%%", 100 * v / q }')
  echo "| $label | $p | $q | $v | $share |"
done
