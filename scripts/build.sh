#!/usr/bin/env bash
# Installs dependencies (Debian packages) and builds cairn into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo ${CAIRN_CMAKE_ARGS:-} >/dev/null
ninja -C build
