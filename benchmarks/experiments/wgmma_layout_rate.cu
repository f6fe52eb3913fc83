// Experiment, not part of tmap (nothing builds or links it): the rate of wgmma (m64nNk16, float16
// in, float32 sums) reading K-major operands from shared memory without swizzle (core matrices of
// 8 rows x 16 bytes, the layout of benchmarks/experiments/nchw_window_wgmma.cu's windows) against
// 128-byte-swizzled ones. Every SM's warpgroups issue 16 wgmmas per commit on fixed tiles of
// garbage (only the rate is measured), waiting for all of them (wait 0) or for all but the last
// group (wait 1; 2: with the accumulators fenced as operands around each group). One block per SM
// (132), 4000 rounds, median of 5 launches timed with CUDA events.
//
// Build and run on an sm_90 machine:
//   nvcc -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -o wgmma_layout_rate wgmma_layout_rate.cu
//   ./wgmma_layout_rate
#include <cstdio>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include "wgmma_f16.cuh"
#define CK(x) do{cudaError_t e_=(x); if(e_!=cudaSuccess){printf("%s:%d %s\n",__FILE__,__LINE__,cudaGetErrorString(e_)); exit(1);}}while(0)
template <int N, int SWZ, int WGS, int W1 = 0>
__global__ void __launch_bounds__(128 * WGS, 1) bench(float* out, int iters) {
  extern __shared__ __align__(1024) unsigned char smem[];
  // Per warpgroup: A 64 x 64 (K) halves = 8 KB; shared B: N x 64 halves.
  const int wg = threadIdx.x / 128;
  const unsigned base = (unsigned)__cvta_generic_to_shared(smem);
  const unsigned a = base + wg * 8192, b = base + WGS * 8192;
  float d[N / 2];
  for (int i = 0; i < N / 2; ++i) d[i] = 0.f;
  unsigned long long da, db; unsigned sa, sb;
  if (SWZ) {  // K-major, 128-byte lines: 8-row atoms of 1024 bytes (SBO), k16 = +32 bytes
    da = smem_desc(a, 16, 1024, 1); db = smem_desc(b, 16, 1024, 1); sa = 2; sb = 2;
  } else {    // K-major, no swizzle: [k/8][rows][16 B]; LBO = rows x 16 between k groups, SBO 128
    da = smem_desc(a, 64 * 16, 128, 0); db = smem_desc(b, N * 16, 128, 0); sa = 2 * 64; sb = 2 * N;
  }
  for (int it = 0; it < iters; ++it) {
    if (W1 == 2) fence_operands(d);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    #pragma unroll
    for (int rep = 0; rep < 4; ++rep)
      #pragma unroll
      for (int kk = 0; kk < 4; ++kk) wgmma_f16<N>(d, da + kk * sa, db + kk * sb);
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    if (W1) asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
    else asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    if (W1 == 2) fence_operands(d);
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  float s = 0;
  for (int i = 0; i < N / 2; ++i) s += d[i];
  if (s == 12345.f) out[threadIdx.x] = s;
}
template <int N, int SWZ, int WGS, int W1 = 0>
void run() {
  const int iters = 4000;
  const size_t smem = WGS * 8192 + N * 128 + 1024;
  auto k = bench<N, SWZ, WGS, W1>;
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  float* out; CK(cudaMalloc(&out, 4096));
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  k<<<132, 128 * WGS, smem>>>(out, 10);
  std::vector<float> ts;
  for (int r = 0; r < 5; ++r) {
    CK(cudaEventRecord(e0)); k<<<132, 128 * WGS, smem>>>(out, iters); CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1));
    float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); ts.push_back(ms);
  }
  std::sort(ts.begin(), ts.end());
  const double flops = 132.0 * WGS * iters * 16 * 64.0 * N * 16 * 2;
  printf("n%-3d %-10s %d warpgroups/SM wait%d: %.1f TFLOP/s\n", N, SWZ ? "swizzle128" : "no-swizzle", WGS, W1, flops / (ts[2] * 1e-3) / 1e12);
}
int main() {
  run<64, 0, 2>(); run<64, 1, 2>(); run<128, 0, 2>(); run<128, 1, 2>(); run<256, 0, 2>(); run<256, 1, 2>();
  run<128, 0, 3>(); run<128, 1, 3>(); run<256, 0, 1>(); run<256, 1, 1>();
  run<64, 0, 2, 1>(); run<64, 0, 2, 2>(); run<128, 0, 2, 1>(); run<128, 0, 2, 2>();
  return 0;
}
