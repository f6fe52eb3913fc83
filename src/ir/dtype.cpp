#include "tmap/ir/dtype.h"

#include <array>
#include <utility>

namespace tmap {
namespace {

struct DTypeInfo {
  DType type;
  std::string_view name;
  int bits;
  bool is_float;
};

constexpr std::array<DTypeInfo, 10> kDTypes = {{
    {DType::kFloat16, "float16", 16, true},
    {DType::kBFloat16, "bfloat16", 16, true},
    {DType::kTFloat32, "tfloat32", 32, true},
    {DType::kFloat32, "float32", 32, true},
    {DType::kFloat64, "float64", 64, true},
    {DType::kInt4, "int4", 4, false},
    {DType::kInt8, "int8", 8, false},
    {DType::kInt32, "int32", 32, false},
    {DType::kFloat8E4M3, "float8_e4m3", 8, true},
    {DType::kFloat8E5M2, "float8_e5m2", 8, true},
}};

constexpr std::array<std::pair<std::string_view, DType>, 13> kAliases = {{
    {"fp16", DType::kFloat16},
    {"half", DType::kFloat16},
    {"bf16", DType::kBFloat16},
    {"tf32", DType::kTFloat32},
    {"fp32", DType::kFloat32},
    {"float", DType::kFloat32},
    {"fp64", DType::kFloat64},
    {"double", DType::kFloat64},
    {"e4m3", DType::kFloat8E4M3},
    {"fp8_e4m3", DType::kFloat8E4M3},
    {"float8_e4m3fn", DType::kFloat8E4M3},
    {"e5m2", DType::kFloat8E5M2},
    {"fp8_e5m2", DType::kFloat8E5M2},
}};

const DTypeInfo& info(DType t) {
  for (const auto& i : kDTypes)
    if (i.type == t) return i;
  return kDTypes[0];  // unreachable: every enumerator is in the table
}

}  // namespace

std::string_view dtype_name(DType t) { return info(t).name; }

bool dtype_is_storage(DType t) { return t != DType::kTFloat32; }

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& i : kDTypes)
    if (i.name == name) return i.type;
  for (const auto& [alias, t] : kAliases)
    if (alias == name) return t;
  return std::nullopt;
}

std::string supported_dtype_names() {
  std::string out;
  for (const auto& i : kDTypes) {
    if (!out.empty()) out += ", ";
    out += i.name;
  }
  return out;
}

int dtype_bits(DType t) { return info(t).bits; }
bool dtype_is_float(DType t) { return info(t).is_float; }
bool dtype_is_float8(DType t) { return t == DType::kFloat8E4M3 || t == DType::kFloat8E5M2; }

bool dtype_feeds_operand(DType data, DType operand) {
  return data == operand || (data == DType::kFloat32 && operand == DType::kTFloat32);
}

bool dtype_accumulates(DType in, DType out) {
  if (out == DType::kTFloat32 || out == DType::kInt4 || dtype_is_float8(out)) return false;  // not accumulation types
  if (dtype_is_float(in) != dtype_is_float(out)) return false;
  if (in == DType::kTFloat32) return out == DType::kFloat32 || out == DType::kFloat64;
  // The two 16-bit floats have different ranges: neither holds the other's products.
  if ((in == DType::kFloat16 && out == DType::kBFloat16) ||
      (in == DType::kBFloat16 && out == DType::kFloat16))
    return false;
  return dtype_bits(out) >= dtype_bits(in);
}

}  // namespace tmap
