#!/usr/bin/env bash
# The long fault suite (docs/reliability.md): every test of tests/faults at 1 GiB, with 64 random
# kill instants over a whole dump (the suite's short version runs 256 MiB and 16).
#   sudo bash tests/faults/long.sh [BUILD_DIR]     (after scripts/build.sh)
# Prints each test's result and the random-instant summary line; exits non-zero on a failure.
set -euo pipefail
build=${1:-build}
export CAIRN_FAULT_MIB=${CAIRN_FAULT_MIB:-1024}
export CAIRN_FAULT_RUNS=${CAIRN_FAULT_RUNS:-64}
echo "faults: CAIRN_FAULT_MIB=$CAIRN_FAULT_MIB CAIRN_FAULT_RUNS=$CAIRN_FAULT_RUNS on $(nproc) cores, $(uname -r)"
exec "$build/tests/faults/faults_dump_kill_test" "$@"
