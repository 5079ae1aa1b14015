#!/usr/bin/env bash
# Start-up (issue 23): the size of cairn's binaries as built and stripped, and the time each
# takes from exec to exit for `--version` (cairn-init: its usage refusal), averaged over N runs.
# Prints a markdown table for docs/performance.md.
#
#   bash bench/startup.sh [BUILD_DIR] [N]     (default: build 50)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
n=${2:-50}
ninja -C "$build" cairn cairnd cairn-controller cairn-init >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mib() { awk -v b="$(stat -c %s "$1")" 'BEGIN { printf "%.1f", b / 1048576 }'; }
echo "| binary | MiB as built | MiB stripped | ms from exec to exit ($n runs) |"
echo "|---|---:|---:|---:|"
for bin in cairn cairnd cairn-controller cairn-init; do
  cp "$build/$bin" "$tmp/$bin" && strip "$tmp/$bin"
  args=(--version)
  [[ $bin == cairn-init ]] && args=()
  t0=$(date +%s%N)
  for ((i = 0; i < n; i++)); do "$build/$bin" "${args[@]}" >/dev/null 2>&1 || true; done
  t1=$(date +%s%N)
  awk -v b="$bin" -v a="$(mib "$build/$bin")" -v s="$(mib "$tmp/$bin")" -v t="$(( (t1 - t0) / n ))" 'BEGIN {
    printf "| %s | %s | %s | %.2f |\n", b, a, s, t / 1e6 }'
done
