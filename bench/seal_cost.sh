#!/usr/bin/env bash
# What checking a checkpoint's seal costs a restore (docs/image-format.md, "Seal"): one process
# holding SIZE MiB of random data is dumped (sealed), then restored REPS times each way,
# alternating: unchecked (--trust-unsigned), checked on the node that sealed it (pages.img
# untouched: its MAC is skipped), and checked in full (pages.img's times changed with touch, as
# for a copy from elsewhere). Prints each restore's own time (bench/timed), image in WHERE.
#
#   sudo bash bench/seal_cost.sh [SIZE_MIB] [REPS]      BUILD=build WHERE=/dev/shm (defaults)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
mib=${1:-1024}
reps=${2:-3}
ninja -C "$build" cairn mem_holder timed >/dev/null
work=$(mktemp -d "${WHERE:-/dev/shm}/cairn-seal-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "| restore of $mib MiB | run | seconds |"
echo "|---|---:|---:|"
for ((rep = 1; rep <= reps; rep++)); do
  for mode in unchecked sealed-here sealed-full; do
    (
      for fd in $(ls /proc/$BASHPID/fd); do if ((fd > 2)); then eval "exec $fd>&-"; fi; done
      exec "$build/bench/mem_holder" "$mib" "$work/ready" </dev/null >/dev/null 2>&1
    ) &
    pid=$!
    while [[ ! -f $work/ready ]]; do sleep 0.05; done
    rm -f "$work/ready"
    "$build/cairn" dump --pid "$pid" --dir "$work/ckpt" >/dev/null
    { wait "$pid"; } 2>/dev/null || true
    args=(restore --dir "$work/ckpt" --detach)
    case $mode in
      unchecked) args+=(--trust-unsigned) ;;
      sealed-full) touch "$work/ckpt/pages.img" ;;
    esac
    "$build/bench/timed" "$build/cairn" "${args[@]}" >/dev/null 2>"$work/timed" || { cat "$work/timed" >&2; exit 1; }
    echo "| $mode | $rep | $(tail -n 1 "$work/timed" | awk '{print $1}') |"
    kill -9 "$pid" 2>/dev/null || true
    { wait "$pid"; } 2>/dev/null || true
    rm -rf "$work/ckpt"
  done
done
