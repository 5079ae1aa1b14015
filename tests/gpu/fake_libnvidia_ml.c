// A fake of NVML's libnvidia-ml.so.1, as far as cairnd uses it (daemon/gpu_watch.cc): a node with
// $CAIRN_FAKE_NVML_GPUS GPUs (default 2) named "NVIDIA H100 80GB HBM3"; events as below.
// For tests of GPU jobs on a machine without a GPU; cairnd loads it with --nvml-library.
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fake_cuda.h"

typedef int nvmlReturn_t;
typedef struct nvmlEventData {
  void* device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlEventData_t;

enum { kSuccess = 0, kInvalidArgument = 2, kTimeout = 10 };
static char devices[64];  // a handle is the address of one of these
static char event_set;

static unsigned Count(void) {
  const char* n = getenv("CAIRN_FAKE_NVML_GPUS");
  unsigned c = n != NULL ? (unsigned)atoi(n) : 2u;
  return c > sizeof devices ? (unsigned)sizeof devices : c;
}

nvmlReturn_t nvmlInit_v2(void) { return kSuccess; }
nvmlReturn_t nvmlShutdown(void) { return kSuccess; }
const char* nvmlErrorString(nvmlReturn_t r) { return r == kTimeout ? "Timeout" : r == 0 ? "Success" : "Error"; }
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* n) {
  *n = Count();
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, void** d) {
  if (i >= Count()) return kInvalidArgument;
  *d = &devices[i];
  return kSuccess;
}
// $CAIRN_FAKE_NVML_NAMES: the GPUs' names, comma-separated (default: every one an H100).
nvmlReturn_t nvmlDeviceGetName(void* d, char* name, unsigned int len) {
  int index = (int)((char*)d - devices);
  const char* names = getenv("CAIRN_FAKE_NVML_NAMES");
  for (int i = 0; names != NULL && i < index; ++i) {
    names = strchr(names, ',');
    if (names != NULL) ++names;
  }
  if (names == NULL || *names == '\0') names = "NVIDIA H100 80GB HBM3";
  size_t n = strcspn(names, ",");
  snprintf(name, len, "%.*s", (int)n, names);
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetUUID(void* d, char* uuid, unsigned int len) {
  snprintf(uuid, len, FAKE_CUDA_UUID_FORMAT, (unsigned)((char*)d - devices));
  return kSuccess;
}

// The processes of fake_cuda_app on GPU `index`: those with its device file open (1 MiB each).
static unsigned ProcessesOn(int index, unsigned* pids, unsigned max) {
  char prefix[64];
  snprintf(prefix, sizeof prefix, FAKE_CUDA_DEVICE_PREFIX "g%d-", index);
  unsigned n = 0;
  DIR* proc = opendir("/proc");
  for (struct dirent* p; proc != NULL && (p = readdir(proc)) != NULL;) {
    int pid = atoi(p->d_name);
    if (pid <= 0) continue;
    char fd_dir[64];
    snprintf(fd_dir, sizeof fd_dir, "/proc/%d/fd", pid);
    DIR* fds = opendir(fd_dir);
    int found = 0;
    for (struct dirent* f; fds != NULL && !found && (f = readdir(fds)) != NULL;) {
      char link[320], target[256] = {0};
      snprintf(link, sizeof link, "%s/%s", fd_dir, f->d_name);
      found = readlink(link, target, sizeof target - 1) > 0 && strncmp(target, prefix, strlen(prefix)) == 0;
    }
    if (fds != NULL) closedir(fds);
    if (found) {
      if (n < max) pids[n] = (unsigned)pid;
      ++n;
    }
  }
  if (proc != NULL) closedir(proc);
  return n;
}

typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
#define FAKE_GPU_BYTES (80ull << 30)
#define FAKE_PROCESS_BYTES (1ull << 20)

nvmlReturn_t nvmlDeviceGetMemoryInfo(void* d, nvmlMemory_t* m) {
  unsigned used = ProcessesOn((int)((char*)d - devices), NULL, 0);
  m->total = FAKE_GPU_BYTES;
  m->used = used * FAKE_PROCESS_BYTES;
  m->free = m->total - m->used;
  return kSuccess;
}

typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlProcessInfo_t;

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(void* d, unsigned int* count, nvmlProcessInfo_t* infos) {
  unsigned pids[256];
  unsigned n = ProcessesOn((int)((char*)d - devices), pids, 256);
  if (n > *count) {
    *count = n;
    return 7;  // NVML_ERROR_INSUFFICIENT_SIZE
  }
  for (unsigned i = 0; i < n; ++i) {
    infos[i].pid = pids[i];
    infos[i].usedGpuMemory = FAKE_PROCESS_BYTES;
    infos[i].gpuInstanceId = infos[i].computeInstanceId = 0xFFFFFFFFu;
  }
  *count = n;
  return kSuccess;
}
nvmlReturn_t nvmlEventSetCreate(void** set) {
  *set = &event_set;
  return kSuccess;
}
nvmlReturn_t nvmlEventSetFree(void* set) {
  (void)set;
  return kSuccess;
}
nvmlReturn_t nvmlDeviceRegisterEvents(void* d, unsigned long long types, void* set) {
  (void)d, (void)types, (void)set;
  return kSuccess;
}
// $CAIRN_FAKE_NVML_EVENT_FILE, once it exists, holds "GPU XID": that GPU reports a critical Xid
// error (nvmlEventTypeXidCriticalError) once, and the file is removed.
nvmlReturn_t nvmlEventSetWait_v2(void* set, nvmlEventData_t* data, unsigned int timeout_ms) {
  (void)set;
  const char* path = getenv("CAIRN_FAKE_NVML_EVENT_FILE");
  for (unsigned waited = 0; waited < timeout_ms; waited += 20) {
    FILE* f = path != NULL ? fopen(path, "re") : NULL;
    if (f != NULL) {
      unsigned gpu = 0;
      unsigned long long xid = 0;
      int n = fscanf(f, "%u %llu", &gpu, &xid);
      fclose(f);
      remove(path);
      if (n == 2 && gpu < Count()) {
        data->device = &devices[gpu];
        data->eventType = 0x8;  // nvmlEventTypeXidCriticalError
        data->eventData = xid;
        return kSuccess;
      }
    }
    struct timespec t = {0, 20 * 1000000L};
    nanosleep(&t, NULL);
  }
  return kTimeout;
}
