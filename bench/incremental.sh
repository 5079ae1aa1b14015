#!/usr/bin/env bash
# Incremental checkpoint size and time against the pages written since the parent, for two
# process sizes: bench/downtime_holder (= tests/workloads/incremental/inc_writer) holds SIZE MiB
# and rewrites RATE random pages per second; `dump --leave-running --track` makes the parent,
# one second later `dump --leave-running --parent` the incremental one. Prints a markdown table.
#
#   sudo bash bench/incremental.sh [SIZES_MIB...]     (default: 1024 4096; RATES="0 1000 10000 50000")
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
bench_build cairn downtime_holder
sizes=("$@")
((${#sizes[@]})) || sizes=(1024 4096)
rates=(${RATES:-0 1000 10000 50000})
where=${BENCH_DIR:-/var/tmp}

echo "| size | pages written/s | full dump: data / total / frozen | incremental after 1 s: pages saved / data / total / frozen |"
echo "|---:|---:|---:|---:|"
for mib in "${sizes[@]}"; do
  for rate in "${rates[@]}"; do
    work=$(mktemp -d "$where/cairn-incr.XXXXXX")
    (
      for fd in $(ls /proc/$BASHPID/fd); do if ((fd > 2)); then eval "exec $fd>&-"; fi; done
      exec "$build/bench/downtime_holder" "$work" "$mib" "$rate" </dev/null >"$work/out" 2>&1
    ) &
    pid=$!
    while [[ ! -f $work/ready ]]; do sleep 0.05; done
    full=$("$build/cairn" dump --pid "$pid" --dir "$work/full" --leave-running --track | head -1)
    sleep 1
    inc=$("$build/cairn" dump --pid "$pid" --dir "$work/inc" --parent "$work/full" --leave-running | head -1)
    kill "$pid"; wait "$pid" 2>/dev/null || true
    rm -rf "$work"
    # "... N pages (X MiB) in T s (frozen F s) ..."
    parse() { sed -n 's/.* \([0-9]*\) pages (\([^)]*\)) in \([0-9.]*\) s (frozen \([0-9.]*\) s).*/\1|\2|\3 s|\4 s/p' <<<"$1"; }
    IFS='|' read -r _ fdata ftotal ffrozen <<<"$(parse "$full")"
    IFS='|' read -r ipages idata itotal ifrozen <<<"$(parse "$inc")"
    echo "| $mib MiB | $rate | $fdata / $ftotal / $ffrozen | $ipages / $idata / $itotal / $ifrozen |"
  done
done
