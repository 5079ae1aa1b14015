#!/usr/bin/env bash
# Builds cairn and runs every test (unit, round trip, real programs, bad input).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
cd build
ctest --output-on-failure -j2 --timeout 300 "$@"
