#pragma once
// AIO contexts (io_setup). A context's id is the address of its ring, a kernel-made mapping
// ("/[aio] (deleted)") whose header shows the ring's size and where user space and the kernel
// are in it: `head`, the next completion to be collected, and `tail`, past the newest one. A
// checkpoint keeps a context whose ring holds no completion not yet collected; restore makes
// a context with a ring of the same size again and moves it to the saved address
// (restore/memory.cc). The new ring starts at slot 0 (head = tail = 0, as the kernel keeps its
// own tail): a program that reads the ring itself finds it empty, as the saved one was. A ring
// mapped without a context of the process (inherited over fork: the kernel gives the child the
// mapping, not the context) is refused (dump.cc asks the kernel with io_getevents).
//
// A request still in flight (submitted, not completed) cannot be seen from outside: the kernel
// shows no count of them. One that completes while the dump runs moves `tail`, and the dump
// then fails (CheckAioRingsQuiet); one that completes neither before nor during the dump (an
// IOCB_CMD_POLL waiting on a socket) is not detected — README, known gaps.

#include <sys/types.h>

#include <vector>

#include "absl/status/status.h"
#include "engine/proc/maps.h"
#include "image.pb.h"

namespace cairn::dump {

// Records the AIO ring `m` of `pid` in `v` (kind AIO_RING, its number of events and its
// tail). (A running process's ring may hold completions for a moment: judged frozen, below.)
absl::Status DescribeAioRing(pid_t pid, const proc::MapEntry& m, image::Vma* v);

// Once everything is captured (the processes still frozen): refuses a ring with completions
// not collected, and fails if the tail of any saved ring moved since it was described (in the
// freeze), which means a request was in flight.
absl::Status CheckAioRingsQuiet(const std::vector<pid_t>& pids, const std::vector<image::Process*>& procs);

}  // namespace cairn::dump
