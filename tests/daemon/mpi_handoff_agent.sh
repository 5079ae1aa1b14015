#!/bin/sh
# mpirun's remote-shell agent for the MPI job-group test (tests/daemon/mpi_group_test.cc), in
# place of ssh: `mpi_handoff_agent.sh DIR HOST COMMAND...` hands the command that starts Open
# MPI's daemon (orted) on HOST to the group's rank there — a cairn job on that node, waiting for
# DIR/launch-HOST — and returns at once. (ssh would run it itself; the rank must be a job of the
# node's cairnd to be checkpointed with the group.)
set -eu
dir=$1 host=$2
shift 2
printf '%s\n' "$*" > "$dir/launch-$host.tmp"
mv "$dir/launch-$host.tmp" "$dir/launch-$host"
