#include "tile_pipeline.h"

#include <algorithm>
#include <cctype>

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
  }
  TMAP_CHECK(false, "generated code does not support dtype " + std::string(dtype_name(t)) + " yet");
  return "";
}

namespace pipeline {
namespace {

/// The most iterations of a gather loop unrolled in full.
constexpr int kMaxUnroll = 8;

/// Emits `const int v = ...;` lines recovering iterator values from a flat coordinate
/// (mixed radix over `iters`, the last fastest), only for iterators in `used`.
void decompose(std::ostringstream& os, const Compute& c, const std::vector<int>& iters, const std::string& coord,
               const std::vector<bool>& used, const std::string& indent) {
  bool any = false;
  for (int it : iters) any = any || used[it];
  if (!any) return;
  std::int64_t stride = 1;
  std::vector<std::int64_t> strides(iters.size());
  for (int i = static_cast<int>(iters.size()) - 1; i >= 0; --i) {
    strides[i] = stride;
    stride *= c.iters[iters[i]].extent;
  }
  for (std::size_t i = 0; i < iters.size(); ++i) {
    int it = iters[i];
    if (!used[it]) continue;
    std::string v = coord;
    if (strides[i] != 1) v = "(" + v + " / " + std::to_string(strides[i]) + ")";
    if (i > 0) v = v + " % " + std::to_string(c.iters[it].extent);
    os << indent << "const int it_" << c.iters[it].name << " = " << v << ";  // iterator " << c.iters[it].name
       << ", extent " << c.iters[it].extent << "\n";
  }
}

/// Iterator variables are prefixed so that they never clash with the kernel's own names.
std::string affine_code(const AffineExpr& e, const Compute& c) {
  std::vector<std::string> names;
  for (const auto& it : c.iters) names.push_back("it_" + it.name);
  return to_string(e, names);
}

/// The linear offset of an access and its bounds check, as C++ expressions.
void access_code(std::ostringstream& os, const Compute& c, const Access& a, const std::string& indent,
                 bool check_bounds, const std::string& on_out_of_bounds) {
  const Tensor& t = c.tensor_of(a);
  for (std::size_t d = 0; d < a.indices.size(); ++d)
    os << indent << "const int i" << d << " = " << affine_code(a.indices[d], c) << ";  // dim " << d << " of "
       << t.shape[d] << "\n";
  if (check_bounds) {
    os << indent << "if (";
    for (std::size_t d = 0; d < a.indices.size(); ++d)
      os << (d ? " || " : "") << "(unsigned)i" << d << " >= " << t.shape[d] << "u";
    os << ") " << on_out_of_bounds << "\n";
  }
  std::string offset = "i0";
  for (std::size_t d = 1; d < a.indices.size(); ++d)
    offset = "(" + offset + ") * " + std::to_string(t.shape[d]) + " + i" + std::to_string(d);
  os << indent << "const int offset = " << offset << ";\n";
}

std::vector<bool> used_by(const Compute& c, const Access& a) {
  std::vector<bool> used(c.iters.size());
  for (std::size_t it = 0; it < c.iters.size(); ++it) used[it] = a.uses(static_cast<int>(it));
  return used;
}

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

KernelSource kernel_shell(const ImplicitGemm& g, const ScheduleParams& p, int threads) {
  const Compute& c = *g.compute;
  KernelSource k;
  k.name = identifier("tmap_" + c.name + "_" + g.hw->name + "_" + g.layout + "_" + g.shape.str() + "_map" +
                      std::to_string(g.mapping_id));
  k.threads = threads;
  k.shared_bytes = shared_bytes(g, p);
  k.grid = {(g.N + p.block_n - 1) / p.block_n, (g.M + p.block_m - 1) / p.block_m, g.batch * p.split_k};
  if (p.split_k > 1) {
    k.workspace_bytes = p.split_k * g.batch * g.M * g.N * (partial_type(g) == "double" ? 8 : 4);
    k.reduce_name = k.name + "_reduce";
    k.reduce_blocks = (g.batch * g.M * g.N + k.reduce_threads - 1) / k.reduce_threads;
  }
  return k;
}

void emit_header(std::ostringstream& os, const ImplicitGemm& g) {
  const Compute& c = *g.compute;
  os << "// Generated by tmap: " << c.statement_text() << "\n"
     << "// on " << g.hw->name << " (" << g.hw->compute_intrinsic << ", " << g.shape.str() << ", layout " << g.layout
     << "), mapping " << g.mapping_id << "\n"
     << "// Virtual GEMM: M = " << g.M << " (" << names_of(c, g.m_iters) << "), N = " << g.N << " ("
     << names_of(c, g.n_iters) << "), K = " << g.K << " (" << names_of(c, g.k_iters) << ")\n"
     << "// Batch (grid z) = " << g.batch << " (" << names_of(c, g.batch_iters) << "); serial reduction = " << g.serial
     << " (" << names_of(c, g.serial_iters) << ")\n"
     << "// Operands: A = " << c.tensor_of(c.inputs[g.a_input]).name << ", B = "
     << c.tensor_of(c.inputs[g.b_input]).name << ", D = " << c.tensor_of(c.output).name << "\n";
}

void emit_common_constants(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p, int threads) {
  os << "constexpr int M = " << g.M << ", N = " << g.N << ", K = " << g.K << ";\n"
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

void emit_cp_async_helpers(std::ostringstream& os) {
  // Through L1 (.ca): convolution windows re-read input elements that neighbouring tiles and
  // taps have just fetched (bypassing L1 with .cg cost ResNet-18 batch-16 layers 2-5 up to 60%).
  os << "// Copies BYTES bytes global -> shared without staging in registers (cp.async, sm_80+); with\n"
     << "// `valid` false it writes zeros and reads nothing.\n"
     << "template <int BYTES>\n"
     << "__device__ __forceinline__ void cp_async(void* dst, const void* src, bool valid) {\n"
     << "  const unsigned shared = static_cast<unsigned>(__cvta_generic_to_shared(dst));\n"
     << "  asm volatile(\"cp.async.ca.shared.global [%0], [%1], %2, %3;\\n\" :: \"r\"(shared), \"l\"(src), \"n\"(BYTES),\n"
     << "               \"r\"(valid ? BYTES : 0));\n}\n"
     << "__device__ __forceinline__ void cp_async_commit() { asm volatile(\"cp.async.commit_group;\\n\" ::); }\n"
     << "template <int N>\n"
     << "__device__ __forceinline__ void cp_async_wait() { asm volatile(\"cp.async.wait_group %0;\\n\" :: \"n\"(N)); }\n\n";
}

void emit_operand_loader(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p, int which) {
  const Compute& c = *g.compute;
  const bool is_a = which == 0;
  const Access& acc = c.inputs[is_a ? g.a_input : g.b_input];
  const DType dtype = is_a ? g.hw->a_dtype : g.hw->b_dtype;
  const std::string type = storage_type(dtype);
  const bool packed = dtype_bits(dtype) < 8;
  const int vec = is_a ? p.vec_a : p.vec_b;
  const int elem_bytes = std::max(1, dtype_bits(dtype) / 8);
  const bool async = copies_async(g, p, which);
  const char* row_name = is_a ? "m" : "k";
  const char* col_name = is_a ? "k" : "n";
  const std::string fname = std::string(is_a ? "load_a" : "load_b") + (vec > 1 ? "_vec" : "");
  std::vector<bool> used = used_by(c, acc);
  const std::string value_type = packed ? "int" : type;
  const std::string vtype = vector_type(vec * elem_bytes);
  const int bytes = vec * elem_bytes;
  const std::string copy = "cp_async<" + std::to_string(bytes) + ">";
  const std::string zero = async     ? "{ " + copy + "(dst, src, false); return; }"
                           : vec > 1 ? "{ *reinterpret_cast<Vec*>(dst) = Vec{}; return; }"
                                     : "return static_cast<" + value_type + ">(0.0f);";
  os << "// " << c.tensor_of(acc).name << " element" << (vec > 1 ? "s" : "") << " at virtual (" << row_name << ", "
     << col_name << ")"
     << (vec > 1 ? " and the next " + std::to_string(vec - 1) + " along the tile's row, contiguous and aligned in "
                                                                  "memory: one " + std::to_string(bytes) + "-byte " +
                       (async ? "cp.async" : "load")
                 : "")
     << "; zero outside the GEMM or the tensor\n"
     << "__device__ __forceinline__ " << (vec > 1 ? "void" : value_type) << " " << fname << "(const " << type
     << "* __restrict__ src, int " << row_name << ", int " << col_name << ", int z, int s"
     << (vec > 1 ? ", " + type + "* dst" : "") << ") {\n"
     << (vec > 1 && !async ? "  using Vec = " + vtype + ";\n" : "") << "  if (" << row_name << " >= "
     << (is_a ? "M" : "K") << " || " << col_name << " >= " << (is_a ? "K" : "N") << ") " << zero << "\n";
  decompose(os, c, is_a ? g.m_iters : g.k_iters, row_name, used, "  ");
  decompose(os, c, is_a ? g.k_iters : g.n_iters, col_name, used, "  ");
  decompose(os, c, g.batch_iters, "z", used, "  ");
  decompose(os, c, g.serial_iters, "s", used, "  ");
  access_code(os, c, acc, "  ", true, zero);
  if (async)
    os << "  " << copy << "(dst, src + offset, true);\n}\n\n";
  else if (vec > 1)
    os << "  *reinterpret_cast<Vec*>(dst) = *reinterpret_cast<const Vec*>(src + offset);\n}\n\n";
  else if (packed)
    os << "  return nibble(src, offset);\n}\n\n";
  else
    os << "  return src[offset];\n}\n\n";
}

int output_vector_width(const ImplicitGemm& g, char along, int out_bits) {
  const std::vector<int>& axis = along == 'm' ? g.m_iters : g.n_iters;
  if (axis.empty() || out_bits < 8) return 1;
  return contiguous_width(*g.compute, g.compute->output, axis.back(), out_bits);
}

void emit_output_scatter(std::ostringstream& os, const ImplicitGemm& g, const std::string& out_type, int vec,
                         char along) {
  const Compute& c = *g.compute;
  std::vector<bool> used = used_by(c, c.output);
  // The output's offset from (m, n, z); outside the GEMM nothing is written.
  auto offset = [&] {
    os << "  if (m >= M || n >= N) return;\n";
    decompose(os, c, g.m_iters, "m", used, "  ");
    decompose(os, c, g.n_iters, "n", used, "  ");
    decompose(os, c, g.batch_iters, "z", used, "  ");
    access_code(os, c, c.output, "  ", false, "");
  };
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
  if (p.raster > 1)
    os << "  // Rasterization: blocks in launch order walk RASTER rows of M tiles column by column, so\n"
       << "  // that the blocks resident together read the same A and B tiles from L2.\n"
       << "  constexpr int GRID_M = (M + BM - 1) / BM, GRID_N = (N + BN - 1) / BN;\n"
       << "  const int linear = blockIdx.y * GRID_N + blockIdx.x;\n"
       << "  const int first_row = linear / (RASTER * GRID_N) * RASTER, in_group = linear % (RASTER * GRID_N);\n"
       << "  const int group_rows = min(GRID_M - first_row, RASTER);\n"
       << "  const int m0 = (first_row + in_group % group_rows) * BM, n0 = in_group / group_rows * BN;\n";
  else
    os << "  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;\n";
}

void emit_gather(std::ostringstream& os, const ScheduleParams& p, int threads, char op,
                 const std::string& rows, const std::string& cols, const char* row_var, const char* col_var, int vec,
                 int pack) {
  const int group = std::max(vec, pack);
  const std::string tile = op == 'a' ? "a" : "b", at = std::string(1, op) + "_at";
  const std::string grp = group > 1 ? " / " + std::to_string(group) : "";
  auto args = [&](const std::string& col_offset) {
    std::string r = row_var, c = std::string(col_var) + col_offset;
    // A is read at (m, k), B at (k, n).
    std::string mm = std::string(row_var) == "mm" ? r : c, kk = std::string(row_var) == "kk" ? r : c,
                nn = std::string(row_var) == "nn" ? r : c;
    return op == 'a' ? "m0 + " + mm + ", k0 + " + kk : "k0 + " + kk + ", n0 + " + nn;
  };
  // A loop of constant trip count (each thread takes every THREADS-th group), so it unrolls.
  const std::string total = rows + " * " + cols + grp;
  // Unrolling is capped: fully unrolled gathers of large tiles cost NVRTC minutes and registers
  // for nothing.
  const std::int64_t elements = (op == 'a' ? std::int64_t{p.block_m} : std::int64_t{p.block_n}) * p.block_k / group;
  const std::int64_t iterations = (elements + threads - 1) / threads;
  const std::string unroll = unroll_pragma(p);
  const std::string gather_unroll = !p.unroll || iterations <= kMaxUnroll
                                        ? unroll
                                        : "#pragma unroll " + std::to_string(kMaxUnroll) + "\n";
  os << "    " << gather_unroll << "    for (int it = 0; it < (" << total << " + THREADS - 1) / THREADS; ++it) {\n"
     << "      const int e = it * THREADS + threadIdx.x;\n"
     << "      if ((" << total << ") % THREADS != 0 && e >= " << total << ") break;\n"
     << "      const int " << row_var << " = e / (" << cols << grp << "), " << col_var << " = e % (" << cols << grp
     << ")" << (group > 1 ? " * " + std::to_string(group) : "") << ";\n";
  const std::string slot = at + "(" + row_var + ", " + col_var + ")";
  if (vec > 1)
    os << "      load_" << op << "_vec(" << op << "_src, " << args("") << ", z, s, &" << tile << "[" << slot << "]);\n";
  else if (pack > 1)
    os << "      " << tile << "[" << slot << " / 2] = (unsigned char)((load_" << op << "(" << op << "_src, " << args("")
       << ", z, s) & 0xF) | (load_" << op << "(" << op << "_src, " << args(" + 1") << ", z, s) << 4));\n";
  else
    os << "      " << tile << "[" << slot << "] = load_" << op << "(" << op << "_src, " << args("") << ", z, s);\n";
  os << "    }\n";
}

void emit_main_loop(std::ostringstream& os, const ScheduleParams& p) {
  if (p.async_copy && p.stages >= 2) {
    os << "  // A pipeline of STAGES buffers with cp.async: the copies of the next STAGES - 1 steps fly\n"
       << "  // while a step is multiplied. One commit group per step (empty past the end), so waiting\n"
       << "  // for all but the newest STAGES - 2 groups waits for exactly the step about to be used.\n"
       << "  for (int t = 0; t < STAGES - 1; ++t) {\n"
       << "    if (first + t < last) load_tiles(first + t, t);\n"
       << "    cp_async_commit();\n  }\n"
       << "  for (int step = first; step < last; ++step) {\n"
       << "    const int t = step - first;\n"
       << "    cp_async_wait<STAGES - 2>();  // this thread's copies of `step` have landed\n"
       << "    __syncthreads();  // every thread's too, and everyone is done with the buffer of step - 1\n"
       << "    if (step + STAGES - 1 < last) load_tiles(step + STAGES - 1, (t + STAGES - 1) % STAGES);\n"
       << "    cp_async_commit();\n"
       << "    compute(t % STAGES);\n  }\n"
       << "  cp_async_wait<0>();\n  __syncthreads();  // the epilogue reuses the buffers\n\n";
  } else if (p.async_copy) {
    os << "  for (int step = first; step < last; ++step) {\n"
       << "    load_tiles(step, 0);\n    cp_async_commit();\n    cp_async_wait<0>();\n    __syncthreads();\n"
       << "    compute(0);\n    __syncthreads();\n  }\n\n";
  } else if (p.stages == 2) {
    os << "  // Double buffering: gather step + 1 into the other buffer while step is multiplied.\n"
       << "  load_tiles(first, first & 1);\n  __syncthreads();\n"
       << "  for (int step = first; step < last; ++step) {\n"
       << "    if (step + 1 < last) load_tiles(step + 1, (step + 1) & 1);\n"
       << "    compute(step & 1);\n    __syncthreads();\n  }\n\n";
  } else {
    os << "  for (int step = first; step < last; ++step) {\n"
       << "    load_tiles(step, 0);\n    __syncthreads();\n    compute(0);\n    __syncthreads();\n  }\n\n";
  }
}

void emit_split_reduce(std::ostringstream& os, const KernelSource& k, const std::string& part_type,
                       const std::string& out_type) {
  if (k.reduce_name.empty()) return;
  os << "\n// Sums the SPLIT_K partial results of each element and scatters them to the output.\n"
     << "extern \"C\" __global__ void " << k.reduce_name << "(const " << part_type << "* __restrict__ partial, "
     << out_type << "* __restrict__ out) {\n"
     << "  const long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
     << "  constexpr long long PLANE = (long long)BATCH * M * N;\n"
     << "  if (e >= PLANE) return;\n"
     << "  " << part_type << " sum = 0;\n"
     << "  for (int s = 0; s < SPLIT_K; ++s) sum += partial[s * PLANE + e];\n"
     << "  const int z = (int)(e / ((long long)M * N)), m = (int)(e / N % M), n = (int)(e % N);\n"
     << "  store_d(out, m, n, z, (" << out_type << ")sum);\n}\n";
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
