#!/usr/bin/env bash
# `cairn dump --compress`: dump throughput and compression ratio against the uncompressed dump,
# for three kinds of memory: random data (bench/mem_holder), pages written with zeros, and a real
# python3 heap (a dict of 2.5 M small objects). Each dump is `--leave-running` into $BENCH_DIR
# (default /var/tmp). Throughput is the page data saved (before compression) over the whole
# command's time; ratio is that page data over the size of pages.img. Prints a markdown table.
#
#   sudo bash bench/compress.sh [SIZE_MIB]     (default 512; CODECS="none lz4 zstd zstd:9")
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
bench_build cairn mem_holder
mib=${1:-512}
codecs=(${CODECS:-none lz4 zstd zstd:9})
where=${BENCH_DIR:-/var/tmp}
py=${PYTHON:-/usr/bin/python3}

start() {  # start KIND READY: runs the holder in the background, sets $pid
  local kind=$1 ready=$2
  (
    for fd in $(ls /proc/$BASHPID/fd); do if ((fd > 2)); then eval "exec $fd>&-"; fi; done
    case $kind in
      random) exec "$build/bench/mem_holder" "$mib" "$ready" ;;
      zeros) exec "$py" -c "import time
b = bytearray($mib << 20)
b[:] = bytes(len(b))
open('$ready', 'w').close()
time.sleep(3600)" ;;
      python-heap) exec "$py" -c "import time
d = {i: (str(i) * 4, float(i), [i]) for i in range(2_500_000)}
open('$ready', 'w').close()
time.sleep(3600)" ;;
    esac
  ) </dev/null >/dev/null 2>&1 &
  pid=$!
  while [[ ! -f $ready ]]; do sleep 0.05; done
}

echo "| memory | codec | page data | pages.img | ratio | dump time | throughput |"
echo "|---|---|---:|---:|---:|---:|---:|"
for kind in random zeros python-heap; do
  work=$(mktemp -d "$where/cairn-compress.XXXXXX")
  start "$kind" "$work/ready"
  for codec in "${codecs[@]}"; do
    args=()
    [[ $codec == none ]] || args=(--compress "$codec")
    t0=$(date +%s.%N)
    out=$("$build/cairn" dump --pid "$pid" --dir "$work/ck" --leave-running "${args[@]}" | head -1)
    t1=$(date +%s.%N)
    data=$(sed -n 's/.* \([0-9]*\) pages (.*/\1/p' <<<"$out")
    img=$(stat -c %s "$work/ck/pages.img")
    awk -v k="$kind" -v c="$codec" -v d="$data" -v s="$img" -v t="$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')" 'BEGIN {
      b = d * 4096; printf "| %s | %s | %.1f MiB | %.1f MiB | %.2f | %.3f s | %.2f GB/s |\n", k, c, b / 1048576, s / 1048576,
      (s > 4096 ? b / (s - 4096) : 0), t, b / t / 1e9 }'
    rm -rf "$work/ck"
  done
  kill "$pid"; wait "$pid" 2>/dev/null || true
  rm -rf "$work"
done
