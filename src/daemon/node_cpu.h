// The CPU a node offers its jobs, and whether a job can move to another node's: a job's
// processes choose their code by the CPU they start on, so they may use all of its features —
// or, started with --cpu-baseline, only those of that x86-64 level (engine/machine/cpu.h). The
// engine checks it again at restore; a daemon checks it before it freezes a job to move it.
#pragma once

#include <set>
#include <string>

namespace cairn::daemon {

// This node's CPU features (engine/machine/cpu.h names), less those listed in the environment
// variable CAIRND_TEST_CPU_LACKS (comma-separated): tests play a node with an older CPU.
std::set<std::string> NodeCpuFeatures();

// Why a job that keeps to `baseline` (0: none; then it may use all of `here`) cannot move to a
// node whose CPU has `there`, named `node`; empty when it can, or when `there` is empty (the
// node did not say).
std::string CpuMismatch(int baseline, const std::set<std::string>& here, const std::set<std::string>& there,
                        const std::string& node);

}  // namespace cairn::daemon
