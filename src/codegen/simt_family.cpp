// The SIMT family (CUDA cores, thread scope): for what Tensor Cores serve badly or not at all:
// depthwise convolutions, GEMV and skinny products, GEMMs smaller than one intrinsic, dtypes
// without a Tensor Core path. The "intrinsic" is one thread's multiply-add over P elements of k:
// fma.rn.f32 (P = 1), the packed half2 fma (P = 2, float16 accumulator) or dp4a (P = 4, int8 into
// int32).
//
// Operand tiles are staged through shared memory by the shared tile pipeline (vector or cp.async
// copies along whichever axis is contiguous, a ring of stages), like every family. Each thread
// owns a register tile of TM x TN outputs (the schedule's warp_m x warp_n) and reads its rows of A
// and columns of B from shared memory. For reduction-heavy shapes (GEMV: N = 1, K large) the
// reduction of one output is split across k_lanes neighbouring lanes, each summing every
// k_lanes-th group of P elements of a step's tile; their partial sums meet by warp shuffles
// (xor butterfly) before the epilogue, which stages the block's results through shared memory
// and writes them in vectors where the output is contiguous. Depthwise convolutions and other
// per-channel sliding windows are staged as windows instead (simt_window.cpp).
#include <algorithm>
#include <sstream>

#include "tile_pipeline.h"
#include "tmap/codegen/reference_emitter.h"
#include "tmap/support/diagnostic.h"

namespace tmap {
namespace {

using namespace pipeline;

/// Elements of k one multiply-add consumes: the intrinsic's k (1, 2 or 4).
int pack_of(const ImplicitGemm& g) { return static_cast<int>(g.shape[Axis::kK]); }
/// The most accumulators one thread holds (warp_m x warp_n) before spilling.
constexpr int kMaxThreadOutputs = 64;

/// The expression reading the P elements of operand `op` at (mn, kk) of its stage buffer: one
/// value (P = 1, converted to the accumulator's type), or a packed 32-bit word (half2 or char4),
/// one load where the tile's rows run along k, else assembled from P scalar loads.
std::string operand_read(const ImplicitGemm& g, char op, bool trans, const std::string& mn, const std::string& kk) {
  const int pack = pack_of(g);
  const DType t = op == 'a' ? g.hw->a_dtype : g.hw->b_dtype;
  const std::string buf(1, op), at = buf + "_at";
  auto element = [&](const std::string& k) {
    return buf + "[" + (trans ? at + "(" + k + ", " + mn + ")" : at + "(" + mn + ", " + k + ")") + "]";
  };
  if (pack == 1) {
    if (t == DType::kFloat16) return "__half2float(" + element(kk) + ")";
    if (t == DType::kBFloat16) return "__bfloat162float(" + element(kk) + ")";
    if (t == DType::kInt8) return "(int)" + element(kk);
    return element(kk);
  }
  if (!trans) {
    const std::string word = pack == 2 ? "__half2" : "int";
    return "*reinterpret_cast<const " + word + "*>(&" + element(kk) + ")";
  }
  if (pack == 2) return "__halves2half2(" + element(kk) + ", " + element(kk + " + 1") + ")";
  return "(int)((unsigned char)" + element(kk) + " | ((unsigned)(unsigned char)" + element(kk + " + 1") +
         " << 8) | ((unsigned)(unsigned char)" + element(kk + " + 2") + " << 16) | ((unsigned)(unsigned char)" +
         element(kk + " + 3") + " << 24))";
}

/// One SIMT kernel being emitted: its GEMM and schedule, and what the emitters below derive from
/// them once.
struct SimtKernel {
  SimtKernel(const ImplicitGemm& g, const ScheduleParams& p)
      : g(g), p(p), pack(pack_of(g)), a_trans(stored_along_mn(g, 0)), b_trans(stored_along_mn(g, 1)),
        half2(pack == 2), ov(out_vector(g, p)), ta(storage_type(g.hw->a_dtype)), tb(storage_type(g.hw->b_dtype)),
        tacc(accumulator_type(g.hw->d_dtype)), tout(storage_type(g.compute->tensor_of(g.compute->output).dtype)),
        cs_type(half2 ? "float" : tacc) {}
  const ImplicitGemm& g;
  const ScheduleParams& p;
  const int pack;  ///< Elements of k per multiply-add (pack_of).
  const bool a_trans, b_trans, half2;  ///< Operands stored along m and n; the half2 intrinsic.
  const OutVector ov;
  /// Storage types of the operands and the output; the accumulator's; the staged outputs' (Cs).
  const std::string ta, tb, tacc, tout, cs_type;
  bool c_row() const { return ov.along == 'n'; }  ///< The staged outputs run along n.
};

/// The source before the kernel: headers (only those the dtypes need: cuda_bf16.h alone costs
/// NVRTC a tenth of a second), constants and the device helpers.
void emit_simt_prelude(std::ostringstream& os, const SimtKernel& s, int threads) {
  const ImplicitGemm& g = s.g;
  const ScheduleParams& p = s.p;
  const StoredTile sa = stored_tile(g, p, 0), sb = stored_tile(g, p, 1);
  emit_header(os, g);
  auto uses = [&](DType t) {
    return g.hw->a_dtype == t || g.hw->b_dtype == t || g.compute->tensor_of(g.compute->output).dtype == t;
  };
  if (uses(DType::kFloat16) || s.half2) os << "#include <cuda_fp16.h>\n";
  if (uses(DType::kBFloat16)) os << "#include <cuda_bf16.h>\n";
  os << "\nnamespace {\n";
  emit_common_constants(os, g, p, threads);
  os << "constexpr int TM = WM, TN = WN;  // outputs per thread (its register tile)\n"
     << "constexpr int KL = " << p.k_lanes << ";  // lanes sharing one output's reduction\n"
     << "constexpr int TILES_N = BN / TN;\n"
     << "constexpr int P = " << s.pack << ";  // elements of k per multiply-add (" << family_intrinsic(*g.hw) << ")\n"
     << "// Shared tiles (padded rows): A " << (s.a_trans ? "[BK][BM]" : "[BM][BK]") << ", B "
     << (s.b_trans ? "[BK][BN]" : "[BN][BK]") << "; epilogue " << (s.c_row() ? "[BM][BN + 8]" : "[BN][BM + 4]") << "\n";
  emit_ring_helpers(os, g, p, sa, sb, s.c_row());
  emit_operand_loader(os, g, p, 0);
  emit_operand_loader(os, g, p, 1);
  emit_output_scatter(os, g, s.tout, s.ov.width, s.ov.along);
  os << "}  // namespace\n\n";
}

/// The thread's register tile of sums, zeroed: half2 pairs of k summed apart in float16 for a
/// half2 intrinsic (its D), else `tacc`.
void emit_simt_accumulators(std::ostringstream& os, const SimtKernel& s) {
  if (s.half2)
    os << "  __half2 acc2[TM][TN];  // pairs of k summed apart, in float16 as the intrinsic's D\n"
       << "  #pragma unroll\n  for (int i = 0; i < TM; ++i)\n"
       << "    #pragma unroll\n    for (int j = 0; j < TN; ++j) acc2[i][j] = __float2half2_rn(0.f);\n";
  else
    os << "  " << s.tacc << " acc[TM][TN];\n"
       << "  #pragma unroll\n  for (int i = 0; i < TM; ++i)\n"
       << "    #pragma unroll\n    for (int j = 0; j < TN; ++j) acc[i][j] = 0;\n";
}

/// The `compute` lambda: one shared buffer's tiles multiplied into the thread's outputs.
void emit_simt_compute(std::ostringstream& os, const SimtKernel& s) {
  const std::string areg = s.pack == 1 ? s.tacc : s.pack == 2 ? "__half2" : "int";
  os << "  // Multiplies the tiles in shared buffer `buf` into this thread's outputs: its lane takes every\n"
     << "  // KL-th group of P elements of k.\n"
     << "  auto compute = [&](int buf) {\n"
     << "    const " << s.ta << "* a = As + buf * (A_BYTES / (int)sizeof(" << s.ta << "));\n"
     << "    const " << s.tb << "* b = Bs + buf * (B_BYTES / (int)sizeof(" << s.tb << "));\n"
     << "    #pragma unroll\n    for (int kk = kl * P; kk < BK; kk += KL * P) {\n"
     << "      " << areg << " av[TM], bv[TN];\n"
     << "      #pragma unroll\n      for (int i = 0; i < TM; ++i) av[i] = "
     << operand_read(s.g, 'a', s.a_trans, "tm0 + i", "kk") << ";\n"
     << "      #pragma unroll\n      for (int j = 0; j < TN; ++j) bv[j] = "
     << operand_read(s.g, 'b', s.b_trans, "tn0 + j", "kk") << ";\n"
     << "      #pragma unroll\n      for (int i = 0; i < TM; ++i)\n"
     << "        #pragma unroll\n        for (int j = 0; j < TN; ++j) "
     << (s.pack == 1   ? "acc[i][j] += av[i] * bv[j];\n"
         : s.pack == 2 ? "acc2[i][j] = __hfma2(av[i], bv[j], acc2[i][j]);\n"
                       : "acc[i][j] = __dp4a(av[i], bv[j], acc[i][j]);\n")
     << "    }\n  };\n\n";
}

/// After the main loop: half2 pairs folded, the KL lanes' partial sums combined, and each output
/// tile staged in shared memory `Cs` (of cs_type) for the epilogue's stores.
void emit_simt_stage_outputs(std::ostringstream& os, const SimtKernel& s) {
  if (s.half2)
    os << "  // The two halves of each pair, summed in float16 as the intrinsic's accumulator.\n"
       << "  float acc[TM][TN];\n"
       << "  #pragma unroll\n  for (int i = 0; i < TM; ++i)\n"
       << "    #pragma unroll\n    for (int j = 0; j < TN; ++j) acc[i][j] = __half2float(__hadd(__low2half(acc2[i][j]), "
          "__high2half(acc2[i][j])));\n";
  if (s.p.k_lanes > 1)
    os << "  // The KL lanes of an output tile sum their partial results (xor butterfly within the group).\n"
       << "  constexpr unsigned LANES = THREADS >= 32 ? 0xffffffffu : (1u << THREADS) - 1;  // the warp's threads\n"
       << "  #pragma unroll\n  for (int off = KL / 2; off > 0; off /= 2)\n"
       << "    #pragma unroll\n    for (int i = 0; i < TM; ++i)\n"
       << "      #pragma unroll\n      for (int j = 0; j < TN; ++j) acc[i][j] += __shfl_xor_sync(LANES, acc[i][j], off);\n";
  os << "  // Epilogue: the outputs to shared memory (one lane per output tile), then to the output.\n"
     << "  " << s.cs_type << "* Cs = reinterpret_cast<" << s.cs_type << "*>(smem);\n"
     << "  if (kl == 0) {\n"
     << "    #pragma unroll\n    for (int i = 0; i < TM; ++i)\n"
     << "      #pragma unroll\n      for (int j = 0; j < TN; ++j) "
     << (s.c_row() ? "Cs[(tm0 + i) * C_LD + tn0 + j]" : "Cs[(tn0 + j) * C_LD + tm0 + i]") << " = acc[i][j];\n"
     << "  }\n";
}

KernelSource emit_simt(const ImplicitGemm& g, const ScheduleParams& p) {
  TMAP_CHECK(g.hw->family == "simt", "the SIMT emitter needs a simt abstraction");
  TMAP_CHECK(g.shape[Axis::kI] == 1 && g.shape[Axis::kJ] == 1, "SIMT intrinsics are 1 x 1 x P");
  const SimtKernel s(g, p);
  TMAP_CHECK(s.pack == 1 || (s.pack == 2 && g.hw->a_dtype == DType::kFloat16) ||
                 (s.pack == 4 && g.hw->a_dtype == DType::kInt8),
             "SIMT packs are 1 element, half2 or four int8");
  KernelSource k = kernel_shell(g, p, block_threads(g, p));
  const std::string tpart = partial_type(g);

  std::ostringstream os;
  emit_simt_prelude(os, s, k.threads);
  emit_kernel_entry(os, g, k, p, s.ta, s.tb, s.tout, tpart);
  os << "  // KL neighbouring lanes share an output tile; the tiles run along n first.\n"
     << "  const int kl = threadIdx.x % KL, tile = threadIdx.x / KL;\n"
     << "  const int tm0 = (tile / TILES_N) * TM, tn0 = (tile % TILES_N) * TN;  // this thread's outputs\n\n";
  emit_simt_accumulators(os, s);
  emit_step_range(os);
  const bool staged = emit_byte_stage_loads(os, g, p, k.threads, s.a_trans, s.b_trans, s.ta, s.tb);
  emit_simt_compute(os, s);
  emit_main_loop(os, p, staged);
  emit_simt_stage_outputs(os, s);
  emit_epilogue_stores(os, g, p, s.cs_type, s.tout);
  emit_split_reduce(os, g, k, tpart, s.tout);
  k.code = os.str();
  return k;
}

/// The tuner's choices for register-tiled kernels (im2col tiles, window 0).
KnobChoices tile_choices(const ImplicitGemm& g) {
  KnobChoices c;
  c.set("block_m", {1, 2, 4, 8, 16, 32, 64, 128, 256})  // drawn as thread tiles x a power of two
      .set("block_n", {1, 2, 4, 8, 16, 32, 64, 128, 256})
      .set_each("block_k", multiples(8 * pack_of(g), {1, 2, 4, 8, 16, 32}, 256))
      .set("warp_m", {1, 2, 4, 8})  // outputs per thread along m
      .set("warp_n", {1, 2, 4, 8})  // along n
      .set("stages", {1, {2, 2}, 3, 4})  // 3 and 4 need async_copy
      .set_each("smem_pad", {0, 16 / std::max(1, dtype_bits(g.hw->a_dtype) / 8)})
      .set("split_k", {{1, 3}, 2, 3, 4, 6, 8, 12, 16, 24, 32})
      // The splits summed by a second kernel, or by the tile's last block (slower where measured).
      .set("split_reduce", {{0, 3}, 1})
      // A residual asked of L2 when the tile starts, where the epilogue reads one.
      .set("epi_prefetch", epilogue_has_full_shape_operand(g) ? std::vector<Choice>{0, 1} : std::vector<Choice>{0})
      .set_each("vec_a", powers_up_to(max_vector_width(g, 0)))
      .set_each("vec_b", powers_up_to(max_vector_width(g, 1)))
      .set("unroll", {0, 1})
      .set("raster", {1, 2, 4})
      .set("async_copy", {0, {1, 2}})
      .set("k_lanes", {1, 2, 4, 8, 16, 32});
  return c;
}

class SimtFamily final : public EmitterFamily {
 public:
  std::string_view name() const override { return "simt"; }
  int ordinal() const override { return 3; }
  KernelSource emit(const ImplicitGemm& g, const ScheduleParams& p) const override {
    return p.window ? emit_simt_window(g, p) : emit_simt(g, p);
  }
  int threads_per_warp_tile(const ScheduleParams& p) const override { return std::max(1, p.k_lanes); }
  std::span<const KnobUse> knob_uses() const override {
    static constexpr KnobUse kUses[] = {{"k_lanes", 1, 32}, {"window", 0, 1}, {"cluster", 0, 1}};
    return kUses;
  }
  std::vector<int> block_tiles(const ImplicitGemm& g, const ScheduleParams& p, char axis) const override {
    return p.window ? window_block_tiles(g, p, axis) : EmitterFamily::block_tiles(g, p, axis);
  }

  void validate(const ImplicitGemm& g, const ScheduleParams& p, const DeviceLimits& limits,
                std::vector<ScheduleIssue>& out) const override {
    auto fail = [&](ScheduleError e, std::string detail) { out.push_back({e, std::move(detail)}); };
    if (p.k_lanes & (p.k_lanes - 1))
      fail(ScheduleError::kBadOption, "k_lanes = " + std::to_string(p.k_lanes) + ": a power of two from 1 to 32 (the "
                                      "lanes of one warp that share an output)");
    const int pack = pack_of(g);
    if (p.window) return validate_window(g, p, limits, out);
    if (p.stages > (p.async_copy == 1 ? 4 : 2))
      fail(ScheduleError::kBadStages,
           "stages = " + std::to_string(p.stages) + " with async_copy = " + std::to_string(p.async_copy));
    if (p.block_k % (p.k_lanes * pack))
      fail(ScheduleError::kTileNotMultipleOfIntrinsic,
           "block_k = " + std::to_string(p.block_k) + ": its " + std::to_string(p.k_lanes) + " lanes take groups of " +
               std::to_string(pack) + " elements of k, so block_k is a multiple of " + std::to_string(p.k_lanes * pack));
    const std::int64_t outputs = std::int64_t{p.warp_m} * p.warp_n;  // 64 bits: absurd --params never overflow
    if (outputs > kMaxThreadOutputs)
      fail(ScheduleError::kBadOption, "thread tile " + std::to_string(p.warp_m) + "x" + std::to_string(p.warp_n) +
                                          " holds " + std::to_string(outputs) +
                                          " accumulators per thread; at most " + std::to_string(kMaxThreadOutputs));
    for (int which = 0; which < 2; ++which) {
      const StoredTile s = stored_tile(g, p, which);
      const std::int64_t vec = which == 0 ? p.vec_a : p.vec_b;
      const std::int64_t row = s.row_bytes(p.smem_pad);
      const char* name = which == 0 ? "A" : "B";
      if (vec > 1 && row % (vec * s.bytes))
        fail(ScheduleError::kMisalignedRows, std::string(name) + " rows of " + std::to_string(row) + " bytes: vectors of " +
                                                 std::to_string(vec * s.bytes) + " bytes need rows of a multiple");
      else if (pack > 1 && !stored_along_mn(g, which) && row % 4)
        fail(ScheduleError::kMisalignedRows, std::string(name) + " rows of " + std::to_string(row) +
                                                 " bytes: packed 4-byte reads along k need rows of a multiple of 4");
    }
    (void)limits;
  }

  std::int64_t shared_bytes(const ImplicitGemm& g, const ScheduleParams& p) const override {
    return p.window ? window_shared_bytes(g, p) : ring_or_epilogue_bytes(g, p);
  }

  ScheduleParams default_schedule(const ImplicitGemm& g, const DeviceLimits& limits) const override {
    // A mapping that can stage its input as windows does (on its one layout for it).
    if (window_plan(g).why_not.empty()) {
      ScheduleParams w = window_default_schedule(g, limits);
      if (::tmap::validate(g, w, limits).empty()) return w;
    }
    const int pack = pack_of(g);
    auto pow2_at_most = [](std::int64_t x, int cap) {
      int v = 1;
      while (v * 2 <= cap && v * 2 <= x) v *= 2;
      return v;
    };
    auto pow2_at_least = [](std::int64_t x, int cap) {
      int v = 1;
      while (v < cap && v < x) v *= 2;
      return v;
    };
    ScheduleParams p;
    // Few outputs along an axis with a long reduction (GEMV, M or N of a few): lanes split k.
    const std::int64_t outputs = g.M * g.N;
    p.k_lanes = outputs >= 8192 || g.K < 256 ? 1 : g.K >= 1024 ? 32 : 8;
    p.warp_m = pow2_at_most(g.M, p.k_lanes > 1 ? 1 : 4);
    p.warp_n = pow2_at_most(g.N, p.k_lanes > 1 ? 1 : 4);
    // About 256 threads: output tiles along n first, then m.
    const int tiles = std::max(1, 256 / p.k_lanes);
    const int tiles_n = pow2_at_least((g.N + p.warp_n - 1) / p.warp_n, std::min(tiles, 64));
    const int tiles_m = pow2_at_least((g.M + p.warp_m - 1) / p.warp_m, std::max(1, tiles / tiles_n));
    p.block_n = p.warp_n * tiles_n;
    p.block_m = p.warp_m * tiles_m;
    p.block_k = std::max(32, p.k_lanes * pack * 4);
    if (g.K <= 16 && p.k_lanes == 1) p.block_k = std::max(pack, pow2_at_least(g.K, 16));
    p.smem_pad = 16 / std::max(1, dtype_bits(g.hw->a_dtype) / 8);
    // Stages of at most 24 KiB, so that several blocks share an SM.
    while (stage_bytes(g, p, 0) + stage_bytes(g, p, 1) > 24 * 1024 && (p.block_m > p.warp_m || p.block_n > p.warp_n)) {
      if (p.block_m / p.warp_m >= p.block_n / p.warp_n) p.block_m /= 2;
      else p.block_n /= 2;
    }
    p.vec_a = max_vector_width(g, 0);
    p.vec_b = max_vector_width(g, 1);
    default_copies(g, p, limits, {ScheduleError::kBadVector, ScheduleError::kMisalignedRows}, 3);
    return p;
  }

  KnobChoices choices(const ImplicitGemm& g, const ScheduleParams& defaults, const DeviceLimits& limits) const override {
    KnobChoices c = defaults.window ? window_choices(g) : tile_choices(g);
    if (limits.compute_capability >= 90) c.set("cluster", {0, 1});  // split-K summed in a cluster
    return c;
  }

  int max_warp_tiles_log2() const override { return 7; }
  int max_fragments_per_warp(const ImplicitGemm&) const override { return kMaxThreadOutputs; }
  double peak_fraction() const override { return 0.1; }  // FMA on CUDA cores fed from shared memory
};

}  // namespace

const EmitterFamily& simt_family() {
  static const SimtFamily family;
  return family;
}

}  // namespace tmap
