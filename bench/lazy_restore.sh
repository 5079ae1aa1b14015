#!/usr/bin/env bash
# Lazy restore of one process holding SIZE MiB of random data (bench/mem_holder), image in
# the page cache: the time from `cairn restore --detach --lazy` starting until it returns
# (the process runs again), and until the page handler reports every page in
# (event=lazy_done, polled every 5 ms), beside a plain (eager) restore of the same image.
# Prints a markdown table for docs/performance.md.
#
#   sudo bash bench/lazy_restore.sh [SIZES_MIB...]    (default: 1024 4096)
#   BENCH_DIR=/dev/shm puts the images on tmpfs (default /var/tmp); REPS=3.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
bench_build cairn mem_holder
sizes=("$@")
((${#sizes[@]})) || sizes=(1024 4096)
where=${BENCH_DIR:-/var/tmp}
reps=${REPS:-3}

now() { date +%s.%N; }
ms() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", (b - a) * 1000 }'; }

start_holder() {  # $1 MiB, $2 ready file; prints the pid
  (
    for fd in $(ls /proc/$BASHPID/fd); do if ((fd > 2)); then eval "exec $fd>&-"; fi; done
    exec "$build/bench/mem_holder" "$1" "$2" </dev/null >/dev/null 2>&1
  ) &
  echo $!
}

echo "| where | size | eager restore ms | lazy: runs again ms | lazy: every page in ms | page server: runs again ms | page server: every page in ms |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for mib in "${sizes[@]}"; do
  for ((rep = 0; rep < reps; rep++)); do
    work=$(mktemp -d "$where/cairn-lazy-bench.XXXXXX")
    pid=$(start_holder "$mib" "$work/ready")
    while [[ ! -f $work/ready ]]; do sleep 0.05; done
    "$build/cairn" dump --pid "$pid" --dir "$work/ckpt" >/dev/null
    { wait "$pid"; } 2>/dev/null || true
    cat "$work/ckpt/pages.img" >/dev/null
    # Eager, for reference.
    t0=$(now)
    "$build/cairn" restore --dir "$work/ckpt" --detach >/dev/null
    t1=$(now)
    eager=$(ms "$t0" "$t1")
    kill -9 "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.01; done
    cat "$work/ckpt/pages.img" >/dev/null
    # Lazy. The handler logs event=lazy_done on cairn's stderr (-v) once every page is in.
    t2=$(now)
    "$build/cairn" -v restore --dir "$work/ckpt" --detach --lazy >/dev/null 2>"$work/lazy.err"
    t3=$(now)
    while ! grep -q "event=lazy_done" "$work/lazy.err"; do
      if grep -q "error" "$work/lazy.err"; then cat "$work/lazy.err" >&2; exit 1; fi
      sleep 0.005
    done
    t4=$(now)
    # Every page must be resident once the handler is done (content is checked by the tests).
    rss=$(awk '/RssAnon/ { print $2 }' "/proc/$pid/status")
    kill -9 "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.01; done
    ((rss >= mib * 1024)) || { echo "lazy restore: only $rss KiB resident of $mib MiB" >&2; exit 1; }
    # Lazy from a page server on loopback; it exits by itself once the restore has every page.
    head -c 32 /dev/urandom | base64 >"$work/token"
    chmod 600 "$work/token"
    cat "$work/ckpt/pages.img" >/dev/null
    (
      for fd in $(ls /proc/$BASHPID/fd); do if ((fd > 2)); then eval "exec $fd>&-"; fi; done
      exec "$build/cairn" page-server --dir "$work/ckpt" --listen 127.0.0.1:0 --token-file "$work/token" \
        >"$work/server.out" 2>"$work/server.err" </dev/null
    ) &
    server=$!
    while ! grep -q "serving" "$work/server.out" 2>/dev/null; do sleep 0.01; done
    addr=$(sed -n 's/.* on \(127\.0\.0\.1:[0-9]*\)$/\1/p' "$work/server.out")
    t5=$(now)
    "$build/cairn" -v restore --page-server "$addr" --token-file "$work/token" --detach --lazy \
      >/dev/null 2>"$work/remote.err"
    t6=$(now)
    while ! grep -q "event=lazy_done" "$work/remote.err"; do
      if grep -q "error" "$work/remote.err"; then cat "$work/remote.err" >&2; exit 1; fi
      sleep 0.005
    done
    t7=$(now)
    rss=$(awk '/RssAnon/ { print $2 }' "/proc/$pid/status")
    kill -9 "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.01; done
    wait "$server" || { echo "page server failed: $(cat "$work/server.err")" >&2; exit 1; }
    rm -rf "$work"
    ((rss >= mib * 1024)) || { echo "page-server restore: only $rss KiB resident of $mib MiB" >&2; exit 1; }
    echo "| $where | $mib MiB | $eager | $(ms "$t2" "$t3") | $(ms "$t2" "$t4") | $(ms "$t5" "$t6") | $(ms "$t5" "$t7") |"
  done
done
