#include "engine/restore/sysv_ipc.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/file_util.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "engine/proc/setns.h"

namespace cairn::restore {
namespace {

// The next System V object of kind `what` ("shm", "sem", "msg") made in the calling
// thread's IPC namespace gets `id`.
absl::Status SetNextId(const char* what, int id) {
  std::string path = absl::StrFormat("/proc/sys/kernel/%s_next_id", what);
  UniqueFd f(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!f.valid()) return ErrnoStatus("open " + path);
  return WriteAll(f.get(), std::to_string(id), path);
}

absl::Status Check(int got, const image::SysvPerm& p, const char* what) {
  if (got < 0) return ErrnoStatus(absl::StrFormat("create System V %s %d (key %#x)", what, p.id(), p.key()));
  if (got != p.id()) {
    return absl::InternalError(absl::StrFormat("System V %s %d came back as %d (is the IPC namespace new?)", what,
                                               p.id(), got));
  }
  return absl::OkStatus();
}

absl::Status CreateShm(const image::ImageReader& img, const image::SysvShm& s) {
  const image::SysvPerm& p = s.perm();
  RETURN_IF_ERROR(SetNextId("shm", p.id()));
  RETURN_IF_ERROR(Check(::shmget(p.key(), s.size(), IPC_CREAT | IPC_EXCL | 0600), p, "shared memory segment"));
  ASSIGN_OR_RETURN(std::string content, img.FileContent(s));
  if (!content.empty()) {
    void* at = ::shmat(p.id(), nullptr, 0);
    if (at == reinterpret_cast<void*>(-1)) return ErrnoStatus(absl::StrFormat("shmat System V segment %d", p.id()));
    std::memcpy(at, content.data(), std::min<size_t>(content.size(), s.size()));
    ::shmdt(at);
  }
  shmid_ds ds{};
  ds.shm_perm.uid = p.uid();
  ds.shm_perm.gid = p.gid();
  ds.shm_perm.mode = p.mode();
  if (::shmctl(p.id(), IPC_SET, &ds) != 0) return ErrnoStatus(absl::StrFormat("IPC_SET on System V segment %d", p.id()));
  if (s.locked() && ::shmctl(p.id(), SHM_LOCK, nullptr) != 0) {
    return ErrnoStatus(absl::StrFormat("SHM_LOCK on System V segment %d", p.id()));
  }
  return absl::OkStatus();
}

absl::Status CreateSem(const image::SysvSem& s) {
  const image::SysvPerm& p = s.perm();
  RETURN_IF_ERROR(SetNextId("sem", p.id()));
  RETURN_IF_ERROR(Check(::semget(p.key(), s.values_size(), IPC_CREAT | IPC_EXCL | 0600), p, "semaphore set"));
  std::vector<unsigned short> values(s.values().begin(), s.values().end());
  if (!values.empty() && ::semctl(p.id(), 0, SETALL, values.data()) != 0) {
    return ErrnoStatus(absl::StrFormat("semctl(SETALL) on System V semaphore set %d", p.id()));
  }
  semid_ds ds{};
  ds.sem_perm.uid = p.uid();
  ds.sem_perm.gid = p.gid();
  ds.sem_perm.mode = p.mode();
  if (::semctl(p.id(), 0, IPC_SET, &ds) != 0) {
    return ErrnoStatus(absl::StrFormat("IPC_SET on System V semaphore set %d", p.id()));
  }
  return absl::OkStatus();
}

absl::Status CreateMsg(const image::SysvMsgQueue& q) {
  const image::SysvPerm& p = q.perm();
  RETURN_IF_ERROR(SetNextId("msg", p.id()));
  RETURN_IF_ERROR(Check(::msgget(p.key(), IPC_CREAT | IPC_EXCL | 0600), p, "message queue"));
  msqid_ds ds{};
  ds.msg_perm.uid = p.uid();
  ds.msg_perm.gid = p.gid();
  ds.msg_perm.mode = p.mode();
  ds.msg_qbytes = q.qbytes();
  if (::msgctl(p.id(), IPC_SET, &ds) != 0) {
    return ErrnoStatus(absl::StrFormat("IPC_SET on System V message queue %d", p.id()));
  }
  for (const auto& m : q.messages()) {
    std::vector<char> buf(sizeof(long) + m.data().size());
    long type = m.type();
    std::memcpy(buf.data(), &type, sizeof type);
    std::memcpy(buf.data() + sizeof type, m.data().data(), m.data().size());
    if (::msgsnd(p.id(), buf.data(), m.data().size(), IPC_NOWAIT) != 0) {
      return ErrnoStatus(absl::StrFormat("msgsnd to System V message queue %d", p.id()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CreateSysvIpc(pid_t pid, const image::ImageReader& img, const image::SysvIpc& ipc) {
  if (ipc.shm_size() == 0 && ipc.sem_size() == 0 && ipc.msg_size() == 0) return absl::OkStatus();
  return proc::InNamespaceOf(pid, CLONE_NEWIPC, "ipc", [&]() -> absl::Status {
    for (const auto& s : ipc.shm()) RETURN_IF_ERROR(CreateShm(img, s));
    for (const auto& s : ipc.sem()) RETURN_IF_ERROR(CreateSem(s));
    for (const auto& q : ipc.msg()) RETURN_IF_ERROR(CreateMsg(q));
    return absl::OkStatus();
  });
}

absl::Status RemoveDestroyedSegments(pid_t pid, const image::SysvIpc& ipc) {
  bool any = false;
  for (const auto& s : ipc.shm()) any = any || s.removed();
  if (!any) return absl::OkStatus();
  return proc::InNamespaceOf(pid, CLONE_NEWIPC, "ipc", [&]() -> absl::Status {
    for (const auto& s : ipc.shm()) {
      if (s.removed() && ::shmctl(s.perm().id(), IPC_RMID, nullptr) != 0) {
        return ErrnoStatus(absl::StrFormat("IPC_RMID on System V segment %d", s.perm().id()));
      }
    }
    return absl::OkStatus();
  });
}

}  // namespace cairn::restore
