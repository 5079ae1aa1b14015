#!/bin/bash
# Live migration between two daemons on loopback: a job of SIZE MiB writing 1% of its pages
# per second (bench/downtime_holder = tests/workloads/incremental/inc_writer: at 1 GiB, 2621
# pages/s = 10.2 MiB/s) is moved from daemon a to daemon b with `cairn job migrate`. Reports,
# per repetition: the job's own downtime — the longest gap its 1 ms ticker saw during the
# migration, beside the longest gap over a quiet window of the same length — and the daemon's
# figures (downtime from freeze until the job runs on b, bytes moved, of which while it ran,
# b's restore time, the whole command). Then tells the program to check every page (PASS).
#
# Usage: sudo bash bench/migrate.sh [BUILD_DIR] [SIZE_MIB] [REPS]   (default: build 1024 3)
# HOLDER_NICE=-10 runs the job above other users' load on a shared machine. STATE_DIR is where
# the daemons keep their state (default /var/tmp); their spool is the default (/dev/shm).
# CAIRND_ARGS adds options to both daemons (e.g. -vv); KEEP=1 keeps their logs.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; MIB=${2:-1024}; REPS=${3:-3}
ninja -C "$BUILD" cairn cairnd downtime_holder >/dev/null
CAIRN=$(realpath "$BUILD/cairn"); CAIRND=$(realpath "$BUILD/cairnd"); HOLDER=$(realpath "$BUILD/bench/downtime_holder")
T=$(mktemp -d "${STATE_DIR:-/var/tmp}/cairn-migrate-bench.XXXXXX"); chmod 700 "$T"
A=mig-a-$$; B=mig-b-$$
cleanup() {
  for n in "$A" "$B"; do
    for d in /sys/fs/cgroup/freezer/cairn/$n.*; do
      [ -d "$d" ] && for p in $(cat "$d/cgroup.procs"); do kill -9 "$p" 2>/dev/null || true; done
    done
  done
  [ -f "$T/daemons" ] && for p in $(cat "$T/daemons"); do kill -9 "$p" 2>/dev/null || true; done
  sleep 0.3
  for n in "$A" "$B"; do for h in freezer memory cpu pids; do rmdir /sys/fs/cgroup/$h/cairn/$n.* 2>/dev/null || true; done; done
  if [ -n "${KEEP:-}" ]; then echo "kept $T"; else rm -rf "$T"; fi
  rm -rf "/dev/shm/cairnd-$A"
}
trap cleanup EXIT
head -c 32 /dev/urandom | base64 > "$T/token"; chmod 600 "$T/token"
PORT_B=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
start() {  # NODE EXTRA...
  local node=$1; shift
  "$CAIRND" --node "$node" --state-dir "$T/$node" --socket "$T/$node.sock" --cairn-bin "$CAIRN" ${CAIRND_ARGS:-} "$@" > "$T/$node.log" 2>&1 &
  echo $! >> "$T/daemons"
  for _ in $(seq 100); do "$CAIRN" job list --socket "$T/$node.sock" >/dev/null 2>&1 && return; sleep 0.1; done
  echo "cairnd $node did not start:"; cat "$T/$node.log"; exit 1
}
start "$B" --listen "127.0.0.1:$PORT_B" --token-file "$T/token"
start "$A" --peer "$B=127.0.0.1:$PORT_B" --peer-token-file "$T/token"

n=0
report() {  # sets $gap (us): the job's longest gap since the previous report
  n=$((n + 1))
  touch "$W/report$n"
  for _ in $(seq 2000); do [ -f "$W/report$n.out" ] && break; sleep 0.01; done
  gap=$(cut -d' ' -f1 "$W/report$n.out")
}
rate=$((MIB * 256 / 100))
echo "machine: $(nproc) CPUs, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg); job: $MIB MiB writing $rate pages/s"
echo
echo "| run | quiet window: longest gap | migration: longest gap (job's own) | daemon's downtime | bytes moved (while running) | restore on b | whole command | check |"
echo "|---:|---:|---:|---:|---:|---:|---:|---|"
for rep in $(seq "$REPS"); do
  W=$T/holder$rep; mkdir -p "$W"; n=0
  "$CAIRN" job run --socket "$T/$A.sock" --name "h$rep" -- nice -n "${HOLDER_NICE:-0}" "$HOLDER" "$W" "$MIB" "$rate" >/dev/null
  for _ in $(seq 600); do [ -f "$W/ready" ] && break; sleep 0.1; done
  sleep 1
  report
  t0=$(date +%s.%N)
  "$CAIRN" job migrate --socket "$T/$A.sock" "h$rep" --to "$B" --json > "$T/m$rep.json"
  window=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
  report; mig_gap=$gap
  sleep "$window"
  report; quiet_gap=$gap
  touch "$W/go"
  for _ in $(seq 600); do grep -qE 'PASS|FAIL' "$T/$B/jobs/h$rep/stdout.log" 2>/dev/null && break; sleep 0.1; done
  check=$(grep -oE 'PASS|FAIL' "$T/$B/jobs/h$rep/stdout.log" | tail -1 || echo none)
  j=$T/m$rep.json
  printf "| %d | %.1f ms | %.1f ms | %.1f ms | %.1f MiB (%.1f MiB) | %.1f ms | %.2f s | %s |\n" "$rep" \
    "$(bc -l <<<"$quiet_gap/1000")" "$(bc -l <<<"$mig_gap/1000")" "$(jq -r '.downtime_s * 1000' "$j")" \
    "$(jq -r '(.bytes | tonumber) / 1048576' "$j")" "$(jq -r '(.precopy_bytes | tonumber) / 1048576' "$j")" \
    "$(jq -r '.restore_s * 1000' "$j")" "$(jq -r '.total_s' "$j")" "$check"
  "$CAIRN" job kill --socket "$T/$B.sock" "h$rep" >/dev/null 2>&1 || true
  # Each run on its own: b has stored (fsynced) the image it received before the next one starts,
  # and both forget the job (its 1 GiB checkpoint would otherwise be written back meanwhile).
  for _ in $(seq 600); do
    "$CAIRN" checkpoint list --socket "$T/$B.sock" --job "h$rep" --json | jq -e '[.checkpoints[] | select(.state == "writing")] | length == 0' >/dev/null && break
    sleep 0.1
  done
  "$CAIRN" job delete --socket "$T/$B.sock" "h$rep" >/dev/null 2>&1 || true
  "$CAIRN" job delete --socket "$T/$A.sock" "h$rep" >/dev/null 2>&1 || true
  sync
done
