#!/usr/bin/env bash
# The main job, on embedded defaults: start a workload, checkpoint it, kill it, restore it
# with the same PID, and show it carrying on from where it stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
work=$(mktemp -d /tmp/cairn-demo.XXXXXX)
out="$work/ticker.log"
echo "== cairn check"
./build/cairn check || true
echo "== starting the workload (output in $out)"
# Own session; stdio to a file; no inherited descriptors beyond stdio.
(
  for fd in $(ls /proc/$BASHPID/fd); do
    if ((fd > 2)); then eval "exec $fd>&-"; fi
  done
  exec setsid ./build/examples/ticker 40 >"$out" 2>&1 </dev/null
) &
pid=$!
sleep 2
tail -n 3 "$out"
echo "== cairn dump --pid $pid --dir $work/ckpt  (the process is killed after the dump)"
./build/cairn dump --pid "$pid" --dir "$work/ckpt"
{ wait "$pid"; } 2>/dev/null || true
ps -p "$pid" >/dev/null && { echo "process still running?"; exit 1; }
echo "== process $pid is gone; its log stops at:"
tail -n 1 "$out"
echo "== cairn inspect $work/ckpt"
./build/cairn inspect "$work/ckpt" | sed -n 1,8p
echo "== cairn restore --dir $work/ckpt  (waits for the process and returns its status)"
./build/cairn restore --dir "$work/ckpt"
echo "== the log carried on with the same pid and hash chain:"
tail -n 4 "$out"
expected=$(./build/examples/ticker 40 | tail -n 1)
actual=$(tail -n 1 "$out")
if [[ "$expected" == "$actual" ]]; then
  echo "== final line equals an uninterrupted run's: $actual"
else
  echo "== MISMATCH: expected '$expected', got '$actual'"; exit 1
fi
rm -rf "$work"
