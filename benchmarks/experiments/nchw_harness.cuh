// Shared by the NCHW convolution experiments in this folder (not part of tmap): error checks,
// mbarriers and bulk copies, the float16 epilogue through shared memory, a direct convolution on
// the GPU as the reference, and the harness that checks and times one configuration.
#pragma once
#include <cuda_fp16.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <random>
#include <algorithm>
#include <cmath>
#define CK(x) do{cudaError_t e_=(x); if(e_!=cudaSuccess){printf("%s:%d %s\n",__FILE__,__LINE__,cudaGetErrorString(e_)); exit(1);}}while(0)

__device__ __forceinline__ void mbar_init(unsigned a, unsigned count) { asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(a), "r"(count) : "memory"); }
__device__ __forceinline__ void mbar_arrive(unsigned a) { asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}" :: "r"(a) : "memory"); }
__device__ __forceinline__ void mbar_wait(unsigned a, unsigned parity) {
  asm volatile("{\n.reg .pred p;\nW: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra W;\n}" :: "r"(a), "r"(parity) : "memory");
}

__device__ __forceinline__ void mbar_expect(unsigned a, unsigned bytes) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}" :: "r"(a), "r"(bytes) : "memory");
}

__device__ __forceinline__ void bulk_copy(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

/// The epilogue of v3-v6: the 128 MI x BN outputs of two warpgroups' float sums (MI m64
/// accumulators each; this thread's warpgroup's first row `row0`) staged as [n][m] halves in
/// shared memory, then written along m. Output m is pixel m0 + m of the image on a pitch of
/// `pitch` (columns >= W and rows >= H dropped); `out` points at the block's first output channel.
/// `t`: this thread among the 256 that take part, which `sync()` synchronizes.
template <int MI, int BN, typename Sync>
__device__ __forceinline__ void store_outputs(const float (&d)[MI][BN / 2], unsigned char* smem, int t, int row0,
                                              int m0, int pitch, int H, int W, __half* out, Sync sync) {
  constexpr int BM = 128 * MI, LD = BM + 8;
  const long long HW = (long long)H * W;
  __half* Cs = reinterpret_cast<__half*>(smem);
  const int w4 = (t % 128) / 32, lane = t % 32;
  #pragma unroll
  for (int mi = 0; mi < MI; ++mi)
    #pragma unroll
    for (int j = 0; j < BN / 8; ++j)
      #pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int row = row0 + mi * 64 + w4 * 16 + lane / 4 + 8 * hf, col = 8 * j + 2 * (lane % 4);
        Cs[col * LD + row] = __float2half(d[mi][4 * j + 2 * hf]);
        Cs[(col + 1) * LD + row] = __float2half(d[mi][4 * j + 2 * hf + 1]);
      }
  sync();
  for (int idx = t; idx < BN * BM; idx += 256) {
    const int col = idx / BM, row = idx % BM;
    const int ext = m0 + row, hq = ext / pitch, wq = ext - hq * pitch;
    if (hq < H && wq < W) out[col * HW + (long long)hq * W + wq] = Cs[col * LD + row];
  }
}


__global__ void refconv(const __half* in, const __half* wt, float* out, int N, int C, int H, int W, int K) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  long long total = (long long)N * K * H * W;
  if (i >= total) return;
  int w = i % W, h = i / W % H, k = i / ((long long)W * H) % K, n = i / ((long long)W * H * K);
  float s = 0;
  for (int c = 0; c < C; ++c) for (int r = 0; r < 3; ++r) for (int q = 0; q < 3; ++q) {
    int hh = h + r - 1, ww = w + q - 1;
    if (hh < 0 || hh >= H || ww < 0 || ww >= W) continue;
    s += __half2float(in[(((long long)n * C + c) * H + hh) * W + ww]) * __half2float(wt[((k * C + c) * 3 + r) * 3 + q]);
  }
  out[i] = s;
}


// Runs `launch(stream)` on fresh random inputs against refconv (outputs poisoned with NaN first),
// then times 20 launches in a CUDA graph (median of 12 replays) and prints one line.
template <typename Launch>
void measure(const char* label, int N, int C, int H, int W, int K, int blocks, size_t smem, Launch launch) {
  size_t ni = (size_t)N * C * H * W, nw = (size_t)K * C * 9, no = (size_t)N * K * H * W;
  std::vector<__half> hi(ni), hw(nw);
  std::mt19937 rng(1234); std::uniform_real_distribution<float> u(-1, 1);
  for (auto& x : hi) x = __float2half(u(rng));
  for (auto& x : hw) x = __float2half(u(rng));
  __half *di, *dw, *dout; float* dref;
  CK(cudaMalloc(&di, ni * 2)); CK(cudaMalloc(&dw, nw * 2)); CK(cudaMalloc(&dout, no * 2)); CK(cudaMalloc(&dref, no * 4));
  CK(cudaMemcpy(di, hi.data(), ni * 2, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dw, hw.data(), nw * 2, cudaMemcpyHostToDevice));
  CK(cudaMemset(dout, 0xFF, no * 2));  // poison (NaN)
  refconv<<<(no + 255) / 256, 256>>>(di, dw, dref, N, C, H, W, K);
  cudaStream_t s; CK(cudaStreamCreate(&s));
  launch(s, di, dw, dout);
  CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
  std::vector<__half> ho(no); std::vector<float> hr(no);
  CK(cudaMemcpy(ho.data(), dout, no * 2, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(hr.data(), dref, no * 4, cudaMemcpyDeviceToHost));
  double num = 0, den = 0;
  for (size_t i = 0; i < no; ++i) { double a = __half2float(ho[i]), b = hr[i]; num += (a - b) * (a - b); den += b * b; }
  cudaGraph_t g; cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < 20; ++i) launch(s, di, dw, dout);
  CK(cudaStreamEndCapture(s, &g)); CK(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  std::vector<float> ts;
  for (int rep = 0; rep < 12; ++rep) {
    CK(cudaEventRecord(e0, s)); CK(cudaGraphLaunch(ge, s)); CK(cudaEventRecord(e1, s)); CK(cudaEventSynchronize(e1));
    float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); ts.push_back(ms * 1000 / 20);
  }
  std::sort(ts.begin(), ts.end());
  const double flops = 2.0 * N * K * H * W * C * 9;
  printf("%-40s N=%-3d C=%-3d H=W=%-3d K=%-3d grid=%-5d smem=%-6zu rel_l2=%.2e  %8.2f us  %6.1f TFLOP/s\n", label, N, C, H, K,
         blocks, smem, std::sqrt(num / den), ts[6], flops / ts[6] / 1e6);
  CK(cudaEventDestroy(e0)); CK(cudaEventDestroy(e1)); CK(cudaStreamDestroy(s));
  cudaFree(di); cudaFree(dw); cudaFree(dout); cudaFree(dref); cudaGraphExecDestroy(ge); cudaGraphDestroy(g);
}

