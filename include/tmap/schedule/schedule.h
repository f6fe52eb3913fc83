// Schedule parameters of an implicit-GEMM kernel, and their validation against the intrinsic
// and the device. An invalid schedule is data with reasons, never compiled.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tmap/codegen/implicit_gemm.h"

namespace tmap {

struct ScheduleParams {
  int block_m = 64, block_n = 64, block_k = 32;  ///< Thread-block tile of the virtual GEMM.
  int warp_m = 32, warp_n = 32;                  ///< Warp tile (a multiple of the intrinsic's m, n).
  /// Shared-memory buffers: 1, 2 (double buffering), or more with async_copy (a cp.async ring
  /// of up to 4 stages for wmma, 5 for mma_sync).
  int stages = 2;
  int smem_pad = 8;                              ///< Elements added to each shared-memory row.
  int split_k = 1;  ///< Splits of the reduction, summed by a second kernel (or a cluster) when > 1.
  /// Shared operand tiles as panels one fragment wide (1) instead of padded rows (0): every
  /// fragment then starts 32-byte aligned, which int8 and 8-wide fragments need.
  int panels = 0;
  /// Elements per global load of A and B: 1 (scalar) or a power of two up to 16 bytes, where
  /// the operand is contiguous and aligned along the shared tile's rows (see max_vector_width).
  int vec_a = 1, vec_b = 1;
  int unroll = 1;  ///< 1: unroll the gather and fragment loops; 0: keep them rolled.
  /// Block rasterization: consecutive blocks walk `raster` rows of M tiles column by column, so
  /// that blocks running together share operand tiles in L2. 1 is plain row order.
  int raster = 1;
  /// 1: vector operands are copied global -> shared with cp.async (sm_80+), so the next tile's
  /// copies overlap the current tile's math instead of staging through registers.
  int async_copy = 0;
  /// 1: shared operand tiles XOR-swizzled in 16-byte chunks (chunk ^ (128-byte line % 8)), so
  /// that ldmatrix and the 16-byte copies meet no bank conflicts without padding (mma_sync, and
  /// wgmma, which reads swizzled tiles only). wgmma also takes 2 and 3: tiles swizzled in 64- or
  /// 32-byte lines (the descriptors' and TMA's narrower modes), for reductions shorter than 128
  /// bytes a stage.
  int swizzle = 0;
  /// 1: warp-specialized (wgmma): one producer warpgroup loads the operand tiles with TMA into a
  /// ring of `stages` buffers guarded by mbarriers while the other warpgroups multiply; 0: every
  /// thread gathers operand tiles between the math. 2: the same, persistent: each block loops
  /// over output tiles (about one block per SM), its producer filling the ring with the next
  /// tile's operands while the consumers finish the last one and store it from an epilogue tile
  /// of its own (split_k 1).
  int producer = 0;
  /// Threads that share one output's reduction (SIMT): each sums every k_lanes-th slice of k, and
  /// the partial sums meet by warp shuffles. A power of two up to 32; 1 for the other families.
  int k_lanes = 1;
  /// 1: the image operand of a sliding-window computation (a depthwise convolution's input) is
  /// staged once per block as the input window its outputs read, and every filter tap reads it
  /// from shared memory; 0: im2col tiles, one element per output and tap, step by step. The
  /// SIMT family only, on mappings of the window's outputs to m and its taps to k (see
  /// EmitterFamily::stages_windows). block_n then counts the batch entries (channels) a block
  /// takes, and the warp tile is one thread's run of warp_m outputs along a row.
  int window = 0;
  /// 1 (wgmma): operand A is loaded from its shared tile into registers with ldmatrix (.trans
  /// where it is stored along m) and multiplied in wgmma's register form (A in registers, B by
  /// descriptor), each step into one of two register sets by the step's parity so that the
  /// previous step's wgmmas may still read the other; 0: both operands read by descriptor. Where
  /// A is transformed on its way to the tensor cores (a fused prologue), only this form can do it.
  int a_regs = 0;
  /// 1: read the operands from channels-last copies that a prologue kernel makes on every run
  /// (relayout_view(): an NCHW convolution's input as NHWC, its KCRS filters as KRSC), so that
  /// their reduction axis is contiguous; 0: read them in place. Only where relayout_view() offers it.
  int relayout = 0;
  /// Thread block clusters (sm_90). 1 (split_k of 2 to 8, families with
  /// EmitterFamily::sums_splits_in_clusters()): the split_k blocks of one output tile run as a
  /// cluster and sum their partial results through distributed shared memory, each block a share
  /// of the tile, so that no partial sums go through global memory and no reduce kernel follows
  /// (0: the reduce kernel sums them). 2 and 3 (split_k 1, a TMA producer, families with
  /// EmitterFamily::shares_operands_in_clusters()): two blocks of neighbouring output tiles run as
  /// a cluster, along m (2) sharing their B tile or along n (3) sharing A; each block's producer
  /// loads half of every shared stage and multicasts it into both blocks' shared memory, halving
  /// that operand's reads from L2. 0: none.
  int cluster = 0;
  bool operator==(const ScheduleParams&) const = default;
};

/// Whether the kernel runs as pairs of blocks sharing an operand tile (ScheduleParams::cluster 2:
/// along m, sharing B; 3: along n, sharing A), and which operand they share (-1: none).
inline bool pairs_blocks(const ScheduleParams& p) { return p.cluster == 2 || p.cluster == 3; }
inline int pair_shared_operand(const ScheduleParams& p) { return p.cluster == 2 ? 1 : p.cluster == 3 ? 0 : -1; }

nlohmann::json to_json(const ScheduleParams& p);
/// Reads parameters from JSON; keys not given keep their defaults; unknown keys and non-integer
/// values are user errors.
ScheduleParams schedule_from_json(const nlohmann::json& j, const ScheduleParams& defaults = {});

/// The most splits one thread block cluster sums (ScheduleParams::cluster): the portable
/// cluster size, which every sm_90 GPC can hold whatever the blocks' shared memory.
constexpr int kMaxClusterSplits = 8;

/// What the schedule may use on the target device.
struct DeviceLimits {
  int max_threads_per_block = 1024;
  std::int64_t max_shared_bytes = 227 * 1024;  ///< The opt-in maximum per block (sm_90).
  int sm_count = 0;  ///< Streaming multiprocessors; 0 when unknown (no GPU, --arch).
  int compute_capability = 0;  ///< e.g. 90; 0 when unknown.
  static DeviceLimits for_arch(int compute_capability);
};

enum class ScheduleError {
  kTileNotMultipleOfIntrinsic,
  kBlockNotMultipleOfWarp,
  kTooManyThreads,
  kSharedMemoryExceeded,
  kBadStages,
  kBadOption,
  kBadVector,
  kBadAsyncCopy,
  kMisalignedRows,
  kMisalignedFragments,
  kBadSplitK,
  kGridTooLarge,
};
std::string_view message(ScheduleError e);

struct ScheduleIssue {
  ScheduleError error;
  std::string detail;
};

/// Every reason the schedule is invalid for this GEMM on this device (empty when valid): the
/// checks common to every family, then the family's own (EmitterFamily::validate). With
/// p.relayout, `g` is checked through its relayout view (gemm_for()).
std::vector<ScheduleIssue> validate(const ImplicitGemm& g, const ScheduleParams& p, const DeviceLimits& limits);

/// The GEMM a schedule's kernel computes: `g`, or with p.relayout when `g` is not yet a relayout
/// view, its view, built in `storage` (a UserError when relayout_view() refuses it).
const ImplicitGemm& gemm_for(const ImplicitGemm& g, const ScheduleParams& p, ImplicitGemm& storage);

/// How far consecutive values of a virtual axis stay together in an operand's tensor.
///
/// Fused: the axis's innermost iterators index the tensor's innermost dimensions one each, alone,
/// with coefficient 1 and no offset, every dimension but the outermost of the run as large as its
/// iterator (so (c, r, s) of KCRS weights, or (p, q) of an NCHW 1x1 input, run on contiguously).
/// A group of `width` such values starting at a multiple of `width` is then contiguous, aligned
/// and wholly inside the tensor: one vector of `width` elements.
///
/// Shifted: the innermost iterator indexes the last dimension with coefficient 1 but beside other
/// terms and a constant, as q*1 + s - pad of an NCHW input. A group is still contiguous, but
/// starts at an offset that the other iterators move (and may straddle the padding): it is loaded
/// as the two aligned vectors that cover it, zero where they lie outside the dimension, and
/// shifted into place in registers. Those terms' coefficients and the constant, when all are
/// multiples of a power of two, leave groups that wide aligned: `aligned` is the widest group
/// loadable without the shift (and with cp.async).
///
/// Strided: the innermost iterator indexes the last dimension with coefficient 2, as 2*q + s - pad
/// of a stride-2 convolution's input. A group of `width` values spans 2 * width - 1 elements: it
/// is loaded as the two aligned vectors of `load` elements that cover it (`load` divides the
/// dimension, so each lies wholly inside or outside it), and every other element is picked out in
/// registers. Never aligned (`aligned` is 1); `width` is at most half of `load`, and at least
/// 4 bytes or 1.
struct Contiguity {
  int width = 1;    ///< Elements per vector, at most 16 bytes.
  int aligned = 1;  ///< The widest vector (<= width) that needs no shift.
  int step = 1;     ///< Elements between a vector's consecutive values in memory (2: strided).
  int load = 0;     ///< Strided: elements per aligned vector read (0 otherwise).
};
Contiguity contiguity(const Compute& c, const Access& acc, const std::vector<int>& axis, int bits);

/// The contiguity of operand `which` (0 = A, 1 = B) along its shared tile's rows (k for
/// row-major A, m for column-major A, n for row-major B, k for column-major B); sub-byte operands
/// are gathered in packed pairs, never in vectors.
Contiguity operand_contiguity(const ImplicitGemm& g, int which);
/// operand_contiguity(g, which).width: the widest vector (elements) the operand can be loaded in.
int max_vector_width(const ImplicitGemm& g, int which);
/// Whether operand `which`'s vectors of p.vec_{a,b} elements are shifted into place through
/// registers (wider than operand_contiguity().aligned).
bool copies_shifted(const ImplicitGemm& g, const ScheduleParams& p, int which);
/// Whether operand `which` is copied in strided vectors: shifted (copies_shifted) and strided
/// (operand_contiguity().step 2), every other element of the two aligned vectors read.
bool copies_strided(const ImplicitGemm& g, const ScheduleParams& p, int which);
/// Elements per aligned vector that a shifted copy of operand `which` reads from memory: its own
/// width (p.vec_{a,b}), or for a strided operand operand_contiguity().load.
int shifted_load_width(const ImplicitGemm& g, const ScheduleParams& p, int which);

/// The widest group (elements, up to 16 bytes of `bits`-bit elements) of consecutive values of
/// virtual axis `axis` that is contiguous and aligned in `acc`'s tensor without a shift (the
/// output's vectors: contiguity(...).aligned).
int contiguous_width(const Compute& c, const Access& acc, const std::vector<int>& axis, int bits);

/// Whether operand `which` (0 = A, 1 = B) is copied global -> shared with cp.async: async_copy
/// is on and the operand is loaded in vectors of 4, 8 or 16 bytes, the sizes cp.async copies,
/// that need no shift. Other operands of an async_copy kernel are gathered through registers.
bool copies_async(const ImplicitGemm& g, const ScheduleParams& p, int which);

/// Whether the rows of operand `which`'s shared tile run along m (A) or n (B) rather than along
/// k: A stored [BK][BM] (layout "t.."), B stored [BK][BN] (layout ".n."). Such an operand is read
/// transposed by ldmatrix.trans and wgmma's transpose bit.
bool stored_along_mn(const ImplicitGemm& g, int which);

/// Elements along one stored row of operand `which`'s shared tile (0 = A, 1 = B): block_k for
/// row-major A ([BM][BK]), block_m for column-major A ([BK][BM]); block_n or block_k for B.
std::int64_t stored_row_length(const ImplicitGemm& g, const ScheduleParams& p, int which);

/// Threads per block: warp tiles per block x the family's threads per warp tile.
int block_threads(const ImplicitGemm& g, const ScheduleParams& p);

/// Shared memory the kernel uses, in bytes (the family's layout: padding, panels, swizzle).
std::int64_t shared_bytes(const ImplicitGemm& g, const ScheduleParams& p);

/// A sensible schedule for a GEMM (the family's choice of tiles, valid for the device); when the
/// SM count is known and the output tiles would leave SMs idle, the reduction is split until
/// there are about two blocks per SM.
ScheduleParams default_schedule(const ImplicitGemm& g, const DeviceLimits& limits);

}  // namespace tmap
