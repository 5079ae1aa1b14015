# Sourced by the benches (each runs from the repository's root).
#
# bench_build TARGET...: sets `build` to $BUILD, an existing build tree used as it is configured,
# or by default build-bench, made for benchmarks (Release, no tests) if missing; builds TARGETs.
bench_build() {
  build=${BUILD:-build-bench}
  [[ -f $build/build.ninja ]] || cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCAIRN_TESTS=OFF >/dev/null
  ninja -C "$build" "$@" >/dev/null
}

# For the benches that also measure on a loaded machine (BUSY=N): start_busy N starts N busy
# loops and lists their pids in `spinners`; stop_busy ends them. A loop keeps none of the
# caller's descriptors (one holding the tool's pipe would keep its reader waiting).
spinners=()
start_busy() {
  local i
  for ((i = 0; i < $1; i++)); do
    (exec 251>&- 2>/dev/null; while :; do :; done) &
    spinners+=($!)
    disown $!
  done
}
stop_busy() { if ((${#spinners[@]})); then kill -9 "${spinners[@]}" 2>/dev/null || true; fi; }
