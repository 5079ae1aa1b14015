#!/bin/bash
# containerd (its own daemon, started here on a socket of its own) checkpoints and restores a
# redis task through runc and cairn's criu-compat (`criu` on containerd's PATH is cairn):
#  1. `ctr c checkpoint --task` (containerd pauses the task, checkpoints it leaving it running,
#     resumes it; the checkpoint goes to its content store), then the container is removed and
#     `ctr c restore --live` brings it back: the data set survives, the counter goes on;
#  2. `ctr t checkpoint --exit --image-path DIR`: the task stops, cairn's checkpoint is in DIR.
# The original keeps running after 1 and is not left paused.
# Usage: containerd_test.sh BUILD_DIR. Exit 77: skipped (what is missing is said).
set -euo pipefail
build=$(cd "$1" && pwd)
cairn=$build/cairn
for tool in containerd ctr podman runc redis-server redis-cli busybox nsenter; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed (scripts/install-deps.sh installs it)"; exit 77; }
done

work=$(mktemp -d /tmp/cairn-containerd-XXXXXX)
ns=cairn-test-$$
daemon=
cleanup() {
  if [[ -n $daemon ]]; then
    for id in r1; do
      timeout 10 ctr -a "$work/containerd.sock" -n "$ns" t kill -s KILL "$id" >/dev/null 2>&1 || true
      sleep 0.3
      timeout 10 ctr -a "$work/containerd.sock" -n "$ns" t rm "$id" >/dev/null 2>&1 || true
      timeout 10 ctr -a "$work/containerd.sock" -n "$ns" c rm "$id" >/dev/null 2>&1 || true
    done
    kill "$daemon" 2>/dev/null || true
    wait "$daemon" 2>/dev/null || true
  fi
  pkill -f "containerd-shim-runc-v2 -namespace $ns" 2>/dev/null || true
  rm -rf "/run/containerd/runc/$ns"
  [[ ${CAIRN_TEST_KEEP:-0} == 1 ]] || rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  find "$work" -name '*.log' -path '*criu-work*' -exec tail -n 5 {} \; >&2 2>/dev/null || true
  tail -n 5 "$work/containerd.log" >&2 || true
  echo "test directory: $work" >&2
  exit 1
}

mkdir -p "$work/shim"
ln -s "$cairn" "$work/shim/criu"
export PATH=$work/shim:$PATH

# The image, without a registry, through Podman's OCI archive (Podman's own storage in the test
# directory).
source "$(dirname "$0")/redis_rootfs.sh"
redis_rootfs_tar "$work/rootfs" "$work/rootfs.tar"
pm=(podman --root "$work/podman" --runroot "$work/podman-run" --storage-driver vfs)
"${pm[@]}" import "$work/rootfs.tar" localhost/cairn-redis >/dev/null 2>&1 || fail "podman import"
"${pm[@]}" save --format oci-archive -o "$work/image.tar" localhost/cairn-redis >/dev/null 2>&1 || fail "podman save"

cat >"$work/config.toml" <<EOF
version = 2
root = "$work/root"
state = "$work/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$work/containerd.sock"
EOF
containerd --config "$work/config.toml" >"$work/containerd.log" 2>&1 &
daemon=$!
c() { timeout 60 ctr -a "$work/containerd.sock" -n "$ns" "$@"; }
for _ in $(seq 100); do c version >/dev/null 2>&1 && break; sleep 0.1; done
c images import --base-name localhost/cairn-redis "$work/image.tar" >/dev/null || fail "ctr images import"

task_pid() { c t ls | awk -v id="$1" '$1 == id {print $2}'; }
redis() {  # redis ID ARGS...: redis-cli inside the task's network namespace
  local id=$1
  shift
  nsenter -n -t "$(task_pid "$id")" redis-cli "$@"
}
c run -d localhost/cairn-redis:latest r1 /usr/bin/redis-server --save "" --appendonly no --port 6379 >/dev/null ||
  fail "ctr run"
for _ in $(seq 50); do [[ $(redis r1 ping 2>/dev/null) == PONG ]] && break; sleep 0.1; done
redis r1 set greeting hello >/dev/null
redis r1 incrby counter 41 >/dev/null

# 1. A checkpoint of the running task into the content store; the original runs on, unpaused.
original=$(task_pid r1)
c c checkpoint --task r1 localhost/r1-checkpoint:1 >/dev/null || fail "ctr c checkpoint --task"
[[ $(task_pid r1) == "$original" ]] || fail "the original task did not run on"
freezer=/sys/fs/cgroup/freezer$(awk -F: '$2 == "freezer" {print $3}' "/proc/$original/cgroup")
[[ ! -e $freezer/freezer.state || $(cat "$freezer/freezer.state") == THAWED ]] || fail "the original is left paused"
[[ $(redis r1 get greeting) == hello ]] || fail "the original lost its data"
c t kill -s KILL r1 >/dev/null
for _ in $(seq 50); do [[ -z $(task_pid r1) || $(c t ls | awk '$1 == "r1" {print $3}') == STOPPED ]] && break; sleep 0.1; done
c t rm r1 >/dev/null 2>&1 || true
c c rm r1 >/dev/null || fail "ctr c rm"
c c restore --live r1 localhost/r1-checkpoint:1 >/dev/null || fail "ctr c restore --live"
[[ -n $(task_pid r1) && $(task_pid r1) != 0 ]] || fail "no task after restore"
[[ $(redis r1 get greeting) == hello ]] || fail "the key written before the checkpoint is gone"
[[ $(redis r1 incr counter) == 42 ]] || fail "the counter did not go on from 41"

# 2. A checkpoint that ends the task, into a directory of ours.
c t checkpoint --exit --image-path "$work/images" r1 >/dev/null || fail "ctr t checkpoint --exit"
[[ -f $work/images/cairn/checkpoint.meta ]] || fail "no cairn checkpoint in the image directory"
"$cairn" inspect "$work/images/cairn" >/dev/null || fail "cairn inspect of containerd's checkpoint"
for _ in $(seq 50); do [[ $(c t ls | awk '$1 == "r1" {print $3}') == STOPPED ]] && break; sleep 0.1; done
[[ $(c t ls | awk '$1 == "r1" {print $3}') == STOPPED ]] || fail "the task runs on after checkpoint --exit"
echo "PASS: containerd checkpoint/restore through cairn (content store, --live restore; --exit into a directory)"
