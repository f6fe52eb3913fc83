// Element types of tensors and of intrinsic operands.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tmap {

enum class DType {
  kFloat16,
  kBFloat16,
  kTFloat32,  ///< 19-bit float stored in 32 bits; only an intrinsic operand precision.
  kFloat32,
  kFloat64,
  kInt4,
  kInt8,
  kInt32,
  kFloat8E4M3,  ///< 8-bit float, 4 exponent and 3 mantissa bits, no infinities (OCP's E4M3FN).
  kFloat8E5M2,  ///< 8-bit float, 5 exponent and 2 mantissa bits (OCP's E5M2).
};

/// Canonical name ("float16", "bfloat16", ...), as used in compute files and logs.
std::string_view dtype_name(DType t);
/// Parses a canonical name or a common alias (fp16, half, bf16, fp32, float, fp64, double, tf32,
/// e4m3, e5m2, float8_e4m3fn).
std::optional<DType> parse_dtype(std::string_view name);
/// Comma-separated canonical names, for error messages.
std::string supported_dtype_names();
/// Storage bits per element (tf32 is stored as 32 bits, int4 as 4).
int dtype_bits(DType t);
bool dtype_is_float(DType t);
/// Whether `t` is one of the 8-bit floats.
bool dtype_is_float8(DType t);

/// Whether tensors can be stored as `t`: every dtype but tfloat32, a precision of the Tensor
/// Cores' float32 mode. kNotStorage and kNotStorageFix are the error and its fix for the rest.
bool dtype_is_storage(DType t);
inline constexpr const char* kNotStorage = "tfloat32 is a precision of the Tensor Cores, not a storage type";
inline constexpr const char* kNotStorageFix =
    "give float32: float32 inputs are computed in tfloat32 where an abstraction does so";

/// Whether a tensor of type `data` can feed an intrinsic operand of type `operand` without
/// changing the computed function beyond the operand's documented precision: equal types, or
/// float32 data rounded to a tfloat32 operand (the Tensor Cores' float32 mode).
bool dtype_feeds_operand(DType data, DType operand);

/// Whether `out` is a valid accumulation type for products of `in` (the output dtype of a
/// compute is its accumulation type): at least as wide, of the same kind (float or integer);
/// never tfloat32, int4 or an 8-bit float.
bool dtype_accumulates(DType in, DType out);

}  // namespace tmap
