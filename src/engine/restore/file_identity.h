// Whether a file a restore finds by name is the one the checkpoint's process had. On the
// machine it was taken on, the device and inode say it. On another machine that mounts the
// same filesystem (a shared store: NFS, virtiofs, a cluster filesystem) the device number is
// that machine's own: there the inode, size and modification time must match instead. A
// refusal says which of them differs.
#pragma once

#include <sys/stat.h>

#include <string>

#include "absl/status/status.h"
#include "image.pb.h"

namespace cairn::restore {

// `what` names the file for the message ("/data/log (fd 3 of pid 12)"). `content_too`: the
// size and modification time must match even on the same device (a mapped file, whose pages
// the image does not hold). On a thread restoring a container (files.h ImageRoot) a file is the
// same when its size and modification time are, not its device and inode: the container's
// runtime makes its root file system again from the image (another storage, another node).
absl::Status CheckSameFile(const struct stat& st, const image::FileId& want, const std::string& what,
                           bool content_too = false);

// Whether the open file `fd` is one the kernel generates as it is read: a file of procfs, sysfs
// or a cgroup file system (/proc/sys/kernel/hostname, /proc/meminfo, /sys/..., memory.max). Its
// name is all there is to match: its inode number and times are those of an in-memory inode the
// kernel makes anew on each mount (a container's new /proc) and after evicting it.
bool KernelGeneratedFile(int fd);

}  // namespace cairn::restore
