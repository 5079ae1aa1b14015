#!/bin/bash
# The GPU device check of issue 14 (docs/gpu.md): everything that needs a real GPU, in one run
# sized for the lent GPU machine (under 8 minutes; it has no package registry, so cairn is built
# here and carried there).
#
#   bash tests/gpu/device_check.sh prepare [BUILD]   here: strips BUILD's cairn and cairnd (default
#       build/) with the shared libraries they load into build-gpu/bundle.tar.xz (git-ignored:
#       the device tool's `carry: ["build-gpu"]` takes it along)
#   bash tests/gpu/device_check.sh run               there: everything below; the report goes to
#       $OUT/device_check.md (and stdout); exits 1 if a check failed
#   CPU_ONLY=1 bash tests/gpu/device_check.sh run    here, to check the script itself: the same
#       steps with PyTorch on the CPU, the fake driver of tests/gpu and its fake_cuda_app for the
#       CUDA program, small sizes, the binaries of $BUILD (default build/); ctest runs it so
#
# The checks (each on the program's own view: a checksum, a loss, an answer):
#   1. the host<->device copy rate (copy_rate.cu), pageable and pinned
#   2. a CUDA program holding 1 GiB it keeps transforming (cuda_mem.cu): dump, kill, restore, the
#      same checksum as an uninterrupted run; and a --leave-running dump of it
#   3. a PyTorch training loop (train.py): checkpoint mid-run, kill, restore, the final loss equal
#      bit for bit; and --leave-running
#   4. a PyTorch inference server (serve.py, SERVE_GIB of weights, default 16): dump, kill,
#      restore, the same answer, and the time from `cairn restore` to its first answer; and
#      --leave-running
#   5. the NVML watcher (cairnd --gpu-watch auto): starts, lists the GPU, reports no event
#   6. timings of lock, device checkpoint, dump, restore, device restore and unlock for
#      SIZES_GIB (default "1 10 40") of device memory
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
MODE=${1:-run}

if [ "$MODE" = prepare ]; then
  BUILD=$(cd "${2:-$ROOT/build}" && pwd)
  B=$(mktemp -d)
  mkdir -p "$B/lib"
  strip -o "$B/cairn" "$BUILD/cairn" && strip -o "$B/cairnd" "$BUILD/cairnd" || exit 1
  # Every shared library they load, with the loader: the GPU machine's own are used where they
  # work (lib/ holds only what Debian 12 has and it may not: spdlog, fmt); lib-full/ is the fallback.
  mkdir -p "$B/lib-full"
  for lib in $(ldd "$BUILD/cairn" "$BUILD/cairnd" | awk '/=>/ {print $3} /ld-linux/ && !/=>/ {print $1}' | sort -u); do
    cp -L "$lib" "$B/lib-full/"
    case "$(basename "$lib")" in libspdlog*|libfmt*) cp -L "$lib" "$B/lib/" ;; esac
  done
  mkdir -p "$ROOT/build-gpu"
  tar -C "$B" -cJf "$ROOT/build-gpu/bundle.tar.xz" . || exit 1
  rm -rf "$B"
  ls -la "$ROOT/build-gpu/bundle.tar.xz"
  exit 0
fi
[ "$MODE" = run ] || { echo "usage: $0 prepare [BUILD] | run" >&2; exit 2; }

OUT=${OUT:-/tmp/device-check-out}
W=${WORK:-/tmp/cairn-device-check}
rm -rf "$W"
mkdir -p "$OUT" "$W"
REPORT=$OUT/device_check.md
: > "$REPORT"
FAILS=0
T_START=$(date +%s.%N)
say() { echo "$*" | tee -a "$REPORT"; }
pass() { say "- PASS $1"; }
fail() { say "- **FAIL** $1"; FAILS=$((FAILS + 1)); }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", b - a}'; }

# Checkpoint images go where they fit: /dev/shm when it has room for the largest, else disk.
IMAGES=$W/images
SIZES_GIB=${SIZES_GIB:-1 10 40}
SERVE_GIB=${SERVE_GIB:-16}
CAIRN_ENV=()
if [ -n "${CPU_ONLY:-}" ]; then
  DEVICE=cpu
  PY=${PYTHON:-/usr/bin/python3}  # Debian's, with python3-torch (not a pyenv's)
  "$PY" -c 'import torch, numpy' 2> /dev/null || { echo "SKIP: $PY has no torch or numpy (apt-get install python3-torch)"; exit 77; }
  BUILD=${BUILD:-$ROOT/build}
  [ -x "$BUILD/tests/gpu/fake_cuda_app" ] || { echo "SKIP: $BUILD has no tests/gpu (build cairn's tests first)"; exit 77; }
  CAIRN=$BUILD/cairn
  CAIRND=$BUILD/cairnd
  CAIRN_ENV=(LD_LIBRARY_PATH="$BUILD/tests/gpu/fake-driver")
  SIZES_GIB=fake
  SERVE_GIB=${SERVE_GIB_CPU:-0.25}
  # The CUDA program's stand-in (its device: 1 MiB), with cuda_mem's arguments.
  printf '#!/bin/sh\nexec %s "$1" "$3" "$4"\n' "$BUILD/tests/gpu/fake_cuda_app" > "$W/mem_app"
  chmod +x "$W/mem_app"
else
  DEVICE=cuda
  PY=${PYTHON:-python3}
  B=$W/bundle
  mkdir -p "$B"
  tar -C "$B" -xJf "$ROOT/build-gpu/bundle.tar.xz" || { echo "no build-gpu/bundle.tar.xz: run prepare here first" >&2; exit 2; }
  CAIRN=$B/cairn
  CAIRND=$B/cairnd
  CAIRN_ENV=(LD_LIBRARY_PATH="$B/lib")
  if ! env "${CAIRN_ENV[@]}" "$CAIRN" --version > /dev/null 2>&1; then
    # This machine's C library is older than Debian 12's: run them on the carried one. (Their
    # /proc/self/exe is then the loader: a dump's guardian cannot exec gpu-put-back.)
    LOADER=$(ls "$B"/lib-full/ld-linux*.so* | head -1)
    printf '#!/bin/sh\nexec %s --library-path %s %s "$@"\n' "$LOADER" "$B/lib-full" "$B/cairn.real" > "$B/cairn.sh"
    printf '#!/bin/sh\nexec %s --library-path %s %s "$@"\n' "$LOADER" "$B/lib-full" "$B/cairnd.real" > "$B/cairnd.sh"
    mv "$B/cairn" "$B/cairn.real"; mv "$B/cairnd" "$B/cairnd.real"
    chmod +x "$B/cairn.sh" "$B/cairnd.sh"
    CAIRN=$B/cairn.sh CAIRND=$B/cairnd.sh CAIRN_ENV=(CAIRN_UNUSED=1)
  fi
  for prog in cuda_mem copy_rate; do
    nvcc -O2 -arch=native -o "$W/$prog" "$HERE/device/$prog.cu" || { echo "nvcc failed on $prog.cu" >&2; exit 2; }
  done
  ln -s "$W/cuda_mem" "$W/mem_app"
fi
cairn() { env "${CAIRN_ENV[@]}" "$CAIRN" "$@"; }
export CUBLAS_WORKSPACE_CONFIG=:4096:8
largest=$(echo "$SIZES_GIB $SERVE_GIB" | tr ' ' '\n' | grep -v fake | sort -g | tail -1)
shm_free=$(df -B1G --output=avail /dev/shm 2>/dev/null | tail -1 | tr -d ' ')
if [ -n "$shm_free" ] && awk -v f="$shm_free" -v l="$largest" 'BEGIN {exit !(f > 2.5 * l + 8)}'; then IMAGES=/dev/shm/cairn-device-check; fi
rm -rf "$IMAGES"; mkdir -p "$IMAGES"

say "# cairn GPU device check ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
say ""
say "- machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r)"
if [ "$DEVICE" = cuda ]; then
  say "- GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
  say "- nvcc: $(nvcc --version | tail -1); PyTorch $("$PY" -c 'import torch; print(torch.__version__)' 2>&1)"
else
  say "- CPU_ONLY: the script checked against the fake driver (tests/gpu) and CPU PyTorch, not a GPU"
fi
say "- images in $IMAGES"
say ""

# The process's last step (its WORKDIR/progress), 0 before the first.
progress() { cat "$1/progress" 2>/dev/null | tr -d ' ' || echo 0; }
wait_progress() {  # DIR N PID: until it reached step N (false if it died or 120 s passed)
  local until=$(( $(date +%s) + 120 ))
  while [ "$(progress "$1")" -lt "$2" ] 2>/dev/null || [ -z "$(progress "$1")" ]; do
    kill -0 "$3" 2>/dev/null || return 1
    [ "$(date +%s)" -lt "$until" ] || return 1
    sleep 0.05
  done
}
wait_gone() {  # PID SECONDS
  local until=$(( $(date +%s) + $2 ))
  while kill -0 "$1" 2>/dev/null && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]; do
    [ "$(date +%s)" -lt "$until" ] || return 1
    sleep 0.05
  done
}
start() {  # DIR CMD...: the program, in a session of its own, with no descriptor of ours; its pid in PID
  local d=$1; shift
  mkdir -p "$d"
  (
    for fd in $(ls "/proc/$BASHPID/fd"); do [ "$fd" -gt 2 ] && eval "exec $fd>&-"; done
    exec setsid "$@" > "$d/out" 2> "$d/err" < /dev/null
  ) &
  PID=$!
  disown "$PID" 2>/dev/null
}
stage_ms() {  # LOG STAGE: the ms the -vv log gives a gpu stage (summed over processes)
  grep -o "event=gpu_stage stage=$2 [^\"]*ms=[0-9.]*" "$1" | sed 's/.*ms=//' | awk '{s += $1} END {printf "%.1f", s}'
}

# 1. Copy rate.
say "## Host<->device copy rate"
if [ "$DEVICE" = cuda ]; then
  RATE=$("$W/copy_rate" 4 2>&1)
  say "- $RATE (GB/s, 4 GiB, best of 3)"
  D2H=$(echo "$RATE" | sed -n 's/.*d2h_pageable=\([0-9.]*\).*/\1/p')
  H2D=$(echo "$RATE" | sed -n 's/.*h2d_pageable=\([0-9.]*\).*/\1/p')
else
  say "- (no GPU)"
  D2H=0 H2D=0
fi
say ""

# A round trip of one program: MODE kill (dump, kill, restore) or leave (--leave-running, then
# it carries on). The program's final output must equal EXPECTED. Logs in DIR.
roundtrip() {  # NAME MODE DIR AT_STEP EXPECTED CMD...
  local name=$1 mode=$2 d=$3 at=$4 expected=$5; shift 5
  start "$d" "$@"
  if ! wait_progress "$d" "$at" "$PID"; then fail "$name ($mode): did not reach step $at: $(tail -3 "$d/err")"; kill -9 "$PID" 2>/dev/null; return; fi
  local extra=()
  [ "$mode" = leave ] && extra=(--leave-running)
  if ! cairn -vv dump --pid "$PID" --dir "$IMAGES/$(basename "$d")" "${extra[@]}" > "$d/dump.out" 2> "$d/dump.log"; then
    fail "$name ($mode): dump failed: $(grep -v 'event=' "$d/dump.log" | tail -3)"; kill -9 "$PID" 2>/dev/null; return
  fi
  if [ "$mode" = kill ]; then
    wait_gone "$PID" 20 || { fail "$name: the dumped process did not die"; return; }
    local t0; t0=$(now)
    if ! cairn -vv restore --dir "$IMAGES/$(basename "$d")" --detach > "$d/restore.out" 2> "$d/restore.log"; then
      fail "$name ($mode): restore failed: $(grep -v 'event=' "$d/restore.log" | tail -3)"; return
    fi
    RESTORE_S=$(secs "$t0" "$(now)")
  fi
  wait_gone "$PID" 300 || { fail "$name ($mode): did not finish (step $(progress "$d"))"; kill -9 "$PID" 2>/dev/null; return; }
  local got; got=$(cat "$d/out")
  if [ "$got" = "$expected" ]; then
    pass "$name ($mode at step $at): \`$got\`, as uninterrupted; $(head -1 "$d/dump.out" | sed 's/.* in /dump /')"
  else
    fail "$name ($mode at step $at): \`$got\`, uninterrupted \`$expected\`"
  fi
  rm -rf "${IMAGES:?}/$(basename "$d")"
}

# 2. The CUDA program.
say "## A CUDA program with 1 GiB of device memory"
start "$W/mem-plain" "$W/mem_app" "$W/mem-plain" 1 40 0
wait_gone "$PID" 120
MEM_EXPECTED=$(cat "$W/mem-plain/out")
[ -n "$MEM_EXPECTED" ] || fail "cuda_mem uninterrupted: no output: $(tail -3 "$W/mem-plain/err")"
roundtrip "CUDA program" kill "$W/mem-kill" 10 "$MEM_EXPECTED" "$W/mem_app" "$W/mem-kill" 1 40 50
roundtrip "CUDA program" leave "$W/mem-leave" 10 "$MEM_EXPECTED" "$W/mem_app" "$W/mem-leave" 1 40 50
say ""

# 3. Training.
say "## PyTorch training loop"
start "$W/train-plain" "$PY" "$HERE/device/train.py" "$W/train-plain" 60 0 "$DEVICE"
wait_gone "$PID" 300
TRAIN_EXPECTED=$(cat "$W/train-plain/out")
[ -n "$TRAIN_EXPECTED" ] || fail "train.py uninterrupted: no output: $(tail -3 "$W/train-plain/err")"
roundtrip "training" kill "$W/train-kill" 25 "$TRAIN_EXPECTED" "$PY" "$HERE/device/train.py" "$W/train-kill" 60 50 "$DEVICE"
roundtrip "training" leave "$W/train-leave" 25 "$TRAIN_EXPECTED" "$PY" "$HERE/device/train.py" "$W/train-leave" 60 50 "$DEVICE"
say ""

# 4. Inference.
say "## PyTorch inference server ($SERVE_GIB GiB of weights)"
ask() { "$PY" -c 'import sys, urllib.request; print(urllib.request.urlopen("http://127.0.0.1:%s/infer?seed=7" % sys.argv[1], timeout=60).read().decode().strip())' "$1" 2>/dev/null; }
PORT=$((20000 + RANDOM % 20000))
start "$W/serve" "$PY" "$HERE/device/serve.py" "$W/serve" "$PORT" "$SERVE_GIB" "$DEVICE"
until [ -e "$W/serve/ready" ] || ! kill -0 "$PID" 2>/dev/null; do sleep 0.1; done
ANSWER=$(ask "$PORT")
if [ -z "$ANSWER" ]; then
  fail "serve.py does not answer: $(tail -3 "$W/serve/err")"
else
  if cairn -vv dump --pid "$PID" --dir "$IMAGES/serve-leave" --leave-running > "$W/serve/dump-leave.out" 2> "$W/serve/dump-leave.log" &&
     [ "$(ask "$PORT")" = "$ANSWER" ]; then
    pass "inference (leave): the same answer after the dump; $(head -1 "$W/serve/dump-leave.out" | sed 's/.* in /dump /')"
  else
    fail "inference (leave): $(grep -v 'event=' "$W/serve/dump-leave.log" | tail -3)"
  fi
  rm -rf "$IMAGES/serve-leave"
  if cairn -vv dump --pid "$PID" --dir "$IMAGES/serve" > "$W/serve/dump.out" 2> "$W/serve/dump.log" && wait_gone "$PID" 20; then
    t0=$(now)
    cairn -vv restore --dir "$IMAGES/serve" --detach > "$W/serve/restore.out" 2> "$W/serve/restore.log"
    t1=$(now)
    got=""
    for _ in $(seq 1 600); do got=$(ask "$PORT") && [ -n "$got" ] && break; sleep 0.02; done
    t2=$(now)
    if [ "$got" = "$ANSWER" ]; then
      pass "inference (kill): the same answer from the restored server; restore $(secs "$t0" "$t1") s, first answer $(secs "$t0" "$t2") s after \`cairn restore\` began (target <= 5 s for 16 GiB); device restore $(stage_ms "$W/serve/restore.log" restore) ms"
    else
      fail "inference (kill): answered \`$got\`, before \`$ANSWER\`: $(grep -v 'event=' "$W/serve/restore.log" | tail -3)"
    fi
  else
    fail "inference (kill): dump failed: $(grep -v 'event=' "$W/serve/dump.log" | tail -3)"
  fi
  rm -rf "$IMAGES/serve"
fi
kill -9 "$PID" 2>/dev/null
say ""

# 5. NVML.
say "## NVML watcher"
"$CAIRND" --node device-check --state-dir "$W/cairnd" --socket "$W/cairnd.sock" --cairn-bin "$CAIRN" --gpu-watch auto \
  > "$W/cairnd.log" 2>&1 &
CAIRND_PID=$!
for _ in $(seq 1 100); do [ -S "$W/cairnd.sock" ] && break; sleep 0.1; done
sleep 2
INFO=$(cairn node info --socket "$W/cairnd.sock" 2>&1)
WATCH=$(echo "$INFO" | grep -i 'gpu' | head -3 | tr '\n' ' ')
kill "$CAIRND_PID"; wait "$CAIRND_PID" 2>/dev/null
if [ "$DEVICE" = cuda ]; then
  if echo "$WATCH" | grep -q 'on: [1-9]'; then pass "NVML watcher: $WATCH"; else fail "NVML watcher: $WATCH"; fi
  if grep -qi 'xid\|ecc' "$W/cairnd.log"; then fail "NVML watcher reported: $(grep -i 'xid\|ecc' "$W/cairnd.log" | head -3)"; else pass "NVML watcher: no event reported"; fi
else
  say "- (no GPU) cairnd says: $WATCH"
fi
say ""

# 6. Timings.
say "## Timings by device memory size"
say ""
say "| device memory | lock ms | device checkpoint ms | (GB/s; D2H copy $D2H) | dump s | restore s | device restore ms | (GB/s; H2D copy $H2D) | unlock ms |"
say "|---|---|---|---|---|---|---|---|---|"
for gib in $SIZES_GIB; do
  d=$W/size-$gib
  start "$d" "$W/mem_app" "$d" "${gib/fake/1}" 100000 100
  if ! wait_progress "$d" 2 "$PID"; then say "| $gib GiB | did not start: $(tail -2 "$d/err" | tr '\n' ' ') |"; kill -9 "$PID" 2>/dev/null; continue; fi
  RESTORE_S=-
  if cairn -vv dump --pid "$PID" --dir "$IMAGES/size" > "$d/dump.out" 2> "$d/dump.log" && wait_gone "$PID" 60; then
    t0=$(now)
    cairn -vv restore --dir "$IMAGES/size" --detach > "$d/restore.out" 2> "$d/restore.log"
    RESTORE_S=$(secs "$t0" "$(now)")
    before=$(progress "$d"); sleep 0.5
    [ "$(progress "$d")" -gt "$before" ] || say "- **FAIL** $gib GiB: the restored program does not step on"
  fi
  ck=$(stage_ms "$d/dump.log" checkpoint); rs=$(stage_ms "$d/restore.log" restore)
  bytes=$(awk -v g="${gib/fake/0.0009765625}" 'BEGIN {print g * 1073741824}')
  say "| $gib GiB | $(stage_ms "$d/dump.log" lock) | $ck | $(awk -v b="$bytes" -v m="$ck" 'BEGIN {if (m > 0) printf "%.2f", b / m / 1e6}') | $(sed -n 's/.* in \([0-9.]*\) s.*/\1/p' "$d/dump.out" | head -1) | $RESTORE_S | $rs | $(awk -v b="$bytes" -v m="$rs" 'BEGIN {if (m > 0) printf "%.2f", b / m / 1e6}') | $(stage_ms "$d/restore.log" unlock) |"
  kill -9 "$PID" 2>/dev/null; wait_gone "$PID" 20
  case "$(cat "$d/device" 2>/dev/null)" in /dev/nvidia-cairn-fake-*) rm -f "$(cat "$d/device")" ;; esac  # CPU_ONLY's fake
  rm -rf "$IMAGES/size"
done
say ""
say "Took $(secs "$T_START" "$(now)") s; $FAILS failed."
cp -r "$W"/*/dump.log "$OUT/" 2>/dev/null
rm -rf "$IMAGES"
[ "$FAILS" -eq 0 ]
