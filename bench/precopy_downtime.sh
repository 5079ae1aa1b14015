#!/usr/bin/env bash
# Downtime as the checkpointed program sees it: a process of SIZE MiB writing 1% of its pages
# per second (bench/downtime_holder = tests/workloads/incremental/inc_writer), with a thread that
# ticks every millisecond and records its longest gap. For each size, in one run of the program:
# the longest gap over a quiet window of the same length (baseline: scheduler noise), during a
# plain `dump --leave-running`, and during `dump --pre-copy --leave-running`. Images go to
# $BENCH_DIR (default /var/tmp). HOLDER_NICE=-10 runs the program above other users' load on a
# shared machine (the quiet window shows what noise is left). PRECOPY_ARGS adds options to the
# pre-copy dump (e.g. "--pre-copy-rate 300"). Prints a markdown table for
# docs/performance.md.
#
#   sudo bash bench/precopy_downtime.sh [SIZES_MIB...]    (default: 1024 4096)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
bench_build cairn downtime_holder
sizes=("$@")
((${#sizes[@]})) || sizes=(1024 4096)
where=${BENCH_DIR:-/var/tmp}

# Asks the program for its longest gap (us) since the previous report; sets $gap.
n=0
report() {
  n=$((n + 1))
  touch "$work/report$n"
  while [[ ! -f $work/report$n.out ]]; do sleep 0.01; done
  gap=$(cut -d' ' -f1 "$work/report$n.out")
}
field() { sed -n "s/.*$1 \([0-9.]*\) s.*/\1/p" <<<"$2" | head -1; }

echo "| size | writes | quiet window: longest gap | plain dump: longest gap / frozen / total | pre-copy: longest gap / frozen / total / rounds |"
echo "|---:|---:|---:|---:|---:|"
for mib in "${sizes[@]}"; do
  rate=$((mib * 256 / 100))  # 1% of the pages per second
  work=$(mktemp -d "$where/cairn-downtime.XXXXXX")
  n=0
  (
    for fd in $(ls /proc/$BASHPID/fd); do if ((fd > 2)); then eval "exec $fd>&-"; fi; done
    exec nice -n "${HOLDER_NICE:-0}" "$build/bench/downtime_holder" "$work" "$mib" "$rate" </dev/null >"$work/out" 2>&1
  ) &
  pid=$!
  while [[ ! -f $work/ready ]]; do sleep 0.05; done
  sleep 1
  report
  t0=$(date +%s.%N)
  plain=$("$build/cairn" dump --pid "$pid" --dir "$work/plain" --leave-running)
  window=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
  report; plain_gap=$gap
  rm -rf "$work/plain"
  sleep "$window"
  report; quiet_gap=$gap
  pre=$("$build/cairn" dump --pid "$pid" --dir "$work/pre" --pre-copy --leave-running ${PRECOPY_ARGS:-})
  report; pre_gap=$gap
  rounds=$(sed -n 's/pre-copy: \([0-9]*\) round.*/\1/p' <<<"$pre")
  kill "$pid"; wait "$pid" 2>/dev/null || true
  rm -rf "$work"
  printf "| %d MiB | %d pages/s | %.1f ms | %.1f ms / %.3f s / %.3f s | %.1f ms / %.3f s / %.3f s / %s |\n" \
    "$mib" "$rate" "$(bc -l <<<"$quiet_gap/1000")" \
    "$(bc -l <<<"$plain_gap/1000")" "$(field frozen "$plain" | tr -d '(')" "$(field "in" "$plain")" \
    "$(bc -l <<<"$pre_gap/1000")" "$(field downtime "$pre")" "$(field total "$pre")" "$rounds"
done
