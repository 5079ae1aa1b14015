// The machine's host<->device copy rate (device_check.sh): GIB GiB each way, from pageable
// (malloc) and from pinned (cudaMallocHost) host memory, the best of 3. Prints one line:
//   h2d_pageable=GBPS d2h_pageable=GBPS h2d_pinned=GBPS d2h_pinned=GBPS   (GB = 1e9 bytes)
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

static double Best(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  double best = 0;
  for (int i = 0; i < 3; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    if (cudaMemcpy(dst, src, bytes, kind) != cudaSuccess) return -1;
    cudaDeviceSynchronize();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (bytes / s / 1e9 > best) best = bytes / s / 1e9;
  }
  return best;
}

int main(int argc, char** argv) {
  size_t bytes = static_cast<size_t>((argc > 1 ? std::atof(argv[1]) : 4.0) * (1 << 30));
  void* dev = nullptr;
  void* pinned = nullptr;
  if (cudaMalloc(&dev, bytes) != cudaSuccess || cudaMallocHost(&pinned, bytes) != cudaSuccess) {
    std::fprintf(stderr, "copy_rate: cannot allocate %zu bytes\n", bytes);
    return 2;
  }
  void* pageable = std::malloc(bytes);
  std::memset(pageable, 1, bytes);
  std::memset(pinned, 1, bytes);
  std::printf("h2d_pageable=%.2f d2h_pageable=%.2f h2d_pinned=%.2f d2h_pinned=%.2f\n",
              Best(dev, pageable, bytes, cudaMemcpyHostToDevice), Best(pageable, dev, bytes, cudaMemcpyDeviceToHost),
              Best(dev, pinned, bytes, cudaMemcpyHostToDevice), Best(pinned, dev, bytes, cudaMemcpyDeviceToHost));
  return 0;
}
