// The output stage of a kernel with a fused epilogue (ir/epilogue.h): where every family stores
// an output, store_d / store_d_vec read the epilogue's operands at the element's indices, apply
// the expression to the accumulator in float32 and round the result to the output's dtype once.
// Split-K and cluster sums reach store_d only after the sum, so the epilogue runs once. Operands
// are read through the read-only path (__ldg): the loads are then not ordered after the output's
// stores, so that an unrolled epilogue loop issues them ahead instead of waiting on each.

#include <functional>

#include "tile_pipeline.h"
#include "tmap/codegen/device_library.h"
#include "tmap/codegen/reference_emitter.h"
#include "tmap/gemm/contiguity.h"

namespace tmap::pipeline {
namespace {

std::string operand_name(int i) { return "epi_" + std::to_string(i); }

/// The expression in float32 code, with leaves named by `acc` and `operand`.
std::string epilogue_code(const Epilogue& e, const std::string& acc, const std::function<std::string(int)>& operand) {
  std::function<std::string(const EpiNode&)> leaf = [&](const EpiNode& n) -> std::string {
    if (n.op == EpiOp::kAcc) return acc;
    if (n.op == EpiOp::kOperand) return operand(n.operand);
    return epi_constant_code(n.value, false);
  };
  std::function<std::string(EpiOp, std::vector<std::string>&)> apply = [](EpiOp op, std::vector<std::string>& a) {
    return epi_op_code(op, a, "epi_");
  };
  return fold_epilogue<std::string>(e.program, leaf, apply);
}

/// The iterators of virtual axis `along` ('m' or 'n').
const std::vector<int>& axis_iters(const ImplicitGemm& g, char along) { return along == 'm' ? g.m_iters : g.n_iters; }

/// How an operand's values for a vector of `vec` outputs along `along` are loaded: 0 when they
/// are one value (the operand does not vary along the axis), else the elements per load (1: one
/// by one; more: aligned vectors of that many).
int operand_load_width(const ImplicitGemm& g, const Access& a, char along, int vec) {
  const Compute& c = *g.compute;
  bool varies = false;
  for (int it : axis_iters(g, along)) varies = varies || a.uses(it);
  if (!varies) return 0;
  const int w = contiguous_width(c, a, axis_iters(g, along), dtype_bits(c.tensor_of(a).dtype));
  return std::max(1, std::min(w, vec));
}

/// `int epi_offset_<i>(m, n, z)`: where operand i's element for the output at virtual (m, n) of
/// batch z is.
void emit_operand_offsets(std::ostringstream& os, const ImplicitGemm& g) {
  const Compute& c = *g.compute;
  for (std::size_t i = 0; i < c.epilogue.operands.size(); ++i) {
    const Access& a = c.epilogue.operands[i];
    const std::vector<bool> used = used_by(c, a);
    os << "// " << c.tensor_of(a).name << ": operand " << i << " of the epilogue\n"
       << "__device__ __forceinline__ int " << operand_name(static_cast<int>(i)) << "_offset(int m, int n, int z) {\n";
    decompose(os, c, g.m_iters, "m", used, "  ");
    decompose(os, c, g.n_iters, "n", used, "  ");
    decompose(os, c, g.batch_iters, "z", used, "  ");
    std::string offset = "0";
    for (std::size_t d = 0; d < a.indices.size(); ++d)
      offset = d ? "(" + offset + ") * " + std::to_string(c.tensor_of(a).shape[d]) + " + (" + affine_code(a.indices[d], c) + ")"
                 : "(" + affine_code(a.indices[d], c) + ")";
    os << "  (void)m; (void)n; (void)z;\n  return " << offset << ";\n}\n\n";
  }
}

/// Loads operand i's values for `vec` outputs from virtual (m, n) along `along` into float
/// `name`[vec] (a scalar when vec is 1).
void emit_operand_loads(std::ostringstream& os, const ImplicitGemm& g, int i, int vec, char along) {
  const Compute& c = *g.compute;
  const Access& a = c.epilogue.operands[i];
  const Tensor& t = c.tensor_of(a);
  const std::string name = operand_name(i), type = storage_type(t.dtype);
  if (vec == 1) {
    os << "  const float " << name << " = (float)__ldg(out." << name << " + " << name << "_offset(m, n, z));\n";
    return;
  }
  const int w = operand_load_width(g, a, along, vec);
  const std::string at = along == 'm' ? "m + p, n" : "m, n + p";
  os << "  float " << name << "[" << vec << "];\n";
  if (w == 0) {
    os << "  {  // one value for the whole vector\n"
       << "    const float v = (float)__ldg(out." << name << " + " << name << "_offset(m, n, z));\n"
       << "    #pragma unroll\n    for (int t = 0; t < " << vec << "; ++t) " << name << "[t] = v;\n  }\n";
    return;
  }
  const int bytes = w * dtype_bits(t.dtype) / 8;
  os << "  #pragma unroll\n  for (int p = 0; p < " << vec << "; p += " << w << ") {\n";
  if (w == 1) {
    os << "    " << name << "[p] = (float)__ldg(out." << name << " + " << name << "_offset(" << at << ", z));\n  }\n";
    return;
  }
  os << "    // " << w << " contiguous, aligned elements: one " << bytes << "-byte load\n"
     << "    const " << vector_type(bytes) << " v = __ldg(reinterpret_cast<const " << vector_type(bytes) << "*>(out." << name
     << " + " << name << "_offset(" << at << ", z)));\n"
     << "    const " << type << "* e = reinterpret_cast<const " << type << "*>(&v);\n"
     << "    #pragma unroll\n    for (int t = 0; t < " << w << "; ++t) " << name << "[p + t] = (float)e[t];\n  }\n";
}

}  // namespace

std::string output_params(const ImplicitGemm& g, const std::string& out_type) {
  const Compute& c = *g.compute;
  const std::string size = g.dynamic() ? ", const int size" : "";
  if (c.epilogue.empty()) return out_type + "* __restrict__ out" + size;
  std::string s = out_type + "* __restrict__ out_data";
  for (std::size_t i = 0; i < c.epilogue.operands.size(); ++i)
    s += ", const " + storage_type(c.tensor_of(c.epilogue.operands[i]).dtype) + "* __restrict__ " +
         operand_name(static_cast<int>(i));
  return s + size;
}

std::string output_bundle(const ImplicitGemm& g) {
  const Compute& c = *g.compute;
  std::string s = !g.dynamic() ? "" : g.dynamic_axis == 'm' ? "  M = size * PER_SIZE;\n" : "  N = size * PER_SIZE;\n";
  if (c.epilogue.empty()) return s;
  s += "  const Output out{out_data";
  for (std::size_t i = 0; i < c.epilogue.operands.size(); ++i) s += ", " + operand_name(static_cast<int>(i));
  return s + "};\n";
}

std::string stored_value(const ImplicitGemm& g, const std::string& out_type, const std::string& value) {
  return g.compute->epilogue.empty() ? "(" + out_type + ")" + value : value;
}

void emit_epilogue_scatter(std::ostringstream& os, const ImplicitGemm& g, const std::string& out_type, int vec,
                           char along) {
  const Compute& c = *g.compute;
  const Epilogue& e = c.epilogue;
  emit_device_include(os, "epilogue");
  os << "// The output and the epilogue's operands: " << c.epilogue_text() << "\n"
     << "struct Output {\n  " << out_type << "* __restrict__ data;\n";
  for (std::size_t i = 0; i < e.operands.size(); ++i)
    os << "  const " << storage_type(c.tensor_of(e.operands[i]).dtype) << "* __restrict__ " << operand_name(static_cast<int>(i))
       << ";  // " << c.tensor_of(e.operands[i]).name << "\n";
  os << "};\n\n";
  emit_operand_offsets(os, g);
  auto offset = [&] { emit_output_offset(os, g); };
  os << "// " << c.tensor_of(c.output).name << " element at virtual (m, n) of batch z: the epilogue applied to the sum\n"
     << "template <typename V>\n"
     << "__device__ __forceinline__ void store_d(const Output& out, int m, int n, int z, V value) {\n";
  offset();
  for (std::size_t i = 0; i < e.operands.size(); ++i) emit_operand_loads(os, g, static_cast<int>(i), 1, along);
  os << "  const float acc = (float)value;\n"
     << "  out.data[offset] = (" << out_type << ")" << epilogue_code(e, "acc", operand_name) << ";\n}\n\n";
  if (vec <= 1) return;
  const int bits = dtype_bits(c.tensor_of(c.output).dtype);
  os << "// " << vec << " outputs from virtual (m, n) on along " << along
     << ", contiguous and aligned in memory: one " << vec * bits / 8 << "-byte store\n"
     << "template <typename V>\n"
     << "__device__ __forceinline__ void store_d_vec(const Output& out, int m, int n, int z, const V* values) {\n";
  offset();
  for (std::size_t i = 0; i < e.operands.size(); ++i) emit_operand_loads(os, g, static_cast<int>(i), vec, along);
  os << "  __align__(16) " << out_type << " result[" << vec << "];\n"
     << "  #pragma unroll\n  for (int t = 0; t < " << vec << "; ++t) {\n"
     << "    const float acc = (float)values[t];\n"
     << "    result[t] = (" << out_type << ")"
     << epilogue_code(e, "acc", [](int i) { return operand_name(i) + "[t]"; }) << ";\n  }\n"
     << "  *reinterpret_cast<" << vector_type(vec * bits / 8) << "*>(out.data + offset) = *reinterpret_cast<const "
     << vector_type(vec * bits / 8) << "*>(result);\n}\n\n";
}

}  // namespace tmap::pipeline
