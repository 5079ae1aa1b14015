#!/usr/bin/env bash
# Chaos run with the controller (issue 21, docs/reliability.md): a 3-member etcd cluster, two
# cairn-controllers on it (--dispatch cairnd), three cairnd joined to both controllers, sharing a
# dir: checkpoint store. JOBS jobs are submitted through the controller, each the hash chain of
# tests/faults/chaos.sh (a known uninterrupted result) with periodic checkpoints. For DURATION
# seconds, every 1.5-4.5 s one random fault:
#   - the leading controller SIGKILLed, started again 1-3 s later;
#   - one etcd member SIGKILLed, started again 3-6 s later (never two members down at once);
#   - a daemon SIGKILLed, started again 0.5-3 s later;
#   - a price change: a daemon SIGKILLed and started again at once with the other of two
#     --price-per-hour ($2 and $10); every registration (this one, a restarted daemon's, and all
#     of them after a leader change) runs the controller's cheaper-capacity rule, which moves a
#     job from a dear node to a cheap one, live, while the other faults keep landing (so the
#     controller decides and carries out moves in the middle of leader changes and etcd
#     elections).
# At most one controller, one etcd member and one daemon are down at a time. The heartbeat
# timeout is 8 s: a daemon is back (restarted and registered, about 1-4 s) well before it, so a
# daemon restart is not a node loss; what is tested here is the controller's crash safety around
# moves, not the node-lost rule (tests/daemon/e2e_test covers that). A new leader gives every
# node a full timeout from its election, so controller kills do not make nodes lost either.
# (Spot notices are not used: a node that got one stays draining for good, which would leave
# the run with fewer nodes to move jobs between.)
#
# Moves are short (a live migration of these jobs takes 0.3-1 s), so random kills seldom land in
# one. A watcher follows the daemons' logs and, at half the migrations that begin (a daemon logs
# kind=migrating), SIGKILLs the leading controller 0-0.6 s later (the leader read from etcd: the
# leader itself does not answer while it carries a move out), at most once every 4 s; the main
# loop starts it again 1-3 s later. So some leaders die with a move stored in flight, and the next
# one must resolve it (the decision-* events).
#
# A sampler asks every daemon which jobs it runs (`cairn job list --json`: state running or
# checkpointing, its pid alive and neither frozen nor stopped, i.e. not a dump's frozen source)
# every 0.5 s, the three at once; a job seen on two nodes in two samples in a row is counted "on
# two nodes" (a single sample is printed as "transient": the three answers are not one instant).
# When the faults stop, everything is started again, the controller must settle (every node
# healthy, every job running, no decision waiting) and every job is let finish; each must write its
# "done" line exactly once, with the uninterrupted result. Then, the jobs ended, the leader is
# killed once more and each daemon restarted, and after 15 s still no job may have run again (a
# finished job started again by a new leader or a reconciliation would write a second line).
# Prints the counts; exits 1 on a lost job, one that finished twice or wrong, or one seen on two
# nodes.
#
#   bash tests/faults/chaos_controller.sh [BUILD_DIR]   DURATION=300 JOBS=12 SEED=... CKPT=5 KEEP=1
#
# (defaults shown; KEEP=1 keeps the run's directory: logs, events.json, chaos.log.) Needs root
# and Debian's etcd (etcd-server, etcd-client); exits 77 (skipped) without them. ctest runs a
# short one: faults_chaos_controller_short (tests/faults/CMakeLists.txt).
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=$(realpath "${1:-build}")
DURATION=${DURATION:-300}
JOBS=${JOBS:-12}
SEED=${SEED:-$RANDOM}
RANDOM=$SEED
ROUNDS=${ROUNDS:-300000}
CKPT=${CKPT:-5}          # --checkpoint-interval of every job, seconds
HB_TIMEOUT=${HB_TIMEOUT:-8}
TAIL=${TAIL:-240}        # the most seconds the jobs get to finish after the faults stop
CAIRN=$BUILD/cairn
CAIRND=$BUILD/cairnd
CONTROLLER=$BUILD/cairn-controller
ETCD=${ETCD:-/usr/bin/etcd}
# 77: skipped (ctest's SKIP_RETURN_CODE), for what this machine lacks.
[ "$(id -u)" = 0 ] || { echo "chaos-controller: needs root (cgroups, checkpoints)"; exit 77; }
for x in "$ETCD" /usr/bin/etcdctl; do
  [ -x "$x" ] || { echo "chaos-controller: no $x (apt-get install etcd-server etcd-client)"; exit 77; }
done
for b in "$CAIRN" "$CAIRND" "$CONTROLLER"; do
  [ -x "$b" ] || { echo "chaos-controller: $b missing"; exit 2; }
done
T=$(mktemp -d "${STATE_DIR:-/var/tmp}/cairn-chaos-ctl.XXXXXX")
chmod 700 "$T"
NODES=(na-$$ nb-$$ nc-$$)
source tests/faults/chaos_jobs.sh  # CHAOS_JOB, EXPECTED, chaos_release, chaos_tally, chaos_clean_nodes
CTLS=(ctl-a ctl-b)
MEMBERS=(m0 m1 m2)
declare -A PORT PID PRICE DOWN
echo "chaos-controller: $JOBS jobs, 3 daemons, 2 controllers, 3 etcd members, ${DURATION}s, seed $SEED, in $T"

now_ms() { local t=${EPOCHREALTIME/./}; echo $((t / 1000)); }
log() { printf '%s %s\n' "$(date +%T.%3N)" "$*" >>"$T/chaos.log"; }

cleanup() {
  touch "$T/stop-sampler" 2>/dev/null
  for k in "${!PID[@]}"; do [ -n "${PID[$k]}" ] && kill -9 "${PID[$k]}" 2>/dev/null; done
  [ -n "${SAMPLER:-}" ] && kill -9 "$SAMPLER" 2>/dev/null
  [ -n "${WATCHER:-}" ] && kill -9 "$WATCHER" 2>/dev/null
  { wait; } 2>/dev/null
  chaos_clean_nodes "${NODES[@]}"
}
trap cleanup EXIT

# Free ports, all different: held open together while chosen. (One at a time, the same port can
# come back twice; gRPC servers bind with SO_REUSEPORT, so two daemons would then share it.)
free_ports() { python3 -c '
import socket, sys
ss = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))' "$1"; }
echo "chaos-controller-token-0123456789" >"$T/ctl.token"; chmod 600 "$T/ctl.token"
echo "chaos-daemon-token-0123456789abcd" >"$T/daemon.token"; chmod 600 "$T/daemon.token"
mkdir -p "$T/store" "$T/jobs"; chmod 700 "$T/store"
read -r -a ports <<<"$(free_ports 11)"
for x in "${NODES[@]}" "${CTLS[@]}" "${MEMBERS[@]}" m0-peer m1-peer m2-peer; do PORT[$x]=${ports[0]}; ports=("${ports[@]:1}"); done
INITIAL=""; EPS=""
for m in "${MEMBERS[@]}"; do
  INITIAL+="${INITIAL:+,}$m=http://127.0.0.1:${PORT[$m-peer]}"
  EPS+="${EPS:+,}127.0.0.1:${PORT[$m]}"
done
CTL_ADDRS="127.0.0.1:${PORT[ctl-a]},127.0.0.1:${PORT[ctl-b]}"

# ---- the processes ----
start_etcd() {
  local m=$1
  # A member killed and started again on its data dir rejoins (the --initial-* flags are then
  # ignored). Elections of 1 s: this box also runs the jobs and their checkpoints.
  "$ETCD" --name "$m" --data-dir "$T/etcd-$m" \
    --listen-client-urls "http://127.0.0.1:${PORT[$m]}" --advertise-client-urls "http://127.0.0.1:${PORT[$m]}" \
    --listen-peer-urls "http://127.0.0.1:${PORT[$m-peer]}" --initial-advertise-peer-urls "http://127.0.0.1:${PORT[$m-peer]}" \
    --initial-cluster "$INITIAL" --initial-cluster-state new --initial-cluster-token "chaos-$$" \
    --heartbeat-interval 100 --election-timeout 1000 </dev/null >>"$T/etcd-$m.log" 2>&1 &
  PID[$m]=$!
}
etcd_healthy() {
  curl -sf -m 2 -X POST -d '{"key":"AA=="}' "http://127.0.0.1:${PORT[$1]}/v3/kv/range" >/dev/null
}
start_controller() {
  local c=$1
  rm -f "$T/$c.pid"
  "$CONTROLLER" --store "etcd://$EPS" --socket "$T/$c.sock" --id "$c" --dispatch cairnd \
    --listen "127.0.0.1:${PORT[$c]}" --token-file "$T/ctl.token" \
    --heartbeat-interval 0.5 --heartbeat-timeout "$HB_TIMEOUT" --lease-ttl 2 -v \
    </dev/null >>"$T/$c.log" 2>&1 &
  PID[$c]=$!
  echo "${PID[$c]}" >"$T/$c.pid"
}
start_daemon() {
  local n=$1
  "$CAIRND" --node "$n" --state-dir "$T/$n" --socket "$T/$n.sock" --tick 0.2 --cairn-bin "$CAIRN" \
    --listen "127.0.0.1:${PORT[$n]}" --token-file "$T/daemon.token" \
    --controller "$CTL_ADDRS" --controller-token-file "$T/ctl.token" \
    --price-per-hour "${PRICE[$n]}" --cpus 8 --memory-mb 16000 \
    --image-key "$T/image.key" --storage "dir:$T/store" --spool-dir "$T/spool-$n" \
    </dev/null >>"$T/$n.log" 2>&1 &
  PID[$n]=$!
  for _ in $(seq 100); do "$CAIRN" job list --socket "$T/$n.sock" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "chaos-controller: daemon $n did not start"; tail -5 "$T/$n.log"; return 1
}
start_any() {
  case $1 in
    m*) start_etcd "$1" ;;
    ctl-*) start_controller "$1" ;;
    *) start_daemon "$1" ;;
  esac
}
kill9() { kill -9 "${PID[$1]}" 2>/dev/null; { wait "${PID[$1]}"; } 2>/dev/null; PID[$1]=""; }
# The controller CLI against both controllers (it tries them until the leader answers).
export CAIRN_CONTROLLER=$CTL_ADDRS CAIRN_TOKEN=chaos-controller-token-0123456789
ctl() { "$CAIRN" "$@"; }

# The leading controller's name (ctl-a or ctl-b; the controller adds a suffix to --id), or nothing.
leader() {
  ctl cluster status --json --timeout 3 2>/dev/null | python3 -c "
import json,sys
try: print(json.load(sys.stdin).get('controller_id','').rsplit('-',1)[0])
except Exception: pass"
}

# ---- start ----
for m in "${MEMBERS[@]}"; do start_etcd "$m"; done
for _ in $(seq 150); do
  ok=1; for m in "${MEMBERS[@]}"; do etcd_healthy "$m" || ok=0; done
  ((ok)) && break; sleep 0.2
done
((ok)) || { echo "chaos-controller: etcd not healthy"; tail -5 "$T/etcd-m0.log"; exit 1; }
for c in "${CTLS[@]}"; do start_controller "$c"; done
for _ in $(seq 60); do [ -n "$(leader)" ] && break; sleep 0.5; done
[ -n "$(leader)" ] || { echo "chaos-controller: no controller leads"; tail -5 "$T/ctl-a.log"; exit 1; }
# Prices: $2/h (cheap) or $10/h (dear), a difference that outweighs the placer's packing costs,
# so that a job on a dear node is worth moving to a cheap one. The first node starts cheap.
CHEAP=2.00; DEAR=10.00
for n in "${NODES[@]}"; do PRICE[$n]=$DEAR; done; PRICE[${NODES[0]}]=$CHEAP
for n in "${NODES[@]}"; do start_daemon "$n" || exit 1; done
for _ in $(seq 60); do
  nodes=$(ctl cluster status --json 2>/dev/null | python3 -c "
import json,sys
try: print(sum(1 for n in json.load(sys.stdin).get('nodes',[]) if n.get('health')=='healthy'))
except Exception: print(0)")
  ((nodes == 3)) && break; sleep 0.5
done
((nodes == 3)) || { echo "chaos-controller: $nodes of 3 nodes registered"; exit 1; }

JOBIDS=()
for j in $(seq -w 1 "$JOBS"); do
  id=j$j; JOBIDS+=("$id")
  mkdir -p "$T/jobs/$id"
  ctl submit --id "$id" --cpus 1 --memory-mb 100 --work-hours 10 --checkpoint-interval "$CKPT" --json -- \
    /usr/bin/env PYTHONHASHSEED=0 /usr/bin/python3 -I -c "$CHAOS_JOB" "$T/jobs/$id/endings" "$ROUNDS" "$T/jobs/$id/go" \
    >>"$T/submit.out" 2>&1 || { echo "chaos-controller: job $id not submitted"; tail -3 "$T/submit.out"; exit 1; }
done

# ---- the sampler ----
python3 - "$CAIRN" "$T" "${NODES[@]}" >"$T/sampler.out" 2>"$T/sampler.err" <<'PY' &
import json, os, subprocess, sys, threading, time
cairn, t, nodes = sys.argv[1], sys.argv[2], sys.argv[3:]
detail = {}
def computing(n, name, pid):
    # A copy that can compute: not frozen (a dump in progress: a checkpoint, or the source side
    # of a live migration between its last copy and the hand-over), not stopped (seized by the
    # dump), alive.
    fz = st = "?"
    try:
        with open(f"/sys/fs/cgroup/freezer/cairn/{n}.{name}/freezer.state") as f:
            fz = f.read().strip()
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:
            st = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        st = "gone"
    detail[(n, name)] = f"pid {pid} {st} freezer {fz} at {time.time() - t0:.2f} s"
    return fz in ("THAWED", "?") and st not in ("t", "T", "Z", "X", "gone")
def running(n, out):
    try:
        r = subprocess.run([cairn, "job", "list", "--json", "--socket", f"{t}/{n}.sock"],
                           capture_output=True, text=True, timeout=5)
        for j in json.loads(r.stdout).get("jobs", []):
            pid = j.get("host_pid", 0)
            if j.get("state") in ("running", "checkpointing") and pid and computing(n, j["name"], pid):
                out[n].add(j["name"])
    except Exception:
        pass
samples = transient = 0
prev, episodes, where, moves = {}, {}, {}, 0
while not os.path.exists(f"{t}/stop-sampler"):
    out = {n: set() for n in nodes}
    t0 = time.time()  # each node's copy is looked at when its own answer comes: the times say when
    th = [threading.Thread(target=running, args=(n, out)) for n in nodes]
    for x in th: x.start()
    for x in th: x.join()
    samples += 1
    on = {}
    for n in nodes:
        for j in out[n]: on.setdefault(j, []).append(n)
    for j, ns in on.items():
        if len(ns) == 1:
            if where.get(j) not in (None, ns[0]): moves += 1
            where[j] = ns[0]
    now = {j: sorted(ns) for j, ns in on.items() if len(ns) > 1}
    for j, ns in now.items():
        if prev.get(j) == ns:
            if j not in episodes or episodes[j][-1][1] != prev_samples:
                episodes.setdefault(j, []).append([time.strftime("%T"), samples, ns])
                print(f"{time.strftime('%T')} {j} on two nodes: {ns}", flush=True)
            episodes[j][-1][1] = samples
        else:
            transient += 1
            print(f"{time.strftime('%T')} transient: {j} on {ns}: "
                  + "; ".join(f"{n} {detail.get((n, j), '')}" for n in ns), flush=True)
    prev, prev_samples = now, samples
    time.sleep(0.5)
twice = sum(len(v) for v in episodes.values())
print(f"SUMMARY samples={samples} twice={twice} transient={transient} moves_seen={moves}", flush=True)
PY
SAMPLER=$!

# From here on bash's own notices of the processes killed (the "Killed" lines) go to a file;
# the rest of what lands there is shown at the end.
exec 3>&2 2>>"$T/shell.err"

# ---- the watcher: the leader killed during migrations ----
python3 - "$T" "$SEED" "$EPS" "${NODES[@]}" >>"$T/watcher.err" 2>&1 <<'PY' &
import os, random, signal, subprocess, sys, time
t, seed, eps, nodes = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
random.seed(seed)
files = {}
for n in nodes:
    f = open(f"{t}/{n}.log", "a+"); f.seek(0, 2); files[n] = f
last_kill = 0.0
def log(msg):
    with open(f"{t}/chaos.log", "a") as f:
        f.write(time.strftime("%T.") + "%03d " % (time.time() % 1 * 1000) + msg + "\n")
def alive(c):
    try:
        pid = int(open(f"{t}/{c}.pid").read())
        os.kill(pid, 0)
        return pid
    except Exception:
        return 0
while not os.path.exists(f"{t}/stop-watcher"):
    began = []
    for n, f in files.items():
        while True:
            line = f.readline()
            if not line: break
            if "kind=migrating" in line: began.append(line)
    if began and time.time() - last_kill > 4 and random.random() < 0.5 and alive("ctl-a") and alive("ctl-b"):
        time.sleep(random.uniform(0, 0.6))
        try:
            r = subprocess.run(["etcdctl", "--endpoints", eps, "--command-timeout=2s", "get", "/cairn/leader",
                                "--print-value-only"], capture_output=True, text=True, timeout=3,
                               env=dict(os.environ, ETCDCTL_API="3"))
            c = r.stdout.strip().rsplit("-", 1)[0]
        except Exception:
            c = ""
        pid = alive(c) if c in ("ctl-a", "ctl-b") else 0
        if pid:
            os.kill(pid, signal.SIGKILL)
            last_kill = time.time()
            log(f"kill {c} (leader, during a migration)")
    time.sleep(0.02)
PY
WATCHER=$!

# ---- the faults ----
declare -A DUE  # what is down -> when (ms) it is started again
ctl_kills=0; etcd_kills=0; daemon_kills=0; drops=0; rises=0; skipped=0
down_of() { local k; for k in "${!DUE[@]}"; do [[ $k == $1* ]] && { echo "$k"; return; }; done; }
end=$(( $(now_ms) + DURATION * 1000 ))
next=$(( $(now_ms) + 3000 ))
while (( $(now_ms) < end )); do
  t=$(now_ms)
  for k in "${!DUE[@]}"; do
    if (( t >= DUE[$k] )); then unset "DUE[$k]"; log "start $k"; start_any "$k" || exit 1; fi
  done
  # A controller the watcher killed: started again 1-3 s later.
  for c in "${CTLS[@]}"; do
    if [ -n "${PID[$c]}" ] && ! kill -0 "${PID[$c]}" 2>/dev/null; then
      { wait "${PID[$c]}"; } 2>/dev/null; PID[$c]=""; DUE[$c]=$(( t + 1000 + RANDOM % 2000 )); ctl_kills=$((ctl_kills + 1))
    fi
  done
  if (( t >= next )); then
    next=$(( t + 1500 + RANDOM % 3000 ))
    r=$((RANDOM % 100))
    if ((r < 25)); then
      # The leading controller (never both down).
      c=$(leader)
      if [ -z "$c" ] || [ -n "$(down_of ctl-)" ] || [ -z "${PID[$c]:-}" ]; then skipped=$((skipped + 1)); log "no controller kill (leader '$c')"
      else kill9 "$c"; DUE[$c]=$(( $(now_ms) + 1000 + RANDOM % 2000 )); ctl_kills=$((ctl_kills + 1)); log "kill $c (leader)"; fi
    elif ((r < 45)); then
      if [ -n "$(down_of m)" ]; then skipped=$((skipped + 1))
      else m=${MEMBERS[$((RANDOM % 3))]}; kill9 "$m"; DUE[$m]=$(( $(now_ms) + 3000 + RANDOM % 3000 )); etcd_kills=$((etcd_kills + 1)); log "kill etcd $m"; fi
    else
      n=${NODES[$((RANDOM % 3))]}
      if [ -n "$(down_of n)" ]; then skipped=$((skipped + 1))
      elif ((r < 70)); then
        kill9 "$n"; DUE[$n]=$(( $(now_ms) + 500 + RANDOM % 2500 )); daemon_kills=$((daemon_kills + 1)); log "kill daemon $n"
      else
        # A price change: restarted at once, dear if it was cheap, cheap if it was dear.
        kill9 "$n"; daemon_kills=$((daemon_kills + 1))
        if [ "${PRICE[$n]}" = "$DEAR" ]; then PRICE[$n]=$CHEAP; drops=$((drops + 1)); else PRICE[$n]=$DEAR; rises=$((rises + 1)); fi
        log "price change: $n to ${PRICE[$n]}"
        start_daemon "$n" || exit 1
      fi
    fi
  fi
  sleep 0.1
done
log "faults over"
touch "$T/stop-watcher"; wait "$WATCHER" 2>/dev/null; WATCHER=""
aimed_kills=$(grep -c "during a migration" "$T/chaos.log")
for c in "${CTLS[@]}"; do
  if [ -n "${PID[$c]}" ] && ! kill -0 "${PID[$c]}" 2>/dev/null; then
    { wait "${PID[$c]}"; } 2>/dev/null; PID[$c]=""; DUE[$c]=0; ctl_kills=$((ctl_kills + 1))
  fi
done
for k in "${!DUE[@]}"; do unset "DUE[$k]"; log "start $k"; start_any "$k" || exit 1; done

# ---- settle, release, check ----
# Every node registered and healthy, no decision waiting (in flight or pending): up to 120 s.
settle_end=$((SECONDS + 120))
while ((SECONDS < settle_end)); do
  st=$(ctl cluster status --json --timeout 5 2>/dev/null | python3 -c "
import json,sys
try: d=json.load(sys.stdin)
except Exception: print('no-answer'); sys.exit()
bad=[n['spec']['id']+':'+n.get('health','') for n in d.get('nodes',[]) if n.get('health')!='healthy']
bad+=[j['spec']['id']+':'+j.get('state','')+':'+j.get('pending_action','') for j in d.get('jobs',[]) if j.get('state')!='running' or j.get('pending_action')]
print(' '.join(bad) if bad else 'ok')")
  [ "$st" = ok ] && break
  sleep 1
done
log "settled: $st"
[ "$st" = ok ] || echo "chaos-controller: not settled after 120 s: $st"
# The newest event before the jobs are let finish: the figures below are of the run up to it.
release_seq=$(ctl events --json --last 1 --timeout 10 2>/dev/null | python3 -c "
import json,sys
try: print(max(int(e['seq']) for e in json.load(sys.stdin)['events']))
except Exception: print(0)")
chaos_release "$TAIL" "${JOBIDS[@]}"
sleep 5
# The jobs ended: a leader change and every daemon restarted must not run any of them again.
c=$(leader); [ -n "$c" ] && { kill9 "$c"; log "kill $c (leader, jobs ended)"; ctl_kills=$((ctl_kills + 1)); sleep 2; start_controller "$c"; }
for n in "${NODES[@]}"; do kill9 "$n"; log "restart $n (jobs ended)"; daemon_kills=$((daemon_kills + 1)); start_daemon "$n" || exit 1; done
sleep 15  # a second copy, if any, would write its line now
touch "$T/stop-sampler"; wait "$SAMPLER" 2>/dev/null; SAMPLER=""
chaos_tally chaos-controller "${JOBIDS[@]}"
exec 2>&3
grep -v ' Killed ' "$T/shell.err" >&2
grep -v SUMMARY "$T/sampler.out"
summary=$(grep SUMMARY "$T/sampler.out")
twice=$(sed -n 's/.* twice=\([0-9]*\).*/\1/p' <<<"$summary"); twice=${twice:-0}
transient=$(sed -n 's/.* transient=\([0-9]*\).*/\1/p' <<<"$summary")
samples=$(sed -n 's/.* samples=\([0-9]*\).*/\1/p' <<<"$summary")
seen=$(sed -n 's/.* moves_seen=\([0-9]*\).*/\1/p' <<<"$summary")
# What the controllers decided and how their decisions ended (the event log in etcd).
ctl events --json --timeout 10 >"$T/events.json" 2>>"$T/events.err"
ctl cluster status --json --timeout 10 >"$T/status.json" 2>>"$T/events.err"
figures=$(python3 - "$T/events.json" "$T/status.json" "$release_seq" <<'PY'
import collections, json, sys
try: ev = json.load(open(sys.argv[1])).get("events", [])
except Exception: ev = []
after = [e for e in ev if int(e.get("seq", 0)) > int(sys.argv[3])]
ev = [e for e in ev if int(e.get("seq", 0)) <= int(sys.argv[3])]
print(f"after the jobs were let finish: {len(after)} events, {sum(e.get('kind') == 'decision' for e in after)} decisions;"
      f" {sum(e.get('kind') in ('decision-resolved', 'decision-resumed') for e in after)} in-flight moves carried out"
      f" (again) then")
k = collections.Counter(e.get("kind", "") for e in ev)
dec = [e for e in ev if e.get("kind") == "decision"]
moves = [e for e in dec if e.get("action") in ("migrate", "restore")]
ok = [e for e in moves if e.get("dispatch", "").startswith(("migrated", "restored"))]
rules = collections.Counter(e.get("rule", "") for e in dec)
try: jobs = collections.Counter(j.get("state", "") for j in json.load(open(sys.argv[2])).get("jobs", []))
except Exception: jobs = {}
print(f"decisions {len(dec)} ({', '.join(f'{r} {n}' for r, n in sorted(rules.items()))}), moves decided {len(moves)}"
      f" (carried out at once {len(ok)}); in flight found by a new leader: carried out {k['decision-resolved']},"
      f" resumed {k['decision-resumed']}, abandoned {k['decision-abandoned']}; not carried out and tried again"
      f" {sum('tried again in' in e.get('dispatch', '') for e in dec)}, dropped {k['decision-dropped']};"
      f" leader-elected {k['leader-elected']},"
      f" node-lost {k['node-lost']}, node-returned {k['node-returned']}, fenced {k['fenced']}, job-found {k['job-found']};"
      f" controller job states: {dict(jobs)}")
PY
)
echo "chaos-controller: ${DURATION}s, seed $SEED: $ctl_kills controller kills ($aimed_kills during a migration), $etcd_kills etcd member kills," \
  "$daemon_kills daemon kills ($((drops + rises)) of them price changes: $drops down, $rises up), $skipped faults skipped (one of its kind already down)"
echo "chaos-controller: until the jobs were let finish: $(sed -n 2p <<<"$figures")"
echo "chaos-controller: $(sed -n 1p <<<"$figures")"
echo "chaos-controller: jobs: $JOBS, finished right $((JOBS - lost - dup - wrong)), lost $lost, finished twice $dup," \
  "wrong result $wrong, on two nodes $twice (transient sightings $transient in $samples samples; moves seen $seen)"
((lost == 0 && dup == 0 && wrong == 0 && twice == 0))
