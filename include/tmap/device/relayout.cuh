// tmap device primitives: the relayout prologue's copies. Each copies operand tensors so that the
// reduction's dimension is innermost, [outer][moved][inner] -> [outer][inner][moved], one block's
// share at a time (`tile` or `block` numbers it).
#ifndef TMAP_DEVICE_RELAYOUT_CUH
#define TMAP_DEVICE_RELAYOUT_CUH

namespace tmap {
namespace device {

/// The general copy: 32 x 32 tiles transposed through shared memory, by 256 threads.
template <typename T>
__device__ __forceinline__ void relayout_transpose(const T* __restrict__ src, T* __restrict__ dst, long long tile,
                                                   long long moved, long long inner) {
  __shared__ T buf[32][33];
  const long long tiles_inner = (inner + 31) / 32, tiles_moved = (moved + 31) / 32;
  const long long ti = tile % tiles_inner, tm = tile / tiles_inner % tiles_moved, o = tile / (tiles_inner * tiles_moved);
  src += o * moved * inner;
  dst += o * moved * inner;
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
#pragma unroll
  for (int j = 0; j < 32; j += 8) {  // rows of [moved], read along inner
    const long long m = tm * 32 + ty + j, i = ti * 32 + tx;
    if (m < moved && i < inner) buf[ty + j][tx] = src[m * inner + i];
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < 32; j += 8) {  // rows of [inner], written along moved
    const long long i = ti * 32 + ty + j, m = tm * 32 + tx;
    if (m < moved && i < inner) dst[i * moved + m] = buf[tx][ty + j];
  }
}

/// Rows shorter than 32 (a filter's taps): a block of THREADS reads MC whole rows of [moved], one
/// contiguous run of 16-byte vectors, into shared memory (every load of a thread issued before
/// the first is stored, so that the block waits for memory once), then writes them as INNER runs
/// of MC elements along moved, 16-byte vectors gathered from the staged rows. [moved] is whole
/// vectors.
template <typename T, int INNER, int MC, int THREADS>
__device__ __forceinline__ void relayout_rows(const T* __restrict__ src, T* __restrict__ dst, long long block,
                                              long long moved) {
  constexpr int V = 16 / sizeof(T);
  constexpr int LOADS = (MC * INNER / V + THREADS - 1) / THREADS, STORES = (MC / V * INNER + THREADS - 1) / THREADS;
  __shared__ uint4 stage[MC * INNER / V];
  const T* rows = reinterpret_cast<const T*>(stage);
  const long long chunks = (moved + MC - 1) / MC, o = block / chunks, m0 = block % chunks * MC;
  const int mc = static_cast<int>(moved - m0 < MC ? moved - m0 : MC), loads = mc * INNER / V, runs = mc / V;
  const uint4* from = reinterpret_cast<const uint4*>(src + (o * moved + m0) * INNER);
  uint4 x[LOADS];
#pragma unroll
  for (int j = 0; j < LOADS; ++j)
    if (j * THREADS + threadIdx.x < loads) x[j] = from[j * THREADS + threadIdx.x];
#pragma unroll
  for (int j = 0; j < LOADS; ++j)
    if (j * THREADS + threadIdx.x < loads) stage[j * THREADS + threadIdx.x] = x[j];
  __syncthreads();
  dst += o * moved * INNER + m0;
#pragma unroll
  for (int j = 0; j < STORES; ++j) {
    const int u = j * THREADS + threadIdx.x;  // vector u % runs of destination row u / runs
    if (u >= runs * INNER) break;
    const int i = u / runs, m = u % runs * V;
    union { uint4 v; T e[V]; } y;
#pragma unroll
    for (int l = 0; l < V; ++l) y.e[l] = rows[(m + l) * INNER + i];
    *reinterpret_cast<uint4*>(dst + i * moved + m) = y.v;
  }
}

/// Rows shorter than 32 with few elements along moved: gathered element by element, PER_BLOCK
/// destination elements a block of THREADS.
template <typename T, int THREADS, int PER_BLOCK>
__device__ __forceinline__ void relayout_gather(const T* __restrict__ src, T* __restrict__ dst, long long block,
                                                long long moved, long long inner, long long elements) {
  constexpr int PER = (PER_BLOCK + THREADS - 1) / THREADS;
  T x[PER];
#pragma unroll
  for (int j = 0; j < PER; ++j) {  // every load issued before the first store
    const long long e = block * PER_BLOCK + j * THREADS + threadIdx.x;
    const long long m = e % moved, i = e / moved % inner, o = e / (moved * inner);
    if (j * THREADS + threadIdx.x < PER_BLOCK && e < elements) x[j] = src[(o * moved + m) * inner + i];
  }
#pragma unroll
  for (int j = 0; j < PER; ++j) {
    const long long e = block * PER_BLOCK + j * THREADS + threadIdx.x;
    if (j * THREADS + threadIdx.x < PER_BLOCK && e < elements) dst[e] = x[j];
  }
}

/// The vector a padded row is stored in: 16 bytes where its length is whole 16-byte vectors, else
/// 8 (relayout_view() pads to one or the other).
template <bool WHOLE_16> struct PadRowVector { typedef uint4 type; };
template <> struct PadRowVector<false> { typedef uint2 type; };

/// Copies with [moved] padded with zeros to PADDED elements, whole 16- or 8-byte vectors (a first
/// layer's channels): a thread builds PIX destination rows ([inner] position i of [outer] o: the
/// [moved] values read along inner, consecutive threads at consecutive i, then zeros) and stores
/// each as vectors, consecutive threads' rows side by side.
template <typename T, int PADDED, int PIX>
__device__ __forceinline__ void relayout_pad_rows(const T* __restrict__ src, T* __restrict__ dst, long long block,
                                                  long long moved, long long inner, long long rows) {
  typedef typename PadRowVector<PADDED * sizeof(T) % 16 == 0>::type V;
  constexpr int VECS = PADDED * sizeof(T) / sizeof(V);
  union Row { V v[VECS]; T e[PADDED]; };
  Row x[PIX];
#pragma unroll
  for (int j = 0; j < PIX; ++j) {
    const long long row = (block * PIX + j) * blockDim.x + threadIdx.x, o = row / inner, i = row - o * inner;
#pragma unroll
    for (int m = 0; m < PADDED; ++m)
      x[j].e[m] = row < rows && m < moved ? src[(o * moved + m) * inner + i] : T();
  }
#pragma unroll
  for (int j = 0; j < PIX; ++j) {
    const long long row = (block * PIX + j) * blockDim.x + threadIdx.x;
    if (row < rows)
#pragma unroll
      for (int v = 0; v < VECS; ++v) reinterpret_cast<V*>(dst)[row * VECS + v] = x[j].v[v];
  }
}

/// A lane per V x V block: V vectors of V elements read along inner (the 4 x 8 lanes of a warp
/// cover 4 V inner x 8 V moved: 64-byte runs of 8 rows), transposed in registers, written as V
/// vectors along moved (8 lanes write 8 V contiguous elements of one row). 8 warps a block, along inner.
template <typename T, typename VT, int V>
__device__ __forceinline__ void relayout_transpose_v(const T* __restrict__ src, T* __restrict__ dst, long long tile,
                                                     long long moved, long long inner) {
  constexpr int TM = 8 * V, TI = 32 * V;
  const long long tiles_inner = (inner + TI - 1) / TI, tiles_moved = (moved + TM - 1) / TM;
  const long long ti = tile % tiles_inner, tm = tile / tiles_inner % tiles_moved, o = tile / (tiles_inner * tiles_moved);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const long long m0 = tm * TM + (lane % 8) * V, i0 = ti * TI + (warp * 4 + lane / 8) * V;
  if (m0 >= moved || i0 >= inner) return;  // V divides both: a block is whole or absent
  src += o * moved * inner;
  dst += o * moved * inner;
  union Vec { VT v; T e[V]; };
  Vec in[V], out[V];
#pragma unroll
  for (int j = 0; j < V; ++j) in[j].v = *reinterpret_cast<const VT*>(src + (m0 + j) * inner + i0);
#pragma unroll
  for (int j = 0; j < V; ++j)
#pragma unroll
    for (int l = 0; l < V; ++l) out[j].e[l] = in[l].e[j];
#pragma unroll
  for (int j = 0; j < V; ++j) *reinterpret_cast<VT*>(dst + (i0 + j) * moved + m0) = out[j].v;
}

}  // namespace device
}  // namespace tmap

#endif  // TMAP_DEVICE_RELAYOUT_CUH
