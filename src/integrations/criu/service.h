#pragma once
// `criu swrk FD`, answered by cairn: the service container runtimes (runc, crun through
// libcriu, Podman, containerd, CRI-O) start to checkpoint and restore a container. One
// protobuf message (criu_rpc.proto) per SOCK_SEQPACKET packet: a request, then the response,
// with notifications in between that the runtime acknowledges ("setup-namespaces",
// "post-restore" with the restored init's pid: runc learns the pid only from it).
//
// VERSION, FEATURE_CHECK, CHECK, DUMP, PRE_DUMP and RESTORE are served; the rest (PAGE_SERVER,
// CPUINFO_*, WAIT_PID) are answered with a failure that says why. A garbled message gets an
// error response, never a crash. The checkpoint inside the runtime's images directory is
// cairn's own (options.h ImageDir); log_file, in the work directory, holds what cairn did and
// any error (the runtime points its user there).
//
// Unlike the other integrations it drives the engine itself rather than cairnd's API: the
// runtime runs `criu` as its own child, moves it into the container's cgroups before a restore
// and waits for the restored init to become its child when `criu` exits (runc is a child
// subreaper). A restore made by cairnd would leave the container cairnd's child, outside the
// runtime's cgroup placement, and would need cairnd on every node that only runs containers.

namespace cairn::criu_compat {

// Serves requests on `fd` until the runtime closes it. Returns the process's exit status:
// 0 when every request succeeded.
int ServeSwrk(int fd);

// `criu --version`, `criu check`, `criu swrk FD`: criu's command line, as runtimes and their
// users call it. Returns the exit status.
int CriuMain(int argc, char** argv);

}  // namespace cairn::criu_compat
