// tmap device primitives: shared-memory addresses.
// Included by generated kernels (NVRTC finds it among the headers embedded in tmap).
#ifndef TMAP_DEVICE_SMEM_CUH
#define TMAP_DEVICE_SMEM_CUH

namespace tmap {
namespace device {

/// The 32-bit shared-state-space address of a generic pointer into shared memory, as PTX's
/// .shared operands take it.
__device__ __forceinline__ unsigned smem_u32(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

/// Position x of a tile of N rows, rotated by rot (both in [0, N)): (x + rot) % N, with one
/// compare where a modulo by an N that is not a power of two takes a multiply and a subtract.
template <int N>
__device__ __forceinline__ int rotated(int x, int rot) {
  x += rot;
  return x < N ? x : x - N;
}

/// N elements of T, held in registers (aligned so that they are written in whole words).
template <typename T, int N>
struct __align__(16) TileVector {
  T v[N];
};

/// The widest word (16, 8 or 4 bytes) in which a vector of N elements of T can be read from a
/// tile whose rows are LD elements apart: it must divide both the vector and the row. 0 where
/// no word does (the vector is then read element by element).
template <typename T, int N, int LD>
__host__ __device__ constexpr int tile_word() {
  constexpr int bytes = N * static_cast<int>(sizeof(T)), row = LD * static_cast<int>(sizeof(T));
  return bytes % 16 == 0 && row % 16 == 0 ? 16 : bytes % 8 == 0 && row % 8 == 0 ? 8 : bytes % 4 == 0 && row % 4 == 0 ? 4 : 0;
}

/// The unsigned type of a word of Bytes bytes (4, 8 or 16), as CUDA's vector types spell it.
template <int Bytes> struct SmemWord;
template <> struct SmemWord<4> { using type = unsigned; };
template <> struct SmemWord<8> { using type = uint2; };
template <> struct SmemWord<16> { using type = uint4; };

/// The vector of N elements at src in a 16-byte-aligned tile of shared memory whose rows are LD
/// elements apart and whose vectors start at multiples of N within a row, read in the widest
/// words that keep every such vector aligned. The compiler cannot prove that alignment for a
/// computed index, and would read the vector one element at a time.
template <int N, int LD, typename T>
__device__ __forceinline__ TileVector<T, N> tile_vector(const T* src) {
  TileVector<T, N> r;
  constexpr int word = tile_word<T, N, LD>(), bytes = N * static_cast<int>(sizeof(T));
  if constexpr (word == 0) {
#pragma unroll
    for (int i = 0; i < N; ++i) r.v[i] = src[i];
  } else {
    using W = typename SmemWord<word>::type;
#pragma unroll
    for (int i = 0; i < bytes / word; ++i) reinterpret_cast<W*>(r.v)[i] = reinterpret_cast<const W*>(src)[i];
  }
  return r;
}

}  // namespace device
}  // namespace tmap

#endif  // TMAP_DEVICE_SMEM_CUH
