// tmap device primitives: the functions of fused epilogues (ir/epilogue.h), in float32. Each is
// within a few float32 ulps of its definition over the range activations take; the kernels'
// outputs are then rounded to the output's dtype once. The logistic forms divide with __fdividef
// (2 ulps; its quotient is 0 where the divisor overflows, which is the limit there) after
// __expf, a few instructions where the library's tanhf and a rounded division take tens.
#ifndef TMAP_DEVICE_EPILOGUE_CUH
#define TMAP_DEVICE_EPILOGUE_CUH

namespace tmap {
namespace device {

__device__ __forceinline__ float epi_min(float a, float b) { return fminf(a, b); }
__device__ __forceinline__ float epi_max(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ float epi_relu(float x) { return fmaxf(x, 0.0f); }
__device__ __forceinline__ float epi_leaky_relu(float x, float slope) { return x >= 0.0f ? x : x * slope; }
__device__ __forceinline__ float epi_clamp(float x, float lo, float hi) { return fminf(fmaxf(x, lo), hi); }
/// 1 / (1 + e^-x); __expf overflows to infinity for x < -88, where the quotient is then 0.
__device__ __forceinline__ float epi_sigmoid(float x) { return __fdividef(1.0f, 1.0f + __expf(-x)); }
__device__ __forceinline__ float epi_tanh(float x) { return tanhf(x); }
/// x * sigmoid(x) (SiLU, swish).
__device__ __forceinline__ float epi_silu(float x) { return __fdividef(x, 1.0f + __expf(-x)); }
/// x * Phi(x), Phi the standard normal CDF: GELU as BERT and ONNX's Gelu define it.
__device__ __forceinline__ float epi_gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
/// GELU's tanh approximation (GPT-2, approximate="tanh"): 0.5 x (1 + tanh(u)), computed as
/// x * sigmoid(2u), which has no cancellation where tanh(u) nears -1.
__device__ __forceinline__ float epi_gelu_tanh(float x) {
  const float u2 = 1.5957691216057307f * (x + 0.044715f * x * x * x);  // 2u
  return __fdividef(x, 1.0f + __expf(-u2));
}

/// Asks L2 for the 128-byte line holding p, without waiting for it: a tile's residual fetched
/// while the main loop runs, so that the epilogue's loads of it hit L2.
__device__ __forceinline__ void epi_prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

}  // namespace device
}  // namespace tmap

#endif  // TMAP_DEVICE_EPILOGUE_CUH
