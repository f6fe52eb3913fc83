#include "tmap/codegen/reference_emitter.h"

#include <functional>
#include <sstream>

namespace tmap {
namespace {

std::string index_code(const AffineExpr& e, const Compute& c) {
  std::vector<std::string> names;
  for (const auto& it : c.iters) names.push_back("it_" + it.name);
  return to_string(e, names);
}

/// Emits the decomposition of `flat` over `iters` (the last fastest) into it_<name> variables.
void decompose(std::ostringstream& os, const Compute& c, const std::vector<int>& iters, const std::string& flat,
               const std::string& indent) {
  std::int64_t stride = 1;
  std::vector<std::int64_t> strides(iters.size());
  for (int i = static_cast<int>(iters.size()) - 1; i >= 0; --i) {
    strides[i] = stride;
    stride *= c.iters[iters[i]].extent;
  }
  for (std::size_t i = 0; i < iters.size(); ++i) {
    const std::string quotient = strides[i] == 1 ? flat : "(" + flat + " / " + std::to_string(strides[i]) + "LL)";
    os << indent << "const long long it_" << c.iters[iters[i]].name << " = " << quotient << " % "
       << c.iters[iters[i]].extent << "LL;\n";
  }
}

// Names in the kernel: tensors are t_<name>, iterators it_<name>, so neither clashes with the
// kernel's own variables.

/// Emits the linear offset of an access into `var`, and `inside` = whether it is in bounds.
void offset_code(std::ostringstream& os, const Compute& c, const Access& a, const std::string& var,
                 const std::string& indent) {
  const Tensor& t = c.tensor_of(a);
  std::string inside, offset;
  for (std::size_t d = 0; d < a.indices.size(); ++d) {
    std::string idx = "(" + index_code(a.indices[d], c) + ")";
    inside += (d ? " && " : "") + idx + " >= 0 && " + idx + " < " + std::to_string(t.shape[d]);
    offset = d ? "(" + offset + ") * " + std::to_string(t.shape[d]) + "LL + " + idx : idx;
  }
  os << indent << "const bool " << var << "_inside = " << inside << ";\n"
     << indent << "const long long " << var << " = " << offset << ";\n";
}

/// The epilogue's functions in double precision, written from their definitions (independently
/// of the kernels' float32 device library).
const char* kReferenceFunctions = R"(__device__ double ref_relu(double x) { return x > 0.0 ? x : 0.0; }
__device__ double ref_leaky_relu(double x, double s) { return x >= 0.0 ? x : x * s; }
__device__ double ref_min(double a, double b) { return a < b ? a : b; }
__device__ double ref_max(double a, double b) { return a > b ? a : b; }
__device__ double ref_clamp(double x, double lo, double hi) { return ref_min(ref_max(x, lo), hi); }
__device__ double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
__device__ double ref_tanh(double x) { return tanh(x); }
__device__ double ref_silu(double x) { return x / (1.0 + exp(-x)); }
__device__ double ref_gelu(double x) { return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); }
__device__ double ref_gelu_tanh(double x) {
  const double pi = 3.14159265358979323846;
  return 0.5 * x * (1.0 + tanh(sqrt(2.0 / pi) * (x + 0.044715 * x * x * x)));
}

)";

/// The epilogue applied to `sum` in double: operand i read at its indices into e<i>.
std::string reference_epilogue(std::ostringstream& os, const Compute& c) {
  const Epilogue& e = c.epilogue;
  for (std::size_t i = 0; i < e.operands.size(); ++i) {
    const std::string var = "e" + std::to_string(i);
    offset_code(os, c, e.operands[i], var + "_at", "  ");
    os << "  const double " << var << " = (double)(float)t_" << c.tensor_of(e.operands[i]).name << "[" << var << "_at];\n";
  }
  std::function<std::string(const EpiNode&)> leaf = [](const EpiNode& n) -> std::string {
    if (n.op == EpiOp::kAcc) return "(double)sum";
    if (n.op == EpiOp::kOperand) return "e" + std::to_string(n.operand);
    return epi_constant_code(n.value, true);
  };
  std::function<std::string(EpiOp, std::vector<std::string>&)> apply = [](EpiOp op, std::vector<std::string>& a) {
    return epi_op_code(op, a, "ref_");
  };
  return fold_epilogue<std::string>(e.program, leaf, apply);
}

/// Whether a warp should share each output point, its lanes splitting the reduction: when an
/// input's innermost index does not follow the output's fastest iterator that another index does
/// (a gemm_nt's B[n][k], an NHWC filter's K), one thread a point reads it a row apart in each
/// lane, and large references took seconds. Lanes along the reduction read such an input along
/// its rows. Short reductions keep a thread a point.
bool warp_per_point(const Compute& c, const std::vector<int>& spatial, std::int64_t reduction_points) {
  if (spatial.empty() || reduction_points < 32) return false;
  const int fastest = spatial.back();
  for (const Access& a : c.inputs) {
    if (a.indices.empty() || a.indices.back().uses(fastest)) continue;
    for (const AffineExpr& e : a.indices)
      if (e.uses(fastest)) return true;
  }
  return false;
}

/// The iterators of one kind, in order, and the points they span.
struct Loop {
  std::vector<int> iters;
  std::int64_t points = 1;
};

Loop loop_of(const Compute& c, IterKind kind) {
  Loop l;
  for (int i = 0; i < static_cast<int>(c.iters.size()); ++i)
    if (c.iters[i].kind == kind) l.iters.push_back(i), l.points *= c.iters[i].extent;
  return l;
}

/// What the reference says of itself, its includes and helpers, and its signature: every
/// tensor by name, the output's writable.
void emit_reference_head(std::ostringstream& os, const Compute& c, bool by_warp, std::int64_t reduction_points,
                         const std::string& acc) {
  os << "// Reference for: " << c.statement_text() << "\n"
     << "// " << (by_warp ? "One warp" : "One thread") << " per output element; " << reduction_points
     << " reduction points each, accumulated in " << acc << ".\n" << float_type_includes(c) << "\n"
     << "// Signed 4-bit element i of a packed array (two per byte, low nibble first).\n"
     << "__device__ __forceinline__ int nibble(const unsigned char* p, long long i) {\n"
     << "  const int byte = p[i >> 1];\n"
     << "  return (i & 1) ? (signed char)(byte & 0xF0) >> 4 : (signed char)(byte << 4) >> 4;\n}\n\n"
     << (c.epilogue.empty() ? "" : kReferenceFunctions)
     << "extern \"C\" __global__ void tmap_reference(";
  for (std::size_t t = 0; t < c.tensors.size(); ++t) {
    bool is_out = static_cast<int>(t) == c.output.tensor;
    os << (t ? ", " : "") << (is_out ? "" : "const ") << storage_type(c.tensors[t].dtype) << "* __restrict__ t_"
       << c.tensors[t].name;
  }
  os << ") {\n";
}

/// Loads each input's element at the reduction point (zero outside its tensor) into v0, v1, ...;
/// returns their product.
std::string emit_reference_factors(std::ostringstream& os, const Compute& c, const std::string& acc) {
  std::string product;
  for (std::size_t i = 0; i < c.inputs.size(); ++i) {
    std::string var = "x" + std::to_string(i);
    offset_code(os, c, c.inputs[i], var, "    ");
    const Tensor& t = c.tensor_of(c.inputs[i]);
    const bool half_type = t.dtype == DType::kFloat16 || t.dtype == DType::kBFloat16 || dtype_is_float8(t.dtype);
    const std::string element = t.dtype == DType::kInt4 ? "nibble(t_" + t.name + ", " + var + ")"
                                                        : "t_" + t.name + "[" + var + "]";
    os << "    const " << acc << " v" << i << " = " << var << "_inside ? (" << acc << ")(" << (half_type ? "(float)" : "")
       << element << ") : 0;\n";
    product += (i ? " * " : "") + std::string("v") + std::to_string(i);
  }
  return product;
}

}  // namespace

KernelSource emit_reference_kernel(const Compute& c) {
  const Loop spatial = loop_of(c, IterKind::kSpatial), reduction = loop_of(c, IterKind::kReduction);
  const Tensor& out = c.tensor_of(c.output);
  const std::string acc = dtype_is_float(c.accumulate) ? "double" : "long long";
  const bool by_warp = warp_per_point(c, spatial.iters, reduction.points);
  const std::int64_t lanes = by_warp ? 32 : 1;
  KernelSource k;
  k.name = "tmap_reference";
  k.threads = 256;
  k.grid = {(spatial.points * lanes + 255) / 256, 1, 1};

  std::ostringstream os;
  emit_reference_head(os, c, by_warp, reduction.points, acc);
  os << "  const long long thread = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
     << "  const long long point = thread / " << lanes << ", lane = thread % " << lanes << ";\n"
     << "  if (point >= " << spatial.points << "LL) return;  // the whole warp, when one shares a point\n";
  decompose(os, c, spatial.iters, "point", "  ");
  os << "  " << acc << " sum = 0;\n"
     << "  for (long long r = lane; r < " << reduction.points << "LL; r += " << lanes << ") {\n";
  decompose(os, c, reduction.iters, "r", "    ");
  const std::string product = emit_reference_factors(os, c, acc);
  os << "    sum += " << product << ";\n  }\n";
  if (by_warp)
    os << "  for (int d = 16; d > 0; d /= 2) sum += __shfl_down_sync(0xffffffffu, sum, d);\n"
       << "  if (lane != 0) return;\n";
  offset_code(os, c, c.output, "y", "  ");
  const std::string value = c.epilogue.empty() ? "sum" : reference_epilogue(os, c);
  const bool half_out = out.dtype == DType::kFloat16 || out.dtype == DType::kBFloat16;
  os << "  t_" << out.name << "[y] = (" << storage_type(out.dtype) << ")(" << (half_out ? "(float)" : "") << value
     << ");\n}\n";
  k.code = os.str();
  return k;
}

}  // namespace tmap
