#pragma once
// Rebuilding sockets, as masters in the restorer (see files.h) and, for listening, inside
// the process.
//
// - Unix socket pairs inside the checkpoint: socketpair(2); the bytes that waited to be
//   read on one end are sent again from its peer.
// - Sockets on their own (unix, TCP, UDP): created with the saved family, type and
//   protocol, given the saved options, bound to the saved address (a unix name in the
//   file system is taken over only from a stale socket file nobody listens on, then
//   given back its owner and permissions), and datagram sockets connected again to their
//   saved peer once every socket is bound.
// - listen(2) is made by the process itself (ListenSockets), so that the credentials a
//   listening socket hands to its clients (SO_PEERCRED) are the process's, not the
//   restorer's.
// - An established TCP connection saved with --tcp-close becomes a connection the peer
//   has reset: the program's next read or write fails with ECONNRESET, as after a real
//   reset, and it can reconnect.

#include <sys/types.h>

#include <vector>

#include "absl/status/status.h"
#include "engine/image/image.h"
#include "engine/inject/injector.h"
#include "engine/restore/files.h"

namespace cairn::restore {

bool IsSocket(const image::Fd& fd);

// Creates the sockets of every process in `procs` as masters in `masters`.
absl::Status OpenSocketMasters(const image::ImageReader& img, const std::vector<const image::Process*>& procs,
                               Masters* masters);

// In the task `inj` drives, after InstallFds: listen(2) on each listening socket the
// process saved first (dups and sockets shared with a parent are listened on once).
absl::Status ListenSockets(inject::Injector& inj, const image::Process& proc);

}  // namespace cairn::restore
