// Validation of a schedule (knobs.h) against the virtual GEMM, its family and the device, and
// the layout facts the families and the tuner share. An invalid schedule is data with reasons,
// never compiled.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tmap/codegen/implicit_gemm.h"
#include "tmap/schedule/knobs.h"

namespace tmap {

/// Whether the kernel runs as pairs of blocks sharing an operand tile (ScheduleParams::cluster 2:
/// along m, sharing B; 3: along n, sharing A), and which operand they share (-1: none).
inline bool pairs_blocks(const ScheduleParams& p) { return p.cluster == 2 || p.cluster == 3; }
inline int pair_shared_operand(const ScheduleParams& p) { return p.cluster == 2 ? 1 : p.cluster == 3 ? 0 : -1; }

nlohmann::json to_json(const ScheduleParams& p);
/// Reads parameters from JSON, one key per knob (knobs.def); keys not given keep their defaults;
/// unknown keys and non-integer values are user errors.
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
