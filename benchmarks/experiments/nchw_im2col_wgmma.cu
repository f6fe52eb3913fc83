// Experiment, not part of tmap (nothing builds or links it): NCHW 3 x 3 convolutions (stride 1,
// padding 1, W % 8 == 0, C * 9 a multiple of the stage's KC; float16 in, float32 sums, float16 out) with the KCRS
// filters read in place and the input's im2col tile built in shared memory, so that neither
// operand is transposed anywhere (v7). Measured on the H100 on 2026-11-26 (benchmarks/RESULTS.md,
// "NCHW im2col tiles built in shared memory ...").
//
// The reduction runs over (c, r, s) in KCRS's own order, KC = 64 or 128 elements a stage (a stage
// starts mid-channel: 64 = 7 1/9 channels):
//   B (filters): [K][C * 9] is K-major as stored; TMA reads KC / 64 boxes of {64, BN} with the
//      128-byte swizzle, wgmma's usual K-major layout. (A first version read it as a 3-D tensor
//      of 16-byte rows that landed as unswizzled core matrices: correct, but TMA moves such short
//      rows slowly and the kernels took 2-3x longer with their builders skipped.)
//   A (input): TMA copies the window the block's BM = 128 MI output pixels read (their rows and
//      one above and below, zeros outside the image) of the 8 or 16 channels the stage touches:
//      [channel][RB rows][WP], rows padded so that neighbouring builder lanes hit distinct banks
//      (window_rows, window_pitch). A builder warpgroup (NB of them) turns it into the im2col tile
//      [BM / 8 pixel blocks][KC][8 pixels] (MN-major, no swizzle: LBO = 128 bytes between k
//      groups, SBO = KC x 16 between pixel blocks): for each filter row (c, r) and 8-pixel block
//      it reads three aligned 16-byte vectors (the block and its neighbours in the row) and writes
//      the taps s = 0, 1, 2 that fall in the stage (funnel shifts by one pixel; zeros past the
//      row's ends).
// Two consumer warpgroups (MI m64 accumulators each) wait for a stage's A and B, issue its KC / 16
// wgmma k16 steps, wait for them and free the stage; the output goes through shared memory and
// is written along pixels. SKIP = 1: the builders only signal (outputs then wrong: the
// consumers' ceiling). One tile a block (not persistent); the pixels of a tile lie in one image.
// Environment: ONLY=substring of a label (and ONLY_N=batch) runs that configuration only.
//
// Build and run on an sm_90 machine:
//   nvcc -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -o nchw_im2col_wgmma nchw_im2col_wgmma.cu
//   ./nchw_im2col_wgmma
#include <cuda.h>
#include <cudaTypedefs.h>
#include "wgmma_f16.cuh"
#include "nchw_harness.cuh"
#include <cstring>

namespace {


__device__ __forceinline__ void tma_load_2d(unsigned dst, const CUtensorMap* map, int x, int y, unsigned bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
               :: "r"(dst), "l"(map), "r"(x), "r"(y), "r"(bar) : "memory");
}
__device__ __forceinline__ void tma_load_4d(unsigned dst, const CUtensorMap* map, int x, int y, int z, int w, unsigned bar) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];"
               :: "r"(dst), "l"(map), "r"(x), "r"(y), "r"(z), "r"(w), "r"(bar) : "memory");
}

/// Window rows a block of BM pixels reads (the output rows it touches plus one above and below),
/// rounded up to 3 mod 8, and the pitch of a window row (W or more, an odd number of 16-byte
/// units; TMA fills the columns past W with zeros): the filter rows (c, r) that 8 neighbouring
/// builder lanes read then fall in distinct 16-byte bank groups.
__host__ __device__ constexpr int window_rows(int BM, int W) { return ((BM - 1) / W + 4 + 4) / 8 * 8 + 3; }
__host__ __device__ constexpr int window_pitch(int W) { return W % 16 == 0 ? W + 8 : W; }
/// Channels a window holds for a chunk of KC reduction elements (c * 9 + tap): those it touches.
__host__ __device__ constexpr int window_channels(int KC) { return KC == 64 ? 8 : 16; }

/// The taps s = 0, 1, 2 of one filter row for 8 pixels (`cur`, with the 8-pixel blocks before and
/// after it in the row, zeros past its ends) at k = kb, kb + 1, kb + 2 of an im2col tile row of
/// KC 16-byte vectors; taps outside [0, KC) belong to the neighbouring chunk and are skipped.
template <int KC>
__device__ __forceinline__ void store_taps(uint4 prev, uint4 cur, uint4 next, uint4* dst, int kb) {
  uint4 lo, hi;  // s = 0 (pixel - 1) and s = 2 (pixel + 1)
  lo.x = __funnelshift_l(prev.w, cur.x, 16); lo.y = __funnelshift_l(cur.x, cur.y, 16);
  lo.z = __funnelshift_l(cur.y, cur.z, 16); lo.w = __funnelshift_l(cur.z, cur.w, 16);
  hi.x = __funnelshift_r(cur.x, cur.y, 16); hi.y = __funnelshift_r(cur.y, cur.z, 16);
  hi.z = __funnelshift_r(cur.z, cur.w, 16); hi.w = __funnelshift_r(cur.w, next.x, 16);
  if (kb >= 0) dst[0] = lo;
  if (kb + 1 >= 0 && kb + 1 < KC) dst[1] = cur;
  if (kb + 2 < KC) dst[2] = hi;
}

// Shared memory: S stages of A [BM / 8 pixel blocks][KC][8] and B (KC / 64 atoms [BN][64],
// 128-byte swizzle), then SW windows [CW][RB][WP], then the barriers: window_full[SW], a_full[S],
// b_full[S], empty[S]. Block b takes tiles b, b + gridDim.x, ... (n tiles fastest); its steps
// (tile, chunk) are numbered g across tiles, so the builders run ahead into the next tile while
// the consumers finish one. PERSIST: the consumers write their outputs from registers (the
// builders may be filling every stage by then); else through shared memory (one tile a block).
// SKIP = 1: the builders only signal; 2: the consumers issue no wgmma (outputs then wrong).
// PAIR: a builder task covers two neighbouring pixel blocks, which share two of their vectors
// where they lie in one row (four loads for six stores instead of six).
template <int MI, int BN, int KC, int S, int SW, int NB, int SKIP = 0, bool PERSIST = false, bool PAIR = false>
__global__ void __launch_bounds__(128 * NB + 256, 1)
im2col_conv(const __grid_constant__ CUtensorMap in_map, const __grid_constant__ CUtensorMap wt_map, __half* __restrict__ out,
            int N, int C, int H, int W, int K) {
  constexpr int BM = 128 * MI, PB = BM / 8, A_BYTES = BM * KC * 2, B_BYTES = BN * KC * 2, STAGE = A_BYTES + B_BYTES, BUILDERS = 128 * NB;
  constexpr int CW = window_channels(KC), NT = KC / 3 + 2;  // filter rows (c, r) a chunk touches, at most
  extern __shared__ __align__(1024) unsigned char smem[];
  const int RB = window_rows(BM, W), WP = window_pitch(W), WIN = (CW * RB * WP * 2 + 127) / 128 * 128;
  const unsigned sbase = (unsigned)__cvta_generic_to_shared(smem);
  const unsigned wins = sbase + S * STAGE, bars = wins + SW * WIN;
  const unsigned win_full = bars, a_full = bars + 8 * SW, b_full = a_full + 8 * S, empty = b_full + 8 * S;
  const int HW = H * W, img_tiles = (HW + BM - 1) / BM, ntiles = K / BN, total = N * img_tiles * ntiles;
  const int chunks = C * 9 / KC, tid = threadIdx.x;
  const int my_tiles = blockIdx.x < total ? (total - 1 - blockIdx.x) / gridDim.x + 1 : 0, steps = my_tiles * chunks;
  struct Tile { int n, m0, n0; };
  auto tile = [&](int k) {  // this block's k-th tile
    const int T = blockIdx.x + k * gridDim.x, mt = T / ntiles;
    return Tile{mt / img_tiles, (mt % img_tiles) * BM, (T % ntiles) * BN};
  };
  if (tid == 0) {
    for (int i = 0; i < SW; ++i) mbar_init(win_full + 8 * i, 1);
    for (int i = 0; i < S; ++i) {
      mbar_init(a_full + 8 * i, BUILDERS); mbar_init(b_full + 8 * i, 1); mbar_init(empty + 8 * i, 256);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (tid < BUILDERS) {
    auto load_window = [&](int g) {
      const Tile t = tile(g / chunks);
      const unsigned bar = win_full + 8 * (g % SW);
      mbar_expect(bar, CW * RB * WP * 2);
      tma_load_4d(wins + (g % SW) * WIN, &in_map, 0, t.m0 / W - 1, (g % chunks) * KC / 9, t.n, bar);
    };
    auto load_filters = [&](int g) {
      const Tile t = tile(g / chunks);
      const unsigned bar = b_full + 8 * (g % S);
      mbar_expect(bar, B_BYTES);
      #pragma unroll
      for (int a = 0; a < KC / 64; ++a)
        tma_load_2d(sbase + (g % S) * STAGE + A_BYTES + a * BN * 128, &wt_map, (g % chunks) * KC + a * 64, t.n0, bar);
    };
    if (tid == 0) {
      for (int g = 0; g < SW && g < steps; ++g) load_window(g);
      for (int g = 0; g < S && g < steps; ++g) load_filters(g);
    }
    constexpr int PP = PAIR ? 2 : 1, Q = (PB / PP * NT + BUILDERS - 1) / BUILDERS;
    for (int k = 0; k < my_tiles; ++k) {
      const Tile t = tile(k);
      const int row0 = t.m0 / W - 1;  // the window's first row (may be -1: zeros)
      // This thread's tasks: filter row t_lo + off[q] of a chunk at pixel block(s) PP x pb, whose
      // first pixel sits at byte base[q] (base2[q]: the second block's) of the window's first
      // (channel, filter row); -1: none (past the image: those output rows are dropped).
      int off[Q], base[Q], ow_q[Q], base2[Q];
      #pragma unroll
      for (int q = 0; q < Q; ++q) {
        const int x = tid + q * BUILDERS, pb = x / NT * PP, m = t.m0 + 8 * pb, oh = m / W;
        off[q] = x % NT; ow_q[q] = m - oh * W;
        base[q] = pb < PB && m < HW ? ((oh - row0 - 1) * WP + ow_q[q]) * 2 : -1;
        const int m2 = m + 8, oh2 = m2 / W;
        base2[q] = PAIR && pb + 1 < PB && m2 < HW ? ((oh2 - row0 - 1) * WP + m2 - oh2 * W) * 2 : -1;
      }
      for (int i = 0; i < chunks; ++i) {
        const int g = k * chunks + i, st = g % S, j0 = i * KC, c_lo = j0 / 9, t_lo = j0 / 3, t_hi = (j0 + KC - 1) / 3;
        if (g >= S) {  // the stage's previous step consumed: its filters may be replaced, A rebuilt
          mbar_wait(empty + 8 * st, ((g / S) - 1) & 1);
          if (tid == 0) load_filters(g);
        }
        mbar_wait(win_full + 8 * (g % SW), (g / SW) & 1);
        const unsigned char* win = smem + S * STAGE + (g % SW) * WIN;
        unsigned char* A = smem + st * STAGE;
        #pragma unroll
        for (int q = 0; q < (SKIP == 1 ? 0 : Q); ++q) {
          const int tt = t_lo + off[q];
          if (base[q] < 0 || tt > t_hi) continue;  // nothing here, or past the chunk
          const int c = tt / 3, r = tt - 3 * c, kb = 3 * tt - j0;  // taps s of (c, r) at k = kb + s
          const int pb = (tid + q * BUILDERS) / NT * PP, ow = ow_q[q], row = ((c - c_lo) * RB + r) * WP * 2;
          const uint4* src = reinterpret_cast<const uint4*>(win + base[q] + row);
          const uint4 zero = make_uint4(0, 0, 0, 0);
          const uint4 cur = src[0], prev = ow > 0 ? src[-1] : zero;
          const bool same_row = ow + 8 < W;  // the next block continues this row
          const uint4 next = same_row ? src[1] : zero;
          store_taps<KC>(prev, cur, next, reinterpret_cast<uint4*>(A + (pb * KC + kb) * 16), kb);
          if (PAIR && base2[q] >= 0) {
            uint4 prev2 = cur, cur2 = next, next2;
            if (same_row) {
              next2 = ow + 16 < W ? src[2] : zero;
            } else {  // the second block starts a row
              const uint4* src2 = reinterpret_cast<const uint4*>(win + base2[q] + row);
              prev2 = zero; cur2 = src2[0]; next2 = 8 < W ? src2[1] : zero;
            }
            store_taps<KC>(prev2, cur2, next2, reinterpret_cast<uint4*>(A + ((pb + 1) * KC + kb) * 16), kb);
          }
        }
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        mbar_arrive(a_full + 8 * st);
        // Every builder has read window g: its slot takes step g + SW.
        asm volatile("bar.sync 2, %0;" :: "n"(BUILDERS) : "memory");
        if (tid == 0 && g + SW < steps) load_window(g + SW);
      }
    }
    return;
  }
  const int cw = (tid - BUILDERS) / 128;
  for (int k = 0; k < my_tiles; ++k) {
    const Tile t = tile(k);
    float d[MI][BN / 2];
    #pragma unroll
    for (int mi = 0; mi < MI; ++mi)
      #pragma unroll
      for (int x = 0; x < BN / 2; ++x) d[mi][x] = 0.f;
    for (int i = 0; i < chunks; ++i) {
      const int g = k * chunks + i, st = g % S;
      mbar_wait(b_full + 8 * st, (g / S) & 1);
      mbar_wait(a_full + 8 * st, (g / S) & 1);
      const unsigned a = sbase + st * STAGE, b = a + A_BYTES;
      if (SKIP != 2) {
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
        // A: MN-major, no swizzle (LBO 128 bytes between k groups, SBO KC x 16 between pixel
        // blocks); B: K-major, 128-byte swizzle (SBO 1024 bytes between 8-row groups; a k16 step
        // is 32 bytes).
        const unsigned long long da = smem_desc(a + cw * MI * 8 * KC * 16, 128, KC * 16);
        const unsigned long long db = smem_desc(b, 16, 1024, 1);
        #pragma unroll
        for (int kk = 0; kk < KC / 16; ++kk)
          #pragma unroll
          for (int mi = 0; mi < MI; ++mi)
            wgmma_f16<BN, 1>(d[mi], da + (unsigned)(kk * 16 + mi * 8 * KC), db + (unsigned)((kk / 4) * BN * 8 + (kk % 4) * 2));
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
      }
      mbar_arrive(empty + 8 * st);
    }
    #pragma unroll
    for (int mi = 0; mi < MI; ++mi) fence_operands(d[mi]);
    __half* o = out + ((long long)t.n * K + t.n0) * HW;
    if (PERSIST) {
      // wgmma's accumulator layout: row w4 * 16 + lane / 4 + 8 hf, columns 8 j + 2 (lane % 4) + e.
      const int w4 = (tid % 128) / 32, lane = tid % 32;
      #pragma unroll
      for (int mi = 0; mi < MI; ++mi)
        #pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int m = t.m0 + cw * 64 * MI + mi * 64 + w4 * 16 + lane / 4 + 8 * hf;
          if (m >= HW) continue;
          #pragma unroll
          for (int j = 0; j < BN / 8; ++j) {
            const int col = 8 * j + 2 * (lane % 4);
            o[(long long)col * HW + m] = __float2half(d[mi][4 * j + 2 * hf]);
            o[(long long)(col + 1) * HW + m] = __float2half(d[mi][4 * j + 2 * hf + 1]);
          }
        }
    } else {
      asm volatile("bar.sync 1, 256;\n" ::: "memory");
      store_outputs<MI, BN>(d, smem, tid - BUILDERS, cw * 64 * MI, t.m0, W, H, W, o,
                            [] { asm volatile("bar.sync 1, 256;\n" ::: "memory"); });
    }
  }
}

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  if (!fn) {
    cudaDriverEntryPointQueryResult q;
    CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void**>(&fn), 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess) { printf("cuTensorMapEncodeTiled not found\n"); exit(1); }
  }
  return fn;
}
CUtensorMap make_map(const void* base, int rank, const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                     CUtensorMapSwizzle swizzle) {
  CUtensorMap m;
  const cuuint32_t unit[4] = {1, 1, 1, 1};
  const CUresult r = encode_tiled()(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, rank, const_cast<void*>(base), dims, strides, box, unit,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) { printf("cuTensorMapEncodeTiled failed: %d\n", (int)r); exit(1); }
  return m;
}

template <int MI, int BN, int KC, int S, int SW, int NB, int SKIP = 0, bool PERSIST = false, bool PAIR = false>
void run7(int N, int C, int H, int W, int K, const char* name) {
  if (W % 8 || (C * 9) % KC || K % BN) { printf("%s: shape not handled by v7\n", name); return; }
  constexpr int BM = 128 * MI;
  const int RB = window_rows(BM, W), WP = window_pitch(W), CW = window_channels(KC), WIN = (CW * RB * WP * 2 + 127) / 128 * 128;
  const size_t smem = std::max<size_t>((size_t)S * (BM + BN) * KC * 2 + (size_t)SW * WIN, (size_t)BN * (BM + 8) * 2) + 8 * (SW + 3 * S);
  if (smem > 227 * 1024) { printf("%s: smem %zu too big\n", name, smem); return; }
  auto kern = im2col_conv<MI, BN, KC, S, SW, NB, SKIP, PERSIST, PAIR>;
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  const int tiles = N * ((H * W + BM - 1) / BM) * (K / BN), sms = 132;
  const dim3 grid(PERSIST ? std::min(tiles, sms) : tiles);
  char label[96];
  snprintf(label, sizeof label, "v7%s%s%s %s m%d n%d k%d S=%d SW=%d NB=%d", PERSIST ? " persistent" : "", PAIR ? " pairs" : "",
           SKIP == 1 ? " builders skipped" : SKIP == 2 ? " wgmma skipped" : "", name, BM, BN, KC, S, SW, NB);
  const char* only = getenv("ONLY");  // a label substring (and batch, ONLY_N): run that configuration only
  if (only && (!strstr(label, only) || (getenv("ONLY_N") && atoi(getenv("ONLY_N")) != N))) return;
  measure(label, N, C, H, W, K, grid.x, smem, [&](cudaStream_t s, const __half* i, const __half* w, __half* o) {
    const cuuint64_t in_dims[4] = {(cuuint64_t)W, (cuuint64_t)H, (cuuint64_t)C, (cuuint64_t)N};
    const cuuint64_t in_strides[3] = {(cuuint64_t)W * 2, (cuuint64_t)H * W * 2, (cuuint64_t)C * H * W * 2};
    const cuuint32_t in_box[4] = {(cuuint32_t)WP, (cuuint32_t)RB, (cuuint32_t)CW, 1};
    const cuuint64_t wt_dims[2] = {(cuuint64_t)C * 9, (cuuint64_t)K};  // [K][C * 9] as stored
    const cuuint64_t wt_strides[1] = {(cuuint64_t)C * 9 * 2};
    const cuuint32_t wt_box[2] = {64, BN};
    const CUtensorMap in_map = make_map(i, 4, in_dims, in_strides, in_box, CU_TENSOR_MAP_SWIZZLE_NONE);
    const CUtensorMap wt_map = make_map(w, 2, wt_dims, wt_strides, wt_box, CU_TENSOR_MAP_SWIZZLE_128B);
    kern<<<grid, 128 * NB + 256, smem, s>>>(in_map, wt_map, o, N, C, H, W, K);
  });
}

/// One configuration (3 x 3 layer of C = K channels, H x H pixels), then with `halves` its
/// consumers' ceiling (builders skipped) and its builders' (wgmma skipped).
template <int MI, int BN, int KC, int S, int SW, int NB, bool PERSIST, bool PAIR>
void run_set(int N, int C, int H, const char* name, bool halves) {
  run7<MI, BN, KC, S, SW, NB, 0, PERSIST, PAIR>(N, C, H, H, C, name);
  if (!halves) return;
  run7<MI, BN, KC, S, SW, NB, 1, PERSIST, PAIR>(N, C, H, H, C, name);
  run7<MI, BN, KC, S, SW, NB, 2, PERSIST, PAIR>(N, C, H, H, C, name);
}

}  // namespace

int main() {
  // benchmarks/RESULTS.md's configurations: one tile a block, persistent blocks, and persistent
  // blocks whose builder tasks take pairs of pixel blocks (with each half's ceiling).
  for (int N : {1, 16, 256}) {
    // l1: m256 x n64, two builder warpgroups.
    run_set<2, 64, 64, 4, 3, 2, false, false>(N, 64, 56, "l1", false);
    run_set<2, 64, 64, 4, 3, 2, true, false>(N, 64, 56, "l1", false);
    run_set<2, 64, 64, 4, 3, 2, true, true>(N, 64, 56, "l1", true);
    // 32 x 32, 128 channels: m256 x n128 with one builder warpgroup, m128 x n128 with two.
    run_set<2, 128, 64, 4, 3, 1, false, false>(N, 128, 32, "w32", false);
    run_set<2, 128, 64, 4, 3, 1, true, false>(N, 128, 32, "w32", false);
    run_set<2, 128, 64, 4, 3, 1, true, true>(N, 128, 32, "w32", true);
    run_set<1, 128, 64, 4, 3, 2, true, true>(N, 128, 32, "w32", true);
    // 16 x 16, 256 channels: m128 x n128 (k128 stages, two builder warpgroups), m128 x n256.
    run_set<1, 128, 128, 3, 3, 2, false, false>(N, 256, 16, "w16", false);
    run_set<1, 128, 128, 3, 3, 2, true, false>(N, 256, 16, "w16", false);
    run_set<1, 256, 64, 4, 3, 1, true, true>(N, 256, 16, "w16", true);
  }
  return 0;
}
