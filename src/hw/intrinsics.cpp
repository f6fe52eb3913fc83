#include <string>

#include "tmap/hw/hw_abstraction.h"

namespace tmap {
namespace {

/// PTX's name of an operand type of mma.sync and wgmma; empty where they take none.
std::string ptx_type(DType t) {
  switch (t) {
    case DType::kFloat16: return "f16";
    case DType::kBFloat16: return "bf16";
    case DType::kTFloat32: return "tf32";
    case DType::kFloat32: return "f32";
    case DType::kInt8: return "s8";
    case DType::kInt32: return "s32";
    case DType::kFloat8E4M3: return "e4m3";
    case DType::kFloat8E5M2: return "e5m2";
    default: return "";
  }
}

/// Whether the Tensor Core instructions of `family` multiply a x a into d: f16 into f16 or f32,
/// bf16 and tf32 into f32, s8 into s32, and on wgmma (Hopper) e4m3 and e5m2 into f32.
bool tensor_core_types(const std::string& family, DType a, DType b, DType d) {
  if (a != b) return false;
  switch (a) {
    case DType::kFloat16: return d == DType::kFloat16 || d == DType::kFloat32;
    case DType::kFloat8E4M3:
    case DType::kFloat8E5M2: return family == "wgmma" && d == DType::kFloat32;
    case DType::kBFloat16:
    case DType::kTFloat32: return d == DType::kFloat32;
    case DType::kInt8: return d == DType::kInt32;
    default: return false;
  }
}

/// k of one mma.sync or wgmma: 32 bytes of the operand type.
std::string k_of(DType a) { return std::to_string(256 / dtype_bits(a)); }

std::string simt_intrinsic(DType a, DType b, DType d) {
  if (a != b) return "";
  if (a == DType::kInt8 && d == DType::kInt32) return "dp4a.s32.s32 (__dp4a)";
  if (a == DType::kFloat16 && d == DType::kFloat16) return "fma.rn.f16x2 (__hfma2)";
  if (a == DType::kFloat16 && d == DType::kFloat32) return "fma.rn.f32 (float16 operands widened to float32)";
  if (a == DType::kBFloat16 && d == DType::kFloat32) return "fma.rn.f32 (bfloat16 operands widened to float32)";
  if (a == DType::kFloat32 && d == DType::kFloat32) return "fma.rn.f32";
  return "";
}

}  // namespace

std::string family_intrinsic(const std::string& family, DType a, DType b, DType d) {
  if (family == "wmma") return "nvcuda::wmma::mma_sync";
  if (family == "simt") return simt_intrinsic(a, b, d);
  if (!tensor_core_types(family, a, b, d)) return "";
  const std::string types = ptx_type(d) + "." + ptx_type(a) + "." + ptx_type(b);
  if (family == "mma_sync") return "mma.sync.aligned.m16n8k" + k_of(a) + ".row.col." + types + "." + ptx_type(d);
  if (family == "wgmma") return "wgmma.mma_async.sync.aligned.m64nNk" + k_of(a) + "." + types;
  return "";
}

std::string family_intrinsic(const HwAbstraction& hw) {
  return family_intrinsic(hw.family, hw.a_dtype, hw.b_dtype, hw.d_dtype);
}

std::vector<IntrinsicShape> family_shapes(const std::string& family, DType a) {
  const std::int64_t k32 = 256 / dtype_bits(a);  // 32 bytes of k
  if (family == "wgmma") return {{{64, 8, k32}}};
  if (family == "mma_sync") return {{{16, 8, k32}}};
  if (family == "simt") {
    if (a == DType::kFloat16) return {{{1, 1, 1}}, {{1, 1, 2}}};
    if (a == DType::kInt8) return {{{1, 1, 4}}};
    return {{{1, 1, 1}}};
  }
  if (family != "wmma") return {};
  switch (a) {
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kInt8: return {{{16, 16, 16}}, {{32, 8, 16}}, {{8, 32, 16}}};
    case DType::kTFloat32: return {{{16, 16, 8}}};
    case DType::kFloat64: return {{{8, 8, 4}}};
    case DType::kInt4: return {{{8, 8, 32}}};
    default: return {};
  }
}

bool known_intrinsic_family(const std::string& family) {
  return family == "wmma" || family == "simt" || family == "mma_sync" || family == "wgmma";
}

}  // namespace tmap
