// The mma.sync family (PTX mma.sync.aligned, warp scope, sm_80+): register-blocked warp tiles of
// m16n8 accumulators, operand fragments loaded from shared memory with ldmatrix (x4; .trans for
// 16-bit operands stored the other way round), shared tiles XOR-swizzled in 16-byte chunks or
// padded, a cp.async ring of up to 5 stages, and an epilogue staged through shared memory that
// writes the output in 16-byte vectors where the output is contiguous along M or N.
//
// Register layouts (PTX ISA, "Matrix fragments for mma.m16n8k*"), lane = 4 g + q: A holds rows g
// and g + 8 at columns (k) 2q, 2q + 1 of each half of k (16-bit; int8 4q..4q+3, tf32 q); B holds
// columns g at rows (k) of the same pattern; the accumulator c0, c1 sit at row g, columns 2q and
// 2q + 1, and c2, c3 at row g + 8. ldmatrix gives lane 4 g + q the 32-bit word q of row g of each
// 8 x 16-byte matrix (with .trans, of the transposed 8 x 8 matrix of 16-bit elements), which is
// exactly the fragment layout when a row of the stored tile runs along k (or, transposed, along
// m or n).
#include <algorithm>
#include <sstream>

#include "tile_pipeline.h"
#include "tmap/codegen/device_library.h"
#include "tmap/codegen/reference_emitter.h"
#include "tmap/support/diagnostic.h"

namespace tmap {
namespace {

using namespace pipeline;

int elem_bytes(DType t) { return dtype_bits(t) / 8; }
bool is_pow2(std::int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

/// The element offset `op`_at(r, c) computes in the kernel (emit_tile_index), for the planner below.
std::int64_t tile_at(const StoredTile& s, const ScheduleParams& p, std::int64_t r, std::int64_t c) {
  if (!p.swizzle) return r * (s.cols + p.smem_pad) + c;
  const std::int64_t chunk = 16 / s.bytes;
  if (s.cols * s.bytes >= 128) return r * s.cols + (((c / chunk) ^ (r & 7)) * chunk) + c % chunk;
  const std::int64_t o = (r * s.cols + c) * s.bytes, line = o >> 7;
  return ((line << 7) | ((((o >> 4) ^ line) & 7) << 4) | (o & 15)) / s.bytes;
}

/// How the kernel finds the ldmatrix address of fragment f (i of A, j of B) at sub-step kk.
/// The lane- and warp-dependent part is computed once, before the main loop, and the rest folds
/// to constants: kShared: (base + f * fragment_step) OP (kk * kk_scale); kPerFragment:
/// base[f] OP (kk * kk_scale);
/// kDirect: the tile's index function at every use. Each form is checked here against the
/// index function for every lane, warp, fragment and sub-step of the schedule; the first that
/// holds is used (XOR where the swizzle makes the sub-step's chunk bits disjoint from the lane's).
struct FragmentAddressing {
  enum Form { kShared, kPerFragment, kDirect } form = kDirect;
  char op = '+';
  std::int64_t fragment_step = 0;
  std::int64_t kk_scale = 1;
};

FragmentAddressing plan_fragments(const StoredTile& s, const ScheduleParams& p, bool trans, bool is_a, int ik,
                                  int fragments, int warp_extent, int block_extent) {
  const int c8 = 16 / s.bytes;
  const std::int64_t ld = p.swizzle ? s.cols : s.cols + p.smem_pad;
  // (row, col) of lane l's row address for fragment f at sub-step kk, the warp's origin at w0.
  auto coords = [&](int l, std::int64_t w0, int f, int kk) {
    const int lr = l % 8, lj = l / 8;
    const std::int64_t lo = is_a ? (lj % 2) * 8 : (lj / 2) * 8;  // along m (A) or n (B)
    const std::int64_t kh = is_a ? (lj / 2) : (lj % 2);          // which half of k
    const std::int64_t mn = w0 + f * 16 + lo;
    if (!trans) return std::pair<std::int64_t, std::int64_t>{mn + lr, kk + kh * c8};
    return std::pair<std::int64_t, std::int64_t>{kk + kh * 8 + lr, mn};
  };
  auto holds = [&](const FragmentAddressing& a) {
    for (std::int64_t w0 = 0; w0 < block_extent; w0 += warp_extent)
      for (int l = 0; l < 32; ++l) {
        auto [r0, c0] = coords(l, w0, 0, 0);
        const std::int64_t base = tile_at(s, p, r0, c0);
        for (int f = 0; f < fragments; ++f) {
          auto [rf, cf] = coords(l, w0, f, 0);
          const std::int64_t fbase =
              a.form == FragmentAddressing::kShared ? base + f * a.fragment_step : tile_at(s, p, rf, cf);
          for (int kk = 0; kk < p.block_k; kk += ik) {
            auto [r, c] = coords(l, w0, f, kk);
            const std::int64_t term = kk * a.kk_scale;
            if ((a.op == '^' ? (fbase ^ term) : fbase + term) != tile_at(s, p, r, c)) return false;
          }
        }
      }
    return true;
  };
  for (auto form : {FragmentAddressing::kShared, FragmentAddressing::kPerFragment})
    for (char op : {'+', '^'}) {
      FragmentAddressing a;
      a.form = form;
      a.op = op;
      a.fragment_step = trans ? 16 : 16 * ld;  // 16 columns (transposed) or 16 rows
      a.kk_scale = trans ? ld : 1;             // kk rows down (transposed) or kk columns on
      if (holds(a)) return a;
    }
  return {};
}

/// The device helpers of an mma.sync kernel: ldmatrix and the tf32 rounding (from the device
/// library), and the intrinsic on one accumulator fragment.
void emit_mma_sync_helpers(std::ostringstream& os, const ImplicitGemm& g, const std::string& tfrag) {
  emit_device_include(os, "ldmatrix");
  const char* c = tfrag == "int" ? "r" : "f";
  const std::string instruction = family_intrinsic(*g.hw);
  TMAP_CHECK(!instruction.empty(), "abstraction files name an mma.sync instruction for their dtypes (checked at load)");
  os << "// " << instruction << ": d += a * b on one 16 x 8 accumulator fragment.\n"
     << "__device__ __forceinline__ void mma(" << tfrag << " (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {\n"
     << "  asm volatile(\"" << instruction
     << " {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\\n\"\n"
     << "               : \"+" << c << "\"(d[0]), \"+" << c << "\"(d[1]), \"+" << c << "\"(d[2]), \"+" << c
     << "\"(d[3])\n"
     << "               : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b0), \"r\"(b1));\n}\n\n";
}

/// The expressions that address sub-step kk of fragment i (of A) and j (of B) in shared memory;
/// their per-thread parts are declared in `bases` (see plan_fragments).
std::pair<std::string, std::string> fragment_addresses(std::ostringstream& bases, const ImplicitGemm& g,
                                                       const ScheduleParams& p, const StoredTile& sa,
                                                       const StoredTile& sb, bool a_trans, bool b_trans) {
  const auto ik = g.shape[Axis::kK];
  // Fragment loads: A matrices (m 0-7, k lo), (m 8-15, k lo), (m 0-7, k hi), (m 8-15, k hi) are
  // a0..a3; B matrices (n 0-7, k lo), (n 0-7, k hi), (n 8-15, k lo), (n 8-15, k hi) are b0, b1 of
  // two neighbouring n fragments.
  auto direct = [](bool trans, bool is_a, const std::string& f, const std::string& kk) {
    const std::string w0 = is_a ? "wm0" : "wn0", at = is_a ? "a_at" : "b_at";
    const std::string lo = is_a ? "(lj % 2) * 8" : "(lj / 2) * 8", kh = is_a ? "(lj / 2)" : "(lj % 2)";
    if (trans) return at + "(" + kk + " + " + kh + " * 8 + lr, " + w0 + " + " + f + " * 16 + " + lo + ")";
    return at + "(" + w0 + " + " + f + " * 16 + " + lo + " + lr, " + kk + " + " + kh + " * C8)";
  };
  const FragmentAddressing fa_plan = plan_fragments(sa, p, a_trans, true, static_cast<int>(ik), p.warp_m / 16,
                                                    p.warp_m, p.block_m);
  const FragmentAddressing fb_plan = plan_fragments(sb, p, b_trans, false, static_cast<int>(ik), p.warp_n / 16,
                                                    p.warp_n, p.block_n);
  // The per-thread part of the fragment addresses, and the expression used at each load.
  auto addressing = [&](const FragmentAddressing& plan, bool trans, bool is_a) {
    const std::string name = is_a ? "a_frag" : "b_frag", f = is_a ? "i" : "j", count = is_a ? "MI" : "NI / 2";
    const std::string kk = "kk * " + std::to_string(plan.kk_scale);
    switch (plan.form) {
      case FragmentAddressing::kShared:
        bases << "  const int " << name << " = " << direct(trans, is_a, "0", "0") << ";  // + " << f << " * "
              << plan.fragment_step << " " << plan.op << " " << kk << "\n";
        return "((" + name + " + " + f + " * " + std::to_string(plan.fragment_step) + ") " + plan.op + " (" + kk + "))";
      case FragmentAddressing::kPerFragment:
        bases << "  int " << name << "[" << count << "];\n  #pragma unroll\n  for (int " << f << " = 0; " << f << " < "
              << count << "; ++" << f << ") " << name << "[" << f << "] = " << direct(trans, is_a, f, "0") << ";\n";
        return "(" + name + "[" + f + "] " + plan.op + " (" + kk + "))";
      case FragmentAddressing::kDirect: break;
    }
    return direct(trans, is_a, f, "kk");
  };
  std::string a_addr = addressing(fa_plan, a_trans, true);
  return {a_addr, addressing(fb_plan, b_trans, false)};
}

/// Software pipeline in two levels: the cp.async ring, and fragments double-buffered in registers.
void emit_mma_sync_pipelined_loop(std::ostringstream& os, const ScheduleParams& p, bool staged) {
  os << "  // Software pipeline in two levels: a cp.async ring of STAGES shared buffers (the copies of step\n"
     << "  // + STAGES - 1 are issued while step is multiplied), and fragments double-buffered in registers\n"
     << "  // (the ldmatrix of sub-step kk + 1, or of the next buffer's first, before the mma of kk).\n"
     << "  constexpr int KSTEPS = BK / IK;  // even\n"
     << "  for (int t = 0; t < STAGES - 1; ++t) {\n"
     << "    if (first + t < last) {\n      load_tiles(first + t, t);\n"
     << (staged ? "      store_staged(t);\n" : "") << "    }\n"
     << "    cp_async_commit();\n  }\n"
     << "  cp_async_wait<STAGES - 2>();\n  __syncthreads();\n"
     << "  unsigned fa[2][MI][4], fb[2][NI / 2][4];\n"
     << "  load_fragments(0, 0, fa[0], fb[0]);\n"
     << "  int read = 0;  // the shared buffer of `step`\n"
     << "  for (int step = first; step < last; ++step) {\n"
     << "    #pragma unroll\n    for (int kk = 0; kk < KSTEPS; ++kk) {\n"
     << "      if (kk == 0) {  // every warp finished the buffer of step - 1 at the last barrier: refill it\n"
     << "        if (step + STAGES - 1 < last) load_tiles(step + STAGES - 1, (read + STAGES - 1) % STAGES);\n"
     << "        cp_async_commit();\n      }\n"
     << "      if (kk == KSTEPS - 1) {  // the next buffer has landed (for every thread): move on to it\n"
     << (staged && p.stages == 2
             ? "        // The shifted copies of step + 1, for the barrier below to publish.\n"
               "        if (step + 1 < last) store_staged((read + 1) % STAGES);\n"
             : "")
     << "        cp_async_wait<STAGES - 2>();\n        __syncthreads();\n"
     << "        read = (read + 1) % STAGES;\n      }\n"
     << "      load_fragments(read, ((kk + 1) % KSTEPS) * IK, fa[(kk + 1) % 2], fb[(kk + 1) % 2]);\n"
     << "      multiply(fa[kk % 2], fb[kk % 2]);\n"
     << (staged && p.stages > 2
             ? "      // The shifted copies fetched at kk = 0, after a step's math: their buffer (that of step - 1)\n"
               "      // has no readers since the barrier above; the next barrier publishes them.\n"
               "      if (kk == KSTEPS - 1 && step + STAGES - 1 < last) store_staged((read + STAGES - 2) % STAGES);\n"
             : "")
     << "    }\n  }\n"
     << "  cp_async_wait<0>();\n  __syncthreads();  // the epilogue reuses the buffers\n\n";
}

/// The kernel's lambdas that load the fragments of a sub-step into registers (addressed by
/// `a_addr` and `b_addr`, see fragment_addresses) and multiply them into the accumulators.
void emit_fragment_lambdas(std::ostringstream& os, const ImplicitGemm& g, const std::string& a_addr,
                           const std::string& b_addr, bool a_trans, bool b_trans) {
  const std::string ta = storage_type(g.hw->a_dtype), tb = storage_type(g.hw->b_dtype);
  const bool tf32 = g.hw->a_dtype == DType::kTFloat32;
  const std::string ldm_a = std::string("ldmatrix_x4") + (a_trans ? "_trans" : "");
  const std::string ldm_b = std::string("ldmatrix_x4") + (b_trans ? "_trans" : "");
  const std::string cvt =
      tf32 ? "    #pragma unroll\n    for (int t = 0; t < 4; ++t) {\n"
             "      #pragma unroll\n      for (int i = 0; i < MI; ++i) fa[i][t] = to_tf32(fa[i][t]);\n"
             "      #pragma unroll\n      for (int j = 0; j < NI / 2; ++j) fb[j][t] = to_tf32(fb[j][t]);\n    }\n"
           : "";
  // Fragments of sub-step kk of shared buffer `buf` into registers fa, fb.
  os << "  // Loads the fragments of sub-step kk of shared buffer `buf`.\n"
     << "  auto load_fragments = [&](int buf, int kk, unsigned (&fa)[MI][4], unsigned (&fb)[NI / 2][4]) {\n"
     << "    const " << ta << "* a = As + buf * (A_BYTES / (int)sizeof(" << ta << "));\n"
     << "    const " << tb << "* b = Bs + buf * (B_BYTES / (int)sizeof(" << tb << "));\n"
     << "    #pragma unroll\n    for (int i = 0; i < MI; ++i) " << ldm_a << "(fa[i], a + " << a_addr << ");\n"
     << "    #pragma unroll\n    for (int j = 0; j < NI / 2; ++j) " << ldm_b << "(fb[j], b + " << b_addr << ");\n"
     << cvt << "  };\n"
     << "  auto multiply = [&](const unsigned (&fa)[MI][4], const unsigned (&fb)[NI / 2][4]) {\n"
     << "    #pragma unroll\n    for (int i = 0; i < MI; ++i)\n"
     << "      #pragma unroll\n      for (int j = 0; j < NI; ++j)\n"
     << "        mma(acc[i][j], fa[i], fb[j / 2][(j % 2) * 2], fb[j / 2][(j % 2) * 2 + 1]);\n"
     << "  };\n\n";
}

/// What the parts of an mma.sync kernel share: its types, operand orders and tiles.
struct MmaSyncKernel {
  MmaSyncKernel(const ImplicitGemm& g, const ScheduleParams& p)
      : g(g), p(p), k(kernel_shell(g, p, block_threads(g, p))), ta(storage_type(g.hw->a_dtype)),
        tb(storage_type(g.hw->b_dtype)), tfrag(accumulator_type(g.hw->d_dtype)),
        tout(storage_type(g.compute->tensor_of(g.compute->output).dtype)), tpart(partial_type(g)),
        ik(g.shape[Axis::kK]), ab(elem_bytes(g.hw->a_dtype)), a_trans(stored_along_mn(g, 0)),
        b_trans(stored_along_mn(g, 1)), ov(out_vector(g, p)), c_row(ov.along == 'n'), sa(stored_tile(g, p, 0)),
        sb(stored_tile(g, p, 1)) {
    TMAP_CHECK(g.shape[Axis::kI] == 16 && g.shape[Axis::kJ] == 8, "mma_sync kernels are written for m16n8 intrinsics");
    TMAP_CHECK(ab == elem_bytes(g.hw->b_dtype) && ik * ab == 32, "mma_sync operands of one size, k of 32 bytes");
    TMAP_CHECK((!a_trans && !b_trans) || ab == 2, "ldmatrix.trans needs 16-bit operands");
  }

  const ImplicitGemm& g;
  const ScheduleParams& p;
  KernelSource k;
  std::string ta, tb, tfrag, tout, tpart;
  std::int64_t ik;  ///< the intrinsic's k
  int ab;           ///< operand bytes
  bool a_trans, b_trans;
  OutVector ov;
  bool c_row;
  StoredTile sa, sb;
};

/// The kernel's constants and helpers, in the anonymous namespace before its entry.
void emit_mma_sync_namespace(std::ostringstream& os, const MmaSyncKernel& w) {
  const ImplicitGemm& g = w.g;
  const ScheduleParams& p = w.p;
  emit_header(os, g);
  os << "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n\n"
     << "namespace {\n";
  emit_common_constants(os, g, p, w.k.threads);
  os << "constexpr int IK = " << w.ik << ";  // the intrinsic is m16 n8 k" << w.ik << "\n"
     << "constexpr int C8 = " << 16 / w.ab << ";  // elements per 16-byte row of an ldmatrix 8x8 matrix\n"
     << "constexpr int MI = WM / 16, NI = WN / 8;  // accumulator fragments per warp\n"
     << "// Shared tiles: A " << (w.a_trans ? "[BK][BM] (ldmatrix.trans)" : "[BM][BK]") << ", B "
     << (w.b_trans ? "[BK][BN] (ldmatrix.trans)" : "[BN][BK]") << (p.swizzle ? ", XOR-swizzled" : ", padded")
     << "; epilogue " << (w.c_row ? "[BM][BN + 8]" : "[BN][BM + 4]") << "\n";
  emit_ring_helpers(os, g, p, w.sa, w.sb, w.c_row);
  emit_mma_sync_helpers(os, g, w.tfrag);
  emit_operand_loader(os, g, p, 0);
  emit_operand_loader(os, g, p, 1);
  emit_output_scatter(os, g, w.tout, w.ov.width, w.ov.along);
  os << "}  // namespace\n\n";
}

/// The main loop: fragments loaded and multiplied per sub-step, double-buffered in registers
/// where the ring and an even number of sub-steps allow.
void emit_mma_sync_main_loop(std::ostringstream& os, const MmaSyncKernel& w, bool staged) {
  const ScheduleParams& p = w.p;
  const bool pipelined = p.async_copy && p.stages >= 2 && (p.block_k / w.ik) % 2 == 0;
  if (pipelined) {
    emit_mma_sync_pipelined_loop(os, p, staged);
    return;
  }
  os << "  // Multiplies the tiles in shared buffer `buf` into the accumulators.\n"
     << "  auto compute = [&](int buf) {\n"
     << "    #pragma unroll\n    for (int kk = 0; kk < BK; kk += IK) {\n"
     << "      unsigned fa[MI][4], fb[NI / 2][4];\n"
     << "      load_fragments(buf, kk, fa, fb);\n"
     << "      multiply(fa, fb);\n"
     << "    }\n  };\n\n";
  emit_main_loop(os, p, staged);
}

KernelSource emit_mma_sync(const ImplicitGemm& g, const ScheduleParams& p) {
  TMAP_CHECK(g.hw->family == "mma_sync", "the mma.sync emitter needs an mma_sync abstraction");
  MmaSyncKernel w(g, p);
  std::ostringstream os;
  emit_mma_sync_namespace(os, w);
  emit_kernel_entry(os, g, w.k, p, w.ta, w.tb, w.tout, w.tpart);
  os << "  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;\n"
     << "  const int wm0 = (warp / WARPS_N) * WM, wn0 = (warp % WARPS_N) * WN;  // warp tile origin in the block\n"
     << "  // ldmatrix x4: lane l names row l % 8 of 8x8 matrix l / 8.\n"
     << "  const int lr = lane % 8, lj = lane / 8;\n\n"
     << "  " << w.tfrag << " acc[MI][NI][4];\n"
     << "  #pragma unroll\n  for (int i = 0; i < MI; ++i)\n"
     << "    #pragma unroll\n    for (int j = 0; j < NI; ++j)\n"
     << "      #pragma unroll\n      for (int t = 0; t < 4; ++t) acc[i][j][t] = 0;\n\n";
  emit_step_range(os);
  const bool staged = emit_byte_stage_loads(os, g, p, w.k.threads, w.a_trans, w.b_trans, w.ta, w.tb);
  std::ostringstream bases;
  const auto [a_addr, b_addr] = fragment_addresses(bases, g, p, w.sa, w.sb, w.a_trans, w.b_trans);
  os << "  // ldmatrix row addresses: this thread's part, computed once (see plan_fragments).\n"
     << bases.str();
  emit_fragment_lambdas(os, g, a_addr, b_addr, w.a_trans, w.b_trans);
  emit_mma_sync_main_loop(os, w, staged);
  if (epilogue_on_accumulators(g, p))
    emit_accumulator_epilogue(os, g, {"MI", "NI", "acc[i][j][#]", "m0 + wm0 + i * 16 + lane / 4",
                                       "n0 + wn0 + j * 8 + (lane % 4) * 2"}, "  ");
  os << "  // Epilogue: accumulators to shared memory, then to the output.\n"
     << "  " << w.tfrag << "* Cs = reinterpret_cast<" << w.tfrag << "*>(smem);\n"
     << "  #pragma unroll\n  for (int i = 0; i < MI; ++i)\n"
     << "    #pragma unroll\n    for (int j = 0; j < NI; ++j) {\n"
     << "      const int r = wm0 + i * 16 + lane / 4, c = wn0 + j * 8 + (lane % 4) * 2;\n";
  emit_accumulator_quad(os, w.c_row, "acc[i][j][#]");
  os << "    }\n";
  emit_epilogue_stores(os, g, p, w.tfrag, w.tout);
  emit_split_reduce(os, g, w.k, w.tpart, w.tout);
  w.k.code = os.str();
  return std::move(w.k);
}

class MmaSyncFamily final : public EmitterFamily {
 public:
  std::string_view name() const override { return "mma_sync"; }
  int ordinal() const override { return 1; }
  KernelSource emit(const ImplicitGemm& g, const ScheduleParams& p) const override { return emit_mma_sync(g, p); }

  void validate(const ImplicitGemm& g, const ScheduleParams& p, const DeviceLimits& limits,
                std::vector<ScheduleIssue>& out) const override {
    auto fail = [&](ScheduleError e, std::string detail) { out.push_back({e, std::move(detail)}); };
    if (limits.compute_capability != 0 && limits.compute_capability < 80)
      fail(ScheduleError::kBadOption, "mma.sync m16n8 kernels with ldmatrix and cp.async need sm_80 or newer, not sm_" +
                                          std::to_string(limits.compute_capability));
    if (p.warp_n % 16)
      fail(ScheduleError::kTileNotMultipleOfIntrinsic,
           "warp_n = " + std::to_string(p.warp_n) + ": ldmatrix x4 loads B for two n8 fragments, so warp_n is a "
                                                    "multiple of 16");
    if (p.stages > (p.async_copy == 1 ? 5 : 2))
      fail(ScheduleError::kBadStages,
           "stages = " + std::to_string(p.stages) + " with async_copy = " + std::to_string(p.async_copy));
    for (int which = 0; which < 2; ++which) {
      const StoredTile s = stored_tile(g, p, which);
      const char* name = which == 0 ? "A" : "B";
      if (stored_along_mn(g, which) && s.bytes != 2)
        fail(ScheduleError::kBadOption, std::string(name) + " stored transposed (layout " + g.layout +
                                            ") needs ldmatrix.trans, which moves 16-bit elements only");
      if (p.swizzle) {
        if (p.smem_pad != 0 || !is_pow2(s.row_bytes(0)) || s.row_bytes(0) < 32)
          fail(ScheduleError::kMisalignedRows,
               std::string(name) + " rows of " + std::to_string(s.row_bytes(0)) + " bytes with smem_pad " +
                   std::to_string(p.smem_pad) + ": a swizzled tile needs smem_pad 0 and rows of a power of two of "
                                                "at least 32 bytes");
      } else if (s.row_bytes(p.smem_pad) % 16) {
        fail(ScheduleError::kMisalignedRows, std::string(name) + " rows of " +
                                                 std::to_string(s.row_bytes(p.smem_pad)) +
                                                 " bytes: ldmatrix reads 16-byte aligned rows");
      }
    }
  }

  std::int64_t shared_bytes(const ImplicitGemm& g, const ScheduleParams& p) const override {
    return ring_or_epilogue_bytes(g, p);
  }

  ScheduleParams default_schedule(const ImplicitGemm& g, const DeviceLimits& limits) const override {
    ScheduleParams p;
    auto warp_tile = [](std::int64_t extent) { return extent >= 128 ? 64 : extent >= 32 ? 32 : 16; };
    p.warp_m = warp_tile(g.M);
    p.warp_n = warp_tile(g.N);
    p.block_m = p.warp_m * (g.M > p.warp_m ? 2 : 1);
    p.block_n = p.warp_n * (g.N > p.warp_n ? 2 : 1);
    p.block_k = static_cast<int>(g.shape[Axis::kK] * 2);
    p.panels = 0;
    p.vec_a = max_vector_width(g, 0);
    p.vec_b = max_vector_width(g, 1);
    p.swizzle = 1;
    p.smem_pad = 0;
    if (raises(g, p, limits, ScheduleError::kMisalignedRows)) {
      p.swizzle = 0;
      p.smem_pad = 16 / elem_bytes(g.hw->a_dtype);
    }
    default_copies(g, p, limits, {ScheduleError::kBadVector}, 4);
    return p;
  }

  std::span<const KnobUse> knob_uses() const override {
    static constexpr KnobUse kUses[] = {{"swizzle", 0, 1}, {"cluster", 0, 1}, {"epi_regs", 0, 1}};
    return kUses;
  }

  KnobChoices choices(const ImplicitGemm& g, const ScheduleParams&, const DeviceLimits& limits) const override {
    const auto ik = g.shape[Axis::kK];
    const int pad = 16 / elem_bytes(g.hw->a_dtype);
    KnobChoices c;
    c.set_each("block_m", multiples(16, {1, 2, 4, 8, 16}, 256))
        .set_each("block_n", multiples(16, {1, 2, 4, 8, 16}, 256))
        .set_each("block_k", multiples(ik, {1, 2, 4}, 128))
        .set_each("warp_m", multiples(16, {1, 2, 4}, 64))
        .set_each("warp_n", multiples(16, {1, 2, 4}, 64))
        .set("stages", {1, {2, 2}, 3, {4, 2}, 5})  // 3 to 5 need async_copy
        .set_each("smem_pad", std::vector<int>{0, pad})  // 0 when swizzled
        .set("split_k", {{1, 3}, 2, 3, 4, 6, 8, 12, 16, 24, 32})  // no split is the common answer
        // The splits summed by a second kernel, or by the tile's last block (slower where measured).
        .set("split_reduce", {{0, 3}, 1})
        // A residual asked of L2 when the tile starts, where the epilogue reads one.
        .set("epi_prefetch", epilogue_has_full_shape_operand(g) ? std::vector<Choice>{0, 1} : std::vector<Choice>{0})
        // The epilogue on the accumulators, where its operands allow it.
        .set("epi_regs", epilogue_fits_accumulators(g) ? std::vector<Choice>{0, 1} : std::vector<Choice>{0})
        .set_each("vec_a", powers_up_to(max_vector_width(g, 0)))
        .set_each("vec_b", powers_up_to(max_vector_width(g, 1)))
        .set("unroll", {0, 1})  // of the gathers; the math is always unrolled
        .set("raster", {1, 2, 4, 8})
        .set("async_copy", {0, {1, 2}})  // needs vector loads
        .set("swizzle", {0, {1, 2}});
    if (limits.compute_capability >= 90) c.set("cluster", {0, 1});  // split-K summed in a cluster
    return c;
  }

  int max_fragments_per_warp(const ImplicitGemm&) const override { return 32; }
  double peak_fraction() const override { return 0.75; }
};

}  // namespace

const EmitterFamily& mma_sync_family() {
  static const MmaSyncFamily family;
  return family;
}

}  // namespace tmap
