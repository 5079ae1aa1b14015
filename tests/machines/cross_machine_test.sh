#!/usr/bin/env bash
# Jobs moved between machines that really differ (issue 22): this host (its kernel, its CPU) and
# QEMU guests booting Debian's 6.1 cloud kernel on older CPU models (tests/machines/guest.sh).
# Each move either finishes with the program's uninterrupted result (the workload's own PASS) or
# is refused before anything is created, with a message naming what the target lacks — and then
# nothing of the job is left there and the checkpoint still restores where it fits.
#
#   bash tests/machines/cross_machine_test.sh BUILD_DIR
#
# Exit 0: every case passed; 1: some failed (each says why); 77: no guest can boot here.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/guest.sh"
guest_check || exit 77
[ "$(id -u)" = 0 ] || { echo "cross-machine tests need root" >&2; exit 77; }
build=$(cd "${1:?usage: cross_machine_test.sh BUILD_DIR}" && pwd)
cairn=$build/cairn
wl=$build/tests/workloads
avx2=$build/tests/machines/wl_avx2
[ -x "$cairn" ] && [ -x "$wl/wl_threads" ] && [ -x "$avx2" ] || { echo "build cairn and its workloads first" >&2; exit 1; }

S=$(mktemp -d /var/tmp/cairn-machines.XXXXXX)
chmod 755 "$S"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }
cleanup() {
  # Jobs this script started on the host, if a case left one.
  for f in "$S"/*/work/ready; do [ -e "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
  [ "$failures" -eq 0 ] && [ -z "${KEEP:-}" ] && rm -rf "$S"
}
trap cleanup EXIT

# What both machines' scripts use: start a job and checkpoint it, restore one and let it finish,
# try one that must be refused. Each machine has its own state directory (CAIRN_STATE_DIR).
cat >"$S/lib.sh" <<EOF
cairn=$cairn
wl=$wl
avx2=$avx2
S=$S
EOF
cat >>"$S/lib.sh" <<'EOF'
# start_and_dump NAME [cairn run flags...] -- PROGRAM: runs PROGRAM WORKDIR as a job, waits for it
# to be ready, checkpoints it to NAME/ckpt (the job ends).
start_and_dump() {
  local name=$1; shift
  local flags=()
  while [ "$1" != -- ]; do flags+=("$1"); shift; done
  shift
  mkdir -p "$S/$name/work"
  "$cairn" run --name "$name" --dir "$S/$name/job" "${flags[@]}" -- "$@" "$S/$name/work" >/dev/null || return 1
  local i
  for i in $(seq 600); do [ -e "$S/$name/work/ready" ] && break; sleep 0.1; done
  [ -e "$S/$name/work/ready" ] || { echo "$name: not ready"; cat "$S/$name/job/stderr.log"; return 1; }
  "$cairn" dump --job "$name" --dir "$S/$name/ckpt" >"$S/$name/dump.out" 2>&1 || { cat "$S/$name/dump.out"; return 1; }
}
# restore_and_finish NAME: restores NAME/ckpt, lets it go on, and succeeds when it says PASS.
restore_and_finish() {
  local name=$1 i
  rm -f "$S/$name/work/go"
  "$cairn" restore --verify --dir "$S/$name/ckpt" --detach >"$S/$name/restore.out" 2>&1 || {
    echo "$name: restore failed"; cat "$S/$name/restore.out"; return 1; }
  touch "$S/$name/work/go"
  for i in $(seq 1200); do grep -qE '^(PASS|FAIL)' "$S/$name/job/stdout.log" 2>/dev/null && break; sleep 0.1; done
  local last; last=$(grep -E '^(PASS|FAIL)' "$S/$name/job/stdout.log" | tail -1)
  [ "$last" = PASS ] || {
    echo "$name: the restored job said '${last:-nothing}'"; tail -5 "$S/$name/job/stderr.log"; job_threads "$name"; return 1; }
}
# job_threads NAME: what each thread of the job's processes is doing (for a job that hangs).
job_threads() {
  local p t
  for p in /proc/[0-9]*; do
    case "$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null)" in *" $S/$1/work"*) ;; *) continue ;; esac
    for t in "$p"/task/*; do
      echo "  ${t#/proc/}: $(cut -d' ' -f3 "$t/stat") wchan=$(cat "$t/wchan") syscall=$(cat "$t/syscall" 2>&1 | cut -d' ' -f1-3)"
    done
  done
}
# refused NAME REGEX: the restore of NAME/ckpt fails cleanly, saying REGEX, and leaves no process
# of the job.
refused() {
  local name=$1 want=$2 rc
  "$cairn" restore --dir "$S/$name/ckpt" --detach >"$S/$name/refused.out" 2>&1
  rc=$?
  [ $rc -ne 0 ] || { echo "$name: restored, expected a refusal"; return 1; }
  grep -qE "$want" "$S/$name/refused.out" || { echo "$name: the refusal does not say '$want':"; cat "$S/$name/refused.out"; return 1; }
  local left="" p c
  for p in /proc/[0-9]*; do  # the job's init and program name the job's work directory
    c=$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null)
    case "$c" in *" $S/$name/work"*) left+=" ${p#/proc/} ($c)" ;; esac
  done
  [ -z "$left" ] || { echo "$name: processes left after the refusal:$left"; return 1; }
  [ ! -e "$S/$name/job/stdout.log" ] || ! grep -qE '^(PASS|FAIL)' "$S/$name/job/stdout.log" || {
    echo "$name: the refused job ran"; return 1; }
}
EOF

# on_guest MODEL NAME SCRIPT-BODY: runs the body in a guest with that CPU model; its output goes to
# $S/guest-NAME.out.
on_guest() {
  local model=$1 name=$2 body=$3
  # The nodes of one cluster share its image key (checkpoints are sealed with it).
  mkdir -p "$S/state-$name"
  install -m 600 "$S/state-host/image.key" "$S/state-$name/image.key"
  printf '. %s/lib.sh\nexport CAIRN_STATE_DIR=%s/state-%s\n%s\n' "$S" "$S" "$name" "$body" >"$S/guest-$name.sh"
  guest_run "$model" "$S" "$S/guest-$name.sh" 900
  local rc=$?
  cp "$S/guest.out" "$S/guest-$name.out" 2>/dev/null
  cp "$S/console.log" "$S/console-$name.log" 2>/dev/null
  sed 's/^/  guest: /' "$S/guest-$name.out" 2>/dev/null
  return $rc
}
on_host() { (. "$S/lib.sh"; export CAIRN_STATE_DIR=$S/state-host; eval "$1"); }

# --- On this host: jobs to move. --------------------------------------------------------------
on_host '
start_and_dump native -- "$wl/wl_threads" || exit 1
if grep -qw avx2 /proc/cpuinfo; then start_and_dump avx2 -- "$avx2" || exit 1; fi
start_and_dump v2 --cpu-baseline x86-64-v2 -- "$wl/wl_threads" || exit 1
start_and_dump v2py --cpu-baseline x86-64-v2 -- /usr/bin/python3 '"$here"'/wl_hashes.py || exit 1
start_and_dump v2nehalem --cpu-baseline x86-64-v2 -- "$wl/wl_threads" || exit 1
start_and_dump v2timers --cpu-baseline x86-64-v2 -- "$wl/wl_posix_timers" || exit 1
' || { fail "could not start and checkpoint the host's jobs"; exit 1; }
host_level=$("$cairn" check 2>/dev/null | grep -oE 'x86-64-v[0-9]' | head -1)
echo "host: $(uname -r), $host_level"

# --- The SandyBridge guest (AVX, no AVX2; x86-64-v2), kernel 6.1. ------------------------------
on_guest SandyBridge sandybridge '
rc=0
refused native "avx2.*x86-64-v2|x86-64-v2.*avx2" || rc=1
[ ! -d avx2 ] || refused avx2 "avx2" || rc=1
restore_and_finish v2 || rc=1
restore_and_finish v2py || rc=1
refused v2timers "POSIX timer" || rc=1
exit $rc'
case $? in
  0) ok "host ($host_level, $(uname -r)) -> SandyBridge guest (6.1): the native job refused naming avx2; x86-64-v2 jobs (threads, python3) finished; POSIX timers refused naming the kernel feature" ;;
  *) fail "host -> SandyBridge guest" ;;
esac
# The refused checkpoint is untouched: it still restores here.
if on_host 'restore_and_finish native && { [ ! -d "$S/avx2" ] || restore_and_finish avx2; }'; then
  ok "the refused checkpoints restored and finished on the host (the AVX2 program too)"
else
  fail "the refused checkpoints no longer restore on the host"
fi

# --- Nehalem (no XSAVE, no AVX): the FXSAVE-only path. -----------------------------------------
if on_guest Nehalem nehalem 'restore_and_finish v2nehalem'; then
  ok "host -> Nehalem guest (no XSAVE): the x86-64-v2 job finished"
else
  fail "host -> Nehalem guest"
fi

# --- Guest to guest, and back to the host. -----------------------------------------------------
if on_guest Haswell-v4 haswell-dump '
start_and_dump g_native -- "$wl/wl_threads" || exit 1
start_and_dump g_avx2 -- "$avx2" || exit 1
start_and_dump g_control -- "$wl/wl_threads" || exit 1
start_and_dump g_v2 --cpu-baseline x86-64-v2 -- "$wl/wl_threads" || exit 1
start_and_dump g_back_caps -- "$wl/wl_threads" || exit 1
# Without the capability the host'"'"'s cairn lacks (cap_sys_resource), it can go there.
setpriv --bounding-set -sys_resource bash -c ". $S/lib.sh; start_and_dump g_back -- /usr/bin/python3 '"$here"'/wl_hashes.py" || exit 1
$cairn check | grep -E "^ok +CPU"'; then
  ok "Haswell guest: jobs started and checkpointed"
  if on_guest SandyBridge sandybridge-from-haswell 'refused g_native "avx2" && refused g_avx2 "avx2"'; then
    ok "Haswell guest -> SandyBridge guest: the threads and the AVX2 program refused naming avx2 (was: SIGILL after a successful restore)"
  else
    fail "Haswell guest -> SandyBridge guest"
  fi
  if on_guest Haswell-v4,-avx,-avx2,-fma haswell-no-avx 'refused g_native "avx"'; then
    ok "Haswell guest -> Haswell without AVX, 5 threads: refused naming avx, no hang"
  else
    fail "Haswell guest -> Haswell without AVX"
  fi
  if on_guest Nehalem nehalem-from-haswell 'refused g_native "avx" && restore_and_finish g_v2'; then
    ok "Haswell guest -> Nehalem guest: the native job refused naming avx; the x86-64-v2 one finished (the vDSO differs by CPU)"
  else
    fail "Haswell guest -> Nehalem guest"
  fi
  if on_guest Haswell-v4 haswell-control 'restore_and_finish g_control && restore_and_finish g_avx2'; then
    ok "Haswell guest -> Haswell guest (control): the threads and the AVX2 program (ymm live) finished"
  else
    fail "Haswell guest -> Haswell guest"
  fi
  if on_host 'refused g_back_caps "cap_sys_resource" && restore_and_finish g_back'; then
    ok "Haswell guest (6.1) -> this host ($(uname -r)): a job holding cap_sys_resource (which cairn lacks here) refused naming it; python3 finished"
  else
    fail "Haswell guest -> host"
  fi
else
  fail "Haswell guest: could not start and checkpoint its jobs"
fi

if [ "$failures" -gt 0 ]; then
  echo "$failures case(s) failed; their files are in $S"
  exit 1
fi
echo "all cross-machine cases passed"
