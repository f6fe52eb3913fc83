// Experiment, not part of tmap (nothing builds or links it): NCHW 3 x 3 convolutions (stride 1,
// padding 1, float16 in, float32 sums, float16 out) read in place by wgmma through a window of the
// input that each block stages channels-last in shared memory and reads once per filter tap, at a
// row offset, instead of a relayout prologue's channels-last copy. Measured on the H100 on
// 2026-11-26 (benchmarks/RESULTS.md, "NCHW read by the main kernel: a window per block ...").
//
// The window is the block's range of output pixels extended by the taps' reach, on a pitch of
// W + 2 columns (one zero column each side), row e holding the 8-channel groups of pixel m0 + e:
// [channel group][row][8 channels], 16 bytes a row, groups R rows apart (R odd). That is wgmma's
// K-major layout without swizzle (core matrices of 8 rows x 16 bytes, SBO 128 bytes between 8-row
// groups, LBO R x 16 bytes between channel groups), linear in the row, so tap (r, s) is the same
// descriptor started r (W + 2) + s rows later. Filters are transposed to [tap][group][n][8].
//   v1 (winconv): every thread loads and stores the window and the filters, then the block issues
//      the wgmmas (m64n64k16), one 64-channel chunk at a time.
//   v2 (winconv2): the next chunk's global loads issued while the wgmmas run.
//   v3 (winconv3): MI m64 accumulators per warpgroup (one transposed filter chunk serves 128 MI
//      outputs); the output staged through shared memory and written along pixels.
//   v4 (winconv4): warp-specialized: a producer warpgroup fills an S-stage ring of 32-channel
//      chunks (mbarriers), two consumer warpgroups only wait and issue wgmma (n64 or n128);
//      IDLE = 1 skips the producer's copies (the consumers' own ceiling; outputs then wrong).
//   v5 (winconv5): v4 with each channel's rows fetched by cp.async.bulk into a staging buffer
//      and transposed shared -> shared by the producer.
//   v6 (winconv6, W % 8 == 0): the window in NCHW's own order, read MN-major (wgmma's transpose
//      bit; no swizzle: LBO 128 bytes between 8-channel blocks, SBO between 8-pixel blocks),
//      copied by cp.async 16 bytes at a time on a pitch WP that is a multiple of 8 (> W, so a
//      row's right padding is the next row's left zero), plus two copies shifted by +1 and -1
//      pixel (funnel shifts): every tap is then a 16-byte aligned descriptor into one of three.
//      SKIP = 1 leaves the filters untransposed, 2 also the shifted copies (outputs then wrong).
// The consumers of v4, v5 and v6 wait for their wgmmas at every stage (wait_group 0): waiting for 1
// across the runtime chunk loop made ptxas serialize them (C7514).
// Each run checks the output (poisoned with NaN first) against a direct convolution on the GPU
// (relative L2) and times 20 launches in a CUDA graph, median of 12 replays.
//
// Build and run on an sm_90 machine:
//   nvcc -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -o nchw_window_wgmma nchw_window_wgmma.cu
//   ./nchw_window_wgmma
#include <cuda_fp16.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <random>
#include <algorithm>
#include <cmath>
#include "wgmma_f16.cuh"
#include "nchw_harness.cuh"

/// 8 halves `stride` apart as one 16-byte vector.
__device__ __forceinline__ uint4 pack8(const unsigned short* h, int stride = 1) {
  return make_uint4(h[0] | (unsigned)h[stride] << 16, h[2 * stride] | (unsigned)h[3 * stride] << 16,
                    h[4 * stride] | (unsigned)h[5 * stride] << 16, h[6 * stride] | (unsigned)h[7 * stride] << 16);
}
/// One output channel's filters at 8 input channels, as loaded ([channel][3 x 3 taps], 9 vectors),
/// stored as one 16-byte row of the 8 channels per tap, `tap_bytes` apart.
__device__ __forceinline__ void store_filter_taps(const uint4 (&v)[9], unsigned char* dst, int tap_bytes) {
  const unsigned short* h = reinterpret_cast<const unsigned short*>(v);
  #pragma unroll
  for (int t = 0; t < 9; ++t) *reinterpret_cast<uint4*>(dst + t * tap_bytes) = pack8(h + t, 9);
}
constexpr int BN = 64, CH = 64;
template <int WG, bool UNROLL>
__global__ void __launch_bounds__(128 * WG) winconv(const __half* __restrict__ in, const __half* __restrict__ wt,
    __half* __restrict__ out, int N, int C, int H, int W, int K) {
  constexpr int BM = 64 * WG, THREADS = 128 * WG;
  extern __shared__ __align__(128) unsigned char smem[];
  const int Wp = W + 2;
  const int ROWS = BM + 2 * Wp + 2;
  const int R = ((ROWS + 7) / 8) * 8 + 1;          // rows per channel chunk (odd: conflict-free stores)
  constexpr int LB = BN + 1;
  unsigned char* As = smem;                         // [8 chunks][R rows][16 B]
  unsigned char* Bs = smem + ((8 * R * 16 + 127) / 128) * 128;  // [9 taps][8 chunks][LB rows][16 B]
  const int tiles = (H * Wp + BM - 1) / BM;
  const int n = blockIdx.x / tiles, m0 = (blockIdx.x % tiles) * BM, n0 = blockIdx.y * BN;
  const int tid = threadIdx.x, wg = tid / 128;
  const long long HW = (long long)H * W;
  float d[32];
  for (int i = 0; i < 32; ++i) d[i] = 0.f;
  const unsigned a_addr = (unsigned)__cvta_generic_to_shared(As), b_addr = (unsigned)__cvta_generic_to_shared(Bs);
  for (int c0 = 0; c0 < C; c0 += CH) {
    // Window: row e holds input pixel at extended index m0 + e (pitch Wp, one zero column each side).
    for (int e = tid; e < ROWS; e += THREADS) {
      const int ext = m0 + e, hp = ext / Wp, wp = ext - hp * Wp, h = hp - 1, w = wp - 1;
      const bool ok = h >= 0 && h < H && w >= 0 && w < W;
      const __half* src = in + ((long long)n * C + c0) * HW + (long long)h * W + w;
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        unsigned short v[8];
        #pragma unroll
        for (int c = 0; c < 8; ++c) v[c] = ok ? __ldg(reinterpret_cast<const unsigned short*>(src + (8 * j + c) * HW)) : 0;
        *reinterpret_cast<uint4*>(As + (j * R + e) * 16) = pack8(v);
      }
    }
    // Filters: [n][c][3][3] -> per tap, K-major rows of 8 channels.
    for (int task = tid; task < BN * 8; task += THREADS) {
      const int j = task % 8, nn = task / 8;
      const uint4* src = reinterpret_cast<const uint4*>(wt + ((long long)(n0 + nn) * C + c0 + 8 * j) * 9);
      uint4 v[9];
      #pragma unroll
      for (int i = 0; i < 9; ++i) v[i] = __ldg(src + i);
      store_filter_taps(v, Bs + (j * LB + nn) * 16, 8 * LB * 16);
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    if (UNROLL) {
      const unsigned long long da0 = smem_desc(a_addr + (wg * 64) * 16, R * 16, 128);
      const unsigned long long db0 = smem_desc(b_addr, LB * 16, 128);
      #pragma unroll
      for (int t = 0; t < 9; ++t) {
        #pragma unroll
        for (int kk = 0; kk < 4; ++kk)
          wgmma_f16<64>(d, da0 + (unsigned)((2 * kk) * R + (t / 3) * Wp + (t % 3)), db0 + (unsigned)((t * 8 + 2 * kk) * LB));
      }
    } else {
    #pragma unroll 1
    for (int t = 0; t < 9; ++t) {
      const int off = (t / 3) * Wp + (t % 3);
      #pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const unsigned long long da = smem_desc(a_addr + ((2 * kk) * R + wg * 64 + off) * 16, R * 16, 128);
        const unsigned long long db = smem_desc(b_addr + ((t * 8 + 2 * kk) * LB) * 16, LB * 16, 128);
        wgmma_f16<64>(d, da, db);
      }
    }
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    fence_operands(d);
    __syncthreads();
  }
  const int w4 = (tid % 128) / 32, lane = tid % 32;
  #pragma unroll
  for (int j = 0; j < 8; ++j)
    #pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int row = wg * 64 + w4 * 16 + lane / 4 + 8 * hf;
      const int ext = m0 + row, hq = ext / Wp, wq = ext - hq * Wp;
      if (hq >= H || wq >= W) continue;
      const int col = n0 + 8 * j + 2 * (lane % 4);
      __half* o = out + ((long long)n * K + col) * HW + (long long)hq * W + wq;
      o[0] = __float2half(d[4 * j + 2 * hf]);
      o[HW] = __float2half(d[4 * j + 2 * hf + 1]);
    }
}


// v2: every global load of a chunk issued before any use (registers), and the next chunk's loads
// issued while this chunk's wgmmas run.
template <int WG, int RPT, int MODE = 0>
__global__ void __launch_bounds__(128 * WG) winconv2(const __half* __restrict__ in, const __half* __restrict__ wt,
    __half* __restrict__ out, int N, int C, int H, int W, int K) {
  constexpr int BM = 64 * WG, THREADS = 128 * WG, TPT = BN * 8 / THREADS;
  extern __shared__ __align__(128) unsigned char smem[];
  const int Wp = W + 2;
  const int ROWS = BM + 2 * Wp + 2;
  const int R = ((ROWS + 7) / 8) * 8 + 1;
  constexpr int LB = BN + 1;
  unsigned char* As = smem;
  unsigned char* Bs = smem + ((8 * R * 16 + 127) / 128) * 128;
  const int tiles = (H * Wp + BM - 1) / BM;
  const int n = blockIdx.x / tiles, m0 = (blockIdx.x % tiles) * BM, n0 = blockIdx.y * BN;
  const int tid = threadIdx.x, wg = tid / 128;
  const long long HW = (long long)H * W;
  float d[32];
  for (int i = 0; i < 32; ++i) d[i] = 0.f;
  const unsigned a_addr = (unsigned)__cvta_generic_to_shared(As), b_addr = (unsigned)__cvta_generic_to_shared(Bs);
  // Per row of this thread: its input offset (or -1: zeros).
  long long a_off[RPT];
  #pragma unroll
  for (int i = 0; i < RPT; ++i) {
    const int e = tid + i * THREADS;
    const int ext = m0 + e, hp = ext / Wp, wp = ext - hp * Wp, h = hp - 1, w = wp - 1;
    const bool ok = e < ROWS && h >= 0 && h < H && w >= 0 && w < W;
    a_off[i] = ok ? (long long)n * C * HW + (long long)h * W + w : -1;
  }
  unsigned short av[RPT][64];
  uint4 bv[TPT][9];
  auto load = [&](int c0) {
    #pragma unroll
    for (int i = 0; i < RPT; ++i)
      #pragma unroll
      for (int c = 0; c < 64; ++c)
        av[i][c] = MODE == 2 ? (unsigned short)c : a_off[i] >= 0 ? __ldg(reinterpret_cast<const unsigned short*>(in + a_off[i] + (c0 + c) * HW)) : 0;
    #pragma unroll
    for (int q = 0; q < TPT; ++q) {
      const int task = tid + q * THREADS, j = task % 8, nn = task / 8;
      const uint4* src = reinterpret_cast<const uint4*>(wt + ((long long)(n0 + nn) * C + c0 + 8 * j) * 9);
      #pragma unroll
      for (int i = 0; i < 9; ++i) bv[q][i] = MODE == 2 ? make_uint4(i, j, nn, c0) : __ldg(src + i);
    }
  };
  load(0);
  for (int c0 = 0; c0 < C; c0 += CH) {
    #pragma unroll
    for (int i = 0; i < RPT; ++i) {
      const int e = tid + i * THREADS;
      if (e < ROWS)
        #pragma unroll
        for (int j = 0; j < 8; ++j) {
          *reinterpret_cast<uint4*>(As + (j * R + e) * 16) = pack8(av[i] + 8 * j);
        }
    }
    #pragma unroll
    for (int q = 0; q < TPT; ++q) {
      const int task = tid + q * THREADS, j = task % 8, nn = task / 8;
      store_filter_taps(bv[q], Bs + (j * LB + nn) * 16, 8 * LB * 16);
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    {
      const unsigned long long da0 = smem_desc(a_addr + (wg * 64) * 16, R * 16, 128);
      const unsigned long long db0 = smem_desc(b_addr, LB * 16, 128);
      #pragma unroll
      for (int t = 0; t < 9; ++t)
        #pragma unroll
        for (int kk = 0; kk < 4; ++kk)
          if (MODE != 1) wgmma_f16<64>(d, da0 + (unsigned)((2 * kk) * R + (t / 3) * Wp + (t % 3)), db0 + (unsigned)((t * 8 + 2 * kk) * LB));
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    if (c0 + CH < C) load(c0 + CH);
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    fence_operands(d);
    __syncthreads();
  }
  const int w4 = (tid % 128) / 32, lane = tid % 32;
  #pragma unroll
  for (int j = 0; j < 8; ++j)
    #pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int row = wg * 64 + w4 * 16 + lane / 4 + 8 * hf;
      const int ext = m0 + row, hq = ext / Wp, wq = ext - hq * Wp;
      if (hq >= H || wq >= W) continue;
      const int col = n0 + 8 * j + 2 * (lane % 4);
      __half* o = out + ((long long)n * K + col) * HW + (long long)hq * W + wq;
      o[0] = __float2half(d[4 * j + 2 * hf]);
      o[HW] = __float2half(d[4 * j + 2 * hf + 1]);
    }
}

// v3: MI m64 accumulators per warpgroup (BM = 128 MI), so that one transposed filter chunk serves
// BM outputs; loads of a row or task all issued before use; the output staged through shared
// memory and written along pixels (coalesced).
/// The wgmmas of one channel chunk of KK k16 steps (16 KK channels) for the nine taps, MI m64
/// accumulators: tap (r, s) reads the window (descriptor da0, R rows per 8-channel group) r Wp + s
/// rows on, and the filter taps (db0, [tap][group][LB rows]) 2 KK groups per tap.
template <int MI, int BN, int KK>
__device__ __forceinline__ void window_taps(float (&d)[MI][BN / 2], unsigned long long da0, unsigned long long db0, int R,
                                            int Wp, int LB) {
  #pragma unroll
  for (int t = 0; t < 9; ++t)
    #pragma unroll
    for (int kk = 0; kk < KK; ++kk)
      #pragma unroll
      for (int mi = 0; mi < MI; ++mi)
        wgmma_f16<BN>(d[mi], da0 + (unsigned)((2 * kk) * R + mi * 64 + (t / 3) * Wp + (t % 3)), db0 + (unsigned)((t * 2 * KK + 2 * kk) * LB));
}
template <int MI>
__global__ void __launch_bounds__(256) winconv3(const __half* __restrict__ in, const __half* __restrict__ wt,
    __half* __restrict__ out, int N, int C, int H, int W, int K) {
  constexpr int BM = 128 * MI, THREADS = 256, TPT = BN * 8 / THREADS;
  extern __shared__ __align__(128) unsigned char smem[];
  const int Wp = W + 2;
  const int ROWS = BM + 2 * Wp + 2;
  const int R = ((ROWS + 7) / 8) * 8 + 1;
  constexpr int LB = BN + 1;
  unsigned char* As = smem;
  unsigned char* Bs = smem + ((8 * R * 16 + 127) / 128) * 128;
  const int tiles = (H * Wp + BM - 1) / BM;
  const int n = blockIdx.x / tiles, m0 = (blockIdx.x % tiles) * BM, n0 = blockIdx.y * BN;
  const int tid = threadIdx.x, wg = tid / 128;
  const long long HW = (long long)H * W;
  float d[MI][32];
  #pragma unroll
  for (int mi = 0; mi < MI; ++mi)
    #pragma unroll
    for (int i = 0; i < 32; ++i) d[mi][i] = 0.f;
  const unsigned a_addr = (unsigned)__cvta_generic_to_shared(As), b_addr = (unsigned)__cvta_generic_to_shared(Bs);
  for (int c0 = 0; c0 < C; c0 += CH) {
    for (int e = tid; e < ROWS; e += THREADS) {
      const int ext = m0 + e, hp = ext / Wp, wp = ext - hp * Wp, h = hp - 1, w = wp - 1;
      const bool ok = h >= 0 && h < H && w >= 0 && w < W;
      const unsigned short* src = reinterpret_cast<const unsigned short*>(in + ((long long)n * C + c0) * HW + (long long)h * W + w);
      unsigned short v[64];
      #pragma unroll
      for (int c = 0; c < 64; ++c) v[c] = ok ? __ldg(src + c * HW) : 0;
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        *reinterpret_cast<uint4*>(As + (j * R + e) * 16) = pack8(v + 8 * j);
      }
    }
    {
      uint4 bv[TPT][9];
      #pragma unroll
      for (int q = 0; q < TPT; ++q) {
        const int task = tid + q * THREADS, j = task % 8, nn = task / 8;
        const uint4* src = reinterpret_cast<const uint4*>(wt + ((long long)(n0 + nn) * C + c0 + 8 * j) * 9);
        #pragma unroll
        for (int i = 0; i < 9; ++i) bv[q][i] = __ldg(src + i);
      }
      #pragma unroll
      for (int q = 0; q < TPT; ++q) {
        const int task = tid + q * THREADS, j = task % 8, nn = task / 8;
        store_filter_taps(bv[q], Bs + (j * LB + nn) * 16, 8 * LB * 16);
      }
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    {
      const unsigned long long da0 = smem_desc(a_addr + (wg * 64 * MI) * 16, R * 16, 128);
      const unsigned long long db0 = smem_desc(b_addr, LB * 16, 128);
      window_taps<MI, 64, 4>(d, da0, db0, R, Wp, LB);
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    #pragma unroll
    for (int mi = 0; mi < MI; ++mi) fence_operands(d[mi]);
    __syncthreads();
  }
  store_outputs<MI, BN>(d, smem, tid, wg * 64 * MI, m0, Wp, H, W, out + ((long long)n * K + n0) * HW, [] { __syncthreads(); });
}



template <int WG, bool UNROLL = false, int V2RPT = 0, int MODE = 0, int MI = 0>
void run(int N, int C, int H, int W, int K, const char* name) {
  const int BM = MI ? 128 * MI : 64 * WG, Wp = W + 2, ROWS = BM + 2 * Wp + 2, R = ((ROWS + 7) / 8) * 8 + 1;
  const size_t smem = ((8 * R * 16 + 127) / 128) * 128 + 9 * 8 * (BN + 1) * 16;
  auto kern = MI ? winconv3<(MI ? MI : 1)> : V2RPT ? winconv2<WG, (V2RPT ? V2RPT : 1), MODE> : winconv<WG, UNROLL>;
  if (V2RPT && ROWS > V2RPT * 128 * WG) { printf("%s: rows %d > %d\n", name, ROWS, V2RPT * 128 * WG); return; }
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  const int tiles = (H * Wp + BM - 1) / BM, threads = MI ? 256 : 128 * WG;
  const dim3 grid(N * tiles, K / BN);
  char label[96];
  snprintf(label, sizeof label, "%s %s WG=%d MI=%d", MI ? "v3" : V2RPT ? "v2" : "v1", name, WG, MI);
  measure(label, N, C, H, W, K, grid.x * grid.y, smem, [&](cudaStream_t s, const __half* i, const __half* w, __half* o) {
    kern<<<grid, threads, smem, s>>>(i, w, o, N, C, H, W, K);
  });
}


// v4: warp-specialized. Warpgroup 0 (producer) stages each 32-channel chunk's window and filter
// taps into a ring of S stages (mbarriers full/empty); warpgroups 1-2 (consumers, MI m64
// accumulators each, BM = 128 MI) only wait and issue wgmma; output staged through shared memory.
/// The consumers of v4 and v5: for each 32-channel chunk, wait for its stage (full barrier), issue
/// its nine taps x two k16 steps x MI wgmmas (warpgroup `cw`'s rows of the window), wait for them
/// and free the stage (empty barrier). Sums into d, zeroed first.
template <int MI, int BNT, int S>
__device__ __forceinline__ void consume_window_chunks(float (&d)[MI][BNT / 2], int chunks, unsigned bars, unsigned sbase,
                                                      int stage_bytes, int a_bytes, int R, int Wp, int cw) {
  constexpr int LB = BNT + 1;
  #pragma unroll
  for (int mi = 0; mi < MI; ++mi)
    #pragma unroll
    for (int x = 0; x < BNT / 2; ++x) d[mi][x] = 0.f;
  for (int i = 0; i < chunks; ++i) {
    const int st = i % S;
    mbar_wait(bars + 8 * st, (i / S) & 1);
    const unsigned a_addr = sbase + st * stage_bytes, b_addr = a_addr + a_bytes;
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    const unsigned long long da0 = smem_desc(a_addr + (cw * 64 * MI) * 16, R * 16, 128);
    const unsigned long long db0 = smem_desc(b_addr, LB * 16, 128);
    window_taps<MI, BNT, 2>(d, da0, db0, R, Wp, LB);
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    mbar_arrive(bars + 8 * (S + st));
  }
  #pragma unroll
  for (int mi = 0; mi < MI; ++mi) fence_operands(d[mi]);
}
constexpr int CH4 = 32;
template <int MI, int S, int IDLE = 0, int BNT = 64>
__global__ void __launch_bounds__(384, 1) winconv4(const __half* __restrict__ in, const __half* __restrict__ wt,
    __half* __restrict__ out, int N, int C, int H, int W, int K) {
  constexpr int BM = 128 * MI, BN = BNT, LB = BN + 1, TPT = BN * 4 / 128;
  extern __shared__ __align__(128) unsigned char smem[];
  const int Wp = W + 2, ROWS = BM + 2 * Wp + 2, R = ((ROWS + 7) / 8) * 8 + 1;
  const int a_bytes = ((4 * R * 16 + 127) / 128) * 128, stage_bytes = a_bytes + 9 * 4 * LB * 16;
  const unsigned sbase = (unsigned)__cvta_generic_to_shared(smem);
  const unsigned bars = sbase + S * stage_bytes;  // full[S], empty[S]
  const int tiles = (H * Wp + BM - 1) / BM;
  const int n = blockIdx.x / tiles, m0 = (blockIdx.x % tiles) * BM, n0 = blockIdx.y * BN;
  const int tid = threadIdx.x, wg = tid / 128;
  const long long HW = (long long)H * W;
  const int chunks = C / CH4;
  if (tid == 0) for (int i = 0; i < S; ++i) { mbar_init(bars + 8 * i, 128); mbar_init(bars + 8 * (S + i), 256); }
  __syncthreads();
  if (wg == 0) {
    for (int i = 0; i < chunks; ++i) {
      const int st = i % S, c0 = i * CH4;
      mbar_wait(bars + 8 * (S + st), ((i / S) & 1) ^ 1);
      unsigned char* As = smem + st * stage_bytes;
      unsigned char* Bs = As + a_bytes;
      if (IDLE) { mbar_arrive(bars + 8 * st); continue; }
      {  // filters first: their loads are independent of the rows below
        uint4 bv[TPT][9];
        #pragma unroll
        for (int q = 0; q < TPT; ++q) {
          const int task = tid + q * 128, j = task % 4, nn = task / 4;
          const uint4* src = reinterpret_cast<const uint4*>(wt + ((long long)(n0 + nn) * C + c0 + 8 * j) * 9);
          #pragma unroll
          for (int x = 0; x < 9; ++x) bv[q][x] = __ldg(src + x);
        }
        #pragma unroll
        for (int q = 0; q < TPT; ++q) {
          const int task = tid + q * 128, j = task % 4, nn = task / 4;
          store_filter_taps(bv[q], Bs + (j * LB + nn) * 16, 4 * LB * 16);
        }
      }
      for (int e = tid; e < ROWS; e += 128) {
        const int ext = m0 + e, hp = ext / Wp, wp = ext - hp * Wp, h = hp - 1, w = wp - 1;
        const bool ok = h >= 0 && h < H && w >= 0 && w < W;
        const unsigned short* src = reinterpret_cast<const unsigned short*>(in + ((long long)n * C + c0) * HW + (long long)h * W + w);
        unsigned short v[32];
        #pragma unroll
        for (int c = 0; c < 32; ++c) v[c] = ok ? __ldg(src + c * HW) : 0;
        #pragma unroll
        for (int j = 0; j < 4; ++j) {
          *reinterpret_cast<uint4*>(As + (j * R + e) * 16) = pack8(v + 8 * j);
        }
      }
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      mbar_arrive(bars + 8 * st);
    }
    return;
  }
  const int cw = wg - 1;  // consumer warpgroup
  float d[MI][BN / 2];
  consume_window_chunks<MI, BN, S>(d, chunks, bars, sbase, stage_bytes, a_bytes, R, Wp, cw);
  asm volatile("bar.sync 1, 256;\n" ::: "memory");  // every consumer's wgmmas retired: the ring is free
  store_outputs<MI, BN>(d, smem, tid - 128, cw * 64 * MI, m0, Wp, H, W, out + ((long long)n * K + n0) * HW,
                        [] { asm volatile("bar.sync 1, 256;\n" ::: "memory"); });
}


// v5: v4 with the window's input rows fetched by cp.async.bulk (one 1-D copy per channel of the
// aligned span of rows the window reads, double-buffered staging) and transposed shared -> shared
// by the producer warpgroup.
template <int MI, int S>
__global__ void __launch_bounds__(384, 1) winconv5(const __half* __restrict__ in, const __half* __restrict__ wt,
    __half* __restrict__ out, int N, int C, int H, int W, int K) {
  constexpr int BM = 128 * MI, LB = BN + 1;
  extern __shared__ __align__(128) unsigned char smem[];
  const int Wp = W + 2, ROWS = BM + 2 * Wp + 2, R = ((ROWS + 7) / 8) * 8 + 1;
  const int a_bytes = ((4 * R * 16 + 127) / 128) * 128, stage_bytes = a_bytes + 9 * 4 * LB * 16;
  const int hrows = (ROWS + Wp - 1) / Wp + 1;
  const int SLOT = ((hrows * W * 2 + 32) + 15) / 16 * 16;
  const unsigned sbase = (unsigned)__cvta_generic_to_shared(smem);
  const unsigned stg = sbase + S * stage_bytes;           // 2 staging buffers of 32 SLOTs
  const unsigned bars = stg + 2 * 32 * SLOT;              // full[S], empty[S], staged[2]
  const int tiles = (H * Wp + BM - 1) / BM;
  const int n = blockIdx.x / tiles, m0 = (blockIdx.x % tiles) * BM, n0 = blockIdx.y * BN;
  const int tid = threadIdx.x, wg = tid / 128;
  const long long HW = (long long)H * W;
  const int chunks = C / CH4;
  // Input rows the window reads, clamped to the image.
  const int h_lo = max(m0 / Wp - 1, 0), h_hi = min((m0 + ROWS - 1) / Wp - 1, H - 1);
  const int span = h_hi >= h_lo ? (h_hi - h_lo + 1) * W : 0;
  if (tid == 0) {
    for (int i = 0; i < S; ++i) { mbar_init(bars + 8 * i, 128); mbar_init(bars + 8 * (S + i), 256); }
    mbar_init(bars + 8 * (2 * S), 1); mbar_init(bars + 8 * (2 * S + 1), 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (wg == 0) {
    auto issue = [&](int i) {
      if (tid != 0 || span == 0) return;
      const int b = i % 2;
      unsigned total = 0;
      for (int c = 0; c < 32; ++c) {
        const long long g0 = ((long long)n * C + i * CH4 + c) * HW + (long long)h_lo * W;
        const long long b0 = g0 * 2, a0 = b0 & ~15LL, end = (b0 + span * 2 + 15) & ~15LL;
        total += (unsigned)(end - a0);
      }
      mbar_expect(bars + 8 * (2 * S + b), total);
      for (int c = 0; c < 32; ++c) {
        const long long g0 = ((long long)n * C + i * CH4 + c) * HW + (long long)h_lo * W;
        const long long b0 = g0 * 2, a0 = b0 & ~15LL, end = (b0 + span * 2 + 15) & ~15LL;
        bulk_copy(stg + (b * 32 + c) * SLOT, reinterpret_cast<const unsigned char*>(in) + a0, (unsigned)(end - a0), bars + 8 * (2 * S + b));
      }
    };
    issue(0);
    const unsigned k16 = (unsigned)((HW * 2) & 15);
    for (int i = 0; i < chunks; ++i) {
      const int st = i % S, c0 = i * CH4, b = i % 2;
      if (i + 1 < chunks) issue(i + 1);
      uint4 bv[2][9];
      #pragma unroll
      for (int q = 0; q < 2; ++q) {
        const int task = tid + q * 128, j = task % 4, nn = task / 4;
        const uint4* src = reinterpret_cast<const uint4*>(wt + ((long long)(n0 + nn) * C + c0 + 8 * j) * 9);
        #pragma unroll
        for (int x = 0; x < 9; ++x) bv[q][x] = __ldg(src + x);
      }
      mbar_wait(bars + 8 * (S + st), ((i / S) & 1) ^ 1);
      unsigned char* As = smem + st * stage_bytes;
      unsigned char* Bs = As + a_bytes;
      if (span) mbar_wait(bars + 8 * (2 * S + b), (i / 2) & 1);
      const unsigned s0 = (unsigned)(((((long long)n * C + c0) * HW + (long long)h_lo * W) * 2) & 15);
      const unsigned char* sb = smem + (stg - sbase) + b * 32 * SLOT;
      for (int e = tid; e < ROWS; e += 128) {
        const int ext = m0 + e, hp = ext / Wp, wp = ext - hp * Wp, h = hp - 1, w = wp - 1;
        const bool ok = h >= 0 && h < H && w >= 0 && w < W;
        const int pix = ((h - h_lo) * W + w) * 2;
        unsigned short v[32];
        #pragma unroll
        for (int c = 0; c < 32; ++c)
          v[c] = ok ? *reinterpret_cast<const unsigned short*>(sb + c * SLOT + ((s0 + c * k16) & 15) + pix) : 0;
        #pragma unroll
        for (int j = 0; j < 4; ++j) {
          *reinterpret_cast<uint4*>(As + (j * R + e) * 16) = pack8(v + 8 * j);
        }
      }
      #pragma unroll
      for (int q = 0; q < 2; ++q) {
        const int task = tid + q * 128, j = task % 4, nn = task / 4;
        store_filter_taps(bv[q], Bs + (j * LB + nn) * 16, 4 * LB * 16);
      }
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      mbar_arrive(bars + 8 * st);
      asm volatile("bar.sync 2, 128;\n" ::: "memory");  // staging buffer b read by every producer
    }
    return;
  }
  const int cw = wg - 1;
  float d[MI][BN / 2];
  consume_window_chunks<MI, BN, S>(d, chunks, bars, sbase, stage_bytes, a_bytes, R, Wp, cw);
  asm volatile("bar.sync 1, 256;\n" ::: "memory");
  store_outputs<MI, BN>(d, smem, tid - 128, cw * 64 * MI, m0, Wp, H, W, out + ((long long)n * K + n0) * HW,
                        [] { asm volatile("bar.sync 1, 256;\n" ::: "memory"); });
}

template <int MI, int S, int V = 4, int IDLE = 0, int BNT = 64>
void run4(int N, int C, int H, int W, int K, const char* name) {
  const int BM = 128 * MI, Wp = W + 2, ROWS = BM + 2 * Wp + 2, R = ((ROWS + 7) / 8) * 8 + 1;
  const int BN = BNT;
  const size_t stage = ((4 * R * 16 + 127) / 128) * 128 + 9 * 4 * (BN + 1) * 16;
  const int hrows = (ROWS + Wp - 1) / Wp + 1, SLOT = ((hrows * W * 2 + 32) + 15) / 16 * 16;
  const size_t smem = V == 5 ? std::max<size_t>(S * stage + 2 * 32 * SLOT, (size_t)BN * (BM + 8) * 2) + 16 * S + 32
                             : std::max<size_t>(S * stage, (size_t)BN * (BM + 8) * 2) + 16 * S + 16;
  if (smem > 227 * 1024) { printf("%s MI=%d S=%d: smem %zu too big\n", name, MI, S, smem); return; }
  auto kern = V == 5 ? winconv5<MI, S> : winconv4<MI, S, IDLE, BNT>;
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  const int tiles = (H * Wp + BM - 1) / BM;
  const dim3 grid(N * tiles, K / BN);
  char label[96];
  snprintf(label, sizeof label, "v%d%s %s n%d MI=%d S=%d", V, IDLE ? " copies skipped" : "", name, BNT, MI, S);
  measure(label, N, C, H, W, K, grid.x * grid.y, smem, [&](cudaStream_t s, const __half* i, const __half* w, __half* o) {
    kern<<<grid, 384, smem, s>>>(i, w, o, N, C, H, W, K);
  });
}

// v6: the window in NCHW's own order, read MN-major (wgmma's transpose bit): [8-pixel block][16
// channels][8 pixels], rows of pitch WP (a multiple of 8, > W: a row's right padding is the next
// row's left zero). Copied with cp.async 16 bytes at a time (W % 8 == 0), S - 1 stages ahead; the
// producer adds two copies shifted by +1 and -1 pixel (funnel shifts), so that every tap is a
// 16-byte aligned descriptor into one of the three.
constexpr int CH6 = 16;
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst), "l"(src) : "memory");
}
template <int MI, int S, int BNT, int SWAP, int SKIP = 0>
__global__ void __launch_bounds__(384, 1) winconv6(const __half* __restrict__ in, const __half* __restrict__ wt,
    __half* __restrict__ out, int N, int C, int H, int W, int K) {
  constexpr int BM = 128 * MI, BN = BNT, LB = BN + 1, TPT = BN * 2 / 128;
  extern __shared__ __align__(128) unsigned char smem[];
  const int WP = (W + 1 + 7) / 8 * 8, WB = WP / 8;       // pitch and 8-pixel blocks a row
  const int OROWS = BM / WP;                              // output rows a block (BM % WP == 0)
  const int IROWS = OROWS + 2, BLOCKS = IROWS * WB + 2;   // + a zero block before and after
  const int copy_bytes = BLOCKS * CH6 * 16;               // one copy of the window
  const int stage_bytes = 3 * copy_bytes + 9 * 2 * LB * 16;
  const unsigned sbase = (unsigned)__cvta_generic_to_shared(smem);
  const unsigned bars = sbase + S * stage_bytes;
  const int tiles = H / OROWS;                            // H % OROWS == 0 here
  const int n = blockIdx.x / tiles, p0 = (blockIdx.x % tiles) * OROWS, n0 = blockIdx.y * BN;
  const int tid = threadIdx.x, wg = tid / 128;
  const long long HW = (long long)H * W;
  const int chunks = C / CH6;
  if (tid == 0) for (int i = 0; i < S; ++i) { mbar_init(bars + 8 * i, 128); mbar_init(bars + 8 * (S + i), 256); }
  // Zero every stage's copies once: padding blocks and rows outside the image stay zero.
  for (int x = tid; x < S * stage_bytes / 16; x += 384) reinterpret_cast<uint4*>(smem)[x] = make_uint4(0, 0, 0, 0);
  __syncthreads();
  if (wg == 0) {
    // Copies of chunk i into stage i % S: block b = 1 + row * WB + wb, channel c -> 16 bytes.
    auto issue = [&](int i) {
      const unsigned w0 = sbase + (i % S) * stage_bytes;
      const int total = IROWS * (W / 8) * CH6;
      for (int x = tid; x < total; x += 128) {
        const int c = x % CH6, rest = x / CH6, wb = rest % (W / 8), row = rest / (W / 8);
        const int h = p0 - 1 + row;
        if (h < 0 || h >= H) continue;
        cp_async16(w0 + ((1 + row * WB + wb) * CH6 + c) * 16,
                   in + (((long long)n * C + i * CH6 + c) * H + h) * W + wb * 8);
      }
      asm volatile("cp.async.commit_group;" ::: "memory");
    };
    for (int i = 0; i < S - 1; ++i) { if (i < chunks) issue(i); else asm volatile("cp.async.commit_group;" ::: "memory"); }
    for (int i = 0; i < chunks; ++i) {
      const int st = i % S, c0 = i * CH6;
      uint4 bv[TPT][9];
      #pragma unroll
      for (int q = 0; q < TPT; ++q) {
        const int task = tid + q * 128, j = task % 2, nn = task / 2;
        const uint4* src = reinterpret_cast<const uint4*>(wt + ((long long)(n0 + nn) * C + c0 + 8 * j) * 9);
        #pragma unroll
        for (int x = 0; x < 9; ++x) bv[q][x] = SKIP >= 1 ? make_uint4(x, q, 0, 0) : __ldg(src + x);
      }
      asm volatile("cp.async.wait_group %0;" :: "n"(S - 2) : "memory");
      asm volatile("bar.sync 2, 128;" ::: "memory");  // every producer's copies of chunk i landed
      unsigned char* w0 = smem + st * stage_bytes;
      unsigned char* wplus = w0 + copy_bytes;   // [m] = w0[m + 1]
      unsigned char* wminus = w0 + 2 * copy_bytes;  // [m] = w0[m - 1]
      for (int x = tid; x < (SKIP >= 2 ? 0 : (BLOCKS - 2) * CH6); x += 128) {
        const int b = 1 + x / CH6, c = x % CH6;
        const uint4 prev = *reinterpret_cast<const uint4*>(w0 + ((b - 1) * CH6 + c) * 16);
        const uint4 cur = *reinterpret_cast<const uint4*>(w0 + (b * CH6 + c) * 16);
        const uint4 next = *reinterpret_cast<const uint4*>(w0 + ((b + 1) * CH6 + c) * 16);
        uint4 p, m;
        p.x = __funnelshift_r(cur.x, cur.y, 16); p.y = __funnelshift_r(cur.y, cur.z, 16);
        p.z = __funnelshift_r(cur.z, cur.w, 16); p.w = __funnelshift_r(cur.w, next.x, 16);
        m.x = __funnelshift_l(prev.w, cur.x, 16); m.y = __funnelshift_l(cur.x, cur.y, 16);
        m.z = __funnelshift_l(cur.y, cur.z, 16); m.w = __funnelshift_l(cur.z, cur.w, 16);
        *reinterpret_cast<uint4*>(wplus + (b * CH6 + c) * 16) = p;
        *reinterpret_cast<uint4*>(wminus + (b * CH6 + c) * 16) = m;
      }
      unsigned char* Bs = w0 + 3 * copy_bytes;
      #pragma unroll
      for (int q = 0; q < (SKIP >= 1 ? 0 : TPT); ++q) {
        const int task = tid + q * 128, j = task % 2, nn = task / 2;
        store_filter_taps(bv[q], Bs + (j * LB + nn) * 16, 2 * LB * 16);
      }
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      mbar_arrive(bars + 8 * st);
      // The chunk S - 1 ahead goes into the stage the consumers finish next.
      if (i + S - 1 < chunks) {
        mbar_wait(bars + 8 * (S + (i + S - 1) % S), (((i + S - 1) / S) & 1) ^ 1);
        issue(i + S - 1);
      } else {
        asm volatile("cp.async.commit_group;" ::: "memory");
      }
    }
    return;
  }
  const int cw = wg - 1;
  float d[MI][BN / 2];
  #pragma unroll
  for (int mi = 0; mi < MI; ++mi)
    #pragma unroll
    for (int x = 0; x < BN / 2; ++x) d[mi][x] = 0.f;
  // MN-major, no swizzle: 8 k rows of 16 bytes per core matrix; K blocks 128 bytes apart, m blocks 256.
  const unsigned lbo = SWAP ? CH6 * 16 : 128, sbo = SWAP ? 128 : CH6 * 16;
  for (int i = 0; i < chunks; ++i) {
    const int st = i % S;
    mbar_wait(bars + 8 * st, (i / S) & 1);
    const unsigned w0 = sbase + st * stage_bytes, b_addr = w0 + 3 * copy_bytes;
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    const unsigned long long db0 = smem_desc(b_addr, LB * 16, 128);
    #pragma unroll
    for (int t = 0; t < 9; ++t) {
      const int r = t / 3, sx = t % 3;  // sx 0: the -1 copy, 1: w0, 2: the +1 copy
      const unsigned copy = w0 + (sx == 1 ? 0 : sx == 2 ? copy_bytes : 2 * copy_bytes);
      #pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        const unsigned a = copy + ((1 + r * WB + (cw * MI + mi) * 8) * CH6) * 16;
        const unsigned long long da = smem_desc(a, lbo, sbo);
        wgmma_f16<BNT, 1>(d[mi], da, db0 + (unsigned)((t * 2) * LB));
      }
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    mbar_arrive(bars + 8 * (S + st));
  }
  #pragma unroll
  for (int mi = 0; mi < MI; ++mi) fence_operands(d[mi]);
  asm volatile("bar.sync 1, 256;\n" ::: "memory");
  store_outputs<MI, BN>(d, smem, tid - 128, cw * 64 * MI, p0 * WP, WP, H, W, out + ((long long)n * K + n0) * HW,
                        [] { asm volatile("bar.sync 1, 256;\n" ::: "memory"); });
}

template <int MI, int S, int BNT, int SWAP, int SKIP = 0>
void run6(int N, int C, int H, int W, int K, const char* name) {
  constexpr int BM = 128 * MI, BN = BNT;
  const int WP = (W + 1 + 7) / 8 * 8, WB = WP / 8, OROWS = BM / WP, IROWS = OROWS + 2, BLOCKS = IROWS * WB + 2;
  if (BM % WP || H % OROWS || W % 8) { printf("%s: shape not handled by v6\n", name); return; }
  const size_t stage = 3 * (size_t)BLOCKS * CH6 * 16 + 9 * 2 * (BN + 1) * 16;
  const size_t smem = std::max<size_t>(S * stage, (size_t)BN * (BM + 8) * 2) + 16 * S + 16;
  if (smem > 227 * 1024) { printf("%s MI=%d S=%d: smem %zu too big\n", name, MI, S, smem); return; }
  auto kern = winconv6<MI, S, BNT, SWAP, SKIP>;
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  const dim3 grid(N * (H / OROWS), K / BN);
  char label[96];
  snprintf(label, sizeof label, "v6%s %s n%d MI=%d S=%d", SKIP == 1 ? " filters skipped" : SKIP == 2 ? " filters+shifts skipped" : "",
           name, BNT, MI, S);
  measure(label, N, C, H, W, K, grid.x * grid.y, smem, [&](cudaStream_t s, const __half* i, const __half* w, __half* o) {
    kern<<<grid, 384, smem, s>>>(i, w, o, N, C, H, W, K);
  });
}

int main(int argc, char** argv) {
  if (argc > 1) {  // one config, for the profiler: N C H K WG
    int N = atoi(argv[1]), C = atoi(argv[2]), H = atoi(argv[3]), K = atoi(argv[4]), wg = atoi(argv[5]);
    if (wg == 1) run<1>(N, C, H, H, K, "one"); else run<2, true, 1>(N, C, H, H, K, "one");
    return 0;
  }
  // The configurations of benchmarks/RESULTS.md's tables.
  for (int N : {1, 16, 256}) {
    if (N != 256) {
      run<2, true, 1>(N, 64, 56, 56, 64, "l1"); run<2, true, 1>(N, 128, 28, 28, 128, "l5");
      run<2, true, 1>(N, 256, 14, 14, 256, "l8"); run<1, true, 1>(N, 512, 7, 7, 512, "l11");
      run<2, true, 0, 0, 4>(N, 64, 56, 56, 64, "l1"); run<2, true, 0, 0, 2>(N, 128, 28, 28, 128, "l5");
      run<2, true, 0, 0, 1>(N, 256, 14, 14, 256, "l8"); run<2, true, 0, 0, 1>(N, 512, 7, 7, 512, "l11");
    }
    run4<2, 3>(N, 64, 56, 56, 64, "l1"); run4<2, 3, 4, 1>(N, 64, 56, 56, 64, "l1");
    run4<2, 3>(N, 128, 28, 28, 128, "l5"); run4<2, 2, 4, 0, 128>(N, 128, 28, 28, 128, "l5"); run4<2, 2, 4, 1, 128>(N, 128, 28, 28, 128, "l5");
    run4<1, 4>(N, 256, 14, 14, 256, "l8"); run4<1, 4, 4, 1>(N, 256, 14, 14, 256, "l8"); run4<2, 2, 4, 1, 128>(N, 256, 14, 14, 256, "l8");
    run4<1, 4>(N, 512, 7, 7, 512, "l11");
    run4<1, 3, 5>(N, 256, 14, 14, 256, "l8");
    run6<2, 4, 64, 0>(N, 64, 56, 56, 64, "l1"); run6<2, 4, 64, 0, 1>(N, 64, 56, 56, 64, "l1"); run6<2, 4, 64, 0, 2>(N, 64, 56, 56, 64, "l1");
    run6<2, 3, 128, 0>(N, 256, 24, 24, 256, "w24"); run6<2, 3, 128, 0, 1>(N, 256, 24, 24, 256, "w24");
    run6<2, 3, 128, 0, 2>(N, 256, 24, 24, 256, "w24"); run4<2, 2, 4, 0, 128>(N, 256, 24, 24, 256, "w24");
    run4<2, 2, 4, 1, 128>(N, 256, 24, 24, 256, "w24");
  }
  return 0;
}
