// tmap device primitives: shared-memory addresses.
// Included by generated kernels (NVRTC finds it among the headers embedded in tmap).
#ifndef TMAP_DEVICE_SMEM_CUH
#define TMAP_DEVICE_SMEM_CUH

namespace tmap {
namespace device {

/// The 32-bit shared-state-space address of a generic pointer into shared memory, as PTX's
/// .shared operands take it.
__device__ __forceinline__ unsigned smem_u32(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

}  // namespace device
}  // namespace tmap

#endif  // TMAP_DEVICE_SMEM_CUH
