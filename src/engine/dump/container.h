#pragma once
// A container's world (image.proto Container): a tree whose root sees a root file system of
// its own in its own mount namespace, as runc, Podman and containerd make. Its root file
// system is not saved (the runtime keeps it and hands it to the restore); what is saved is how
// the container sees the rest: every mount over that root, classified so that a restore can
// mount it again (restore/container.h), the files of the tmpfs mounts it made (its /dev), its
// host name, and whether it had a network namespace of its own.

#include <sys/types.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/proc/mountinfo.h"
#include "image.pb.h"

namespace cairn::dump {

struct ContainerOptions {
  // Mount points as the container sees them ("/data") that the caller (a runtime) names as
  // external, with the key it maps to a host path again at restore (criu-compat: ext_mnt).
  std::map<std::string, std::string> external_mounts;
  // The network namespace is the runtime's and handed over again at restore under this key.
  std::string external_net;
  // The PID namespace is another's (a pod's, a container the runtime joined it to), handed over
  // again at restore under this key: the container's init is not its init (criu-compat:
  // external pid[INODE]:KEY).
  std::string external_pid;
  // The runtime sets the network namespace up itself at restore (criu-compat: empty_ns with
  // CLONE_NEWNET): a new one is made with its loopback, whatever else this one held.
  bool empty_net = false;
  // Descriptions the runtime holds the other end of and hands over again at restore, by the
  // name their link shows ("pipe:[INODE]"; criu-compat: the runtime's descriptors.json).
  std::set<std::string> handed_over;
};

// The mount tables a container's dump works from, each read once: the container's as its
// root sees it, and this process's (the host's).
struct ContainerMounts {
  std::vector<proc::MountEntry> theirs;
  std::vector<proc::MountEntry> host;
};

// The mount tables when `root` sees a root file system other than this process's (a
// container), else nothing. Trees of `cairn run` jobs have a mount namespace of their own over
// the machine's root: not containers.
absl::StatusOr<std::optional<ContainerMounts>> ReadContainerMounts(pid_t root);

// Records `root`'s container into ckpt->container(). Refuses, naming the mount and what to
// do, a mount it could not make again: a host path not named external, a file system of a
// kind it does not know, a tmpfs holding more than it saves.
// REQUIRES: the processes are frozen; `mounts` from ReadContainerMounts(root).
absl::Status RecordContainer(pid_t root, const ContainerMounts& mounts, const ContainerOptions& opts,
                             image::Checkpoint* ckpt);

}  // namespace cairn::dump
