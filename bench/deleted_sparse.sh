#!/usr/bin/env bash
# A file deleted while open, 1 GiB long with 12 KiB of data (tests/workloads/wl_deleted_sparse.c):
# how long `cairn dump` and `cairn restore --detach` take and how big files.img is. With
# CAIRN=path/to/another/cairn the same for another build (e.g. one from before session 7, which
# saved the whole file).
#
#   sudo BUILD=build bash bench/deleted_sparse.sh
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
ninja -C "$build" cairn wl_deleted_sparse >/dev/null
cairn=${CAIRN:-$build/cairn}
work=$(mktemp -d /var/tmp/cairn-sparse.XXXXXX)
trap 'rm -rf "$work"' EXIT
(
  for fd in $(ls /proc/$BASHPID/fd); do if ((fd > 2)); then eval "exec $fd>&-"; fi; done
  exec "$build/tests/workloads/wl_deleted_sparse" "$work" </dev/null >/dev/null 2>&1
) &
while [[ ! -f $work/ready ]]; do sleep 0.05; done
pid=$(cat "$work/ready")
t0=$(date +%s.%N)
"$cairn" dump --pid "$pid" --dir "$work/ckpt" >/dev/null
t1=$(date +%s.%N)
while kill -0 "$pid" 2>/dev/null; do sleep 0.02; done
size=$(du -h "$work/ckpt/files.img" | cut -f1)
t2=$(date +%s.%N)
"$cairn" restore --detach --dir "$work/ckpt" >/dev/null
t3=$(date +%s.%N)
kill -KILL "$pid"
wait "$pid" 2>/dev/null || true
echo "| $cairn | $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f s", b-a}') | $size | $(awk -v a="$t2" -v b="$t3" 'BEGIN{printf "%.2f s", b-a}') |"
