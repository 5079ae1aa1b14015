#!/usr/bin/env bash
# A --leave-running dump on a busy machine: one process holding SIZE MiB of random data is
# dumped REPS times while BUSY other processes keep every CPU busy (default: one per CPU), as
# a training job's own threads do. Prints each dump's own time and the time the process stood
# frozen (from the dump's summary). Images in WHERE.
#
#   sudo bash bench/busy_dump.sh [SIZE_MIB] [REPS]      BUILD=build WHERE=/var/tmp BUSY=$(nproc)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
mib=${1:-256}
reps=${2:-3}
busy=${BUSY:-$(nproc)}
ninja -C "$build" cairn mem_holder >/dev/null
work=$(mktemp -d "${WHERE:-/var/tmp}/cairn-busy-bench.XXXXXX")
source bench/common.sh
cleanup() {
  stop_busy
  [[ -n ${holder:-} ]] && kill -9 "$holder" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
start_busy "$busy"
(
  for fd in $(ls /proc/$BASHPID/fd); do if ((fd > 2)); then eval "exec $fd>&-"; fi; done
  exec "$build/bench/mem_holder" "$mib" "$work/ready" </dev/null >/dev/null 2>&1
) &
holder=$!
disown $holder
while [[ ! -f $work/ready ]]; do sleep 0.05; done
echo "| --leave-running dump of $mib MiB, $busy CPU spinners beside it | run | dump s | frozen s |"
echo "|---|---:|---:|---:|"
for ((rep = 1; rep <= reps; rep++)); do
  out=$("$build/cairn" dump --pid "$holder" --dir "$work/ckpt" --leave-running)
  secs=$(sed -n 's/.* in \([0-9.]*\) s (frozen \([0-9.]*\) s).*/\1 \2/p' <<<"$out")
  echo "| $mib MiB | $rep | ${secs% *} | ${secs#* } |"
  rm -rf "$work/ckpt"
done
