// A fake of NVML's libnvidia-ml.so.1, as far as cairnd uses it (daemon/gpu_watch.cc): a node with
// $CAIRN_FAKE_NVML_GPUS GPUs (default 2) named "NVIDIA H100 80GB HBM3"; events as below.
// For tests of GPU jobs on a machine without a GPU; cairnd loads it with --nvml-library.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

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
nvmlReturn_t nvmlDeviceGetName(void* d, char* name, unsigned int len) {
  (void)d;
  snprintf(name, len, "NVIDIA H100 80GB HBM3");
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
