#!/bin/bash
# A job group's checkpoint: how long its ranks stand frozen. One cairn-controller (--dispatch
# cairnd) and two cairnd on loopback; a torch.distributed training group (gloo over TCP,
# tests/daemon/group_train.py) of RANKS ranks, half on each daemon, all_reducing every 10 ms.
# Per repetition: `cairn group checkpoint` (ranks left running), with the slowest rank's own
# dump (from the common freeze until its state is captured; the others wait for it) and the
# longest any rank stood frozen (the slowest capture, the decision, the release of its
# connections, the thaw; the commit comes after); then each rank checkpointed alone (`cairn job
# checkpoint`, leave-running), whose frozen time is what that rank costs by itself.
#
# Usage: sudo bash bench/group_checkpoint.sh [BUILD_DIR] [RANKS] [REPS]   (default: build 4 5)
# KEEP=1 keeps the daemons' and controller's logs.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; RANKS=${2:-4}; REPS=${3:-5}
ninja -C "$BUILD" cairn cairnd cairn-controller >/dev/null
CAIRN=$(realpath "$BUILD/cairn"); CAIRND=$(realpath "$BUILD/cairnd"); CTL=$(realpath "$BUILD/cairn-controller")
TRAIN=$(realpath tests/daemon/group_train.py)
/usr/bin/python3 -c 'import torch.distributed' 2>/dev/null || { echo "python3-torch is not installed (apt install python3-torch)"; exit 1; }
T=$(mktemp -d "${STATE_DIR:-/var/tmp}/cairn-group-bench.XXXXXX"); chmod 755 "$T"
A=grp-a-$$; B=grp-b-$$
cleanup() {
  for n in "$A" "$B"; do
    for d in /sys/fs/cgroup/freezer/cairn/$n.*; do
      [ -d "$d" ] && for p in $(cat "$d/cgroup.procs"); do kill -9 "$p" 2>/dev/null || true; done
    done
  done
  [ -f "$T/pids" ] && for p in $(cat "$T/pids"); do kill -9 "$p" 2>/dev/null || true; done
  sleep 0.3
  for n in "$A" "$B"; do for h in freezer memory cpu pids; do rmdir /sys/fs/cgroup/$h/cairn/$n.* 2>/dev/null || true; done; done
  if [ -n "${KEEP:-}" ]; then echo "kept $T"; else rm -rf "$T"; fi
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
head -c 32 /dev/urandom | base64 > "$T/ctl.token"; head -c 32 /dev/urandom | base64 > "$T/node.token"
chmod 600 "$T/ctl.token" "$T/node.token"
CPORT=$(port)
"$CTL" --store "sqlite:$T/ctl.db" --socket "$T/ctl.sock" --listen "127.0.0.1:$CPORT" --token-file "$T/ctl.token" \
  --dispatch cairnd --heartbeat-interval 0.5 --heartbeat-timeout 30 > "$T/ctl.log" 2>&1 &
echo $! >> "$T/pids"
export CAIRN_CONTROLLER="unix:$T/ctl.sock"
for _ in $(seq 100); do "$CAIRN" cluster status >/dev/null 2>&1 && break; sleep 0.1; done
start() {  # NODE LABEL
  "$CAIRND" --node "$1" --state-dir "$T/$1" --socket "$T/$1.sock" --cairn-bin "$CAIRN" --listen "127.0.0.1:$(port)" \
    --token-file "$T/node.token" --controller "127.0.0.1:$CPORT" --controller-token-file "$T/ctl.token" \
    --price-per-hour 0.3 --labels "host=$2" ${CAIRND_ARGS:-} > "$T/$1.log" 2>&1 &
  echo $! >> "$T/pids"
  for _ in $(seq 100); do "$CAIRN" cluster status 2>/dev/null | grep -q "^$1 " && return; sleep 0.1; done
  echo "cairnd $1 did not join:"; cat "$T/$1.log"; exit 1
}
start "$A" a; start "$B" b
mkdir -p "$T/run"; chmod 777 "$T/run"
TPORT=$(port)
for r in $(seq 0 $((RANKS - 1))); do
  host=a; [ "$r" -ge $((RANKS / 2)) ] && host=b
  "$CAIRN" submit --id "train-$r" --group train --rank "$r" --node-label "host=$host" --cpus 1 --memory-mb 1000 -- \
    /usr/bin/python3 "$TRAIN" "$r" "$RANKS" "$TPORT" 1000000 "$T/run" >/dev/null
done
for _ in $(seq 600); do
  ok=1; for r in $(seq 0 $((RANKS - 1))); do [ "$(cat "$T/run/progress-$r" 2>/dev/null || echo -1)" -ge 50 ] || ok=0; done
  [ "$ok" = 1 ] && break; sleep 0.1
done
[ "$ok" = 1 ] || { echo "the group did not start training"; tail -5 "$T/$A/jobs/train-0/stderr.log"; exit 1; }
sock_of() { [ "$1" -ge $((RANKS / 2)) ] && echo "$T/$B.sock" || echo "$T/$A.sock"; }

echo "machine: $(nproc) CPUs, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg); group: $RANKS ranks (torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)'), gloo), 2 daemons"
echo
echo "| run | slowest rank's dump (freeze to captured) | longest frozen in the group | excess | slowest rank checkpointed alone: frozen |"
echo "|---:|---:|---:|---:|---:|"
for rep in $(seq "$REPS"); do
  "$CAIRN" group checkpoint train --json > "$T/g$rep.json"
  alone=0
  for r in $(seq 0 $((RANKS - 1))); do
    f=$("$CAIRN" job checkpoint --socket "$(sock_of "$r")" "train-$r" --json | jq -r '.checkpoint.frozen_s')
    alone=$(awk -v a="$alone" -v b="$f" 'BEGIN { print (b > a) ? b : a }')
  done
  d=$(jq -r '.checkpoint.dump_max_s' "$T/g$rep.json"); f=$(jq -r '.checkpoint.frozen_max_s' "$T/g$rep.json")
  printf "| %d | %.1f ms | %.1f ms | %.1f ms | %.1f ms |\n" "$rep" "$(bc -l <<<"$d*1000")" "$(bc -l <<<"$f*1000")" \
    "$(bc -l <<<"($f-$d)*1000")" "$(bc -l <<<"$alone*1000")"
  sleep 1
done
before=$(cat "$T/run/progress-0"); sleep 2
[ "$(cat "$T/run/progress-0")" -gt "$before" ] && echo && echo "the group trains on after $REPS group checkpoints" \
  || { echo "the group stopped training"; exit 1; }
