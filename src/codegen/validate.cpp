#include "tmap/codegen/validate.h"

#include <algorithm>
#include <limits>
#include <string>

#include "tile_pipeline.h"
#include "tmap/codegen/emitter.h"

namespace tmap {
namespace {

/// The most registers a thread holds shifted vectors in between their load and their store.
constexpr std::int64_t kMaxStagedRegisters = 64;

/// "0 or 1", "0, 1 or 2", "1 to 32".
std::string values_text(int lo, int hi) {
  if (lo == hi) return std::to_string(lo);
  if (hi - lo > 2) return std::to_string(lo) + " to " + std::to_string(hi);
  std::string s = std::to_string(lo);
  for (int v = lo + 1; v < hi; ++v) s += ", " + std::to_string(v);
  return s + " or " + std::to_string(hi);
}

/// The families that take `knob` at `value`, for messages: "wgmma", "mma_sync, wgmma and simt".
std::string takers(const Knob& knob, int value) {
  std::vector<std::string> names;
  for (const auto& [family, use] : knob_users(knob))
    if (use.min <= value && value <= use.max) names.emplace_back(family->name());
  if (names.empty()) return "no";
  std::string s = names.front();
  for (std::size_t i = 1; i < names.size(); ++i) s += (i + 1 == names.size() ? " and " : ", ") + names[i];
  return s;
}

/// The checks every knob gets from its declaration: a value within the knob's range, and, for a
/// knob that not every family takes, the default unless the family declares it (KnobUse), then
/// within the values the family takes.
void validate_knobs(const EmitterFamily& family, const ScheduleParams& p, std::vector<ScheduleIssue>& out) {
  for (const Knob& k : knobs()) {
    const int v = k.get(p);
    const std::string is = std::string(k.name) + " = " + std::to_string(v) + ": ";
    if (v < k.min || v > k.max) {
      out.push_back({k.range_error, is + std::string(k.name) + " takes " + values_text(k.min, k.max) + " (" +
                                        std::string(k.doc) + ")"});
      continue;
    }
    if (k.every_family) continue;
    const KnobUse* use = find_knob_use(family, k.name);
    if (!use && v != k.default_value)
      out.push_back({ScheduleError::kBadOption, is + "only " + takers(k, v) + " kernels take " + std::string(k.name) +
                                                    " (" + std::string(k.doc) + "); use " + std::to_string(k.default_value)});
    else if (use && (v < use->min || v > use->max))
      out.push_back({ScheduleError::kBadOption, is + std::string(family.name()) + " kernels take " + std::string(k.name) +
                                                    " " + values_text(use->min, use->max) + "; only " + takers(k, v) +
                                                    " kernels take " + std::to_string(v)});
  }
}

/// Clusters (pairs of blocks, or a tile's splits) and who sums the splits: the reasons against `p`.
void validate_clusters_and_splits(const ScheduleParams& p, const DeviceLimits& limits, std::vector<ScheduleIssue>& out) {
  auto fail = [&](ScheduleError e, std::string detail) { out.push_back({e, std::move(detail)}); };
  if (pairs_blocks(p)) {
    const char* pair = p.cluster == 2 ? "cluster = 2 (a pair of blocks along m sharing B by TMA multicast)"
                                      : "cluster = 3 (a pair of blocks along n sharing A by TMA multicast)";
    if (limits.compute_capability != 0 && limits.compute_capability < 90)
      fail(ScheduleError::kBadOption, std::string(pair) + " needs thread block clusters (sm_90 or newer), the target is sm_" +
                                          std::to_string(limits.compute_capability) + "; use 0");
    else if (p.split_k != 1)
      fail(ScheduleError::kBadSplitK, std::string(pair) + " with split_k = " + std::to_string(p.split_k) +
                                          ": the pair takes whole output tiles; use split_k 1");
    else if (p.producer == 0)
      fail(ScheduleError::kBadOption, std::string(pair) + " needs the TMA producer (producer 1 or 2); use cluster 0");
  } else if (p.cluster != 0) {
    if (limits.compute_capability < 90)
      fail(ScheduleError::kBadOption, "cluster = 1 needs thread block clusters (sm_90 or newer), the target is sm_" +
                                          std::to_string(limits.compute_capability) + "; use 0");
    else if (p.split_k < 2 || p.split_k > kMaxClusterSplits)
      fail(ScheduleError::kBadOption, "cluster = 1 with split_k = " + std::to_string(p.split_k) +
                                          ": a cluster sums 2 to " + std::to_string(kMaxClusterSplits) +
                                          " splits; use cluster = 0");
  }
  if (p.split_reduce && p.split_k < 2)
    fail(ScheduleError::kBadSplitK, "split_reduce = 1 with split_k = " + std::to_string(p.split_k) +
                                        ": there are no splits to sum; use split_reduce 0");
  else if (p.split_reduce && p.split_k > kMaxLastBlockSplits)
    fail(ScheduleError::kBadSplitK, "split_reduce = 1 with split_k = " + std::to_string(p.split_k) +
                                        ": the last block loads every split of an element at once, at most " +
                                        std::to_string(kMaxLastBlockSplits) + "; use split_reduce 0 or fewer splits");
  else if (p.split_reduce && p.cluster == 1)
    fail(ScheduleError::kBadSplitK, "split_reduce = 1 with cluster = 1: the cluster's blocks sum the splits; use one "
                                    "of them");
}

/// The tiles against the intrinsic and the warps, and the knobs that exclude one another.
void validate_tiling(const ImplicitGemm& g, const ScheduleParams& p, const DeviceLimits& limits,
                     std::vector<ScheduleIssue>& out) {
  const auto m = g.shape[Axis::kI], n = g.shape[Axis::kJ], k = g.shape[Axis::kK];
  auto fail = [&](ScheduleError e, std::string detail) { out.push_back({e, std::move(detail)}); };
  validate_knobs(family_of(*g.hw), p, out);
  if (p.warp_m <= 0 || p.warp_n <= 0 || p.block_k <= 0 || p.warp_m % m || p.warp_n % n || p.block_k % k)
    fail(ScheduleError::kTileNotMultipleOfIntrinsic,
         "warp tile " + std::to_string(p.warp_m) + "x" + std::to_string(p.warp_n) + " and block_k " +
             std::to_string(p.block_k) + " against intrinsic " + g.shape.str());
  if (p.block_m <= 0 || p.block_n <= 0 || p.warp_m <= 0 || p.warp_n <= 0 || p.block_m % p.warp_m ||
      p.block_n % p.warp_n)
    fail(ScheduleError::kBlockNotMultipleOfWarp, "block " + std::to_string(p.block_m) + "x" + std::to_string(p.block_n) +
                                                     ", warp " + std::to_string(p.warp_m) + "x" + std::to_string(p.warp_n));
  if (p.window != 0 && p.relayout != 0)
    fail(ScheduleError::kBadOption, "window = 1 with relayout = " + std::to_string(p.relayout) +
                                        ": a window is staged from the input in place; use relayout = 0");
  validate_clusters_and_splits(p, limits, out);
  if (g.compute->dynamic.active()) {
    if (const std::string why = dynamic_gemm_error(g); !why.empty()) fail(ScheduleError::kBadOption, why);
    if (p.relayout)
      fail(ScheduleError::kBadOption, "relayout = " + std::to_string(p.relayout) +
                                          " copies operands of a fixed size; a run-time size takes 0");
    if (p.window) fail(ScheduleError::kBadOption, "window = 1 stages images of a fixed size; a run-time size takes 0");
  }
}

/// Shifted vectors wait in registers (two vectors each) between their load and their store.
void validate_shifted_vector(const ImplicitGemm& g, const ScheduleParams& p, int which, std::int64_t threads,
                             std::vector<ScheduleIssue>& out) {
  const char* name = which == 0 ? "vec_a" : "vec_b";
  const int vec = which == 0 ? p.vec_a : p.vec_b;
  const int elem_bits = dtype_bits(which == 0 ? g.hw->a_dtype : g.hw->b_dtype);
  const int bytes = vec * elem_bits / 8;
  const int loaded = shifted_load_width(g, p, which) * elem_bits / 8;  // per aligned vector held
  const std::int64_t copies =
      ((which == 0 ? std::int64_t{p.block_m} : std::int64_t{p.block_n}) * p.block_k / vec + threads - 1) / threads;
  if (bytes < 4)
    out.push_back({ScheduleError::kBadVector, std::string(name) + " = " + std::to_string(vec) +
                                                  ": vectors shifted into place (the operand is aligned to " +
                                                  std::to_string(operand_contiguity(g, which).aligned) +
                                                  " elements) are at least 4 bytes wide"});
  else if (copies * 2 * loaded / 4 > kMaxStagedRegisters)
    out.push_back({ScheduleError::kBadVector,
                   std::string(name) + " = " + std::to_string(vec) + ": " + std::to_string(copies) +
                       " shifted copies per thread would hold " + std::to_string(copies * 2 * loaded / 4) +
                       " registers (at most " + std::to_string(kMaxStagedRegisters) +
                       "); use more warps or a smaller tile, or a vector no wider than " +
                       std::to_string(operand_contiguity(g, which).aligned)});
}

/// Each operand's copy vectors (vec_a, vec_b): the widths the operand and the tile's rows allow,
/// and what shifted ones hold. A window's image is copied in vectors of its own (the family checks
/// them); its weights are read by each thread, never staged.
void validate_vectors(const ImplicitGemm& g, const ScheduleParams& p, std::int64_t threads,
                      std::vector<ScheduleIssue>& out) {
  for (int which = 0; which < 2 && !p.window; ++which) {
    const int vec = which == 0 ? p.vec_a : p.vec_b;
    if (vec == 1) continue;
    const int limit = max_vector_width(g, which);
    const std::int64_t row = stored_row_length(g, p, which);
    if (vec < 1 || (vec & (vec - 1)) || vec > limit || row % vec)
      out.push_back({ScheduleError::kBadVector, std::string(which == 0 ? "vec_a" : "vec_b") + " = " +
                                                    std::to_string(vec) + ": the operand allows at most " +
                                                    std::to_string(limit) + ", rows of the tile are " +
                                                    std::to_string(row) + " elements"});
    else if (copies_shifted(g, p, which))
      validate_shifted_vector(g, p, which, threads, out);
  }
}

/// Why a kernel has no epilogue operand for epi_prefetch = 1 to prefetch.
std::string why_nothing_to_prefetch(const ImplicitGemm& g, const ScheduleParams& p) {
  if (p.split_k > 1) return "split_k = " + std::to_string(p.split_k) + ": the split sums reach the epilogue later";
  if (p.window) return "window = 1: a window's kernel has no tile of the output to prefetch";
  if (g.compute->epilogue.empty()) return "no fused epilogue: there is nothing but the output to store";
  return "no epilogue operand of the output's shape, contiguous for 16 bytes along its vectors";
}

/// The family's shared memory and the words beside it: a kernel of a range of sizes keeps the
/// size in static shared memory too, and one whose last block sums the splits the word that says
/// it is the last.
std::int64_t static_shared_bytes(const ImplicitGemm& g, const ScheduleParams& p) {
  return family_of(*g.hw).shared_bytes(g, p) + (g.dynamic() || p.split_reduce ? 16 : 0);
}

}  // namespace

std::int64_t shared_bytes(const ImplicitGemm& g, const ScheduleParams& p) {
  return family_of(*g.hw).shared_bytes(g, p);
}

void fit_stages(const ImplicitGemm& g, ScheduleParams& p, const DeviceLimits& limits) {
  if (limits.max_shared_bytes <= 0) return;
  while (p.stages > 2 && static_shared_bytes(g, p) > limits.max_shared_bytes) --p.stages;
}

std::int64_t reduction_steps(const ImplicitGemm& g, const ScheduleParams& p) {
  return g.serial * ((g.K + p.block_k - 1) / p.block_k);
}

int block_threads(const ImplicitGemm& g, const ScheduleParams& p) {
  const EmitterFamily& f = family_of(*g.hw);
  // In 64 bits, capped: absurd tiles (--params, fuzzing) are refused as too many threads, never overflow.
  const std::int64_t threads = std::int64_t{p.block_m / p.warp_m} * (p.block_n / p.warp_n) * f.threads_per_warp_tile(p) +
                               f.extra_threads(p);
  return static_cast<int>(std::min<std::int64_t>(threads, std::numeric_limits<int>::max()));
}

namespace {

/// The GEMM `p`'s kernel computes (gemm_view_for(): `in`, or its relayout view built in
/// `storage`), or null with the reason in `out` where p.relayout cannot apply to `in`.
const ImplicitGemm* relayout_checked(const ImplicitGemm& in, const ScheduleParams& p, ImplicitGemm& storage,
                                     std::vector<ScheduleIssue>& out) {
  const std::string relayout = "relayout = " + std::to_string(p.relayout);
  auto refuse = [&](const std::string& why) {
    out.push_back({ScheduleError::kBadOption, relayout + why});
    return nullptr;
  };
  const Knob& knob = *find_knob("relayout");  // its range, checked here before a view is built
  if (p.relayout < knob.min || p.relayout > knob.max) return refuse(": use " + values_text(knob.min, knob.max));
  const std::string view_knob = std::to_string(in.relayout_knob);
  if (in.relayouted() && p.relayout != in.relayout_knob)
    return refuse(" on a relayout view of " + view_knob + ", whose kernels read operands copied so; use " + view_knob);
  std::string why_not;
  const ImplicitGemm* view = gemm_view_for(in, p, storage, why_not);
  return view ? view : refuse(": " + why_not + "; use 0");
}

}  // namespace

std::vector<ScheduleIssue> validate(const ImplicitGemm& in, const ScheduleParams& p, const DeviceLimits& limits) {
  std::vector<ScheduleIssue> out;
  // The pack is the mapped compute's (pack_groups()), which relayout views and sizes copy.
  if (const int pack = in.compute->group_pack; p.group_pack != pack) {
    const std::string packed = std::to_string(pack);
    out.push_back({ScheduleError::kBadOption,
                   "group_pack = " + std::to_string(p.group_pack) + " on a mapping of " +
                       (pack == 1 ? std::string("the compute as written") : "groups packed by " + packed) +
                       "; use " + packed + " (each pack has mappings of its own: 'tmap map --group-pack N' lists them)"});
    return out;
  }
  ImplicitGemm storage;
  const ImplicitGemm* view = relayout_checked(in, p, storage, out);
  if (!view) return out;
  const ImplicitGemm& g = *view;
  auto fail = [&](ScheduleError e, std::string detail) { out.push_back({e, std::move(detail)}); };
  validate_tiling(g, p, limits, out);
  if (!out.empty()) return out;  // the checks below need a well-formed tiling
  const std::int64_t steps = reduction_steps(g, p);
  if (p.split_k < 1 || p.split_k > steps)
    fail(ScheduleError::kBadSplitK, "split_k = " + std::to_string(p.split_k) + " for " + std::to_string(steps) + " steps");
  const std::int64_t grid_y = (g.M + p.block_m - 1) / p.block_m, grid_z = g.batch * std::max(1, p.split_k);
  if (grid_y > 65535 || grid_z > 65535)
    fail(ScheduleError::kGridTooLarge, "grid y = " + std::to_string(grid_y) + ", z = " + std::to_string(grid_z) +
                                           " (at most 65535 each)");
  const std::int64_t threads = block_threads(g, p);
  if (threads > limits.max_threads_per_block)
    fail(ScheduleError::kTooManyThreads,
         std::to_string(threads) + " threads, the limit is " + std::to_string(limits.max_threads_per_block));
  if (p.async_copy != 0 && !p.window) {
    if (p.async_copy != 1 || (limits.compute_capability != 0 && limits.compute_capability < 80) ||
        !(copies_async(g, p, 0) || copies_async(g, p, 1)))
      fail(ScheduleError::kBadAsyncCopy, "async_copy = " + std::to_string(p.async_copy) + " with vec_a = " +
                                             std::to_string(p.vec_a) + ", vec_b = " + std::to_string(p.vec_b) +
                                             " on sm_" + std::to_string(limits.compute_capability));
  }
  validate_vectors(g, p, threads, out);
  if (p.epi_prefetch && pipeline::prefetched_operands(g, p).empty())
    fail(ScheduleError::kBadOption, "epi_prefetch = 1 with " + why_nothing_to_prefetch(g, p) + "; use epi_prefetch 0");
  if (p.epi_regs)
    if (const std::string why = pipeline::why_not_on_accumulators(g, p); !why.empty())
      fail(ScheduleError::kBadOption, "epi_regs = 1 with " + why + "; use epi_regs 0");
  family_of(*g.hw).validate(g, p, limits, out);
  const std::int64_t smem = static_shared_bytes(g, p);
  if (smem > limits.max_shared_bytes)
    fail(ScheduleError::kSharedMemoryExceeded,
         std::to_string(smem) + " bytes, the limit is " + std::to_string(limits.max_shared_bytes));
  return out;
}

ScheduleParams default_schedule(const ImplicitGemm& g, const DeviceLimits& limits) {
  ScheduleParams p = family_of(*g.hw).default_schedule(g, limits);
  p.group_pack = g.compute->group_pack;
  if (limits.sm_count > 0) {
    const std::int64_t blocks = ((g.M + p.block_m - 1) / p.block_m) * ((g.N + p.block_n - 1) / p.block_n) * g.batch;
    const std::int64_t steps = reduction_steps(g, p);
    const std::int64_t wanted = (2 * limits.sm_count + blocks - 1) / blocks;
    // Keep at least four steps per split, and the grid within its limits.
    p.split_k = static_cast<int>(std::clamp<std::int64_t>(std::min(wanted, steps / 4), 1, 65535 / g.batch));
  }
  return p;
}

}  // namespace tmap
