// tmap device primitives: thread block clusters and distributed shared memory (sm_90).
#ifndef TMAP_DEVICE_CLUSTER_CUH
#define TMAP_DEVICE_CLUSTER_CUH

#include "tmap/device/smem.cuh"

namespace tmap {
namespace device {

/// The blocks of a cluster wait for each other; what each wrote to shared memory before is
/// visible to the others after (release / acquire).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\n"
               "barrier.cluster.wait.acquire;" ::: "memory");
}

/// This block's rank in its cluster.
__device__ __forceinline__ int cluster_ctarank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return static_cast<int>(r);
}

/// The address in block `rank`'s shared memory of what lies at `local` in this block's.
__device__ __forceinline__ unsigned cluster_address(unsigned local, int rank) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}

/// One 4-byte word at a shared::cluster address.
__device__ __forceinline__ unsigned cluster_load(unsigned at) {
  unsigned bits;
  asm volatile("ld.shared::cluster.b32 %0, [%1];" : "=r"(bits) : "r"(at) : "memory");
  return bits;
}

/// Four 4-byte words at a 16-byte aligned shared::cluster address.
__device__ __forceinline__ void cluster_load4(unsigned at, unsigned* bits) {
  asm volatile("ld.shared::cluster.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(bits[0]), "=r"(bits[1]), "=r"(bits[2]), "=r"(bits[3]) : "r"(at) : "memory");
}

/// Arrives on the mbarrier at `bar`'s offset in both blocks of a pair (a cluster of two). The
/// arrivals keep the default .release.cta semantics: they order this block's finished reads of a
/// buffer against the other block's later asynchronous writes into it.
__device__ __forceinline__ void mbar_arrive_pair(unsigned long long* bar) {
#pragma unroll
  for (unsigned cta = 0; cta < 2; ++cta)
    asm volatile("{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
                 "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n"
                 :: "r"(smem_u32(bar)), "r"(cta) : "memory");
}

}  // namespace device
}  // namespace tmap

#endif  // TMAP_DEVICE_CLUSTER_CUH
