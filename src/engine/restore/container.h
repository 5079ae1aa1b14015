#pragma once
// A container's world made again (image.proto Container, dump/container.h): its mounts over
// the root file system the restore is given, its host name, its network namespace, then
// pivot_root into it — all by the root task itself, in its new namespaces, right after it is
// created and before it stops for the restorer. The restorer plans every step (it may
// allocate and read files); the task runs them with raw system calls over the plan's memory,
// a copy of the restorer's made by clone, so that nothing it does needs a lock another
// thread of the restorer could have held.

#include <sys/types.h>

#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"
#include "image.pb.h"

namespace cairn::restore {

struct ContainerSetup {
  std::string root;  // the root file system here (a directory)
  // Host paths of the mounts the dump recorded as external, by key (criu-compat: ext_mnt).
  std::map<std::string, std::string> external_mounts;
  // A network namespace to enter (a descriptor of the restorer's) instead of a new one: the
  // runtime's, handed over under the key the dump recorded (criu-compat: inherit_fd
  // extRootNetNS). -1: none.
  int net_ns_fd = -1;
  // The PID namespace to make the processes in (a descriptor of the restorer's) when the
  // container's was another's (image Container.external_pid; criu-compat: inherit_fd KEY). -1:
  // none.
  int pid_ns_fd = -1;
  // Takes the master of a terminal whose master the checkpoint did not hold (the runtime's
  // console, Mount.terminals): `master` is the restorer's descriptor (the callee dups what it
  // keeps), `slave` the terminal as the container sees it. Unset: such a checkpoint is refused.
  std::function<absl::Status(int master, const std::string& slave)> take_terminal;
};

// `creds` (the host's ids, as the image holds them) as a process names them inside the
// container's user namespace `ns`. Fails naming an id the namespace does not map.
absl::StatusOr<image::Creds> CredsInside(const image::Creds& creds, const image::UserNamespace& ns);

class ContainerPlan {
 public:
  // Plans `c` over `setup`. Fails, naming what, when a mount the container had cannot be made
  // here (an external mount with no host path, a cgroup hierarchy this machine lacks...).
  static absl::StatusOr<ContainerPlan> Make(const image::Container& c, const ContainerSetup& setup);

  // The clone flags of the namespaces the root task is made in (its IPC namespace: the
  // checkpoint's own_ipc_ns, as for a job). With CLONE_NEWUSER every other new namespace is
  // owned by the container's user namespace, as its runtime made them.
  unsigned long CloneFlags() const { return clone_flags_; }

  // A container in a user namespace of its own joins a handed-over network namespace (owned
  // by the host's) before it enters its user namespace, where it no longer could: the root
  // task is cloned from a helper that entered it (this descriptor). -1: none to enter so.
  int NetNsBeforeClone() const { return net_before_clone_; }

  // A container whose PID namespace was another's: the root task is cloned by a helper that
  // entered that namespace (its children's), this descriptor. -1: a new one (CLONE_NEWPID).
  int PidNsBeforeClone() const { return pid_before_clone_; }

  // After clone, before the root task runs its first step: gives its new user namespace the
  // checkpoint's maps (and setgroups), then lets it go on. No-op without a user namespace.
  absl::Status MapIds(pid_t task);

  // In the root task, right after clone: runs every step. Returns -1, or the index of the
  // step that failed with its errno in *err. Async-signal-safe.
  int Run(int* err) const;

  // The step at `index`, in words, for the error of a failed Run.
  std::string Describe(int index) const;

  // After Run: gives the terminals it made (Mount.terminals) their settings, their slaves
  // their owner and mode, and hands their masters to setup.take_terminal. The masters are
  // held here until the plan is destroyed (the processes open their slaves before).
  absl::Status HandOverTerminals();

 private:
  enum class Op {
    kAwaitMaps,    // wait for a byte on `fd` (MapIds has written the user namespace's maps)
    kOpenHost,     // open host path `a` (O_PATH) into slot `slot`, before kBecomeRoot can no longer reach it
    kBecomeRoot,   // setgroups(0) unless `flags` is 0, setresgid(gid), setresuid(uid): the user namespace's root
    kPrivate,      // mount(NULL, "/", MS_REC|MS_PRIVATE): nothing goes back to the host
    kOpenRoot,     // `a` (the root file system) bound onto itself (open_tree + move_mount): the base of every later path
    kSetns,        // setns(fd, CLONE_NEWNET)
    kLoopbackUp,   // bring "lo" up in the new network namespace
    kHostname,     // sethostname(a)
    kDomainname,   // setdomainname(a)
    kMount,        // mount(a, <b under the root>, fstype, flags, data)
    kBind,         // bind `a` (under the root if a_in_root, else the host path opened in `slot`) onto b
    kRemount,      // mount(NULL, b, NULL, MS_REMOUNT | flags, data)
    kMkdir,        // under the mount at b: c with mode
    kMknod,
    kSymlink,      // c -> a
    kWrite,        // c with `data`/`len`
    kOwn,          // chown c (no follow) to uid:gid, then chmod mode unless a symlink
    kLink,         // c: another name of the file at a (linkat)
    kTimes,        // c's access and modification times: atime_ns, mtime_ns (no follow)
    kPivot,        // pivot_root into the root; the old root let go
    kTerminal,     // a new terminal numbered `mode` on the devpts at b, its master dup3()ed onto fd
  };
  struct Step {
    Op op;
    const char* a = nullptr;
    const char* b = nullptr;
    const char* c = nullptr;
    const char* fstype = nullptr;
    const char* data = nullptr;
    size_t len = 0;
    unsigned long flags = 0;
    uint32_t mode = 0;
    dev_t rdev = 0;
    uint32_t uid = 0, gid = 0;
    bool a_in_root = false;
    int fd = -1;
    int slot = -1;
    int64_t atime_ns = 0, mtime_ns = 0;
  };
  // Host paths a plan binds into the container, each opened once by kOpenHost (Run's own table).
  static constexpr int kMaxHostSources = 256;
  const char* Keep(std::string s);

  std::deque<std::string> strings_;  // a deque: the steps point into it
  std::vector<Step> steps_;
  unsigned long clone_flags_ = 0;
  // Mount.terminals: each one's master, in the descriptor table the root task shares with the
  // restorer until it has run the plan (a placeholder before: the task replaces it).
  struct Terminal {
    image::PtyState pty;
    std::string slave;  // "/dev/pts/0"
    UniqueFd master;
    // Its slave, open until the processes have theirs: a terminal whose slave no one holds
    // reads as hung up (EIO) on the master, and the runtime's console would stop there.
    UniqueFd slave_held;
  };
  std::vector<Terminal> terminals_;
  // CLONE_NEWUSER: the maps MapIds writes, and the pipe that lets the task go on after.
  std::optional<image::UserNamespace> user_ns_;
  UniqueFd gate_read_, gate_write_;
  int net_before_clone_ = -1;
  int pid_before_clone_ = -1;
  std::function<absl::Status(int, const std::string&)> take_terminal_;
};

}  // namespace cairn::restore
