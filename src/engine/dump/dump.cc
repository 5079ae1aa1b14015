#include "engine/dump/dump.h"

#include <linux/kcmp.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/thread_nice.h"
#include "common/status.h"
#include "engine/dump/devices.h"
#include "engine/dump/fd_table.h"
#include "engine/dump/files.h"
#include "engine/dump/freeze.h"
#include "engine/dump/freezer_hold.h"
#include "engine/dump/guardian.h"
#include "engine/dump/tcp.h"
#include "engine/net/netlock.h"
#include "engine/proc/cpu_share_boost.h"
#include "engine/dump/incremental.h"
#include "engine/dump/memory.h"
#include "engine/dump/precopy.h"
#include "engine/dump/precopy_tree.h"
#include "engine/dump/tracker.h"
#include "engine/dump/aio.h"
#include "engine/dump/namespaces.h"
#include "engine/proc/mountinfo.h"
#include "common/stop_points.h"
#include "engine/dump/sysv_ipc.h"
#include "engine/dump/task_state.h"
#include "common/unique_fd.h"
#include "engine/image/chain.h"
#include "engine/machine/machine.h"
#include "engine/image/format.h"
#include "engine/image/image.h"
#include "engine/inject/injector.h"
#include "engine/proc/maps.h"
#include "engine/proc/stat.h"

namespace cairn::dump {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Debug log of how long each stage of the frozen phase takes (cairn -vv).
class StageTimer {
 public:
  explicit StageTimer(pid_t pid) : pid_(pid), last_(Clock::now()) {}
  void Mark(const char* stage) {
    CAIRN_LOG_DEBUG("event=dump_stage pid={} stage={} ms={:.2f}", pid_, stage, Since(last_) * 1e3);
    last_ = Clock::now();
  }

 private:
  pid_t pid_;
  Clock::time_point last_;
};

// The process's vDSO as the kernel mapped it (nothing injected yet), to tell at restore
// whether the kernel is the same and to redirect it if not (machine/vdso.h); empty for a
// process that unmapped it.
absl::StatusOr<std::string> ReadVdso(pid_t pid, const std::vector<image::Vma>& vmas) {
  for (const image::Vma& v : vmas) {
    if (v.kind() != image::Vma::VDSO) continue;
    std::string bytes(v.end() - v.start(), '\0');
    RETURN_IF_ERROR(inject::ReadRemote(pid, v.start(), bytes.data(), bytes.size()));
    return bytes;
  }
  return std::string();
}

// An address where `len` bytes can be mapped in a process whose areas are `maps` (it is
// frozen: they stay so), a page away from its neighbours, searched from the top down.
absl::StatusOr<uint64_t> FreeRange(const std::vector<proc::MapEntry>& maps, uint64_t len) {
  constexpr uint64_t kPage = 4096, kLowest = 0x10000, kTop = 0x7ffffffff000ULL;
  uint64_t above = kTop;
  for (auto it = maps.rbegin(); it != maps.rend(); ++it) {
    if (it->start >= kTop) continue;  // [vsyscall]
    if (above >= it->end + len + 2 * kPage) return above - kPage - len;
    above = it->start;
  }
  if (above >= kLowest + len + 2 * kPage) return above - kPage - len;
  return absl::ResourceExhaustedError("no free address range for the dump's scratch area");
}

bool HasFlag(const image::Vma& v, const char* flag) {
  return std::find(v.vm_flags().begin(), v.vm_flags().end(), flag) != v.vm_flags().end();
}

// A write tracker used by this dump, parked in process `pid`.
struct TrackerUse {
  pid_t pid = 0;
  inject::Injector inj;  // the process's guarded injector, while it is frozen
  int remote_fd = -1;
  bool created = false;  // by this dump: discarded again if the dump fails
};

// What the processes of one dump share about incremental checkpoints.
struct IncrementalContext {
  const Parent* parent = nullptr;  // null: a full dump
  bool keep_tracking = false;
  std::vector<TrackerUse> trackers;
  std::vector<std::string> notes;
  int incremental_procs = 0;
  std::map<pid_t, PreCopied> precopied;     // pre-copy: each process copied while it ran
  // Areas (record, index) to seed with the blocks pre-copy copied from their process.
  std::vector<std::tuple<image::Process*, int, const PreCopied*>> seed;
  // smaps of each process read just before the freeze: reused while frozen when
  // /proc/PID/maps shows the same layout (smaps costs about 10 ms per GiB mapped).
  std::map<pid_t, std::vector<proc::MapEntry>> prechecked;

  // Closes the trackers (still frozen processes): those this dump created, or all.
  void Discard(bool all) {
    for (const TrackerUse& t : trackers) {
      if (!all && !t.created) continue;
      inject::Injector inj = t.inj;
      absl::Status s = Tracker::Discard(inj, t.remote_fd);
      if (!s.ok()) CAIRN_LOG_WARN("event=tracker_discard_failed pid={} error=\"{}\"", t.pid, s.ToString());
    }
  }
};

// Scans the written pages of the areas `tracked` (indexes into `vmas`) in parallel.
absl::Status ScanTracked(int pagemap_fd, const std::vector<image::Vma>& vmas, const std::vector<size_t>& tracked,
                         WrittenPages* written) {
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (size_t i : tracked) ranges.emplace_back(vmas[i].start(), vmas[i].end());
  std::vector<std::vector<WrittenRun>> runs;
  RETURN_IF_ERROR(ScanWrittenParallel(pagemap_fd, ranges, &runs));
  for (size_t k = 0; k < tracked.size(); ++k) (*written)[tracked[k]] = std::move(runs[k]);
  return absl::OkStatus();
}

// Whether the writes of `pid` since the parent are known; if not, says why in `why`.
bool CanBeIncremental(pid_t pid, const Parent& parent, int tracker_fd, std::string* why) {
  const image::Checkpoint& pm = parent.meta();
  if (image::FindProcess(pm, ImagePid(pid, pm.own_pid_ns())) == nullptr) {
    *why = "it is not in the parent checkpoint";
    return false;
  }
  if (!pm.tracking()) {
    *why = "the parent was taken without tracking writes (dump --leave-running --track starts tracking)";
    return false;
  }
  if (tracker_fd < 0) {
    *why = "it has no write tracker recorded on this machine (it was restored or exec'd since the parent, or the tracker was closed)";
    return false;
  }
  std::optional<TrackerState> st = LoadTrackerState(pid);
  if (!st || st->fd != tracker_fd) {
    *why = "this machine has no record of its write tracker";
    return false;
  }
  if (st->image_id != pm.id()) {
    *why = "its writes are tracked since another checkpoint than the parent (name the latest one as --parent)";
    return false;
  }
  return true;
}

// Captures one frozen process's memory areas and task state into `proc` (not its
// descriptors, which are captured tree-wide). Leaves the process frozen.
// `fds`: its descriptors, read once frozen for the dump's every use (the tracker's here, the
// network lock's and the capture's later): a server's thousand sockets cost one pass.
absl::Status CaptureProcess(FrozenProcess& fp, image::ImageWriter& writer, const DumpOptions& opts,
                            image::Process* proc, MemoryStats* mem, std::set<uint64_t>* saved_shmem,
                            std::set<std::pair<uint64_t, uint64_t>>* saved_files, IncrementalContext& inc,
                            std::string* vdso, std::vector<proc::FdInfo>* fds) {
  pid_t pid = fp.pid();
  StageTimer timer(pid);
  auto pc_it = inc.precopied.find(pid);
  const PreCopied* pc = pc_it == inc.precopied.end() ? nullptr : &pc_it->second;
  bool precopied = pc != nullptr;
  // Memory areas are read before the engine maps its scratch area into the process.
  // smaps walks every page table to count resident pages (about 10 ms per GiB): while
  // frozen, read the cheap /proc/PID/maps and, when it shows the same areas, take the
  // flags read just before (by the last pre-copy round, or the checks before the freeze).
  // A flag changed in between by madvise over a whole area is taken as read then.
  std::vector<proc::MapEntry> maps;
  ASSIGN_OR_RETURN(maps, proc::ReadMaps(pid));
  const std::vector<proc::MapEntry>* before = nullptr;
  if (precopied) {
    before = &pc->last_maps;
  } else if (auto it = inc.prechecked.find(pid); it != inc.prechecked.end()) {
    before = &it->second;
  }
  if (before != nullptr && proc::SameLayout(maps, *before)) {
    maps = *before;
  } else {
    ASSIGN_OR_RETURN(maps, proc::ReadSmaps(pid));
  }
  ASSIGN_OR_RETURN(std::vector<image::Vma> vmas, DescribeAreas(pid, maps));
  ASSIGN_OR_RETURN(std::string vdso_bytes, ReadVdso(pid, vmas));
  proc->set_vdso_xxh3(vdso_bytes.empty() ? 0 : image::Checksum(vdso_bytes.data(), vdso_bytes.size()));
  if (vdso->empty()) *vdso = std::move(vdso_bytes);
  // Only now, with the vDSO's checksum taken: the trampoline goes in its tail.
  timer.Mark("areas");
  ASSIGN_OR_RETURN(inject::TrampolineHome home, inject::FindTrampolineHome(pid));
  RETURN_IF_ERROR(fp.InstallTrampoline(home));
  timer.Mark("trampoline");
  inject::Injector inj = fp.injector(pid);
  RETURN_IF_ERROR(StopPoint("trampoline"));

  // The scratch area, at an address journaled before it is mapped (guardian.h).
  ASSIGN_OR_RETURN(uint64_t scratch_at, FreeRange(maps, inject::RemoteScratch::kSize));
  if (fp.journal() != nullptr) fp.journal()->ScratchAt(fp.journal_index(), scratch_at, inject::RemoteScratch::kSize);
  ASSIGN_OR_RETURN(inject::RemoteScratch scratch, inject::RemoteScratch::Map(inj, /*shared=*/true, scratch_at));
  timer.Mark("scratch");
  absl::Status st = StopPoint("scratch");  // the scratch area is unmapped on every path
  if (st.ok()) st = CaptureTaskState(fp, inj, scratch, proc);
  // The descriptors, before any tracker is made or closed below: those are the only changes
  // the dump makes to them, and the capture leaves trackers out (IsTrackerFd).
  if (st.ok()) {
    absl::StatusOr<std::vector<proc::FdInfo>> read = ReadFrozenFds(fp, inj, scratch);
    if (read.ok()) *fds = std::move(*read);
    st = read.status();
  }
  absl::Status unmap = scratch.Unmap(inj);
  if (unmap.ok() && fp.journal() != nullptr) fp.journal()->ScratchGone(fp.journal_index());
  RETURN_IF_ERROR(st);
  RETURN_IF_ERROR(unmap);
  // Each AIO ring must be a context of this process (not a mapping inherited over fork).
  for (const image::Vma& v : vmas) {
    if (v.kind() != image::Vma::AIO_RING) continue;
    absl::StatusOr<long> probe = inj.Call("io_getevents(ring, 0, 0) to ask whether the ring is a context of its own",
                                          SYS_io_getevents, v.start(), 0, 0, 0, 0);
    if (!probe.ok()) {
      return absl::UnimplementedError(absl::StrFormat(
          "pid %d maps an AIO ring at %#x that is no context of its own (a mapping inherited over fork, whose "
          "context stayed with the parent: %s); it cannot be made again — unmap it in the child before "
          "checkpointing",
          pid, v.start(), probe.status().message()));
    }
  }
  timer.Mark("task_state");
  RETURN_IF_ERROR(StopPoint("task_state"));

  // Incremental: which pages were written since the parent (see tracker.h).
  std::vector<int> strays;
  int tracker_fd = RecordedTrackerFd(pid, *fds, &strays);
  if (precopied) {  // the tracker pre-copy started, not recorded until this dump commits
    tracker_fd = pc->tracker_fd;
    std::erase(strays, tracker_fd);
  }
  for (int fd : strays) RETURN_IF_ERROR(Tracker::Discard(inj, fd));
  bool incremental = false;
  if (inc.parent != nullptr) {
    std::string why;
    incremental = CanBeIncremental(pid, *inc.parent, tracker_fd, &why);
    if (!incremental) inc.notes.push_back(absl::StrCat("pid ", pid, " saved in full: ", why));
  }
  std::optional<Tracker> tracker;
  if (incremental || inc.keep_tracking || precopied) {
    bool created = tracker_fd < 0;
    GuardJournal* journal = fp.journal();
    int index = fp.journal_index();
    auto t = !created ? Tracker::Take(pid, tracker_fd)
                      : Tracker::Create(inj, [journal, index](const std::vector<int>& fds) {
                          if (journal != nullptr) journal->TrackerCreating(index, fds);
                        });
    if (created && journal != nullptr) journal->TrackerCreated(index, t.ok() ? t->remote_fd() : -1);
    if (!t.ok()) return Annotate(t.status(), "start tracking writes");
    tracker.emplace(std::move(*t));
    inc.trackers.push_back({pid, inj, tracker->remote_fd(), created});
  } else if (tracker_fd >= 0 && opts.leave_running) {
    // A tracker nobody will use again: tracking ends here.
    RETURN_IF_ERROR(Tracker::Discard(inj, tracker_fd));
  }
  // The write bits are consumed below: until this dump commits, no image is in sync.
  ClearTrackerState(pid);
  WrittenPages written;
  // "uw": registered with the tracker, so tracked since the parent (or the last pre-copy
  // round). Other areas are new since then (or moved, or not trackable) and saved in full.
  std::vector<size_t> tracked;
  if (incremental || precopied) {
    std::string path = absl::StrCat("/proc/", pid, "/pagemap");
    UniqueFd pm(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!pm.valid()) return ErrnoStatus("open " + path);
    for (size_t i = 0; i < vmas.size(); ++i) {
      if (vmas[i].kind() == image::Vma::ANON && HasFlag(vmas[i], "uw")) tracked.push_back(i);
    }
    RETURN_IF_ERROR(ScanTracked(pm.get(), vmas, tracked, &written));
  }
  if (incremental) {
    for (size_t i : tracked) vmas[i].set_inherits(true);
    ++inc.incremental_procs;
  } else if (precopied) {
    // Pre-copy: the tracked areas were copied while the process ran; add what was
    // written since the last round (and what a round could not read) after those copies.
    for (size_t i : tracked) {
      image::Vma& v = vmas[i];
      std::vector<WrittenRun>& runs = written[i];
      for (const auto& [a, b] : pc->unread) {
        uint64_t s0 = std::max(a, v.start()), e0 = std::min(b, v.end());
        if (s0 < e0) runs.push_back({s0, e0 - s0, true});
      }
      std::sort(runs.begin(), runs.end(), [](const WrittenRun& x, const WrittenRun& y) { return x.start < y.start; });
      // The blocks copied while it ran go in front of this area's blocks later, once the
      // process runs again (SeedPreCopied): no downtime for bookkeeping.
      inc.seed.emplace_back(proc, proc->vmas_size() + static_cast<int>(i), pc);
    }
  }

  timer.Mark("tracking");
  RETURN_IF_ERROR(SaveDeletedMappedFiles(pid, vmas, writer, saved_files));
  const inject::Trampoline& tramp = fp.trampoline();
  ASSIGN_OR_RETURN(MemoryStats m, DumpPages(pid, vmas, writer, opts.progress, saved_shmem,
                                            incremental || precopied ? &written : nullptr, nullptr,
                                            {tramp.addr(), tramp.addr() + inject::Trampoline::kSize}));
  if (inc.keep_tracking) {
    // Protect what the scan above did not: every private anonymous area, registering
    // the ones that are new. The process is frozen, so no write is missed.
    for (const image::Vma& v : vmas) {
      if (v.kind() != image::Vma::ANON || v.inherits()) continue;
      if (HasFlag(v, "uw") && precopied) continue;  // scanned above
      if (!HasFlag(v, "uw") && !tracker->Register(v.start(), v.end())) {
        CAIRN_LOG_DEBUG("event=untracked_area pid={} start={:#x} end={:#x}", pid, v.start(), v.end());
        continue;
      }
      absl::Status protect = tracker->Protect(v.start(), v.end());
      // "uw" named another tracker's registration: a stray one (left by a dump that died
      // after it had forgotten the recorded one) closed above, which unregistered it.
      if (absl::IsNotFound(protect) && tracker->Register(v.start(), v.end())) protect = tracker->Protect(v.start(), v.end());
      RETURN_IF_ERROR(protect);
    }
    proc->set_tracker_fd(tracker->remote_fd());
  }
  timer.Mark("pages");
  for (auto& v : vmas) *proc->add_vmas() = std::move(v);
  mem->pages += m.pages;
  mem->bytes += m.bytes;
  return absl::OkStatus();
}

// The processes of a checkpoint: frozen ones, and zombies (which cannot be traced).
struct FrozenTree {
  std::vector<FrozenProcess> frozen;   // tree order: parents before children
  std::vector<pid_t> order;            // every pid, frozen or zombie, in tree order
  std::map<pid_t, proc::Stat> zombies;

  std::set<pid_t> Pids() const { return {order.begin(), order.end()}; }

  absl::Status Thaw() {
    absl::Status first;
    for (auto& fp : frozen) {
      absl::Status s = fp.Thaw();
      if (!s.ok() && first.ok()) first = s;
    }
    return first;
  }
  absl::Status Kill(GuardJournal& journal) {
    std::vector<pid_t> pids;
    for (auto& fp : frozen) pids.push_back(fp.pid());
    // They die at their cgroup's CPU share: raised while they do, journaled for the guardian.
    struct Journaled : proc::ShareJournal {
      GuardJournal& j;
      explicit Journaled(GuardJournal& journal) : j(journal) {}
      bool Raising(const std::string& file, const std::string& before) override { return j.ShareRaising(file, before); }
      void Back(const std::string& file) override { j.ShareBack(file); }
    } shares(journal);
    proc::CpuShareBoost boost(pids, &shares);
    FaultPoint("killing");
    absl::Status first;
    for (auto& fp : frozen) {
      absl::Status s = fp.SendKill();
      if (!s.ok() && first.ok()) first = s;
    }
    for (auto it = frozen.rbegin(); it != frozen.rend(); ++it) it->ReapKilled();
    return first;
  }
};

// Freezes `root` and, with `tree`, every descendant. A process is frozen before its
// children are listed, so children forked meanwhile are found in the next round.
absl::StatusOr<FrozenTree> FreezeTree(pid_t root, bool tree, GuardJournal* journal,
                                      const std::set<pid_t>* seized_already = nullptr) {
  FrozenTree ft;
  std::deque<pid_t> queue = {root};
  std::set<pid_t> known = {root};
  while (!queue.empty()) {
    pid_t pid = queue.front();
    queue.pop_front();
    ASSIGN_OR_RETURN(proc::Stat st, proc::ReadStat(pid));
    if (st.state == 'Z' || st.state == 'X') {
      if (pid == root) return CheckTarget(pid);
      ft.zombies[pid] = st;
      ft.order.push_back(pid);
      continue;
    }
    auto fp = FrozenProcess::Freeze(pid, journal, seized_already);
    if (!fp.ok() && pid != root && absl::IsNotFound(fp.status())) {
      // A child that exited while its parent was being frozen: keep it as the zombie it
      // now is, or drop it if it is gone (auto-reaped).
      auto now = proc::ReadStat(pid);
      if (now.ok() && (now->state == 'Z' || now->state == 'X')) {
        ft.zombies[pid] = *now;
        ft.order.push_back(pid);
      }
      continue;
    }
    if (!fp.ok()) {
      absl::Status thaw = ft.Thaw();
      (void)thaw;
      return fp.status();
    }
    ft.frozen.push_back(std::move(*fp));
    ft.order.push_back(pid);
    if (!tree) continue;
    ASSIGN_OR_RETURN(std::vector<pid_t> children, proc::ListChildren(pid));
    for (pid_t c : children) {
      if (known.insert(c).second) queue.push_back(c);
    }
  }
  return ft;
}

// Lists the tree without stopping it, for checks made before anything is frozen.
absl::StatusOr<std::vector<pid_t>> ListTree(pid_t root, bool tree) {
  std::vector<pid_t> out = {root};
  for (size_t i = 0; tree && i < out.size(); ++i) {
    auto children = proc::ListChildren(out[i]);
    if (!children.ok()) continue;  // exited meanwhile
    out.insert(out.end(), children->begin(), children->end());
  }
  return out;
}

// Records in the checkpoint which processes had their device state moved into their host memory
// by the GPU driver (`devices`' pids, as this machine sees them) and the GPUs each used: a
// restore hands them back to it (restore.cc). The image's processes are in `order`
// (DumpFrozen), their ids maybe localized.
void MarkDeviceCheckpointed(const DumpDevices& devices, const std::vector<pid_t>& order, image::Checkpoint& ckpt) {
  const std::vector<pid_t>& pids = devices.pids();
  for (size_t i = 0; i < order.size(); ++i) {
    if (std::find(pids.begin(), pids.end(), order[i]) == pids.end()) continue;
    image::Process* p = i == 0 ? ckpt.mutable_process() : ckpt.mutable_descendants(static_cast<int>(i - 1));
    p->set_cuda_checkpointed(true);
    if (auto it = devices.gpu_uses().find(order[i]); it != devices.gpu_uses().end()) {
      for (const image::GpuUse& u : it->second) *p->add_gpus() = u;
    }
  }
}

// What the processes hold beyond their memory: their descriptors (under the network lock when
// connections are saved whole), System V IPC, time namespace and a container's world. Ids
// are localized (the image's are the processes' own).
absl::Status CaptureWorld(const DumpOptions& opts, const std::vector<pid_t>& live,
                          const std::vector<image::Process*>& live_procs,
                          std::vector<std::vector<proc::FdInfo>> live_fds, image::ImageWriter& writer,
                          image::Checkpoint& ckpt, DumpResult& result, GuardJournal* journal,
                          std::unique_ptr<TcpConnections>* tcp, FreezerHold* freezer,
                          std::set<std::pair<uint64_t, uint64_t>>* saved_files, StageTimer& timer) {
  FdOptions fd_opts{opts.tcp_close, opts.tcp_established, nullptr, journal};
  std::set<uint64_t> container_mounts;
  ASSIGN_OR_RETURN(std::optional<ContainerMounts> container, ReadContainerMounts(opts.pid));
  if (container) {
    for (const proc::MountEntry& m : container->theirs) container_mounts.insert(m.id);
    fd_opts.container_mounts = &container_mounts;
  }
  if (!opts.container.handed_over.empty()) fd_opts.handed_over = &opts.container.handed_over;
  if (opts.tcp_established) {
    std::string table = opts.network_lock_table.empty() ? net::LockTableName(ckpt.id()) : opts.network_lock_table;
    ASSIGN_OR_RETURN(*tcp, TcpConnections::Lock(table, live, live_fds, journal));
    fd_opts.tcp = tcp->get();
    if (opts.hand_off && !opts.hand_off_decides && !opts.hand_off_moves_connections && !(*tcp)->table().empty()) {
      return absl::UnimplementedError(
          "this hand-off cannot move established TCP connections: close them first, or checkpoint and restore the "
          "job with its connections instead");
    }
    ckpt.set_network_lock((*tcp)->table());
    result.network_lock = (*tcp)->table();
    // Held in their cgroup too before a socket enters repair mode (freezer_hold.h).
    if (!(*tcp)->table().empty()) RETURN_IF_ERROR(freezer->Freeze(*journal));
  }
  RETURN_IF_ERROR(
      CaptureFds(live, fd_opts, &writer, live_procs, saved_files, ckpt.mutable_in_flight(), std::move(live_fds)));
  if (ckpt.in_flight().fds_size() == 0) ckpt.clear_in_flight();
  ASSIGN_OR_RETURN(bool own_ipc, OwnIpcNamespace(opts.pid));
  if (own_ipc) {
    ckpt.set_own_ipc_ns(true);
    RETURN_IF_ERROR(CaptureSysvIpc(opts.pid, writer, ckpt.mutable_ipc()));
  }
  RETURN_IF_ERROR(CheckAioRingsQuiet(live, live_procs));  // before LocalizeIds: host ids
  RETURN_IF_ERROR(LocalizeIds(opts.pid, &ckpt));
  RETURN_IF_ERROR(RecordTimeNamespace(opts.pid, &ckpt));
  if (container) RETURN_IF_ERROR(RecordContainer(opts.pid, *container, opts.container, &ckpt));
  timer.Mark("fds");
  RETURN_IF_ERROR(StopPoint("fds"));
  return absl::OkStatus();
}

// Captures everything of the frozen tree into `writer` and `ckpt`; the caller commits.
absl::StatusOr<DumpResult> DumpFrozen(const DumpOptions& opts, FrozenTree& ft, image::ImageWriter& writer,
                                      IncrementalContext& inc, image::Checkpoint& ckpt, GuardJournal* journal,
                                      std::unique_ptr<TcpConnections>* tcp, FreezerHold* freezer) {
  DumpResult result;
  RETURN_IF_ERROR(StopPoint("frozen"));
  ckpt.set_id(NewImageId());
  ckpt.set_cairn_version(CAIRN_VERSION);
  ckpt.set_job_name(opts.job_name);
  utsname uts{};
  if (::uname(&uts) == 0) {
    ckpt.set_hostname(uts.nodename);
    ckpt.set_kernel(absl::StrCat(uts.release, " ", uts.version));
  }
  ckpt.set_created_unix_ns(std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count());
  std::map<pid_t, FrozenProcess*> by_pid;
  for (auto& fp : ft.frozen) by_pid[fp.pid()] = &fp;
  std::vector<image::Process*> procs;
  std::vector<pid_t> live;
  std::vector<image::Process*> live_procs;
  std::vector<std::vector<proc::FdInfo>> live_fds;  // each live process's descriptors, read frozen
  MemoryStats mem;
  std::set<uint64_t> saved_shmem;
  std::set<std::pair<uint64_t, uint64_t>> saved_files;
  std::string vdso;  // the first process's (every process of one kernel has the same)
  for (pid_t pid : ft.order) {
    image::Process* p = procs.empty() ? ckpt.mutable_process() : ckpt.add_descendants();
    procs.push_back(p);
    if (auto z = ft.zombies.find(pid); z != ft.zombies.end()) {
      p->set_pid(pid);
      p->set_ppid(z->second.ppid);
      p->set_pgid(z->second.pgrp);
      p->set_sid(z->second.session);
      p->set_comm(z->second.comm);
      p->set_zombie(true);
      p->set_exit_code(static_cast<int32_t>(z->second.exit_code));
      continue;
    }
    live_fds.emplace_back();
    RETURN_IF_ERROR(Annotate(
        CaptureProcess(*by_pid[pid], writer, opts, p, &mem, &saved_shmem, &saved_files, inc, &vdso, &live_fds.back()),
        absl::StrCat("pid ", pid)));
    live.push_back(pid);
    live_procs.push_back(p);
    result.threads += p->threads_size();
    result.areas += p->vmas_size();
  }
  *ckpt.mutable_machine() = machine::Describe(std::move(vdso), machine::BaselineOf(opts.pid));
  for (const std::string& need : machine::KernelNeeds({procs.begin(), procs.end()})) {
    ckpt.mutable_machine()->add_kernel_needs(need);
  }
  StageTimer timer(opts.pid);
  if (opts.pages_only) {
    ckpt.set_pages_only(true);
    RETURN_IF_ERROR(LocalizeIds(opts.pid, &ckpt));
  } else {
    RETURN_IF_ERROR(CaptureWorld(opts, live, live_procs, std::move(live_fds), writer, ckpt, result, journal, tcp,
                                 freezer, &saved_files, timer));
  }
  if (inc.incremental_procs > 0) {
    ckpt.mutable_parent()->set_dir(inc.parent->name);
    ckpt.mutable_parent()->set_id(inc.parent->meta().id());
  }
  ckpt.set_tracking(inc.keep_tracking);
  result.incremental = inc.incremental_procs > 0;
  result.tracking = inc.keep_tracking;
  for (auto& n : inc.notes) result.notes.push_back(std::move(n));
  result.processes = static_cast<int>(procs.size());
  result.pages = mem.pages;
  result.bytes = mem.bytes;
  return result;
}

// Puts the blocks pre-copy copied while the process ran in front of the blocks the frozen
// phase saved, in each tracked area they intersect (a later block wins on restore).
void SeedPreCopied(IncrementalContext& inc) {
  for (auto [proc, index, pc] : inc.seed) {
    image::Vma* v = proc->mutable_vmas(index);
    google::protobuf::RepeatedPtrField<image::PageBlock> blocks;
    for (const image::PageBlock& b : pc->blocks) {
      if (b.vaddr() < v->end() && b.vaddr() + b.length() > v->start()) *blocks.Add() = b;
    }
    for (image::PageBlock& b : *v->mutable_blocks()) *blocks.Add() = std::move(b);
    v->mutable_blocks()->Swap(&blocks);
  }
  inc.seed.clear();
}

// Commits the checkpoint, then records which image the trackers are in sync with.
absl::Status Commit(image::ImageWriter& writer, image::Checkpoint& ckpt, IncrementalContext& inc,
                    DumpResult* result) {
  SeedPreCopied(inc);
  RETURN_IF_ERROR(writer.Commit(ckpt));
  if (!inc.keep_tracking) return absl::OkStatus();
  for (const TrackerUse& t : inc.trackers) {
    auto start = ProcessStartTime(t.pid);
    absl::Status s = start.ok() ? SaveTrackerState(t.pid, {*start, ckpt.id(), t.remote_fd}) : start.status();
    if (!s.ok()) {
      result->notes.push_back(absl::StrCat("pid ", t.pid, ": writes are tracked but the record of it could not be "
                                           "saved (", s.message(), "); the next --parent dump will be full"));
    }
  }
  return absl::OkStatus();
}

// Processes (not threads) made with clone flags that share what restore otherwise gives each
// process of its own. A descriptor table (CLONE_FILES) or cwd, root and umask (CLONE_FS) are
// shared again when restore can make the same sharing: each process that shares with others
// shares with its parent (restore forks it from its parent with the same flag), up to one
// member of the group whose own parent is outside it. Memory (CLONE_VM, as vfork's child
// before it execs) and signal handlers (CLONE_SIGHAND) are refused: restore would give each
// process its own copy. kcmp compares the kernel objects. pids[0] is the tree's root.
// Whether `pid` (0: none) is waiting in vfork(), or in clone()/clone3() — vfork's form in
// posix_spawn — for its child to exec or exit (/proc/PID/syscall: the call it is blocked in).
bool InVfork(pid_t pid) {
  if (pid <= 0) return false;
  absl::StatusOr<std::string> sys = ReadFile(absl::StrCat("/proc/", pid, "/syscall"));
  if (!sys.ok()) return false;
  std::vector<std::string> f = absl::StrSplit(*sys, ' ');
  long nr = -1;
  uint64_t flags = 0;
  if (f.empty() || !absl::SimpleAtoi(f[0], &nr)) return false;
  if (nr == SYS_vfork || nr == SYS_clone3) return true;
  return nr == SYS_clone && f.size() > 1 && absl::SimpleHexAtoi(f[1], &flags) && (flags & CLONE_VFORK) != 0;
}

absl::Status CheckSharing(const std::vector<pid_t>& pids) {
  constexpr struct {
    int type;
    const char* what;
    const char* flag;
    bool restorable;
  } kShared[] = {{KCMP_VM, "its memory", "CLONE_VM", false},
                 {KCMP_FILES, "its descriptor table", "CLONE_FILES", true},
                 {KCMP_FS, "its cwd, root and umask", "CLONE_FS", true},
                 {KCMP_SIGHAND, "its signal handlers", "CLONE_SIGHAND", false}};
  // An exiting process has none of these any more, and two such "share" nothing equally:
  // kcmp's answer counts only while both are alive.
  auto alive = [](pid_t p) {
    auto st = proc::ReadStat(p);
    return st.ok() && st->state != 'Z' && st->state != 'X';
  };
  auto shares = [&](pid_t a, pid_t b, int type) {
    return ::syscall(SYS_kcmp, a, b, type, 0, 0) == 0 && alive(a) && alive(b);
  };
  std::map<pid_t, pid_t> parent;
  for (pid_t p : pids) {
    auto st = proc::ReadStat(p);
    if (st.ok()) parent[p] = st->ppid;
  }
  for (const auto& k : kShared) {
    // The topmost process reached from `p` through parents it shares the object with.
    auto top = [&](pid_t p) {
      for (int hops = 0; hops < 100000; ++hops) {
        auto it = parent.find(p);
        if (it == parent.end() || !parent.count(it->second) || !shares(p, it->second, k.type)) break;
        p = it->second;
      }
      return p;
    };
    if (k.restorable && !pids.empty() && parent.count(pids[0]) && shares(pids[0], parent[pids[0]], k.type)) {
      return absl::UnimplementedError(absl::StrFormat(
          "pid %d shares %s with its parent, pid %d, which is not part of the checkpoint (they were made with "
          "clone(%s)); checkpoint the parent's tree instead",
          pids[0], k.what, parent[pids[0]], k.flag));
    }
    for (size_t i = 0; i < pids.size(); ++i) {
      for (size_t j = i + 1; j < pids.size(); ++j) {
        if (!shares(pids[i], pids[j], k.type)) continue;
        if (k.restorable && top(pids[i]) == top(pids[j])) continue;
        if (k.type == KCMP_VM && InVfork(parent[pids[j]] == pids[i] ? pids[i] : parent[pids[i]] == pids[j] ? pids[j] : 0)) {
          // A vfork child before its exec (a shell running a command): it has its own memory
          // in a moment. Unavailable: the check is made again.
          return absl::UnavailableError(absl::StrFormat(
              "pid %d is the vfork child of pid %d and has not called exec yet", pids[j], pids[i]));
        }
        return absl::UnimplementedError(absl::StrFormat(
            "pid %d shares %s with pid %d (they were made with clone(%s)%s); processes sharing it this way cannot be "
            "checkpointed yet — restore would give each its own copy",
            pids[j], k.what, pids[i], k.flag, k.restorable ? ", not through their parents" : ""));
      }
    }
  }
  return absl::OkStatus();
}

// A process that kept its vDSO must have kept every area this kernel maps with it ([vvar],
// [vvar_vclock]: the vDSO's code reads them). Restore gives a process its kernel's vDSO areas
// as a whole, so one that unmapped only some of them is refused here, not at restore. (Checked
// before the freeze only: a process that unmaps one between the two is refused at restore.)
absl::Status CheckKernelAreas(pid_t pid, const std::vector<proc::MapEntry>& maps) {
  static const std::set<std::string> kernel = [] {  // this kernel's, from our own areas
    std::set<std::string> names;
    absl::StatusOr<std::string> own = ReadFile("/proc/self/maps");
    if (own.ok()) {
      for (absl::string_view line : absl::StrSplit(*own, '\n')) {
        size_t at = line.rfind(' ');
        absl::string_view name = at == absl::string_view::npos ? line : line.substr(at + 1);
        if (absl::StartsWith(name, "[vvar") || name == "[vdso]") names.emplace(name);
      }
    }
    return names;
  }();
  std::set<std::string> have;
  for (const proc::MapEntry& m : maps) have.insert(m.path);
  if (!have.count("[vdso]")) return absl::OkStatus();
  for (const std::string& name : kernel) {
    if (!have.count(name)) {
      return absl::UnimplementedError(absl::StrFormat(
          "pid %d unmapped its %s area but kept its [vdso], whose code reads it; restore gives a process this "
          "kernel's vDSO areas whole, so that layout cannot be made again — keep both or unmap both",
          pid, name));
    }
  }
  return absl::OkStatus();
}

// The checks made before anything is frozen: every process's areas and descriptors can
// be saved. A NotFound error may mean a process exited meanwhile; the caller retries.
absl::Status PrecheckTree(const DumpOptions& opts, std::map<pid_t, std::vector<proc::MapEntry>>* areas,
                          GuardJournal* journal, const std::set<pid_t>* gpu_processes) {
  ASSIGN_OR_RETURN(std::vector<pid_t> pids, ListTree(opts.pid, opts.tree));
  std::vector<pid_t> live;
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> shmem_at;  // shared anonymous object -> its range
  ASSIGN_OR_RETURN(bool own_ipc, OwnIpcNamespace(opts.pid));
  for (pid_t pid : pids) {
    auto st = proc::ReadStat(pid);
    if (!st.ok() || st->state == 'Z' || st->state == 'X') continue;
    if (pid != opts.pid) {
      absl::Status ok = CheckTarget(pid);
      if (absl::IsFailedPrecondition(ok) || absl::IsNotFound(ok)) continue;  // exited meanwhile
      RETURN_IF_ERROR(ok);
      RETURN_IF_ERROR(CheckSameNamespaces(opts.pid, pid));
    }
    ASSIGN_OR_RETURN(std::vector<proc::MapEntry> maps, proc::ReadSmaps(pid));
    RETURN_IF_ERROR(CheckKernelAreas(pid, maps));
    // A lazy restore's page handler still fills these areas ("um": registered with a
    // userfaultfd in missing mode): their missing pages are not in the process yet.
    for (const proc::MapEntry& m : maps) {
      if (std::find(m.vm_flags.begin(), m.vm_flags.end(), "um") != m.vm_flags.end()) {
        return absl::UnavailableError(absl::StrFormat(
            "pid %d: its memory at %#x-%#x is still being filled by the page handler of a lazy restore", pid, m.start,
            m.end));
      }
    }
    ASSIGN_OR_RETURN(std::vector<image::Vma> vmas, DescribeAreas(pid, maps));
    (*areas)[pid] = std::move(maps);
    for (const image::Vma& v : vmas) {
      if (v.kind() == image::Vma::SYSV_SHM && !own_ipc) {
        return absl::UnimplementedError(absl::StrFormat(
            "pid %d has System V shared memory segment %d attached at %#x-%#x, in the machine's own IPC namespace; "
            "checkpoints keep System V objects only for work in an IPC namespace of its own — start it with "
            "`cairn run`",
            pid, v.shmem_id(), v.start(), v.end()));
      }
      if (v.kind() != image::Vma::SHARED_ANON) continue;
      auto [it, fresh] = shmem_at.emplace(v.shmem_id(), std::make_pair(v.start(), v.end()));
      if (!fresh && it->second != std::make_pair(v.start(), v.end())) {
        return absl::UnimplementedError(absl::StrFormat(
            "pid %d maps shared anonymous memory at %#x-%#x that another process of the tree maps at %#x-%#x; "
            "shared memory mapped at different places is not supported yet",
            pid, v.start(), v.end(), it->second.first, it->second.second));
      }
    }
    live.push_back(pid);
  }
  RETURN_IF_ERROR(CheckSharing(live));
  if (opts.pages_only) return absl::OkStatus();  // no descriptors saved
  FdOptions fd_opts{opts.tcp_close, opts.tcp_established, nullptr, journal};
  if (!opts.container.handed_over.empty()) fd_opts.handed_over = &opts.container.handed_over;
  fd_opts.gpu_processes = gpu_processes;
  absl::Status fds = CheckFdsSupported(live, fd_opts);
  if (fds.ok() || !opts.tree) return fds;
  // The tree runs while it is checked: a child made between its listing and this check (a
  // shell's command substitution: the pipe's other end is the child's) looks like a holder from
  // outside. A tree that changed meanwhile is checked again (NotFound: the caller retries).
  absl::StatusOr<std::vector<pid_t>> again = ListTree(opts.pid, opts.tree);
  if (again.ok() && *again != pids) {
    return absl::NotFoundError(absl::StrCat("the tree of pid ", opts.pid, " changed while it was checked (",
                                            fds.message(), ")"));
  }
  return fds;
}

// How a failed dump left the processes: running, or, when the root is gone, dead by something
// other than the dump (a signal from outside, the OOM killer, its own seccomp filter).
std::string LeftHow(const DumpOptions& opts) {
  absl::StatusOr<proc::Stat> st = proc::ReadStat(opts.pid);
  if (!st.ok() || st->state == 'Z' || st->state == 'X') {
    return "the process died while it was being checkpointed: killed from outside, by the OOM killer or by its own "
           "seccomp filter";
  }
  return opts.tree ? "the processes were left running" : "the process was left running";
}

// Journals the checkpoint directory being written (DIR.partial), and whether committing it
// (renaming it to DIR) means the processes are to die.
absl::Status JournalCheckpointDir(const std::string& dir, bool kill_on_commit, GuardJournal& journal) {
  std::string final_dir = dir;
  while (final_dir.size() > 1 && final_dir.back() == '/') final_dir.pop_back();
  std::string partial = final_dir + ".partial";
  struct stat st {};
  if (::stat(partial.c_str(), &st) != 0) return ErrnoStatus("stat " + partial);
  journal.SetCheckpointDir(final_dir, st.st_dev, st.st_ino, kill_on_commit);
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckTarget(pid_t pid) {
  if (pid <= 0) return absl::InvalidArgumentError(absl::StrCat("invalid pid ", pid));
  if (pid == ::getpid()) {
    return absl::InvalidArgumentError(absl::StrCat("pid ", pid, " is cairn itself; it cannot checkpoint itself"));
  }
  auto st = proc::ReadStat(pid);
  if (!st.ok()) {
    if (absl::IsNotFound(st.status())) {
      return absl::NotFoundError(absl::StrCat("no process with pid ", pid));
    }
    return st.status();
  }
  if (st->IsKernelThread()) {
    return absl::InvalidArgumentError(
        absl::StrCat("pid ", pid, " (", st->comm, ") is a kernel thread; only user processes can be checkpointed"));
  }
  if (st->state == 'Z' || st->state == 'X') {
    return absl::FailedPreconditionError(absl::StrCat(
        "pid ", pid, " (", st->comm, ") is a zombie: it has exited and only waits for its parent to reap it; "
        "there is nothing to checkpoint"));
  }
  ASSIGN_OR_RETURN(proc::Status status, proc::ReadStatus(pid));
  if (status.seccomp == 1) {
    return absl::UnimplementedError(absl::StrCat(
        "pid ", pid, " (", st->comm, ") runs in strict seccomp mode (only read, write, exit and sigreturn): nothing "
        "can be injected into it to checkpoint it"));
  }
  ASSIGN_OR_RETURN(std::vector<pid_t> tids, proc::ListTasks(pid));
  if (tids.empty() || tids.front() > pid || std::find(tids.begin(), tids.end(), pid) == tids.end()) {
    return absl::InvalidArgumentError(absl::StrCat("pid ", pid, " is a thread, not a process; pass its process id"));
  }
  return absl::OkStatus();
}

absl::StatusOr<DumpResult> Dump(const DumpOptions& opts) {
  auto t0 = Clock::now();
  if (opts.pre_copy && !opts.parent.empty()) {
    return absl::UnimplementedError("--pre-copy makes a full checkpoint: it cannot be combined with --parent");
  }
  if (opts.hand_off && !opts.leave_running) {
    return absl::InvalidArgumentError("a dump that hands its processes off must leave them frozen (leave_running)");
  }
  if (opts.tcp_established && opts.tcp_close) {
    return absl::InvalidArgumentError("--tcp-established and --tcp-close are two answers to one question: pass one");
  }
  // A dump killed together with its guardian left its processes for the next cairn to put
  // back (guardian.h, point 8): maybe this one's target, whose threads would be caught
  // inside that dump's injected call.
  absl::StatusOr<std::vector<std::string>> repaired = RepairOrphanedDumps(JournalDir());
  if (!repaired.ok()) {
    CAIRN_LOG_WARN("event=orphan_repair_failed error=\"{}\"", repaired.status().ToString());
  } else {
    for (const std::string& line : *repaired) CAIRN_LOG_WARN("event=orphan_repaired what=\"{}\"", line);
  }
  RETURN_IF_ERROR(CheckTarget(opts.pid));
  RETURN_IF_ERROR(CheckNamespaces(opts.pid, !opts.container.external_pid.empty()));
  // From here on the processes are changed: the guardian puts them back if this process
  // dies before it has (guardian.h). (The check below already gives their unix sockets a peek
  // offset of ours for a moment.)
  ASSIGN_OR_RETURN(std::unique_ptr<Guardian> guardian, Guardian::Start());
  GuardJournal& journal = guardian->journal();
  // The GPU driver moves the device state of the processes that hold CUDA state into their host
  // memory once the precheck (which lets their NVIDIA devices be) has passed: from then on they
  // are ordinary processes to dump (devices.h). Every way out below puts them back (their
  // DumpDevices, after the thaw), unless they die.
  ASSIGN_OR_RETURN(std::vector<pid_t> listed, ListTree(opts.pid, opts.tree));
  // Which of them the driver knows; nothing is done to them before the precheck has passed.
  ASSIGN_OR_RETURN(DumpDevices devices, DumpDevices::Find(listed));
  if (!devices.candidates().empty() && opts.hand_off) {
    return absl::UnimplementedError(absl::StrCat(
        "pid ", *devices.candidates().begin(), " holds CUDA state: a live migration (hand-off) of GPU processes is "
        "not supported yet; move it by checkpoint and restore instead"));
  }
  if (!devices.candidates().empty() && !opts.freezer_cgroup.empty() && FreezerState(opts.freezer_cgroup) == "FROZEN") {
    // A paused container's processes cannot run the driver's thread that locks them.
    return absl::UnimplementedError(absl::StrCat(
        "pid ", *devices.candidates().begin(), " holds CUDA state and its cgroup ", opts.freezer_cgroup,
        " is paused: the GPU driver cannot lock a paused process; resume it, then checkpoint it"));
  }
  // Refuse what cannot be saved before stopping anything. Processes of a tree may exit
  // while they are looked at: then look again.
  absl::Status checked;
  std::map<pid_t, std::vector<proc::MapEntry>> prechecked;  // each process's areas, read while it ran
  // A process still being filled by a lazy restore is waited for (its page handler brings
  // every page in within about a second per GiB).
  auto fill_deadline = Clock::now() + std::chrono::seconds(120);
  for (int attempt = 0; attempt < 5;) {
    checked = PrecheckTree(opts, &prechecked, &journal, &devices.candidates());
    if (absl::IsUnavailable(checked) && Clock::now() < fill_deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    if (!absl::IsNotFound(checked)) break;
    ++attempt;
    RETURN_IF_ERROR(CheckTarget(opts.pid));  // the root itself is gone: say so
  }
  if (absl::IsUnavailable(checked)) return Annotate(checked, "waited 120 s for it to change; try again later");
  RETURN_IF_ERROR(checked);
  if (!devices.candidates().empty()) {
    auto t_device = Clock::now();
    RETURN_IF_ERROR(devices.Take(opts.gpu_lock_timeout_ms, journal));
    CAIRN_LOG_DEBUG("event=dump_stage pid={} stage=device_checkpoint ms={:.2f}", opts.pid, Since(t_device) * 1e3);
    RETURN_IF_ERROR(StopPoint("device-checkpointed"));
  }

  std::optional<Parent> parent;
  if (!opts.parent.empty()) {
    ASSIGN_OR_RETURN(Parent p, OpenParent(opts.dir, opts.parent));
    parent.emplace(std::move(p));
  }
  IncrementalContext inc;
  inc.parent = parent ? &*parent : nullptr;
  inc.prechecked = std::move(prechecked);
  // Pre-copy leaves the tracker it started in place (closing it would unprotect every page
  // while the process is stopped): the next dump --parent can be incremental.
  inc.keep_tracking = opts.leave_running && (opts.track || parent.has_value() || opts.pre_copy);

  ASSIGN_OR_RETURN(std::unique_ptr<image::ImageWriter> writer, image::ImageWriter::Create(opts.dir));
  writer->set_compression(opts.compression);
  RETURN_IF_ERROR(writer->SetSealKey(opts.seal_key));
  // Killed after the commit, so frozen until then: the disk may as well start writing while
  // pages are copied. (Not for a hand-off: a live migration's freeze was longer with it,
  // 57-153 ms against 55-89 ms in bench/migrate.sh.)
  writer->set_early_writeback(!opts.leave_running);
  RETURN_IF_ERROR(JournalCheckpointDir(opts.dir, !opts.leave_running, journal));
  if (opts.pre_copy) {
    PreCopyOptions precopy = opts.precopy;
    precopy.journal = &journal;
    absl::StatusOr<std::map<pid_t, PreCopied>> pc = absl::UnknownError("");
    if (opts.tree) {
      pc = PreCopyTree(opts.pid, *writer, precopy, opts.progress);
    } else if (auto one = PreCopy(opts.pid, *writer, precopy, opts.progress); one.ok()) {
      pc = std::map<pid_t, PreCopied>();
      pc->emplace(opts.pid, std::move(*one));
    } else {
      pc = one.status();
    }
    if (!pc.ok()) return Annotate(pc.status(), absl::StrCat("pre-copy of pid ", opts.pid, " failed (", LeftHow(opts), ")"));
    inc.precopied = std::move(*pc);
  }
  // From the freeze until they run again (or die), every moment this thread waits for a core
  // is the processes' downtime: it and its helper threads (which take its priority explicitly:
  // thread_nice.h) run ahead of the machine's other work. The commit that follows a thaw runs at
  // the thread's own priority.
  // (Raised before the wait for the go-ahead to freeze: a group's ranks freeze together only
  // if each wakes at once when it comes.)
  ThreadNice urgent(ThreadNice::kUrgent);
  if (opts.before_freeze) {
    RETURN_IF_ERROR(Annotate(opts.before_freeze(), absl::StrCat("checkpoint of pid ", opts.pid,
                                                                " called off before the freeze (left running)")));
  }
  CAIRN_LOG_DEBUG("event=dump_stage pid={} stage=prepare ms={:.2f}", opts.pid, Since(t0) * 1e3);
  auto t_freeze = Clock::now();
  journal.FinalFreeze();
  PausedSeize pre_seized;  // a paused cgroup's threads: seized before its thaw
  ASSIGN_OR_RETURN(bool paused, ThawPausedCgroup(opts.freezer_cgroup, journal, &pre_seized));
  absl::StatusOr<FrozenTree> frozen = FreezeTree(opts.pid, opts.tree, &journal, &pre_seized.tids());
  if (!frozen.ok()) {
    if (paused) {  // paused again once the threads still seized have stopped; they go as it is
      pre_seized.Collect({});
      (void)FreezeCgroup(opts.freezer_cgroup);
    }
    return frozen.status();
  }
  FrozenTree& ft = *frozen;
  {
    std::set<pid_t> kept;  // in the tree: frozen; any other thread of the cgroup goes on
    for (const FrozenProcess& fp : ft.frozen) {
      for (const FrozenProcess::ThreadState& t : fp.threads()) kept.insert(t.tid);
    }
    pre_seized.Release(kept);
  }
  CAIRN_LOG_DEBUG("event=dump_stage pid={} stage=freeze ms={:.2f}", opts.pid, Since(t_freeze) * 1e3);
  image::Checkpoint ckpt;
  std::unique_ptr<TcpConnections> tcp;  // --tcp-established: the lock and the repaired sockets
  FreezerHold freezer(opts.freezer_cgroup);
  if (paused) freezer.AdoptPaused();  // a paused container: paused again as it is let go
  absl::StatusOr<DumpResult> result = DumpFrozen(opts, ft, *writer, inc, ckpt, &journal, &tcp, &freezer);
  if (result.ok() && !devices.pids().empty()) {
    MarkDeviceCheckpointed(devices, ft.order, ckpt);
    result->gpu_processes = devices.pids();
  }
  // The connections leave repair mode (and the lock goes) before any process that runs on
  // is thawed; for processes that are killed, both stay (tcp.h).
  auto release_tcp = [&]() -> absl::Status { return tcp ? tcp->Release() : absl::OkStatus(); };
  // A process that is killed only goes once its checkpoint is committed; one left running
  // goes on before the commit (its fsyncs are no downtime), and a failed commit then
  // leaves it running as if no dump had been asked for.
  if (!inc.precopied.empty() && result.ok()) {
    for (const auto& [pid, pc] : inc.precopied) {
      result->precopy_rounds = std::max(result->precopy_rounds, pc.rounds);
      result->precopy_bytes += pc.bytes;
      result->start_freeze_seconds += pc.start_freeze_seconds;
    }
    ckpt.set_precopy_rounds(static_cast<uint32_t>(result->precopy_rounds));
  }
  // A hand-off commits while frozen too: the image must be complete before it is handed on
  // (unless it commits after: hand_off_commits_after).
  const bool commit_after = opts.hand_off && opts.hand_off_decides && opts.hand_off_commits_after;
  if (result.ok() && (!opts.leave_running || (opts.hand_off && !commit_after))) {
    ckpt.set_downtime_seconds(Since(t_freeze));
    auto t_commit = Clock::now();
    absl::Status committed = Commit(*writer, ckpt, inc, &*result);
    if (!committed.ok()) result = committed;
    CAIRN_LOG_DEBUG("event=dump_stage pid={} stage=commit ms={:.2f}", opts.pid, Since(t_commit) * 1e3);
    if (committed.ok() && !opts.leave_running) journal.SetOutcome(GuardJournal::Outcome::kKill);
    if (committed.ok()) FaultPoint("committed");
  }
  auto failed = [&](const absl::Status& s) {
    return Annotate(s, absl::StrCat("checkpoint of pid ", opts.pid, " failed (", LeftHow(opts), ")"));
  };
  // The processes run again: the frozen time ends here and the commit comes now, its writes no
  // downtime (a failure leaves them running with no checkpoint).
  // (frozen_seconds is taken at the thaw, before this thread's priority drops: a wait for a core
  // after it is no downtime.)
  auto commit_thawed = [&]() -> absl::Status {
    ckpt.set_downtime_seconds(result->frozen_seconds);
    absl::Status committed = StopPoint("thawed");
    if (committed.ok()) committed = Commit(*writer, ckpt, inc, &*result);
    if (!committed.ok()) writer->Abort();
    return committed;
  };
  // The processes let go, then their cgroup thawed (when the dump froze it): a thread detached
  // while its cgroup is frozen only goes on once it thaws, and the detach is quick. (Thawed
  // first, a thread still traced is woken, and detaching it waits until it is off its core
  // again: up to 20 ms on a busy machine, while the others of a group already ran.) A cgroup its
  // runtime had paused is paused again first: its processes must not run once let go.
  auto thaw_all = [&]() -> absl::Status {
    if (freezer.PausesAgain()) {
      freezer.Thaw();
      return ft.Thaw();
    }
    absl::Status s = ft.Thaw();
    freezer.Thaw();
    return s;
  };
  if (!result.ok()) {
    writer->Abort();
    inc.Discard(/*all=*/false);
    absl::Status released = release_tcp();
    if (!released.ok()) CAIRN_LOG_WARN("event=tcp_release_failed pid={} error=\"{}\"", opts.pid, released.ToString());
    absl::Status thaw = thaw_all();
    if (!thaw.ok()) CAIRN_LOG_WARN("event=thaw_failed pid={} error=\"{}\"", opts.pid, thaw.ToString());
    absl::Status resumed = devices.Resume();
    if (!resumed.ok()) result = Annotate(result.status(), resumed.ToString());
    return failed(result.status());
  }
  if (opts.hand_off) {
    result->frozen_seconds = Since(t_freeze);
    HandOffControl control;
    control.hold = [&] { journal.SetOutcome(GuardJournal::Outcome::kHold); };
    control.accepted = [&] { journal.SetOutcome(GuardJournal::Outcome::kKill); };
    auto t_hand = Clock::now();
    HandOff h = opts.hand_off(*result, control);
    CAIRN_LOG_DEBUG("event=dump_stage pid={} stage=hand_off ms={:.2f}", opts.pid, Since(t_hand) * 1e3);
    if ((h == HandOff::kHeld && opts.hand_off_decides) || (h == HandOff::kKill && commit_after)) {
      CAIRN_LOG_WARN("event=hand_off_answer pid={} error=\"a deciding hand-off answered {}: thawed\"", opts.pid,
                     h == HandOff::kHeld ? "held" : "kill before its commit");
      h = HandOff::kThaw;
    }
    result->handed_off = h == HandOff::kKill;
    result->held = h == HandOff::kHeld;
    if (h == HandOff::kKill) {
      journal.SetOutcome(GuardJournal::Outcome::kKill);
      if (tcp) {
        tcp->Keep();
        result->network_claim = tcp->claim();
      }
      freezer.ThawForKill();  // still stopped by the dump: they die, not run
      RETURN_IF_ERROR(ft.Kill(journal));
    } else if (h == HandOff::kThaw) {
      journal.SetOutcome(GuardJournal::Outcome::kRunning);
      // Out of repair and unlocked before anything runs. A failure leaves the journal's outcome
      // kRunning: once this dump returns, its guardian takes the sockets out of repair and lifts
      // the lock (what it journaled); the processes run on either way.
      auto t_release = Clock::now();
      absl::Status released = release_tcp();
      CAIRN_LOG_DEBUG("event=dump_stage pid={} stage=release ms={:.2f}", opts.pid, Since(t_release) * 1e3);
      auto t_thaw = Clock::now();
      RETURN_IF_ERROR(thaw_all());
      result->frozen_seconds = Since(t_freeze);
      CAIRN_LOG_DEBUG("event=dump_stage pid={} stage=thaw ms={:.2f}", opts.pid, Since(t_thaw) * 1e3);
      urgent.End();
      if (!released.ok()) {
        if (commit_after) writer->Abort();
        return failed(released);
      }
      if (commit_after) {
        if (absl::Status committed = commit_thawed(); !committed.ok()) return failed(committed);
      }
    } else {
      freezer.Keep();  // held: the hand-off's freeze of the same cgroup stays
      if (tcp) {
        // Their sockets as the program left them, should they run here again; the lock stays,
        // for the caller to remove once it knows where they run (dump.h, kHeld).
        absl::Status ended = tcp->EndRepairsKeepLock();
        if (!ended.ok()) CAIRN_LOG_WARN("event=tcp_release_failed pid={} error=\"{}\"", opts.pid, ended.ToString());
        result->network_claim = tcp->claim();
      }
      // Let go of them; their cgroup's freezer keeps them where they are. (Detaching a
      // frozen task only marks it to run once its cgroup is thawed.)
      RETURN_IF_ERROR(ft.Thaw());
    }
    journal.SetOutcome(GuardJournal::Outcome::kDone);
    if (h != HandOff::kThaw) result->frozen_seconds = Since(t_freeze);  // else set at the thaw
  } else if (opts.leave_running) {
    if (!inc.keep_tracking) inc.Discard(/*all=*/true);  // tracking ends with this dump
    absl::Status released = release_tcp();
    if (!released.ok()) {
      writer->Abort();
      RETURN_IF_ERROR(thaw_all());
      return failed(released);
    }
    RETURN_IF_ERROR(thaw_all());
    // Their GPU work resumes before the commit's writes (not downtime for the host side).
    if (absl::Status resumed = devices.Resume(); !resumed.ok()) {
      writer->Abort();
      return failed(resumed);
    }
    result->frozen_seconds = Since(t_freeze);
    urgent.End();
    if (absl::Status committed = commit_thawed(); !committed.ok()) {
      for (const TrackerUse& t : inc.trackers) ClearTrackerState(t.pid);
      return failed(committed);
    }
    journal.SetOutcome(GuardJournal::Outcome::kDone);  // the trackers it made are kept
  } else {
    auto t_kill = Clock::now();
    if (tcp) {
      tcp->Keep();  // committed with its lock: the sockets die in repair mode, whatever happens now
      result->network_claim = tcp->claim();
    }
    // Their device state dies with them (one that left the tree before the freeze is put back).
    if (absl::Status released = devices.Release(ft.Pids()); !released.ok()) {
      CAIRN_LOG_WARN("event=device_resume_failed pid={} error=\"{}\"", opts.pid, released.ToString());
    }
    freezer.ThawForKill();  // still stopped by the dump: they die, not run
    RETURN_IF_ERROR(ft.Kill(journal));
    journal.SetOutcome(GuardJournal::Outcome::kDone);
    result->frozen_seconds = Since(t_freeze);
    CAIRN_LOG_DEBUG("event=dump_stage pid={} stage=kill ms={:.2f}", opts.pid, Since(t_kill) * 1e3);
  }
  result->total_seconds = Since(t0);
  CAIRN_LOG_INFO("event=dump pid={} dir={} threads={} pages={} seconds={:.3f}", opts.pid, opts.dir,
                 result->threads, result->pages, result->total_seconds);
  return result;
}

}  // namespace cairn::dump
