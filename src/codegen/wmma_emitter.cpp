#include "tmap/codegen/wmma_emitter.h"

#include <algorithm>
#include <cctype>
#include <sstream>

#include "tmap/codegen/reference_emitter.h"
#include "tmap/support/diagnostic.h"

namespace tmap {
namespace {

}  // namespace

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

namespace {

/// The element type of a WMMA operand fragment.
std::string fragment_type(DType t) {
  if (t == DType::kTFloat32) return "wmma::precision::tf32";
  if (t == DType::kInt4) return "wmma::experimental::precision::s4";
  return storage_type(t);
}

/// An unsigned type as wide as `bytes`, for vector copies.
std::string vector_type(int bytes) {
  switch (bytes) {
    case 16: return "uint4";
    case 8: return "uint2";
    case 4: return "unsigned int";
    case 2: return "unsigned short";
  }
  return "unsigned char";
}

/// The most iterations of a gather loop unrolled in full.
constexpr int kMaxUnroll = 8;

const char* unroll_pragma(const ScheduleParams& p) { return p.unroll ? "#pragma unroll\n" : "#pragma unroll 1\n"; }

std::string identifier(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

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
  for (std::size_t d = 1; d < a.indices.size(); ++d) offset = "(" + offset + ") * " + std::to_string(t.shape[d]) + " + i" + std::to_string(d);
  os << indent << "const int offset = " << offset << ";\n";
}

std::vector<bool> used_by(const Compute& c, const Access& a) {
  std::vector<bool> used(c.iters.size());
  for (std::size_t it = 0; it < c.iters.size(); ++it) used[it] = a.uses(static_cast<int>(it));
  return used;
}

}  // namespace

KernelSource emit_wmma_kernel(const ImplicitGemm& g, const ScheduleParams& p) {
  TMAP_CHECK(g.hw->family == "wmma", "emit_wmma_kernel needs a WMMA abstraction");
  const Compute& c = *g.compute;
  const Access& a_acc = c.inputs[g.a_input];
  const Access& b_acc = c.inputs[g.b_input];
  const std::string ta = storage_type(g.hw->a_dtype), tb = storage_type(g.hw->b_dtype),
                    tacc = storage_type(g.hw->d_dtype);
  const auto im = g.shape[Axis::kI], in = g.shape[Axis::kJ], ik = g.shape[Axis::kK];
  const bool a_row = g.layout[0] == 'n', b_row = g.layout[1] == 'n', c_row = g.layout[2] == 'n';
  // Sub-byte operands are packed two to a byte; shared tiles hold them packed too.
  const int a_pack = dtype_bits(g.hw->a_dtype) < 8 ? 2 : 1, b_pack = dtype_bits(g.hw->b_dtype) < 8 ? 2 : 1;

  KernelSource k;
  k.name = identifier("tmap_" + c.name + "_" + g.hw->name + "_" + g.layout + "_" + g.shape.str() + "_map" +
                      std::to_string(g.mapping_id));
  k.threads = (p.block_m / p.warp_m) * (p.block_n / p.warp_n) * 32;
  k.shared_bytes = shared_bytes(g, p);
  k.grid = {(g.N + p.block_n - 1) / p.block_n, (g.M + p.block_m - 1) / p.block_m, g.batch * p.split_k};
  const bool split = p.split_k > 1;
  // Partial sums keep at least float precision (a half accumulator's splits are summed in float).
  const std::string tpart = g.hw->d_dtype == DType::kFloat16 ? "float" : tacc;
  if (split) {
    k.workspace_bytes = p.split_k * g.batch * g.M * g.N * (tpart == "double" ? 8 : 4);
    k.reduce_name = k.name + "_reduce";
    k.reduce_blocks = (g.batch * g.M * g.N + k.reduce_threads - 1) / k.reduce_threads;
  }

  auto names = [&](const std::vector<int>& its) {
    std::string s;
    for (int it : its) s += (s.empty() ? "" : ", ") + c.iters[it].name;
    return s.empty() ? std::string("none") : s;
  };
  std::ostringstream os;
  os << "// Generated by tmap: " << c.statement_text() << "\n"
     << "// on " << g.hw->name << " (" << g.hw->compute_intrinsic << ", " << g.shape.str() << ", layout " << g.layout
     << "), mapping " << g.mapping_id << "\n"
     << "// Virtual GEMM: M = " << g.M << " (" << names(g.m_iters) << "), N = " << g.N << " (" << names(g.n_iters)
     << "), K = " << g.K << " (" << names(g.k_iters) << ")\n"
     << "// Batch (grid z) = " << g.batch << " (" << names(g.batch_iters) << "); serial reduction = " << g.serial << " ("
     << names(g.serial_iters) << ")\n"
     << "// Operands: A = " << c.tensor_of(a_acc).name << ", B = " << c.tensor_of(b_acc).name
     << ", D = " << c.tensor_of(c.output).name << "\n"
     << "#include <mma.h>\n#include <cuda_fp16.h>\n#include <cuda_bf16.h>\nusing namespace nvcuda;\n\n"
     << "namespace {\n"
     << "constexpr int M = " << g.M << ", N = " << g.N << ", K = " << g.K << ";\n"
     << "constexpr int SERIAL = " << g.serial << ";\n"
     << "constexpr int IM = " << im << ", IN = " << in << ", IK = " << ik << ";  // intrinsic shape\n"
     << "constexpr int BM = " << p.block_m << ", BN = " << p.block_n << ", BK = " << p.block_k << ";  // block tile\n"
     << "constexpr int WM = " << p.warp_m << ", WN = " << p.warp_n << ";  // warp tile\n"
     << "constexpr int FM = WM / IM, FN = WN / IN;  // fragments per warp\n"
     << "constexpr int WARPS_N = BN / WN;\n"
     << "constexpr int THREADS = " << k.threads << ";\n"
     << "constexpr int STAGES = " << p.stages << ";\n"
     << "constexpr int SPLIT_K = " << p.split_k << ";  // reduction splits (grid z = batch x SPLIT_K)\n"
     << "constexpr int BATCH = " << g.batch << ";\n"
     << "constexpr int VEC_A = " << p.vec_a << ", VEC_B = " << p.vec_b << ";  // elements per global load\n"
     << "constexpr int PACK_A = " << a_pack << ", PACK_B = " << b_pack << ";  // elements per stored byte or more\n"
     << "constexpr int RASTER = " << p.raster << ";  // rows of M tiles walked together\n"
     << "// Shared tiles: A " << (a_row ? "[BM][BK + pad] row-major" : "[BK][BM + pad] column-major") << ", B "
     << (b_row ? "[BK][BN + pad] row-major" : "[BN][BK + pad] column-major") << ", D "
     << (c_row ? "[BM][BN + pad] row-major" : "[BN][BM + pad] column-major") << "\n"
     << "constexpr int C_LD = " << (c_row ? "BN" : "BM") << " + " << p.smem_pad << ";\n";
  // Each operand tile is R x C (rows x columns as stored); fragments are FR x FC. Rows layout:
  // element (r, c) at r * LD + c. Panels layout: columns cut into panels FC wide, element
  // (r, c) at (c / FC) * (R * LD) + r * LD + c % FC, so each fragment starts a panel.
  auto tile_index = [&](const char* fn, const char* ld_name, const char* tile_name, const std::string& rows,
                        const std::string& cols, const std::string& frag_cols) {
    if (!p.panels) {
      os << "constexpr int " << ld_name << " = " << cols << " + " << p.smem_pad << ";\n"
         << "constexpr int " << tile_name << " = " << rows << " * " << ld_name << ";  // elements per stage\n"
         << "__device__ __forceinline__ int " << fn << "(int r, int c) { return r * " << ld_name << " + c; }\n";
    } else {
      os << "constexpr int " << ld_name << " = " << frag_cols << " + " << p.smem_pad << ";  // panels " << frag_cols
         << " wide\n"
         << "constexpr int " << tile_name << " = (" << cols << " / " << frag_cols << ") * " << rows << " * " << ld_name
         << ";  // elements per stage\n"
         << "__device__ __forceinline__ int " << fn << "(int r, int c) { return (c / " << frag_cols << ") * (" << rows
         << " * " << ld_name << ") + r * " << ld_name << " + c % " << frag_cols << "; }\n";
    }
  };
  if (a_row) tile_index("a_at", "A_LD", "A_TILE", "BM", "BK", "IK");
  else tile_index("a_at", "A_LD", "A_TILE", "BK", "BM", "IM");
  if (b_row) tile_index("b_at", "B_LD", "B_TILE", "BK", "BN", "IN");
  else tile_index("b_at", "B_LD", "B_TILE", "BN", "BK", "IK");
  os << "constexpr int A_BYTES = (A_TILE / PACK_A * (int)sizeof(" << ta << ") + 127) / 128 * 128;\n\n";
  if (p.async_copy)
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
  if (a_pack > 1 || b_pack > 1)
    os << "// Signed 4-bit element i of a packed array (two per byte, low nibble first).\n"
       << "__device__ __forceinline__ int nibble(const unsigned char* p, int i) {\n"
       << "  const int byte = p[i >> 1];\n"
       << "  return (i & 1) ? (signed char)(byte & 0xF0) >> 4 : (signed char)(byte << 4) >> 4;\n}\n\n";

  // Gathers: operand element (row, col) of the virtual GEMM from the compute's tensors. Scalar
  // loaders return one element (a packed operand's as an int); vector loaders copy `vec`
  // contiguous elements to shared memory in one load.
  auto emit_loader = [&](const char* fname, const std::string& type, const Access& acc, const char* row_name,
                         const std::vector<int>& row_iters, const char* col_name, const std::vector<int>& col_iters,
                         const char* row_bound, const char* col_bound, bool packed, int vec, int elem_bytes) {
    std::vector<bool> used = used_by(c, acc);
    const std::string value_type = packed ? "int" : type;
    const std::string vtype = vector_type(vec * elem_bytes);
    const int bytes = vec * elem_bytes;
    const bool async = p.async_copy && vec > 1 && (bytes == 4 || bytes == 8 || bytes == 16);
    const std::string copy = "cp_async<" + std::to_string(bytes) + ">";
    const std::string zero = async     ? "{ " + copy + "(dst, src, false); return; }"
                             : vec > 1 ? "{ *reinterpret_cast<Vec*>(dst) = Vec{}; return; }"
                                       : "return static_cast<" + value_type + ">(0.0f);";
    os << "// " << c.tensor_of(acc).name << " element" << (vec > 1 ? "s" : "") << " at virtual (" << row_name << ", "
       << col_name << ")" << (vec > 1 ? " and the next " + std::to_string(vec - 1) + " along the tile's row, contiguous "
                                             "and aligned in memory: one " + std::to_string(vec * elem_bytes) + "-byte load"
                                       : "")
       << "; zero outside the GEMM or the tensor\n"
       << "__device__ __forceinline__ " << (vec > 1 ? "void" : value_type) << " " << fname << "(const " << type
       << "* __restrict__ src, int " << row_name << ", int " << col_name << ", int z, int s"
       << (vec > 1 ? ", " + type + "* dst" : "") << ") {\n"
       << (vec > 1 && !async ? "  using Vec = " + vtype + ";\n" : "")
       << "  if (" << row_name << " >= " << row_bound << " || " << col_name << " >= " << col_bound << ") " << zero << "\n";
    decompose(os, c, row_iters, row_name, used, "  ");
    decompose(os, c, col_iters, col_name, used, "  ");
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
  };
  const int a_bytes = std::max(1, dtype_bits(g.hw->a_dtype) / 8), b_bytes = std::max(1, dtype_bits(g.hw->b_dtype) / 8);
  emit_loader(p.vec_a > 1 ? "load_a_vec" : "load_a", ta, a_acc, "m", g.m_iters, "k", g.k_iters, "M", "K", a_pack > 1,
              p.vec_a, a_bytes);
  emit_loader(p.vec_b > 1 ? "load_b_vec" : "load_b", tb, b_acc, "k", g.k_iters, "n", g.n_iters, "K", "N", b_pack > 1,
              p.vec_b, b_bytes);

  {  // The output scatter.
    std::vector<bool> used = used_by(c, c.output);
    os << "// " << c.tensor_of(c.output).name << " element at virtual (m, n) of batch z\n"
       << "__device__ __forceinline__ void store_d(" << tacc << "* __restrict__ out, int m, int n, int z, " << tacc
       << " value) {\n"
       << "  if (m >= M || n >= N) return;\n";
    decompose(os, c, g.m_iters, "m", used, "  ");
    decompose(os, c, g.n_iters, "n", used, "  ");
    decompose(os, c, g.batch_iters, "z", used, "  ");
    access_code(os, c, c.output, "  ", false, "");
    os << "  out[offset] = value;\n}\n}  // namespace\n\n";
  }

  const bool tf32 = g.hw->a_dtype == DType::kTFloat32;
  const std::string unroll = unroll_pragma(p);
  // One gather loop over a tile stored rows x cols, `group` elements of a row per iteration;
  // `row_var` and `col_var` name the tile coordinates in the virtual GEMM's terms.
  auto gather = [&](char op, const std::string& rows, const std::string& cols, const char* row_var, const char* col_var,
                    int vec, int pack) {
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
    // Unrolling is capped: fully unrolled gathers of large tiles cost NVRTC minutes and
    // registers for nothing.
    const std::int64_t elements = (op == 'a' ? std::int64_t{p.block_m} : std::int64_t{p.block_n}) * p.block_k / group;
    const std::int64_t iterations = (elements + k.threads - 1) / k.threads;
    const std::string gather_unroll = !p.unroll ? unroll
                                      : iterations <= kMaxUnroll ? unroll
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
  };
  os << "extern \"C\" __global__ void __launch_bounds__(THREADS)\n"
     << k.name << "(const " << ta << "* __restrict__ a_src, const " << tb << "* __restrict__ b_src, " << tacc
     << "* __restrict__ out, " << tpart << "* __restrict__ partial) {\n"
     << "  extern __shared__ __align__(128) unsigned char smem[];\n"
     << "  " << ta << "* As = reinterpret_cast<" << ta << "*>(smem);                  // [STAGES][A_TILE / PACK_A]\n"
     << "  " << tb << "* Bs = reinterpret_cast<" << tb << "*>(smem + STAGES * A_BYTES);  // [STAGES][B_TILE / PACK_B]\n";
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
  os << "  const int z = blockIdx.z / SPLIT_K, split = blockIdx.z % SPLIT_K;\n"
     << "  const int warp = threadIdx.x / 32;\n"
     << "  const int wm0 = (warp / WARPS_N) * WM, wn0 = (warp % WARPS_N) * WN;  // warp tile origin in the block\n\n"
     << "  wmma::fragment<wmma::accumulator, IM, IN, IK, " << tacc << "> acc[FM][FN];  // (FM x FN) fragments of IM x IN\n"
     << "  for (int i = 0; i < FM; ++i)\n    for (int j = 0; j < FN; ++j) wmma::fill_fragment(acc[i][j], static_cast<" << tacc
     << ">(0.0f));\n\n"
     << "  constexpr int K_TILES = (K + BK - 1) / BK;\n"
     << "  constexpr int STEPS = SERIAL * K_TILES;  // serial reduction points x K tiles\n"
     << "  // This block's share of the steps: [first, last).\n"
     << "  const int first = (int)((long long)STEPS * split / SPLIT_K), last = (int)((long long)STEPS * (split + 1) / SPLIT_K);\n"
     << "  // Gathers step `step` of the reduction into shared buffer `buf`.\n"
     << "  auto load_tiles = [&](int step, int buf) {\n"
     << "    const int s = step / K_TILES, k0 = (step % K_TILES) * BK;\n"
     << "    " << ta << "* a = As + buf * (A_TILE / PACK_A);\n";
  if (a_row) gather('a', "BM", "BK", "mm", "kk", p.vec_a, a_pack);
  else gather('a', "BK", "BM", "kk", "mm", p.vec_a, a_pack);
  os << "    " << tb << "* b = Bs + buf * (B_TILE / PACK_B);\n";
  if (b_row) gather('b', "BK", "BN", "kk", "nn", p.vec_b, b_pack);
  else gather('b', "BN", "BK", "nn", "kk", p.vec_b, b_pack);
  os << "  };\n"
     << "  // Multiplies the tiles in shared buffer `buf` into the accumulators.\n"
     << "  auto compute = [&](int buf) {\n"
     << "    const " << ta << "* a = As + buf * (A_TILE / PACK_A);\n"
     << "    const " << tb << "* b = Bs + buf * (B_TILE / PACK_B);\n"
     << "    " << unroll << "    for (int kk = 0; kk < BK; kk += IK) {\n"
     << "      wmma::fragment<wmma::matrix_a, IM, IN, IK, " << fragment_type(g.hw->a_dtype) << ", wmma::"
     << (a_row ? "row_major" : "col_major") << "> fa[FM];\n"
     << "      wmma::fragment<wmma::matrix_b, IM, IN, IK, " << fragment_type(g.hw->b_dtype) << ", wmma::"
     << (b_row ? "row_major" : "col_major") << "> fb[FN];\n"
     << "      " << unroll << "      for (int i = 0; i < FM; ++i) {\n"
     << "        wmma::load_matrix_sync(fa[i], a + " << (a_row ? "a_at(wm0 + i * IM, kk)" : "a_at(kk, wm0 + i * IM)")
     << " / PACK_A, A_LD);\n"
     << (tf32 ? "        for (int t = 0; t < fa[i].num_elements; ++t) fa[i].x[t] = wmma::__float_to_tf32(fa[i].x[t]);\n" : "")
     << "      }\n"
     << "      " << unroll << "      for (int j = 0; j < FN; ++j) {\n"
     << "        wmma::load_matrix_sync(fb[j], b + " << (b_row ? "b_at(kk, wn0 + j * IN)" : "b_at(wn0 + j * IN, kk)")
     << " / PACK_B, B_LD);\n"
     << (tf32 ? "        for (int t = 0; t < fb[j].num_elements; ++t) fb[j].x[t] = wmma::__float_to_tf32(fb[j].x[t]);\n" : "")
     << "      }\n"
     << "      " << unroll << "      for (int i = 0; i < FM; ++i)\n"
     << "        for (int j = 0; j < FN; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);\n"
     << "    }\n  };\n\n";
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
  os << "  // Epilogue: fragments to shared memory, then scattered to the output.\n"
     << "  " << tacc << "* Cs = reinterpret_cast<" << tacc << "*>(smem);\n"
     << "  for (int i = 0; i < FM; ++i)\n    for (int j = 0; j < FN; ++j)\n"
     << "      wmma::store_matrix_sync(Cs + "
     << (c_row ? "(wm0 + i * IM) * C_LD + wn0 + j * IN" : "(wn0 + j * IN) * C_LD + wm0 + i * IM")
     << ", acc[i][j], C_LD, wmma::" << (c_row ? "mem_row_major" : "mem_col_major") << ");\n"
     << "  __syncthreads();\n"
     << "  for (int e = threadIdx.x; e < BM * BN; e += THREADS) {\n"
     << (c_row ? "    const int mm = e / BN, nn = e % BN;\n    const " + tacc + " value = Cs[mm * C_LD + nn];\n"
               : "    const int nn = e / BM, mm = e % BM;\n    const " + tacc + " value = Cs[nn * C_LD + mm];\n");
  if (split)
    os << "    // Partial sum of this split: partial[split][z][m][n], summed by the reduce kernel.\n"
       << "    const int m = m0 + mm, n = n0 + nn;\n"
       << "    if (m < M && n < N) partial[((long long)(split * BATCH + z) * M + m) * N + n] = (" << tpart << ")value;\n";
  else
    os << "    store_d(out, m0 + mm, n0 + nn, z, value);\n";
  os << "  }\n}\n";
  if (split)
    os << "\n// Sums the SPLIT_K partial results of each element and scatters them to the output.\n"
       << "extern \"C\" __global__ void " << k.reduce_name << "(const " << tpart << "* __restrict__ partial, " << tacc
       << "* __restrict__ out) {\n"
       << "  const long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
       << "  constexpr long long PLANE = (long long)BATCH * M * N;\n"
       << "  if (e >= PLANE) return;\n"
       << "  " << tpart << " sum = 0;\n"
       << "  for (int s = 0; s < SPLIT_K; ++s) sum += partial[s * PLANE + e];\n"
       << "  const int z = (int)(e / ((long long)M * N)), m = (int)(e / N % M), n = (int)(e % N);\n"
       << "  store_d(out, m, n, z, (" << tacc << ")sum);\n}\n";
  k.code = os.str();
  return k;
}

}  // namespace tmap
