#include "tile_pipeline.h"

#include <algorithm>
#include <cctype>

#include "tmap/codegen/device_library.h"
#include "tmap/codegen/reference_emitter.h"
#include "tmap/support/diagnostic.h"

namespace tmap {

std::string storage_type(DType t) {
  switch (t) {
    case DType::kFloat16: return "half";
    case DType::kBFloat16: return "__nv_bfloat16";
    case DType::kTFloat32:
    case DType::kFloat32: return "float";
    case DType::kFloat64: return "double";
    case DType::kInt8: return "signed char";
    case DType::kInt32: return "int";
    case DType::kInt4: return "unsigned char";  // packed: element e in byte e / 2, low nibble first
    case DType::kFloat8E4M3: return "__nv_fp8_e4m3";
    case DType::kFloat8E5M2: return "__nv_fp8_e5m2";
  }
  TMAP_CHECK(false, "generated code does not support dtype " + std::string(dtype_name(t)) + " yet");
  return "";
}

std::string float_type_includes(const Compute& c) {
  bool fp8 = false;
  for (const Tensor& t : c.tensors) fp8 = fp8 || dtype_is_float8(t.dtype);
  return std::string("#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n") + (fp8 ? "#include <cuda_fp8.h>\n" : "");
}

namespace pipeline {
namespace {

/// The most iterations of a gather loop unrolled in full.
constexpr int kMaxUnroll = 8;
/// The most registers a thread spends keeping its copies' fixed address parts (emit_fixed_parts).
constexpr int kMaxFixedRegisters = 24;

/// `const int offset` of an access (the output's: always in bounds inside the GEMM).
void access_code(std::ostringstream& os, const Compute& c, const Access& a, const std::string& indent) {
  const Tensor& t = c.tensor_of(a);
  for (std::size_t d = 0; d < a.indices.size(); ++d)
    os << indent << "const int i" << d << " = " << affine_code(a.indices[d], c) << ";  // dim " << d << " of "
       << t.shape[d] << "\n";
  std::string offset = "i0";
  for (std::size_t d = 1; d < a.indices.size(); ++d)
    offset = "(" + offset + ") * " + std::to_string(t.shape[d]) + " + i" + std::to_string(d);
  os << indent << "const int offset = " << offset << ";\n";
}

}  // namespace

/// Emits `const int v = ...;` lines recovering iterator values from a flat coordinate
/// (mixed radix over `iters`, the last fastest), only for iterators in `used`.
std::string digit_code(const Compute& c, const std::vector<int>& iters, int it, const std::string& flat) {
  std::int64_t below = 1;
  std::size_t i = iters.size();
  while (iters[--i] != it) below *= c.iters[iters[i]].extent;
  const std::string v = below == 1 ? flat : "(" + flat + " / " + std::to_string(below) + ")";
  return i > 0 ? v + " % " + std::to_string(c.iters[it].extent) : v;
}

void decompose(std::ostringstream& os, const Compute& c, const std::vector<int>& iters, const std::string& coord,
               const std::vector<bool>& used, const std::string& indent) {
  for (int it : iters)
    if (used[it])
      os << indent << "const int it_" << c.iters[it].name << " = " << digit_code(c, iters, it, coord) << ";  // iterator "
         << c.iters[it].name << ", extent " << c.iters[it].extent << "\n";
}

/// Iterator variables are prefixed so that they never clash with the kernel's own names.
std::string affine_code(const AffineExpr& e, const Compute& c) {
  std::vector<std::string> names;
  for (const auto& it : c.iters) names.push_back("it_" + it.name);
  return to_string(e, names);
}

std::vector<bool> used_by(const Compute& c, const Access& a) {
  std::vector<bool> used(c.iters.size());
  for (std::size_t it = 0; it < c.iters.size(); ++it) used[it] = a.uses(static_cast<int>(it));
  return used;
}

std::string linear_offset_code(const ImplicitGemm& g, const Access& a) {
  const Compute& c = *g.compute;
  for (std::size_t it = 0; it < c.iters.size(); ++it) {
    const int i = static_cast<int>(it);
    if (a.uses(i) && c.iters[it].extent != 1 && !contains(g.m_iters, i) && !contains(g.n_iters, i) &&
        !contains(g.batch_iters, i))
      return "";
  }
  std::string code;
  for (const auto& [coord, axis] : {std::pair<const char*, const std::vector<int>*>{"m", &g.m_iters},
                                    {"n", &g.n_iters}, {"z", &g.batch_iters}}) {
    std::int64_t extent = 1;
    for (int it : *axis) extent *= c.iters[it].extent;
    const std::optional<std::int64_t> stride = flat_stride(c, a, *axis);
    if (!stride) return "";
    if (*stride == 0 || extent == 1) continue;  // a coordinate that is always 0 (one group) moves nothing
    code += (code.empty() ? "" : " + ") + std::string(coord) + (*stride == 1 ? "" : " * " + std::to_string(*stride));
  }
  const Tensor& t = c.tensor_of(a);
  std::int64_t constant = 0;
  for (std::size_t d = 0; d < a.indices.size(); ++d) constant += a.indices[d].constant * t.stride(d);
  if (constant != 0 || code.empty()) code += (code.empty() ? "" : " + ") + std::to_string(constant);
  return code;
}

namespace {

std::string names_of(const Compute& c, const std::vector<int>& its) {
  std::string s;
  for (int it : its) s += (s.empty() ? "" : ", ") + c.iters[it].name;
  return s.empty() ? std::string("none") : s;
}

}  // namespace

std::string vector_type(int bytes) {
  switch (bytes) {
    case 16: return "uint4";
    case 8: return "uint2";
    case 4: return "unsigned int";
    case 2: return "unsigned short";
  }
  return "unsigned char";
}

std::string identifier(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

std::string partial_type(const ImplicitGemm& g) {
  // A half accumulator's splits are summed in float.
  return g.hw->d_dtype == DType::kFloat16 ? "float" : storage_type(g.hw->d_dtype);
}

StoredTile stored_tile(const ImplicitGemm& g, const ScheduleParams& p, int which) {
  const int bytes = dtype_bits(which == 0 ? g.hw->a_dtype : g.hw->b_dtype) / 8;
  const std::int64_t mn = which == 0 ? p.block_m : p.block_n;
  return stored_along_mn(g, which) ? StoredTile{p.block_k, mn, bytes} : StoredTile{mn, p.block_k, bytes};
}

std::int64_t partial_bytes(const ImplicitGemm& g, const ScheduleParams& p) {
  return p.split_k * g.batch * g.M * g.N * (partial_type(g) == "double" ? 8 : 4);
}

TileCounters tile_counters(const ImplicitGemm& g, const ScheduleParams& p) {
  return {round_up(partial_bytes(g, p), 256), g.batch, (g.M + p.block_m - 1) / p.block_m,
          (g.N + p.block_n - 1) / p.block_n};
}

std::string accumulator_type(DType t) { return t == DType::kInt32 ? "int" : "float"; }

KernelSource kernel_shell(const ImplicitGemm& g, const ScheduleParams& p, int threads) {
  const Compute& c = *g.compute;
  KernelSource k;
  k.name = identifier("tmap_" + c.name + "_" + g.hw->name + "_" + g.layout + "_" + g.shape.str() + "_map" +
                      std::to_string(g.mapping_id) + (g.relayouted() ? "_relayout" : "") +
                      (g.relayout_knob == 2 ? "8" : ""));
  k.threads = threads;
  k.shared_bytes = shared_bytes(g, p);
  k.grid = {(g.N + p.block_n - 1) / p.block_n, (g.M + p.block_m - 1) / p.block_m, g.batch * p.split_k};
  if (p.split_k > 1 && p.cluster != 1 && p.split_reduce) {
    const TileCounters t = tile_counters(g, p);
    k.zeroed_offset = t.offset;
    k.zeroed_bytes = t.bytes();
    k.workspace_bytes = t.offset + t.bytes();
  } else if (p.split_k > 1 && p.cluster != 1) {
    k.workspace_bytes = partial_bytes(g, p);
    k.reduce_name = k.name + "_reduce";
    k.reduce_blocks = (g.batch * g.M * g.N + k.reduce_threads - 1) / k.reduce_threads;
  }
  if (g.dynamic()) {
    k.size_lo = c.dynamic.lo;
    k.size_hi = c.dynamic.hi;
    const bool m = g.dynamic_axis == 'm';
    k.grid_growth = {m ? 1 : 0, g.per_size, m ? p.block_m : p.block_n, 1};
    if (!k.reduce_name.empty())
      k.reduce_growth = {0, g.batch * g.per_size * (m ? g.N : g.M), k.reduce_threads, 1};
  }
  return k;
}

void emit_header(std::ostringstream& os, const ImplicitGemm& g) {
  const Compute& c = *g.compute;
  os << "// Generated by tmap: " << c.statement_text() << "\n"
     << "// on " << g.hw->name << " (" << family_intrinsic(*g.hw) << ", " << g.shape.str() << ", layout " << g.layout
     << "), mapping " << g.mapping_id << "\n"
     << "// Virtual GEMM: M = " << g.M << " (" << names_of(c, g.m_iters) << "), N = " << g.N << " ("
     << names_of(c, g.n_iters) << "), K = " << g.K << " (" << names_of(c, g.k_iters) << ")\n"
     << "// Batch (grid z) = " << g.batch << " (" << names_of(c, g.batch_iters) << "); serial reduction = " << g.serial
     << " (" << names_of(c, g.serial_iters) << ")\n"
     << "// Operands: A = " << c.tensor_of(c.inputs[g.a_input]).name << ", B = "
     << c.tensor_of(c.inputs[g.b_input]).name << ", D = " << c.tensor_of(c.output).name << "\n";
}

void emit_common_constants(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p, int threads) {
  if (g.dynamic()) {
    const char* d = g.dynamic_axis == 'm' ? "M" : "N";
    os << "constexpr int " << d << "_MAX = " << g.dynamic_extent() << ", PER_SIZE = " << g.per_size << ";  // the largest "
       << d << "; elements of " << d << " per unit of the run-time size\n"
       << "__shared__ int " << d << ";  // this launch's " << d
       << ": the size argument x PER_SIZE, stored by every thread at entry\n"
       << "constexpr int " << (g.dynamic_axis == 'm' ? "N = " + std::to_string(g.N) : "M = " + std::to_string(g.M))
       << ", K = " << g.K << ";\n";
  } else {
    os << "constexpr int M = " << g.M << ", N = " << g.N << ", K = " << g.K << ";\n";
  }
  os
     << "constexpr int SERIAL = " << g.serial << ";\n"
     << "constexpr int BM = " << p.block_m << ", BN = " << p.block_n << ", BK = " << p.block_k << ";  // block tile\n"
     << "constexpr int WM = " << p.warp_m << ", WN = " << p.warp_n << ";  // warp tile\n"
     << "constexpr int WARPS_N = BN / WN;\n"
     << "constexpr int THREADS = " << threads << ";\n"
     << "constexpr int STAGES = " << p.stages << ";\n"
     << "constexpr int SPLIT_K = " << p.split_k << ";  // reduction splits (grid z = batch x SPLIT_K)\n"
     << "constexpr int BATCH = " << g.batch << ";\n"
     << "constexpr int RASTER = " << p.raster << ";  // rows of M tiles walked together\n";
}

void emit_cp_async_helpers(std::ostringstream& os) { emit_device_include(os, "cp_async"); }

namespace {

/// How operand `which`'s index expressions split between the iterators fixed for a whole
/// reduction (its row or column in the GEMM, and the batch) and those that move with the steps
/// (k and the serial reduction). Per dimension: the fixed part (with the constant), the moving
/// part, and whether its bounds need checking at all (the range the iterators can reach lies
/// outside the dimension).
struct OperandSplit {
  const Access* access = nullptr;
  std::vector<int> moving_iters;
  std::vector<AffineExpr> fixed, moving;
  std::vector<bool> check;  ///< The dimension's index can leave [0, shape).
  std::vector<std::int64_t> strides;
  /// Copied in shifted vectors (copies_shifted): the last dimension's bounds are checked per
  /// aligned vector, from its whole fixed part.
  bool shifted = false;

  std::size_t last() const { return fixed.size() - 1; }
  bool has_fixed(std::size_t d) const { return !fixed[d].terms.empty(); }
  bool has_moving(std::size_t d) const { return !moving[d].terms.empty(); }
  /// Bounds checked element by element (a shifted operand's last dimension is not).
  bool checked(std::size_t d) const { return check[d] && !(shifted && d == last()); }
  /// A dimension both parts move: its fixed part is kept for the bounds check of each step.
  bool kept(std::size_t d) const {
    return (shifted && d == last()) || (check[d] && has_fixed(d) && has_moving(d));
  }
};

OperandSplit split_operand(const ImplicitGemm& g, const ScheduleParams& p, int which) {
  const Compute& c = *g.compute;
  OperandSplit sp;
  sp.access = &c.inputs[which == 0 ? g.a_input : g.b_input];
  sp.shifted = copies_shifted(g, p, which);
  sp.moving_iters = g.k_iters;
  sp.moving_iters.insert(sp.moving_iters.end(), g.serial_iters.begin(), g.serial_iters.end());
  const Tensor& t = c.tensor_of(*sp.access);
  for (std::size_t d = 0; d < t.shape.size(); ++d) sp.strides.push_back(t.stride(d));
  for (std::size_t d = 0; d < sp.access->indices.size(); ++d) {
    const AffineExpr& e = sp.access->indices[d];
    AffineExpr f, m;
    f.constant = e.constant;
    for (const auto& [it, coef] : e.terms) {
      const bool moving = std::find(sp.moving_iters.begin(), sp.moving_iters.end(), it) != sp.moving_iters.end();
      (moving ? m : f).terms.push_back({it, coef});
    }
    sp.fixed.push_back(f);
    sp.moving.push_back(m);
    const auto [lo, hi] = c.index_range(e);
    sp.check.push_back(lo < 0 || hi >= t.shape[d]);
  }
  return sp;
}

std::string fixed_type(char op) { return op == 'a' ? "AFixed" : "BFixed"; }
std::string staged_type(char op) { return op == 'a' ? "AStaged" : "BStaged"; }

}  // namespace

namespace {

/// What the parts of an operand's loader share: the operand, its split into the part a row (or
/// column) and batch entry fix and the part each reduction step moves, and its copies.
struct OperandLoader {
  OperandLoader(const ImplicitGemm& g, const ScheduleParams& p, int which)
      : g(g), p(p), c(*g.compute), is_a(which == 0), sp(split_operand(g, p, which)), acc(*sp.access),
        t(c.tensor_of(acc)), dtype(is_a ? g.hw->a_dtype : g.hw->b_dtype), type(storage_type(dtype)),
        packed(dtype_bits(dtype) < 8), vec(is_a ? p.vec_a : p.vec_b), elem_bytes(std::max(1, dtype_bits(dtype) / 8)),
        async(copies_async(g, p, which)), op(is_a ? 'a' : 'b'), ftype(fixed_type(op)), used(used_by(c, acc)),
        load(sp.shifted ? shifted_load_width(g, p, which) : vec), strided(copies_strided(g, p, which)) {}
  std::string code(const AffineExpr& e) const { return affine_code(e, c); }

  const ImplicitGemm& g;
  const ScheduleParams& p;
  const Compute& c;
  bool is_a;
  OperandSplit sp;
  const Access& acc;
  const Tensor& t;
  DType dtype;
  std::string type;
  bool packed;
  int vec, elem_bytes;
  bool async;
  char op;
  std::string ftype;
  std::vector<bool> used;
  int load;  ///< A shifted copy reads the two aligned vectors of `load` elements that cover its group.
  bool strided;
};

/// The fixed part: the element's offset and bounds as far as its row m (A) or column n (B) and
/// the batch decide them, computed once per copy and kept for every step.
void emit_fixed_part(std::ostringstream& os, const OperandLoader& l) {
  const ImplicitGemm& g = l.g;
  const Compute& c = l.c;
  const OperandSplit& sp = l.sp;
  const Access& acc = l.acc;
  const Tensor& t = l.t;
  const char* fixed_name = l.is_a ? "m" : "n";
  const std::string fixed_extent = l.is_a ? "M" : "N", ftype = l.ftype;
  const std::int64_t fixed_total = l.is_a ? g.M : g.N, fixed_tile = l.is_a ? l.p.block_m : l.p.block_n;
  const char op = l.op;
  const bool is_a = l.is_a;
  const std::vector<bool>& used = l.used;
  auto code = [&](const AffineExpr& e) { return l.code(e); };
  os << "// " << t.name << ": the part of an element's address that its " << fixed_name
     << " and batch z fix for the whole reduction\n"
     << "struct " << ftype << " {\n  int offset;  // from the fixed iterators and the constants\n"
     << "  bool ok;  // inside the GEMM and the tensor as far as they tell\n";
  for (std::size_t d = 0; d < acc.indices.size(); ++d)
    if (sp.kept(d))
      os << "  int d" << d << ";  // fixed part of the index of dim " << d
         << (sp.shifted && d == sp.last() ? " (places the shifted vectors)\n" : " (k moves it too)\n");
  os << "};\n"
     << "__device__ __forceinline__ " << ftype << " " << op << "_fixed(int " << fixed_name << ", int z) {\n";
  decompose(os, c, is_a ? g.m_iters : g.n_iters, fixed_name, used, "  ");
  decompose(os, c, g.batch_iters, "z", used, "  ");
  os << "  " << ftype << " f;\n  f.ok = ";
  const bool runtime_extent = g.dynamic() && g.dynamic_axis == (is_a ? 'm' : 'n');
  std::string ok = fixed_total % fixed_tile || runtime_extent ? std::string(fixed_name) + " < " + fixed_extent : "";
  for (std::size_t d = 0; d < acc.indices.size(); ++d)
    if (sp.checked(d) && !sp.has_moving(d))
      ok += (ok.empty() ? "" : " && ") + std::string("(unsigned)(") + code(sp.fixed[d]) + ") < " +
            std::to_string(t.shape[d]) + "u";
  os << (ok.empty() ? "true" : ok) << ";\n";
  std::string offset;
  for (std::size_t d = 0; d < acc.indices.size(); ++d) {
    if (sp.fixed[d].terms.empty() && sp.fixed[d].constant == 0) continue;
    offset += (offset.empty() ? "" : " + ") + std::string("(") + code(sp.fixed[d]) + ")" +
              (sp.strides[d] != 1 ? " * " + std::to_string(sp.strides[d]) : "");
  }
  os << "  f.offset = " << (offset.empty() ? "0" : offset) << ";\n";
  for (std::size_t d = 0; d < acc.indices.size(); ++d)
    if (sp.kept(d)) os << "  f.d" << d << " = " << code(sp.fixed[d]) << ";\n";
  os << "  return f;\n}\n\n";

}

/// The loader's declaration: a shifted copy's fetch into registers, or a load (of one element, or
/// of a vector into `dst`).
void emit_loader_signature(std::ostringstream& os, const OperandLoader& l) {
  const int vec = l.vec, bytes = vec * l.elem_bytes, load = l.load;
  const std::string value_type = l.packed ? "int" : l.type, type = l.type, ftype = l.ftype;
  const std::string fname = std::string(l.is_a ? "load_a" : "load_b") + (vec > 1 ? "_vec" : "");
  const std::string load_type = vector_type(load * l.elem_bytes);
  const Tensor& t = l.t;
  const char op = l.op;
  const bool strided = l.strided, async = l.async;
  if (l.sp.shifted) {
    const std::string st = staged_type(op);
    os << "// " << vec << " elements of " << t.name
       << (strided ? " every other one in memory (stride 2), spanning the two aligned vectors of " +
                         std::to_string(load) + " elements that cover them, held in registers until store_strided() picks them out\n"
                   : " contiguous in memory but not aligned to " + std::to_string(vec) +
                         ": the two aligned vectors that cover them, held in registers until store_shifted() puts them in place\n")
       << "struct " << st << " {\n  " << load_type << " lo, hi;\n  int shift;  // bytes into lo of the first element\n};\n"
       << "// " << t.name << " elements at fixed part f and reduction point (k, s) and the next " << vec - 1
       << " along the tile's row; zero outside the GEMM or the tensor\n"
       << "__device__ __forceinline__ void fetch_" << op << "(const " << type << "* __restrict__ src, const " << ftype
       << "& f, int k, int s, " << st << "& st) {\n";
  } else {
    os << "// " << t.name << " element" << (vec > 1 ? "s" : "") << " at fixed part f and reduction point (k, s)"
       << (vec > 1 ? " and the next " + std::to_string(vec - 1) + " along the tile's row, contiguous and aligned in "
                     "memory: one " + std::to_string(bytes) + "-byte " + (async ? "cp.async" : "load")
                   : "")
       << "; zero outside the GEMM or the tensor\n"
       << "__device__ __forceinline__ " << (vec > 1 ? "void" : value_type) << " " << fname << "(const " << type
       << "* __restrict__ src, const " << ftype << "& f, int k, int s" << (vec > 1 ? ", " + type + "* dst" : "")
       << ") {\n";
  }
}

/// The condition that a step's element lies inside the GEMM (k < K) and inside the tensor
/// along each checked dimension that moves with the step.
std::string step_in_bounds(const OperandLoader& l) {
  const OperandSplit& sp = l.sp;
  std::string valid = "f.ok";
  if (l.g.K % l.p.block_k) valid += " && k < K";
  for (std::size_t d = 0; d < l.acc.indices.size(); ++d) {
    if (!sp.checked(d) || !sp.has_moving(d)) continue;
    AffineExpr m = sp.moving[d];
    if (!sp.has_fixed(d)) m.constant = sp.fixed[d].constant;
    valid += " && (unsigned)(" + std::string(sp.kept(d) ? "f.d" + std::to_string(d) + " + " : "") + l.code(m) +
             ") < " + std::to_string(l.t.shape[d]) + "u";
  }
  return valid;
}

/// The part of the element offset that moves with the step (" + (index) * stride" terms).
std::string step_offset(const OperandLoader& l) {
  const OperandSplit& sp = l.sp;
  std::string moving;
  for (std::size_t d = 0; d < l.acc.indices.size(); ++d)
    if (sp.has_moving(d))
      moving += " + (" + l.code(sp.moving[d]) + ")" + (sp.strides[d] != 1 ? " * " + std::to_string(sp.strides[d]) : "");
  return moving;
}

/// A shifted group: it starts `r` elements into an aligned vector of the last dimension; the two
/// aligned vectors covering it are each wholly inside or outside the dimension.
void emit_shifted_load(std::ostringstream& os, const OperandLoader& l, const std::string& valid,
                       const std::string& moving) {
  const OperandSplit& sp = l.sp;
  const std::size_t last = sp.last();
  const std::string load_type = vector_type(l.load * l.elem_bytes);
  const std::string start = "f.d" + std::to_string(last) + (sp.has_moving(last) ? " + " + l.code(sp.moving[last]) : "");
  const std::string V = std::to_string(l.load), W = std::to_string(l.t.shape[last]) + "u";
  os << "  const bool ok = " << valid << ";\n"
     << "  const int i = " << start << ";  // the group's first index in dim " << last << "\n"
     << "  const int r = i & " << l.load - 1 << ", lo = i - r;\n"
     << "  const bool ok_lo = ok && (unsigned)lo < " << W << ", ok_hi = ok && (unsigned)(lo + " << V << ") < " << W
     << ";\n"
     << "  const int offset = ok ? f.offset" << moving << " - r : 0;\n"
     << "  st.lo = ok_lo ? *reinterpret_cast<const " << load_type << "*>(src + offset) : decltype(st.lo){};\n"
     << "  st.hi = ok_hi ? *reinterpret_cast<const " << load_type << "*>(src + offset + " << V
     << ") : decltype(st.hi){};\n"
     << "  st.shift = r * " << l.elem_bytes << ";\n}\n\n";
}

/// The moving part, per step: the rest of the offset and of the bounds; out of bounds reads
/// zero without a branch (cp.async with a source size of 0, or a select).
void emit_loader_body(std::ostringstream& os, const OperandLoader& l) {
  decompose(os, l.c, l.g.k_iters, "k", l.used, "  ");
  decompose(os, l.c, l.g.serial_iters, "s", l.used, "  ");
  const std::string valid = step_in_bounds(l), moving = step_offset(l);
  if (l.sp.shifted) {
    emit_shifted_load(os, l, valid, moving);
    return;
  }
  const int bytes = l.vec * l.elem_bytes;
  const std::string vtype = vector_type(bytes);
  os << "  const bool ok = " << valid << ";\n"
     << "  const int offset = ok ? f.offset" << moving << " : 0;\n";
  if (l.async)
    os << "  cp_async<" << bytes << ">(dst, src + offset, ok);\n}\n\n";
  else if (l.vec > 1)
    os << "  " << vtype << " v{};\n  if (ok) v = *reinterpret_cast<const " << vtype << "*>(src + offset);\n"
       << "  *reinterpret_cast<" << vtype << "*>(dst) = v;\n}\n\n";
  else if (l.packed)
    os << "  return ok ? nibble(src, offset) : 0;\n}\n\n";
  else
    os << "  return ok ? src[offset] : static_cast<" << l.type << ">(0.0f);\n}\n\n";
}

}  // namespace

void emit_operand_loader(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p, int which) {
  const OperandLoader l(g, p, which);
  emit_fixed_part(os, l);
  emit_loader_signature(os, l);
  emit_loader_body(os, l);
}

namespace {

/// In a function of (m, n, z): `const int offset` of the output element (its iterators it_<name>
/// in scope), without a bound check.
void emit_output_index(std::ostringstream& os, const ImplicitGemm& g) {
  const Compute& c = *g.compute;
  if (const std::string linear = linear_offset_code(g, c.output); !linear.empty()) {
    os << "  const int offset = " << linear << ";  // m, n and z each step evenly through the output\n";
    return;
  }
  const std::vector<bool> used = used_by(c, c.output);
  decompose(os, c, g.m_iters, "m", used, "  ");
  decompose(os, c, g.n_iters, "n", used, "  ");
  decompose(os, c, g.batch_iters, "z", used, "  ");
  access_code(os, c, c.output, "  ");
}

}  // namespace

void emit_output_offset(std::ostringstream& os, const ImplicitGemm& g) {
  os << "  if (m >= M || n >= N) return;\n";
  emit_output_index(os, g);
}

void emit_output_address(std::ostringstream& os, const ImplicitGemm& g, const std::string& out_type) {
  os << "// Where " << g.compute->tensor_of(g.compute->output).name << "'s element at virtual (m, n) of batch z lies\n"
     << "__device__ __forceinline__ " << out_type << "* out_address(" << out_type
     << "* __restrict__ out, int m, int n, int z) {\n";
  emit_output_index(os, g);
  os << "  (void)m; (void)n; (void)z;\n  return out + offset;\n}\n\n";
}

int output_vector_width(const ImplicitGemm& g, char along, int out_bits) {
  const std::vector<int>& axis = along == 'm' ? g.m_iters : g.n_iters;
  if (axis.empty() || out_bits < 8) return 1;
  return contiguous_width(*g.compute, g.compute->output, axis, out_bits);
}

void emit_output_scatter(std::ostringstream& os, const ImplicitGemm& g, const std::string& out_type, int vec,
                         char along) {
  if (!g.compute->epilogue.empty()) return emit_epilogue_scatter(os, g, out_type, vec, along);
  emit_plain_stores(os, g, out_type, vec, along);
}

void emit_plain_stores(std::ostringstream& os, const ImplicitGemm& g, const std::string& out_type, int vec,
                       char along) {
  const Compute& c = *g.compute;
  auto offset = [&] { emit_output_offset(os, g); };
  os << "// " << c.tensor_of(c.output).name << " element at virtual (m, n) of batch z\n"
     << "__device__ __forceinline__ void store_d(" << out_type << "* __restrict__ out, int m, int n, int z, "
     << out_type << " value) {\n";
  offset();
  os << "  out[offset] = value;\n}\n\n";
  if (vec > 1) {
    const int bits = dtype_bits(c.tensor_of(c.output).dtype);
    os << "// " << vec << " outputs from virtual (m, n) on along " << along
       << ", contiguous and aligned in memory: one " << vec * bits / 8 << "-byte store (the group is wholly in or\n"
       << "// out of the GEMM: its extent along " << along << " is a multiple of " << vec << ")\n"
       << "__device__ __forceinline__ void store_d_vec(" << out_type << "* __restrict__ out, int m, int n, int z, const "
       << out_type << "* values) {\n";
    offset();
    os << "  *reinterpret_cast<" << vector_type(vec * bits / 8) << "*>(out + offset) = *reinterpret_cast<const "
       << vector_type(vec * bits / 8) << "*>(values);\n}\n\n";
  }
}

void emit_block_origin(std::ostringstream& os, const ScheduleParams& p) {
  if (p.raster > 1) {
    os << "  // Rasterization: blocks in launch order walk RASTER rows of M tiles column by column, so\n"
       << "  // that the blocks resident together read the same A and B tiles from L2.\n"
       << "  const int GRID_M = (M + BM - 1) / BM, GRID_N = (N + BN - 1) / BN;\n";
    emit_tile_origin(os, p, "blockIdx.y * GRID_N + blockIdx.x", "  ");
  } else {
    os << "  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;\n";
  }
}

void emit_tile_origin(std::ostringstream& os, const ScheduleParams& p, const std::string& linear,
                      const std::string& indent) {
  // A pair of blocks sharing an operand (cluster 2: along m, 3: along n) takes a tile of twice
  // the block's rows (columns), each block its half by cta_rank.
  const int shared = pair_shared_operand(p);  // 1: the pair is along m, 0: along n
  const std::string tm = shared == 1 ? "(2 * BM)" : "BM", tn = shared == 0 ? "(2 * BN)" : "BN";
  const std::string dm = shared == 1 ? " + cta_rank * BM" : "", dn = shared == 0 ? " + cta_rank * BN" : "";
  if (p.raster > 1)
    os << indent << "const int linear = " << linear << ";\n"
       << indent << "const int first_row = linear / (RASTER * GRID_N) * RASTER, in_group = linear % (RASTER * GRID_N);\n"
       << indent << "const int group_rows = min(GRID_M - first_row, RASTER);\n"
       << indent << "const int m0 = (first_row + in_group % group_rows) * " << tm << dm << ", n0 = in_group / group_rows * "
       << tn << dn << ";\n";
  else
    os << indent << "const int m0 = (" << linear << ") / GRID_N * " << tm << dm << ", n0 = (" << linear << ") % GRID_N * "
       << tn << dn << ";\n";
}

std::int64_t stage_bytes(const ImplicitGemm& g, const ScheduleParams& p, int which) {
  const StoredTile s = stored_tile(g, p, which);
  return round_up(s.rows * s.row_bytes(p.swizzle ? 0 : p.smem_pad), 128);
}

/// `op`_at(r, c): where element (r, c) of a stored tile lives, in elements from the stage's start.
void emit_tile_index(std::ostringstream& os, const char* op, const StoredTile& s, const ScheduleParams& p) {
  const std::string up = op[0] == 'a' ? "A" : "B";
  if (!p.swizzle) {
    os << "constexpr int " << up << "_LD = " << s.cols << " + " << p.smem_pad << ";  // padded rows\n"
       << "constexpr int " << up << "_TILE = " << s.rows << " * " << up << "_LD;  // elements per stage\n"
       << "__device__ __forceinline__ int " << op << "_at(int r, int c) { return r * " << up << "_LD + c; }\n";
    return;
  }
  const std::int64_t row_bytes = s.cols * s.bytes;
  const int chunk = 16 / s.bytes;  // elements per 16-byte chunk
  os << "constexpr int " << up << "_TILE = " << s.rows << " * " << s.cols << ";  // elements per stage, swizzled\n";
  if (row_bytes >= 128)  // rows of whole 128-byte lines
    os << "__device__ __forceinline__ int " << op << "_at(int r, int c) { return swizzle_rows<" << s.cols << ", "
       << chunk << ">(r, c); }\n";
  else  // several rows share a 128-byte line
    os << "__device__ __forceinline__ int " << op << "_at(int r, int c) { return swizzle_packed<" << s.cols << ", "
       << s.bytes << ">(r, c); }\n";
}

void emit_kernel_entry(std::ostringstream& os, const ImplicitGemm& g, const KernelSource& k, const ScheduleParams& p, const std::string& ta,
                       const std::string& tb, const std::string& tout, const std::string& tpart) {
  os << "extern \"C\" __global__ void " << cluster_attribute(p) << "__launch_bounds__(THREADS)\n"
     << k.name << "(const " << ta << "* __restrict__ a_src, const " << tb << "* __restrict__ b_src, "
     << output_params(g, tout) << ", " << tpart << "* __restrict__ partial) {\n"
     << output_bundle(g) << "  extern __shared__ __align__(128) unsigned char smem[];\n"
     << "  " << ta << "* As = reinterpret_cast<" << ta << "*>(smem);                    // [STAGES][A_TILE]\n"
     << "  " << tb << "* Bs = reinterpret_cast<" << tb << "*>(smem + STAGES * A_BYTES);  // [STAGES][B_TILE]\n";
  emit_prologue_wait(os, g);
  emit_block_origin(os, p);
  os << "  const int z = blockIdx.z / SPLIT_K, split = blockIdx.z % SPLIT_K;\n";
  emit_epilogue_prefetch(os, g, p, "THREADS", "  ");
}

void emit_step_range(std::ostringstream& os) {
  os << "  constexpr int K_TILES = (K + BK - 1) / BK;\n"
     << "  constexpr int STEPS = SERIAL * K_TILES;  // serial reduction points x K tiles\n"
     << "  // This block's share of the steps: [first, last).\n"
     << "  const int first = (int)((long long)STEPS * split / SPLIT_K), last = (int)((long long)STEPS * (split + 1) / SPLIT_K);\n";
}

GatherTile gather_tile(char op, bool k_rows, int vec, int pack, bool shifted) {
  GatherTile t;
  t.op = op;
  t.vec = vec;
  t.pack = pack;
  t.shifted = shifted;
  const std::string extent = op == 'a' ? "BM" : "BN", var = op == 'a' ? "mm" : "nn";
  t.rows = k_rows ? "BK" : extent;
  t.cols = k_rows ? extent : "BK";
  t.row_var = k_rows ? "kk" : var;
  t.col_var = k_rows ? var : "kk";
  return t;
}

namespace {

/// Elements moved by one copy of a tile gather.
int group_of(const GatherTile& t) { return std::max(t.vec, t.pack); }

/// Copies each thread makes of a tile per step (the last round may leave threads idle).
std::int64_t copies_per_thread(const ScheduleParams& p, int threads, const GatherTile& t) {
  const std::int64_t elements = (t.op == 'a' ? std::int64_t{p.block_m} : std::int64_t{p.block_n}) * p.block_k;
  return (elements / group_of(t) + threads - 1) / threads;
}

/// `const int row = ..., col = ...;` of copy e of a tile gather.
std::string copy_coordinates(const GatherTile& t) {
  const int group = group_of(t);
  const std::string grp = group > 1 ? " / " + std::to_string(group) : "";
  return "const int " + t.row_var + " = e / (" + t.cols + grp + "), " + t.col_var + " = e % (" + t.cols + grp + ")" +
         (group > 1 ? " * " + std::to_string(group) : "") + ";";
}

/// The fixed coordinate of operand `op`'s copy (m of A, n of B) and its moving one (k).
std::string fixed_coordinate(char op) { return op == 'a' ? "m0 + mm" : "n0 + nn"; }

/// Copies of the whole tile (an expression of the kernel's constants).
std::string copies_of(const GatherTile& t) {
  return t.rows + " * " + t.cols + (group_of(t) > 1 ? " / " + std::to_string(group_of(t)) : "");
}

/// The top of the body of a loop over this thread's copies `it` of a tile gather: the copy's
/// index e (each thread takes every THREADS-th), past the end when the last round is partial,
/// and its coordinates in the tile.
std::string copy_loop_head(const GatherTile& t) {
  const std::string total = copies_of(t);
  return "      const int e = it * THREADS + threadIdx.x;\n"
         "      if ((" + total + ") % THREADS != 0 && e >= " + total + ") break;\n"
         "      " + copy_coordinates(t) + "\n";
}

/// Before the main loop: the fixed parts of this thread's copies of the tile (`op`_fix[], see
/// emit_operand_loader), when few enough to keep in registers; returns whether it emitted them.
bool emit_fixed_parts(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p, int threads,
                      const GatherTile& t) {
  if (t.pack > 1) return false;  // a packed pair can straddle two rows' fixed parts
  const OperandSplit sp = split_operand(g, p, t.op == 'a' ? 0 : 1);
  int kept = 0;
  for (std::size_t d = 0; d < sp.check.size(); ++d) kept += sp.kept(d);
  // Kept in registers for the whole kernel: worth it while the copies are few.
  if (copies_per_thread(p, threads, t) * (2 + kept) > kMaxFixedRegisters) return false;
  const std::string up = t.op == 'a' ? "A" : "B", arr = std::string(1, t.op) + "_fix";
  os << "  // The fixed part of each of this thread's " << up << " copies (see " << t.op << "_fixed), computed once.\n"
     << "  constexpr int " << up << "_COPIES = (" << copies_of(t) << " + THREADS - 1) / THREADS;\n"
     << "  " << fixed_type(t.op) << " " << arr << "[" << up << "_COPIES];\n"
     << "  #pragma unroll\n  for (int it = 0; it < " << up << "_COPIES; ++it) {\n"
     << "    const int e = it * THREADS + threadIdx.x;\n"
     << "    " << copy_coordinates(t) << "\n"
     << "    " << arr << "[it] = " << t.op << "_fixed(" << fixed_coordinate(t.op) << ", z);\n  }\n";
  return true;
}

/// One gather loop of the `load_tiles` lambda: elements go to `op`[`op`_at(row, col)] of the
/// stage buffer `op` (a pointer in scope), or, shifted, to the registers `op`_st[]; with
/// `hoisted`, through the fixed parts emitted by emit_fixed_parts, else computing them at each copy.
void emit_gather(std::ostringstream& os, const ScheduleParams& p, int threads, const GatherTile& t, bool hoisted) {
  const std::string tile = std::string(1, t.op), at = tile + "_at";
  const std::string fixed = hoisted ? tile + "_fix[it]" : tile + "_fixed(" + fixed_coordinate(t.op) + ", z)";
  const std::string load = "load_" + tile;
  // A loop of constant trip count (each thread takes every THREADS-th group), so it unrolls.
  const std::string total = copies_of(t);
  // Unrolling is capped: fully unrolled gathers of large tiles cost NVRTC minutes and registers
  // for nothing. With the fixed parts hoisted (few copies) it is full: they index a register array.
  const std::string gather_unroll =
      hoisted || t.shifted                                               ? "#pragma unroll\n"
      : !p.unroll || copies_per_thread(p, threads, t) <= kMaxUnroll ? unroll_pragma(p)
                                                                         : "#pragma unroll " + std::to_string(kMaxUnroll) + "\n";
  os << "    " << gather_unroll << "    for (int it = 0; it < (" << total << " + THREADS - 1) / THREADS; ++it) {\n"
     << copy_loop_head(t);
  const std::string slot = at + "(" + t.row_var + ", " + t.col_var + ")";
  if (t.shifted) {
    os << "      fetch_" << tile << "(" << tile << "_src, " << fixed << ", k0 + kk, s, " << tile << "_st[it]);\n";
  } else if (t.vec > 1) {
    os << "      " << load << "_vec(" << tile << "_src, " << fixed << ", k0 + kk, s, &" << tile << "[" << slot << "]);\n";
  } else if (t.pack > 1) {
    // The second element of the pair is one further along the tile's row: along k, or along m / n.
    const bool along_k = t.col_var == "kk";
    const std::string next_fixed =
        along_k ? fixed : tile + "_fixed(" + fixed_coordinate(t.op) + " + 1, z)";
    os << "      " << tile << "[" << slot << " / 2] = (unsigned char)((" << load << "(" << tile << "_src, " << fixed
       << ", k0 + kk, s) & 0xF) | (" << load << "(" << tile << "_src, " << next_fixed << ", k0 + kk"
       << (along_k ? " + 1" : "") << ", s) << 4));\n";
  } else {
    os << "      " << tile << "[" << slot << "] = " << load << "(" << tile << "_src, " << fixed << ", k0 + kk, s);\n";
  }
  os << "    }\n";
}

/// Before the load_tiles lambda: the registers (`op`_st[]) a shifted gather fetches into.
void emit_staged_registers(std::ostringstream& os, const ScheduleParams& p, int threads, const GatherTile& t) {
  if (!t.shifted) return;
  const std::string up = t.op == 'a' ? "A" : "B";
  os << "  // This thread's shifted " << up << " copies of one step, between fetch_" << t.op
     << " (in load_tiles) and their store (in store_staged).\n"
     << "  constexpr int " << up << "_STAGED = " << copies_per_thread(p, threads, t) << ";\n"
     << "  " << staged_type(t.op) << " " << t.op << "_st[" << up << "_STAGED];\n";
}

/// The helper that puts operand `which`'s shifted copies in place (emit_shift_helpers):
/// store_shifted, or for a strided operand store_strided<element bytes, vector of the group>.
std::string staged_store_call(const ImplicitGemm& g, const ScheduleParams& p, int which) {
  if (!copies_strided(g, p, which)) return "store_shifted";
  const int bytes = std::max(1, dtype_bits(which == 0 ? g.hw->a_dtype : g.hw->b_dtype) / 8);
  return "store_strided<" + std::to_string(bytes) + ", " + vector_type((which == 0 ? p.vec_a : p.vec_b) * bytes) + ">";
}

/// In the store_staged(buf) lambda, with the stage buffer `op` in scope: this thread's shifted
/// copies put in place by `store` (staged_store_call). Emits nothing for other gathers.
void emit_staged_store(std::ostringstream& os, const GatherTile& t, const std::string& store) {
  if (!t.shifted) return;
  const std::string tile(1, t.op), up = t.op == 'a' ? "A" : "B";
  os << "    #pragma unroll\n    for (int it = 0; it < " << up << "_STAGED; ++it) {\n"
     << copy_loop_head(t)
     << "      " << store << "(&" << tile << "[" << tile << "_at(" << t.row_var << ", " << t.col_var << ")], " << tile
     << "_st[it].lo, " << tile << "_st[it].hi, " << tile << "_st[it].shift);\n    }\n";
}

}  // namespace

void emit_shift_helpers(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p) {
  if (copies_shifted(g, p, 0) || copies_shifted(g, p, 1)) emit_device_include(os, "shift");
}

bool emit_byte_stage_loads(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p, int threads,
                           bool a_rows, bool b_rows, const std::string& ta, const std::string& tb) {
  return emit_tile_loads(os, g, p, threads, gather_tile('a', a_rows, p.vec_a, 1, copies_shifted(g, p, 0)),
                         gather_tile('b', b_rows, p.vec_b, 1, copies_shifted(g, p, 1)),
                         ta + "* a = As + buf * (A_BYTES / (int)sizeof(" + ta + "))",
                         tb + "* b = Bs + buf * (B_BYTES / (int)sizeof(" + tb + "))");
}

bool emit_tile_loads(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p, int threads,
                     const GatherTile& a, const GatherTile& b, const std::string& a_buffer,
                     const std::string& b_buffer) {
  const bool hoist_a = emit_fixed_parts(os, g, p, threads, a);
  const bool hoist_b = emit_fixed_parts(os, g, p, threads, b);
  emit_staged_registers(os, p, threads, a);
  emit_staged_registers(os, p, threads, b);
  os << "  // Gathers step `step` of the reduction into shared buffer `buf`"
     << (a.shifted || b.shifted ? " (shifted copies into registers)" : "") << ".\n"
     << "  auto load_tiles = [&](int step, int buf) {\n"
     << "    const int s = step / K_TILES, k0 = (step % K_TILES) * BK;\n";
  if (!a.shifted) os << "    " << a_buffer << ";\n";
  emit_gather(os, p, threads, a, hoist_a);
  if (!b.shifted) os << "    " << b_buffer << ";\n";
  emit_gather(os, p, threads, b, hoist_b);
  os << "  };\n";
  if (!a.shifted && !b.shifted) return false;
  os << "  // Puts the shifted copies fetched by load_tiles into shared buffer `buf`.\n"
     << "  auto store_staged = [&](int buf) {\n";
  if (a.shifted) os << "    " << a_buffer << ";\n";
  emit_staged_store(os, a, staged_store_call(g, p, 0));
  if (b.shifted) os << "    " << b_buffer << ";\n";
  emit_staged_store(os, b, staged_store_call(g, p, 1));
  os << "  };\n";
  return true;
}

void emit_main_loop(std::ostringstream& os, const ScheduleParams& p, bool staged) {
  // Copies staged in registers are stored to their buffer after the math of the step that
  // fetched them, which hides their latency (the buffer is free: its last reader finished before
  // the step's barrier; its readers wait at the next barrier).
  auto stored = [&](const std::string& indent, const std::string& cond, const std::string& buf) {
    if (!staged) return std::string();
    return indent + (cond.empty() ? "" : "if (" + cond + ") ") + "store_staged(" + buf + ");\n";
  };
  if (p.async_copy && p.stages >= 2) {
    os << "  // A pipeline of STAGES buffers with cp.async: the copies of the next STAGES - 1 steps fly\n"
       << "  // while a step is multiplied. One commit group per step (empty past the end), so waiting\n"
       << "  // for all but the newest STAGES - 2 groups waits for exactly the step about to be used.\n"
       << "  for (int t = 0; t < STAGES - 1; ++t) {\n"
       << "    if (first + t < last) {\n      load_tiles(first + t, t);\n" << stored("      ", "", "t") << "    }\n"
       << "    cp_async_commit();\n  }\n"
       << "  for (int step = first; step < last; ++step) {\n"
       << "    const int t = step - first;\n"
       << "    cp_async_wait<STAGES - 2>();  // this thread's copies of `step` have landed\n"
       << "    __syncthreads();  // every thread's too, and everyone is done with the buffer of step - 1\n"
       << "    if (step + STAGES - 1 < last) load_tiles(step + STAGES - 1, (t + STAGES - 1) % STAGES);\n"
       << "    cp_async_commit();\n"
       << "    compute(t % STAGES);\n"
       << stored("    ", "step + STAGES - 1 < last", "(t + STAGES - 1) % STAGES") << "  }\n"
       << "  cp_async_wait<0>();\n  __syncthreads();  // the epilogue reuses the buffers\n\n";
  } else if (p.async_copy) {
    os << "  for (int step = first; step < last; ++step) {\n"
       << "    load_tiles(step, 0);\n" << stored("    ", "", "0")
       << "    cp_async_commit();\n    cp_async_wait<0>();\n    __syncthreads();\n"
       << "    compute(0);\n    __syncthreads();\n  }\n\n";
  } else if (p.stages == 2) {
    os << "  // Double buffering: gather step + 1 into the other buffer while step is multiplied.\n"
       << "  load_tiles(first, first & 1);\n" << stored("  ", "", "first & 1") << "  __syncthreads();\n"
       << "  for (int step = first; step < last; ++step) {\n"
       << "    if (step + 1 < last) load_tiles(step + 1, (step + 1) & 1);\n"
       << "    compute(step & 1);\n" << stored("    ", "step + 1 < last", "(step + 1) & 1")
       << "    __syncthreads();\n  }\n\n";
  } else {
    os << "  for (int step = first; step < last; ++step) {\n"
       << "    load_tiles(step, 0);\n" << stored("    ", "", "0")
       << "    __syncthreads();\n    compute(0);\n    __syncthreads();\n  }\n\n";
  }
}

OutVector out_vector(const ImplicitGemm& g, const ScheduleParams& p) {
  if (p.split_k > 1 && p.cluster != 1) return {1, 'n'};  // partial sums are written in [m][n] order
  const int bits = dtype_bits(g.compute->tensor_of(g.compute->output).dtype);
  int vn = output_vector_width(g, 'n', bits), vm = output_vector_width(g, 'm', bits);
  // A vector never spans two blocks: blocks narrower than it (SIMT's can be 1 to 4 wide) take
  // narrower vectors, which keeps every block's vectors aligned too.
  while (vn > 1 && p.block_n % vn) vn /= 2;
  while (vm > 1 && p.block_m % vm) vm /= 2;
  return vm > vn ? OutVector{vm, 'm'} : OutVector{vn, 'n'};
}

std::int64_t epilogue_bytes(const ImplicitGemm& g, const ScheduleParams& p) {
  // Pads chosen so that the accumulators' stores meet no bank conflicts. Cs holds float or int
  // (accumulator_type(); a float16 accumulator is widened to float there).
  const int acc = 4;
  return out_vector(g, p).along == 'n' ? std::int64_t{p.block_m} * (p.block_n + 8) * acc
                                       : std::int64_t{p.block_n} * (p.block_m + 4) * acc;
}

std::int64_t ring_or_epilogue_bytes(const ImplicitGemm& g, const ScheduleParams& p) {
  const std::int64_t operands = p.stages * (stage_bytes(g, p, 0) + stage_bytes(g, p, 1));
  return std::max(operands, round_up(epilogue_bytes(g, p), 128));  // the epilogue reuses the buffers
}

void emit_ring_helpers(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p, const StoredTile& sa,
                       const StoredTile& sb, bool c_row) {
  if (p.swizzle) emit_device_include(os, "swizzle");
  emit_tile_index(os, "a", sa, p);
  emit_tile_index(os, "b", sb, p);
  os << "constexpr int A_BYTES = " << stage_bytes(g, p, 0) << ";  // one stage of A, 128-byte aligned\n"
     << "constexpr int B_BYTES = " << stage_bytes(g, p, 1) << ";\n"
     << "constexpr int C_LD = " << (c_row ? "BN + 8" : "BM + 4") << ";\n\n";
  if (p.async_copy) emit_cp_async_helpers(os);
  emit_cluster_helpers(os, p);
  emit_shift_helpers(os, g, p);
}

void emit_accumulator_quad(std::ostringstream& os, bool c_row, const std::string& value, const std::string& r8,
                           const std::string& c1, const std::string& swizzled) {
  const std::string r[4] = {"r", "r", r8, r8}, c[4] = {"c", c1, "c", c1};
  auto scaled = [](const std::string& x) { return x.size() > 1 ? "(" + x + ")" : x; };  // x * C_LD
  for (int t = 0; t < 4; ++t) {
    std::string v = value;
    v.replace(v.find('#'), 1, std::to_string(t));
    if (!swizzled.empty())
      os << "      " << swizzled << "[cs_at(" << (c_row ? r[t] + ", " + c[t] : c[t] + ", " + r[t]) << ")] = " << v << ";\n";
    else
      os << "      Cs[" << (c_row ? scaled(r[t]) + " * C_LD + " + c[t] : scaled(c[t]) + " * C_LD + " + r[t]) << "] = " << v
         << ";\n";
  }
}

namespace {

/// In a cluster's epilogue: `values`, vector `at` of the tile summed over every block's Cs, in
/// split order. Every block's words are loaded before any is added, so that the remote loads overlap.
void emit_cluster_sum(std::ostringstream& os, int v, const std::string& acc_type, const std::string& at) {
  const std::string V = std::to_string(v);
  os << "    unsigned bits[SPLIT_K][" << V << "];\n"
     << "    #pragma unroll\n    for (int rank = 0; rank < SPLIT_K; ++rank) {\n"
     << "      const unsigned at = cluster_address(cs_local + (" << at << ") * 4u, rank);\n";
  if (v >= 4)
    os << "      #pragma unroll\n      for (int t = 0; t < " << V << "; t += 4) cluster_load4(at + 4u * t, &bits[rank][t]);\n";
  else
    os << "      #pragma unroll\n      for (int t = 0; t < " << V << "; ++t) bits[rank][t] = cluster_load(at + 4u * t);\n";
  os << "    }\n"
     << "    " << acc_type << " values[" << V << "] = {};\n"
     << "    #pragma unroll\n    for (int rank = 0; rank < SPLIT_K; ++rank)\n"
     << "      #pragma unroll\n      for (int t = 0; t < " << V << "; ++t) values[t] += "
     << (acc_type == "float" ? "__uint_as_float(bits[rank][t])" : "static_cast<int>(bits[rank][t])") << ";\n";
}

/// The store of `values` (the vector at (mm, nn) of the tile): a split's partial sum, or the
/// output through store_d_vec / store_d, rounded to `out_type` unless the epilogue rounds it.
void emit_values_store(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p, int v,
                       const std::string& acc_type, const std::string& out_type) {
  const std::string V = std::to_string(v);
  // With the epilogue applied to the accumulators, the values are outputs, stored as without one
  // through the plain stores of the output's pointer.
  const bool applied = epilogue_on_accumulators(g, p);
  const bool fused = !g.compute->epilogue.empty() && !applied;
  const std::string out = applied ? "out.data" : "out";
  if (p.split_k > 1 && p.cluster != 1)
    os << "    // Partial sum of this split: partial[split][z][m][n], summed by the "
       << (p.split_reduce ? "tile's last block" : "reduce kernel") << ".\n"
       << "    const int m = m0 + mm, n = n0 + nn;\n"
       << "    if (m < M && n < N) partial[((long long)(split * BATCH + z) * M + m) * N + n] = (" << partial_type(g)
       << ")values[0];\n";
  else if (v > 1 && (out_type == acc_type || fused))  // the epilogue rounds its result
    os << "    store_d_vec(" << out << ", m0 + mm, n0 + nn, z, values);\n";
  else if (v > 1)
    os << "    __align__(16) " << out_type << " converted[" << V << "];  // the sums, rounded to the output's dtype\n"
       << "    #pragma unroll\n    for (int t = 0; t < " << V << "; ++t) converted[t] = (" << out_type << ")values[t];\n"
       << "    store_d_vec(" << out << ", m0 + mm, n0 + nn, z, converted);\n";
  else
    os << "    store_d(" << out << ", m0 + mm, n0 + nn, z, "
       << (fused ? "values[0]" : "(" + out_type + ")values[0]") << ");\n";
}

/// Where the stores read vector (mm, nn) of the epilogue tile, whose rows are m where the vectors
/// run `along` n; its rows start `row_skip` before the tile (EpilogueScope::row_skip). `walked`:
/// the stores walk the rows inside the extent only; else rows past the tile read its last.
std::string epilogue_tile_at(char along, const std::string& row_skip, bool walked) {
  const std::string row = along == 'n' ? "mm" : "nn", col = along == 'n' ? "nn" : "mm";
  if (row_skip.empty()) return row + " * C_LD + " + col;
  if (walked) return "(" + row + " + " + row_skip + ") * C_LD + " + col;
  return "min(" + row + " + " + row_skip + ", " + (along == 'n' ? "BM" : "BN") + " - 1) * C_LD + " + col;
}

/// How many of the tile's vectors of `v` elements the stores walk: all, or with a row skip the
/// rows that end at the extent's end (none in a tile wholly past it).
std::string epilogue_vectors(char along, int v, const std::string& row_skip) {
  const std::string all = "BM * BN / " + std::to_string(v);
  if (row_skip.empty()) return all;
  return all + " - " + row_skip + " * (" + (along == 'n' ? "BN" : "BM") + " / " + std::to_string(v) + ")";
}

}  // namespace

void emit_epilogue_stores(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p,
                          const std::string& acc_type, const std::string& out_type, const EpilogueScope& scope) {
  const OutVector ov = out_vector(g, p);
  const int v = ov.width;
  const std::string V = std::to_string(v);
  emit_dependents_trigger(os, p);
  // In a cluster, block `split` sums its share of the tile's vectors (a contiguous run, so that
  // neighbouring threads read neighbouring words) over the cluster's blocks, in split order so
  // that the sums do not depend on timing; they walk every row of the tile.
  std::string first = scope.thread, end = epilogue_vectors(ov.along, v, p.cluster == 1 ? "" : scope.row_skip);
  if (p.cluster == 1) {
    if (acc_type != "float" && acc_type != "int")
      throw InternalError("cluster split-K sums 4-byte accumulators, not " + acc_type);
    os << "  // Every split's partial tile is in its block's Cs: the cluster's blocks read each other's.\n"
       << "  cluster_sync();\n"
       << "  const unsigned cs_local = static_cast<unsigned>(__cvta_generic_to_shared(Cs));\n"
       << "  constexpr int VECTORS = BM * BN / " << V << ", SHARE = (VECTORS + SPLIT_K - 1) / SPLIT_K;\n"
       << "  const int share_end = min(VECTORS, (split + 1) * SHARE);\n";
    first = "split * SHARE + threadIdx.x";
    end = "share_end";
  } else {
    os << scope.barrier;
  }
  const std::string at = epilogue_tile_at(ov.along, scope.row_skip, p.cluster != 1);
  const bool fused = !g.compute->epilogue.empty() && !epilogue_on_accumulators(g, p);  // the stores apply it
  if (fused && v > 1 && p.cluster != 1 && p.split_k == 1 && scope.sm_to_itself) {
    emit_epilogue_loop(os, g, ov, scope.threads, scope.thread, end, "&Cs[" + at + "]", "store_d_vec", scope.operands_early);
    os << (scope.close ? "}\n" : "");
    return;
  }
  // An epilogue's operand loads of several vectors in flight at once.
  if (fused) os << "  #pragma unroll 4\n";
  os << "  for (int e = " << first << "; e < " << end << "; e += " << scope.threads << ") {\n"
     << "    " << vector_position(ov.along, V) << "\n";
  if (p.cluster == 1) emit_cluster_sum(os, v, acc_type, at);
  else if (v > 1 && (fused || out_type != acc_type)) {  // read whole words, not elements
    emit_device_include(os, "smem");
    os << "    const auto tile_values = tile_vector<" << V << ", C_LD>(&Cs[" << at << "]);\n"
       << "    const " << acc_type << "* values = tile_values.v;\n";
  } else {
    os << "    const " << acc_type << "* values = &Cs[" << at << "];\n";
  }
  emit_values_store(os, g, p, v, acc_type, out_type);
  os << "  }\n";
  emit_last_block_sum(os, g, p, out_type, scope);
  if (p.cluster == 1) os << "  cluster_sync();  // no block leaves while another may still read its Cs\n";
  if (scope.close) os << "}\n";
}

std::string cluster_attribute(const ScheduleParams& p) {
  if (p.cluster == 1) return "__cluster_dims__(1, 1, SPLIT_K) ";
  return pairs_blocks(p) ? "__cluster_dims__(2, 1, 1) " : "";
}

void emit_cluster_helpers(std::ostringstream& os, const ScheduleParams& p) {
  if (!p.cluster) return;
  os << "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900\n"
     << "#error \"this kernel sums its splits in a thread block cluster, which needs sm_90 or newer\"\n"
     << "#endif\n";
  emit_device_include(os, "cluster");
}

void emit_dependents_trigger(std::ostringstream& os, const ScheduleParams& p) {
  if (p.split_k <= 1 || p.cluster || p.split_reduce) return;
  os << "#if __CUDA_ARCH__ >= 900\n"
     << "  // The reduce kernel may launch once every block got here (it still waits for this grid to\n"
     << "  // finish and flush before reading the partial sums); blocks not yet started hold it back.\n"
     << "  asm volatile(\"griddepcontrol.launch_dependents;\");\n"
     << "#endif\n";
}

namespace {

/// Elements of a row the last block sums as one vector: 4 floats where every row of the partial
/// sums starts 16-byte aligned at any size (N, or N's elements per unit of a run-time size, a
/// multiple of 4), else 1.
int last_block_vector(const ImplicitGemm& g, const ScheduleParams& p) {
  const std::int64_t row = g.dynamic() && g.dynamic_axis == 'n' ? g.per_size : g.N;
  return partial_type(g) == "float" && row % 4 == 0 && p.block_n % 4 == 0 ? 4 : 1;
}

}  // namespace

void emit_last_block_sum(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p,
                         const std::string& out_type, const EpilogueScope& scope) {
  if (p.split_k <= 1 || p.cluster == 1 || !p.split_reduce) return;
  TMAP_CHECK(scope.threads == "THREADS", "the splits' last block sums them with all its threads");
  const TileCounters t = tile_counters(g, p);
  const std::string part = partial_type(g);
  const int v = last_block_vector(g, p);
  const std::string loaded = v == 4 ? "float4" : part;
  // Every split's load of an element is issued before the first add, and several elements'
  // loads are in flight at once (as many as keep about 16 loads a thread).
  const int unroll = std::max(1, 16 / p.split_k);
  os << "  // The splits meet in the workspace: the last of the tile's SPLIT_K blocks to store its partial\n"
     << "  // tile sums them all, in split order as a reduce kernel would, and stores the result; it then\n"
     << "  // sets the tile's counter back to 0 for the next launch.\n"
     << "  __shared__ int tile_last;\n"
     << "  __threadfence();  // this thread's partial sums are visible to every block before the arrival\n"
     << scope.barrier
     << "  unsigned* const arrivals = reinterpret_cast<unsigned*>(reinterpret_cast<unsigned char*>(partial) + "
     << t.offset << "ll) +\n"
     << "                           (z * " << t.rows << " + m0 / BM) * " << t.cols << " + n0 / BN;\n"
     << "  if (threadIdx.x == 0) tile_last = atomicAdd(arrivals, 1u) == SPLIT_K - 1;\n"
     << scope.barrier
     << "  if (tile_last) {\n"
     << "    __threadfence();  // the other blocks' partial sums are read after their arrivals\n"
     << "    constexpr int V = " << v << ";  // elements summed as one vector\n"
     << "    #pragma unroll " << unroll << "\n"
     << "    for (int e = threadIdx.x; e < BM * BN / V; e += THREADS) {\n"
     << "      const int mm = e / (BN / V), nn = e % (BN / V) * V, m = m0 + mm, n = n0 + nn;\n"
     << "      if (m >= M || n >= N) continue;\n"
     << "      " << loaded << " parts[SPLIT_K];\n"
     << "      #pragma unroll\n"
     << "      for (int s = 0; s < SPLIT_K; ++s)\n"
     << "        parts[s] = __ldcg(reinterpret_cast<const " << loaded
     << "*>(&partial[((long long)(s * BATCH + z) * M + m) * N + n]));\n"
     << "      " << part << " sum[V] = {};\n"
     << "      #pragma unroll\n"
     << "      for (int s = 0; s < SPLIT_K; ++s)\n"
     << (v == 4 ? "        sum[0] += parts[s].x, sum[1] += parts[s].y, sum[2] += parts[s].z, sum[3] += parts[s].w;\n"
                : "        sum[0] += parts[s];\n")
     << "      #pragma unroll\n"
     << "      for (int i = 0; i < V; ++i) store_d(out, m, n + i, z, " << stored_value(g, out_type, "sum[i]") << ");\n"
     << "    }\n"
     << "    if (threadIdx.x == 0) *arrivals = 0;\n"
     << "  }\n";
}

void emit_split_reduce(std::ostringstream& os, const ImplicitGemm& g, const KernelSource& k, const std::string& part_type,
                       const std::string& out_type) {
  if (k.reduce_name.empty()) return;
  os << "\n// Sums the SPLIT_K partial results of each element and scatters them to the output.\n"
     << "extern \"C\" __global__ void " << k.reduce_name << "(const " << part_type << "* __restrict__ partial, "
     << output_params(g, out_type) << ") {\n" << output_bundle(g)
     << "#if __CUDA_ARCH__ >= 900\n"
     << "  // Launched as a programmatic dependent of the main kernel (sm_90): its blocks start while\n"
     << "  // the main kernel's last blocks finish and wait here until its partial sums are in memory.\n"
     << "  asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n"
     << "#endif\n"
     << "  const long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
     << "  const long long PLANE = (long long)BATCH * M * N;\n"
     << "  if (e >= PLANE) return;\n"
     << "  " << part_type << " sum = 0;\n"
     << "  for (int s = 0; s < SPLIT_K; ++s) sum += partial[s * PLANE + e];\n"
     << "  const int z = (int)(e / ((long long)M * N)), m = (int)(e / N % M), n = (int)(e % N);\n"
     << "  store_d(out, m, n, z, " << stored_value(g, out_type, "sum") << ");\n}\n";
}

bool raises(const ImplicitGemm& g, const ScheduleParams& p, const DeviceLimits& limits, ScheduleError e) {
  for (const auto& issue : validate(g, p, limits))
    if (issue.error == e) return true;
  return false;
}

void default_copies(const ImplicitGemm& g, ScheduleParams& p, const DeviceLimits& limits,
                    std::initializer_list<ScheduleError> errors, int deep) {
  auto any_raised = [&] {
    for (ScheduleError e : errors)
      if (raises(g, p, limits, e)) return true;
    return false;
  };
  for (int which = 0; which < 2; ++which) {
    int& vec = which == 0 ? p.vec_a : p.vec_b;
    while (vec > 1 && any_raised()) vec /= 2;
  }
  p.async_copy = 1;
  if (!copies_async(g, p, 0) && !copies_async(g, p, 1)) p.async_copy = 0;
  if (limits.compute_capability != 0 && limits.compute_capability < 80) p.async_copy = 0;
  p.stages = p.async_copy ? deep : 2;
  while (p.stages > 1 && shared_bytes(g, p) > limits.max_shared_bytes) --p.stages;
}

std::vector<int> multiples(std::int64_t base, std::initializer_list<int> factors, std::int64_t cap) {
  std::vector<int> out;
  for (int f : factors)
    if (base * f <= cap) out.push_back(static_cast<int>(base * f));
  if (out.empty()) out.push_back(static_cast<int>(base));
  return out;
}

std::vector<int> powers_up_to(int max) {
  std::vector<int> out;
  for (int v = 1; v <= max; v *= 2) out.push_back(v);
  return out;
}

}  // namespace pipeline
}  // namespace tmap
