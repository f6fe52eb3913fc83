#include "tmap/schedule/schedule.h"

#include <algorithm>
#include <initializer_list>
#include <limits>

#include <nlohmann/json.hpp>

#include "tmap/codegen/emitter.h"
#include "tmap/support/diagnostic.h"
#include "tmap/support/json_integer.h"

namespace tmap {
namespace {

/// Bits per element as stored in shared and global memory (tf32 is stored as float, int4 packed
/// two to a byte).
int storage_bits(DType t) { return dtype_bits(t); }

/// The most registers a thread holds shifted vectors in between their load and their store.
constexpr std::int64_t kMaxStagedRegisters = 64;

/// The widest power of two, at most `cap`, that divides every value (0 is divisible by all).
int widest_dividing(int cap, std::initializer_list<std::int64_t> values) {
  int w = cap;
  for (std::int64_t v : values)
    while (w > 1 && v % w != 0) w /= 2;
  return w;
}

}  // namespace

Contiguity contiguity(const Compute& c, const Access& acc, const std::vector<int>& axis, int bits) {
  Contiguity out;
  if (acc.indices.empty() || axis.empty() || bits < 8) return out;
  const Tensor& t = c.tensor_of(acc);
  const int last = static_cast<int>(acc.indices.size()) - 1;
  auto extent = [&](int it) { return c.iters[it].extent; };
  // `e` is iterator `it` alone (terms of extent-1 iterators, a group index when groups = 1, are
  // always zero).
  auto alone = [&](const AffineExpr& e, int it) {
    if (e.constant != 0 || e.coef(it) != 1) return false;
    for (const auto& [x, coef] : e.terms)
      if (x != it && extent(x) != 1) return false;
    return true;
  };
  auto only_in = [&](int it, int dim) {
    for (int d = 0; d <= last; ++d)
      if (d != dim && acc.indices[d].uses(it)) return false;
    return true;
  };
  const int inner = axis.back();
  const AffineExpr& e = acc.indices[last];
  const int max = 128 / bits;
  if (e.coef(inner) == 2 && only_in(inner, last)) {
    // Strided: two aligned vectors of `load` elements cover a group of width <= load / 2.
    const int load = widest_dividing(max, {t.shape[last]});
    const int width = widest_dividing(load / 2, {extent(inner)});
    if (width * bits >= 32) {
      out.width = width;
      out.step = 2;
      out.load = load;
    }
    return out;
  }
  if (e.coef(inner) != 1 || !only_in(inner, last)) return out;
  if (alone(e, inner)) {
    // Fused: extend the run outwards while each dimension is covered whole by its iterator.
    std::int64_t run = extent(inner), stride = 1;
    int d = last;
    for (int a = static_cast<int>(axis.size()) - 1; d > 0 && a > 0; --d, --a) {
      if (t.shape[d] != extent(axis[a]) || !alone(acc.indices[d - 1], axis[a - 1]) || !only_in(axis[a - 1], d - 1))
        break;
      stride *= t.shape[d];
      run *= extent(axis[a - 1]);
    }
    // Dimensions outside the run step by multiples of the outermost run dimension's extent.
    out.width = widest_dividing(max, {run, d > 0 ? t.shape[d] * stride : 0});
    out.aligned = out.width;
    return out;
  }
  // Shifted: the other terms move the group's start; the dimension's bounds cut it anywhere.
  out.width = widest_dividing(max, {extent(inner), t.shape[last]});
  out.aligned = out.width;
  for (const auto& [x, coef] : e.terms)
    if (x != inner && extent(x) != 1) out.aligned = widest_dividing(out.aligned, {coef});
  out.aligned = widest_dividing(out.aligned, {e.constant});
  return out;
}

int contiguous_width(const Compute& c, const Access& acc, const std::vector<int>& axis, int bits) {
  return contiguity(c, acc, axis, bits).aligned;
}

Contiguity operand_contiguity(const ImplicitGemm& g, int which) {
  const DType dtype = which == 0 ? g.hw->a_dtype : g.hw->b_dtype;
  const int bits = storage_bits(dtype);
  if (bits < 8) return {};  // packed sub-byte elements are gathered in pairs, not in vectors
  // The virtual axis along the shared tile's rows.
  const std::vector<int>& axis = !stored_along_mn(g, which) ? g.k_iters : which == 0 ? g.m_iters : g.n_iters;
  return contiguity(*g.compute, g.compute->inputs[which == 0 ? g.a_input : g.b_input], axis, bits);
}

int max_vector_width(const ImplicitGemm& g, int which) { return operand_contiguity(g, which).width; }

bool copies_shifted(const ImplicitGemm& g, const ScheduleParams& p, int which) {
  const int vec = which == 0 ? p.vec_a : p.vec_b;
  return vec > 1 && vec > operand_contiguity(g, which).aligned;
}

bool copies_strided(const ImplicitGemm& g, const ScheduleParams& p, int which) {
  return copies_shifted(g, p, which) && operand_contiguity(g, which).step == 2;
}

int shifted_load_width(const ImplicitGemm& g, const ScheduleParams& p, int which) {
  const Contiguity c = operand_contiguity(g, which);
  return c.step == 2 ? c.load : which == 0 ? p.vec_a : p.vec_b;
}

bool copies_async(const ImplicitGemm& g, const ScheduleParams& p, int which) {
  const int vec = which == 0 ? p.vec_a : p.vec_b;
  const std::int64_t bytes = std::int64_t{vec} * storage_bits(which == 0 ? g.hw->a_dtype : g.hw->b_dtype) / 8;
  return p.async_copy != 0 && vec > 1 && (bytes == 4 || bytes == 8 || bytes == 16) && !copies_shifted(g, p, which);
}

nlohmann::json to_json(const ScheduleParams& p) {
  nlohmann::json j = nlohmann::json::object();
  for (const Knob& k : knobs()) j[std::string(k.name)] = k.get(p);
  return j;
}

ScheduleParams schedule_from_json(const nlohmann::json& j, const ScheduleParams& defaults) {
  ScheduleParams p = defaults;
  if (!j.is_object())
    throw UserError(format_diagnostic(SourceLoc::whole("--params"), "schedule parameters must be a JSON object",
                                      "for example '{\"block_m\": 64, \"block_n\": 64}'"));
  for (const auto& item : j.items()) {
    const std::string key = item.key();  // not a structured binding: Clang 14 cannot capture one
    const auto& value = item.value();
    const Knob* knob = find_knob(key);
    if (!knob)
      throw UserError(format_diagnostic(SourceLoc::whole("--params"), "unknown schedule parameter \"" + key + "\"",
                                        "parameters are: " + join(knob_names())));
    if (!value.is_number_integer())
      throw UserError(format_diagnostic(SourceLoc::whole("--params"),
                                        "schedule parameter \"" + key + "\" must be an integer"));
    if (!is_integer_of<int>(value))
      throw UserError(format_diagnostic(SourceLoc::whole("--params"),
                                        "schedule parameter \"" + key + "\" is out of range: " + value.dump()));
    knob->set(p, value.get<int>());
  }
  return p;
}

DeviceLimits DeviceLimits::for_arch(int cc) {
  DeviceLimits l;
  l.compute_capability = cc;
  l.max_shared_bytes = cc >= 90 ? 227 * 1024 : cc >= 80 ? 163 * 1024 : cc >= 75 ? 64 * 1024 : 96 * 1024;
  return l;
}

std::string_view message(ScheduleError e) {
  switch (e) {
    case ScheduleError::kTileNotMultipleOfIntrinsic: return "a tile is not a multiple of the intrinsic's shape";
    case ScheduleError::kBlockNotMultipleOfWarp: return "the block tile is not a multiple of the warp tile";
    case ScheduleError::kTooManyThreads: return "the block has more threads than the device allows";
    case ScheduleError::kSharedMemoryExceeded: return "the shared memory exceeds the device's limit";
    case ScheduleError::kBadStages:
      return "stages must be 1 or 2, or up to the family's pipeline depth (wmma 4, mma_sync 5) with async_copy = 1";
    case ScheduleError::kBadOption:
      return "a knob has a value outside its range, or one its family does not take ('tmap knobs' lists each "
             "knob's values and families)";
    case ScheduleError::kBadAsyncCopy:
      return "async_copy (0 or 1) needs sm_80 or newer and an operand loaded in 4-, 8- or 16-byte vectors";
    case ScheduleError::kBadVector:
      return "a vector width is not a power of two up to 16 bytes that the operand's contiguity and the tile allow";
    case ScheduleError::kMisalignedRows:
      return "a shared-memory row is not a multiple of 16 bytes (or, swizzled, not a power of two of at least 32 "
             "bytes), as the fragment loads require";
    case ScheduleError::kMisalignedFragments:
      return "fragments would start at addresses not 32-byte aligned, as WMMA requires";
    case ScheduleError::kBadSplitK: return "split_k must be between 1 and the number of reduction steps";
    case ScheduleError::kGridTooLarge: return "the grid exceeds the device's limits";
  }
  return "unknown schedule error";
}

std::int64_t shared_bytes(const ImplicitGemm& g, const ScheduleParams& p) {
  return family_of(*g.hw).shared_bytes(g, p);
}

bool stored_along_mn(const ImplicitGemm& g, int which) {
  return which == 0 ? g.layout[0] == 't' : g.layout[1] == 'n';
}

std::int64_t stored_row_length(const ImplicitGemm& g, const ScheduleParams& p, int which) {
  if (!stored_along_mn(g, which)) return p.block_k;
  return which == 0 ? p.block_m : p.block_n;
}

int block_threads(const ImplicitGemm& g, const ScheduleParams& p) {
  const EmitterFamily& f = family_of(*g.hw);
  // In 64 bits, capped: absurd tiles (--params, fuzzing) are refused as too many threads, never overflow.
  const std::int64_t threads = std::int64_t{p.block_m / p.warp_m} * (p.block_n / p.warp_n) * f.threads_per_warp_tile(p) +
                               f.extra_threads(p);
  return static_cast<int>(std::min<std::int64_t>(threads, std::numeric_limits<int>::max()));
}

namespace {

/// gemm_for() without the throw: `g` or its view (built in `storage`), or nullptr with the
/// reason in `why_not` when the view is not offered.
const ImplicitGemm* view_for(const ImplicitGemm& g, const ScheduleParams& p, ImplicitGemm& storage,
                             std::string& why_not) {
  if (p.relayout != 1 || g.relayouted()) return &g;
  RelayoutView v = relayout_view(g);
  if (!v.why_not.empty()) {
    why_not = std::move(v.why_not);
    return nullptr;
  }
  storage = std::move(v.gemm);
  return &storage;
}

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
  for (const std::string& name : family_names()) {
    const EmitterFamily* f = find_family(name);
    for (const KnobUse& use : f->knob_uses())
      if (use.knob == knob.name && use.min <= value && value <= use.max) names.push_back(name);
  }
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
    const KnobUse* use = nullptr;
    for (const KnobUse& u : family.knob_uses())
      if (u.knob == k.name) use = &u;
    if (!use && v != k.default_value)
      out.push_back({ScheduleError::kBadOption, is + "only " + takers(k, v) + " kernels take " + std::string(k.name) +
                                                    " (" + std::string(k.doc) + "); use " + std::to_string(k.default_value)});
    else if (use && (v < use->min || v > use->max))
      out.push_back({ScheduleError::kBadOption, is + std::string(family.name()) + " kernels take " + std::string(k.name) +
                                                    " " + values_text(use->min, use->max) + "; only " + takers(k, v) +
                                                    " kernels take " + std::to_string(v)});
  }
}

}  // namespace

const ImplicitGemm& gemm_for(const ImplicitGemm& g, const ScheduleParams& p, ImplicitGemm& storage) {
  std::string why_not;
  const ImplicitGemm* view = view_for(g, p, storage, why_not);
  if (!view)
    throw UserError(format_diagnostic(SourceLoc::whole("--params"), "relayout = 1 is not offered for this mapping: " + why_not,
                                      "use relayout = 0"));
  return *view;
}

std::vector<ScheduleIssue> validate(const ImplicitGemm& in, const ScheduleParams& p, const DeviceLimits& limits) {
  std::vector<ScheduleIssue> out;
  if (p.relayout != 0 && p.relayout != 1) {
    out.push_back({ScheduleError::kBadOption, "relayout = " + std::to_string(p.relayout) + ": use 0 or 1"});
    return out;
  }
  if (p.relayout == 0 && in.relayouted()) {
    out.push_back({ScheduleError::kBadOption, "relayout = 0 on a relayout view, whose kernels read copied operands; use 1"});
    return out;
  }
  ImplicitGemm storage;
  std::string why_not;
  const ImplicitGemm* view = view_for(in, p, storage, why_not);
  if (!view) {
    out.push_back({ScheduleError::kBadOption, "relayout = 1: " + why_not + "; use 0"});
    return out;
  }
  const ImplicitGemm& g = *view;
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
    fail(ScheduleError::kBadOption, "window = 1 with relayout = 1: a window is staged from the input in place; use "
                                    "relayout = 0");
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
  if (!out.empty()) return out;  // the checks below need a well-formed tiling
  const std::int64_t steps = g.serial * ((g.K + p.block_k - 1) / p.block_k);
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
  // A window's image is copied in vectors of its own (the family checks them); its weights are
  // read by each thread, never staged.
  if (p.async_copy != 0 && !p.window) {
    if (p.async_copy != 1 || (limits.compute_capability != 0 && limits.compute_capability < 80) ||
        !(copies_async(g, p, 0) || copies_async(g, p, 1)))
      fail(ScheduleError::kBadAsyncCopy, "async_copy = " + std::to_string(p.async_copy) + " with vec_a = " +
                                             std::to_string(p.vec_a) + ", vec_b = " + std::to_string(p.vec_b) +
                                             " on sm_" + std::to_string(limits.compute_capability));
  }
  for (int which = 0; which < 2 && !p.window; ++which) {
    const int vec = which == 0 ? p.vec_a : p.vec_b;
    if (vec == 1) continue;
    const int limit = max_vector_width(g, which);
    const std::int64_t row = stored_row_length(g, p, which);
    if (vec < 1 || (vec & (vec - 1)) || vec > limit || row % vec)
      fail(ScheduleError::kBadVector, std::string(which == 0 ? "vec_a" : "vec_b") + " = " + std::to_string(vec) +
                                          ": the operand allows at most " + std::to_string(limit) +
                                          ", rows of the tile are " + std::to_string(row) + " elements");
    else if (copies_shifted(g, p, which)) {
      // Shifted vectors wait in registers (two vectors each) between their load and their store.
      const char* name = which == 0 ? "vec_a" : "vec_b";
      const int elem_bits = storage_bits(which == 0 ? g.hw->a_dtype : g.hw->b_dtype);
      const int bytes = vec * elem_bits / 8;
      const int loaded = shifted_load_width(g, p, which) * elem_bits / 8;  // per aligned vector held
      const std::int64_t copies =
          ((which == 0 ? std::int64_t{p.block_m} : std::int64_t{p.block_n}) * p.block_k / vec + threads - 1) / threads;
      if (bytes < 4)
        fail(ScheduleError::kBadVector, std::string(name) + " = " + std::to_string(vec) + ": vectors shifted into place (the operand is aligned to " +
                                            std::to_string(operand_contiguity(g, which).aligned) +
                                            " elements) are at least 4 bytes wide");
      else if (copies * 2 * loaded / 4 > kMaxStagedRegisters)
        fail(ScheduleError::kBadVector,
             std::string(name) + " = " + std::to_string(vec) + ": " + std::to_string(copies) +
                 " shifted copies per thread would hold " + std::to_string(copies * 2 * loaded / 4) +
                 " registers (at most " + std::to_string(kMaxStagedRegisters) +
                 "); use more warps or a smaller tile, or a vector no wider than " +
                 std::to_string(operand_contiguity(g, which).aligned));
    }
  }
  const EmitterFamily& family = family_of(*g.hw);
  family.validate(g, p, limits, out);
  const std::int64_t smem = family.shared_bytes(g, p);
  if (smem > limits.max_shared_bytes)
    fail(ScheduleError::kSharedMemoryExceeded,
         std::to_string(smem) + " bytes, the limit is " + std::to_string(limits.max_shared_bytes));
  return out;
}

ScheduleParams default_schedule(const ImplicitGemm& g, const DeviceLimits& limits) {
  ScheduleParams p = family_of(*g.hw).default_schedule(g, limits);
  if (limits.sm_count > 0) {
    const std::int64_t blocks = ((g.M + p.block_m - 1) / p.block_m) * ((g.N + p.block_n - 1) / p.block_n) * g.batch;
    const std::int64_t steps = g.serial * ((g.K + p.block_k - 1) / p.block_k);
    const std::int64_t wanted = (2 * limits.sm_count + blocks - 1) / blocks;
    // Keep at least four steps per split, and the grid within its limits.
    p.split_k = static_cast<int>(std::clamp<std::int64_t>(std::min(wanted, steps / 4), 1, 65535 / g.batch));
  }
  return p;
}

}  // namespace tmap
