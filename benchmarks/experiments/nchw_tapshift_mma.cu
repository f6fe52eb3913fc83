// NCHW convolutions at batch 1 read in place: whole-row windows on a zero-padded pitch, the
// horizontal filter taps applied to the accumulators instead of the input.
//
// An experiment for #11 (twenty-second session; not part of tmap). The batch-1 NCHW layers that
// tmap reads through a relayout prologue pay for a second kernel (1.5-2 us against an allowance
// of 0.7-1.0 us), and the ones it reads in place gather an im2col tile element by element. Here a
// block reads the input as stored (pixels contiguous) and never shifts it:
//   - Output tile: TR whole output rows of one image on a pitch PITCH (a multiple of 8, at least
//     one column more than the row for 3 x 3 filters), times BK filters, over all C channels. The
//     warps split the filters (WARPS_M) and the channels (WARPS_C, 16-channel chunks taken in
//     turn); the channel groups' sums meet in shared memory at the end.
//   - Window: the input rows the tile reads, each on the same pitch with zero columns past the
//     row and zero rows outside the image, copied with cp.async in the widest vectors the row
//     alignment allows (16, 8 or 4 bytes). Stride-2 rows are copied as stored into a staging
//     area, then de-interleaved (even pixels, then odd) by vector reads and byte permutes.
//   - Taps: the product of tap (r, s) is the unshifted window row r times the filters' tap (r, s).
//     Stride 1 keeps three accumulators Y0, Y1, Y2 (one per s); out[x] = Y0[x-1] + Y1[x] + Y2[x+1],
//     the shifts done with one warp shuffle per register pair after the products. The zero pitch
//     columns make every value shifted in at a row end zero, so no masks are needed. Stride 2:
//     out[x] = W0*O[x-1] + W1*E[x] + W2*O[x] with E, O the even and odd pixels (two accumulators).
//   - Filters: KCRS as stored (16 channels x 9 taps of one filter are one 288-byte run, copied
//     in 16-byte vectors); the A fragments of tap (r, s) are gathered from shared memory, two
//     2-byte loads per register.
// mma.sync m16n8k16 (float16 in, float32 sums, float16 out).
//
// History (H100, us per launch, graphs of 20): v1-v2 split the channels over the blocks of a
// thread-block cluster and summed through DSMEM; per-block %globaltimer stamps showed the cluster
// barrier (0.7-1.2 us), the remote reads (0.5-1.1 us) and the last barrier (0.25-0.6 us) costing
// more than the whole allowance, and element-wise stride-2 gathers taking 2-9 us. v3 keeps every
// channel of a tile in one block; v4 (this file) copies in rounds of WARPS_C chunks, the next round
// in flight while this one's products are formed. Figures: benchmarks/RESULTS.md (twenty-second
// session).
//
// Build and run on an sm_90 GPU:
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o nchw_tapshift_mma nchw_tapshift_mma.cu
//   ./nchw_tapshift_mma            (TAPSHIFT_STAMPS=1: also the mean phase times of each block;
//                                   TAPSHIFT_CHECK_ONLY=1: one checked launch each, for a profiler)
// -DTAPSHIFT_A_LDMATRIX (timing only, wrong outputs): the A fragments read by ldmatrix instead of
// gathered, to price the gather.
// Every configuration is checked against a direct convolution on the GPU (float32) on fresh random
// inputs with the output poisoned (NaN) first, then timed as 20 launches in a CUDA graph (median of
// 15 replays after 3, us per launch).
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include "graph_timing.cuh"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>


template <int C_, int H_, int W_, int K_, int R_, int ST_, int MI_, int WARPS_M_, int TR_, int WARPS_C_>
struct Cfg {
  static constexpr int C = C_, H = H_, W = W_, K = K_, R = R_, ST = ST_, PAD = R_ / 2;
  static constexpr int HO = (H + 2 * PAD - R) / ST + 1, WO = (W + 2 * PAD - R) / ST + 1;
  static constexpr int MI = MI_, WARPS_M = WARPS_M_, TR = TR_, WARPS_C = WARPS_C_;
  static constexpr int BK = 16 * MI * WARPS_M;                       // filters a block
  static constexpr bool SHIFTS = R == 3;
  static constexpr int PITCH = (WO + (SHIFTS ? 1 : 0) + 7) / 8 * 8;  // output and window pitch
  static constexpr int NT = (HO + TR - 1) / TR;                       // row tiles an image
  static constexpr int NJ = TR * PITCH / 8;                           // n8 tiles a warp
  static constexpr int NTILE = TR * PITCH;
  static constexpr int CS = 16;                                       // channels a chunk
  static constexpr int CHUNKS = C / CS;
  static constexpr int RR = R * R;
  static constexpr bool EVEN_ROWS = ST == 2 && R == 1;                // 1x1 stride 2: rows 2p only
  static constexpr int WCOLS = (ST == 2 && R == 3) ? 2 * PITCH : PITCH;
  static constexpr int ROWS = EVEN_ROWS ? TR : ST * (TR - 1) + R;
  static constexpr int CHS0 = ROWS * WCOLS;
  static constexpr int CHS = ((CHS0 / 8) % 2 == 1) ? CHS0 : CHS0 + 8;  // odd 16-byte units: no ldmatrix conflicts
  static constexpr int FS = CS * RR + 8;                              // filter row pitch in shared memory
  static constexpr int FIL = BK * FS;                                 // one chunk of filters
  static constexpr int THREADS = 32 * WARPS_M * WARPS_C;
  static constexpr int NACC = R == 1 ? 1 : (ST == 1 ? 3 : 2);
  // Copies: stride 1 straight into the window; stride 2 rows as stored into a staging area.
  static constexpr int VEC = W % 8 == 0 ? 8 : W % 4 == 0 ? 4 : W % 2 == 0 ? 2 : 1;
  static constexpr int SP = (W + 7) / 8 * 8;                          // staging row pitch
  static constexpr size_t WIN_BYTES = (size_t)C * CHS * 2, FIL_BYTES = (size_t)CHUNKS * FIL * 2;
  static constexpr size_t STAGE_BYTES = ST == 2 ? (size_t)C * ROWS * SP * 2 : 0;
  static constexpr size_t SMEM_LOAD = WIN_BYTES + FIL_BYTES + STAGE_BYTES;
  static constexpr size_t SMEM_RED = WARPS_C > 1 ? (size_t)WARPS_C * BK * NTILE * 4 : 0;
  static constexpr size_t SMEM = SMEM_LOAD > SMEM_RED ? SMEM_LOAD : SMEM_RED;
  static_assert(K % BK == 0 && C % CS == 0 && CHUNKS % WARPS_C == 0, "tiling");
  static_assert(PITCH % 8 == 0 && (C * RR) % 8 == 0, "alignment");
  static_assert(VEC >= 2, "rows of odd width are not copied by this experiment");
  static_assert(ST == 1 || W % 2 == 0, "stride 2 needs even rows");
  static_assert(SMEM <= 227 * 1024, "shared memory");
};

__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
template <int BYTES>
__device__ __forceinline__ void cp_async(void* dst, const void* src, bool valid) {
  const int n = valid ? BYTES : 0;  // 0: zero fill
  if constexpr (BYTES == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(n) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_u32(dst)), "l"(src), "n"(BYTES), "r"(n)
                 : "memory");
}
__device__ __forceinline__ unsigned pack2(unsigned short lo, unsigned short hi) { return (unsigned)lo | ((unsigned)hi << 16); }
__device__ __forceinline__ void mma16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Accumulator and window column of tap s. Accumulator 0 is shifted right (out[x] += Y[x-1]), the
// third (stride 1) left; accumulator 1 (or 0 for 1 x 1 filters) is not shifted.
template <class P>
__device__ constexpr int acc_of(int s) {
  return P::R == 1 ? 0 : (P::ST == 1 ? s : (s == 0 ? 0 : 1));
}
template <class P>
__device__ constexpr bool odd_of(int s) {
  return P::ST == 2 && P::R == 3 && s != 1;
}

// Optional phase stamps (%globaltimer, ns) of each block's thread 0.
constexpr int STAMPS = 7;
__device__ unsigned long long* g_stamps = nullptr;
__device__ __forceinline__ void stamp(int slot) {
  if (g_stamps != nullptr && threadIdx.x == 0) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    const int b = blockIdx.x + gridDim.x * blockIdx.z;
    g_stamps[b * STAMPS + slot] = t;
  }
}

template <class P>
__global__ void __launch_bounds__(P::THREADS) conv_tapshift(const __half* __restrict__ x, const __half* __restrict__ wt,
                                                            __half* __restrict__ out) {
  extern __shared__ __align__(16) unsigned char smem[];
  unsigned short* win = reinterpret_cast<unsigned short*>(smem);                       // [C][CHS]
  unsigned short* fil = reinterpret_cast<unsigned short*>(smem + P::WIN_BYTES);        // [CHUNKS][BK][FS]
  unsigned short* stage = reinterpret_cast<unsigned short*>(smem + P::WIN_BYTES + P::FIL_BYTES);  // [C][ROWS][SP]
  stamp(0);
  const int kt = blockIdx.x / P::NT, rt = blockIdx.x % P::NT, img = blockIdx.z;
  const int k0 = kt * P::BK, p0 = rt * P::TR;
  const unsigned short* X = reinterpret_cast<const unsigned short*>(x) + (size_t)img * P::C * P::H * P::W;
  const unsigned short* Wt = reinterpret_cast<const unsigned short*>(wt);

  // Copies in rounds of WARPS_C chunks (one a channel group), one cp.async group a round: the
  // next round is in flight while this one's products are formed.
  constexpr int ROUNDS = P::CHUNKS / P::WARPS_C, RCH = P::WARPS_C * P::CS;  // channels a round
  constexpr int RUN16 = P::CS * P::RR * 2 / 16;  // 16-byte vectors of one filter's chunk
  auto in_row = [&](int wr) { return P::EVEN_ROWS ? 2 * (p0 + wr) : P::ST * p0 - P::PAD + wr; };
  auto load_round = [&](int rd) {
    for (int i = threadIdx.x; i < P::WARPS_C * P::BK * RUN16; i += P::THREADS) {
      const int v = i % RUN16, kl = i / RUN16 % P::BK, ch = rd * P::WARPS_C + i / (RUN16 * P::BK);
      cp_async<16>(fil + ch * P::FIL + kl * P::FS + v * 8,
                   Wt + ((size_t)(k0 + kl) * P::C + ch * P::CS) * P::RR + v * 8, true);
    }
    // Stride 1 straight into the window, stride 2 into the staging rows.
    constexpr int NV = (P::ST == 1 ? P::PITCH : P::SP) / P::VEC;
    for (int i = threadIdx.x; i < RCH * P::ROWS * NV; i += P::THREADS) {
      const int v = i % NV, wr = i / NV % P::ROWS, c = rd * RCH + i / (NV * P::ROWS);
      const int y = in_row(wr), xx = v * P::VEC;
      const bool ok = y >= 0 && y < P::H && xx < P::W;
      unsigned short* dst = P::ST == 1 ? win + c * P::CHS + wr * P::WCOLS + xx : stage + (c * P::ROWS + wr) * P::SP + xx;
      cp_async<P::VEC * 2>(dst, ok ? X + ((size_t)c * P::H + y) * P::W + xx : X, ok);
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  };
  // Stride 2: VEC staged pixels -> VEC/2 even at x0, VEC/2 odd at PITCH + x0.
  auto deinterleave_round = [&](int rd) {
    constexpr int GP = P::VEC / 2, NG = P::PITCH / GP;
    for (int i = threadIdx.x; i < RCH * P::ROWS * NG; i += P::THREADS) {
      const int gq = i % NG, wr = i / NG % P::ROWS, c = rd * RCH + i / (NG * P::ROWS);
      const int x0 = gq * GP;
      unsigned short* row = win + c * P::CHS + wr * P::WCOLS;
      const unsigned short* src = stage + (c * P::ROWS + wr) * P::SP + 2 * x0;
      const bool ok = 2 * x0 < P::SP;  // past the staged row: zeros (the staged row is zero past W)
      if constexpr (GP == 4) {
        uint4 v = ok ? *reinterpret_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint2*>(row + x0) = make_uint2(__byte_perm(v.x, v.y, 0x5410), __byte_perm(v.z, v.w, 0x5410));
        if constexpr (P::R == 3)
          *reinterpret_cast<uint2*>(row + P::PITCH + x0) =
              make_uint2(__byte_perm(v.x, v.y, 0x7632), __byte_perm(v.z, v.w, 0x7632));
      } else if constexpr (GP == 2) {
        uint2 v = ok ? *reinterpret_cast<const uint2*>(src) : make_uint2(0, 0);
        *reinterpret_cast<unsigned*>(row + x0) = __byte_perm(v.x, v.y, 0x5410);
        if constexpr (P::R == 3) *reinterpret_cast<unsigned*>(row + P::PITCH + x0) = __byte_perm(v.x, v.y, 0x7632);
      } else {
        const unsigned v = ok ? *reinterpret_cast<const unsigned*>(src) : 0u;
        row[x0] = (unsigned short)(v & 0xFFFF);
        if constexpr (P::R == 3) row[P::PITCH + x0] = (unsigned short)(v >> 16);
      }
    }
  };

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int wm = warp % P::WARPS_M, wc = warp / P::WARPS_M;
  float acc[P::NACC][P::MI][P::NJ][4];
#pragma unroll
  for (int a = 0; a < P::NACC; ++a)
#pragma unroll
    for (int mi = 0; mi < P::MI; ++mi)
#pragma unroll
      for (int nj = 0; nj < P::NJ; ++nj)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[a][mi][nj][e] = 0.f;

  load_round(0);
  stamp(1);
#pragma unroll 1
  for (int rd = 0; rd < ROUNDS; ++rd) {
    if (rd + 1 < ROUNDS) {
      load_round(rd + 1);
      asm volatile("cp.async.wait_group 1;\n" ::: "memory");
    } else {
      asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    }
    __syncthreads();
    if (rd == 0) stamp(2);
    if constexpr (P::ST == 2) {
      deinterleave_round(rd);
      __syncthreads();
    }
    if (rd == 0) stamp(3);
    const int ch = rd * P::WARPS_C + wc;
    const unsigned short* F = fil + ch * P::FIL + (wm * 16 * P::MI) * P::FS;
    const unsigned short* Wn = win + ch * P::CS * P::CHS;
#pragma unroll
    for (int r = 0; r < P::R; ++r) {
      // B fragments of window row r (even and odd columns for stride-2 3 x 3 filters).
      unsigned b[2][P::NJ][2];
#pragma unroll
      for (int cb = 0; cb < ((P::ST == 2 && P::R == 3) ? 2 : 1); ++cb)
#pragma unroll
        for (int nj = 0; nj < P::NJ; nj += 2) {
          const int jl = (nj + 1 < P::NJ) ? nj + (lane / 16) : nj;  // lanes 16-31: the next n8 tile
          const int n = jl * 8, t = n / P::PITCH, x0 = n % P::PITCH;
          const int wr = P::EVEN_ROWS ? t : P::ST * t + r;
          const unsigned short* row = Wn + (lane % 16) * P::CHS + wr * P::WCOLS + cb * P::PITCH + x0;
          if (nj + 1 < P::NJ) {
            asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                         : "=r"(b[cb][nj][0]), "=r"(b[cb][nj][1]), "=r"(b[cb][nj + 1][0]), "=r"(b[cb][nj + 1][1])
                         : "r"(smem_u32(row)));
          } else {
            asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                         : "=r"(b[cb][nj][0]), "=r"(b[cb][nj][1])
                         : "r"(smem_u32(row)));
          }
        }
      // A fragments of the row's R taps, then the products.
      unsigned a[P::R][P::MI][4];
#pragma unroll
      for (int s = 0; s < P::R; ++s)
#pragma unroll
        for (int mi = 0; mi < P::MI; ++mi) {
          const int tap = r * P::R + s;
          const unsigned short* f0 = F + (mi * 16 + g) * P::FS + tap;
          const unsigned short* f8 = f0 + 8 * P::FS;
#ifdef TAPSHIFT_A_LDMATRIX
          // Timing only (wrong products): one ldmatrix.x4 from 16-byte rows, as if the filters of
          // a tap had been laid out K-major, to price the gather below.
          (void)f8;
          const unsigned short* rowp = F + (mi * 16 + lane % 16) * P::FS + (lane / 16) * 8 + (tap % 2) * 16;
          asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                       : "=r"(a[s][mi][0]), "=r"(a[s][mi][1]), "=r"(a[s][mi][2]), "=r"(a[s][mi][3])
                       : "r"(smem_u32(rowp)));
#else
          const int c0 = 2 * q * P::RR, c1 = (2 * q + 1) * P::RR, c8 = (2 * q + 8) * P::RR, c9 = (2 * q + 9) * P::RR;
          a[s][mi][0] = pack2(f0[c0], f0[c1]);
          a[s][mi][1] = pack2(f8[c0], f8[c1]);
          a[s][mi][2] = pack2(f0[c8], f0[c9]);
          a[s][mi][3] = pack2(f8[c8], f8[c9]);
#endif
        }
#pragma unroll
      for (int s = 0; s < P::R; ++s)
#pragma unroll
        for (int mi = 0; mi < P::MI; ++mi)
#pragma unroll
          for (int nj = 0; nj < P::NJ; ++nj) mma16816(acc[acc_of<P>(s)][mi][nj], a[s][mi], b[odd_of<P>(s) ? 1 : 0][nj]);
    }
  }
  stamp(4);

  // The accumulators summed, shifted: out[x] = Yr[x-1] + Y[x] + Yl[x+1]; then the channel groups.
  if constexpr (P::WARPS_C > 1) __syncthreads();  // the window and filters are no longer read
  float* red = reinterpret_cast<float*>(smem);  // [WARPS_C][BK][NTILE]
  __half* O = out + ((size_t)img * P::K + k0) * P::HO * P::WO;
#pragma unroll
  for (int mi = 0; mi < P::MI; ++mi)
#pragma unroll
    for (int nj = 0; nj < P::NJ; ++nj)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        constexpr int A0 = P::NACC == 1 ? 0 : 1;
        float e = acc[A0][mi][nj][2 * h], o = acc[A0][mi][nj][2 * h + 1];
        if constexpr (P::NACC >= 2) {  // right shift of accumulator 0
          const float give = (q == 3) ? (nj > 0 ? acc[0][mi][nj > 0 ? nj - 1 : 0][2 * h + 1] : 0.f) : acc[0][mi][nj][2 * h + 1];
          const float got = __shfl_sync(0xffffffffu, give, q == 0 ? lane + 3 : lane - 1);
          e += (q == 0 && nj == 0) ? 0.f : got;
          o += acc[0][mi][nj][2 * h];
        }
        if constexpr (P::NACC == 3) {  // left shift of accumulator 2
          const float give = (q == 0) ? (nj + 1 < P::NJ ? acc[2][mi][nj + 1 < P::NJ ? nj + 1 : nj][2 * h] : 0.f)
                                      : acc[2][mi][nj][2 * h];
          const float got = __shfl_sync(0xffffffffu, give, q == 3 ? lane - 3 : lane + 1);
          e += acc[2][mi][nj][2 * h + 1];
          o += (q == 3 && nj + 1 == P::NJ) ? 0.f : got;
        }
        const int kl = wm * 16 * P::MI + mi * 16 + g + 8 * h, n = nj * 8 + 2 * q;
        if constexpr (P::WARPS_C > 1) {
          *reinterpret_cast<float2*>(&red[(wc * P::BK + kl) * P::NTILE + n]) = make_float2(e, o);
        } else {
          const int t = n / P::PITCH, xx = n % P::PITCH;
          if (p0 + t < P::HO) {
            __half* dst = O + ((size_t)kl * P::HO + p0 + t) * P::WO + xx;
            if (xx < P::WO) dst[0] = __float2half(e);
            if (xx + 1 < P::WO) dst[1] = __float2half(o);
          }
        }
      }
  if constexpr (P::WARPS_C > 1) {
    __syncthreads();
    stamp(5);
    for (int i4 = threadIdx.x; i4 < P::BK * P::NTILE / 4; i4 += P::THREADS) {
      const int i = 4 * i4, kl = i / P::NTILE, n = i % P::NTILE, t = n / P::PITCH, xx = n % P::PITCH;
      if (xx >= P::WO || p0 + t >= P::HO) continue;
      float4 sum = *reinterpret_cast<const float4*>(&red[i]);
#pragma unroll
      for (int j = 1; j < P::WARPS_C; ++j) {
        const float4 v = *reinterpret_cast<const float4*>(&red[j * P::BK * P::NTILE + i]);
        sum.x += v.x; sum.y += v.y; sum.z += v.z; sum.w += v.w;
      }
      __half* dst = O + ((size_t)kl * P::HO + p0 + t) * P::WO + xx;
      const float f[4] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (xx + e < P::WO) dst[e] = __float2half(f[e]);
    }
  }
  stamp(6);
}
__global__ void refconv(const __half* in, const __half* wt, float* out, int C, int H, int W, int K, int R, int ST,
                        int HO, int WO) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= (long long)K * HO * WO) return;
  const int xo = i % WO, yo = i / WO % HO, k = i / ((long long)WO * HO);
  const int pad = R / 2;
  float s = 0;
  for (int c = 0; c < C; ++c)
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < R; ++t) {
        const int y = yo * ST + r - pad, xx = xo * ST + t - pad;
        if (y < 0 || y >= H || xx < 0 || xx >= W) continue;
        s += __half2float(in[((long long)c * H + y) * W + xx]) * __half2float(wt[((k * C + c) * R + r) * R + t]);
      }
  out[i] = s;
}

template <class P>
void run(const char* label) {
  const size_t ni = (size_t)P::C * P::H * P::W, nw = (size_t)P::K * P::C * P::RR, no = (size_t)P::K * P::HO * P::WO;
  std::vector<__half> hi(ni), hw(nw);
  std::mt19937 rng(20261126);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto& v : hi) v = __float2half(u(rng));
  for (auto& v : hw) v = __float2half(u(rng));
  __half *di, *dw, *dout;
  float* dref;
  CK(cudaMalloc(&di, ni * 2));
  CK(cudaMalloc(&dw, nw * 2));
  CK(cudaMalloc(&dout, no * 2));
  CK(cudaMalloc(&dref, no * 4));
  CK(cudaMemcpy(di, hi.data(), ni * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dw, hw.data(), nw * 2, cudaMemcpyHostToDevice));
  CK(cudaMemset(dout, 0xFF, no * 2));  // poison: NaN
  refconv<<<(unsigned)((no + 255) / 256), 256>>>(di, dw, dref, P::C, P::H, P::W, P::K, P::R, P::ST, P::HO, P::WO);
  CK(cudaFuncSetAttribute(conv_tapshift<P>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)P::SMEM));
  const dim3 grid(P::K / P::BK * P::NT, 1, 1);
  auto launch = [&](cudaStream_t s) {
    conv_tapshift<P><<<grid, P::THREADS, P::SMEM, s>>>(di, dw, dout);
  };
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  launch(s);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  std::vector<__half> ho(no);
  std::vector<float> hr(no);
  CK(cudaMemcpy(ho.data(), dout, no * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hr.data(), dref, no * 4, cudaMemcpyDeviceToHost));
  double num = 0, den = 0;
  for (size_t i = 0; i < no; ++i) {
    const double a = __half2float(ho[i]), b = hr[i];
    num += (a - b) * (a - b);
    den += b * b;
  }
  const double rel = std::sqrt(num / den);
  if (getenv("TAPSHIFT_STAMPS")) {
    const int nb = grid.x * grid.y * grid.z;
    unsigned long long* dst;
    CK(cudaMalloc(&dst, nb * STAMPS * 8));
    CK(cudaMemset(dst, 0, nb * STAMPS * 8));
    CK(cudaMemcpyToSymbol(g_stamps, &dst, sizeof(dst)));
    for (int rep = 0; rep < 3; ++rep) {  // the last of three launches (warm caches)
      launch(s);
      CK(cudaDeviceSynchronize());
    }
    unsigned long long* none = nullptr;
    CK(cudaMemcpyToSymbol(g_stamps, &none, sizeof(none)));
    std::vector<unsigned long long> st(nb * STAMPS);
    CK(cudaMemcpy(st.data(), dst, nb * STAMPS * 8, cudaMemcpyDeviceToHost));
    cudaFree(dst);
    unsigned long long t0 = ~0ull, tend = 0, smax = 0;
    double ph[STAMPS] = {0};
    for (int b = 0; b < nb; ++b) {
      const unsigned long long* t = &st[b * STAMPS];
      t0 = std::min(t0, t[0]);
      smax = std::max(smax, t[0]);
      tend = std::max(tend, t[STAMPS - 1]);
      for (int k = 1; k < STAMPS; ++k)
        if (t[k]) ph[k] += (double)(t[k] - (t[k - 1] ? t[k - 1] : t[k - 2])) / nb;
    }
    printf("   stamps (ns): starts spread %llu, first start to last end %llu; mean phases: issue %.0f, wait %.0f, "
           "de-interleave %.0f, products %.0f, sums %.0f, reduce+store %.0f\n",
           smax - t0, tend - t0, ph[1], ph[2], ph[3], ph[4], ph[5], ph[6]);
  }
  if (getenv("TAPSHIFT_CHECK_ONLY")) {  // one launch each (for a profiler)
    printf("%-6s BK=%-3d rows=%-2d wc=%-2d rel_l2 %.2e\n", label, P::BK, P::TR, P::WARPS_C, rel);
    cudaFree(di); cudaFree(dw); cudaFree(dout); cudaFree(dref); CK(cudaStreamDestroy(s));
    return;
  }
  const float us = time_graph_us([&](cudaStream_t st) { launch(st); return cudaGetLastError(); });
  printf("%-6s C=%-3d HxW=%-3dx%-3d K=%-3d %dx%d/%d  BK=%-3d rows=%-2d wc=%-2d grid=%-4d thr=%-3d smem=%-6zu  rel_l2 %.2e %s  %7.2f us\n",
         label, P::C, P::H, P::W, P::K, P::R, P::R, P::ST, P::BK, P::TR, P::WARPS_C, grid.x * grid.y, P::THREADS,
         P::SMEM, rel, (rel < 1e-2 && std::isfinite(rel)) ? "ok  " : "FAIL", us);
  fflush(stdout);
  CK(cudaStreamDestroy(s));
  cudaFree(di);
  cudaFree(dw);
  cudaFree(dout);
  cudaFree(dref);
}

int main() {
  // Cfg<C, H, W, K, R, stride, MI, WARPS_M, TR (output rows a block), WARPS_C (channel groups)>;
  // the best two of each layer in the twenty-second session's calls.
  run<Cfg<64, 56, 56, 64, 3, 1, 1, 2, 1, 4>>("l1");
  run<Cfg<64, 56, 56, 64, 3, 1, 1, 2, 1, 2>>("l1");
  run<Cfg<64, 56, 56, 128, 3, 2, 1, 1, 2, 4>>("l3");
  run<Cfg<64, 56, 56, 128, 3, 2, 1, 2, 2, 4>>("l3");
  run<Cfg<128, 28, 28, 128, 3, 1, 1, 1, 2, 8>>("l5");
  run<Cfg<128, 28, 28, 128, 3, 1, 1, 1, 2, 4>>("l5");
  run<Cfg<128, 28, 28, 256, 3, 2, 1, 1, 2, 8>>("l6");
  run<Cfg<128, 28, 28, 256, 3, 2, 1, 2, 2, 4>>("l6");
  run<Cfg<256, 14, 14, 256, 3, 1, 1, 1, 2, 8>>("l8");
  run<Cfg<256, 14, 14, 256, 3, 1, 1, 1, 2, 16>>("l8");
  run<Cfg<256, 14, 14, 512, 3, 2, 1, 1, 2, 8>>("l9");
  run<Cfg<256, 14, 14, 512, 3, 2, 1, 1, 2, 16>>("l9");
  run<Cfg<256, 14, 14, 512, 1, 2, 1, 1, 2, 8>>("l10");
  run<Cfg<256, 14, 14, 512, 1, 2, 1, 1, 4, 8>>("l10");
  return 0;
}
