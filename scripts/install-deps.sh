#!/usr/bin/env bash
# Installs everything cairn needs to build, test and benchmark, from Debian's packages only.
# Idempotent; safe to run on every invocation of the README's commands.
set -euo pipefail
if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: run as root (it installs Debian packages with apt-get)" >&2
  exit 1
fi
packages=(
  cmake g++ ninja-build pkg-config make
  libabsl-dev libprotobuf-dev protobuf-compiler
  libgrpc++-dev protobuf-compiler-grpc libsqlite3-dev libcurl4-openssl-dev
  libxxhash-dev libzstd-dev liblz4-dev
  libssl-dev zlib1g-dev libc-ares-dev libre2-dev  # (their .a files too: cmake/StaticDeps.cmake)
  libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 procps util-linux zstd xz-utils
  nftables  # dump --tcp-established: the network lock (src/engine/net/netlock.h)
  redis-server redis-tools
  python3-torch  # job groups: a torch.distributed (gloo) training group (tests/daemon/group_test.cc)
  openmpi-bin libopenmpi-dev  # job groups: an MPI program over TCP (tests/daemon/mpi_group_test.cc)
  openjdk-17-jdk-headless nginx-light tmux postgresql golang-go
  etcd-server etcd-client curl
  # Other machines: QEMU guests with Debian's 6.1 cloud kernel on older CPU models, sharing this
  # root over virtiofs (tests/machines/guest.sh)
  qemu-system-x86 qemu-system-common linux-image-cloud-amd64 busybox-static cpio
  groff-base bsdextrautils  # the manual pages rendered and checked (tests/packaging/install_test.sh)
  # Containers checkpointed by their runtimes through criu-compat (tests/integration/container_test.cc,
  # tests/containers/)
  runc podman containerd
  # SLURM: the SPANK plugin (src/integrations/slurm/) and a real cluster of one slurmctld and three
  # slurmd on this host (tests/slurm/)
  slurmctld slurmd slurm-client munge libslurm-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Test-only: s3rver, the S3 server the storage tests start on loopback, pinned (3.7.1) in
# tests/tools/package-lock.json and installed into tests/tools/node_modules. node and npm come from
# Debian unless the machine already has them.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "install-deps: installing nodejs npm"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends nodejs npm
fi
tools="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/tools"
if ! grep -qs '"version": "3.7.1"' "$tools/node_modules/s3rver/package.json"; then
  echo "install-deps: installing s3rver 3.7.1 into $tools/node_modules"
  (cd "$tools" && npm ci --no-audit --no-fund --loglevel=error)
fi
