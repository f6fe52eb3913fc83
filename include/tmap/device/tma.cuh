// tmap device primitives: tensor memory accelerator (TMA) copies, global -> shared (sm_90), each
// completing a transaction of its bytes on an mbarrier (see mbarrier.cuh); and bulk copies
// shared -> global, tracked by the issuing thread's bulk groups.
#ifndef TMAP_DEVICE_TMA_CUH
#define TMAP_DEVICE_TMA_CUH

#include "tmap/device/smem.cuh"

namespace tmap {
namespace device {

/// A CUtensorMap, passed by value as a __grid_constant__ kernel parameter.
struct __align__(64) TmaMap { unsigned long long bits[16]; };

/// The box of a 1-D tensor map at the given coordinates (innermost first) into `dst`.
__device__ __forceinline__ void tma_load_1d(void* dst, const TmaMap& map, unsigned long long* bar, int c0) {
  asm volatile("cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3}], [%2];\n"
               :: "r"(smem_u32(dst)), "l"(&map), "r"(smem_u32(bar)), "r"(c0) : "memory");
}

/// The box of a 2-D tensor map at the given coordinates (innermost first) into `dst`.
__device__ __forceinline__ void tma_load_2d(void* dst, const TmaMap& map, unsigned long long* bar, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n"
               :: "r"(smem_u32(dst)), "l"(&map), "r"(smem_u32(bar)), "r"(c0), "r"(c1) : "memory");
}

/// The box of a 3-D tensor map at the given coordinates (innermost first) into `dst`.
__device__ __forceinline__ void tma_load_3d(void* dst, const TmaMap& map, unsigned long long* bar, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n"
               :: "r"(smem_u32(dst)), "l"(&map), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2) : "memory");
}

/// The box of a 4-D tensor map at the given coordinates (innermost first) into `dst`.
__device__ __forceinline__ void tma_load_4d(void* dst, const TmaMap& map, unsigned long long* bar, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2];\n"
               :: "r"(smem_u32(dst)), "l"(&map), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3) : "memory");
}

/// The box of a 5-D tensor map at the given coordinates (innermost first) into `dst`.
__device__ __forceinline__ void tma_load_5d(void* dst, const TmaMap& map, unsigned long long* bar, int c0, int c1, int c2, int c3, int c4) {
  asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6, %7}], [%2];\n"
               :: "r"(smem_u32(dst)), "l"(&map), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4) : "memory");
}

/// tma_load_1d() written into `dst` of both blocks of a pair (CTA mask 0b11), completing on the
/// barrier at `bar`'s offset in each.
__device__ __forceinline__ void tma_multicast_1d(void* dst, const TmaMap& map, unsigned long long* bar, int c0) {
  asm volatile("cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%3}], [%2], %4;\n"
               :: "r"(smem_u32(dst)), "l"(&map), "r"(smem_u32(bar)), "r"(c0), "h"((unsigned short)3) : "memory");
}

/// tma_load_2d() written into `dst` of both blocks of a pair (CTA mask 0b11), completing on the
/// barrier at `bar`'s offset in each.
__device__ __forceinline__ void tma_multicast_2d(void* dst, const TmaMap& map, unsigned long long* bar, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;\n"
               :: "r"(smem_u32(dst)), "l"(&map), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "h"((unsigned short)3) : "memory");
}

/// tma_load_3d() written into `dst` of both blocks of a pair (CTA mask 0b11), completing on the
/// barrier at `bar`'s offset in each.
__device__ __forceinline__ void tma_multicast_3d(void* dst, const TmaMap& map, unsigned long long* bar, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%3, %4, %5}], [%2], %6;\n"
               :: "r"(smem_u32(dst)), "l"(&map), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "h"((unsigned short)3) : "memory");
}

/// tma_load_4d() written into `dst` of both blocks of a pair (CTA mask 0b11), completing on the
/// barrier at `bar`'s offset in each.
__device__ __forceinline__ void tma_multicast_4d(void* dst, const TmaMap& map, unsigned long long* bar, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%3, %4, %5, %6}], [%2], %7;\n"
               :: "r"(smem_u32(dst)), "l"(&map), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "h"((unsigned short)3) : "memory");
}

/// tma_load_5d() written into `dst` of both blocks of a pair (CTA mask 0b11), completing on the
/// barrier at `bar`'s offset in each.
__device__ __forceinline__ void tma_multicast_5d(void* dst, const TmaMap& map, unsigned long long* bar, int c0, int c1, int c2, int c3, int c4) {
  asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%3, %4, %5, %6, %7}], [%2], %8;\n"
               :: "r"(smem_u32(dst)), "l"(&map), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "h"((unsigned short)3) : "memory");
}

/// An im2col box of a 3-D tensor map: the pixels from coordinates c0.. (channel first, innermost
/// first) moved by the filter tap's offsets o1.., into `dst`.
__device__ __forceinline__ void tma_im2col_3d(void* dst, const TmaMap& map, unsigned long long* bar, int c0, int c1, int c2,
                                               unsigned short o1) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2], {%6};\n"
               :: "r"(smem_u32(dst)), "l"(&map), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "h"(o1) : "memory");
}

/// An im2col box of a 4-D tensor map: the pixels from coordinates c0.. (channel first, innermost
/// first) moved by the filter tap's offsets o1.., into `dst`.
__device__ __forceinline__ void tma_im2col_4d(void* dst, const TmaMap& map, unsigned long long* bar, int c0, int c1, int c2, int c3,
                                               unsigned short o1, unsigned short o2) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2], {%7, %8};\n"
               :: "r"(smem_u32(dst)), "l"(&map), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "h"(o1), "h"(o2) : "memory");
}

/// An im2col box of a 5-D tensor map: the pixels from coordinates c0.. (channel first, innermost
/// first) moved by the filter tap's offsets o1.., into `dst`.
__device__ __forceinline__ void tma_im2col_5d(void* dst, const TmaMap& map, unsigned long long* bar, int c0, int c1, int c2, int c3, int c4,
                                               unsigned short o1, unsigned short o2, unsigned short o3) {
  asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6, %7}], [%2], {%8, %9, %10};\n"
               :: "r"(smem_u32(dst)), "l"(&map), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "h"(o1), "h"(o2), "h"(o3) : "memory");
}

/// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from shared memory to global
/// memory in the background, in this thread's open bulk group. The shared memory's writes must be
/// visible to the async proxy first (fence_proxy_async() by each writer, then a barrier).
__device__ __forceinline__ void bulk_store(void* dst, const void* src, unsigned bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n"
               :: "l"(__cvta_generic_to_global(dst)), "r"(smem_u32(src)), "r"(bytes) : "memory");
}
/// The box of a 2-D (3-D) tensor map at the given coordinates (innermost first) from `src`, laid out
/// as the map's swizzle says, in this thread's open bulk group; coordinates past the tensor's end
/// are not written.
__device__ __forceinline__ void tma_store_2d(const TmaMap& map, const void* src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n"
               :: "l"(&map), "r"(smem_u32(src)), "r"(c0), "r"(c1) : "memory");
}
__device__ __forceinline__ void tma_store_3d(const TmaMap& map, const void* src, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n"
               :: "l"(&map), "r"(smem_u32(src)), "r"(c0), "r"(c1), "r"(c2) : "memory");
}
__device__ __forceinline__ void tma_store_4d(const TmaMap& map, const void* src, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n"
               :: "l"(&map), "r"(smem_u32(src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3) : "memory");
}
__device__ __forceinline__ void tma_store_5d(const TmaMap& map, const void* src, int c0, int c1, int c2, int c3, int c4) {
  asm volatile("cp.async.bulk.tensor.5d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5, %6}], [%1];\n"
               :: "l"(&map), "r"(smem_u32(src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4) : "memory");
}
/// Closes this thread's open bulk group.
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
/// Waits until at most PENDING of this thread's latest bulk groups have not yet read their shared
/// memory; the memory of the others may then be reused.
template <int PENDING = 0>
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read %0;\n" :: "n"(PENDING) : "memory"); }
/// Waits until this thread's bulk copies are complete: their writes are done.
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

}  // namespace device
}  // namespace tmap

#endif  // TMAP_DEVICE_TMA_CUH
