// tmap device primitives: warpgroup matrix multiply-accumulate support (wgmma, sm_90a).
// The wgmma instruction itself depends on the shape and types of a kernel and is emitted there.
#ifndef TMAP_DEVICE_WGMMA_CUH
#define TMAP_DEVICE_WGMMA_CUH

#include "tmap/device/smem.cuh"

namespace tmap {
namespace device {

/// A shared-memory matrix descriptor: start address, leading and stride byte offsets (each
/// stored in 16-byte units) and the swizzle layout type (1: 128-byte, 2: 64-byte, 3: 32-byte).
template <unsigned long long LAYOUT>
__device__ __forceinline__ unsigned long long smem_desc(const void* p, unsigned lbo, unsigned sbo) {
  return (unsigned long long)((smem_u32(p) & 0x3FFFF) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |
         ((unsigned long long)(sbo >> 4) << 32) | (LAYOUT << 62);
}

/// Orders this warp's register accesses before the wgmmas that follow.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }

/// Closes the group of wgmmas issued since the last commit.
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }

/// Waits until at most N committed wgmma groups are still in flight.
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory"); }

/// Makes this thread's shared-memory writes (stores and cp.async) visible to the async proxy
/// (wgmma's and TMA's reads).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

/// Keeps the compiler from moving reads or writes of r across an asynchronous wgmma.
__device__ __forceinline__ void fence_operand(float& r) { asm volatile("" : "+f"(r) :: "memory"); }
__device__ __forceinline__ void fence_operand(int& r) { asm volatile("" : "+r"(r) :: "memory"); }

}  // namespace device
}  // namespace tmap

#endif  // TMAP_DEVICE_WGMMA_CUH
