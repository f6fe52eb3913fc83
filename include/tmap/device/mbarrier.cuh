// tmap device primitives: shared-memory barriers that count arrivals and bytes (mbarrier, sm_90).
#ifndef TMAP_DEVICE_MBARRIER_CUH
#define TMAP_DEVICE_MBARRIER_CUH

#include "tmap/device/smem.cuh"

namespace tmap {
namespace device {

/// Initializes `bar` for phases of `count` arrivals.
__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(smem_u32(bar)), "r"(count) : "memory");
}

/// Makes barrier initializations visible to the cluster and to the async proxy (TMA).
__device__ __forceinline__ void mbar_fence_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

/// Arrives on `bar` and adds `bytes` to the transaction count its phase waits for.
__device__ __forceinline__ void mbar_expect_tx(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(smem_u32(bar)), "r"(bytes) : "memory");
}

/// Arrives on `bar`.
__device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(smem_u32(bar)) : "memory");
}

/// Whether the phase of parity `parity` of `bar` has completed (waiting a while in hardware).
__device__ __forceinline__ unsigned mbar_try_wait(unsigned long long* bar, unsigned parity) {
  unsigned done;
  asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(done) : "r"(smem_u32(bar)), "r"(parity) : "memory");
  return done;
}

/// Waits until the phase of parity `parity` of `bar` has completed.
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}

/// mbar_wait() for a whole warp: it polls until every lane has seen the phase complete, a
/// warp-uniform loop (the phase cannot move on before this warp releases what it waits for).
__device__ __forceinline__ void mbar_wait_warp(unsigned long long* bar, unsigned parity) {
  while (!__all_sync(0xffffffffu, mbar_try_wait(bar, parity))) {
  }
}

}  // namespace device
}  // namespace tmap

#endif  // TMAP_DEVICE_MBARRIER_CUH
