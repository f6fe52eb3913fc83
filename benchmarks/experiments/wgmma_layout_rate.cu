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
#define CK(x) do{cudaError_t e_=(x); if(e_!=cudaSuccess){printf("%s:%d %s\n",__FILE__,__LINE__,cudaGetErrorString(e_)); exit(1);}}while(0)
__device__ __forceinline__ unsigned long long desc(unsigned addr, unsigned lbo, unsigned sbo, unsigned type) {
  return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)(lbo >> 4) << 16) | ((unsigned long long)(sbo >> 4) << 32) | ((unsigned long long)type << 62);
}
__device__ __forceinline__ void wgmma_n64(float (&d)[32], unsigned long long da, unsigned long long db) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
    "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) : "l"(da), "l"(db), "r"(1));
}

__device__ __forceinline__ void wgmma_n128(float (&d)[64], unsigned long long da, unsigned long long db) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
    "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) : "l"(da), "l"(db), "r"(1));
}

__device__ __forceinline__ void wgmma_n256(float (&d)[128], unsigned long long da, unsigned long long db) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
    "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0;\n}\n"
    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127]) : "l"(da), "l"(db), "r"(1));
}

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
    da = desc(a, 16, 1024, 1); db = desc(b, 16, 1024, 1); sa = 2; sb = 2;
  } else {    // K-major, no swizzle: [k/8][rows][16 B]; LBO = rows x 16 between k groups, SBO 128
    da = desc(a, 64 * 16, 128, 0); db = desc(b, N * 16, 128, 0); sa = 2 * 64; sb = 2 * N;
  }
  for (int it = 0; it < iters; ++it) {
    if (W1 == 2) for (int i = 0; i < N / 2; ++i) asm volatile("" : "+f"(d[i])::"memory");
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    #pragma unroll
    for (int rep = 0; rep < 4; ++rep)
      #pragma unroll
      for (int kk = 0; kk < 4; ++kk) { if constexpr (N == 64) wgmma_n64(d, da + kk * sa, db + kk * sb);
                  else if constexpr (N == 128) wgmma_n128(d, da + kk * sa, db + kk * sb);
                  else wgmma_n256(d, da + kk * sa, db + kk * sb); }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    if (W1) asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
    else asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    if (W1 == 2) for (int i = 0; i < N / 2; ++i) asm volatile("" : "+f"(d[i])::"memory");
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
