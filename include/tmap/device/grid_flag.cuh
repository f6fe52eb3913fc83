// tmap device primitives: flags in global memory by which one block of a grid tells another
// that what it wrote before is there (stream-K's partial tiles). The writer's threads each make
// their writes visible at GPU scope and meet at a barrier before one of them raises the flag;
// the reader's one thread waits for it, and its block meets at a barrier before reading.
#ifndef TMAP_DEVICE_GRID_FLAG_CUH
#define TMAP_DEVICE_GRID_FLAG_CUH

namespace tmap {
namespace device {

/// Sets `flag` to 1, ordered after every write this thread saw (release at GPU scope).
__device__ __forceinline__ void flag_raise(int* flag) {
  asm volatile("st.release.gpu.global.b32 [%0], 1;" ::"l"(flag) : "memory");
}

/// Waits until `flag` is non-zero; what its raiser saw is visible to this thread after (acquire
/// at GPU scope). The writer must be resident: the blocks of a persistent grid are.
__device__ __forceinline__ void flag_wait(const int* flag) {
  int v;
  while (true) {
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
    if (v) return;
    __nanosleep(64);
  }
}

}  // namespace device
}  // namespace tmap

#endif  // TMAP_DEVICE_GRID_FLAG_CUH
