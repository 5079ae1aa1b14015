// The clocks of a job restored with its own time namespace (image.proto TimeNamespace).
#pragma once

#include <string>

#include "image.pb.h"

namespace cairn::restore {

// What to write to /proc/self/timens_offsets of the namespace the job's processes will enter:
// on the boot the checkpoint was taken on, its offsets; on another (another machine, or after a
// reboot), offsets that continue CLOCK_MONOTONIC and CLOCK_BOOTTIME from their checkpointed
// values, advanced by the wall-clock time since (never moved back when the clock has been
// set back). `boot_id` is this machine's.
std::string TimeNamespaceOffsets(const image::TimeNamespace& t, const std::string& boot_id);

}  // namespace cairn::restore
