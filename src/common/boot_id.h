#pragma once
// This boot of this machine: the kernel's random boot id (/proc/sys/kernel/random/boot_id), new
// at every boot. What tells a restore on another machine, or after a reboot, from one on the
// boot a checkpoint was taken on (the clocks it must continue, the network stack it may share).

#include <string>

#include "absl/status/statusor.h"

namespace cairn {

// The boot id without its newline ("c2b4…-…").
absl::StatusOr<std::string> BootId();

}  // namespace cairn
