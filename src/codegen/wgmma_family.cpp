// The wgmma family (PTX wgmma.mma_async, warpgroup scope, sm_90a): each warpgroup (4 warps, 128
// threads) owns a WM x WN tile of the block's output as WM / 64 accumulators of m64 x nWN, and
// multiplies operand tiles that wgmma reads straight from shared memory through matrix
// descriptors; the tuner picks the instruction's N as warp_n (8 to 256).
//
// Shared tiles are stored in the 128-byte-swizzle layout the descriptors name (swizzle mode 1):
// a tile of rows x cols elements, cols contiguous (k for a K-major operand, m or n for an
// MN-major one), is cut into column blocks of W = 128 bytes; block b holds rows 0.. of its
// 128-byte lines one after another, and the 16-byte chunk c of line r sits at chunk c ^ (r % 8).
// Every 8 lines form a 1024-byte atom. A K-major descriptor steps 1024 bytes from one 8-row group
// of m (n) to the next (SBO), and moves along k inside a line by its start address (the hardware
// applies the XOR to the address it computes, so tiles start 1024-byte aligned). An MN-major one
// (16-bit operands only: wgmma's transpose bits) steps 1024 bytes per 8 rows of k (SBO) and
// rows x 128 bytes from one block of W m (n) values to the next (LBO).
//
// Accumulator layout (PTX ISA, "Register fragments for wgmma ... D"): warp w of the warpgroup
// holds rows 16 w .. 16 w + 15; for each n8 column group j, d[4 j + 0, 1] are row lane / 4,
// columns 8 j + 2 (lane % 4) + {0, 1}, and d[4 j + 2, 3] the same columns 8 rows down.
//
// Pipeline: every thread gathers operand tiles (cp.async where the operand allows, the shared
// gather of tile_pipeline.h) into a ring of STAGES buffers, STAGES - 2 steps ahead; each step's
// wgmmas are committed as one group and the warpgroup waits only for the previous step's, so
// the tensor cores run while the next step's barrier and copies are issued. A buffer is refilled
// two steps after it was read, when every warpgroup's wait has retired its readers.
#include <algorithm>
#include <sstream>

#include "tile_pipeline.h"
#include "tmap/codegen/reference_emitter.h"
#include "tmap/support/diagnostic.h"

namespace tmap {
namespace {

using namespace pipeline;

int elem_bytes(DType t) { return dtype_bits(t) / 8; }

/// W: elements of operand tile `t` per 128-byte line, the swizzle's row (see the file comment).
std::int64_t line(const StoredTile& t) { return 128 / t.bytes; }

/// One stage of an operand, rounded to whole 1024-byte atoms so that the next starts aligned.
std::int64_t tile_bytes(const ImplicitGemm& g, const ScheduleParams& p, int which) {
  const StoredTile t = stored_tile(g, p, which);
  return round_up(t.rows * t.cols * t.bytes, 1024);
}

/// The wgmma instruction for N = n: the abstraction's intrinsic with its "nN" made concrete.
std::string instruction(const ImplicitGemm& g, int n) {
  std::string s = g.hw->compute_intrinsic;
  const auto at = s.find("nNk");
  TMAP_CHECK(at != std::string::npos, "a wgmma intrinsic names its shape m64nNk<K>");
  return s.replace(at, 2, "n" + std::to_string(n));
}

/// `wgmma(d, desc_a, desc_b)`: d += A * B for one m64 x nWN accumulator (ACC registers a thread).
void emit_wgmma_call(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p) {
  const bool int_acc = g.hw->d_dtype == DType::kInt32, sixteen = elem_bytes(g.hw->a_dtype) == 2;
  const int regs = p.warp_n / 2;
  os << "// " << instruction(g, p.warp_n) << ": d += a * b, a and b read from shared memory by descriptor.\n"
     << "__device__ __forceinline__ void wgmma(" << (int_acc ? "int" : "float")
     << " (&d)[ACC], unsigned long long desc_a, unsigned long long desc_b) {\n"
     << "  asm volatile(\n      \"{\\n.reg .pred p;\\nsetp.ne.b32 p, %" << regs + 2 << ", 0;\\n\"\n      \""
     << instruction(g, p.warp_n) << " {";
  for (int r = 0; r < regs; ++r) os << (r ? ", " : "") << (r && r % 16 == 0 ? "\"\n      \"" : "") << "%" << r;
  os << "}, %" << regs << ", %" << regs + 1 << ", p";
  // Operand scales (+1) and, for 16-bit operands, transposes: 1 reads the operand MN-major.
  if (!int_acc) os << ", 1, 1";
  if (sixteen) os << ", " << (stored_along_mn(g, 0) ? 1 : 0) << ", " << (stored_along_mn(g, 1) ? 1 : 0);
  os << ";\\n}\\n\"\n      : ";
  const char* c = int_acc ? "\"+r\"" : "\"+f\"";
  for (int r = 0; r < regs; ++r) os << (r ? ", " : "") << (r && r % 8 == 0 ? "\n        " : "") << c << "(d[" << r << "])";
  os << "\n      : \"l\"(desc_a), \"l\"(desc_b), \"r\"(1));\n}\n\n";
}

KernelSource emit_wgmma(const ImplicitGemm& g, const ScheduleParams& p) {
  TMAP_CHECK(g.hw->family == "wgmma", "the wgmma emitter needs a wgmma abstraction");
  const std::string ta = storage_type(g.hw->a_dtype), tb = storage_type(g.hw->b_dtype),
                    tacc = accumulator_type(g.hw->d_dtype),
                    tout = storage_type(g.compute->tensor_of(g.compute->output).dtype);
  const auto im = g.shape[Axis::kI], ik = g.shape[Axis::kK];
  TMAP_CHECK(im == 64, "wgmma kernels are written for m64 intrinsics");
  const StoredTile sa = stored_tile(g, p, 0), sb = stored_tile(g, p, 1);
  TMAP_CHECK(sa.bytes * ik == 32, "a wgmma step reads 32 bytes of k");
  const bool a_mn = stored_along_mn(g, 0), b_mn = stored_along_mn(g, 1);
  const OutVector ov = out_vector(g, p);
  const bool c_row = ov.along == 'n';

  KernelSource k = kernel_shell(g, p, block_threads(g, p));
  const std::string tpart = partial_type(g);

  std::ostringstream os;
  emit_header(os, g);
  os << "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n\n"
     << "namespace {\n";
  emit_common_constants(os, g, p, k.threads);
  os << "constexpr int IK = " << ik << ";  // k of one wgmma (32 bytes)\n"
     << "constexpr int MI = WM / 64;  // m64 accumulators per warpgroup\n"
     << "constexpr int ACC = WN / 2;  // registers of one m64 x n" << p.warp_n << " accumulator per thread\n"
     << "// Shared tiles, 128-byte swizzled: A " << (a_mn ? "[BK][BM] (m contiguous)" : "[BM][BK] (k contiguous)")
     << ", B " << (b_mn ? "[BK][BN] (n contiguous)" : "[BN][BK] (k contiguous)") << "; epilogue "
     << (c_row ? "[BM][BN + 8]" : "[BN][BM + 4]") << "\n";
  for (int which = 0; which < 2; ++which) {
    const StoredTile& t = which == 0 ? sa : sb;
    const std::string up = which == 0 ? "A" : "B", op = which == 0 ? "a" : "b";
    os << "constexpr int " << up << "_ROWS = " << t.rows << ", " << up << "_W = " << line(t) << ", " << up
       << "_T = " << 16 / t.bytes << ";  // rows; elements per 128-byte line and per 16-byte chunk\n"
       << "__device__ __forceinline__ int " << op << "_at(int r, int c) {\n"
       << "  return ((c / " << up << "_W) * " << up << "_ROWS + r) * " << up << "_W + ((((c % " << up << "_W) / " << up
       << "_T) ^ (r & 7)) * " << up << "_T) + c % " << up << "_T;\n}\n";
  }
  os << "constexpr int A_BYTES = " << tile_bytes(g, p, 0) << ";  // one stage of A, whole 1024-byte atoms\n"
     << "constexpr int B_BYTES = " << tile_bytes(g, p, 1) << ";\n"
     << "constexpr int C_LD = " << (c_row ? "BN + 8" : "BM + 4") << ";\n\n";
  emit_cp_async_helpers(os);
  os << "// A shared-memory matrix descriptor: start address, leading and stride byte offsets (each in\n"
     << "// 16-byte units), 128-byte swizzle.\n"
     << "__device__ __forceinline__ unsigned long long smem_desc(const void* p, unsigned lbo, unsigned sbo) {\n"
     << "  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));\n"
     << "  return (unsigned long long)((a & 0x3FFFF) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |\n"
     << "         ((unsigned long long)(sbo >> 4) << 32) | (1ull << 62);\n}\n"
     << "__device__ __forceinline__ void wgmma_fence() { asm volatile(\"wgmma.fence.sync.aligned;\\n\" ::: \"memory\"); }\n"
     << "__device__ __forceinline__ void wgmma_commit() { asm volatile(\"wgmma.commit_group.sync.aligned;\\n\" ::: \"memory\"); }\n"
     << "template <int N>\n"
     << "__device__ __forceinline__ void wgmma_wait() { asm volatile(\"wgmma.wait_group.sync.aligned %0;\\n\" :: \"n\"(N) : \"memory\"); }\n"
     << "// Makes this thread's shared-memory writes (stores and cp.async) visible to wgmma's reads.\n"
     << "__device__ __forceinline__ void fence_proxy_async() { asm volatile(\"fence.proxy.async.shared::cta;\\n\" ::: \"memory\"); }\n"
     << "// Keeps the compiler from moving reads or writes of r across the asynchronous wgmma.\n"
     << "__device__ __forceinline__ void fence_operand(" << tacc << "& r) { asm volatile(\"\" : \"+"
     << (tacc == "int" ? "r" : "f") << "\"(r) :: \"memory\"); }\n\n";
  emit_wgmma_call(os, g, p);
  emit_operand_loader(os, g, p, 0);
  emit_operand_loader(os, g, p, 1);
  emit_output_scatter(os, g, tout, ov.width, ov.along);
  // Descriptor offsets (16-byte units) of accumulator i's A and of B at sub-step kk, from the
  // warpgroup's base descriptor.
  os << "__device__ constexpr unsigned long long a_offset(int i, int kk) {\n";
  if (a_mn)
    os << "  return (((64 * i) / A_W * A_ROWS + kk) * 128) >> 4;\n}\n";
  else
    os << "  return (((kk / A_W) * A_ROWS + 64 * i) * 128 + (kk % A_W) * " << sa.bytes << ") >> 4;\n}\n";
  os << "__device__ constexpr unsigned long long b_offset(int kk) {\n";
  if (b_mn)
    os << "  return (kk * 128) >> 4;\n}\n";
  else
    os << "  return ((kk / B_W) * B_ROWS * 128 + (kk % B_W) * " << sb.bytes << ") >> 4;\n}\n";
  os << "}  // namespace\n\n";

  os << "extern \"C\" __global__ void __launch_bounds__(THREADS, 1)\n"
     << k.name << "(const " << ta << "* __restrict__ a_src, const " << tb << "* __restrict__ b_src, " << tout
     << "* __restrict__ out, " << tpart << "* __restrict__ partial) {\n"
     << "  extern __shared__ __align__(1024) unsigned char smem_raw[];\n"
     << "  // Swizzled tiles start on 1024-byte boundaries (the launch adds 1 KiB of slack).\n"
     << "  unsigned char* smem = smem_raw + ((1024 - static_cast<unsigned>(__cvta_generic_to_shared(smem_raw)) % 1024) % 1024);\n"
     << "  " << ta << "* As = reinterpret_cast<" << ta << "*>(smem);                    // [STAGES][A_BYTES]\n"
     << "  " << tb << "* Bs = reinterpret_cast<" << tb << "*>(smem + STAGES * A_BYTES);  // [STAGES][B_BYTES]\n";
  emit_block_origin(os, p);
  os << "  const int z = blockIdx.z / SPLIT_K, split = blockIdx.z % SPLIT_K;\n"
     << "  const int wg = threadIdx.x / 128, lane = threadIdx.x % 32;\n"
     << "  const int wm0 = (wg / WARPS_N) * WM, wn0 = (wg % WARPS_N) * WN;  // warpgroup tile origin in the block\n\n"
     << "  " << tacc << " acc[MI][ACC];\n"
     << "  #pragma unroll\n  for (int i = 0; i < MI; ++i)\n"
     << "    #pragma unroll\n    for (int r = 0; r < ACC; ++r) acc[i][r] = 0;\n\n"
     << "  constexpr int K_TILES = (K + BK - 1) / BK;\n"
     << "  constexpr int STEPS = SERIAL * K_TILES;  // serial reduction points x K tiles\n"
     << "  // This block's share of the steps: [first, last).\n"
     << "  const int first = (int)((long long)STEPS * split / SPLIT_K), last = (int)((long long)STEPS * (split + 1) / SPLIT_K);\n";
  const GatherTile gather_a = gather_tile('a', a_mn, p.vec_a, 1, false),
                   gather_b = gather_tile('b', b_mn, p.vec_b, 1, false);
  const bool staged = emit_tile_loads(os, g, p, k.threads, gather_a, gather_b,
                                      ta + "* a = As + buf * (A_BYTES / (int)sizeof(" + ta + "))",
                                      tb + "* b = Bs + buf * (B_BYTES / (int)sizeof(" + tb + "))");
  TMAP_CHECK(!staged, "wgmma kernels gather no shifted copies (validate rejects them)");
  const std::string a_base = a_mn ? "(wm0 / A_W) * A_ROWS * A_W" : "wm0 * A_W";
  const std::string b_base = b_mn ? "(wn0 / B_W) * B_ROWS * B_W" : "wn0 * B_W";
  os << "  // This warpgroup's descriptors of stage 0: A " << (a_mn ? "MN-major (LBO: one block of A_W m)" : "K-major")
     << ", B " << (b_mn ? "MN-major (LBO: one block of B_W n)" : "K-major") << "; SBO: 8 rows of 128 bytes.\n"
     << "  const unsigned long long a_desc = smem_desc(As + " << a_base << ", " << (a_mn ? "A_ROWS * 128" : "16")
     << ", 1024);\n"
     << "  const unsigned long long b_desc = smem_desc(Bs + " << b_base << ", " << (b_mn ? "B_ROWS * 128" : "16")
     << ", 1024);\n"
     << "  // Issues the wgmmas of shared buffer `buf` as one commit group.\n"
     << "  auto compute = [&](int buf) {\n"
     << "    const unsigned long long da = a_desc + (unsigned)(buf * A_BYTES >> 4), db = b_desc + (unsigned)(buf * B_BYTES >> 4);\n"
     << "    wgmma_fence();\n"
     << "    #pragma unroll\n    for (int kk = 0; kk < BK; kk += IK)\n"
     << "      #pragma unroll\n      for (int i = 0; i < MI; ++i) wgmma(acc[i], da + a_offset(i, kk), db + b_offset(kk));\n"
     << "    wgmma_commit();\n  };\n\n"
     << "  // The ring: copies run STAGES - 2 steps ahead; the buffer refilled at a step was read two steps\n"
     << "  // before, whose wgmmas every warpgroup retired (wait_group 1) before this step's barrier.\n"
     << "  for (int t = 0; t < STAGES - 2; ++t) {\n"
     << "    if (first + t < last) load_tiles(first + t, t);\n"
     << "    cp_async_commit();\n  }\n"
     << "  for (int step = first; step < last; ++step) {\n"
     << "    const int t = step - first;\n"
     << "    cp_async_wait<STAGES - 3>();  // this thread's copies of `step` have landed\n"
     << "    fence_proxy_async();\n"
     << "    __syncthreads();  // and every thread's\n"
     << "    if (step + STAGES - 2 < last) load_tiles(step + STAGES - 2, (t + STAGES - 2) % STAGES);\n"
     << "    cp_async_commit();\n"
     << "    compute(t % STAGES);\n"
     << "    wgmma_wait<1>();  // the previous step's wgmmas are done\n"
     << "  }\n"
     << "  wgmma_wait<0>();\n"
     << "  #pragma unroll\n  for (int i = 0; i < MI; ++i)\n"
     << "    #pragma unroll\n    for (int r = 0; r < ACC; ++r) fence_operand(acc[i][r]);\n"
     << "  cp_async_wait<0>();\n  __syncthreads();  // the epilogue reuses the buffers\n\n"
     << "  // Epilogue: accumulators to shared memory, then to the output.\n"
     << "  " << tacc << "* Cs = reinterpret_cast<" << tacc << "*>(smem);\n"
     << "  const int row = (threadIdx.x % 128) / 32 * 16 + lane / 4, col = (lane % 4) * 2;\n"
     << "  #pragma unroll\n  for (int i = 0; i < MI; ++i)\n"
     << "    #pragma unroll\n    for (int j = 0; j < WN / 8; ++j) {\n"
     << "      const int r = wm0 + i * 64 + row, c = wn0 + j * 8 + col;\n";
  emit_accumulator_quad(os, c_row, "acc[i][4 * j + #]");
  os << "    }\n";
  emit_epilogue_stores(os, g, p, tacc, tout);
  emit_split_reduce(os, k, tpart, tout);
  k.code = os.str();
  return k;
}

class WgmmaFamily final : public EmitterFamily {
 public:
  std::string_view name() const override { return "wgmma"; }
  int ordinal() const override { return 2; }
  int threads_per_warp_tile() const override { return 128; }
  KernelSource emit(const ImplicitGemm& g, const ScheduleParams& p) const override { return emit_wgmma(g, p); }

  void validate(const ImplicitGemm& g, const ScheduleParams& p, const DeviceLimits& limits,
                std::vector<ScheduleIssue>& out) const override {
    auto fail = [&](ScheduleError e, std::string detail) { out.push_back({e, std::move(detail)}); };
    if (limits.compute_capability != 0 && limits.compute_capability != 90)
      fail(ScheduleError::kBadOption, "wgmma.mma_async exists on sm_90 (H100, H200) only, not on sm_" +
                                          std::to_string(limits.compute_capability) +
                                          "; use the mma_sync or wmma abstractions there");
    if (p.swizzle != 1 || p.smem_pad != 0 || p.panels != 0)
      fail(ScheduleError::kBadOption, "swizzle = " + std::to_string(p.swizzle) + ", smem_pad = " +
                                          std::to_string(p.smem_pad) + ", panels = " + std::to_string(p.panels) +
                                          ": wgmma reads 128-byte-swizzled tiles only (swizzle 1, smem_pad 0, panels 0)");
    if (p.stages < 3 || p.stages > 6)
      fail(ScheduleError::kBadStages, "stages = " + std::to_string(p.stages) +
                                          ": the wgmma ring needs 3 to 6 buffers (one read by wgmma, one "
                                          "retiring, the rest in flight)");
    if (p.warp_n > 256 || (g.hw->a_dtype == DType::kInt8 && p.warp_n > 32 && p.warp_n % 16))
      fail(ScheduleError::kTileNotMultipleOfIntrinsic,
           "warp_n = " + std::to_string(p.warp_n) + ": wgmma's N runs from 8 to 256 (multiples of 16 above 32 for int8)");
    const int acc_regs = (p.warp_m / 64) * p.warp_n / 2;
    if (acc_regs > 128)
      fail(ScheduleError::kBadOption, "a " + std::to_string(p.warp_m) + " x " + std::to_string(p.warp_n) +
                                          " warpgroup tile holds " + std::to_string(acc_regs) +
                                          " accumulator registers per thread (at most 128)");
    for (int which = 0; which < 2; ++which) {
      const StoredTile t = stored_tile(g, p, which);
      const char* name = which == 0 ? "A" : "B";
      if (p.block_k % line(t))
        fail(ScheduleError::kMisalignedRows, "block_k = " + std::to_string(p.block_k) + ": " + name +
                                                 " is swizzled in 128-byte lines of " + std::to_string(line(t)) +
                                                 " elements of k; use a multiple");
      if (!stored_along_mn(g, which)) continue;
      if (t.bytes != 2)
        fail(ScheduleError::kBadOption, std::string(name) + " stored along " + (which == 0 ? "m" : "n") + " (layout " +
                                            g.layout + ") needs wgmma's transpose, which 16-bit operands have only");
      const int extent = which == 0 ? p.warp_m : p.warp_n;
      if (extent % line(t))
        fail(ScheduleError::kTileNotMultipleOfIntrinsic,
             std::string(which == 0 ? "warp_m" : "warp_n") + " = " + std::to_string(extent) + ": " + name +
                 " stored along " + (which == 0 ? "m" : "n") + " is read in blocks of " + std::to_string(line(t)) +
                 " (one 128-byte line); use a multiple");
    }
    for (int which = 0; which < 2; ++which)
      if (copies_shifted(g, p, which))
        fail(ScheduleError::kBadVector, std::string(which == 0 ? "vec_a" : "vec_b") +
                                            ": shifted vectors are not staged by the wgmma pipeline; use a vector no "
                                            "wider than " + std::to_string(operand_contiguity(g, which).aligned));
  }

  std::int64_t shared_bytes(const ImplicitGemm& g, const ScheduleParams& p) const override {
    const std::int64_t operands = p.stages * (tile_bytes(g, p, 0) + tile_bytes(g, p, 1));
    // The epilogue reuses the buffers; 1 KiB of slack aligns them to 1024 bytes.
    return std::max(operands, round_up(epilogue_bytes(g, p), 128)) + 1024;
  }

  ScheduleParams default_schedule(const ImplicitGemm& g, const DeviceLimits& limits) const override {
    ScheduleParams p;
    const int w = 128 / elem_bytes(g.hw->a_dtype);  // elements per 128-byte line
    p.warp_m = 64;
    p.block_m = g.M > 64 ? 128 : 64;
    p.warp_n = g.N >= 256 ? 256 : g.N >= 128 ? 128 : g.N > 32 ? 64 : static_cast<int>(round_up(g.N, 16));
    if (stored_along_mn(g, 1)) p.warp_n = static_cast<int>(round_up(p.warp_n, w));
    if (g.hw->a_dtype == DType::kInt8 && p.warp_n > 128) p.warp_n = 128;  // keeps 2 x 64 accumulators
    p.block_n = p.warp_n;
    p.block_k = w;
    p.panels = 0;
    p.swizzle = 1;
    p.smem_pad = 0;
    p.vec_a = max_vector_width(g, 0);
    p.vec_b = max_vector_width(g, 1);
    for (int which = 0; which < 2; ++which) {
      int& vec = which == 0 ? p.vec_a : p.vec_b;
      while (vec > 1 && (copies_shifted(g, p, which) || stored_row_length(g, p, which) % vec)) vec /= 2;
    }
    p.async_copy = 1;
    if (!copies_async(g, p, 0) && !copies_async(g, p, 1)) p.async_copy = 0;
    p.stages = 4;
    while (p.stages > 3 && shared_bytes(g, p) > limits.max_shared_bytes) --p.stages;
    return p;
  }

  std::vector<std::vector<int>> choices(const ImplicitGemm& g, const ScheduleParams& defaults) const override {
    const int w = 128 / elem_bytes(g.hw->a_dtype);  // elements per 128-byte line
    (void)defaults;
    return {
        {64, 128, 128, 192, 256},                  // block_m
        {16, 32, 64, 128, 128, 192, 256, 256},     // block_n
        {w, w, 2 * w},                             // block_k: whole 128-byte lines
        {64, 64, 128},                             // warp_m: m64 accumulators per warpgroup
        {16, 32, 64, 96, 128, 128, 192, 256, 256},  // warp_n: the instruction's N
        {3, 4, 4, 5, 6},                           // stages
        {0},                                       // smem_pad: swizzled
        {1, 1, 1, 2, 3, 4, 6, 8, 12, 16},          // split_k
        {0},                                       // panels
        powers_up_to(max_vector_width(g, 0)),      // vec_a
        powers_up_to(max_vector_width(g, 1)),      // vec_b
        {0, 1},                                    // unroll (of the gathers)
        {1, 2, 4, 8},                              // raster
        {0, 1, 1},                                 // async_copy
        {1},                                       // swizzle: always
    };
  }

  // (WM / 64) x (WN / 8) m64n8 fragments: 4 registers each, at most 128.
  int max_fragments_per_warp(const ImplicitGemm&) const override { return 32; }
  // Relative to the model's tensor peak, that of mma.sync (2048 FLOP per clock and SM on sm_90):
  // wgmma issues twice that, of which a well-fed kernel reaches about 80%.
  double peak_fraction() const override { return 1.6; }
};

}  // namespace

const EmitterFamily& wgmma_family() {
  static const WgmmaFamily family;
  return family;
}

}  // namespace tmap
