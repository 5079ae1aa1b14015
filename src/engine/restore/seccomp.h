#pragma once
// A process's seccomp filters put back (dump/seccomp.h): installed by the process itself, oldest
// first, on every thread at once (SECCOMP_FILTER_FLAG_TSYNC), with the flags each was installed
// with — after everything else the restore injects but the removal of its work area, which
// every filter a program can run under allows.

#include "absl/status/status.h"
#include "engine/inject/injector.h"
#include "image.pb.h"

namespace cairn::restore {

// REQUIRES: `proc`'s threads exist and hold their final credentials and no_new_privs.
absl::Status InstallSeccompFilters(inject::Injector& inj, inject::RemoteScratch& scratch, const image::Process& proc);

}  // namespace cairn::restore
