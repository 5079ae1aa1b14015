#!/usr/bin/env bash
# What live TCP connections cost a checkpoint (dump --tcp-established): redis-server with N
# clients connected (held by a python3 process outside the checkpoint) is dumped (killed) and
# restored, for N = 0 and N = CONNS, REPS times each, alternating. Times are the wall time of
# each command (what the user waits for) and the time the server stood frozen (the dump's
# summary); after each restore every client sends PING on its old connection and must get PONG:
# the resets and silent connections are counted, and the time from the PINGs to the last PONG
# is shown ("all answered").
#
#   sudo bash bench/tcp_connections.sh [CONNS]     (default: 1000)
#   BUILD=build selects the build directory (default build-bench, made Release if missing);
#   BUSY=N runs N busy loops beside it the whole time (a loaded machine);
#   STAGES=1 runs the dumps and restores with -vv and prints on stderr each dump's stages and
#   their ms, and when each restore stage ended (ms from the restore's first stage line, to the
#   log's millisecond): where the time goes (the debug log costs a little itself).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
bench_build cairn
conns=${1:-1000}
reps=${REPS:-3}
busy=${BUSY:-0}
work=$(mktemp -d /var/tmp/cairn-tcp.XXXXXX)
start_busy "$busy"
cleanup() {
  stop_busy
  pkill -KILL -f "$work/holder.py" 2>/dev/null || true
  [[ -n ${server:-} ]] && kill -KILL "$server" 2>/dev/null || true
  "$build/cairn" check --fix >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
ulimit -n "$(ulimit -Hn)"  # redis and the holder each hold CONNS descriptors

cat >"$work/holder.py" <<'PY'
import os, socket, sys, time
n, port, ready, go, result = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
socks = []
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"PING\r\n")
    assert s.recv(16) == b"+PONG\r\n"
    socks.append(s)
open(ready, "w").close()
while True:
    while not os.path.exists(go):
        time.sleep(0.01)
    os.unlink(go)
    ok = bad = 0
    t0 = time.monotonic()
    for s in socks:
        s.sendall(b"PING\r\n")
    for s in socks:
        s.settimeout(10)
        try:
            ok += s.recv(16) == b"+PONG\r\n"
        except OSError:
            bad += 1
    with open(result + ".tmp", "w") as f:
        f.write("%d %d %.3f\n" % (ok, bad, time.monotonic() - t0))
    os.rename(result + ".tmp", result)
PY

now() { date +%s.%N; }
port=$((20000 + RANDOM % 20000))
echo "| connections | dump s | frozen s | restore s | clients answered after restore | resets or silent | all answered s |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
for rep in $(seq "$reps"); do
  for n in 0 "$conns"; do
    rm -rf "$work/ckpt" "$work/ready" "$work/result" "$work/go"
    mkdir -p "$work/redis"
    (
      for fd in $(ls /proc/$BASHPID/fd); do if ((fd > 2)); then eval "exec $fd>&-"; fi; done
      exec redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work/redis" \
        --protected-mode no --maxclients 20000 </dev/null >/dev/null 2>&1
    ) &
    server=$!
    until redis-cli -p "$port" PING >/dev/null 2>&1; do sleep 0.05; done
    python3 "$work/holder.py" "$n" "$port" "$work/ready" "$work/go" "$work/result" &
    holder=$!
    until [[ -f $work/ready ]]; do sleep 0.05; done
    t0=$(now)
    if [[ ${STAGES:-0} == 1 ]]; then
      summary=$("$build/cairn" -vv dump --pid "$server" --dir "$work/ckpt" --tcp-established 2>"$work/dump.err")
    else
      summary=$("$build/cairn" dump --pid "$server" --dir "$work/ckpt" --tcp-established)
    fi
    t1=$(now)
    if [[ ${STAGES:-0} == 1 ]]; then
      echo "dump stages, $n connections (ms): $(sed -n 's/.*event=dump_stage pid=[0-9]* stage=\([a-z_]*\) ms=\([0-9.]*\).*/\1 \2/p' \
        "$work/dump.err" | tr '\n' ' ')" >&2
    fi
    while kill -0 "$server" 2>/dev/null; do sleep 0.01; done
    t2=$(now)
    if [[ ${STAGES:-0} == 1 ]]; then
      out=$("$build/cairn" -vv restore --detach --dir "$work/ckpt" 2>"$work/restore.err")
    else
      out=$("$build/cairn" restore --detach --dir "$work/ckpt")
    fi
    t3=$(now)
    if [[ ${STAGES:-0} == 1 ]]; then  # each stage's end, in ms from the first log line
      echo "restore stages, $n connections (ms from start): $(awk '/event=restore_stage stage=/ {
          split($1, t, "T"); split(t[2], h, ":"); ms = (h[1] * 3600 + h[2] * 60 + h[3]) * 1000
          if (first == "") first = ms; sub(/.*stage=/, ""); sub(/ .*/, ""); printf "%s %.0f ", $0, ms - first }' \
        "$work/restore.err")" >&2
    fi
    server=$(sed -n 's/^restored pid \([0-9]*\) .*/\1/p' <<<"$out")
    touch "$work/go"
    until [[ -f $work/result ]]; do sleep 0.01; done
    read -r ok bad answered <"$work/result"
    frozen=$(sed -n 's/.*(frozen \([0-9.]*\) s).*/\1/p' <<<"$summary")
    printf '| %d | %.3f | %s | %.3f | %d of %d | %d | %s |\n' "$n" "$(echo "$t1 - $t0" | bc)" "${frozen:-?}" \
      "$(echo "$t3 - $t2" | bc)" "$ok" "$n" "$bad" "$answered"
    kill -KILL "$holder" 2>/dev/null || true
    wait "$holder" 2>/dev/null || true
    kill -KILL "$server"
    # (Restored, it is init's child: a zombie until init reaps it, which some never do.)
    while kill -0 "$server" 2>/dev/null && [[ $(awk '{print $3}' "/proc/$server/stat" 2>/dev/null) != Z ]]; do
      sleep 0.01
    done
    port=$((port + 1))
  done
done
