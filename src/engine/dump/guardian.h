#pragma once
// The dump's guardian: a small process that outlives the dumper and puts back, if the
// dumper dies mid-dump, what the dump had changed in the processes it froze.
//
// Why it is enough (the proof, with freeze.h, inject/injector.h and inject/trampoline.h):
// 1. Outside an injected call, a frozen thread has exactly its own registers and signal
//    mask: freezing changes neither (PTRACE_SEIZE + PTRACE_INTERRUPT, no mask blocked), and
//    every injection puts both back before it returns. A thread in a PTRACE_EVENT_STOP or
//    a syscall stop whose tracer dies carries on as if nothing had happened: no trap is
//    ever forced (injected calls run between syscall stops, batches end asleep) and
//    with PTRACE_O_TRACESYSGOOD an unanswered syscall stop delivers no signal.
// 2. Inside an injected call, the thread's rip lies in the trampoline, in the vDSO's unused
//    tail: it runs the injected call(s) and then sleeps there (its signals blocked, only a
//    PTRACE_INTERRUPT wakes it). It runs none of its own code
//    and is never killed for it. Its registers and mask before the call are in the journal
//    (written before the first injection); the guardian seizes it and puts them back.
// 3. What the injected calls leave in the process is journaled before it exists (the
//    scratch area, mapped at an address chosen beforehand) or once it exists (a write
//    tracker), and the guardian undoes it with the same injection, then writes the
//    trampoline's zeros back.
// 4. The checkpoint directory being written (DIR.partial) is removed; a committed one
//    (renamed to DIR: the same inode) is kept. If the dump had committed and was to kill
//    its processes (not --leave-running, or a hand-off the peer accepted), the guardian
//    kills them: the dump is finished, not rolled back, so that one copy runs, not two.
//    A hand-off that asks a peer to take the processes over first freezes them in their
//    freezer cgroup and says so (kHold): then the guardian leaves them there, neither thawed
//    nor killed, and the daemon that owns the migration decides once it knows what the peer
//    did (daemon/migrate.h). All that is left to undo by then is the trampoline's code in
//    the vDSO's tail (every injection ended before the commit): the guardian writes its
//    zeros back through /proc/PID/mem, which needs no stop of the process; and the sockets
//    still in repair mode (point 6) leave it, the network lock staying for the daemon, which
//    removes it once it has silenced and killed them or before it thaws them.
// 5. The window of a call: entering, the thread's journal flag is set, then its mask
//    blocked, then its registers set; leaving, the reverse. So no handler of the process
//    ever runs with rip in the trampoline, and a flagged thread found outside it only
//    needs its mask back.
// 6. Live TCP connections (--tcp-established, dump/tcp.h): each socket is journaled before it
//    enters repair mode, and the network lock's table before it is taken. Rolling back, the
//    guardian first takes every journaled socket out of repair mode (through a copy of the
//    descriptor), then removes the lock. Between the dumper's death and that, a thread that
//    is not inside an injected call may run and find its socket in repair mode (a read fails
//    EPERM): a window of the guardian's wake-up — closed where the processes have a freezer
//    cgroup of their own (a cairnd job: freezer_hold.h): it is frozen before the first socket
//    enters repair mode and outlives the dumper, and the guardian thaws it last. A committed
//    kill keeps the lock for the restore; a hand-off (kHold) keeps it for the daemon (point 4).
// 7. A unix socket's queue is copied with a peek offset (SO_PEEK_OFF) of the dump's: each
//    socket is journaled with the program's own offset before, and marked after it is put back;
//    rolling back, the guardian gives the others theirs. (A socket in flight, which no process
//    holds, cannot be reached: one the dumper died peeking keeps the dump's offset.)
// 8. The journal is a file (JournalDir(), a root-only directory), locked with flock by the
//    dumper and its guardian together (one open file description, shared over the fork):
//    the lock is free only once both are dead. The guardian's last act is to remove it.
//    So a journal whose lock is free belongs to a dump whose guardian died too (a SIGKILL
//    aimed at both): the next cairn that looks — every dump before it starts, `cairn check
//    --fix`, cairnd at its start — does what the guardian would have (RepairOrphanedDumps).
//    Until then a thread caught inside an injected call sleeps in the trampoline (its
//    signals blocked: it runs none of its code), the others run on, and a freezer cgroup
//    held by the dump stays frozen.
// 9. A write tracker (a userfaultfd made by an injected call, then parked at a chosen number):
//    the numbers it may take are journaled before it is made (the process is stopped, so they
//    are known: the lowest free one and the park), and it is journaled once made; rolling
//    back, a userfaultfd at one of those numbers is closed.
// 10. A cgroup its runtime had paused (ThawPausedCgroup) is journaled before it is thawed for
//    the dump, its threads seized and interrupted while still frozen (PausedSeize), so none runs
//    its own code between the thaw and its ptrace stop. Rolling back, the guardian pauses it
//    again first thing (the dumper's death let its processes go: they ran only for the
//    guardian's wake-up, which comes first on the machine: the guardian waits at a real-time
//    priority until those first steps are done), seizes its threads the same way and thaws it
//    for the repairs, then
//    pauses it again before it lets any go (a detached frozen task stays frozen). A repair
//    found later (point 8) does not: the runtime may have resumed the container since.
// 11. Processes holding CUDA state (dump/devices.h) are journaled, each with its start time,
//    before the GPU driver locks any. The guardian may not load or call the driver (a fork of a
//    threaded process: point 8's rules); once its own repairs are done, if they are not settled
//    it execs a fresh cairn (`cairn gpu-put-back`, which cairnd serves too) that inherits the
//    journal's file and lock, puts each one still alive back to RUNNING by the state the driver
//    reports, and removes the journal. Should that one die too, the journal is an orphan's (point
//    8) and the next cairn does the same. Until then their CUDA calls wait on the driver's lock;
//    their other code runs. A put-back that failed (the driver refused) keeps the journal as
//    NAME.failed: every later RepairOrphanedDumps tries those processes again, and `cairn check`
//    names them while the driver holds them.
// What it cannot cover: in the double kill of point 8, a userfaultfd the program itself makes,
// before the repair, at a number the tracker's creation had journaled but never took.
#include <sys/types.h>
#include <sys/user.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cairn::dump {

// What a dump has changed in its processes, in memory shared with its guardian. Written
// by the dumper's tracer thread only, each record before the change it describes; counts
// are published with release stores after their records.
class GuardJournal {
 public:
  static constexpr int kMaxProcesses = 4096;
  static constexpr int kMaxThreads = 16384;
  static constexpr int kMaxRepairs = 16384;
  static constexpr int kMaxPeeks = 16384;
  static constexpr int kMaxDeviceProcesses = 64;

  // A journal file's first bytes: written before it is linked into JournalDir().
  static constexpr uint64_t kMagic = 0x6c6e72756f6a6463ULL;  // "cdjournl"

  enum class Outcome : uint32_t {
    kRunning = 0,  // undo everything journaled (also after a failed dump, for what it left)
    kDone = 1,     // the dump succeeded: nothing to do
    kKill = 2,     // committed, the processes are to die: finish the kill
    kHold = 3,     // a hand-off froze them in their freezer cgroup: leave them there
  };

  // A frozen process; returns its index, or ResourceExhausted.
  absl::StatusOr<int> AddProcess(pid_t pid, uint64_t start_time);
  // A frozen thread of process `proc`, with its registers and mask as frozen; returns its slot.
  absl::StatusOr<int> AddThread(int proc, pid_t tid, const user_regs_struct& regs, uint64_t mask);

  void TrampolineWriting(int proc);                   // from now on, the vDSO's tail may hold it
  void TrampolineAt(int proc, uint64_t addr);         // it is there: rip inside means mid-call
  void ScratchAt(int proc, uint64_t addr, uint64_t len);  // before it is mapped there
  void ScratchGone(int proc);
  // A write tracker is about to be made: it may take these descriptor numbers (at most 2).
  void TrackerCreating(int proc, const std::vector<int>& fds);
  void TrackerCreated(int proc, int fd);              // made (-1: the attempt failed and left none)
  void Thawed(int proc);                              // let go: nothing of it to undo
  // Descriptor `fd` of `pid`, a TCP socket, is about to enter repair mode (which forces
  // SO_REUSEADDR on; `reuseaddr` is the program's own, given back when it leaves).
  absl::Status TcpRepairing(pid_t pid, int fd, bool reuseaddr);
  // Unix socket descriptor `fd` of `pid` (socket inode `ino`) is about to be given a peek offset
  // (SO_PEEK_OFF) to copy its queue; `saved` is the program's own. Returns the slot
  // PeekOffsetBack takes.
  absl::StatusOr<int> PeekOffsetChanging(pid_t pid, int fd, uint64_t ino, int saved);
  // The socket of `slot` has its own peek offset again.
  void PeekOffsetBack(int slot) { peeks_[slot].back.store(1, std::memory_order_release); }
  // The network lock (net/netlock.h) `table` is about to be taken, in the network namespace
  // of `netns_of`.
  void NetworkLock(const std::string& table, pid_t netns_of);
  // Every journaled socket has left repair mode (the lock, unless held for a hand-off, lets
  // their packets through).
  void RepairsEnded();
  // The network lock's table is deleted.
  void LockGone();
  // The processes' freezer cgroup (its directory) is about to be frozen on top of the ptrace
  // stop (freezer_hold.h): rolling back, the guardian thaws it once the repairs are undone.
  absl::Status FreezerHeld(const std::string& cgroup);
  // The processes' cgroup, paused by their runtime (containerd pauses a task to checkpoint
  // it), is about to be thawed for the dump (freezer_hold.h ThawPausedCgroup): rolling back,
  // the guardian pauses it again once the processes are let go.
  absl::Status PausedThawed(const std::string& cgroup);
  // The cpu share file `file` of the processes' cgroup is about to be raised from `before`
  // while they die (proc/cpu_share_boost.h): whatever the outcome, the guardian writes `before`
  // back. False when it cannot be journaled (then it is not raised).
  bool ShareRaising(const std::string& file, const std::string& before);
  // It has its value back.
  void ShareBack(const std::string& file);
  // The processes `procs` (pid, start time), which hold CUDA state, are about to be locked by
  // the GPU driver (point 11). InvalidArgument beyond kMaxDeviceProcesses.
  absl::Status DevicesLocking(const std::vector<std::pair<pid_t, uint64_t>>& procs);
  // Each of them is RUNNING again, or dead: nothing of the device side is left to undo.
  void DevicesSettled() { devices_settled_.store(1, std::memory_order_release); }
  // Journaled by DevicesLocking and not settled (allocates nothing: the guardian asks).
  bool DevicesUnsettled() const {
    return ndevices_.load(std::memory_order_acquire) > 0 && devices_settled_.load(std::memory_order_acquire) == 0;
  }
  // The processes DevicesLocking journaled, unless settled.
  std::vector<std::pair<pid_t, uint64_t>> UnsettledDevices() const;
  // The processes frozen from now on are the checkpoint's: a kill outcome kills those only
  // (not a process a pre-copy round saw that has left the tree since).
  void FinalFreeze() { final_from_.store(nprocs_.load(std::memory_order_relaxed), std::memory_order_release); }
  // Thread `slot` (AddThread's order) is entering (true) or has left (false) an injected call:
  // its mask may be the call's until it has left (inject/injector.h).
  std::atomic<uint32_t>* InCallFlag(int slot) { return &threads_[slot].in_call; }
  void SetOutcome(Outcome o) { outcome_.store(static_cast<uint32_t>(o), std::memory_order_release); }
  Outcome outcome() const { return static_cast<Outcome>(outcome_.load(std::memory_order_acquire)); }
  // Written by a cairn of this layout (a journal file's mark, point 8).
  bool Marked() const { return magic_ == kMagic && size_ == sizeof(GuardJournal); }
  // The network lock's table journaled and not deleted yet ("" if none).
  std::string LockTable() const;
  // The processes it froze, each once.
  std::vector<pid_t> Pids() const;
  // The checkpoint being written: DIR.partial, renamed to `dir` when committed, known by
  // its inode (a later dump's directory of the same name is never taken for it). With
  // `kill_on_commit`, once it is committed the processes are to die (guardian.h, 4).
  void SetCheckpointDir(const std::string& dir, uint64_t dev, uint64_t ino, bool kill_on_commit);

 private:
  friend class GuardianRepair;
  friend class Guardian;
  struct Process {
    int32_t pid;
    uint64_t start_time;
    std::atomic<uint32_t> trampoline_writing;
    std::atomic<uint64_t> trampoline;
    std::atomic<uint64_t> scratch_addr;
    uint64_t scratch_len;
    std::atomic<int32_t> tracker_fd;    // created by this dump, not (yet) kept
    int32_t creating_fds[2];            // being created: the numbers it may take
    std::atomic<uint32_t> ncreating;
    std::atomic<uint32_t> thawed;
  };
  struct Thread {
    int32_t tid;
    int32_t proc;
    uint64_t mask;
    user_regs_struct regs;
    std::atomic<uint32_t> in_call;
  };

  uint64_t magic_;
  uint64_t size_;  // sizeof(GuardJournal) of the cairn that wrote it: a layout check
  std::atomic<uint32_t> outcome_;
  std::atomic<int32_t> final_from_;
  std::atomic<int32_t> nprocs_;
  std::atomic<int32_t> nthreads_;
  std::atomic<uint32_t> dir_set_;
  uint64_t dir_dev_, dir_ino_;
  uint32_t kill_on_commit_;
  char dir_[4096];
  std::atomic<uint32_t> lock_set_;
  char lock_[128];
  int32_t lock_netns_of_;
  struct Repair {
    int32_t pid;
    int32_t fd;
    int32_t reuseaddr;
  };
  std::atomic<uint32_t> freezer_set_;
  char freezer_[512];
  std::atomic<uint32_t> paused_set_;
  char paused_[512];
  struct Share {
    std::atomic<uint32_t> raised;
    char file[512];
    char before[32];
  };
  std::atomic<int32_t> nshares_;
  Share shares_[8];
  std::atomic<int32_t> nrepairs_;
  Repair repairs_[kMaxRepairs];
  struct Peek {
    int32_t pid;
    int32_t fd;
    uint64_t ino;  // the socket's: whatever the descriptor names now is checked to be it
    int32_t saved;
    std::atomic<uint32_t> back;
  };
  std::atomic<int32_t> npeeks_;
  Peek peeks_[kMaxPeeks];
  Process procs_[kMaxProcesses];
  Thread threads_[kMaxThreads];
  struct DeviceProcess {
    int32_t pid;
    uint64_t start_time;
  };
  std::atomic<int32_t> ndevices_;
  std::atomic<uint32_t> devices_settled_;
  DeviceProcess devices_[kMaxDeviceProcesses];
};

// A running guardian, owned by the dump that started it.
class Guardian {
 public:
  // Starts the guardian process (a fork that does not exec; it keeps only the pipe that
  // tells it the dumper is gone, the journal's file, and stderr). Before anything is frozen.
  static absl::StatusOr<std::unique_ptr<Guardian>> Start();
  // Closes the guardian's pipe and waits for it. The outcome stays as set: a dump that
  // failed leaves kRunning, and the guardian undoes whatever the dump's own failure path
  // left (a tracker, a scratch area or trampoline it could not remove).
  ~Guardian();

  GuardJournal& journal() { return *journal_; }

 private:
  Guardian(GuardJournal* journal, int journal_fd, int pipe_wr, pid_t pid)
      : journal_(journal), journal_fd_(journal_fd), pipe_wr_(pipe_wr), pid_(pid) {}

  GuardJournal* journal_;
  int journal_fd_;  // the file, locked (point 8)
  int pipe_wr_;
  pid_t pid_;
};

// Where the journals of running dumps are: $CAIRN_JOURNAL_DIR, else /run/cairn/dump-journals.
std::string JournalDir();

// The journals in `dir` whose dumper and guardian are both dead (point 8), by file name.
absl::StatusOr<std::vector<std::string>> FindOrphanedDumps(const std::string& dir);

// The network locks' tables (net/netlock.h) that the journals in `dir` of dumps in progress name
// (their dumper or guardian alive): `cairn check --fix` leaves those (net/claim.h).
absl::StatusOr<std::vector<std::string>> NetworkLocksOfRunningDumps(const std::string& dir);

// Does for each of them what its guardian would have done, then removes it. Returns one
// line per journal saying what was done (or what failed: such a journal is kept as
// NAME.failed for a person to read, and the line says so). Then tries again to put back the
// GPU processes of every NAME.failed journal that the driver still holds (point 11); once they
// are back, the journal says so (it stays, for a person to read).
absl::StatusOr<std::vector<std::string>> RepairOrphanedDumps(const std::string& dir);

// The NAME.failed journals in `dir` whose GPU processes the driver may still hold locked or
// checkpointed (alive, not put back: point 11), by file name.
absl::StatusOr<std::vector<std::string>> FailedDevicePutBacks(const std::string& dir);

// The guardian's body: waits until `pipe_rd` reads EOF (every copy of the write end is
// closed: the dumper finished or died), then does what the journal's outcome says. Exposed
// for tests; returns the process's exit code.
int RunGuardian(GuardJournal& journal, int pipe_rd);

}  // namespace cairn::dump
