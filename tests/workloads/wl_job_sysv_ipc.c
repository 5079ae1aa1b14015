// System V IPC objects of a job's own IPC namespace survive a round trip with their ids,
// keys, permissions and contents: segment A (key 0x4341, mode 0640, 1 MiB + 100 bytes,
// attached read-write), segment B (private, attached read-only, then removed while
// attached), segment C (key 0x4342, not attached), a set of three semaphores (1, 2, 3) and
// a message queue holding three messages of two types. After go each is checked from the
// job's side: the same ids for the same keys, the contents, B still marked removed, the
// semaphore values, and the messages in order by type.
#define _GNU_SOURCE
#include <string.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>

#include "wl_common.h"

#define A_SIZE (1024 * 1024 + 100)

struct msg {
  long type;
  char text[32];
};

static void* attach(int id, int flags, const char* what) {
  void* p = shmat(id, NULL, flags);
  WL_CHECK(p != (void*)-1, "shmat %s: %s", what, wl_errstr());
  return p;
}

static void send(int q, long type, const char* text) {
  struct msg m = {.type = type};
  strcpy(m.text, text);
  WL_SYS(msgsnd(q, &m, strlen(text) + 1, 0));
}

static void expect_msg(int q, long type, const char* want) {
  struct msg m;
  ssize_t n = WL_SYS(msgrcv(q, &m, sizeof m.text, type, IPC_NOWAIT));
  WL_CHECK(n == (ssize_t)strlen(want) + 1 && strcmp(m.text, want) == 0, "message of type %ld is '%s', want '%s'", type,
           m.text, want);
}

int main(int argc, char** argv) {
  wl_init(argc, argv);
  int a = WL_SYS(shmget(0x4341, A_SIZE, IPC_CREAT | IPC_EXCL | 0640));
  char* pa = attach(a, 0, "A");
  wl_fill_pattern(pa, A_SIZE - 100, 31);
  memcpy(pa + A_SIZE - 100, "the last bytes", 14);
  int b = WL_SYS(shmget(IPC_PRIVATE, 8192, IPC_CREAT | 0600));
  char* pb_rw = attach(b, 0, "B");
  memcpy(pb_rw, "removed but attached", 20);
  WL_SYS(shmdt(pb_rw));
  char* pb = attach(b, SHM_RDONLY, "B read-only");
  WL_SYS(shmctl(b, IPC_RMID, NULL));
  int c = WL_SYS(shmget(0x4342, 4096, IPC_CREAT | IPC_EXCL | 0600));
  char* pc = attach(c, 0, "C");
  memcpy(pc, "detached content", 16);
  WL_SYS(shmdt(pc));
  int s = WL_SYS(semget(0x4343, 3, IPC_CREAT | IPC_EXCL | 0600));
  unsigned short values[3] = {1, 2, 3};
  WL_SYS(semctl(s, 0, SETALL, values));
  int q = WL_SYS(msgget(0x4344, IPC_CREAT | IPC_EXCL | 0600));
  send(q, 1, "first");
  send(q, 2, "second");
  send(q, 1, "third");

  wl_signal_ready();
  wl_wait_go();

  WL_CHECK(shmget(0x4341, 0, 0) == a, "key 0x4341 names segment %d, want %d", shmget(0x4341, 0, 0), a);
  WL_CHECK(shmget(0x4342, 0, 0) == c, "key 0x4342 names segment %d, want %d", shmget(0x4342, 0, 0), c);
  WL_CHECK(semget(0x4343, 0, 0) == s, "key 0x4343 names set %d, want %d", semget(0x4343, 0, 0), s);
  WL_CHECK(msgget(0x4344, 0) == q, "key 0x4344 names queue %d, want %d", msgget(0x4344, 0), q);
  struct shmid_ds ds;
  WL_SYS(shmctl(a, IPC_STAT, &ds));
  WL_CHECK((ds.shm_perm.mode & 0777) == 0640 && ds.shm_segsz == A_SIZE && ds.shm_nattch == 1,
           "segment A: mode %o size %zu attached %lu", ds.shm_perm.mode & 0777, ds.shm_segsz, ds.shm_nattch);
  WL_CHECK(wl_check_pattern(pa, A_SIZE - 100, 31) < 0, "segment A lost its content");
  WL_CHECK(memcmp(pa + A_SIZE - 100, "the last bytes", 14) == 0, "segment A lost its last bytes");
  char* again = attach(a, SHM_RDONLY, "A again");
  WL_CHECK(memcmp(again, pa, A_SIZE) == 0, "a new attachment of A differs from the old one");
  memcpy(pa, "shared", 6);
  WL_CHECK(memcmp(again, "shared", 6) == 0, "A's two attachments are not the same segment");
  WL_SYS(shmctl(b, IPC_STAT, &ds));
  WL_CHECK((ds.shm_perm.mode & SHM_DEST) != 0, "segment B is no longer marked removed");
  WL_CHECK(memcmp(pb, "removed but attached", 20) == 0, "segment B lost its content");
  char* pc2 = attach(c, 0, "C after restore");
  WL_CHECK(memcmp(pc2, "detached content", 16) == 0, "segment C lost its content");
  unsigned short got[3] = {0};
  WL_SYS(semctl(s, 0, GETALL, got));
  WL_CHECK(got[0] == 1 && got[1] == 2 && got[2] == 3, "semaphores %u %u %u, want 1 2 3", got[0], got[1], got[2]);
  struct sembuf op = {.sem_num = 2, .sem_op = -3, .sem_flg = IPC_NOWAIT};
  WL_SYS(semop(s, &op, 1));
  expect_msg(q, 2, "second");
  expect_msg(q, 0, "first");
  expect_msg(q, 0, "third");
  wl_pass();
}
