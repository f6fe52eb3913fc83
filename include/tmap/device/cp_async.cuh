// tmap device primitives: asynchronous global -> shared copies (cp.async, sm_80+).
#ifndef TMAP_DEVICE_CP_ASYNC_CUH
#define TMAP_DEVICE_CP_ASYNC_CUH

#include "tmap/device/smem.cuh"

namespace tmap {
namespace device {

/// Copies BYTES (4, 8 or 16) bytes global -> shared without staging them in registers; with
/// `valid` false it writes zeros and reads nothing. Through L1 (.ca): convolution windows re-read
/// input elements that neighbouring tiles and taps have just fetched.
template <int BYTES>
__device__ __forceinline__ void cp_async(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" :: "r"(smem_u32(dst)), "l"(src), "n"(BYTES),
               "r"(valid ? BYTES : 0));
}

/// Closes the group of this thread's cp.asyncs issued since the last commit.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

/// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }

}  // namespace device
}  // namespace tmap

#endif  // TMAP_DEVICE_CP_ASYNC_CUH
