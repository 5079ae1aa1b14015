# What the chaos runs share (sourced by chaos.sh and chaos_controller.sh): their job, its
# uninterrupted result, how each job ended, and the clean-up of what the nodes ran. Needs T (the
# run's directory; job ID keeps its files in $T/jobs/ID) and ROUNDS.

# The job: a hash chain in steps with short sleeps (it lasts the whole run), then it waits for
# its gate ($T/jobs/ID/go), appends "done RESULT" to its log of endings ($T/jobs/ID/endings, once
# per copy that finishes) and exits. Run it as
#   /usr/bin/env PYTHONHASHSEED=0 /usr/bin/python3 -I -c "$CHAOS_JOB" $T/jobs/ID/endings $ROUNDS $T/jobs/ID/go
CHAOS_JOB='
import hashlib, os, sys, time
out, n, gate = sys.argv[1], int(sys.argv[2]), sys.argv[3]
h = hashlib.sha256(b"cairn").digest()
for i in range(n):
    h = hashlib.sha256(h).digest()
    if i % 2000 == 0:
        time.sleep(0.01)
while not os.path.exists(gate):
    time.sleep(0.05)
with open(out, "a") as f:
    f.write("done %s\n" % h.hex())
'
# What an uninterrupted run writes.
EXPECTED=$(python3 -c "
import hashlib
h = hashlib.sha256(b'cairn').digest()
for i in range($ROUNDS): h = hashlib.sha256(h).digest()
print(h.hex())")

# Opens every job's gate and waits up to SECONDS for each to have written its ending.
# Usage: chaos_release SECONDS ID...
chaos_release() {
  local deadline=$((SECONDS + $1)) left id; shift
  for id in "$@"; do touch "$T/jobs/$id/go"; done
  while ((SECONDS < deadline)); do
    left=0
    for id in "$@"; do [ -s "$T/jobs/$id/endings" ] || left=$((left + 1)); done
    ((left == 0)) && break
    sleep 1
  done
}

# Counts, into lost, dup and wrong, the jobs that never finished, finished more than once, or
# finished with another result than EXPECTED, saying which (prefixed with NAME; a lost job's
# line ends with what `chaos_where ID` prints, when the script defines it).
# Usage: chaos_tally NAME ID...
chaos_tally() {
  local name=$1 id f lines; shift
  lost=0; dup=0; wrong=0
  for id in "$@"; do
    f="$T/jobs/$id/endings"
    lines=$( [ -f "$f" ] && wc -l <"$f" || echo 0)
    if ((lines == 0)); then
      lost=$((lost + 1))
      echo "$name: job $id never finished$(declare -F chaos_where >/dev/null && echo " (runs on: $(chaos_where "$id"))")"
    fi
    if ((lines > 1)); then dup=$((dup + 1)); echo "$name: job $id finished $lines times"; fi
    if ((lines >= 1)) && grep -qv "done $EXPECTED" "$f"; then wrong=$((wrong + 1)); echo "$name: job $id: wrong result"; fi
  done
}

# At the end of a run: kills every job of the nodes NODE... (their cgroups thawed first), removes
# their cgroups and the lazy page handlers of the run, and the run's directory unless KEEP is set.
chaos_clean_nodes() {
  local n d p h
  for n in "$@"; do
    for d in /sys/fs/cgroup/freezer/cairn/$n.*; do
      [ -d "$d" ] || continue
      echo THAWED >"$d/freezer.state" 2>/dev/null
      for p in $(cat "$d/cgroup.procs"); do kill -9 "$p" 2>/dev/null; done
    done
  done
  sleep 0.5
  for n in "$@"; do for h in freezer memory cpu cpuacct pids; do rmdir /sys/fs/cgroup/$h/cairn/$n.* 2>/dev/null; done; done
  pkill -9 -f "cairn lazy-pages.*$T" 2>/dev/null
  [ -n "${KEEP:-}" ] && echo "kept $T" || rm -rf "$T"
}
