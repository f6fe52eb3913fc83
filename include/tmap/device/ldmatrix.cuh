// tmap device primitives: warp-wide fragment loads from shared memory (ldmatrix, sm_75+).
#ifndef TMAP_DEVICE_LDMATRIX_CUH
#define TMAP_DEVICE_LDMATRIX_CUH

#include "tmap/device/smem.cuh"

namespace tmap {
namespace device {

/// Four 8 x 8 matrices of 16-bit elements: lanes 8i..8i+7 give the row addresses of matrix i;
/// lane l receives elements (l / 4, 2 (l % 4)) and the next of each matrix, in r[0..3].
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(p)));
}

/// ldmatrix_x4() of the transposed matrices: the addresses name columns instead of rows.
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(p)));
}

/// fp32 bits to tf32 bits, rounded to nearest (as wmma::__float_to_tf32).
__device__ __forceinline__ unsigned to_tf32(unsigned x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(__uint_as_float(x)));
  return r;
}

}  // namespace device
}  // namespace tmap

#endif  // TMAP_DEVICE_LDMATRIX_CUH
