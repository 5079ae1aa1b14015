// A CUDA program holding GIB GiB of device memory that it transforms step by step (device_check.sh):
// at the end it prints a checksum of the device memory, which a run checkpointed and restored
// must print equal to an uninterrupted run's. WORKDIR/progress holds the last step done.
//
//   cuda_mem WORKDIR GIB STEPS STEP_MS
#include <cuda_runtime.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#define CHECK(call)                                                                     \
  do {                                                                                  \
    cudaError_t e = (call);                                                             \
    if (e != cudaSuccess) {                                                             \
      std::fprintf(stderr, "cuda_mem: %s: %s\n", #call, cudaGetErrorString(e));         \
      std::exit(2);                                                                     \
    }                                                                                   \
  } while (0)

__global__ void Init(uint64_t* d, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    d[i] = i * 0x9e3779b97f4a7c15ULL;
  }
}

__global__ void Step(uint64_t* d, size_t n, uint64_t step) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    d[i] = d[i] * 6364136223846793005ULL + step + 1;
  }
}

// Order-independent: the xor of every word times an odd number of its index.
__global__ void Fold(const uint64_t* d, size_t n, unsigned long long* out) {
  unsigned long long h = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    h ^= d[i] * (2 * i + 1);
  }
  atomicXor(out, h);
}

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: cuda_mem WORKDIR GIB STEPS STEP_MS\n");
    return 2;
  }
  std::string progress_path = std::string(argv[1]) + "/progress";
  size_t bytes = static_cast<size_t>(std::atof(argv[2]) * (1 << 30)) & ~size_t{7};
  int steps = std::atoi(argv[3]), step_ms = std::atoi(argv[4]);
  size_t n = bytes / 8;
  uint64_t* d = nullptr;
  CHECK(cudaMalloc(&d, bytes));
  unsigned long long* h = nullptr;
  CHECK(cudaMalloc(&h, sizeof *h));
  Init<<<1024, 256>>>(d, n);
  CHECK(cudaDeviceSynchronize());
  int progress = open(progress_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (progress < 0) {
    std::perror(progress_path.c_str());
    return 2;
  }
  for (int step = 0; step < steps; ++step) {
    Step<<<1024, 256>>>(d, n, static_cast<uint64_t>(step));
    CHECK(cudaDeviceSynchronize());
    char line[32];
    int len = std::snprintf(line, sizeof line, "%10d\n", step + 1);
    if (pwrite(progress, line, static_cast<size_t>(len), 0) != len) return 2;
    timespec pause{step_ms / 1000, static_cast<long>(step_ms % 1000) * 1000000L};
    nanosleep(&pause, nullptr);
  }
  CHECK(cudaMemset(h, 0, sizeof *h));
  Fold<<<1024, 256>>>(d, n, h);
  unsigned long long sum = 0;
  CHECK(cudaMemcpy(&sum, h, sizeof sum, cudaMemcpyDeviceToHost));
  std::printf("checksum %016llx steps %d\n", sum, steps);
  return 0;
}
