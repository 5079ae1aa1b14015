#pragma once
// A frozen process's descriptors, read once for the whole dump (the write tracker's scan, the
// network lock and the capture share them: dump.cc).
//
// /proc/PID/fdinfo is the one place the kernel shows a descriptor's close-on-exec bit, and
// reading it costs 4-8 µs per descriptor of another process: 8 ms of a server's freeze for its
// 1,000 connections. For a socket the dump needs nothing else of it (its position is 0, its
// mount sockfs, and a lock held through a socket is not saved: files.h), so a socket's flags
// are asked in the process itself instead, all in one batch of fcntl(F_GETFL) and
// fcntl(F_GETFD) (inject/batch.h): the flags fdinfo prints (the file's f_flags, with O_CLOEXEC
// when the descriptor's bit is set). (/proc/locks, which would name a socket's locks, takes the
// kernel's file-lock rwsem for writing: an RCU grace period, 10 ms here, every read.)

#include <sys/types.h>

#include <vector>

#include "absl/status/statusor.h"
#include "engine/dump/freeze.h"
#include "engine/inject/injector.h"
#include "engine/proc/fds.h"

namespace cairn::dump {

// Every descriptor of `fp`'s process, as proc::ReadFds gives them, asking through `inj` and
// `scratch` (the process stays frozen; the scratch area is mapped in it).
absl::StatusOr<std::vector<proc::FdInfo>> ReadFrozenFds(const FrozenProcess& fp, inject::Injector& inj,
                                                        inject::RemoteScratch& scratch);

}  // namespace cairn::dump
