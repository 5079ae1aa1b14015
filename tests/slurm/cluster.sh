#!/usr/bin/env bash
# Throw-away SLURM 22.05 test cluster on this single machine.
#
#   cluster.sh start DIR [PLUGSTACK_LINE]   start munged, slurmctld, slurmd n1..n3
#   cluster.sh stop DIR                     stop everything started under DIR
#   cluster.sh kill-node DIR nX             SIGKILL slurmd nX, its slurmstepds and
#                                           their job processes (simulated node death)
#   cluster.sh start-node DIR nX            restart slurmd nX (node returns, ReturnToService=2)
#
# Everything (configs, state, spool, logs, pid files, munge key and socket)
# lives under DIR; nothing under /etc or /var is touched.  Must run as root
# (SlurmUser=root, munged as root).  Only one cluster may run at a time:
# slurmstepd cgroups (/sys/fs/cgroup/*/slurm_nX) and node names would collide.
#
# Clients need:   export SLURM_CONF=DIR/slurm.conf   (printed by `start`).
set -euo pipefail

NODES=(n1 n2 n3)
CPUS_PER_NODE=2
START_TIMEOUT=60

die() { echo "cluster.sh: $*" >&2; exit 1; }

usage() {
    sed -n '2,9p' "$0" >&2
    exit 2
}

# Pick a TCP port nobody listens on (and that we have not handed out yet).
declare -A USED_PORTS=()
free_port() {
    local p
    for _ in $(seq 200); do
        p=$((20000 + RANDOM % 30000))
        [[ -n "${USED_PORTS[$p]:-}" ]] && continue
        if ! ss -Htan "( sport = :$p )" | grep -q .; then
            USED_PORTS[$p]=1
            echo "$p"
            return 0
        fi
    done
    die "no free port found"
}

# Alive = exists and is not a zombie (PID 1 of this VM reaps lazily).
pid_alive() {
    [[ -n "${1:-}" && -r "/proc/$1/stat" ]] || return 1
    [[ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)" != Z ]]
}
pidfile_pid() { [[ -s "$1" ]] && cat "$1" || true; }

# Pids with an open file descriptor on FILE (glob allowed).
pids_with_fd_on() {
    find /proc/[0-9]*/fd -maxdepth 1 -lname "$1" -printf '%h\n' 2>/dev/null |
        cut -d/ -f3 | sort -u
}

# slurmstepds and job processes of node $2 of the cluster in $1.
# slurmd double-forks slurmstepd (its parent is init) and slurmstepd's
# setproctitle wipes /proc/PID/environ, so neither ppid nor environment works.
# Reliable identifiers:
#  * proctrack/cgroup puts every slurmstepd and all job processes of a node
#    into /sys/fs/cgroup/freezer/slurm_<node>/uid_*/job_*/... (MULTIPLE_SLURMD
#    builds use one slurm_<node> directory per slurmd; one cluster at a time).
#  * every slurmstepd keeps the node's SlurmdLogFile DIR/slurmd-<node>.log open.
node_pids() {
    local dir="$1" node="$2" f
    pidfile_pid "$dir/slurmd-$node.pid"
    pgrep -f -- "-f $dir/slurm\.conf -N $node\b" || true
    for f in $(find /sys/fs/cgroup/freezer/slurm_"$node" -name cgroup.procs 2>/dev/null); do
        cat "$f" 2>/dev/null || true
    done
    pids_with_fd_on "$dir/slurmd-$node.log"
}

# Every process belonging to the cluster in DIR (munged, slurmctld, slurmds,
# slurmstepds, job processes).
cluster_pids() {
    local dir="$1" f n
    for f in "$dir"/munge/munged.pid "$dir"/slurmctld.pid "$dir"/slurmd-*.pid; do
        pidfile_pid "$f"
    done
    pgrep -f -- "$dir/(slurm\.conf|munge/)" || true
    for n in "${NODES[@]}"; do node_pids "$dir" "$n"; done
}

wait_gone() {  # wait_gone SECONDS PID...
    local t="$1"; shift
    local deadline=$((SECONDS + t)) p left
    while :; do
        left=()
        for p in "$@"; do pid_alive "$p" && left+=("$p"); done
        [[ ${#left[@]} -eq 0 ]] && return 0
        ((SECONDS >= deadline)) && { echo "${left[*]}"; return 1; }
        sleep 0.2
    done
}

show_logs() {
    local dir="$1" f
    for f in "$dir"/munge/munged.log "$dir"/slurmctld.log "$dir"/slurmd-*.log; do
        [[ -f "$f" ]] || continue
        echo "----- tail $f" >&2
        tail -n 25 "$f" >&2
    done
}

# Failed start: show the logs, tear down what was started, exit non-zero.
start_fail() {
    local dir="$1"; shift
    show_logs "$dir"
    (cmd_stop "$dir") >/dev/null 2>&1 || true
    die "start failed: $* (everything started was stopped again)"
}

start_slurmd() {
    local dir="$1" n="$2"
    # -N: this Debian build has MULTIPLE_SLURMD (scontrol show config prints
    # MULTIPLE_SLURMD=Yes), so several slurmds per host with own Port= work.
    SLURM_CONF="$dir/slurm.conf" slurmd -f "$dir/slurm.conf" -N "$n"
}

cmd_start() {
    local dir="$1" plug="${2:-}"
    [[ $EUID -eq 0 ]] || die "must run as root"
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd -P)

    # One cluster at a time.
    # (zombies do not count: this VM's PID 1 reaps orphans only lazily)
    local running
    running=$(ps -C slurmctld,slurmd -o pid=,stat= | awk '$2 !~ /^Z/ {print $1}' || true)
    [[ -z "$running" ]] ||
        die "a slurmctld/slurmd is already running (pids: $(echo $running)); stop it first"
    [[ -e "$dir/slurm.conf" ]] && die "$dir already holds a cluster; use a fresh directory"

    # ---- munge: private key, socket, pid/log/seed files under DIR ---------
    # munged insists on: key owned by root and not readable by others, the
    # socket dir not writable by group/other (DIR's parents may be sticky /tmp).
    install -d -m 0711 "$dir/munge"
    dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
    chmod 0400 "$dir/munge/munge.key"
    local sock="$dir/munge/munge.socket"
    munged --force --key-file="$dir/munge/munge.key" --socket="$sock" \
        --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
        --seed-file="$dir/munge/munged.seed" \
        || start_fail "$dir" "munged failed to start"
    munge -n -S "$sock" | unmunge -S "$sock" >/dev/null \
        || start_fail "$dir" "munge self-test failed"

    # ---- slurm config ------------------------------------------------------
    mkdir -p "$dir/state" "$dir/spool"
    for n in "${NODES[@]}"; do mkdir -p "$dir/spool/$n"; done
    printf '%s\n' "$plug" >"$dir/plugstack.conf"

    local ctl_port; ctl_port=$(free_port)
    local host; host=$(hostname -s)
    cat >"$dir/slurm.conf" <<EOF
# Generated by $0 for a single-host test cluster.
ClusterName=cairntest
# slurmctld checks that this matches its own short hostname.
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctl_port
SlurmUser=root
SlurmdUser=root

# munge with a private socket; AuthInfo is read by both auth/munge and
# cred/munge.  cred_expire also delays the restart of requeued jobs
# (begin time = requeue + cred_expire + 1), default 120 s; measured: a requeued
# job runs again ~5.5 s after requeue.  (Values below 5 are rejected, per the
# slurm source; not tested here.)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock,cred_expire=5

StateSaveLocation=$dir/state
SlurmctldPidFile=$dir/slurmctld.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmctldDebug=info
SlurmdSpoolDir=$dir/spool/%n
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmdLogFile=$dir/slurmd-%n.log
SlurmdDebug=info
PlugStackConfig=$dir/plugstack.conf
# Debian's default /etc/slurm/plugstack.conf must not be read.
MailProg=/bin/true

# Failure detection / requeue behaviour.
ReturnToService=2
SlurmctldTimeout=10
SlurmdTimeout=10
InactiveLimit=0
MinJobAge=600
KillWait=${KILL_WAIT:-5}
JobRequeue=1
MessageTimeout=5

SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=2,sched_min_interval=100000
SelectType=select/cons_tres
# Memory is allocated too (a job's --mem, else DefMemPerCPU per CPU): a --cairn task's agent
# makes it its cairnd job's memory limit.
SelectTypeParameters=CR_CPU_Memory
DefMemPerCPU=500
# Use the configured CPUs/RealMemory even if the host reports different ones.
SlurmdParameters=config_overrides

ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none

PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
# At the start of GraceTime slurmctld sends SIGCONT+SIGTERM to the job's
# *steps* (srun tasks) only, never to the batch shell.  With send_user_signal
# a job submitted with --signal=B:TERM (or --signal=TERM for steps) gets that
# signal at preemption time, so batch scripts can trap it too.  Either way
# the whole job gets SIGTERM at the end of GraceTime and SIGKILL KillWait later.
# (22.05 has no PreemptParameters=; the option lives in SlurmctldParameters.)
SlurmctldParameters=preempt_send_user_signal

EOF
    local n p
    for n in "${NODES[@]}"; do
        p=$(free_port)
        echo "NodeName=$n NodeHostname=localhost NodeAddr=127.0.0.1 Port=$p CPUs=$CPUS_PER_NODE RealMemory=2000 State=UNKNOWN" >>"$dir/slurm.conf"
    done
    cat >>"$dir/slurm.conf" <<EOF
PartitionName=low  Nodes=n[1-3] Default=YES PriorityTier=1  PreemptMode=REQUEUE GraceTime=${GRACE_TIME:-20} MaxTime=INFINITE State=UP
PartitionName=high Nodes=n[1-3] Default=NO  PriorityTier=10 PreemptMode=OFF MaxTime=INFINITE State=UP
EOF

    # cgroup v1 hierarchy (hybrid host); nothing is constrained, the cgroup is
    # only used for process tracking (freezer) and cleanup.
    cat >"$dir/cgroup.conf" <<EOF
CgroupPlugin=cgroup/v1
CgroupMountpoint=/sys/fs/cgroup
CgroupAutomount=no
ConstrainCores=no
ConstrainRAMSpace=no
ConstrainSwapSpace=no
ConstrainDevices=no
EOF

    export SLURM_CONF="$dir/slurm.conf"
    # ---- daemons -----------------------------------------------------------
    # -i: ignore state from a previous run (the dir is fresh anyway).
    slurmctld -f "$dir/slurm.conf" -i \
        || start_fail "$dir" "slurmctld failed to start"
    for n in "${NODES[@]}"; do
        start_slurmd "$dir" "$n" || start_fail "$dir" "slurmd $n failed to start"
    done

    # ---- wait until n1..n3 are idle -----------------------------------------
    local deadline=$((SECONDS + START_TIMEOUT)) out=""
    while :; do
        out=$(sinfo -h -N -o '%N %t' 2>/dev/null | sort -u || true)
        if [[ $(grep -c ' idle$' <<<"$out") -eq ${#NODES[@]} ]]; then
            break
        fi
        if ((SECONDS >= deadline)); then
            echo "cluster.sh: nodes not idle after ${START_TIMEOUT}s:" >&2
            echo "$out" >&2
            start_fail "$dir" "nodes not idle within ${START_TIMEOUT}s"
        fi
        sleep 1
    done
    echo "export SLURM_CONF=$dir/slurm.conf"
}

cmd_stop() {
    local dir; dir=$(cd "$1" && pwd -P) || die "no such dir: $1"
    local pids f p n daemons=()
    set +e
    # Daemons first, gracefully (slurmctld saves state; slurmd just exits and
    # leaves its slurmstepds running).
    for f in "$dir"/slurmctld.pid "$dir"/slurmd-*.pid; do
        p=$(pidfile_pid "$f")
        pid_alive "$p" && kill -TERM "$p" 2>/dev/null && daemons+=("$p")
    done
    wait_gone 15 "${daemons[@]}" >/dev/null
    # Then SIGKILL what is left: slurmstepds, job processes, munged.  Freeze
    # the node cgroups meanwhile so that job processes cannot fork away.
    for n in "${NODES[@]}"; do
        f=/sys/fs/cgroup/freezer/slurm_$n/freezer.state
        [[ -w $f ]] && echo FROZEN >"$f" 2>/dev/null
    done
    pids=$(cluster_pids "$dir" | sort -un | grep -vx "$$")
    [[ -n "$pids" ]] && kill -KILL $pids 2>/dev/null
    for n in "${NODES[@]}"; do
        f=/sys/fs/cgroup/freezer/slurm_$n/freezer.state
        [[ -w $f ]] && echo THAWED >"$f" 2>/dev/null
    done
    wait_gone 10 $pids >/dev/null
    pids=$(for p in $(cluster_pids "$dir" | sort -un | grep -vx "$$"); do
               pid_alive "$p" && echo "$p"; done)
    [[ -z "$pids" ]] || die "still running after stop: $(echo $pids)"
    # Remove the (now empty) per-node cgroup directories.
    for n in "${NODES[@]}"; do
        find /sys/fs/cgroup/*/slurm_"$n" -depth -type d -exec rmdir {} + 2>/dev/null
    done
    set -e
    echo "cluster in $dir stopped"
}

cmd_kill_node() {
    local dir; dir=$(cd "$1" && pwd -P) || die "no such dir: $1"
    local n="$2" pids p
    [[ -f "$dir/slurm.conf" ]] || die "no cluster in $dir"
    grep -q "^NodeName=$n " "$dir/slurm.conf" || die "unknown node $n"
    pids=$(node_pids "$dir" "$n" | sort -un | grep -vx "$$" || true)
    [[ -n "$pids" ]] || die "nothing of node $n is running"
    # Freeze the node's cgroup (and STOP the rest) so nothing forks or reacts
    # while we kill, SIGKILL everything, then thaw so the kills take effect.
    local fz=/sys/fs/cgroup/freezer/slurm_$n
    [[ -w $fz/freezer.state ]] && echo FROZEN >"$fz/freezer.state" 2>/dev/null || true
    kill -STOP $pids 2>/dev/null || true
    pids=$( { echo "$pids"; node_pids "$dir" "$n"; } | sort -un | grep -vx "$$" || true)
    kill -KILL $pids 2>/dev/null || true
    [[ -w $fz/freezer.state ]] && echo THAWED >"$fz/freezer.state" 2>/dev/null || true
    wait_gone 10 $pids >/dev/null || die "node $n: processes survived SIGKILL"
    rm -f "$dir/slurmd-$n.pid"
    echo "node $n killed (pids: $(echo $pids))"
}

cmd_start_node() {
    local dir; dir=$(cd "$1" && pwd -P) || die "no such dir: $1"
    local n="$2"
    grep -q "^NodeName=$n " "$dir/slurm.conf" || die "unknown node $n"
    pid_alive "$(pidfile_pid "$dir/slurmd-$n.pid")" && die "slurmd $n already runs"
    start_slurmd "$dir" "$n"
    echo "slurmd $n started"
}

[[ $# -ge 2 ]] || usage
case "$1" in
    start)      [[ $# -le 3 ]] || usage; cmd_start "$2" "${3:-}" ;;
    stop)       cmd_stop "$2" ;;
    kill-node)  [[ $# -eq 3 ]] || usage; cmd_kill_node "$2" "$3" ;;
    start-node) [[ $# -eq 3 ]] || usage; cmd_start_node "$2" "$3" ;;
    *)          usage ;;
esac
