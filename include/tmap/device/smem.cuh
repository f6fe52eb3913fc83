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

}  // namespace device
}  // namespace tmap

#endif  // TMAP_DEVICE_SMEM_CUH
