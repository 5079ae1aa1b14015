#pragma once
// Rebuilding descriptors, for one process or a whole tree.
//
// The restorer opens every open file description of the checkpoint once, in itself (a
// "master" descriptor: a file opened with its flags at its offset, a pipe end holding
// its queued bytes...), at numbers above any descriptor number the checkpoint uses.
// Every restored task starts as a copy of the restorer (or of a restored parent that
// was one), so it inherits all masters; it then dup3s the ones it had into place and
// closes the rest. Descriptors that shared a description — within a process or between
// processes — come out sharing it again, offsets and flags included.

#include <sys/types.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"
#include "engine/image/image.h"
#include "engine/inject/injector.h"

namespace cairn::restore {

struct Masters {
  int base = 3;  // lowest master number; every saved descriptor number is below it
  std::map<std::pair<pid_t, int>, int> fds;  // (pid, fd) of a description's first holder -> master
  std::vector<UniqueFd> owned;
};

// Opens the masters for every process of the checkpoint (`procs`). Files deleted while
// open are recreated from the image under a temporary name, opened and unlinked again;
// names not yet unlinked when this fails are in `temp_paths`.
absl::StatusOr<Masters> OpenMasters(const image::ImageReader& img, const std::vector<const image::Process*>& procs,
                                    std::vector<std::string>* temp_paths);

// In the task `inj` drives, which holds copies of all masters: dup3s its saved
// descriptors into place, then closes every master.
absl::Status InstallFds(inject::Injector& inj, const image::Process& proc, const Masters& masters);

}  // namespace cairn::restore
