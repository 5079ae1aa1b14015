// The protocol between tests/gpu's fake NVIDIA driver library (fake_libcuda.c, loaded by cairn
// as libcuda.so.1) and the program that plays a CUDA application (fake_cuda_app.c). The fake
// keeps the real driver's contract as the CUDA driver API reference states it: the process's
// device state lives in the process (its "driver thread" answers), a checkpoint moves the
// device memory into host memory and closes the device files, a restore needs that thread to
// run, and the states go RUNNING -> LOCKED -> CHECKPOINTED -> LOCKED -> RUNNING, nothing else.
#pragma once

#include <stdint.h>

// The driver thread's abstract unix socket: "\0" FAKE_CUDA_SOCKET_PREFIX KEY, where KEY is the
// program's own (its pid, the time, a random number: a job's pid namespace gives the same pids to
// other jobs, and a restore may put it in another). The fake library finds it among the sockets
// the process holds (/proc/PID/fd and /proc/PID/net/unix), as the real driver knows its process.
#define FAKE_CUDA_SOCKET_PREFIX "cairn-fake-cuda-"
// The driver thread's name (comm): the fake's cuCheckpointProcessGetRestoreThreadId finds it by
// it in /proc, without asking the process (which is held when a restore asks).
#define FAKE_CUDA_THREAD_NAME "fakecuda-drv"
// The "device": a file whose path starts with /dev/nvidia, as cairn recognizes a GPU process:
// FAKE_CUDA_DEVICE_PREFIX "g" GPU "-" KEY, where GPU is the index the program uses (the first of
// its CUDA_VISIBLE_DEVICES, else 0; the fake NVML finds its processes by it). The program writes
// the path into WORKDIR/device and the GPU into WORKDIR/gpu (again after a restore moved it).
#define FAKE_CUDA_DEVICE_PREFIX "/dev/nvidia-cairn-fake-"
// The fake NVML's GPU UUIDs: the index in the last byte.
#define FAKE_CUDA_UUID_FORMAT "GPU-00000000-0000-0000-0000-0000000000%02x"
#define FAKE_CUDA_DEVICE_BYTES (1u << 20)

enum { FAKE_LOCK = 'L', FAKE_CHECKPOINT = 'C', FAKE_RESTORE = 'R', FAKE_UNLOCK = 'U', FAKE_STATE = 'S' };

// CUprocessState and the CUresult codes the fake answers with.
enum { FAKE_RUNNING = 0, FAKE_LOCKED = 1, FAKE_CHECKPOINTED = 2, FAKE_FAILED = 3 };
enum {
  FAKE_SUCCESS = 0,
  FAKE_ERROR_INVALID_VALUE = 1,
  FAKE_ERROR_NOT_INITIALIZED = 3,
  FAKE_ERROR_OPERATING_SYSTEM = 304,
  FAKE_ERROR_NOT_FOUND = 500,
  FAKE_ERROR_ILLEGAL_STATE = 401,
  FAKE_ERROR_TIMEOUT = 909,
  FAKE_ERROR_NOT_SUPPORTED = 801,
};

struct fake_request {
  uint32_t op;
  uint32_t timeout_ms;
  // FAKE_RESTORE onto another GPU (the driver's GPU UUID pair): the GPU the process was on and
  // the one to restore onto; -1: the same one.
  int32_t old_gpu, new_gpu;
};
struct fake_reply {
  int32_t result;
  int32_t value;
};
