#include "common/boot_id.h"

#include "absl/strings/strip.h"
#include "common/file_util.h"

namespace cairn {

absl::StatusOr<std::string> BootId() {
  absl::StatusOr<std::string> text = ReadFile("/proc/sys/kernel/random/boot_id");
  if (!text.ok()) return text.status();
  return std::string(absl::StripAsciiWhitespace(*text));
}

}  // namespace cairn
