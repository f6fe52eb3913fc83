// The WMMA family (nvcuda::wmma, warp scope): fragments loaded from shared memory with
// load_matrix_sync, which takes a fixed leading dimension, so bank conflicts are avoided by
// padding rows (smem_pad) and 8-wide or int8/int4 fragments by panels one fragment wide.
//
// Kernel structure: each block computes a block_m x block_n tile of the virtual GEMM for one
// batch index (blockIdx.z); warps own warp_m x warp_n sub-tiles of accumulator fragments. The
// shared stages of tile_pipeline.h gather the operands into shared memory; the epilogue stores
// fragments to shared memory and scatters them to the output through the output's indices.
#include <algorithm>
#include <sstream>

#include "tile_pipeline.h"
#include "tmap/codegen/reference_emitter.h"
#include "tmap/support/diagnostic.h"

namespace tmap {
namespace {

using namespace pipeline;

/// Bits per element as stored in shared and global memory (tf32 is stored as float, int4 packed
/// two to a byte).
int storage_bits(DType t) { return dtype_bits(t); }

/// One shared-memory operand tile. In the row layout it is rows x (cols + pad) elements; in the
/// panel layout the columns are cut into panels one fragment wide, each rows x (width + pad),
/// so that every fragment starts at a panel's column 0.
struct Tile {
  const char* name;
  std::int64_t rows, cols;
  std::int64_t ld;             ///< Elements between rows (WMMA's ldm).
  int bits;                    ///< Per element.
  std::int64_t frag_rows;      ///< Rows between fragments.
  std::int64_t frag_cols;      ///< Columns of a fragment.
  std::int64_t col_step_bits;  ///< Bits between fragments along a row (or between panels).
  std::int64_t elements;       ///< Per stage, padding included.
  bool panels;
  std::int64_t size_bytes() const { return (elements * bits + 7) / 8; }
};

/// rows x cols of `bits`-bit elements; fragments are frag_rows x frag_cols.
Tile make_tile(const char* name, std::int64_t rows, std::int64_t cols, std::int64_t frag_rows, std::int64_t frag_cols,
               int bits, int pad, bool panels) {
  if (!panels)
    return {name, rows, cols, cols + pad, bits, frag_rows, frag_cols, frag_cols * bits, rows * (cols + pad), false};
  const std::int64_t ld = frag_cols + pad;
  return {name, rows, cols, ld, bits, frag_rows, frag_cols, rows * ld * bits, (cols / frag_cols) * rows * ld, true};
}

std::vector<Tile> tiles(const ImplicitGemm& g, const ScheduleParams& p) {
  const int ab = storage_bits(g.hw->a_dtype), bb = storage_bits(g.hw->b_dtype), db = storage_bits(g.hw->d_dtype);
  const auto m = g.shape[Axis::kI], n = g.shape[Axis::kJ], k = g.shape[Axis::kK];
  const bool panels = p.panels != 0;
  std::vector<Tile> t;
  // A is m x k: row-major [BM][BK], or column-major [BK][BM].
  if (g.layout[0] == 'n') t.push_back(make_tile("A", p.block_m, p.block_k, m, k, ab, p.smem_pad, panels));
  else t.push_back(make_tile("A", p.block_k, p.block_m, k, m, ab, p.smem_pad, panels));
  // B is k x n: row-major [BK][BN], or column-major [BN][BK].
  if (g.layout[1] == 'n') t.push_back(make_tile("B", p.block_k, p.block_n, k, n, bb, p.smem_pad, panels));
  else t.push_back(make_tile("B", p.block_n, p.block_k, n, k, bb, p.smem_pad, panels));
  // The accumulator tile of the epilogue keeps the row layout: [BM][BN] or [BN][BM].
  if (g.layout[2] == 'n') t.push_back(make_tile("D", p.block_m, p.block_n, m, n, db, p.smem_pad, false));
  else t.push_back(make_tile("D", p.block_n, p.block_m, n, m, db, p.smem_pad, false));
  return t;
}

/// The element type of a WMMA operand fragment.
std::string fragment_type(DType t) {
  if (t == DType::kTFloat32) return "wmma::precision::tf32";
  if (t == DType::kInt4) return "wmma::experimental::precision::s4";
  return storage_type(t);
}

/// Each operand's shared tile layout: its leading dimension, elements per stage, and the index
/// function a_at / b_at.
void emit_tile_layouts(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p) {
  const bool a_row = g.layout[0] == 'n', b_row = g.layout[1] == 'n';
  const std::string ta = storage_type(g.hw->a_dtype);
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
}

/// The kernel's lambda that multiplies the tiles of one shared buffer into the accumulators.
void emit_compute_lambda(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p) {
  const bool a_row = g.layout[0] == 'n', b_row = g.layout[1] == 'n';
  const std::string ta = storage_type(g.hw->a_dtype), tb = storage_type(g.hw->b_dtype);
  const bool tf32 = g.hw->a_dtype == DType::kTFloat32;
  const std::string unroll = unroll_pragma(p);
  os << "  // Multiplies the tiles in shared buffer `buf` into the accumulators.\n"
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
}

/// Fragments to shared memory, then each element to the output (or, split, to the partial sums).
void emit_wmma_epilogue(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p) {
  const bool c_row = g.layout[2] == 'n', split = p.split_k > 1;
  const std::string tacc = storage_type(g.hw->d_dtype), tpart = partial_type(g),
                    tout = storage_type(g.compute->tensor_of(g.compute->output).dtype);
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
    os << "    // Partial sum of this split: partial[split][z][m][n], summed by the "
       << (p.split_reduce ? "tile's last block" : "reduce kernel") << ".\n"
       << "    const int m = m0 + mm, n = n0 + nn;\n"
       << "    if (m < M && n < N) partial[((long long)(split * BATCH + z) * M + m) * N + n] = (" << tpart << ")value;\n";
  else
    os << "    store_d(out, m0 + mm, n0 + nn, z, " << (tout == tacc ? "value" : stored_value(g, tout, "value")) << ");\n";
  os << "  }\n";
  emit_last_block_sum(os, g, p, tout);
  os << "}\n";
}

/// What the parts of a WMMA kernel share: its types, fragment orders and packing.
struct WmmaKernel {
  WmmaKernel(const ImplicitGemm& g, const ScheduleParams& p)
      : g(g), p(p), k(kernel_shell(g, p, block_threads(g, p))), ta(storage_type(g.hw->a_dtype)),
        tb(storage_type(g.hw->b_dtype)), tacc(storage_type(g.hw->d_dtype)),
        tout(storage_type(g.compute->tensor_of(g.compute->output).dtype)), tpart(partial_type(g)),
        a_row(g.layout[0] == 'n'), b_row(g.layout[1] == 'n'), c_row(g.layout[2] == 'n'),
        a_pack(dtype_bits(g.hw->a_dtype) < 8 ? 2 : 1), b_pack(dtype_bits(g.hw->b_dtype) < 8 ? 2 : 1) {}

  const ImplicitGemm& g;
  const ScheduleParams& p;
  KernelSource k;
  std::string ta, tb, tacc, tout, tpart;
  bool a_row, b_row, c_row;
  /// Sub-byte operands are packed two to a byte; shared tiles hold them packed too.
  int a_pack, b_pack;
};

/// The kernel's constants and helpers, in the anonymous namespace before its entry.
void emit_wmma_namespace(std::ostringstream& os, const WmmaKernel& w) {
  const ImplicitGemm& g = w.g;
  const ScheduleParams& p = w.p;
  emit_header(os, g);
  os << "#include <mma.h>\n#include <cuda_fp16.h>\n#include <cuda_bf16.h>\nusing namespace nvcuda;\n\n"
     << "namespace {\n";
  emit_common_constants(os, g, p, w.k.threads);
  os << "constexpr int IM = " << g.shape[Axis::kI] << ", IN = " << g.shape[Axis::kJ] << ", IK = " << g.shape[Axis::kK]
     << ";  // intrinsic shape\n"
     << "constexpr int FM = WM / IM, FN = WN / IN;  // fragments per warp\n"
     << "constexpr int VEC_A = " << p.vec_a << ", VEC_B = " << p.vec_b << ";  // elements per global load\n"
     << "constexpr int PACK_A = " << w.a_pack << ", PACK_B = " << w.b_pack << ";  // elements per stored byte or more\n"
     << "// Shared tiles: A " << (w.a_row ? "[BM][BK + pad] row-major" : "[BK][BM + pad] column-major") << ", B "
     << (w.b_row ? "[BK][BN + pad] row-major" : "[BN][BK + pad] column-major") << ", D "
     << (w.c_row ? "[BM][BN + pad] row-major" : "[BN][BM + pad] column-major") << "\n"
     << "constexpr int C_LD = " << (w.c_row ? "BN" : "BM") << " + " << p.smem_pad << ";\n";
  emit_tile_layouts(os, g, p);
  if (p.async_copy) emit_cp_async_helpers(os);
  emit_shift_helpers(os, g, p);
  if (w.a_pack > 1 || w.b_pack > 1)
    os << "// Signed 4-bit element i of a packed array (two per byte, low nibble first).\n"
       << "__device__ __forceinline__ int nibble(const unsigned char* p, int i) {\n"
       << "  const int byte = p[i >> 1];\n"
       << "  return (i & 1) ? (signed char)(byte & 0xF0) >> 4 : (signed char)(byte << 4) >> 4;\n}\n\n";
  emit_operand_loader(os, g, p, 0);
  emit_operand_loader(os, g, p, 1);
  emit_output_scatter(os, g, w.tout, 1, 'n');
  os << "}  // namespace\n\n";
}

/// The kernel's entry: its signature, shared tiles, block origin, warp tile, zeroed accumulators
/// and this block's share of the reduction steps.
void emit_wmma_entry(std::ostringstream& os, const WmmaKernel& w) {
  const ImplicitGemm& g = w.g;
  const ScheduleParams& p = w.p;
  os << "extern \"C\" __global__ void __launch_bounds__(THREADS)\n"
     << w.k.name << "(const " << w.ta << "* __restrict__ a_src, const " << w.tb << "* __restrict__ b_src, "
     << output_params(g, w.tout) << ", " << w.tpart << "* __restrict__ partial) {\n"
     << output_bundle(g) << "  extern __shared__ __align__(128) unsigned char smem[];\n"
     << "  " << w.ta << "* As = reinterpret_cast<" << w.ta << "*>(smem);                  // [STAGES][A_TILE / PACK_A]\n"
     << "  " << w.tb << "* Bs = reinterpret_cast<" << w.tb << "*>(smem + STAGES * A_BYTES);  // [STAGES][B_TILE / PACK_B]\n";
  emit_prologue_wait(os, g);
  emit_block_origin(os, p);
  os << "  const int z = blockIdx.z / SPLIT_K, split = blockIdx.z % SPLIT_K;\n";
  emit_epilogue_prefetch(os, g, p, "THREADS", "  ");
  os << "  const int warp = threadIdx.x / 32;\n"
     << "  const int wm0 = (warp / WARPS_N) * WM, wn0 = (warp % WARPS_N) * WN;  // warp tile origin in the block\n\n"
     << "  wmma::fragment<wmma::accumulator, IM, IN, IK, " << w.tacc << "> acc[FM][FN];  // (FM x FN) fragments of IM x IN\n"
     << "  for (int i = 0; i < FM; ++i)\n    for (int j = 0; j < FN; ++j) wmma::fill_fragment(acc[i][j], static_cast<"
     << w.tacc << ">(0.0f));\n\n"
     << "  constexpr int K_TILES = (K + BK - 1) / BK;\n"
     << "  constexpr int STEPS = SERIAL * K_TILES;  // serial reduction points x K tiles\n"
     << "  // This block's share of the steps: [first, last).\n"
     << "  const int first = (int)((long long)STEPS * split / SPLIT_K), last = (int)((long long)STEPS * (split + 1) / SPLIT_K);\n";
}

KernelSource emit_wmma(const ImplicitGemm& g, const ScheduleParams& p) {
  TMAP_CHECK(g.hw->family == "wmma", "the WMMA emitter needs a WMMA abstraction");
  WmmaKernel w(g, p);
  std::ostringstream os;
  emit_wmma_namespace(os, w);
  emit_wmma_entry(os, w);
  const GatherTile gather_a = gather_tile('a', !w.a_row, p.vec_a, w.a_pack, copies_shifted(g, p, 0)),
                   gather_b = gather_tile('b', w.b_row, p.vec_b, w.b_pack, copies_shifted(g, p, 1));
  const bool staged = emit_tile_loads(os, g, p, w.k.threads, gather_a, gather_b,
                                      w.ta + "* a = As + buf * (A_TILE / PACK_A)", w.tb + "* b = Bs + buf * (B_TILE / PACK_B)");
  emit_compute_lambda(os, g, p);
  emit_main_loop(os, p, staged);
  emit_dependents_trigger(os, p);
  emit_wmma_epilogue(os, g, p);
  emit_split_reduce(os, g, w.k, w.tpart, w.tout);
  w.k.code = os.str();
  return std::move(w.k);
}

class WmmaFamily final : public EmitterFamily {
 public:
  std::string_view name() const override { return "wmma"; }
  int ordinal() const override { return 0; }
  KernelSource emit(const ImplicitGemm& g, const ScheduleParams& p) const override { return emit_wmma(g, p); }

  void validate(const ImplicitGemm& g, const ScheduleParams& p, const DeviceLimits&,
                std::vector<ScheduleIssue>& out) const override {
    auto fail = [&](ScheduleError e, std::string detail) { out.push_back({e, std::move(detail)}); };
    // Gathers staged through registers overlap one tile at most; cp.async keeps up to 3 in flight.
    if (p.stages > (p.async_copy == 1 ? 4 : 2))
      fail(ScheduleError::kBadStages,
           "stages = " + std::to_string(p.stages) + " with async_copy = " + std::to_string(p.async_copy));
    const std::vector<Tile> t = tiles(g, p);
    for (const Tile& tile : t) {
      if ((tile.ld * tile.bits) % 128)
        fail(ScheduleError::kMisalignedRows, std::string(tile.name) + " rows of " + std::to_string(tile.ld) +
                                                 " elements of " + std::to_string(tile.bits) + " bits");
      if ((tile.frag_rows * tile.ld * tile.bits) % 256 || tile.col_step_bits % 256)
        fail(ScheduleError::kMisalignedFragments,
             std::string(tile.name) + " fragments step " + std::to_string(tile.col_step_bits / 8) +
                 " bytes along a row (layout " + g.layout + ", intrinsic " + g.shape.str() +
                 (p.panels ? ", panels" : ", rows; try panels") + ")");
    }
    // With panels a vector must fit a panel's row too.
    for (int which = 0; which < 2; ++which) {
      const int vec = which == 0 ? p.vec_a : p.vec_b;
      if (vec > 1 && t[which].panels && t[which].frag_cols % vec)
        fail(ScheduleError::kBadVector, std::string(which == 0 ? "vec_a" : "vec_b") + " = " + std::to_string(vec) +
                                            ": rows of the panels are " + std::to_string(t[which].frag_cols) +
                                            " elements");
    }
  }

  std::int64_t shared_bytes(const ImplicitGemm& g, const ScheduleParams& p) const override {
    auto t = tiles(g, p);
    std::int64_t operands = p.stages * (round_up(t[0].size_bytes(), 128) + round_up(t[1].size_bytes(), 128));
    return std::max(operands, round_up(t[2].size_bytes(), 128));  // the epilogue reuses the buffers
  }

  ScheduleParams default_schedule(const ImplicitGemm& g, const DeviceLimits& limits) const override {
    const auto m = g.shape[Axis::kI], n = g.shape[Axis::kJ], k = g.shape[Axis::kK];
    ScheduleParams p;
    // Two fragments per warp along each axis and 2 x 2 warps, shrunk for small problems.
    auto frags = [](std::int64_t extent, std::int64_t step) { return extent > step ? 2 : 1; };
    p.warp_m = static_cast<int>(m * frags(g.M, m));
    p.warp_n = static_cast<int>(n * frags(g.N, n));
    p.block_m = p.warp_m * (g.M > 2 * p.warp_m ? 2 : 1);
    p.block_n = p.warp_n * (g.N > 2 * p.warp_n ? 2 : 1);
    p.block_k = static_cast<int>(k * (g.K > k ? 2 : 1));
    p.stages = 2;
    // The smallest padding that keeps rows 16-byte aligned and moves rows across banks.
    p.smem_pad = std::max(1, 128 / std::min({storage_bits(g.hw->a_dtype), storage_bits(g.hw->b_dtype),
                                             storage_bits(g.hw->d_dtype)}));
    // Rows of the tile unless a fragment would start misaligned; then one panel per fragment.
    for (const auto& issue : tmap::validate(g, p, limits))
      if (issue.error == ScheduleError::kMisalignedFragments) p.panels = 1;
    if (shared_bytes(g, p) > limits.max_shared_bytes) p.stages = 1;
    // The widest global loads the operands and the tile allow.
    for (int which = 0; which < 2; ++which) {
      int& vec = which == 0 ? p.vec_a : p.vec_b;
      for (vec = max_vector_width(g, which); vec > 1; vec /= 2) {
        bool ok = true;
        for (const auto& issue : tmap::validate(g, p, limits)) ok = ok && issue.error != ScheduleError::kBadVector;
        if (ok) break;
      }
    }
    return p;
  }

  std::span<const KnobUse> knob_uses() const override {
    static constexpr KnobUse kUses[] = {{"panels", 0, 1}};
    return kUses;
  }

  KnobChoices choices(const ImplicitGemm& g, const ScheduleParams& defaults, const DeviceLimits&) const override {
    const auto im = g.shape[Axis::kI], in = g.shape[Axis::kJ], ik = g.shape[Axis::kK];
    const int pad = defaults.smem_pad;
    KnobChoices c;
    c.set_each("block_m", multiples(im, {1, 2, 4, 8, 16}, 256))
        .set_each("block_n", multiples(in, {1, 2, 4, 8, 16}, 256))
        .set_each("block_k", multiples(ik, {1, 2, 4, 8}, 128))
        .set_each("warp_m", multiples(im, {1, 2, 4}, 128))
        .set_each("warp_n", multiples(in, {1, 2, 4}, 128))
        .set("stages", {1, {2, 2}, 3, 4})  // 3 and 4 need async_copy
        .set_each("smem_pad", std::vector<int>{0, pad, 2 * pad})
        .set("split_k", {{1, 3}, 2, 3, 4, 6, 8, 12, 16, 24, 32})  // no split is the common answer
        // The splits summed by a second kernel, or by the tile's last block (slower where measured).
        .set("split_reduce", {{0, 3}, 1})
        // A residual asked of L2 when the tile starts, where the epilogue reads one.
        .set("epi_prefetch", epilogue_has_full_shape_operand(g) ? std::vector<Choice>{0, 1} : std::vector<Choice>{0})
        .set("panels", {0, 1})
        .set_each("vec_a", powers_up_to(max_vector_width(g, 0)))
        .set_each("vec_b", powers_up_to(max_vector_width(g, 1)))
        .set("unroll", {0, 1})
        .set("raster", {1, 2, 4, 8})
        .set("async_copy", {0, 1});  // needs vector loads
    return c;
  }

  int max_fragments_per_warp(const ImplicitGemm&) const override { return 16; }
  double peak_fraction() const override { return 0.6; }
};

}  // namespace

const EmitterFamily& wmma_family() {
  static const WmmaFamily family;
  return family;
}

}  // namespace tmap
