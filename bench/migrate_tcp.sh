#!/bin/bash
# Live migration of a server with clients, its service address moving with it: redis-server
# (a cairnd job with `--address 10.77.0.100/24`) is moved between two daemons, each in a
# network namespace of its own on one bridge ("node a", "node b": two network stacks), and back,
# REPS times each way. Its clients run in a third namespace: CONNS idle connections, and one
# that sends PING and waits for PONG over and over — its longest wait during a migration is the
# pause the server's users see (beside the longest over a quiet window of the same length).
# After each move every idle client sends PING on its old connection: answered, reset and silent
# ones are counted.
#
# Usage: sudo bash bench/migrate_tcp.sh [BUILD_DIR] [CONNS] [REPS]   (default: build 100 3)
# KEEP=1 keeps the daemons' logs. BUSY=N keeps N CPUs busy (`yes > /dev/null`) during the moves.
# CAPTURE=FILE logs every ARP and TCP packet the clients' interface sees (bench/packet_log.py),
# with the monotonic time each move started and ended in FILE.moves.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; CONNS=${2:-100}; REPS=${3:-3}
ninja -C "$BUILD" cairn cairnd >/dev/null
CAIRN=$(realpath "$BUILD/cairn"); CAIRND=$(realpath "$BUILD/cairnd")
REDIS=$(command -v redis-server)
T=$(mktemp -d /var/tmp/cairn-migrate-tcp.XXXXXX); chmod 700 "$T"
tag=$(( $$ % 100000 ))
A=mta-$tag; B=mtb-$tag; NS_A=cmta$tag; NS_B=cmtb$tag; NS_C=cmtc$tag; BR=cmtbr$tag
SERVICE=10.77.0.100
cleanup() {
  pkill -KILL -f "$T/clients.py" 2>/dev/null || true
  for p in ${SPINNERS:-}; do kill -KILL "$p" 2>/dev/null || true; done
  [ -n "${CAPTURER:-}" ] && kill -KILL "$CAPTURER" 2>/dev/null || true
  for n in "$A" "$B"; do
    for d in /sys/fs/cgroup/freezer/cairn/$n.*; do
      [ -d "$d" ] && for p in $(cat "$d/cgroup.procs"); do kill -9 "$p" 2>/dev/null || true; done
    done
  done
  [ -f "$T/daemons" ] && for p in $(cat "$T/daemons"); do kill -9 "$p" 2>/dev/null || true; done
  sleep 0.3
  for n in "$A" "$B"; do for h in freezer memory cpu pids; do rmdir /sys/fs/cgroup/$h/cairn/$n.* 2>/dev/null || true; done; done
  for ns in "$NS_A" "$NS_B" "$NS_C"; do ip netns del "$ns" 2>/dev/null || true; done
  ip link del "$BR" 2>/dev/null || true
  if [ -n "${KEEP:-}" ]; then echo "kept $T"; else rm -rf "$T"; fi
  rm -rf "/dev/shm/cairnd-$A" "/dev/shm/cairnd-$B"
}
trap cleanup EXIT
ulimit -n "$(ulimit -Hn)"

# Three namespaces on one bridge: a = 10.77.0.1, b = .2, c = .3.
ip link add "$BR" type bridge && ip link set "$BR" up
i=1
for ns in "$NS_A" "$NS_B" "$NS_C"; do
  ip netns add "$ns"
  ip link add "v$ns" type veth peer name "w$ns"
  ip link set "v$ns" netns "$ns"
  ip link set "w$ns" master "$BR" up
  ip -n "$ns" addr add "10.77.0.$i/24" dev "v$ns"
  ip -n "$ns" link set "v$ns" up
  ip -n "$ns" link set lo up
  i=$((i + 1))
done

head -c 32 /dev/urandom | base64 > "$T/token"; chmod 600 "$T/token"
# (nsenter --net, not `ip netns exec`: that one also remounts /sys, and the daemons' cgroups
# would not be there.)
start() {  # NODE NAMESPACE EXTRA...
  local node=$1 ns=$2; shift 2
  nsenter --net="/run/netns/$ns" "$CAIRND" --node "$node" --state-dir "$T/$node" --socket "$T/$node.sock" --cairn-bin "$CAIRN" \
    --spool-dir "/dev/shm/cairnd-$node" "$@" > "$T/$node.log" 2>&1 &
  echo $! >> "$T/daemons"
  for _ in $(seq 100); do "$CAIRN" job list --socket "$T/$node.sock" >/dev/null 2>&1 && return; sleep 0.1; done
  echo "cairnd $node did not start:"; cat "$T/$node.log"; exit 1
}
start "$B" "$NS_B" --listen 10.77.0.2:7400 --token-file "$T/token" --peer "$A=10.77.0.1:7400" --peer-token-file "$T/token"
start "$A" "$NS_A" --listen 10.77.0.1:7400 --token-file "$T/token" --peer "$B=10.77.0.2:7400" --peer-token-file "$T/token"

"$CAIRN" job run --socket "$T/$A.sock" --name redis --address "$SERVICE/24" -- \
  "$REDIS" --bind "$SERVICE" --port 6379 --save "" --appendonly no --protected-mode no --maxclients 20000 >/dev/null

cat > "$T/clients.py" <<'PY'
import os, socket, sys, time
n, addr, work = int(sys.argv[1]), sys.argv[2], sys.argv[3]
def connect():
    for _ in range(100):
        try:
            return socket.create_connection((addr, 6379), timeout=5)
        except OSError:
            time.sleep(0.1)
    raise SystemExit("no server")
idle = [connect() for _ in range(n)]
ticker = connect()
ticker.settimeout(60)
open(work + "/ready", "w").close()
longest, reports = 0.0, 0
last = time.monotonic()
while True:
    ticker.sendall(b"PING\r\n")
    if ticker.recv(16) != b"+PONG\r\n":
        raise SystemExit("ticker: bad answer")
    now = time.monotonic()
    longest = max(longest, now - last)
    last = now
    if os.path.exists("%s/report%d" % (work, reports + 1)):
        reports += 1
        ok = bad = 0
        for s in idle:
            s.settimeout(10)
            try:
                s.sendall(b"PING\r\n")
                ok += s.recv(16) == b"+PONG\r\n"
            except OSError:
                bad += 1
        with open("%s/report%d.tmp" % (work, reports), "w") as f:
            f.write("%.6f %d %d\n" % (longest, ok, bad))
        os.rename("%s/report%d.tmp" % (work, reports), "%s/report%d.out" % (work, reports))
        longest = 0.0
        last = time.monotonic()
    time.sleep(0.001)
PY
mkdir -p "$T/c"
nsenter --net="/run/netns/$NS_C" python3 "$T/clients.py" "$CONNS" "$SERVICE" "$T/c" > "$T/clients.log" 2>&1 &
for _ in $(seq 300); do [ -f "$T/c/ready" ] && break; sleep 0.1; done
[ -f "$T/c/ready" ] || { echo "clients did not connect:"; cat "$T/clients.log"; exit 1; }
sleep 1

n=0
report() {  # sets $gap (s), $ok, $bad: since the previous report
  n=$((n + 1))
  touch "$T/c/report$n"
  for _ in $(seq 3000); do [ -f "$T/c/report$n.out" ] && break; sleep 0.01; done
  [ -f "$T/c/report$n.out" ] || { echo "the clients stopped answering:"; cat "$T/clients.log"; exit 1; }
  read -r gap ok bad < "$T/c/report$n.out"
}
echo "machine: $(nproc) CPUs, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg), ${BUSY:-0} CPUs kept busy; redis with $CONNS idle clients + 1 pinging"
echo
echo "| move | quiet window: longest wait | migration: client's longest wait | daemon's downtime | whole command | idle clients answered | reset or silent |"
echo "|---|---:|---:|---:|---:|---:|---:|"
label() { [ "$1" = "$A" ] && echo a || echo b; }
report
SPINNERS=""
for _ in $(seq "${BUSY:-0}"); do yes > /dev/null & SPINNERS="$SPINNERS $!"; done
if [ -n "${CAPTURE:-}" ]; then
  nsenter --net="/run/netns/$NS_C" python3 bench/packet_log.py "v$NS_C" "$CAPTURE" $((REPS * 2 * 30)) &
  CAPTURER=$!; : > "$CAPTURE.moves"; sleep 0.5
fi
mono() { python3 -c 'import time; print("%.4f" % time.monotonic())'; }
from=$A; to=$B
for rep in $(seq $((REPS * 2))); do
  [ -n "${CAPTURE:-}" ] && echo "$(label "$from") -> $(label "$to") start $(mono)" >> "$CAPTURE.moves"
  t0=$(date +%s.%N)
  "$CAIRN" job migrate --socket "$T/$from.sock" redis --to "$to" --json > "$T/m$rep.json"
  window=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
  report; mig_gap=$gap; mig_ok=$ok; mig_bad=$bad
  [ -n "${CAPTURE:-}" ] && echo "$(label "$from") -> $(label "$to") end $(mono)" >> "$CAPTURE.moves"
  sleep "$window"
  report; quiet_gap=$gap
  j=$T/m$rep.json
  printf "| %s → %s | %.1f ms | %.1f ms | %.1f ms | %.2f s | %d of %d | %d |\n" "$(label "$from")" "$(label "$to")" \
    "$(bc -l <<<"$quiet_gap*1000")" "$(bc -l <<<"$mig_gap*1000")" "$(jq -r '.downtime_s * 1000' "$j")" \
    "$(jq -r '.total_s' "$j")" "$mig_ok" "$CONNS" "$mig_bad"
  tmp=$from; from=$to; to=$tmp
done
