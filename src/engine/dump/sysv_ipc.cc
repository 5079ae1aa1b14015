#include "engine/dump/sysv_ipc.h"

#include <sched.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <unistd.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/proc/setns.h"

namespace cairn::dump {
namespace {

// glibc's <sys/msg.h> does not declare the message buffer with a size.
struct MsgBuf {
  long mtype;
  char mtext[65536];
};

#ifndef MSG_COPY
#define MSG_COPY 040000
#endif

void SetPerm(int id, const ipc_perm& p, image::SysvPerm* out) {
  out->set_id(id);
  out->set_key(p.__key);
  out->set_uid(p.uid);
  out->set_gid(p.gid);
  out->set_mode(p.mode & 0777);
}

absl::Status CaptureShm(image::ImageWriter& writer, image::SysvIpc* out) {
  shm_info info{};
  int max = ::shmctl(0, SHM_INFO, reinterpret_cast<shmid_ds*>(&info));
  if (max < 0) return ErrnoStatus("shmctl(SHM_INFO)");
  for (int i = 0; i <= max; ++i) {
    shmid_ds ds{};
    int id = ::shmctl(i, SHM_STAT_ANY, &ds);
    if (id < 0) continue;
    image::SysvShm* s = out->add_shm();
    SetPerm(id, ds.shm_perm, s->mutable_perm());
    s->set_size(ds.shm_segsz);
    s->set_locked((ds.shm_perm.mode & SHM_LOCKED) != 0);
    s->set_removed((ds.shm_perm.mode & SHM_DEST) != 0);
    void* p = ::shmat(id, nullptr, SHM_RDONLY);
    if (p == reinterpret_cast<void*>(-1)) return ErrnoStatus(absl::StrCat("shmat System V segment ", id));
    auto blob = writer.AppendBytes(absl::string_view(static_cast<const char*>(p), ds.shm_segsz));
    ::shmdt(p);
    RETURN_IF_ERROR(blob.status());
    s->set_content_offset(blob->offset);
    s->set_content_size(blob->size);
    s->set_content_xxh3(blob->xxh3);
  }
  return absl::OkStatus();
}

absl::Status CaptureSem(image::SysvIpc* out) {
  seminfo info{};
  int max = ::semctl(0, 0, SEM_INFO, &info);
  if (max < 0) return ErrnoStatus("semctl(SEM_INFO)");
  for (int i = 0; i <= max; ++i) {
    semid_ds ds{};
    int id = ::semctl(i, 0, SEM_STAT_ANY, &ds);
    if (id < 0) continue;
    image::SysvSem* s = out->add_sem();
    SetPerm(id, ds.sem_perm, s->mutable_perm());
    std::vector<unsigned short> values(ds.sem_nsems);
    if (::semctl(id, 0, GETALL, values.data()) != 0) return ErrnoStatus(absl::StrCat("semctl(GETALL) of set ", id));
    for (unsigned short v : values) s->add_values(v);
  }
  return absl::OkStatus();
}

absl::Status CaptureMsg(image::SysvIpc* out) {
  msginfo info{};
  int max = ::msgctl(0, MSG_INFO, reinterpret_cast<msqid_ds*>(&info));
  if (max < 0) return ErrnoStatus("msgctl(MSG_INFO)");
  auto buf = std::make_unique<MsgBuf>();
  for (int i = 0; i <= max; ++i) {
    msqid_ds ds{};
    int id = ::msgctl(i, MSG_STAT_ANY, &ds);
    if (id < 0) continue;
    image::SysvMsgQueue* q = out->add_msg();
    SetPerm(id, ds.msg_perm, q->mutable_perm());
    q->set_qbytes(ds.msg_qbytes);
    for (msgqnum_t k = 0; k < ds.msg_qnum; ++k) {
      ssize_t n = ::msgrcv(id, buf.get(), sizeof buf->mtext, static_cast<long>(k), IPC_NOWAIT | MSG_COPY);
      if (n < 0) {
        return ErrnoStatus(absl::StrCat("msgrcv(MSG_COPY) of message ", k, " of queue ", id,
                                        " (the kernel needs CONFIG_CHECKPOINT_RESTORE)"));
      }
      image::SysvMsgQueue::Message* m = q->add_messages();
      m->set_type(buf->mtype);
      m->set_data(std::string(buf->mtext, static_cast<size_t>(n)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<bool> OwnIpcNamespace(pid_t pid) {
  auto link = [](const std::string& path) -> absl::StatusOr<std::string> {
    char buf[128];
    ssize_t n = ::readlink(path.c_str(), buf, sizeof buf);
    if (n < 0) return ErrnoStatus("readlink " + path);
    return std::string(buf, static_cast<size_t>(n));
  };
  ASSIGN_OR_RETURN(std::string mine, link("/proc/self/ns/ipc"));
  ASSIGN_OR_RETURN(std::string theirs, link(absl::StrCat("/proc/", pid, "/ns/ipc")));
  return mine != theirs;
}

absl::Status CaptureSysvIpc(pid_t pid, image::ImageWriter& writer, image::SysvIpc* out) {
  return proc::InNamespaceOf(pid, CLONE_NEWIPC, "ipc", [&]() -> absl::Status {
    RETURN_IF_ERROR(CaptureShm(writer, out));
    RETURN_IF_ERROR(CaptureSem(out));
    return CaptureMsg(out);
  });
}

}  // namespace cairn::dump
