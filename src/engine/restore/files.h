#pragma once
// Re-opening a process's descriptors inside the task being restored.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/image/image.h"
#include "engine/inject/injector.h"

namespace cairn::restore {

// Opens every saved descriptor at its number with its flags and offset. Files that were
// deleted while open are recreated from the image and unlinked again once open; the
// names used meanwhile are appended to `temp_paths` so a failed restore can remove them.
absl::Status RestoreFds(inject::Injector& inj, inject::RemoteScratch& scratch, const image::ImageReader& img,
                        std::vector<std::string>* temp_paths);

}  // namespace cairn::restore
