// A fake of the NVIDIA driver's libcuda.so.1, as far as cairn uses it (engine/gpu/cuda_checkpoint.cc):
// cuInit, cuGetErrorName and the six cuCheckpointProcess* calls, with the documented signatures.
// Each call is carried out by the target process's driver thread (fake_cuda.h), as the real
// driver's are. Built only for tests; cairn finds it through LD_LIBRARY_PATH.
//
// CAIRN_FAKE_CUDA_FAIL=lock|checkpoint|restore|unlock makes that call fail with
// CUDA_ERROR_NOT_SUPPORTED, without asking the process: a driver refusing.
#include <errno.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "fake_cuda.h"

typedef int CUresult;

CUresult cuInit(unsigned flags) { return flags == 0 ? FAKE_SUCCESS : FAKE_ERROR_INVALID_VALUE; }

CUresult cuGetErrorName(CUresult r, const char** name) {
  switch (r) {
    case FAKE_SUCCESS: *name = "CUDA_SUCCESS"; return 0;
    case FAKE_ERROR_INVALID_VALUE: *name = "CUDA_ERROR_INVALID_VALUE"; return 0;
    case FAKE_ERROR_NOT_INITIALIZED: *name = "CUDA_ERROR_NOT_INITIALIZED"; return 0;
    case FAKE_ERROR_OPERATING_SYSTEM: *name = "CUDA_ERROR_OPERATING_SYSTEM"; return 0;
    case FAKE_ERROR_NOT_FOUND: *name = "CUDA_ERROR_NOT_FOUND"; return 0;
    case FAKE_ERROR_ILLEGAL_STATE: *name = "CUDA_ERROR_ILLEGAL_STATE"; return 0;
    case FAKE_ERROR_TIMEOUT: *name = "CUDA_ERROR_TIMEOUT"; return 0;
    case FAKE_ERROR_NOT_SUPPORTED: *name = "CUDA_ERROR_NOT_SUPPORTED"; return 0;
  }
  return FAKE_ERROR_INVALID_VALUE;
}

static int Refused(const char* call) {
  const char* fail = getenv("CAIRN_FAKE_CUDA_FAIL");
  return fail != NULL && strcmp(fail, call) == 0;
}

// The name (after the leading NUL) of the driver thread's socket among those `pid` holds, into
// `name`; 0 if it has none (a process without CUDA, as far as this driver knows).
static int FindSocket(int pid, char* name, size_t size) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/net/unix", pid);
  FILE* f = fopen(path, "re");
  if (f == NULL) return 0;
  char line[512];
  int found = 0;
  while (!found && fgets(line, sizeof line, f) != NULL) {
    // "Num RefCount Protocol Flags Type St Inode Path": a listener's path "@cairn-fake-cuda-KEY".
    unsigned long inode = 0;
    char sock_path[256] = {0};
    if (sscanf(line, "%*s %*s %*s %*s %*s %*s %lu %255s", &inode, sock_path) != 2) continue;
    if (strncmp(sock_path, "@" FAKE_CUDA_SOCKET_PREFIX, strlen(FAKE_CUDA_SOCKET_PREFIX) + 1) != 0) continue;
    char want[64];
    snprintf(want, sizeof want, "socket:[%lu]", inode);
    char fd_dir[64];
    snprintf(fd_dir, sizeof fd_dir, "/proc/%d/fd", pid);
    DIR* d = opendir(fd_dir);
    for (struct dirent* e; d != NULL && (e = readdir(d)) != NULL;) {
      char link[320], target[64] = {0};
      snprintf(link, sizeof link, "%s/%s", fd_dir, e->d_name);
      ssize_t len = readlink(link, target, sizeof target - 1);
      if (len > 0 && strcmp(target, want) == 0 && strlen(sock_path + 1) < size) {
        memcpy(name, sock_path + 1, strlen(sock_path + 1) + 1);
        found = 1;
        break;
      }
    }
    if (d != NULL) closedir(d);
  }
  fclose(f);
  return found;
}

// One request to the driver thread of `pid`; its answer's value into *value.
static CUresult Ask(int pid, uint32_t op, uint32_t timeout_ms, int* value, int old_gpu, int new_gpu) {
  char name[108];
  if (!FindSocket(pid, name, sizeof name)) return FAKE_ERROR_NOT_FOUND;  // no CUDA in that process
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return FAKE_ERROR_OPERATING_SYSTEM;
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  int n = snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "%s", name);
  // A process that does not answer within its lock timeout (or 10 s) is not one the driver knows.
  struct timeval tv = {timeout_ms == 0 ? 10 : (timeout_ms + 999) / 1000 + 1, 0};
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(s, (struct sockaddr*)&a, (socklen_t)(sizeof(sa_family_t) + 1 + (size_t)n)) != 0) {
    close(s);
    return FAKE_ERROR_NOT_FOUND;  // no CUDA in that process
  }
  struct fake_request q = {op, timeout_ms, old_gpu, new_gpu};
  struct fake_reply r = {FAKE_ERROR_OPERATING_SYSTEM, 0};
  if (write(s, &q, sizeof q) != (ssize_t)sizeof q || read(s, &r, sizeof r) != (ssize_t)sizeof r) {
    close(s);
    return FAKE_ERROR_OPERATING_SYSTEM;
  }
  close(s);
  if (value != NULL) *value = r.value;
  return r.result;
}

typedef struct { uint32_t timeout_ms; uint32_t reserved0; uint64_t reserved1[7]; } LockArgs;
typedef struct { uint8_t old_uuid[16], new_uuid[16]; } GpuPair;
typedef struct { const GpuPair* gpu_pairs; uint32_t gpu_pairs_count; char reserved[52]; } RestoreArgs;

static int Zero(const void* p, size_t n) {
  const unsigned char* b = p;
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != 0) return 0;
  }
  return 1;
}

CUresult cuCheckpointProcessLock(int pid, LockArgs* args) {
  if (args != NULL && !(args->reserved0 == 0 && Zero(args->reserved1, sizeof args->reserved1))) return FAKE_ERROR_INVALID_VALUE;
  if (Refused("lock")) return FAKE_ERROR_NOT_SUPPORTED;
  return Ask(pid, FAKE_LOCK, args != NULL ? args->timeout_ms : 0, NULL, -1, -1);
}

CUresult cuCheckpointProcessCheckpoint(int pid, void* args) {
  if (args != NULL && !Zero(args, 64)) return FAKE_ERROR_INVALID_VALUE;
  if (Refused("checkpoint")) return FAKE_ERROR_NOT_SUPPORTED;
  return Ask(pid, FAKE_CHECKPOINT, 0, NULL, -1, -1);
}

CUresult cuCheckpointProcessRestore(int pid, RestoreArgs* args) {
  if (args != NULL && !Zero(args->reserved, sizeof args->reserved)) return FAKE_ERROR_INVALID_VALUE;
  if (Refused("restore")) return FAKE_ERROR_NOT_SUPPORTED;
  // The fake's processes use one GPU each: at most one pair (the fake NVML's UUIDs end in the index).
  if (args != NULL && args->gpu_pairs_count > 1) return FAKE_ERROR_NOT_SUPPORTED;
  if (args != NULL && args->gpu_pairs_count == 1) {
    if (args->gpu_pairs == NULL) return FAKE_ERROR_INVALID_VALUE;
    return Ask(pid, FAKE_RESTORE, 0, NULL, args->gpu_pairs[0].old_uuid[15], args->gpu_pairs[0].new_uuid[15]);
  }
  return Ask(pid, FAKE_RESTORE, 0, NULL, -1, -1);
}

CUresult cuCheckpointProcessUnlock(int pid, void* args) {
  if (args != NULL && !Zero(args, 64)) return FAKE_ERROR_INVALID_VALUE;
  if (Refused("unlock")) return FAKE_ERROR_NOT_SUPPORTED;
  return Ask(pid, FAKE_UNLOCK, 0, NULL, -1, -1);
}

CUresult cuCheckpointProcessGetState(int pid, int* state) { return Ask(pid, FAKE_STATE, 0, state, -1, -1); }

CUresult cuCheckpointProcessGetRestoreThreadId(int pid, int* tid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/task", pid);
  DIR* d = opendir(path);
  if (d == NULL) return FAKE_ERROR_NOT_FOUND;
  CUresult r = FAKE_ERROR_NOT_FOUND;
  for (struct dirent* e; (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.') continue;
    char comm_path[320], comm[32] = {0};
    snprintf(comm_path, sizeof comm_path, "/proc/%d/task/%s/comm", pid, e->d_name);
    FILE* f = fopen(comm_path, "re");
    if (f == NULL) continue;
    if (fgets(comm, sizeof comm, f) != NULL && strncmp(comm, FAKE_CUDA_THREAD_NAME, strlen(FAKE_CUDA_THREAD_NAME)) == 0) {
      *tid = atoi(e->d_name);
      r = FAKE_SUCCESS;
    }
    fclose(f);
  }
  closedir(d);
  return r;
}
