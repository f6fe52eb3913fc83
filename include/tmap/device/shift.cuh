// tmap device primitives: vectors at byte offsets that are not their alignment, built from two
// aligned loads (an operand whose rows start at any element).
#ifndef TMAP_DEVICE_SHIFT_CUH
#define TMAP_DEVICE_SHIFT_CUH

namespace tmap {
namespace device {

/// The N words that start `shift` bytes (0 <= shift < sizeof(V)) into lo:hi, two aligned
/// vectors of N words each.
template <typename V>
__device__ __forceinline__ void shifted_words(const V& lo, const V& hi, int shift, unsigned (&y)[sizeof(V) / 4]) {
  constexpr int N = sizeof(V) / 4;
  unsigned w[2 * N];
#pragma unroll
  for (int i = 0; i < N; ++i) {
    w[i] = reinterpret_cast<const unsigned*>(&lo)[i];
    w[N + i] = reinterpret_cast<const unsigned*>(&hi)[i];
  }
  const int q = shift >> 2, bits = (shift & 3) * 8;  // whole words, then bits within one
  unsigned x[N + 1];  // x[j] = w[j + q], by selects (no indexing of registers)
#pragma unroll
  for (int j = 0; j <= N; ++j) {
    x[j] = w[j];
#pragma unroll
    for (int t = 1; t < N; ++t) x[j] = q == t ? w[j + t] : x[j];
  }
#pragma unroll
  for (int i = 0; i < N; ++i) y[i] = __funnelshift_r(x[i], x[i + 1], bits);
}

/// Stores the 4 * N bytes that start `shift` bytes into lo:hi.
template <typename V>
__device__ __forceinline__ void store_shifted(void* dst, const V& lo, const V& hi, int shift) {
  unsigned y[sizeof(V) / 4];
  shifted_words(lo, hi, shift, y);
  V v;
#pragma unroll
  for (int i = 0; i < (int)(sizeof(V) / 4); ++i) reinterpret_cast<unsigned*>(&v)[i] = y[i];
  *reinterpret_cast<V*>(dst) = v;
}

/// Stores every other element (of EB bytes) of the 2 * sizeof(O) bytes that start `shift` bytes
/// into lo:hi: a group of a stride-2 operand.
template <int EB, typename O, typename V>
__device__ __forceinline__ void store_strided(void* dst, const V& lo, const V& hi, int shift) {
  static_assert(2 * sizeof(O) <= sizeof(V), "a group spans at most one loaded vector");
  unsigned y[sizeof(V) / 4];
  shifted_words(lo, hi, shift, y);
  O v;
#pragma unroll
  for (int k = 0; k < (int)(sizeof(O) / 4); ++k)  // elements 0, 2, ... of words 2k and 2k + 1
    reinterpret_cast<unsigned*>(&v)[k] = EB == 4 ? y[2 * k] : __byte_perm(y[2 * k], y[2 * k + 1], EB == 2 ? 0x5410 : 0x6420);
  *reinterpret_cast<O*>(dst) = v;
}

}  // namespace device
}  // namespace tmap

#endif  // TMAP_DEVICE_SHIFT_CUH
