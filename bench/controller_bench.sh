#!/usr/bin/env bash
# Latency of cairn-controller's calls through its gRPC API, on SQLite and on a 3-member etcd
# cluster on loopback (docs/performance.md). Run from the repository root after building:
#   bash bench/controller_bench.sh [NODES] [JOBS]
set -euo pipefail
nodes=${1:-100}
jobs=${2:-500}
build=${BUILD:-build}
dir=$(mktemp -d /tmp/cairn-controller-bench-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

wait_socket() {
  for _ in $(seq 100); do [[ -S $1 ]] && return 0; sleep 0.1; done
  echo "controller did not start; log:" >&2; cat "$2" >&2; exit 1
}

echo "== SQLite ($dir/sqlite.db)"
"$build/cairn-controller" --store "sqlite:$dir/sqlite.db" --socket "$dir/sqlite.sock" \
  --heartbeat-timeout 600 2>"$dir/sqlite.log" &
pids+=($!)
wait_socket "$dir/sqlite.sock" "$dir/sqlite.log"
sleep 0.5
"$build/bench/controller_bench" --controller "unix:$dir/sqlite.sock" --nodes "$nodes" --jobs "$jobs"

if ! command -v etcd >/dev/null; then
  echo "== etcd: not installed (apt-get install etcd-server); skipped"
  exit 0
fi
echo "== etcd (3 members on loopback)"
ports=(23791 23792 23793 23801 23802 23803)
initial="m0=http://127.0.0.1:${ports[3]},m1=http://127.0.0.1:${ports[4]},m2=http://127.0.0.1:${ports[5]}"
for i in 0 1 2; do
  etcd --name "m$i" --data-dir "$dir/etcd-m$i" \
    --listen-client-urls "http://127.0.0.1:${ports[$i]}" --advertise-client-urls "http://127.0.0.1:${ports[$i]}" \
    --listen-peer-urls "http://127.0.0.1:${ports[$((i + 3))]}" \
    --initial-advertise-peer-urls "http://127.0.0.1:${ports[$((i + 3))]}" \
    --initial-cluster "$initial" --initial-cluster-state new --initial-cluster-token "bench-$$" \
    >"$dir/etcd-m$i.log" 2>&1 &
  pids+=($!)
done
for _ in $(seq 100); do
  curl -sf -X POST -d '{"key":"AA=="}' "http://127.0.0.1:${ports[0]}/v3/kv/range" >/dev/null && break
  sleep 0.2
done
"$build/cairn-controller" --store "etcd://127.0.0.1:${ports[0]},127.0.0.1:${ports[1]},127.0.0.1:${ports[2]}" \
  --socket "$dir/etcd.sock" --heartbeat-timeout 600 2>"$dir/etcd.log" &
pids+=($!)
wait_socket "$dir/etcd.sock" "$dir/etcd.log"
sleep 1
"$build/bench/controller_bench" --controller "unix:$dir/etcd.sock" --nodes "$nodes" --jobs "$jobs"
