#!/bin/bash
# `runc checkpoint` and `runc restore --detach` of a busybox container whose process holds
# SIZE_MIB (default 1024) of random data, with cairn as runc's criu (criu-compat), RUNS times
# (default 3): the wall time of each runc command, as its caller waits for it. With CRIU=PATH (a
# CRIU build, e.g. 4.2 from its source, outside this tree) the same container is measured with
# it in the same run, each run alternating the two. BUSY=N: N busy loops run beside (a loaded
# machine). LOGS=DIR keeps each run's dump.log and restore.log (cairn's stage timings). Each
# checkpoint is followed by a sync of its files: cairn's are on disk when runc returns (fsynced
# before the container is killed), CRIU's only then; both times are printed.
# Usage: bash bench/container_runc.sh  (as root, from the repository's root)
set -euo pipefail
source bench/common.sh
bench_build cairn
size=${SIZE_MIB:-1024}
runs=${RUNS:-3}
command -v runc >/dev/null || { echo "runc is not installed (apt install runc)"; exit 1; }

work=$(mktemp -d /tmp/cairn-bench-runc-XXXXXX)
state=$work/state
cleanup() {
  stop_busy
  runc --root "$state" delete --force bench >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/shim" "$work/bundle/rootfs"/{bin,proc,sys,dev,tmp,data}
ln -s "$(cd "$build" && pwd)/cairn" "$work/shim/criu"
cp /bin/busybox "$work/bundle/rootfs/bin/"
ln -s busybox "$work/bundle/rootfs/bin/sh"
gcc -O2 -static -o "$work/bundle/rootfs/bin/mem_holder" bench/mem_holder.c
(cd "$work/bundle" && runc spec)
python3 - "$work/bundle/config.json" "$size" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c['process']['terminal'] = False
c['process']['args'] = ['/bin/mem_holder', sys.argv[2], '/data/ready']
c['root']['readonly'] = False
json.dump(c, open(sys.argv[1], 'w'))
EOF

seconds() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null 2>&1 </dev/null || return 1; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }
measure() {  # measure NAME CRIU_PATH
  local name=$1 criu=$2 r=(runc --root "$state" --criu "$2")
  rm -f "$work/bundle/rootfs/data/ready"
  "${r[@]}" run --detach --bundle "$work/bundle" bench </dev/null >/dev/null 2>&1
  while [[ ! -e $work/bundle/rootfs/data/ready ]]; do sleep 0.05; done
  rm -rf "$work/images" "$work/work"
  local dump restore durable
  dump=$(seconds "${r[@]}" checkpoint --image-path "$work/images" --work-path "$work/work" bench) || {
    echo "$name: checkpoint failed: $(tail -n 3 "$work/work/dump.log" 2>/dev/null)"; return 1; }
  # On disk: cairn's checkpoint is (fsynced before the container is killed); CRIU's is in the
  # page cache until this sync of its files.
  durable=$(seconds sync $(find "$work/images" -type f))
  restore=$(seconds "${r[@]}" restore --detach --image-path "$work/images" --work-path "$work/work" --bundle "$work/bundle" bench) || {
    echo "$name: restore failed: $(tail -n 3 "$work/work/restore.log" 2>/dev/null)"; return 1; }
  printf '%-8s checkpoint %6.3f s (+ sync %5.3f s: on disk at %6.3f s)   restore %6.3f s   image %s\n' "$name" "$dump" \
    "$durable" "$(echo "$dump + $durable" | bc)" "$restore" "$(du -sh "$work/images" | cut -f1)"
  if [[ -n ${LOGS:-} ]]; then
    mkdir -p "$LOGS"
    cp "$work/work/dump.log" "$LOGS/$name-$i-dump.log" 2>/dev/null || true
    cp "$work/work/restore.log" "$LOGS/$name-$i-restore.log" 2>/dev/null || true
  fi
  "${r[@]}" delete --force bench >/dev/null 2>&1
}
echo "runc $(runc --version | head -1 | cut -d' ' -f3), container holding $size MiB, $(nproc) cores, ${BUSY:-0} busy loops beside"
start_busy "${BUSY:-0}"
for ((i = 1; i <= runs; i++)); do
  measure cairn "$work/shim/criu"
  if [[ -n ${CRIU:-} ]]; then measure criu "$CRIU"; fi
done
