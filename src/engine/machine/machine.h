// The machine a checkpoint was taken on, recorded in the image (image.proto `Machine`), and
// the check a restore makes against the machine it runs on before it touches anything: every
// CPU feature the processes may use (all of the old CPU's, or only its baseline's for a job
// started with --cpu-baseline), every XSAVE component a thread holds, and every kernel feature
// the restore will call on. A refusal names each missing feature and what to do.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "image.pb.h"

namespace cairn::machine {

// This machine, for the image: CPU, XSAVE layout, kernel release, `vdso` (the dumped
// processes' vDSO image, before anything was injected into it) and the CPU baseline the job
// was started with (0: none).
image::Machine Describe(std::string vdso, int cpu_baseline);

// The kernel features the restore of `procs` calls on that not every supported kernel has
// ("posix-timer-ids").
std::vector<std::string> KernelNeeds(const std::vector<const image::Process*>& procs);

// Whether this machine can run the checkpoint's processes — its CPU, its kernel, its vDSO, and
// the capabilities cairn holds here (each process's must be among them); `where` names the
// image for the message. Images without a machine record are checked for capabilities only
// (they predate it; the vDSO check at restore still holds for them).
absl::Status CheckFits(const image::Checkpoint& meta, const std::vector<const image::Process*>& procs,
                       const std::string& where);

// Whether a restore here must redirect the checkpoint's vDSO to this kernel's (vdso.h):
// the image's vDSO differs from this machine's.
bool NeedsVdsoProxy(const image::Checkpoint& meta);

// Whether this kernel has a feature named in image::Machine.kernel_needs.
bool KernelHas(const std::string& feature);

// The CPU baseline (1..4) that pid's environment names (cpu.h kBaselineEnv), 0 when none.
int BaselineOf(pid_t pid);

}  // namespace cairn::machine
