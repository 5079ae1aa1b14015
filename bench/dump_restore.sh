#!/usr/bin/env bash
# Dump and restore throughput of one process holding SIZE MiB of random data, beside a
# plain sequential write of the same size to the same place in the same run (the
# physical limit). Prints a markdown table for docs/performance.md. Restore is timed
# from the command's start until the process runs (--detach), image in the page cache.
#
#   sudo bash bench/dump_restore.sh [SIZES_MIB...]    (default: 256 1024 4096)
#   BENCH_DIRS="/var/tmp /dev/shm" selects where images go (disk, tmpfs).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
bench_build cairn mem_holder plain_write timed
sizes=("$@")
((${#sizes[@]})) || sizes=(256 1024 4096)
dirs=(${BENCH_DIRS:-/var/tmp /dev/shm})
reps=${REPS:-3}

rate() { awk -v b="$1" -v s="$2" 'BEGIN { printf "%.2f", b / s / 1e9 }'; }

echo "| where | size | plain write GB/s | dump GB/s | dump/plain | restore GB/s | dumper max RSS MiB |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for where in "${dirs[@]}"; do
  for mib in "${sizes[@]}"; do
    bytes=$((mib << 20))
    for ((rep = 0; rep < reps; rep++)); do
      work=$(mktemp -d "$where/cairn-bench.XXXXXX")
      ready="$work/ready"
      (
        for fd in $(ls /proc/$BASHPID/fd); do if ((fd > 2)); then eval "exec $fd>&-"; fi; done
        exec "$build/bench/mem_holder" "$mib" "$ready" </dev/null >/dev/null 2>&1
      ) &
      pid=$!
      while [[ ! -f $ready ]]; do sleep 0.05; done
      sync
      plain_s=$("$build/bench/plain_write" "$mib" "$work/plain")
      rm -f "$work/plain"
      sync
      # bench/timed: the command's own time, from its fork to its exit. A failed command stops
      # the bench with its message rather than giving a figure.
      "$build/bench/timed" "$build/cairn" dump --pid "$pid" --dir "$work/ckpt" >/dev/null 2>"$work/timed" ||
        { cat "$work/timed" >&2; exit 1; }
      read -r dump_s rss < <(tail -n 1 "$work/timed")
      { wait "$pid"; } 2>/dev/null || true
      sync
      # The limit is the faster of two plain writes, one before and one after the dump:
      # this disk and page cache swing by 3x between runs.
      plain2_s=$("$build/bench/plain_write" "$mib" "$work/plain")
      rm -f "$work/plain"
      plain_s=$(awk -v a="$plain_s" -v b="$plain2_s" 'BEGIN { print (a < b ? a : b) }')
      echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
      # Restore from a warm page cache, as right after a dump or a transfer: the image, and cairn
      # itself with its libraries (which drop_caches also evicted; a node that just dumped or
      # received a checkpoint has them in memory).
      cat "$work/ckpt/pages.img" >/dev/null
      "$build/cairn" --help >/dev/null
      "$build/bench/timed" "$build/cairn" restore --dir "$work/ckpt" --detach >/dev/null 2>"$work/timed" ||
        { cat "$work/timed" >&2; exit 1; }
      read -r restore_s _ < <(tail -n 1 "$work/timed")
      kill -9 "$pid" 2>/dev/null || true
      { wait "$pid"; } 2>/dev/null || true
      rm -rf "$work"
      pw=$(rate "$bytes" "$plain_s")
      dw=$(rate "$bytes" "$dump_s")
      rw=$(rate "$bytes" "$restore_s")
      ratio=$(awk -v d="$dw" -v p="$pw" 'BEGIN { printf "%.0f%%", 100 * d / p }')
      echo "| $where | $mib MiB | $pw | $dw | $ratio | $rw | $((rss / 1024)) |"
    done
  done
done
