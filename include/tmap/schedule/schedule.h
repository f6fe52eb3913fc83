// What a schedule (knobs.h) implies for a virtual GEMM, shared by the families and the tuner:
// the device limits it must fit, the reasons it can be refused, its relayout view and how its
// operands are copied. Validation itself asks the family (tmap/codegen/validate.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tmap/gemm/contiguity.h"
#include "tmap/gemm/implicit_gemm.h"
#include "tmap/schedule/knobs.h"

namespace tmap {

/// Whether the kernel runs as pairs of blocks sharing an operand tile (ScheduleParams::cluster 2:
/// along m, sharing B; 3: along n, sharing A), and which operand they share (-1: none).
inline bool pairs_blocks(const ScheduleParams& p) { return p.cluster == 2 || p.cluster == 3; }
inline int pair_shared_operand(const ScheduleParams& p) { return p.cluster == 2 ? 1 : p.cluster == 3 ? 0 : -1; }
/// The tile along `axis` ('m' or 'n') of a pair of blocks, or of one block where no pair runs along it.
inline std::int64_t pair_tile(const ScheduleParams& p, char axis) {
  return axis == 'm' ? std::int64_t{p.block_m} * (p.cluster == 2 ? 2 : 1)
                     : std::int64_t{p.block_n} * (p.cluster == 3 ? 2 : 1);
}

nlohmann::json to_json(const ScheduleParams& p);
/// Reads parameters from JSON, one key per knob (knobs.def); keys not given keep their defaults;
/// unknown keys and non-integer values are user errors.
ScheduleParams schedule_from_json(const nlohmann::json& j, const ScheduleParams& defaults = {});

/// The most splits the last block of a tile sums (ScheduleParams::split_reduce): it holds every
/// split's load of an element in registers at once.
constexpr int kMaxLastBlockSplits = 64;
/// The most splits one thread block cluster sums (ScheduleParams::cluster): the portable
/// cluster size, which every sm_90 GPC can hold whatever the blocks' shared memory.
constexpr int kMaxClusterSplits = 8;

/// The SMs of an H100 or H200 (SXM), the most of any sm_90 part: the count assumed for sm_90 where
/// no GPU says (DeviceLimits::sms(), DeviceModel::for_arch) and the most blocks a stream-K kernel runs.
constexpr int kSm90Sms = 132;

/// What the schedule may use on the target device.
struct DeviceLimits {
  int max_threads_per_block = 1024;
  std::int64_t max_shared_bytes = 227 * 1024;  ///< The opt-in maximum per block (sm_90).
  int sm_count = 0;  ///< Streaming multiprocessors; 0 when unknown (no GPU, --arch).
  int compute_capability = 0;  ///< e.g. 90; 0 when unknown.
  static DeviceLimits for_arch(int compute_capability);
  /// sm_count, or where no GPU gave it kSm90Sms on sm_90; 0 when neither is known.
  int sms() const { return sm_count > 0 ? sm_count : compute_capability >= 90 ? kSm90Sms : 0; }
};

std::string_view message(ScheduleError e);

struct ScheduleIssue {
  ScheduleError error;
  std::string detail;
};

/// The GEMM a schedule's kernel computes: `g`, or with p.relayout when `g` is not yet a relayout
/// view, its view, built in `storage` (a UserError when relayout_view() refuses it).
const ImplicitGemm& gemm_for(const ImplicitGemm& g, const ScheduleParams& p, ImplicitGemm& storage);
/// gemm_for() without the throw: `g` or its view (built in `storage`), or nullptr with the
/// reason in `why_not` when the view is not offered.
const ImplicitGemm* gemm_view_for(const ImplicitGemm& g, const ScheduleParams& p, ImplicitGemm& storage,
                                  std::string& why_not);

/// Whether operand `which`'s vectors of p.vec_{a,b} elements are shifted into place through
/// registers (wider than operand_contiguity().aligned).
bool copies_shifted(const ImplicitGemm& g, const ScheduleParams& p, int which);
/// Whether operand `which` is copied in strided vectors: shifted (copies_shifted) and strided
/// (operand_contiguity().step 2), every other element of the two aligned vectors read.
bool copies_strided(const ImplicitGemm& g, const ScheduleParams& p, int which);
/// Elements per aligned vector that a shifted copy of operand `which` reads from memory: its own
/// width (p.vec_{a,b}), or for a strided operand operand_contiguity().load.
int shifted_load_width(const ImplicitGemm& g, const ScheduleParams& p, int which);

/// Whether operand `which` (0 = A, 1 = B) is copied global -> shared with cp.async: async_copy
/// is on and the operand is loaded in vectors of 4, 8 or 16 bytes, the sizes cp.async copies,
/// that need no shift. Other operands of an async_copy kernel are gathered through registers.
bool copies_async(const ImplicitGemm& g, const ScheduleParams& p, int which);

/// Elements along one stored row of operand `which`'s shared tile (0 = A, 1 = B): block_k for
/// row-major A ([BM][BK]), block_m for column-major A ([BK][BM]); block_n or block_k for B.
std::int64_t stored_row_length(const ImplicitGemm& g, const ScheduleParams& p, int which);

}  // namespace tmap
