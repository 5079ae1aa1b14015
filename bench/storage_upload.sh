#!/bin/bash
# Checkpoint upload throughput to S3: a job holding SIZE MiB of random data (bench/mem_holder)
# under a cairnd with --storage s3://… against s3rver (tests/tools, installed by
# scripts/install-deps.sh) on loopback, checkpointed REPS times. Reports, per checkpoint, the
# engine's dump time (to the local state directory) and the upload (all files, multipart, then
# the read-back check and the manifest), from the daemon's "stored checkpoint" log line; and the
# same job's checkpoint with the local store, for comparison.
#
# Usage: bench/storage_upload.sh [BUILD_DIR] [SIZE_MIB] [REPS] [UPLOAD_PARALLEL]   (root)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; MIB=${2:-256}; REPS=${3:-3}; PAR=${4:-4}
ninja -C "$BUILD" cairn cairnd mem_holder >/dev/null
CAIRN=$(realpath "$BUILD/cairn"); CAIRND=$(realpath "$BUILD/cairnd"); HOLDER=$(realpath "$BUILD/bench/mem_holder")
S3RVER=tests/tools/node_modules/s3rver/bin/s3rver.js
[ -f "$S3RVER" ] || { echo "no $S3RVER: run scripts/install-deps.sh" >&2; exit 1; }
T=$(mktemp -d /tmp/cairn-s3-bench-XXXXXX); chmod 700 "$T"
NODE=s3bench-$$
PIDS=()
cleanup() {
  for d in /sys/fs/cgroup/freezer/cairn/$NODE*; do
    [ -d "$d" ] && for p in $(cat "$d/cgroup.procs"); do kill -9 "$p" 2>/dev/null || true; done
  done
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  sleep 0.5
  for h in freezer memory cpu pids; do rmdir /sys/fs/cgroup/$h/cairn/$NODE* 2>/dev/null || true; done
  rm -rf "$T"
}
trap cleanup EXIT
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$T/s3"
node --openssl-legacy-provider "$S3RVER" -d "$T/s3" -a 127.0.0.1 -p "$PORT" --configure-bucket bench -s > "$T/s3rver.log" 2>&1 &
PIDS+=($!); disown
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$PORT/" && break; sleep 0.1; done

run() {  # $1: name, then cairnd's storage options
  local name=$1; shift
  local sock=$T/$name.sock
  AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER "$CAIRND" --node "$NODE-$name" --state-dir "$T/state-$name" \
    --socket "$sock" --cairn-bin "$CAIRN" "$@" > "$T/log-$name" 2>&1 &
  PIDS+=($!); disown
  for _ in $(seq 100); do [ -S "$sock" ] && "$CAIRN" job list --socket "$sock" >/dev/null 2>&1 && break; sleep 0.1; done
  "$CAIRN" job run --socket "$sock" --name m -- "$HOLDER" "$MIB" "$T/ready-$name" >/dev/null
  for _ in $(seq 600); do [ -f "$T/ready-$name" ] && break; sleep 0.1; done
  for r in $(seq "$REPS"); do
    "$CAIRN" job checkpoint --socket "$sock" m --json > "$T/ck-$name-$r.json"
    python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["checkpoint"]; print(sys.argv[2], "checkpoint", sys.argv[3], "dump_s %.3f" % c["total_s"], "bytes", c["size_bytes"], c["location"])' \
      "$T/ck-$name-$r.json" "$name" "$r"
  done
  grep -o 'stored checkpoint=.*' "$T/log-$name" | sed 's/^/  /' || true
}
echo "machine: $(nproc) CPUs, $(uname -r), $(node --version) s3rver 3.7.1; job ${MIB} MiB; upload parallel $PAR"
run local
run s3 --storage s3://bench/ckpt --s3-endpoint "http://127.0.0.1:$PORT" --upload-parallel "$PAR"
