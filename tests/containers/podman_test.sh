#!/bin/bash
# Podman checkpoints and restores a redis container through cairn (criu-compat: `criu` on
# Podman's PATH is a link to cairn), under Podman's default seccomp profile, with runc under it:
#  1. on the same node: `podman container checkpoint --export`, then `restore --import`;
#  2. into a fresh Podman storage on "another node": each node is a mount namespace of its own
#     with empty /var/lib/containers, /run/containers, /run/libpod and /run/runc;
#  3. `--pre-checkpoint --export` while it runs, then `checkpoint --with-previous --export`
#     (incremental on the pre-checkpoint), both imported on the first node (`--import-previous`);
#  4. a container in a user namespace of its own (--uidmap/--gidmap), moved to the other node;
#  5. a terminal container (`podman run -t`), checkpointed and restored in place.
# The data set survives (keys written before, read after, from inside the container's own
# network namespace), the restored redis runs under the same seccomp filters, and its listener
# is in the container's network namespace, not on the host.
# Usage: podman_test.sh BUILD_DIR. Exit 77: skipped (what is missing is said).
set -euo pipefail
build=$(cd "$1" && pwd)
cairn=$build/cairn
for tool in podman runc redis-server redis-cli busybox nsenter unshare zstd; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed (scripts/install-deps.sh installs it)"; exit 77; }
done

work=$(mktemp -d /tmp/cairn-podman-XXXXXX)
holders=()
made_dirs=()  # the state directories this test made on the host, removed at the end
for d in /var/lib/containers /run/containers /run/libpod /run/runc; do
  [[ -e $d ]] || { mkdir -p "$d"; made_dirs+=("$d"); }
done
cleanup() {
  for h in "${holders[@]}"; do
    nsenter -t "$h" -m podman --storage-driver vfs rm --force --all >/dev/null 2>&1 || true
    kill "$h" 2>/dev/null || true
  done
  [[ ${CAIRN_TEST_KEEP:-0} == 1 ]] || rm -rf "$work"
  for d in "${made_dirs[@]}"; do rmdir "$d" 2>/dev/null || true; done
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for h in "${holders[@]}"; do  # cairn's logs in the nodes' container directories
    nsenter -t "$h" -m sh -c 'tail -n 5 /var/lib/containers/storage/vfs-containers/*/userdata/*.log' >&2 2>/dev/null || true
  done
  echo "test directory: $work" >&2
  exit 1
}

mkdir -p "$work/shim"
ln -s "$cairn" "$work/shim/criu"
export PATH=$work/shim:$PATH
[[ $(criu --version) == *cairn* ]] || fail "criu on PATH is not cairn's"

# An image without a registry, imported from a tar.
source "$(dirname "$0")/redis_rootfs.sh"
redis_rootfs_tar "$work/rootfs" "$work/rootfs.tar"

# A node: a mount namespace of its own, held by a sleeping process, with Podman's and runc's
# state directories empty in it.
new_node() {  # new_node VAR: the node's holder pid into VAR
  unshare -m --propagation private sleep infinity </dev/null >/dev/null 2>&1 &
  local h=$!
  holders+=("$h")
  sleep 0.2
  for d in /var/lib/containers /run/containers /run/libpod /run/runc; do nsenter -t "$h" -m mount -t tmpfs tmpfs "$d"; done
  nsenter -t "$h" -m podman --storage-driver vfs import "$work/rootfs.tar" localhost/cairn-redis >/dev/null 2>&1
  printf -v "$1" '%s' "$h"
}
pm() {  # pm NODE ARGS...
  local h=$1
  shift
  nsenter -t "$h" -m podman --storage-driver vfs "$@"
}
init_pid() { pm "$1" inspect r1 --format '{{.State.Pid}}'; }
redis() {  # redis NODE ARGS...: redis-cli inside the container's network namespace
  local h=$1
  shift
  nsenter -n -t "$(init_pid "$h")" redis-cli "$@"
}
filters() { grep -E '^(Seccomp|Seccomp_filters):' "/proc/$(init_pid "$1")/status" | tr -s '\t\n' '  '; }

new_node a
new_node b
# Podman's default limits are above what root may set here (no CAP_SYS_RESOURCE).
pm "$a" run -d --name r1 --network none --ulimit nofile=4096:4096 --ulimit nproc=4096:4096 localhost/cairn-redis \
  /usr/bin/redis-server --save "" --appendonly no --port 6379 >/dev/null
for _ in $(seq 50); do [[ $(redis "$a" ping 2>/dev/null) == PONG ]] && break; sleep 0.1; done
[[ $(redis "$a" ping) == PONG ]] || fail "redis did not start in its container"
seccomp_before=$(filters "$a")
[[ $seccomp_before == *"Seccomp: 2"* ]] || fail "Podman's default seccomp profile is not in effect: $seccomp_before"
redis "$a" set greeting hello >/dev/null
redis "$a" incrby counter 41 >/dev/null

# 1. The same node.
pm "$a" container checkpoint --export "$work/one.tar.zst" r1 >/dev/null || fail "podman container checkpoint"
[[ $(pm "$a" inspect r1 --format '{{.State.Status}}') == exited ]] || fail "the container still runs after its checkpoint"
pm "$a" rm r1 >/dev/null
pm "$a" container restore --keep --import "$work/one.tar.zst" >/dev/null || fail "podman container restore --import"
[[ $(redis "$a" get greeting) == hello ]] || fail "the key written before the checkpoint is gone"
[[ $(redis "$a" incr counter) == 42 ]] || fail "the counter did not go on from 41"
[[ $(filters "$a") == "$seccomp_before" ]] || fail "seccomp after restore: $(filters "$a"); before: $seccomp_before"
pid=$(init_pid "$a")
if ss -ltnp | grep -q "pid=$pid,"; then fail "the restored redis listens on the host's network namespace"; fi
nsenter -n -t "$pid" ss -ltn | grep -q ':6379' || fail "the restored redis does not listen in its container"

# 2. Another node, with a fresh storage.
redis "$a" set moved yes >/dev/null
pm "$a" container checkpoint --export "$work/two.tar.zst" r1 >/dev/null || fail "second checkpoint"
pm "$b" container restore --keep --import "$work/two.tar.zst" >/dev/null || fail "restore --import on the other node"
[[ $(redis "$b" get moved) == yes && $(redis "$b" get counter) == 42 ]] || fail "the data set did not reach the other node"
[[ $(filters "$b") == "$seccomp_before" ]] || fail "seccomp on the other node: $(filters "$b")"
# 3. A pre-checkpoint while it runs, then the checkpoint built on it (only what was written
#    since), exported with it and restored back on the first node.
pm "$b" container checkpoint --pre-checkpoint --export "$work/pre.tar.zst" r1 >/dev/null ||
  fail "podman container checkpoint --pre-checkpoint"
[[ $(pm "$b" inspect r1 --format '{{.State.Status}}') == running ]] || fail "the container stopped at its pre-checkpoint"
redis "$b" set after_pre yes >/dev/null
pm "$b" container checkpoint --with-previous --export "$work/three.tar.zst" r1 >/dev/null ||
  fail "podman container checkpoint --with-previous"
pm "$a" rm r1 >/dev/null
pm "$a" container restore --import-previous "$work/pre.tar.zst" --import "$work/three.tar.zst" >/dev/null ||
  fail "restore --import of the incremental checkpoint"
[[ $(redis "$a" get after_pre) == yes && $(redis "$a" get moved) == yes ]] ||
  fail "keys written before and after the pre-checkpoint did not both come back"
# 4. A container in a user namespace of its own (--uidmap/--gidmap: its root is the host's
#    100000), moved to the other node: the same maps, its redis still root inside and 100000
#    outside, under the same filters, in the network namespace Podman hands over.
um() {  # um NODE ARGS...: the user-namespace container's
  local h=$1
  shift
  nsenter -n -t "$(pm "$h" inspect u1 --format '{{.State.Pid}}')" redis-cli "$@"
}
ids() {  # the container's maps and its init's host ids, seen from the host
  local p
  p=$(pm "$1" inspect u1 --format '{{.State.Pid}}')
  cat "/proc/$p/uid_map" "/proc/$p/gid_map" | tr -s ' \n' '  '
  grep -E '^(Uid|Gid|CapEff|Seccomp):' "/proc/$p/status" | tr -s '\t\n' '  '
}
pm "$b" run -d --name u1 --network none --uidmap 0:100000:65536 --gidmap 0:100000:65536 \
  --ulimit nofile=4096:4096 --ulimit nproc=4096:4096 localhost/cairn-redis \
  /usr/bin/redis-server --save "" --appendonly no --port 6379 >/dev/null || fail "podman run --uidmap"
for _ in $(seq 50); do [[ $(um "$b" ping 2>/dev/null) == PONG ]] && break; sleep 0.1; done
[[ $(um "$b" ping) == PONG ]] || fail "redis did not start in its user-namespace container"
um "$b" set mapped yes >/dev/null
ids_before=$(ids "$b")
[[ $ids_before == *"Uid: 100000 100000 100000 100000"* ]] || fail "the container's root is not the host's 100000: $ids_before"
pm "$b" container checkpoint --export "$work/userns.tar.zst" u1 >/dev/null || fail "checkpoint of the user-namespace container"
pm "$a" container restore --keep --import "$work/userns.tar.zst" >/dev/null || fail "restore --import of the user-namespace container"
[[ $(um "$a" get mapped) == yes ]] || fail "the user-namespace container's data set did not come back"
[[ $(ids "$a") == "$ids_before" ]] || fail "maps and ids after restore: $(ids "$a"); before: $ids_before"
# 5. A terminal container (`podman run -t`: its stdio a terminal whose master conmon holds): the
#    restored program counts on and its output still reaches `podman logs` through the new master
#    conmon receives at restore (orphan-pts-master), and its terminal is a terminal again.
pm "$a" run -d -t --name t1 --network none --ulimit nofile=4096:4096 --ulimit nproc=4096:4096 localhost/cairn-redis \
  sh -c 'i=0; while true; do i=$((i+1)); echo "tick $i $(tty)"; sleep 0.1; done' >/dev/null || fail "podman run -t"
last_tick() { pm "$a" logs t1 2>/dev/null | tr -d '\r' | grep -o 'tick [0-9]*' | tail -1 | cut -d' ' -f2; }
for _ in $(seq 50); do [[ $(last_tick) -ge 3 ]] && break; sleep 0.1; done
[[ $(last_tick) -ge 3 ]] || fail "the terminal container printed nothing"
pm "$a" logs t1 2>/dev/null | tr -d '\r' | grep -q 'tick [0-9]* /dev/pts/0' || fail "the container's stdio is not its terminal"
pm "$a" container checkpoint t1 >/dev/null || fail "checkpoint of the terminal container"
at_checkpoint=$(last_tick)
pm "$a" container restore t1 >/dev/null || fail "restore of the terminal container"
for _ in $(seq 50); do [[ $(last_tick) -ge $((at_checkpoint + 5)) ]] && break; sleep 0.1; done
[[ $(last_tick) -ge $((at_checkpoint + 5)) ]] || fail "the restored terminal container's output does not reach podman logs (last tick $(last_tick), at checkpoint $at_checkpoint)"
pm "$a" logs t1 2>/dev/null | tr -d '\r' | grep -q "tick $((at_checkpoint + 1)) /dev/pts/0" ||
  fail "the restored program did not count on from $at_checkpoint on its terminal"
echo "PASS: podman checkpoint/restore through cairn, same node, a fresh storage, on a pre-checkpoint, in a user namespace, and with a terminal"
