// The wgmma family (PTX wgmma.mma_async, warpgroup scope, sm_90a): each warpgroup (4 warps, 128
// threads) owns a WM x WN tile of the block's output as WM / 64 accumulators of m64 x nWN, and
// multiplies operand tiles that wgmma reads straight from shared memory through matrix
// descriptors; the tuner picks the instruction's N as warp_n (8 to 256).
//
// Shared tiles are stored in the swizzled layout the descriptors name, in lines of L = 128, 64
// or 32 bytes (ScheduleParams::swizzle 1, 2, 3; descriptor layout types of the same numbers): a
// tile of rows x cols elements, cols contiguous (k for a K-major operand, m or n for an MN-major
// one), is cut into column blocks of W = L bytes; block b holds rows 0.. of its lines one after
// another, and the 16-byte chunk c of line r sits at chunk c ^ x(r), x the line's 128-byte row
// within its 1024 bytes masked to a line's chunks: r % 8 (L = 128), (r / 2) % 4 (64), (r / 4) % 2
// (32), the pattern the hardware applies to bits 4.. of the addresses it computes from bits 7...
// Every 8 lines form an atom of 8 L bytes. A K-major descriptor steps 8 L bytes from one 8-row
// group of m (n) to the next (SBO), and moves along k inside a line by its start address (tiles
// start 1024-byte aligned, so that the address bits are the tile's). An MN-major one (16-bit
// operands only: wgmma's transpose bits) steps 8 L bytes per 8 rows of k (SBO) and rows x L bytes
// from one block of W m (n) values to the next (LBO). Narrower lines leave more rows per atom
// conflict-free for nothing; they exist for tiles whose k (or m, n) extent is below 128 bytes.
//
// Accumulator layout (PTX ISA, "Register fragments for wgmma ... D"): warp w of the warpgroup
// holds rows 16 w .. 16 w + 15; for each n8 column group j, d[4 j + 0, 1] are row lane / 4,
// columns 8 j + 2 (lane % 4) + {0, 1}, and d[4 j + 2, 3] the same columns 8 rows down.
//
// With a producer (ScheduleParams::producer), a warpgroup of its own loads every stage with TMA:
// tiled boxes of operands that are strided views of their tensors (tma_view(), wgmma_tma.h), and
// im2col boxes of a channels-last convolution input (im2col_view(): BM consecutive output pixels
// of one 128-byte line of channels at one filter tap, zero-filled in the padding; or BN of them
// when the input is B, in the transposed product whose m is the filters), so that the consumer
// warpgroups only wait on mbarriers and issue wgmma. With producer 2 the kernel is persistent:
// each block walks output tiles with a grid stride (emit_persistent_loops()), the producer
// filling the ring with the next tile's operands while the consumers finish the last one and
// store it through an epilogue tile of their own, synchronized by a named barrier among
// themselves, so that neither the ring's refill nor the epilogue leaves the tensor cores idle
// between tiles.
//
// Pipeline: every thread gathers operand tiles (cp.async where the operand allows, the shared
// gather of tile_pipeline.h; operands contiguous along the tile but not aligned to its vectors,
// such as an NCW input along its pixels, in shifted vectors: two aligned vectors fetched into
// registers, shifted into place and stored once the step's wgmmas are issued) into a ring of
// STAGES buffers, STAGES - 2 steps ahead; each step's
// wgmmas are committed as one group and the warpgroup waits only for the previous step's, so
// the tensor cores run while the next step's barrier and copies are issued. A buffer is refilled
// two steps after it was read, when every warpgroup's wait has retired its readers.
#include <algorithm>
#include <sstream>

#include "tile_pipeline.h"
#include "wgmma_tma.h"
#include "tmap/codegen/device_library.h"
#include "tmap/codegen/reference_emitter.h"
#include "tmap/support/diagnostic.h"

namespace tmap {
namespace {

using namespace pipeline;
using namespace wgmma;

/// One stage of an operand, rounded to whole 1024-byte atoms so that the next starts aligned.
std::int64_t tile_bytes(const ImplicitGemm& g, const ScheduleParams& p, int which) {
  const StoredTile t = stored_tile(g, p, which);
  return round_up(t.rows * t.cols * t.bytes, 1024);
}

/// Bytes of the operand ring: STAGES stages of A and B, whole 1024-byte atoms each.
std::int64_t ring_bytes(const ImplicitGemm& g, const ScheduleParams& p) {
  return p.stages * (tile_bytes(g, p, 0) + tile_bytes(g, p, 1));
}

/// A persistent kernel's epilogue tile holds the sums already rounded to the output's dtype (half
/// the bytes of float accumulators for 16-bit outputs, which lets larger tiles keep a deep ring
/// beside it); rows along n or m padded by 8 elements (4 for 4-byte elements along m), keeping
/// each row's 16-byte vectors aligned.
int persistent_epilogue_bytes_per_element(const ImplicitGemm& g) {
  return dtype_bits(g.compute->tensor_of(g.compute->output).dtype) <= 16 ? 2 : 4;
}
/// Elements added to each row of that tile (rows along n when `c_row`, else along m).
int persistent_epilogue_pad(const ImplicitGemm& g, bool c_row) {
  return c_row || persistent_epilogue_bytes_per_element(g) == 2 ? 8 : 4;
}
/// The C++ type of that tile's elements: the output's storage type where it is 16-bit (or 8-bit),
/// else the accumulators'.
std::string persistent_epilogue_type(const ImplicitGemm& g) {
  return persistent_epilogue_bytes_per_element(g) == 2 ? storage_type(g.compute->tensor_of(g.compute->output).dtype)
                                                       : accumulator_type(g.hw->d_dtype);
}
std::string persistent_c_ld(const ImplicitGemm& g, bool c_row) {
  return std::string(c_row ? "BN" : "BM") + " + " + std::to_string(persistent_epilogue_pad(g, c_row));
}
std::int64_t persistent_epilogue_bytes(const ImplicitGemm& g, const ScheduleParams& p) {
  const bool c_row = out_vector(g, p).along == 'n';
  const std::int64_t rows = c_row ? p.block_m : p.block_n, cols = c_row ? p.block_n : p.block_m;
  // TMA stores (bulk_store 2): two unpadded, swizzled tiles, one filled while the other drains.
  if (p.bulk_store == 2) return 2 * rows * cols * persistent_epilogue_bytes_per_element(g);
  return rows * (cols + persistent_epilogue_pad(g, c_row)) * persistent_epilogue_bytes_per_element(g);
}
/// Bytes between consecutive consumers' epilogue tiles: swizzled tiles start on 1024-byte atoms.
std::int64_t persistent_epilogue_stride(const ImplicitGemm& g, const ScheduleParams& p) {
  return round_up(persistent_epilogue_bytes(g, p), p.bulk_store == 2 ? 1024 : 128);
}

/// Elements of the output one bulk store copies (ScheduleParams::bulk_store): the widest power of
/// two that divides the epilogue tile's rows and that the output holds contiguous and aligned
/// along them (contiguous_width()); 0 where no such run is 16 bytes or more.
int bulk_store_piece(const ImplicitGemm& g, const ScheduleParams& p) {
  const Compute& c = *g.compute;
  const OutVector ov = out_vector(g, p);
  const int bits = dtype_bits(c.tensor_of(c.output).dtype);
  const std::vector<int>& axis = ov.along == 'n' ? g.n_iters : g.m_iters;
  if (bits < 8 || axis.empty()) return 0;
  int piece = contiguous_width(c, c.output, axis, bits, 1024);
  const int row = ov.along == 'n' ? p.block_n : p.block_m;
  while (piece > 1 && row % piece) piece /= 2;
  return piece * bits / 8 >= 16 ? piece : 0;
}

/// A persistent kernel (producer 2 or 3): each block walks output tiles, its producer filling the
/// ring with the next tile's operands while the consumers store the last.
bool persistent(const ScheduleParams& p) { return p.producer >= 2; }

/// A ping-pong kernel (producer 3): two consumer warpgroups, each multiplying whole tiles of its
/// own, take turns on the main loop, so that one's epilogue runs beside the other's wgmmas.
bool ping_pong(const ScheduleParams& p) { return p.producer == 3; }

/// A stream-K kernel (ScheduleParams::stream_k, producer 2): block b takes run b of the steps of
/// all tiles, cut into even runs (1), or of the last waves' tiles after whole tiles of the others (2).
bool stream_k(const ScheduleParams& p) { return p.stream_k != 0; }

/// The most blocks a stream-K kernel runs, one partial tile each in the workspace: the most SMs of
/// any sm_90 part. Blocks beyond it return at once.
constexpr int kStreamBlocks = kSm90Sms;

/// A stream-K kernel's workspace: a partial tile of accumulators per block, then a flag per
/// block, zero before each launch and left zero by it (the tile's finisher clears it).
struct StreamWorkspace {
  std::int64_t tile_elements, flags_offset, bytes;
};
StreamWorkspace stream_workspace(const ScheduleParams& p) {
  const std::int64_t tile = static_cast<std::int64_t>(p.block_m) * p.block_n;
  const std::int64_t flags = round_up(kStreamBlocks * tile * 4, 256);  // 4-byte float or int sums
  return {tile, flags, flags + kStreamBlocks * 4};
}

/// Where a warp-specialized kernel keeps its 2 x STAGES mbarriers (and a ping-pong kernel's two
/// turn barriers): past the operand ring and the epilogue tile, which reuses the ring, or in a
/// persistent kernel follows it (one per consumer warpgroup in ping-pong), since the producer is
/// already filling the ring with the next tile's operands.
std::int64_t barrier_offset(const ImplicitGemm& g, const ScheduleParams& p) {
  if (persistent(p))
    return ring_bytes(g, p) + (ping_pong(p) ? 2 : 1) * persistent_epilogue_stride(g, p);
  return std::max(ring_bytes(g, p), round_up(epilogue_bytes(g, p), 128));
}

/// The kernel's dynamic shared memory: the epilogue reuses the buffers; a warp-specialized
/// kernel's mbarriers follow; 1 KiB of slack aligns the tiles to 1024 bytes.
std::int64_t wgmma_shared_bytes(const ImplicitGemm& g, const ScheduleParams& p) {
  return barrier_offset(g, p) + (p.producer ? 16 * p.stages : 0) + (ping_pong(p) ? 16 : 0) + 1024;
}

/// Whether a block has its SM to itself: a second one's shared memory (and the 1 KiB the driver
/// reserves for each) would not fit beside it in the 228 KiB of an sm_90 SM.
bool wgmma_block_alone(const ImplicitGemm& g, const ScheduleParams& p) {
  return 2 * (wgmma_shared_bytes(g, p) + 1024) > 228 * 1024;
}

/// How a warp-specialized kernel splits the register file: at launch every thread gets `even`
/// registers (ptxas's limit for THREADS threads a block, __launch_bounds__(THREADS, 1)). Where that
/// leaves the consumer warpgroups too few for their accumulators (about 40 more for addresses and
/// loop state) and the producer may give its registers away (may_rebalance()), the producer
/// warpgroup, which only issues TMA copies, gives all but kProducerRegs back with
/// `setmaxnreg.dec` and the consumers take them with `setmaxnreg.inc` (`consumer` registers each,
/// a multiple of 8 that the pool the producer freed covers, or the inc would wait forever).
constexpr int kProducerRegs = 40;
/// The most accumulator registers a consumer thread holds: with about 40 more, the 232 that each
/// of two consumer warpgroups takes from a producer's registers (a 128 x 192 warpgroup tile).
/// Beyond kEvenAccumulators only in kernels of one tile a block whose producer gives its registers
/// (consumers_alone(), measured and verified); persistent, ping-pong and cp.async kernels keep to
/// kEvenAccumulators.
constexpr int kMaxAccumulators = 192;
constexpr int kEvenAccumulators = 128;
/// The deepest ring a TMA producer fills. Small tiles over a gathered operand keep more copies in
/// flight with eight buffers than with six (cuDNN's deepest sm_90 engines keep about ten).
constexpr int kMaxProducerStages = 12;
/// Registers a consumer thread holds for its operands: the accumulators, and with p.a_regs two
/// sets of A fragments (4 registers per m64 accumulator and k step).
int operand_registers(const ImplicitGemm& g, const ScheduleParams& p) {
  const int acc = (p.warp_m / 64) * p.warp_n / 2;
  const std::int64_t k_steps = p.block_k / std::max<std::int64_t>(1, g.shape[Axis::kK]);
  return acc + (p.a_regs == 1 ? static_cast<int>(2 * (p.warp_m / 64) * k_steps * 4) : 0);
}
struct RegisterSplit {
  int even = 255, consumer = 255;
  bool rebalanced = false;
};
/// Whether the producer warpgroup may give its registers to the consumers: where it leaves once its
/// copies are issued, so that no code after the main loop runs in both roles (ptxas serialized the
/// wgmmas of a kernel whose producer joined the epilogue with fewer registers: 3 consumers of
/// 64 x 192, C7512). A persistent kernel's producer always leaves; that of a kernel of one tile a
/// block (producer 1) where the epilogue needs no barrier of every thread but a pair's last one,
/// which the producer passes before it leaves: no split-K summed in a cluster and no last block
/// summing the splits.
bool may_rebalance(const ScheduleParams& p) {
  return persistent(p) || (p.producer == 1 && p.cluster != 1 && p.split_reduce == 0);
}

RegisterSplit register_split(const ImplicitGemm& g, const ScheduleParams& p) {
  RegisterSplit r;
  const int threads = block_threads(g, p);
  if (threads <= 0) return r;
  r.even = r.consumer = std::min(255, 65536 / threads / 8 * 8);
  const int consumers = threads / 128 - 1, acc_regs = operand_registers(g, p);
  if (!may_rebalance(p) || consumers < 2 || acc_regs + 40 <= r.even || r.even <= kProducerRegs) return r;
  // The producer frees (even - kProducerRegs) x 128 registers; each consumer thread may take an
  // equal share of them on top of its own.
  const int consumer = r.even + (r.even - kProducerRegs) * 128 / (consumers * 128) / 8 * 8;
  r.consumer = std::min(240, consumer);
  r.rebalanced = r.consumer > r.even;
  return r;
}

/// Whether a kernel of one tile a block (producer 1) runs its epilogue in the consumer warpgroups
/// alone: its producer gave them its registers (register_split()) and left after its copies. Its
/// epilogue's barriers are then the consumers' (consumer_sync()), and its threads
/// WgmmaKernel::epilogue_threads().
bool consumers_alone(const ImplicitGemm& g, const ScheduleParams& p) {
  return !persistent(p) && register_split(g, p).rebalanced;
}

/// Whether a kernel that is not persistent loads its epilogue's per-tile operands before the main
/// loop (emit_epilogue_early_loads()): where its block has the SM to itself, as the epilogue loop
/// that reads them needs (EpilogueScope::sm_to_itself).
bool block_loads_epilogue_early(const ImplicitGemm& g, const ScheduleParams& p) {
  return wgmma_block_alone(g, p) && epilogue_loads_early(g, p);
}

/// The setmaxnreg line of the producer (`producer`) or of a consumer warpgroup, where
/// register_split() rebalances the registers; empty otherwise. Every warp of the warpgroup runs it.
std::string set_registers(const ImplicitGemm& g, const ScheduleParams& p, bool producer, const std::string& indent) {
  const RegisterSplit r = register_split(g, p);
  if (!r.rebalanced) return "";
  return indent + "asm volatile(\"setmaxnreg." + (producer ? "dec" : "inc") + ".sync.aligned.u32 " +
         std::to_string(producer ? kProducerRegs : r.consumer) + ";\\n\");  // " +
         (producer ? "the producer gives registers back" : "the consumers take them") + "\n";
}

/// The wgmma instruction for N = n: the family's instruction for the dtypes, "nN" made concrete.
std::string instruction(const ImplicitGemm& g, int n) {
  std::string s = family_intrinsic(*g.hw);
  const auto at = s.find("nNk");
  TMAP_CHECK(at != std::string::npos, "a wgmma intrinsic names its shape m64nNk<K>");
  return s.replace(at, 2, "n" + std::to_string(n));
}

/// `wgmma(d, desc_a, desc_b)`: d += A * B for one m64 x nWN accumulator (ACC registers a thread).
/// With p.a_regs, `wgmma(d, a, desc_b)`: A from the four registers `a` of this thread's fragment
/// (wgmma's register form, which has no transpose of A: ldmatrix.trans makes the fragment).
void emit_wgmma_call(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p) {
  const bool int_acc = g.hw->d_dtype == DType::kInt32, sixteen = elem_bytes(g.hw->a_dtype) == 2;
  const bool rs = p.a_regs == 1;
  const int regs = p.warp_n / 2, a_regs = rs ? 4 : 1;  // operands after d: A (registers or descriptor), B
  os << "// " << instruction(g, p.warp_n) << ": d += a * b, "
     << (rs ? "a from registers, b read from shared memory by descriptor.\n"
            : "a and b read from shared memory by descriptor.\n")
     << "__device__ __forceinline__ void wgmma(" << (int_acc ? "int" : "float") << " (&d)[ACC], "
     << (rs ? "const unsigned (&a)[4]" : "unsigned long long desc_a") << ", unsigned long long desc_b) {\n"
     << "  asm volatile(\n      \"{\\n.reg .pred p;\\nsetp.ne.b32 p, %" << regs + a_regs + 1 << ", 0;\\n\"\n      \""
     << instruction(g, p.warp_n) << " {";
  for (int r = 0; r < regs; ++r) os << (r ? ", " : "") << (r && r % 16 == 0 ? "\"\n      \"" : "") << "%" << r;
  if (rs)
    os << "}, {%" << regs << ", %" << regs + 1 << ", %" << regs + 2 << ", %" << regs + 3 << "}, %" << regs + 4 << ", p";
  else
    os << "}, %" << regs << ", %" << regs + 1 << ", p";
  // Operand scales (+1) and, for 16-bit operands, transposes: 1 reads the operand MN-major (B's
  // alone in the register form).
  if (!int_acc) os << ", 1, 1";
  if (sixteen && !rs) os << ", " << (stored_along_mn(g, 0) ? 1 : 0);
  if (sixteen) os << ", " << (stored_along_mn(g, 1) ? 1 : 0);
  os << ";\\n}\\n\"\n      : ";
  const char* c = int_acc ? "\"+r\"" : "\"+f\"";
  for (int r = 0; r < regs; ++r) os << (r ? ", " : "") << (r && r % 8 == 0 ? "\n        " : "") << c << "(d[" << r << "])";
  if (rs)
    os << "\n      : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(desc_b), \"r\"(1));\n}\n\n";
  else
    os << "\n      : \"l\"(desc_a), \"l\"(desc_b), \"r\"(1));\n}\n\n";
}

/// With p.a_regs: `load_a(a, As_stage, i, kk)` fills one thread's fragment registers of the warp's
/// 16 rows of accumulator i at k step kk with one ldmatrix.x4 from the swizzled tile. The four
/// 8 x 8 (16-bit) matrices are rows 0-7 and 8-15 at the step's first 16 bytes of k, then the same
/// at its second, the register order of wgmma's A fragment (and of mma.sync's m16n8k16): lane l
/// addresses row l % 16, chunk l / 16. An A stored along m is read with .trans, lane l addressing
/// k row kk + l % 8 + 8 (l / 16) at m 8 ((l / 8) % 2): each 8 x 8 block transposed into place.
/// Bytes per row of k are 32 for every dtype (16 halves, 8 tf32, 32 int8), so 32-bit elements
/// land whole in one lane (k = lane % 4 and + 4) and bytes four to a register, as the fragment
/// wants.
void emit_a_fragment_loader(std::ostringstream& os, const ImplicitGemm& g, const std::string& ta) {
  const bool mn = stored_along_mn(g, 0);
  os << "// Operand A's fragment of the warp's 16 rows of accumulator i at k step kk, from the stage at `a`.\n"
     << "__device__ __forceinline__ void load_a(unsigned (&r)[4], const " << ta << "* a, int i, int kk) {\n"
     << "  const int lane = threadIdx.x % 32, m = (threadIdx.x % 128) / 32 * 16 + 64 * i;  // the warp's rows\n";
  if (mn)
    os << "  const " << ta << "* p = a + a_at(kk + lane % 8 + (lane / 16) * 8, m + ((lane / 8) % 2) * 8);\n"
       << "  asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\\n\"\n";
  else
    os << "  const " << ta << "* p = a + a_at(m + lane % 16, kk + (lane / 16) * A_T);\n"
       << "  asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\\n\"\n";
  os << "               : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"=r\"(r[3])\n"
     << "               : \"r\"(static_cast<unsigned>(__cvta_generic_to_shared(p))) : \"memory\");\n}\n\n";
}

/// The helpers of a warp-specialized kernel: mbarriers and TMA loads, and with `pair` (a pair of
/// blocks sharing an operand, ScheduleParams::cluster 2 or 3) the cluster's (mbar_arrive_pair()
/// on both blocks' barriers, cluster_ctarank()).
void emit_producer_helpers(std::ostringstream& os, bool pair) {
  emit_device_include(os, "mbarrier");
  emit_device_include(os, "tma");
  if (pair) emit_device_include(os, "cluster");
}

/// A warp-specialized kernel's ring barriers: CONSUMERS, STAGE_TX, full[] and empty[] at
/// BAR_OFFSET, initialized by thread 0 (full: the producer's arrival and the stage's TMA bytes;
/// empty: one arrival per consumer warp once its wgmmas on the buffer retired).
/// In a pair of blocks sharing an operand (`pair`), empty[] counts the consumer warps of both; in
/// ping-pong (`ping_pong`), where one consumer warpgroup reads each stage, its four warps, and
/// turn[wg] follows: consumer warpgroup wg's turn at the main loop, one arrival per warp of the other.
std::string ring_barriers(const StoredTile& sa, const StoredTile& sb, bool pair, bool ping_pong = false) {
  std::ostringstream os;
  os << "  constexpr int CONSUMERS = THREADS / 128 - 1;\n"
     << "  constexpr unsigned STAGE_TX = " << (sa.rows * sa.cols * sa.bytes + sb.rows * sb.cols * sb.bytes)
     << ";  // bytes of A and B boxes per stage\n"
     << "  unsigned long long* full = reinterpret_cast<unsigned long long*>(smem + BAR_OFFSET);\n"
     << "  unsigned long long* empty = full + STAGES;\n"
     << (ping_pong ? "  unsigned long long* turn = empty + STAGES;  // [2]\n" : "")
     << "  if (threadIdx.x == 0) {\n"
     << "    for (int b = 0; b < STAGES; ++b) {\n"
     << "      mbar_init(&full[b], 1);\n      mbar_init(&empty[b], "
     << (ping_pong ? "4);  // the one consumer warpgroup reading it" : pair ? "4 * CONSUMERS * 2);  // both blocks' consumers"
                                                                      : "4 * CONSUMERS);")
     << "\n    }\n"
     << (ping_pong ? "    mbar_init(&turn[0], 4);\n    mbar_init(&turn[1], 4);\n" : "")
     << "    mbar_fence_init();\n"
     << "  }\n";
  return os.str();
}

/// A consumer loop over the steps [first, last) (`first` and `last` are expressions; with `count_t`
/// the stage counter t goes up with every step) whose `body` computes with `compute(buf$A)`, `$A`
/// marking where the A register set goes. With p.a_regs the step's A fragments go to the register
/// set of its parity, which the wgmmas of the step before, possibly in flight, do not read: the
/// body becomes a lambda taking the set, called for the first step alone where the count is odd
/// (odd set, nothing in flight yet), then for two steps per iteration (even set, odd set). A
/// branch choosing the set by parity joins two definitions of the accumulators between the
/// wgmmas and their wait where the bounds are not constants (split-K), and a lone last step
/// after the pairs writes a set while the pairs' last wgmmas may run: ptxas then serializes every
/// wgmma of the kernel (warnings C7515, C7513).
std::string step_loop(const ScheduleParams& p, const std::string& indent, const std::string& first,
                      const std::string& last, std::string body, bool count_t) {
  const std::size_t at = body.find("$A");
  TMAP_CHECK(at != std::string::npos, "a step loop's body calls compute(buf$A)");
  std::ostringstream os;
  if (p.a_regs != 1) {
    os << indent << "for (int step = " << first << "; step < " << last << "; ++step" << (count_t ? ", ++t" : "") << ") {\n"
       << body.replace(at, 2, "") << indent << "}\n";
    return os.str();
  }
  os << indent << "auto consume = [&](int step, unsigned (&af)[MI][BK / IK][4]) {\n"
     << body.replace(at, 2, ", af") << indent << "};\n"
     << indent << "int step = " << first << ";\n"
     << indent << "if ((" << last << " - step) & 1) {  // an odd count: the first step alone\n"
     << indent << "  consume(step++, a_odd);\n" << (count_t ? indent + "  ++t;\n" : "")
     << indent << "}\n"
     << indent << "for (; step < " << last << "; step += 2) {  // two steps: A's even set, then the odd\n"
     << indent << "  consume(step, a_even);\n" << (count_t ? indent + "  ++t;\n" : "")
     << indent << "  consume(step + 1, a_odd);\n" << (count_t ? indent + "  ++t;\n" : "")
     << indent << "}\n";
  return os.str();
}

/// The axes along which a tile that would reach past the output's end loads, instead, the BM (BN)
/// rows that end at the extent's end: TMA boxes that reach past a tensor's end load slowly
/// (docs/design-notes.md, "Boxes at a tensor's end"). Such a tile's boxes start skip rows before
/// its origin (less than twice the tile), and its accumulators hold the rows from there; rows
/// past the extent are masked at the store. Along m, and along n where n runs along the epilogue
/// tile's vectors (which a shifted read would misalign), the writes rotate: accumulator x goes
/// to (x - skip) mod the tile, so that the rows before the origin, which the tile before stores,
/// land at the tile's end, past the extent; the rotation (rot_m, rot_n) is taken once a tile,
/// each position with one compare (device::rotated). Along n where n is the epilogue tile's row
/// axis, the accumulators go in as they are and the stores read row x + skip, walking the rows
/// inside the extent only (EpilogueScope::row_skip): a thread's accumulators take WN / 8
/// positions along n, whose rotated addresses held registers that spilled, and MI along m, whose
/// rotation costs less than the shifted read's run-time bound on the store loop. TMA stores
/// (bulk_store 2) store the tile whole, so their writes rotate along n too.
struct BoxClamp {
  bool m = false, n = false;
  char rows = 'n';  ///< The epilogue tile's row axis.
  bool whole_tile = false;  ///< The tile is stored whole (TMA stores): every axis rotates.
  /// Rotations by whole 16 rows (2 columns), which keep r + 8 (c + 1) inside the tile when r
  /// (c) is: a fixed extent that is a multiple of 16 (2) makes every skip one.
  bool m_by_16 = false, n_by_2 = false;

  /// m_box, n_box: where the producer's boxes start.
  std::string boxes(const std::string& indent) const {
    return (m ? indent + "const int m_box = " + start('m') + ";  // the last tile's boxes end at M\n" : "") +
           (n ? indent + "const int n_box = " + start('n') + ";  // the last tile's boxes end at N\n" : "");
  }
  /// Taken after the main loop: rot_X where the writes rotate, skip_n where the reads shift.
  std::string offsets(const std::string& indent) const {
    std::string s;
    for (const char axis : {'m', 'n'}) {
      if (!(axis == 'm' ? m : n)) continue;
      const std::string x(1, axis), tile = axis == 'm' ? "BM" : "BN", skip = x + "0 - " + start(axis);
      s += indent + (rotates(axis) ? "const int rot_" + x + " = (2 * " + tile + " - (" + skip + ")) % " + tile +
                                         ";  // the tile's own first, the rows before at the end\n"
                                   : "const int skip_" + x + " = " + skip + ";  // the stores read row x + skip_" + x + "\n");
    }
    return s;
  }
  /// The variable the stores' row is offset by, or "" (EpilogueScope::row_skip).
  std::string row_skip() const { return n && !rotates('n') ? "skip_n" : ""; }
  /// r, c (and r8, c1 for r + 8, c + 1): where accumulator (row, col) of warpgroup tile
  /// (wm0, wn0) goes in the epilogue tile.
  std::string position(const std::string& indent) const {
    const std::string r = "wm0 + i * 64 + row", c = "wn0 + j * 8 + col";
    std::string s = indent + "const int r = " + (rotates('m') ? rotated(r, "BM", "rot_m") : r) +
                    ", c = " + (rotates('n') ? rotated(c, "BN", "rot_n") : c);
    if (r8() == "r8") s += ", r8 = " + rotated(r + " + 8", "BM", "rot_m");
    if (c1() == "c1") s += ", c1 = " + rotated(c + " + 1", "BN", "rot_n");
    return s + ";\n";
  }
  /// The output row (column) of accumulator row (column) 0 of the tile at (m0, n0).
  std::string origin(char axis) const {
    return (axis == 'm' ? m : n) ? start(axis) : std::string(axis == 'm' ? "m0" : "n0");
  }
  std::string r8() const { return rotates('m') && !m_by_16 ? "r8" : "r + 8"; }
  std::string c1() const { return rotates('n') && !n_by_2 ? "c1" : "c + 1"; }

 private:
  bool rotates(char axis) const { return axis == 'm' ? m : (n && (rows != 'n' || whole_tile)); }
  /// Where the boxes of the tile at m0 (n0) start along `axis`.
  static std::string start(char axis) {
    return axis == 'm' ? "min(m0, max(M - BM, 0))" : "min(n0, max(N - BN, 0))";
  }
  static std::string rotated(const std::string& x, const std::string& tile, const std::string& rot) {
    return "rotated<" + tile + ">(" + x + ", " + rot + ")";
  }
};

/// The helper a consumer waits for a full stage with (ScheduleParams::uniform_wait).
std::string wait_call(const ScheduleParams& p) { return p.uniform_wait ? "mbar_wait_warp" : "mbar_wait"; }

/// What the parts of a persistent kernel share: the epilogue tile's type, and the code that
/// differs between one set of consumers, ping-pong consumers (each warpgroup its own tiles) and
/// pairs of blocks.
struct PersistentRoles {
  PersistentRoles(const ImplicitGemm& g, const ScheduleParams& p)
      : cs(persistent_epilogue_type(g)),
        tma_stores(p.bulk_store == 2),
        sync(ping_pong(p) ? "consumer_sync(wg);\n" : "consumer_sync();\n"),
        issuer(ping_pong(p) ? "threadIdx.x % 128 == 0" : "threadIdx.x == 0"),
        threads(ping_pong(p) ? "128" : "CONSUMERS * 128"),
        thread(ping_pong(p) ? "(threadIdx.x % 128)" : "threadIdx.x"),
        release(pairs_blocks(p) ? "mbar_arrive_pair" : "mbar_arrive"),
        wait(wait_call(p)),
        walk(stream_k(p)       ? "for (long long u = walk.first; u < walk.end;)"
             : pairs_blocks(p) ? "for (int tile = blockIdx.x / 2; tile < TILES; tile += gridDim.x / 2)"
                               : "for (int tile = blockIdx.x; tile < TILES; tile += gridDim.x)"),
        segment(stream_k(p) ? "const StreamPiece piece = stream_piece(walk, u);\n"
                              "const int tile = piece.tile, s0 = piece.first, s1 = piece.last;\n"
                              "u = stream_next(walk, (long long)tile * STEPS + s1);  // the next piece's\n"
                            : ""),
        first(stream_k(p) ? "s0" : "0"),
        last(stream_k(p) ? "s1" : "STEPS") {}

  std::string cs;       ///< The epilogue tile's element type.
  bool tma_stores;      ///< bulk_store 2.
  std::string sync;     ///< The consumers' barrier: each ping-pong warpgroup's own, else all consumers'.
  std::string issuer;   ///< The thread that issues a consumer's TMA stores.
  std::string threads;  ///< The threads that share a tile's epilogue: a ping-pong warpgroup's, else all consumers'.
  std::string thread;   ///< This thread's index among them.
  std::string release;  ///< Frees a ring buffer (in both blocks of a pair).
  std::string wait;     ///< Waits on a ring barrier.
  std::string walk;     ///< The loop over the block's tiles; a pair's blocks walk the pair's, each its half.
  /// Stream-K: the walk goes over pieces of tiles, steps [s0, s1) of `tile`, which this text
  /// (one statement a line) declares at the top of the loop's body; empty otherwise.
  std::string segment;
  std::string first, last;  ///< The steps of the tile the walk is at: [0, STEPS), or a piece's.

  /// The segment's lines, each indented by `indent`.
  std::string segment_at(const std::string& indent) const {
    std::string out;
    for (std::size_t at = 0; at < segment.size();) {
      const std::size_t nl = segment.find('\n', at);
      out += indent + segment.substr(at, nl + 1 - at);
      at = nl + 1;
    }
    return out;
  }
};

/// A persistent kernel's stores of its epilogue tile by bulk copies (bulk_store 1): each writer
/// makes its writes visible to the async proxy, then the consumers (r.threads) issue the copies of the
/// tile's row pieces (bulk_store_piece() elements each, which divide the output's contiguous runs,
/// so that each lies wholly inside or past its end) and close their bulk group; before the next
/// tile's writes each waits until its copies have read the tile. A last tile stores the pieces
/// inside the output; rows that a clamped tile holds `row_skip` further on are read from there
/// (BoxClamp).
void emit_bulk_stores(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p, bool c_row,
                      const PersistentRoles& r, const std::string& row_skip) {
  const int piece = bulk_store_piece(g, p);
  TMAP_CHECK(piece > 0, "bulk stores of an output whose tile rows are no contiguous runs (validate refuses them)");
  const int bytes = piece * dtype_bits(g.compute->tensor_of(g.compute->output).dtype) / 8;
  const std::string rows = c_row ? "BM" : "BN", cols = c_row ? "BN" : "BM";
  const std::string mm = c_row ? "row" : "col", nn = c_row ? "col" : "row";
  os << "    fence_proxy_async();  // this thread's writes to Cs, visible to the bulk copies\n"
     << "    " << r.sync
     << "    // The tile's rows in pieces of " << piece << " elements (" << bytes << " bytes), each contiguous in the output.\n"
     << "    constexpr int PIECES = " << cols << " / " << piece << ";\n"
     << "    for (int e = " << r.thread << "; e < " << rows << " * PIECES; e += " << r.threads << ") {\n"
     << "      const int row = e / PIECES, col = e % PIECES * " << piece << ";\n"
     << "      if (m0 + " << mm << " >= M || n0 + " << nn << " >= N) continue;  // past the output's end\n"
     << "      bulk_store(out_address(out, m0 + " << mm << ", n0 + " << nn << ", z), &Cs["
     << (row_skip.empty() ? "row" : "(row + " + row_skip + ")") << " * C_LD + col], " << bytes << "u);\n"
     << "    }\n"
     << "    bulk_commit();\n";
}

/// The coordinate of the output's TMA dimension `d` for slice `slice` of the epilogue tile of the
/// tile at (m0, n0) of batch z (bulk_store 2).
std::string output_tma_coordinate(const ImplicitGemm& g, const TmaDim& d, bool c_row) {
  switch (d.role) {
    case TmaDim::kCols: return std::string(c_row ? "n0" : "m0") + " + slice * CS_W";
    case TmaDim::kRows: return c_row ? "m0" : "n0";
    case TmaDim::kBatch: return digit_code(*g.compute, g.batch_iters, d.iter, "z");
    case TmaDim::kFixed: return std::to_string(d.value);
    case TmaDim::kSerial: break;
  }
  throw InternalError("an output indexed by a serial iterator (validate refuses TMA stores of it)");
}

/// A persistent kernel's stores of its epilogue tile by TMA (bulk_store 2): each writer makes its
/// writes to tile Ct visible to the async proxy; after the consumers' barrier one thread (r.issuer)
/// stores the tile's slices of one 128-byte line each and closes its bulk group, which drains
/// while the consumers go on. The tile alternates with the other (`stored`), which the issuer
/// waits to have been read before the consumers' barrier that precedes its next writes.
/// A fused epilogue is applied to Ct in place first, between two barriers, each thread taking
/// vectors of outputs as the vector stores do (emit_epilogue_loop()).
void emit_tma_stores(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p, bool c_row,
                     const PersistentRoles& r) {
  std::vector<TmaDim> dims;
  const std::string why = output_tma_view(g, c_row, dims);
  TMAP_CHECK(why.empty(), why);
  if (!g.compute->epilogue.empty() && !epilogue_on_accumulators(g, p)) {
    const OutVector ov = out_vector(g, p);
    os << "    " << r.sync << "    {\n";
    emit_epilogue_loop(os, g, ov, r.threads, r.thread,
                       "BM * BN / " + std::to_string(ov.width), c_row ? "&Ct[cs_at(mm, nn)]" : "&Ct[cs_at(nn, mm)]",
                       "epi_in_place", epilogue_loads_early(g, p));
    os << "    }\n";
  }
  os << "    fence_proxy_async();  // this thread's writes to Ct, visible to the TMA stores\n"
     << "    " << r.sync
     << "    if (" << r.issuer << ") {\n"
     << "      #pragma unroll\n"
     << "      for (int slice = 0; slice < " << (c_row ? "BN" : "BM") << " / CS_W; ++slice)\n"
     << "        tma_store_" << dims.size() << "d(tma_c, Ct + slice * CS_ROWS * CS_W";
  for (const TmaDim& d : dims) os << ", " << output_tma_coordinate(g, d, c_row);
  os << ");\n"
     << "      bulk_commit();\n"
     << "    }\n"
     << "    ++stored;\n";
}

/// A persistent kernel's stores of its epilogue tile by every consumer thread (emit_epilogue_stores()),
/// synchronized by the consumers' barrier (r.sync) only, ping-pong warpgroups each their own tile.
void emit_vector_stores(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p, const PersistentRoles& r,
                        const std::string& tout, const BoxClamp& clamp) {
  EpilogueScope scope;
  scope.barrier = "  " + r.sync;
  scope.threads = r.threads;
  scope.thread = r.thread;
  scope.close = false;
  scope.sm_to_itself = true;  // one block per SM walks the tiles
  scope.operands_early = epilogue_loads_early(g, p);  // loaded in emit_persistent_main_loop()
  scope.row_skip = clamp.row_skip();
  emit_epilogue_stores(os, g, p, r.cs, tout, scope);
}

/// One wgmma kernel being emitted: its GEMM and schedule, its launch (the tensor maps go in it),
/// the stored tiles, and with a producer each operand's TMA view.
struct WgmmaKernel {
  WgmmaKernel(const ImplicitGemm& g, const ScheduleParams& p)
      : g(g), p(p), k(kernel_shell(g, p, block_threads(g, p))), sa(stored_tile(g, p, 0)), sb(stored_tile(g, p, 1)),
        a_mn(stored_along_mn(g, 0)), b_mn(stored_along_mn(g, 1)), c_row(out_vector(g, p).along == 'n'),
        ws(p.producer != 0), persistent(tmap::persistent(p)), ping_pong(tmap::ping_pong(p)), pair(pairs_blocks(p)),
        alone(consumers_alone(g, p)),
        ta(storage_type(g.hw->a_dtype)), tb(storage_type(g.hw->b_dtype)), tacc(accumulator_type(g.hw->d_dtype)),
        tout(storage_type(g.compute->tensor_of(g.compute->output).dtype)), tpart(partial_type(g)) {}

  const ImplicitGemm& g;
  const ScheduleParams& p;
  KernelSource k;
  StoredTile sa, sb;
  bool a_mn, b_mn, c_row;
  bool ws, persistent, ping_pong, pair;  ///< A producer warpgroup; persistent; ping-pong; pairs of blocks.
  bool alone;  ///< One tile a block, the epilogue the consumers' alone (consumers_alone()).
  std::string ta, tb, tacc, tout, tpart;
  std::vector<TmaDim> views[2];  ///< With a producer, each operand's TMA view
  Im2colView im2col[2];          ///< or its im2col view (im2col[which].rank > 0).
  BoxClamp clamp;                ///< With a producer, the axes whose last boxes end at the extent's end.

  /// The threads that share a kernel of one tile a block's epilogue: all, or the consumers alone
  /// (whose places in the tile the early operand loads, made by every thread, take too).
  std::string epilogue_threads() const { return alone ? "(THREADS - 128)" : "THREADS"; }
};

/// Whether operand `which`'s boxes are clamped to end at the end of its m (n) extent (BoxClamp):
/// a tiled view whose rows run along that axis, with tiles (a pair's, in a cluster along it) that
/// may not divide the extent.
bool clamps_boxes(const WgmmaKernel& w, int which) {
  const ImplicitGemm& g = w.g;
  const ScheduleParams& p = w.p;
  if (!w.ws || w.im2col[which].rank || stored_along_mn(g, which)) return false;
  const char axis = which == 0 ? 'm' : 'n';
  if (g.dynamic() && g.dynamic_axis == axis) return true;
  return (which == 0 ? g.M : g.N) % pair_tile(p, axis) != 0;
}

/// Pairs of blocks along x, each pair one tile twice as tall (cluster 2) or wide (3); a persistent
/// kernel's tiles in one launch dimension, taken with a grid stride (split_k is 1).
void configure_launch(WgmmaKernel& w) {
  const ImplicitGemm& g = w.g;
  const ScheduleParams& p = w.p;
  KernelSource& k = w.k;
  const bool pair = w.pair, persistent = w.persistent;
  if (pair) {
    const std::int64_t pair_m = pair_tile(p, 'm'), pair_n = pair_tile(p, 'n');
    k.grid = {2 * ((g.M + pair_m - 1) / pair_m) * ((g.N + pair_n - 1) / pair_n), 1, g.batch};
    k.cluster_x = 2;
    if (g.dynamic()) k.grid_growth = {0, g.per_size, g.dynamic_axis == 'm' ? pair_m : pair_n, 1};
  }
  if (persistent) {
    k.grid = {k.grid[0] * k.grid[1] * k.grid[2], 1, 1};
    k.persistent = true;
  }
  if (stream_k(p)) {  // a block per step at most (the launch starts as many as stay resident)
    k.grid[0] *= reduction_steps(g, p);
    const StreamWorkspace ws = stream_workspace(p);
    k.workspace_bytes = ws.bytes;
    k.zeroed_offset = ws.flags_offset;
    k.zeroed_bytes = ws.bytes - ws.flags_offset;
  }
  if (g.dynamic() && (pair || persistent)) {
    // One launch dimension holds every tile (or pair): those along the dynamic axis times the rest.
    GridGrowth& w = k.grid_growth;
    const std::int64_t along = (g.dynamic_extent() + w.per_block - 1) / w.per_block;
    w.axis = 0;
    w.times = k.grid[0] / along;
    TMAP_CHECK(w.times * along == k.grid[0], "a grid that does not follow the run-time size");
  }
}

/// The kernel's constants: the intrinsic, the accumulators, each operand's swizzled tile and its
/// index function, the stage sizes and the epilogue's leading dimension.
void emit_constants(std::ostringstream& os, const WgmmaKernel& w) {
  const ImplicitGemm& g = w.g;
  const ScheduleParams& p = w.p;
  const StoredTile &sa = w.sa, &sb = w.sb;
  const bool a_mn = w.a_mn, b_mn = w.b_mn, c_row = w.c_row, persistent = w.persistent;
  const auto ik = g.shape[Axis::kK];
  os << "constexpr int IK = " << ik << ";  // k of one wgmma (32 bytes)\n"
     << "constexpr int MI = WM / 64;  // m64 accumulators per warpgroup\n"
     << "constexpr int ACC = WN / 2;  // registers of one m64 x n" << p.warp_n << " accumulator per thread\n"
     << "// Shared tiles, " << line_bytes(p) << "-byte swizzled: A " << (a_mn ? "[BK][BM] (m contiguous)" : "[BM][BK] (k contiguous)")
     << ", B " << (b_mn ? "[BK][BN] (n contiguous)" : "[BN][BK] (k contiguous)") << "; epilogue "
     << (c_row ? "[BM][BN + 8]" : "[BN][BM + 4]") << "\n";
  emit_device_include(os, "swizzle");
  for (int which = 0; which < 2; ++which) {
    const StoredTile& t = which == 0 ? sa : sb;
    const std::string up = which == 0 ? "A" : "B", op = which == 0 ? "a" : "b";
    os << "constexpr int " << up << "_ROWS = " << t.rows << ", " << up << "_W = " << line(t, p) << ", " << up
       << "_T = " << 16 / t.bytes << ";  // rows; elements per " << line_bytes(p)
       << "-byte line and per 16-byte chunk\n"
       << "__device__ __forceinline__ int " << op << "_at(int r, int c) { return swizzle_atoms<" << up << "_ROWS, " << up
       << "_W, " << up << "_T, " << line_bytes(p) << ">(r, c); }\n";
  }
  os << "constexpr int A_BYTES = " << tile_bytes(g, p, 0) << ";  // one stage of A, whole 1024-byte atoms\n"
     << "constexpr int B_BYTES = " << tile_bytes(g, p, 1) << ";\n"
     << "constexpr int C_LD = " << (persistent ? persistent_c_ld(g, c_row) : c_row ? "BN + 8" : "BM + 4") << ";\n\n";
  if (stream_k(p)) {
    const StreamWorkspace ws = stream_workspace(p);
    os << "// Stream-K: at most SK_BLOCKS blocks take runs of steps; block b's partial tile of SK_TILE sums\n"
       << "// starts at element b x SK_TILE of the workspace, its flag at byte SK_FLAGS + 4 b.\n"
       << "constexpr int SK_BLOCKS = " << kStreamBlocks << ", SK_TILE = " << ws.tile_elements << ";\n"
       << "constexpr long long SK_FLAGS = " << ws.flags_offset << ";\n";
    emit_device_include(os, "grid_flag");
    emit_device_include(os, "stream_k");
    os << "\n";
  }
  if (p.bulk_store != 2) return;
  const int bytes = persistent_epilogue_bytes_per_element(g);
  os << "// The epilogue tiles that TMA stores (two a consumer, alternating): column blocks of one 128-byte\n"
     << "// line by CS_ROWS rows, swizzled as the output's tensor map.\n"
     << "constexpr int CS_ROWS = " << (c_row ? "BM" : "BN") << ", CS_W = " << 128 / bytes << ", CS_T = " << 16 / bytes
     << ";  // rows; elements per line and per 16-byte chunk\n"
     << "constexpr int CS_TILE = BM * BN;  // elements of one epilogue tile\n"
     << "__device__ __forceinline__ int cs_at(int r, int c) { return swizzle_atoms<CS_ROWS, CS_W, CS_T, 128>(r, c); }\n\n";
}

/// The output's tensor map for TMA stores (bulk_store 2): boxes of one 128-byte line of the
/// epilogue tile's columns by its rows, swizzled as cs_at() lays the tile out.
TensorMapSpec output_tensor_map(const ImplicitGemm& g, const ScheduleParams& p, bool c_row) {
  std::vector<TmaDim> dims;
  const std::string why = output_tma_view(g, c_row, dims);
  TMAP_CHECK(why.empty(), why);
  const Tensor& t = g.compute->tensor_of(g.compute->output);
  TensorMapSpec m;
  m.operand = 2;
  m.swizzle_bytes = 128;
  m.dtype = t.dtype;
  m.rank = static_cast<int>(dims.size());
  for (std::size_t d = 0; d < dims.size(); ++d) {
    m.dims[d] = dims[d].extent;
    if (d > 0) m.strides[d - 1] = dims[d].stride_bytes;
    m.box[d] = d == 0 ? static_cast<std::uint32_t>(128 / (dtype_bits(t.dtype) / 8))
               : d == 1 ? static_cast<std::uint32_t>(c_row ? p.block_m : p.block_n) : 1;
  }
  return m;
}

/// Each operand's tensor map (a pair's shared operand loads half the rows; a dynamic size's
/// operand follows the run-time size), and which of the boxes' edges the kernel clamps.
void add_tensor_maps(WgmmaKernel& w) {
  const ImplicitGemm& g = w.g;
  const ScheduleParams& p = w.p;
  for (int which = 0; which < 2; ++which) {
    Im2colView& im2col = w.im2col[which];
    const std::string why = tma_source(g, which, w.views[which], &im2col);
    TMAP_CHECK(why.empty(), why);
    w.k.tensor_maps.push_back(im2col.rank ? im2col_map(g, p, im2col) : tensor_map(g, p, which, w.views[which]));
    if (g.dynamic() && which == (g.dynamic_axis == 'm' ? 0 : 1)) {  // its m (n) dimension, or batch, follows the size
      TensorMapSpec& m = w.k.tensor_maps.back();
      m.grow_dim = im2col.rank ? m.rank - 1 : stored_along_mn(g, which) ? 0 : 1;
      const std::uint64_t largest = static_cast<std::uint64_t>(g.compute->dynamic.hi);
      TMAP_CHECK(m.dims[m.grow_dim] % largest == 0, "a tensor map that does not follow the run-time size");
      m.grow_per_size = m.dims[m.grow_dim] / largest;
    }
    if (which == pair_shared_operand(p)) {  // each block of the pair loads half of its rows
      TMAP_CHECK(!im2col.rank, "a pair shares tiled boxes only (validate rejects im2col)");
      w.k.tensor_maps.back().box[1] /= 2;
    }
  }
  if (p.bulk_store == 2) w.k.tensor_maps.push_back(output_tensor_map(g, p, w.c_row));
  w.clamp.m = clamps_boxes(w, 0);
  w.clamp.n = clamps_boxes(w, 1);
  w.clamp.rows = w.c_row ? 'm' : 'n';
  w.clamp.whole_tile = p.bulk_store == 2;
  w.clamp.m_by_16 = !(g.dynamic() && g.dynamic_axis == 'm') && g.M % 16 == 0;
  w.clamp.n_by_2 = !(g.dynamic() && g.dynamic_axis == 'n') && g.N % 2 == 0;
}

/// A persistent kernel's epilogue tiles past the ring, and the barrier its consumers share
/// without the producer (ping-pong: each consumer warpgroup its own), so that the producer runs
/// into the next tile meanwhile; that barrier also where the consumers run the epilogue alone
/// (consumers_alone()).
void emit_consumer_sync(std::ostringstream& os, const WgmmaKernel& w) {
  if (!w.persistent && !w.alone) return;
  if (w.persistent)
    os << "constexpr int CS_OFFSET = " << ring_bytes(w.g, w.p)
       << (w.ping_pong ? ";  // the epilogue tiles, one per consumer, past the ring\n"
                       : ";  // the epilogue tile, past the ring\n");
  if (w.ping_pong)
    os << "constexpr int CS_STRIDE = " << persistent_epilogue_stride(w.g, w.p) << ";  // bytes of one\n"
       << "// Synchronizes consumer warpgroup `wg` alone (named barrier 2 + wg), not the other or the producer;\n"
       << "// constant barrier ids, so that ptxas reserves those alone.\n"
       << "__device__ __forceinline__ void consumer_sync(int wg) {\n"
       << "  if (wg == 0) asm volatile(\"bar.sync 2, 128;\\n\" ::: \"memory\");\n"
       << "  else asm volatile(\"bar.sync 3, 128;\\n\" ::: \"memory\");\n}\n";
  else
    os << "// Synchronizes the consumer warpgroups alone (named barrier 1), not the producer.\n"
       << "__device__ __forceinline__ void consumer_sync() { asm volatile(\"bar.sync 1, " << w.k.threads - 128
       << ";\\n\" ::: \"memory\"); }\n";
}

/// With a producer: the tensor maps, the TMA and mbarrier helpers and the ring's offsets;
/// without, the cp.async and shift helpers.
void emit_copy_setup(std::ostringstream& os, WgmmaKernel& w) {
  if (!w.p.producer) {
    emit_cp_async_helpers(os);
    emit_shift_helpers(os, w.g, w.p);
    return;
  }
  add_tensor_maps(w);
  emit_producer_helpers(os, w.pair);
  os << "constexpr int BAR_OFFSET = " << barrier_offset(w.g, w.p) << ";  // the ring's mbarriers, past tiles and epilogue\n";
  emit_consumer_sync(os, w);
}

/// Descriptor offsets (16-byte units) of accumulator i's A and of B at sub-step kk, from the
/// warpgroup's base descriptor.
void emit_descriptor_offsets(std::ostringstream& os, const WgmmaKernel& w) {
  const ScheduleParams& p = w.p;
  const bool a_mn = w.a_mn, b_mn = w.b_mn;
  const StoredTile &sa = w.sa, &sb = w.sb;
  os << "__device__ constexpr unsigned long long a_offset(int i, int kk) {\n";
  if (a_mn)
    os << "  return (((64 * i) / A_W * A_ROWS + kk) * " << line_bytes(p) << ") >> 4;\n}\n";
  else
    os << "  return (((kk / A_W) * A_ROWS + 64 * i) * " << line_bytes(p) << " + (kk % A_W) * " << sa.bytes
       << ") >> 4;\n}\n";
  os << "__device__ constexpr unsigned long long b_offset(int kk) {\n";
  if (b_mn)
    os << "  return (kk * " << line_bytes(p) << ") >> 4;\n}\n";
  else
    os << "  return ((kk / B_W) * B_ROWS * " << line_bytes(p) << " + (kk % B_W) * " << sb.bytes << ") >> 4;\n}\n";
}

/// A consumer's accumulator tiles, its rows numbered by `row` within each warpgroup's m64 tile.
AccumulatorTiles wgmma_accumulator_tiles(const WgmmaKernel& w, const std::string& row) {
  AccumulatorTiles t;
  t.tiles = "MI";
  t.quads = "WN / 8";
  t.quad = "acc[i][4 * j + #]";
  t.first_row = w.clamp.origin('m') + " + wm0 + i * 64 + " + row;
  t.first_col = w.clamp.origin('n') + " + wn0 + j * 8 + col";
  return t;
}

/// With epilogue_on_accumulators(): the epilogue's operands that vary along m at most, loaded for
/// the thread's rows before the tile's main loop (emit_accumulator_row_loads()).
void emit_wgmma_row_loads(std::ostringstream& os, const WgmmaKernel& w, const std::string& row, const std::string& indent) {
  if (!epilogue_on_accumulators(w.g, w.p) || !accumulator_epilogue_has_rows(w.g)) return;
  os << indent << "// The epilogue's per-row operands, loaded before the main loop: their latency hides behind it.\n";
  emit_accumulator_row_loads(os, w.g, wgmma_accumulator_tiles(w, row), indent);
}

/// Which output tiles the block takes: a pair's half of the pair's tile, a persistent block's
/// walk over all tiles, else its own tile and its split of the reduction.
void emit_block_tiles(std::ostringstream& os, const WgmmaKernel& w) {
  const ImplicitGemm& g = w.g;
  const ScheduleParams& p = w.p;
  const bool pair = w.pair, persistent = w.persistent;
  if (pair)
    os << "  // A pair of blocks (a cluster along x) takes one tile of " << (p.cluster == 2 ? "2 BM x BN" : "BM x 2 BN")
       << ", this block the half cta_rank; both\n"
       << "  // read the same " << (p.cluster == 2 ? "B" : "A") << " tile, half of each stage loaded by each and multicast into both.\n"
       << "  const int cta_rank = cluster_ctarank();\n"
       << "  const int GRID_M = (M + " << (p.cluster == 2 ? "2 * BM - 1) / (2 * BM)" : "BM - 1) / BM")
       << ", GRID_N = (N + " << (p.cluster == 3 ? "2 * BN - 1) / (2 * BN)" : "BN - 1) / BN")
       << ";  // the pairs' tiles\n";
  if (persistent) {
    os << "  // Persistent: block b takes the output tiles b, b + gridDim.x, ... of TILES (batch entries\n"
       << "  // slowest, then the M x N tiles in raster order)" << (pair ? "; a pair, tiles b / 2, b / 2 + gridDim.x / 2, ...\n" : ".\n")
       << (pair ? "  const int TILES = GRID_M * GRID_N * BATCH;\n"
                : "  const int GRID_M = (M + BM - 1) / BM, GRID_N = (N + BN - 1) / BN, TILES = GRID_M * GRID_N * BATCH;\n");
  } else {
    if (pair)
      emit_tile_origin(os, p, "blockIdx.x / 2", "  ");
    else
      emit_block_origin(os, p);
    os << w.clamp.boxes("  ")
       << "  const int z = blockIdx.z / SPLIT_K, split = blockIdx.z % SPLIT_K;\n";
    emit_epilogue_prefetch(os, g, p, "THREADS", "  ");
    if (block_loads_epilogue_early(g, p))
      emit_epilogue_early_loads(os, g, p, w.epilogue_threads(), "threadIdx.x", "  ");
  }
}

/// The kernel's signature, shared tiles, the block's tiles (emit_block_tiles), warpgroup
/// origin, accumulators and share of the steps.
void emit_entry(std::ostringstream& os, const WgmmaKernel& w) {
  const ImplicitGemm& g = w.g;
  const ScheduleParams& p = w.p;
  const KernelSource& k = w.k;
  const std::string &ta = w.ta, &tb = w.tb, &tacc = w.tacc, &tout = w.tout, &tpart = w.tpart;
  const bool ws = w.ws, persistent = w.persistent;
  os << "extern \"C\" __global__ void " << cluster_attribute(p) << "__launch_bounds__(THREADS, 1)\n"
     << k.name << "(const " << ta << "* __restrict__ a_src, const " << tb << "* __restrict__ b_src, "
     << output_params(g, tout) << ", " << tpart << "* __restrict__ partial"
     << (ws ? ",\n    const __grid_constant__ TmaMap tma_a, const __grid_constant__ TmaMap tma_b" : "")
     << (p.bulk_store == 2 ? ", const __grid_constant__ TmaMap tma_c" : "") << ") {\n"
     << output_bundle(g) << "  extern __shared__ __align__(1024) unsigned char smem_raw[];\n"
     << "  // Swizzled tiles start on 1024-byte boundaries (the launch adds 1 KiB of slack).\n"
     << "  unsigned char* smem = smem_raw + ((1024 - static_cast<unsigned>(__cvta_generic_to_shared(smem_raw)) % 1024) % 1024);\n"
     << "  " << ta << "* As = reinterpret_cast<" << ta << "*>(smem);                    // [STAGES][A_BYTES]\n"
     << "  " << tb << "* Bs = reinterpret_cast<" << tb << "*>(smem + STAGES * A_BYTES);  // [STAGES][B_BYTES]\n";
  emit_prologue_wait(os, g);
  emit_block_tiles(os, w);
  os << "  const int wg = threadIdx.x / 128, lane = threadIdx.x % 32;\n"
     << (w.ping_pong ? "  const int wm0 = 0, wn0 = 0;  // each consumer warpgroup multiplies whole tiles\n\n"
                     : "  const int wm0 = (wg / WARPS_N) * WM, wn0 = (wg % WARPS_N) * WN;  // warpgroup tile origin in the block\n\n")
     << "  " << tacc << " acc[MI][ACC];\n"
     << "  #pragma unroll\n  for (int i = 0; i < MI; ++i)\n"
     << "    #pragma unroll\n    for (int r = 0; r < ACC; ++r) acc[i][r] = 0;\n\n";
  if (!persistent) emit_wgmma_row_loads(os, w, "((threadIdx.x % 128) / 32 * 16 + lane / 4)", "  ");
  os << "  constexpr int K_TILES = (K + BK - 1) / BK;\n"
     << "  constexpr int STEPS = SERIAL * K_TILES;  // serial reduction points x K tiles\n";
  if (!persistent)
    os << "  // This block's share of the steps: [first, last).\n"
       << "  const int first = (int)((long long)STEPS * split / SPLIT_K), last = (int)((long long)STEPS * (split + 1) / SPLIT_K);\n";
}

/// The stage descriptors and the lambda that issues the wgmmas of one shared buffer (A from
/// shared memory, or from registers loaded with ldmatrix).
void emit_compute_lambda(std::ostringstream& os, const WgmmaKernel& w) {
  const ScheduleParams& p = w.p;
  const bool a_mn = w.a_mn, b_mn = w.b_mn;
  const std::string& ta = w.ta;
  const int lb = line_bytes(p);
  const std::string a_base = a_mn ? "(wm0 / A_W) * A_ROWS * A_W" : "wm0 * A_W";
  const std::string b_base = b_mn ? "(wn0 / B_W) * B_ROWS * B_W" : "wn0 * B_W";
  if (p.a_regs == 1)
    os << "  // This warpgroup's descriptor of B's stage 0: "
       << (b_mn ? "MN-major (LBO: one block of B_W n)" : "K-major") << "; SBO: 8 lines of " << lb << " bytes.\n";
  else
    os << "  // This warpgroup's descriptors of stage 0: A " << (a_mn ? "MN-major (LBO: one block of A_W m)" : "K-major")
       << ", B " << (b_mn ? "MN-major (LBO: one block of B_W n)" : "K-major") << "; SBO: 8 lines of " << lb
       << " bytes.\n"
       << "  const unsigned long long a_desc = smem_desc<" << p.swizzle << ">(As + " << a_base << ", "
       << (a_mn ? "A_ROWS * " + std::to_string(lb) : "16") << ", " << 8 * lb << ");\n";
  os << "  const unsigned long long b_desc = smem_desc<" << p.swizzle << ">(Bs + " << b_base << ", "
     << (b_mn ? "B_ROWS * " + std::to_string(lb) : "16") << ", " << 8 * lb << ");\n"
     << "  // Issues the wgmmas of shared buffer `buf` as one commit group.\n";
  if (p.a_regs == 1)
    os << "  // A from registers: the step's fragments are loaded first (ldmatrix), then fenced for wgmma,\n"
       << "  // into the set of the step's parity (from the tile's first step), which the wgmmas of the\n"
       << "  // step before, possibly in flight, do not read; the step loop takes two steps at a time, one\n"
       << "  // per set, so that no branch picks the set (see step_loop()).\n"
       << "  unsigned a_even[MI][BK / IK][4], a_odd[MI][BK / IK][4];\n"
       << "  auto compute = [&](int buf, unsigned (&af)[MI][BK / IK][4]) {\n"
       << "    const " << ta << "* a = As + buf * (A_BYTES / (int)sizeof(" << ta << ")) + " << a_base << ";\n"
       << "    const unsigned long long db = b_desc + (unsigned)(buf * B_BYTES >> 4);\n"
       << "    #pragma unroll\n    for (int kk = 0; kk < BK; kk += IK)\n"
       << "      #pragma unroll\n      for (int i = 0; i < MI; ++i) load_a(af[i][kk / IK], a, i, kk);\n"
       << "    wgmma_fence();\n"
       << "    #pragma unroll\n    for (int kk = 0; kk < BK; kk += IK)\n"
       << "      #pragma unroll\n      for (int i = 0; i < MI; ++i) wgmma(acc[i], af[i][kk / IK], db + b_offset(kk));\n"
       << "    wgmma_commit();\n  };\n\n";
  else
    os << "  auto compute = [&](int buf) {\n"
       << "    const unsigned long long da = a_desc + (unsigned)(buf * A_BYTES >> 4), db = b_desc + (unsigned)(buf * B_BYTES >> 4);\n"
       << "    wgmma_fence();\n"
       << "    #pragma unroll\n    for (int kk = 0; kk < BK; kk += IK)\n"
       << "      #pragma unroll\n      for (int i = 0; i < MI; ++i) wgmma(acc[i], da + a_offset(i, kk), db + b_offset(kk));\n"
       << "    wgmma_commit();\n  };\n\n";
}

/// The producer's TMA boxes of operand `which` for stage `buf`: one box per column block (one
/// swizzled line wide), or an im2col view's.
std::string tma_loads(const WgmmaKernel& w, int which) {
  const ImplicitGemm& g = w.g;
  const ScheduleParams& p = w.p;
  const TensorMapSpec& m = w.k.tensor_maps[which];
  const StoredTile& t = which == 0 ? w.sa : w.sb;
  if (m.im2col) return im2col_loads(g, w.im2col[which], static_cast<int>(t.cols / line(t, p)));
  const std::string up = which == 0 ? "A" : "B", base = which == 0 ? "As" : "Bs";
  // A pair's shared operand: this block loads rows [cta_rank, cta_rank + 1) x ROWS / 2 of each
  // column block into both blocks.
  const bool half = which == pair_shared_operand(p);
  const std::string offset = half ? " + cta_rank * (" + up + "_ROWS / 2)" : "";
  std::ostringstream l;
  l << "        #pragma unroll\n        for (int blk = 0; blk < " << t.cols / line(t, p) << "; ++blk)\n"
    << "          tma_" << (half ? "multicast_" : "load_") << m.rank << "d(" << base << " + buf * (" << up
    << "_BYTES / (int)sizeof(*" << base << ")) + blk * " << up << "_ROWS * " << up << "_W"
    << (half ? " + cta_rank * (" + up + "_ROWS / 2) * " + up + "_W" : "") << ", tma_" << (which == 0 ? "a" : "b")
    << ", &full[buf]";
  for (const TmaDim& d : w.views[which])
    l << ",\n              " << tma_coordinate(g, which, d, "blk", which == 0 ? w.clamp.m : w.clamp.n)
      << (d.role == TmaDim::kRows ? offset : "");
  l << ");\n";
  return l.str();
}

/// Main loop with a producer warpgroup: it issues each stage's TMA boxes into a ring of mbarriers
/// while the consumer warpgroups run wgmma on the stages that have landed.
void emit_warp_specialized_loop(std::ostringstream& os, const WgmmaKernel& w) {
  const ImplicitGemm& g = w.g;
  const ScheduleParams& p = w.p;
  const bool pair = w.pair;
  const Im2colView* im2col = w.im2col;
  const bool alone = w.alone;
  auto loads = [&](int which) { return tma_loads(w, which); };
  os << "  // Warp specialization: the last warpgroup produces, the others consume. Stage buffer b is\n"
     << "  // full when full[b]'s phase completes (the producer's arrival and the bytes of its TMA boxes)\n"
     << "  // and empty again when empty[b]'s does (one arrival per consumer warp after its wgmmas on b\n"
     << "  // retired); the n-th use of a buffer waits for phase parity n % 2.\n"
     << ring_barriers(w.sa, w.sb, pair)
     << (pair ? "  cluster_sync();  // both blocks' mbarriers are initialized before either's copies reach them\n"
              : "  __syncthreads();\n")
     << "  if (wg == CONSUMERS) {\n"
     << set_registers(g, p, true, "    ")
     << "    if (threadIdx.x % 128 == 0) {  // one thread issues every copy\n"
     << (im2col[0].rank ? im2col_origin(g, im2col[0]) : "") << (im2col[1].rank ? im2col_origin(g, im2col[1]) : "")
     << "      for (int step = first; step < last; ++step) {\n"
     << "        const int t = step - first, buf = t % STAGES;\n"
     << "        if (t >= STAGES) mbar_wait(&empty[buf], (t / STAGES - 1) & 1);\n"
     << "        mbar_expect_tx(&full[buf], STAGE_TX);\n"
     << "        const int s = step / K_TILES, k0 = (step % K_TILES) * BK;\n"
     << "        (void)s;\n"
     << loads(0) << loads(1)
     << "      }\n"
     << "    }\n"
     << (alone && pair ? "    cluster_sync();  // the pair's last barrier, which the consumers pass after their epilogue\n" : "")
     << (alone ? "    return;  // the epilogue is the consumers', with the registers this warpgroup gave them\n" : "")
     << "  } else {\n"
     << set_registers(g, p, false, "    ")
     << step_loop(p, "    ", "first", "last",
                  "      const int t = step - first, buf = t % STAGES;\n      " + wait_call(p) +
                      "(&full[buf], (t / STAGES) & 1);\n"
                      "      compute(buf$A);\n"
                      "      wgmma_wait<1>();  // the previous step's wgmmas are done: release its buffer\n"
                      "      if (t > 0 && lane == 0) " +
                      (pair ? "mbar_arrive_pair" : "mbar_arrive") + "(&empty[(t + STAGES - 1) % STAGES]);\n",
                  false)
     << "    wgmma_wait<0>();\n"
     << "  }\n"
     << "  #pragma unroll\n  for (int i = 0; i < MI; ++i)\n"
     << "    #pragma unroll\n    for (int r = 0; r < ACC; ++r) fence_operand(acc[i][r]);\n"
     << (alone ? "  consumer_sync();" : "  __syncthreads();")
     << "  // every box was consumed: the epilogue reuses the buffers\n\n";
}

/// Main loop without a producer: every thread issues cp.async copies STAGES - 2 steps ahead.
void emit_cp_async_ring_loop(std::ostringstream& os, const WgmmaKernel& w, bool staged) {
  const ScheduleParams& p = w.p;
  os << "  // The ring: copies run STAGES - 2 steps ahead; the buffer refilled at a step was read two steps\n"
     << "  // before, whose wgmmas every warpgroup retired (wait_group 1) before this step's barrier.\n"
     << (staged ? "  // Shifted copies are fetched into registers with the step's copies and stored into their\n"
                  "  // buffer once the step's wgmmas are issued; the next step's fence and barrier make the\n"
                  "  // stores visible to wgmma.\n"
                : "")
     << "  for (int t = 0; t < STAGES - 2; ++t) {\n"
     << "    if (first + t < last) {\n      load_tiles(first + t, t);\n" << (staged ? "      store_staged(t);\n" : "")
     << "    }\n"
     << "    cp_async_commit();\n  }\n"
     << step_loop(p, "  ", "first", "last",
                  std::string("    const int t = step - first;\n"
                              "    cp_async_wait<STAGES - 3>();  // this thread's copies of `step` have landed\n"
                              "    fence_proxy_async();\n"
                              "    __syncthreads();  // and every thread's\n"
                              "    if (step + STAGES - 2 < last) load_tiles(step + STAGES - 2, (t + STAGES - 2) % STAGES);\n"
                              "    cp_async_commit();\n"
                              "    compute(t % STAGES$A);\n") +
                      (staged ? "    if (step + STAGES - 2 < last) store_staged((t + STAGES - 2) % STAGES);\n" : "") +
                      "    wgmma_wait<1>();  // the previous step's wgmmas are done\n",
                  false)
     << "  wgmma_wait<0>();\n"
     << "  #pragma unroll\n  for (int i = 0; i < MI; ++i)\n"
     << "    #pragma unroll\n    for (int r = 0; r < ACC; ++r) fence_operand(acc[i][r]);\n"
     << "  cp_async_wait<0>();\n  __syncthreads();  // the epilogue reuses the buffers\n\n";
}

/// The ring's barriers, the epilogue tile and the producer's branch: one thread walks this
/// block's tiles and their steps, filling the ring ahead.
void emit_persistent_producer(std::ostringstream& os, const WgmmaKernel& w, const PersistentRoles& r) {
  const bool pair = w.pair, pp = w.ping_pong;
  if (stream_k(w.p))
    os << "  // Stream-K: the steps of " << (w.p.stream_k == 2 ? "the last one to two waves' tiles" : "all tiles")
       << ", tile after tile, cut into sk_blocks even runs;\n"
       << "  // this block takes run blockIdx.x" << (w.p.stream_k == 2 ? ", then every sk_blocks-th of the other tiles whole" : "")
       << ". A tile cut between runs is finished by\n"
       << "  // the block whose run holds its first step (the tile's last piece of that run), from the\n"
       << "  // partial sums that the blocks after it left in the workspace (their runs' first pieces).\n"
       << "  const int sk_blocks = min((int)gridDim.x, SK_BLOCKS);\n"
       << "  if (blockIdx.x >= sk_blocks) return;  // more blocks than partial tiles: these idle\n"
       << "  const StreamWalk walk = stream_walk(TILES, STEPS, sk_blocks, blockIdx.x, "
       << (w.p.stream_k == 2 ? "true" : "false") << ");\n";
  os << ring_barriers(w.sa, w.sb, pair, pp)
     << "  " << r.cs << "* Cs = reinterpret_cast<" << r.cs << "*>(smem + CS_OFFSET"
     << (pp ? " + (wg % 2) * CS_STRIDE);  // this consumer's (the producer's is unused)\n" : ");\n")
     << (pair ? "  cluster_sync();  // the last barrier of both blocks: the roles part here, every mbarrier initialized\n"
              : "  __syncthreads();  // the last barrier of the whole block: the roles part here\n")
     << "  if (wg == CONSUMERS) {\n"
     << set_registers(w.g, w.p, true, "    ")
     << "    if (threadIdx.x % 128 == 0) {  // one thread issues every copy\n"
     << "      int t = 0;  // stages filled so far, over all this block's tiles\n"
     << "      " << r.walk << " {\n"
     << r.segment_at("        ")
     << "        const int z = tile / (GRID_M * GRID_N);\n";
  emit_tile_origin(os, w.p, "tile % (GRID_M * GRID_N)", "        ");
  os << "        (void)z;\n" << w.clamp.boxes("        ")
     << (w.im2col[0].rank ? im2col_origin(w.g, w.im2col[0]) : "") << (w.im2col[1].rank ? im2col_origin(w.g, w.im2col[1]) : "")
     << "        for (int step = " << r.first << "; step < " << r.last << "; ++step, ++t) {\n"
     << "          const int buf = t % STAGES;\n"
     << "          if (t >= STAGES) mbar_wait(&empty[buf], (t / STAGES - 1) & 1);\n"
     << "          mbar_expect_tx(&full[buf], STAGE_TX);\n"
     << "          const int s = step / K_TILES, k0 = (step % K_TILES) * BK;\n"
     << "          (void)s;\n"
     << tma_loads(w, 0) << tma_loads(w, 1)
     << "        }\n"
     << "      }\n"
     << "    }\n"
     << (pair ? "    cluster_sync();  // the other block's consumers may still arrive on this block's barriers\n" : "")
     << "    return;\n"
     << "  }\n";
}

/// Stream-K, after a piece's main loop: a piece without the tile's first step leaves its sums in
/// this block's partial tile (as each thread holds them: coalesced) and raises the block's flag,
/// and the walk goes on; the piece with the first step adds the partial tiles of the blocks after
/// this one whose runs start inside the tile, then stores the tile.
void emit_stream_fixup(std::ostringstream& os, const WgmmaKernel& w) {
  if (!stream_k(w.p)) return;
  TMAP_CHECK(w.tacc == w.tpart, "a stream-K workspace holds accumulators as the kernel's partial type");
  const std::string slot = "(i * ACC + r) * (CONSUMERS * 128) + threadIdx.x";
  os << "    int* const sk_flags = reinterpret_cast<int*>(reinterpret_cast<unsigned char*>(partial) + SK_FLAGS);\n"
     << "    if (s0 != 0) {  // a later piece of the tile: its sums go to the block that finishes it\n"
     << "      " << w.tacc << "* const mine = partial + (long long)blockIdx.x * SK_TILE;\n"
     << "      #pragma unroll\n      for (int i = 0; i < MI; ++i)\n"
     << "        #pragma unroll\n        for (int r = 0; r < ACC; ++r) __stcg(&mine[" << slot << "], acc[i][r]);\n"
     << "      __threadfence();  // this thread's sums are visible to every block before the flag\n"
     << "      consumer_sync();\n"
     << "      if (threadIdx.x == 0) flag_raise(&sk_flags[blockIdx.x]);\n"
     << "      continue;\n"
     << "    }\n"
     << "    // The tile's first piece: the rest are the first pieces of the runs that start inside it.\n"
     << "    for (int b = blockIdx.x + 1; s1 < STEPS && stream_peer(walk.units, sk_blocks, b, tile, STEPS); ++b) {\n"
     << "      if (threadIdx.x == 0) {\n"
     << "        flag_wait(&sk_flags[b]);\n"
     << "        sk_flags[b] = 0;  // for the next launch: block b raises it once a launch\n"
     << "      }\n"
     << "      consumer_sync();\n"
     << "      const " << w.tacc << "* const theirs = partial + (long long)b * SK_TILE;\n"
     << "      #pragma unroll\n      for (int i = 0; i < MI; ++i)\n"
     << "        #pragma unroll\n        for (int r = 0; r < ACC; ++r) acc[i][r] += __ldcg(&theirs[" << slot << "]);\n"
     << "    }\n";
}

/// The consumers' walk over the block's tiles (in ping-pong, this warpgroup's every other one)
/// and each tile's main loop, releasing each buffer as its wgmmas retire; the walk's loop stays
/// open for the epilogue.
void emit_persistent_main_loop(std::ostringstream& os, const WgmmaKernel& w, const PersistentRoles& r) {
  const ImplicitGemm& g = w.g;
  const ScheduleParams& p = w.p;
  const bool pp = w.ping_pong;
  os << set_registers(g, p, false, "  ")
     << "  const int row = (threadIdx.x % 128) / 32 * 16 + lane / 4, col = (lane % 4) * 2;\n"
     << (r.tma_stores ? "  int stored = 0;  // tiles this consumer stored: which of its two epilogue tiles is next\n" : "");
  if (pp)
    os << "  int t = wg * STEPS;  // stages of the block's tiles before this one's next\n"
       << "  // taken: this warpgroup's tiles so far.\n"
       << "  for (int tile = blockIdx.x + wg * gridDim.x, taken = 0; tile < TILES; tile += 2 * gridDim.x, t += STEPS, ++taken) {\n";
  else
    os << "  int t = 0;  // stages consumed so far\n"
       << "  " << r.walk << " {\n" << r.segment_at("    ");
  os << "    const int z = tile / (GRID_M * GRID_N);\n";
  emit_tile_origin(os, p, "tile % (GRID_M * GRID_N)", "    ");
  emit_epilogue_prefetch(os, g, p, r.threads, "    ", r.thread);
  if (epilogue_loads_early(g, p)) emit_epilogue_early_loads(os, g, p, r.threads, r.thread, "    ");
  emit_wgmma_row_loads(os, w, "row", "    ");
  if (pp)
    os << "    // This warpgroup's turn: the wgmmas of the other's tile before are done.\n"
       << "    if (taken + wg > 0) " << r.wait << "(&turn[wg], (taken + wg - 1) & 1);\n";
  os << "    #pragma unroll\n    for (int i = 0; i < MI; ++i)\n"
     << "      #pragma unroll\n      for (int r = 0; r < ACC; ++r) acc[i][r] = 0;\n"
     << step_loop(p, "    ", r.first, r.last,
                  "      const int buf = t % STAGES;\n      " + r.wait +
                      "(&full[buf], (t / STAGES) & 1);\n"
                      "      compute(buf$A);\n"
                      "      wgmma_wait<1>();  // the previous step's wgmmas are done: release its buffer\n"
                      "      if (step > " + r.first + " && lane == 0) " + r.release + "(&empty[(t + STAGES - 1) % STAGES]);\n",
                  true)
     << "    wgmma_wait<0>();\n"
     // After the wait: an arrival between the last wgmmas and their wait made ptxas serialize
     // every wgmma of kernels whose step loop it unrolls whole (C7514).
     << (pp ? "    if (lane == 0) mbar_arrive(&turn[1 - wg]);  // this tile's wgmmas are done: the other's turn\n" : "")
     << "    if (lane == 0) " << r.release << "(&empty[(t + STAGES - 1) % STAGES]);  // the tile's last buffer\n"
     << "    #pragma unroll\n    for (int i = 0; i < MI; ++i)\n"
     << "      #pragma unroll\n      for (int r = 0; r < ACC; ++r) fence_operand(acc[i][r]);\n";
  emit_stream_fixup(os, w);
}

/// With epilogue_on_accumulators(): the epilogue applied to the consumer's accumulators, its
/// per-row operands loaded by emit_wgmma_row_loads().
void emit_wgmma_accumulator_epilogue(std::ostringstream& os, const WgmmaKernel& w, const std::string& indent) {
  if (!epilogue_on_accumulators(w.g, w.p)) return;
  emit_accumulator_epilogue(os, w.g, wgmma_accumulator_tiles(w, "row"), indent, true);
}

/// A tile's epilogue: the accumulators into the consumer's epilogue tile once the last tile's
/// stores have read it, then stored by TMA, bulk row copies or vectors; closes the walk and the
/// kernel.
void emit_persistent_epilogue(std::ostringstream& os, const WgmmaKernel& w, const PersistentRoles& r) {
  const ImplicitGemm& g = w.g;
  const ScheduleParams& p = w.p;
  emit_wgmma_accumulator_epilogue(os, w, "    ");
  os << "    // Epilogue: accumulators to the epilogue tile, once the last tile's stores have read it.\n"
     << (p.bulk_store == 1 ? "    bulk_wait_read();  // this thread's copies of the last tile have read Cs\n" : "")
     << (r.tma_stores ? "    if (" + r.issuer + ") bulk_wait_read<1>();  // the stores of the tile before last have read it\n" : "")
     << "    " << r.sync
     << (r.tma_stores ? "    " + r.cs + "* const Ct = Cs + (stored % 2) * CS_TILE;  // this tile's epilogue tile\n" : "")
     << w.clamp.offsets("    ")
     << "    #pragma unroll\n    for (int i = 0; i < MI; ++i)\n"
     << "      #pragma unroll\n      for (int j = 0; j < WN / 8; ++j) {\n"
     << w.clamp.position("        ");
  emit_accumulator_quad(os, w.c_row, r.cs == w.tacc ? "acc[i][4 * j + #]" : "(" + r.cs + ")acc[i][4 * j + #]",
                        w.clamp.r8(), w.clamp.c1(), r.tma_stores ? "Ct" : "");
  os << "      }\n";
  if (r.tma_stores)
    emit_tma_stores(os, g, p, w.c_row, r);
  else if (p.bulk_store)
    emit_bulk_stores(os, g, p, w.c_row, r, w.clamp.row_skip());
  else
    emit_vector_stores(os, g, p, r, w.tout, w.clamp);
  os << "  }\n"
     << (p.bulk_store ? "  bulk_wait_all();  // the copies are done before the block's shared memory goes\n" : "")
     << (w.pair ? "  cluster_sync();  // no block leaves while the other may still arrive on its barriers\n" : "") << "}\n";
}

/// The body of a persistent warp-specialized kernel (producer 2), from the mbarriers on: the
/// producer thread walks this block's tiles and their steps, filling the ring ahead; the
/// consumers walk the same tiles, multiply, release each buffer as its wgmmas retire, and store
/// each tile through an epilogue tile of their own (CS_OFFSET), synchronized among themselves
/// only, so that the producer runs into the next tile meanwhile. The n-th use of a buffer waits
/// for phase parity n % 2 over the whole walk.
/// In ping-pong (producer 3) consumer warpgroup wg takes every other of the block's tiles (the
/// block's tile 2j + wg) through an epilogue tile of its own, and the two take turns on the main
/// loop: each starts its wgmmas once the other's wgmmas of the tile before are done (turn[wg]),
/// so that one's epilogue overlaps the other's main loop. The turns also keep each consumer's
/// waits on the ring within one phase of its barriers: the stages of the tile before were all
/// filled.
void emit_persistent_loops(std::ostringstream& os, const WgmmaKernel& w) {
  const PersistentRoles roles(w.g, w.p);
  emit_persistent_producer(os, w, roles);
  emit_persistent_main_loop(os, w, roles);
  emit_persistent_epilogue(os, w, roles);
}

/// Accumulators to shared memory, then to the output; a pair waits for its partner.
void emit_wgmma_epilogue(std::ostringstream& os, const WgmmaKernel& w) {
  const ImplicitGemm& g = w.g;
  const ScheduleParams& p = w.p;
  const std::string &tacc = w.tacc, &tout = w.tout;
  const bool ws = w.ws, pair = w.pair, c_row = w.c_row;
  os << "  // Epilogue: accumulators to shared memory, then to the output.\n"
     << "  " << tacc << "* Cs = reinterpret_cast<" << tacc << "*>(smem);\n"
     << "  const int row = (threadIdx.x % 128) / 32 * 16 + lane / 4, col = (lane % 4) * 2;\n";
  if (epilogue_on_accumulators(g, p)) {
    if (ws) os << "  if (wg < CONSUMERS)\n";
    emit_wgmma_accumulator_epilogue(os, w, "  ");
  }
  os << w.clamp.offsets("  ")
     << (ws ? "  if (wg < CONSUMERS)\n" : "")
     << "  #pragma unroll\n  for (int i = 0; i < MI; ++i)\n"
     << "    #pragma unroll\n    for (int j = 0; j < WN / 8; ++j) {\n"
     << w.clamp.position("      ");
  emit_accumulator_quad(os, c_row, "acc[i][4 * j + #]", w.clamp.r8(), w.clamp.c1());
  os << "    }\n";
  EpilogueScope scope;
  if (w.alone) scope.barrier = "  consumer_sync();\n";
  scope.threads = w.epilogue_threads();
  scope.close = !pair;
  scope.sm_to_itself = wgmma_block_alone(g, p);  // else holding operands may cost a resident block
  scope.operands_early = block_loads_epilogue_early(g, p);  // loaded in emit_block_tiles()
  scope.row_skip = w.clamp.row_skip();
  emit_epilogue_stores(os, g, p, tacc, tout, scope);
  if (pair) os << "  cluster_sync();  // no block leaves while the other may still arrive on its barriers\n}\n";
}

KernelSource emit_wgmma(const ImplicitGemm& g, const ScheduleParams& p) {
  TMAP_CHECK(g.hw->family == "wgmma", "the wgmma emitter needs a wgmma abstraction");
  TMAP_CHECK(g.shape[Axis::kI] == 64, "wgmma kernels are written for m64 intrinsics");
  WgmmaKernel w(g, p);
  TMAP_CHECK(w.sa.bytes * g.shape[Axis::kK] == 32, "a wgmma step reads 32 bytes of k");
  configure_launch(w);
  std::ostringstream os;
  emit_header(os, g);
  os << float_type_includes(*g.compute) << "\n"
     << "namespace {\n";
  emit_common_constants(os, g, p, w.k.threads);
  emit_constants(os, w);
  emit_copy_setup(os, w);
  emit_cluster_helpers(os, p);
  emit_device_include(os, "wgmma");
  emit_wgmma_call(os, g, p);
  if (p.a_regs == 1) emit_a_fragment_loader(os, g, w.ta);
  if (!p.producer) {
    emit_operand_loader(os, g, p, 0);
    emit_operand_loader(os, g, p, 1);
  }
  const OutVector ov = out_vector(g, p);
  emit_output_scatter(os, g, w.tout, ov.width, ov.along);
  if (p.bulk_store) emit_output_address(os, g, w.tout);
  if (p.bulk_store == 2 && !g.compute->epilogue.empty() && !epilogue_on_accumulators(g, p))
    emit_epilogue_in_place(os, g, w.tout, ov.width, ov.along);
  emit_descriptor_offsets(os, w);
  os << "}  // namespace\n\n";
  emit_entry(os, w);
  bool staged = false;  // operands copied in shifted vectors: fetched into registers, stored later
  if (!w.ws) staged = emit_byte_stage_loads(os, g, p, w.k.threads, w.a_mn, w.b_mn, w.ta, w.tb);
  emit_compute_lambda(os, w);
  if (w.persistent) {
    emit_persistent_loops(os, w);
    w.k.code = os.str();
    return w.k;
  }
  if (w.ws) emit_warp_specialized_loop(os, w);
  else emit_cp_async_ring_loop(os, w, staged);
  emit_wgmma_epilogue(os, w);
  emit_split_reduce(os, w.g, w.k, w.tpart, w.tout);
  w.k.code = os.str();
  return w.k;
}

/// Whether `g`'s output may be stored by bulk copies under some schedule: fixed extents, operands
/// a TMA producer reads (validate_bulk_store() decides for each schedule; a fused epilogue is
/// applied before TMA stores only).
bool bulk_store_possible(const ImplicitGemm& g) { return !g.dynamic() && tma_operands(g); }

/// Whether lines narrower than 128 bytes (ScheduleParams::swizzle 2, 3) can do what 128-byte ones
/// cannot for `g`: hold its whole reduction in one line (K of at most 64 bytes), or read an im2col
/// input whose channels are not a whole number of 128-byte lines.
bool narrow_lines_help(const ImplicitGemm& g) {
  for (int which = 0; which < 2; ++which) {
    const int bytes = elem_bytes(which == 0 ? g.hw->a_dtype : g.hw->b_dtype);
    if (g.K * bytes <= 64) return true;
    Im2colView v;
    if (im2col_view(g, which, v).empty() && (v.channels * bytes) % 128) return true;
  }
  return false;
}

/// Operand `which` read by a TMA producer: a source TMA can read, im2col boxes of whole swizzle
/// lines and no K tail, and at most 256 rows a box.
void validate_tma_operand(const ImplicitGemm& g, const ScheduleParams& p, int which, std::vector<ScheduleIssue>& out) {
  auto fail = [&](std::string detail) { out.push_back({ScheduleError::kBadOption, std::move(detail)}); };
  const char* name = which == 0 ? "A" : "B";
  std::vector<TmaDim> dims;
  Im2colView im2col;
  const std::string why = tma_source(g, which, dims, &im2col);
  if (!why.empty()) fail("producer = " + std::to_string(p.producer) + " loads operands with TMA, but " + why);
  const int lb = line_bytes(p), bytes = elem_bytes(which == 0 ? g.hw->a_dtype : g.hw->b_dtype);
  if (why.empty() && im2col.rank && (im2col.channels * bytes) % lb)
    fail("swizzle = " + std::to_string(p.swizzle) + ": operand " + name + " is read in im2col boxes of one " +
         std::to_string(lb) + "-byte line of channels, and its " + std::to_string(im2col.channels) +
         " channels are not whole lines; use swizzle " + ((im2col.channels * bytes) % 64 ? "3" : "2"));
  if (why.empty() && im2col.rank && g.K % p.block_k)
    fail("block_k = " + std::to_string(p.block_k) + ": operand " + name + " is read in im2col boxes, "
         "which cannot zero a K tail; use a block_k dividing K = " + std::to_string(g.K));
  const StoredTile t = stored_tile(g, p, which);
  if (t.rows > 256)
    fail("producer = " + std::to_string(p.producer) + ": a TMA box has at most 256 rows, " + name + "'s tile " +
         std::to_string(t.rows));
}

/// Why TMA cannot store `p`'s epilogue tiles (bulk_store 2), "" where it can: the output must be a
/// TMA view along the tile's axes (output_tma_view()), the tile's rows whole 128-byte lines, at
/// most 256 of them, and a fused epilogue's vectors within the tile's 16-byte chunks.
std::string tma_store_refusal(const ImplicitGemm& g, const ScheduleParams& p) {
  const bool c_row = out_vector(g, p).along == 'n';
  std::vector<TmaDim> dims;
  const std::string view = output_tma_view(g, c_row, dims);
  const int line = 128 / persistent_epilogue_bytes_per_element(g);
  const int cols = c_row ? p.block_n : p.block_m, rows = c_row ? p.block_m : p.block_n;
  if (!view.empty()) return "TMA cannot store " + view;
  if (cols % line)
    return "the epilogue tile's rows of " + std::to_string(cols) + " elements are no whole 128-byte lines (" +
           std::to_string(line) + " elements)";
  if (rows > 256) return "a TMA box holds at most 256 rows, the epilogue tile " + std::to_string(rows);
  const int v = out_vector(g, p).width, chunk = 16 / persistent_epilogue_bytes_per_element(g);
  if (!g.compute->epilogue.empty() && (v < 2 || chunk % v))
    return "a fused epilogue is applied in the epilogue tile to vectors of 2 to " + std::to_string(chunk) +
           " outputs (one 16-byte chunk), not of " + std::to_string(v);
  return "";
}

/// Bulk stores (bulk_store 1, 2): a persistent kernel's own epilogue tile, holding the output's
/// dtype, whose rows lie in the output in contiguous, aligned runs (1) or TMA views (2) of fixed
/// extents.
void validate_bulk_store(const ImplicitGemm& g, const ScheduleParams& p, std::vector<ScheduleIssue>& out) {
  if (!p.bulk_store) return;
  const Compute& c = *g.compute;
  const int bits = dtype_bits(c.tensor_of(c.output).dtype);
  std::string why;
  if (!persistent(p))
    why = "only persistent kernels (producer 2 or 3) store through an epilogue tile of their own";
  else if (p.bulk_store == 1 && !c.epilogue.empty())
    why = "a fused epilogue reads its operands at each output's store";
  else if (g.dynamic())
    why = "the output's runs would follow a run-time size";
  else if (bits < 16 || persistent_epilogue_type(g) != storage_type(c.tensor_of(c.output).dtype))
    why = "the epilogue tile holds 16-bit outputs or the accumulators, not " + std::string(dtype_name(c.tensor_of(c.output).dtype));
  else if (p.bulk_store == 1 && !bulk_store_piece(g, p))
    why = "the output's tile rows are not contiguous, aligned runs of 16 bytes or more";
  else if (p.bulk_store == 2)
    why = tma_store_refusal(g, p);
  if (!why.empty())
    out.push_back({ScheduleError::kBadOption, "bulk_store = " + std::to_string(p.bulk_store) + ": " + why + "; use bulk_store 0"});
}

/// A pair of blocks multicasting the operand they share: tiled boxes of whole 16-row halves.
void validate_pair(const ImplicitGemm& g, const ScheduleParams& p, std::vector<ScheduleIssue>& out) {
  const int which = pair_shared_operand(p);
  const char* name = which == 0 ? "A" : "B";
  const std::string pair = "cluster = " + std::to_string(p.cluster) + " (a pair of blocks along " +
                           (which == 0 ? "n" : "m") + " sharing " + name + ")";
  std::vector<TmaDim> dims;
  const StoredTile t = stored_tile(g, p, which);
  if (!tma_view(g, which, dims).empty())
    out.push_back({ScheduleError::kBadOption, pair + ": " + name + " is read in im2col boxes, and a pair multicasts "
                   "tiled boxes only; use cluster " + (which == 0 ? "2 (sharing B)" : "3 (sharing A)") + " or 0"});
  else if (t.rows % 16)
    out.push_back({ScheduleError::kBadOption, pair + ": each block loads half of " + name + "'s " +
                   std::to_string(t.rows) + " tile rows, whole 8-row swizzle atoms each; use a tile whose rows "
                   "are a multiple of 16"});
}

/// The wgmma family's reasons against `p`'s producer: persistent and ping-pong kernels' tiles, and
/// the TMA boxes a producer loads (operand sources, im2col lines and K tails, box rows, a pair's
/// shared operand).
void validate_producer(const ImplicitGemm& g, const ScheduleParams& p, std::vector<ScheduleIssue>& out) {
  auto fail = [&](ScheduleError e, std::string detail) { out.push_back({e, std::move(detail)}); };
  if (persistent(p) && p.split_k != 1)
    fail(ScheduleError::kBadSplitK, "split_k = " + std::to_string(p.split_k) + ": a persistent kernel (producer = " +
                                        std::to_string(p.producer) + ") takes whole output tiles; use split_k 1");
  if (ping_pong(p) && (p.block_m != p.warp_m || p.block_n != p.warp_n))
    fail(ScheduleError::kBadOption, "producer = 3: each ping-pong consumer warpgroup multiplies whole tiles, so the "
                                    "block tile is the warpgroup's; use block_m = warp_m and block_n = warp_n");
  if (ping_pong(p) && pairs_blocks(p))
    fail(ScheduleError::kBadOption, "producer = 3 with cluster = " + std::to_string(p.cluster) +
                                        ": ping-pong consumers take tiles of their own, not a pair's; use cluster 0");
  if (stream_k(p) && (p.producer != 2 || pairs_blocks(p)))
    fail(ScheduleError::kBadOption, "stream_k = " + std::to_string(p.stream_k) + " with producer = " +
                                        std::to_string(p.producer) + ", cluster = " + std::to_string(p.cluster) +
                                        ": runs of steps are cut for a persistent kernel of single blocks; use "
                                        "producer 2 and cluster 0, or stream_k 0");
  if (!p.producer) return;
  for (int which = 0; which < 2; ++which) validate_tma_operand(g, p, which, out);
  if (pairs_blocks(p)) validate_pair(g, p, out);
}

class WgmmaFamily final : public EmitterFamily {
 public:
  std::string_view name() const override { return "wgmma"; }
  int ordinal() const override { return 2; }
  int threads_per_warp_tile(const ScheduleParams&) const override { return 128; }
  std::span<const KnobUse> knob_uses() const override {
    static constexpr KnobUse kUses[] = {{"swizzle", 0, 3}, {"producer", 0, 3}, {"a_regs", 0, 1}, {"cluster", 0, 3},
                                        {"uniform_wait", 0, 1}, {"bulk_store", 0, 2}, {"stream_k", 0, 2},
                                        {"epi_regs", 0, 1}};
    return kUses;
  }
  // The producer warpgroup, and in ping-pong the second consumer warpgroup (the block's one warp
  // tile is the first's).
  int extra_threads(const ScheduleParams& p) const override { return ping_pong(p) ? 256 : p.producer ? 128 : 0; }
  // A ping-pong block's tile is its consumer warpgroup's.
  std::vector<int> block_tiles(const ImplicitGemm& g, const ScheduleParams& p, char axis) const override {
    if (ping_pong(p)) return {axis == 'm' ? p.warp_m : p.warp_n};
    return EmitterFamily::block_tiles(g, p, axis);
  }
  KernelSource emit(const ImplicitGemm& g, const ScheduleParams& p) const override { return emit_wgmma(g, p); }

  void validate(const ImplicitGemm& g, const ScheduleParams& p, const DeviceLimits& limits,
                std::vector<ScheduleIssue>& out) const override {
    auto fail = [&](ScheduleError e, std::string detail) { out.push_back({e, std::move(detail)}); };
    if (pairs_blocks(p) && !tma_operands(g))
      fail(ScheduleError::kBadOption, "cluster = " + std::to_string(p.cluster) + ": only wgmma kernels whose operands "
                                      "both have TMA sources share tiles in a cluster; use 0");
    if (p.uniform_wait && !p.producer)
      fail(ScheduleError::kBadOption, "uniform_wait = 1 without a TMA producer: only consumers of the producer's "
                                      "ring wait on stages; use producer 1 or 2, or uniform_wait 0");
    if (limits.compute_capability != 0 && limits.compute_capability != 90)
      fail(ScheduleError::kBadOption, "wgmma.mma_async exists on sm_90 (H100, H200) only, not on sm_" +
                                          std::to_string(limits.compute_capability) +
                                          "; use the mma_sync or wmma abstractions there");
    if (p.swizzle < 1 || p.smem_pad != 0)
      fail(ScheduleError::kBadOption, "swizzle = " + std::to_string(p.swizzle) + ", smem_pad = " +
                                          std::to_string(p.smem_pad) +
                                          ": wgmma reads swizzled tiles only (swizzle 1, 2 or 3: 128-, 64- or "
                                          "32-byte lines; smem_pad 0)");
    // cp.async copies run STAGES - 2 steps ahead, each step waiting on its group by count; a TMA
    // producer's ring waits on each buffer's barriers, so any depth the shared memory holds works.
    if (p.stages < 3 || p.stages > (p.producer ? kMaxProducerStages : 6))
      fail(ScheduleError::kBadStages, "stages = " + std::to_string(p.stages) +
                                          ": the wgmma ring needs 3 to 6 buffers (one read by wgmma, one "
                                          "retiring, the rest in flight), up to " +
                                          std::to_string(kMaxProducerStages) + " with a TMA producer");
    if (p.warp_n > 256 || (g.hw->a_dtype == DType::kInt8 && p.warp_n > 32 && p.warp_n % 16))
      fail(ScheduleError::kTileNotMultipleOfIntrinsic,
           "warp_n = " + std::to_string(p.warp_n) + ": wgmma's N runs from 8 to 256 (multiples of 16 above 32 for int8)");
    const int acc_regs = (p.warp_m / 64) * p.warp_n / 2, operand_regs = operand_registers(g, p);
    const int most_acc = consumers_alone(g, p) ? kMaxAccumulators : kEvenAccumulators;
    if (acc_regs > most_acc)
      fail(ScheduleError::kBadOption,
           "a " + std::to_string(p.warp_m) + " x " + std::to_string(p.warp_n) + " warpgroup tile holds " +
               std::to_string(acc_regs) + " accumulator registers per thread (at most " + std::to_string(most_acc) +
               (most_acc < kMaxAccumulators ? "; up to " + std::to_string(kMaxAccumulators) +
                                                  " with producer 1 and two consumer warpgroups"
                                            : std::string()) +
               ")");
    // The accumulators and about 40 registers of addresses and loop state must fit in a consumer
    // thread's share of the 64K-register file (ptxas refuses wgmma otherwise), after the
    // producer's setmaxnreg where register_split() rebalances.
    const int threads = block_threads(g, p);
    const RegisterSplit regs = register_split(g, p);
    if (acc_regs <= most_acc && operand_regs + 40 > regs.consumer)
      fail(ScheduleError::kTooManyThreads,
           std::to_string(threads) + " threads leave " + std::to_string(regs.consumer) + " registers a " +
               (regs.rebalanced ? "consumer thread (the producer warpgroup keeping " + std::to_string(kProducerRegs) + ")"
                                : std::string("thread")) +
               ", too few for " + std::to_string(acc_regs) + " accumulators" +
               (p.a_regs == 1 ? " and " + std::to_string(operand_regs - acc_regs) + " registers of A fragments (a_regs 1)"
                              : std::string()) +
               "; use fewer or smaller warpgroup tiles" + (p.a_regs == 1 ? ", a smaller block_k or a_regs 0" : ""));
    // Two sets of A fragments beyond 64 registers: ptxas serialized the wgmmas of such a kernel
    // (int8, 128 x 64 warpgroup tiles, 256-byte k steps: C7520) around its register moves.
    if (p.a_regs == 1 && operand_regs - acc_regs > 64)
      fail(ScheduleError::kBadOption, "a_regs = 1: " + std::to_string(operand_regs - acc_regs) +
                                          " registers of A fragments (two sets of " + std::to_string(p.warp_m / 64) +
                                          " m64 accumulators x " + std::to_string(p.block_k / g.shape[Axis::kK]) +
                                          " k steps x 4), at most 64; use a smaller block_k or warp_m");
    for (int which = 0; which < 2; ++which) {
      const StoredTile t = stored_tile(g, p, which);
      const char* name = which == 0 ? "A" : "B";
      if (p.block_k % line(t, p))
        fail(ScheduleError::kMisalignedRows, "block_k = " + std::to_string(p.block_k) + ": " + name + " is swizzled in " +
                                                 std::to_string(line_bytes(p)) + "-byte lines of " +
                                                 std::to_string(line(t, p)) +
                                                 " elements of k; use a multiple");
      if (!stored_along_mn(g, which)) continue;
      if (t.bytes != 2)
        fail(ScheduleError::kBadOption, std::string(name) + " stored along " + (which == 0 ? "m" : "n") + " (layout " +
                                            g.layout + ") needs wgmma's transpose, which 16-bit operands have only");
      const int extent = which == 0 ? p.warp_m : p.warp_n;
      if (extent % line(t, p))
        fail(ScheduleError::kTileNotMultipleOfIntrinsic,
             std::string(which == 0 ? "warp_m" : "warp_n") + " = " + std::to_string(extent) + ": " + name +
                 " stored along " + (which == 0 ? "m" : "n") + " is read in blocks of " + std::to_string(line(t, p)) +
                 " (one " + std::to_string(line_bytes(p)) + "-byte line); use a multiple");
    }
    validate_producer(g, p, out);
    validate_bulk_store(g, p, out);
  }

  std::int64_t shared_bytes(const ImplicitGemm& g, const ScheduleParams& p) const override {
    return wgmma_shared_bytes(g, p);
  }

  ScheduleParams default_schedule(const ImplicitGemm& g, const DeviceLimits& limits) const override {
    ScheduleParams p;
    // The narrowest swizzled line that holds the whole reduction where it is short (K of 16 or 32
    // 16-bit elements), so that no stage carries zeros past it; 128-byte lines otherwise.
    const std::int64_t k_bytes = g.K * elem_bytes(g.hw->a_dtype);
    p.swizzle = k_bytes <= 32 ? 3 : k_bytes <= 64 ? 2 : 1;
    const int w = line_bytes(p) / elem_bytes(g.hw->a_dtype);  // elements per line
    p.warp_m = 64;
    p.block_m = g.M > 64 ? 128 : 64;
    p.warp_n = g.N >= 256 ? 256 : g.N >= 128 ? 128 : g.N > 32 ? 64 : static_cast<int>(round_up(g.N, 16));
    if (stored_along_mn(g, 1)) p.warp_n = static_cast<int>(round_up(p.warp_n, w));
    if (g.hw->a_dtype == DType::kInt8 && p.warp_n > 128) p.warp_n = 128;  // keeps 2 x 64 accumulators
    p.block_n = p.warp_n;
    p.block_k = w;
    p.panels = 0;
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
    // A TMA producer warpgroup wherever both operands are strided views of their tensors: on the
    // H100 it takes GEMM 4096^3 from 587 to 674 TFLOP/s with these tiles.
    // Im2col sources (convolution inputs) are searched (choices()) but not yet the default.
    std::vector<TmaDim> dims;
    p.producer = tma_view(g, 0, dims).empty() && tma_view(g, 1, dims).empty() ? 1 : 0;
    while (p.stages > 3 && shared_bytes(g, p) > limits.max_shared_bytes) --p.stages;
    return p;
  }

  /// The instruction's N: the usual widths, and N itself rounded up to 16 where it is no wider
  /// than one instruction, so that a short N (a decode step's tokens on the swapped product, e.g.
  /// 100 or 200) is not padded to the next of the usual widths. Where N is a range's size, that of
  /// the sample being tuned (none for the range itself): a 208-wide kernel of the range serves 200
  /// in one tile and larger sizes in two, and the buckets take it where it is the fastest.
  /// Beside them, the widths whose tiles fill a wave (add_wave_widths).
  static std::vector<Choice> warp_n_choices(const ImplicitGemm& g, const DeviceLimits& limits) {
    std::vector<Choice> out = {16, 32, 64, 96, {128, 2}, 192, {256, 2}};
    const bool ranged = g.dynamic() && g.dynamic_axis == 'n';
    const std::int64_t n = ranged ? g.compute->dynamic.at * g.per_size : g.N;
    if (n > 0) offer_width(round_up(n, 16), out);
    add_wave_widths(g, limits, out);
    return out;
  }

  /// `width` among the instruction's widths, unless it is there already or wider than one wgmma.
  static void offer_width(std::int64_t width, std::vector<Choice>& out) {
    const bool listed = std::any_of(out.begin(), out.end(), [&](const Choice& c) { return c.value == width; });
    if (width <= 256 && !listed) out.push_back(static_cast<int>(width));
  }

  /// Instruction widths that fill one wave of blocks: for each block_m, the narrowest width whose
  /// tiles, with the M tiles and the batch, are no more blocks than the GPU has SMs
  /// (DeviceLimits::sms()), in the steps that B's tiles allow (a 128-byte line where B is stored
  /// along n, else 16). The usual widths can leave a quarter of the SMs idle: bert_qkv
  /// (512 x 2304) in 64 x 192 tiles is 96 blocks; as the swapped product in 192 x 48 tiles, 132.
  /// Fixed extents only: a range's tile count varies with its size.
  static void add_wave_widths(const ImplicitGemm& g, const DeviceLimits& limits, std::vector<Choice>& out) {
    const int sms = limits.sms();
    if (g.dynamic() || sms == 0) return;
    const std::int64_t step = stored_along_mn(g, 1) ? 128 / elem_bytes(g.hw->b_dtype) : 16;
    for (const std::int64_t bm : {64, 128, 192, 256}) {
      const std::int64_t n_tiles = sms / ((g.M + bm - 1) / bm * g.batch);
      if (n_tiles < 2) continue;
      offer_width(round_up((g.N + n_tiles - 1) / n_tiles, step), out);
    }
  }

  KnobChoices choices(const ImplicitGemm& g, const ScheduleParams&, const DeviceLimits& limits) const override {
    const int w = 128 / elem_bytes(g.hw->a_dtype);  // elements per 128-byte line
    // The 64- and 32-byte lines (and the block_k of one or two wgmma k steps they allow) only where
    // 128-byte ones fall short: a reduction shorter than a line, or an im2col input whose channels
    // are no whole number of 128-byte lines. Elsewhere they are only slower.
    const bool narrow = narrow_lines_help(g);
    KnobChoices c;
    c.set("block_m", {64, {128, 2}, 192, 256})
        // 96: a decode GEMM's weights in 64 tiles of 96 rows fill the SMs in one wave (docs/design-notes.md).
        .set("block_n", {16, 32, 64, 96, {128, 2}, 192, {256, 2}})
        // Whole lines (w / 4: one wgmma's k).
        .set("block_k", narrow ? std::vector<Choice>{w / 4, w / 2, {w, 2}, 2 * w} : std::vector<Choice>{{w, 2}, 2 * w})
        .set("warp_m", {{64, 2}, 128})  // m64 accumulators per warpgroup
        .set("warp_n", warp_n_choices(g, limits))  // the instruction's N
        // Eight to twelve buffers only where a TMA producer fills the ring (validation refuses them
        // otherwise): narrow tiles that stream one operand from memory need them in flight.
        .set("stages", {3, {4, 2}, 5, 6, 8, 10, 12})
        .set("smem_pad", {0})  // swizzled
        .set("split_k", {{1, 3}, 2, 3, 4, 6, 8, 12, 16})
        // The splits summed by a second kernel, or by the tile's last block (slower where measured).
        .set("split_reduce", {{0, 3}, 1})
        // A residual asked of L2 when the tile starts, where the epilogue reads one.
        .set("epi_prefetch", epilogue_has_full_shape_operand(g) ? std::vector<Choice>{0, 1} : std::vector<Choice>{0})
        // The epilogue on the accumulators, where its operands allow it.
        .set("epi_regs", epilogue_fits_accumulators(g) ? std::vector<Choice>{0, 1} : std::vector<Choice>{0})
        .set_each("vec_a", powers_up_to(max_vector_width(g, 0)))
        .set_each("vec_b", powers_up_to(max_vector_width(g, 1)))
        .set("unroll", {0, 1})  // of the gathers
        .set("raster", {1, 2, 4, 8})
        .set("async_copy", {0, {1, 2}})
        .set("swizzle", narrow ? std::vector<Choice>{1, 2, 3} : std::vector<Choice>{1})  // 128-, 64-, 32-byte lines
        // A TMA warp-specialized producer (2: persistent, 3: persistent ping-pong) where the
        // operands allow one.
        .set("producer", tma_operands(g) ? std::vector<Choice>{0, {1, 2}, {2, 2}, 3} : std::vector<Choice>{0})
        // A from registers is level with A by descriptor on large GEMMs and slower on
        // convolutions: one draw in 8.
        .set("a_regs", {{0, 7}, {1, 1}})
        // Warp-uniform waits unserialize short reductions' wgmmas but slowed some long ones.
        .set("uniform_wait", {{0, 3}, 1})
        // Asynchronous stores of persistent kernels' tiles (docs/design-notes.md): row copies (1)
        // were level or slower than vector stores, TMA stores (2) up to 29% faster on the same
        // tiles. A fused epilogue goes with TMA stores only, which were 5-23% slower than vector
        // stores on the fused batch-16 table's persistent tiles: one draw in five.
        .set("bulk_store", !bulk_store_possible(g)          ? std::vector<Choice>{0}
                           : g.compute->epilogue.empty() ? std::vector<Choice>{{0, 3}, 1, {2, 2}}
                                                         : std::vector<Choice>{{0, 4}, 2})
        // Stream-K for persistent kernels of single blocks (sample() clears it elsewhere): one
        // draw in eight, as it lost to whole tiles or split-K on every shape measured so far
        // (docs/design-notes.md, "Stream-K").
        .set("stream_k", tma_operands(g) ? std::vector<Choice>{{0, 14}, 1, 2} : std::vector<Choice>{0});
    // Split-K summed in a cluster, and pairs of blocks sharing an operand tile (no faster than
    // single blocks where measured: a third of the draws without splits; sample() turns a 1
    // without splits into 0, and 2 or 3 with splits into 0 or 1).
    if (limits.compute_capability >= 90)
      c.set("cluster", tma_operands(g) ? std::vector<Choice>{{0, 2}, {1, 2}, 2, 3} : std::vector<Choice>{0, 1});
    return c;
  }

  // (WM / 64) x (WN / 8) m64n8 fragments: 4 registers each, at most kMaxAccumulators.
  int max_fragments_per_warp(const ImplicitGemm&) const override { return kMaxAccumulators / 4; }
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
