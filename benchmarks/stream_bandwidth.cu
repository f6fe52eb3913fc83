// Built by hand, not by CMake: nvcc -O3 -arch=sm_90 -o stream_bandwidth benchmarks/stream_bandwidth.cu
// Achievable cold read bandwidth of a 32 MiB stream on this GPU, with the L2 flushed before each
// run by a memset (dirty lines left in L2, as tmap_bench did before 2026-11-25) or by a read of the same size
// (clean lines): graph of N x [flush, read] minus graph of N x [flush], median of 9 replays.
#include <cstdio>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)
__global__ void read_stream(const uint4* __restrict__ p, size_t n, float* out) {
  float s = 0;
  size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 a = p[i], b = p[i + stride], c = p[i + 2 * stride], d = p[i + 3 * stride];
    s += __uint_as_float(a.x ^ b.y ^ c.z ^ d.w);
  }
  for (; i < n; i += stride) s += __uint_as_float(p[i].x);
  if (s == 1234.5f) out[0] = s;
}
__global__ void read_flush(const uint4* __restrict__ p, size_t n, float* out) {
  float s = 0;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) s += __uint_as_float(p[i].y);
  if (s == 1234.5f) out[0] = s;
}
int main() {
  const size_t bytes = 32u << 20, fbytes = 100u << 20, cbytes = 256u << 20;
  void *buf, *fl, *ca, *cb; float* out;
  CK(cudaMalloc(&buf, bytes)); CK(cudaMalloc(&fl, fbytes)); CK(cudaMalloc(&ca, cbytes)); CK(cudaMalloc(&cb, cbytes)); CK(cudaMalloc(&out, 4));
  CK(cudaMemset(buf, 1, bytes)); CK(cudaMemset(fl, 2, fbytes));
  cudaStream_t s; CK(cudaStreamCreate(&s));
  cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  // Copy bandwidth as tmap_bench measures it: best of 10 256 MiB cudaMemcpy, read + written bytes.
  float best = 1e9;
  for (int i = 0; i < 13; ++i) {
    CK(cudaEventRecord(a)); CK(cudaMemcpy(cb, ca, cbytes, cudaMemcpyDeviceToDevice)); CK(cudaEventRecord(b)); CK(cudaEventSynchronize(b));
    float ms; CK(cudaEventElapsedTime(&ms, a, b)); if (i >= 3) best = std::min(best, ms);
  }
  const double copy = 2.0 * cbytes / (best * 1e-3) / 1e9;
  printf("copy bandwidth %.0f GB/s\n", copy);
  const int N = 20;
  auto graph_ms = [&](int flush_kind, bool with_read, int blocks, int threads, float& med) -> int {
    cudaGraph_t g; cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int r = 0; r < N; ++r) {
      if (flush_kind == 0) CK(cudaMemsetAsync(fl, r & 0xff, fbytes, s));
      else read_flush<<<132 * 8, 512, 0, s>>>((const uint4*)fl, fbytes / 16, out);
      if (with_read) read_stream<<<blocks, threads, 0, s>>>((const uint4*)buf, bytes / 16, out);
    }
    CK(cudaStreamEndCapture(s, &g)); CK(cudaGraphInstantiate(&ge, g, 0));
    std::vector<float> t;
    for (int k = 0; k < 12; ++k) {
      CK(cudaEventRecord(a, s)); CK(cudaGraphLaunch(ge, s)); CK(cudaEventRecord(b, s)); CK(cudaEventSynchronize(b));
      float ms; CK(cudaEventElapsedTime(&ms, a, b)); if (k >= 3) t.push_back(ms);
    }
    std::sort(t.begin(), t.end()); med = t[t.size() / 2];
    cudaGraphExecDestroy(ge); cudaGraphDestroy(g);
    return 0;
  };
  for (int flush_kind : {0, 1})
    for (int blocks : {132 * 2, 132 * 4, 132 * 8, 132 * 16})
      for (int threads : {256, 512, 1024}) {
        float with, without;
        if (graph_ms(flush_kind, true, blocks, threads, with) || graph_ms(flush_kind, false, blocks, threads, without)) return 1;
        const double us = (with - without) * 1e3 / N;
        printf("%-12s blocks %5d threads %4d: %6.2f us  %5.0f GB/s  %4.1f%% of copy\n", flush_kind ? "read flush" : "memset flush",
               blocks, threads, us, bytes / (us * 1e-6) / 1e9, 100.0 * bytes / (us * 1e-6) / 1e9 / copy);
      }
  return 0;
}
