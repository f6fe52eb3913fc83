#include "tmap/schedule/schedule.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "tmap/support/diagnostic.h"

namespace tmap {
namespace {

std::int64_t round_up(std::int64_t x, std::int64_t to) { return (x + to - 1) / to * to; }

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

}  // namespace

int max_vector_width(const ImplicitGemm& g, int which) {
  const Compute& c = *g.compute;
  const DType dtype = which == 0 ? g.hw->a_dtype : g.hw->b_dtype;
  const int bits = storage_bits(dtype);
  if (bits < 8) return 1;  // packed sub-byte elements are gathered in pairs, not in vectors
  const Access& acc = c.inputs[which == 0 ? g.a_input : g.b_input];
  // The virtual axis along the shared tile's rows.
  const bool row_major = g.layout[which] == 'n';
  const std::vector<int>& axis = which == 0 ? (row_major ? g.k_iters : g.m_iters) : (row_major ? g.n_iters : g.k_iters);
  if (axis.empty() || acc.indices.empty()) return 1;
  const int inner = axis.back();
  // The last index must be `inner` alone; terms of extent-1 iterators (a group index when
  // groups = 1) are always zero.
  const AffineExpr& last = acc.indices.back();
  if (last.constant != 0 || last.coef(inner) != 1) return 1;
  for (const auto& [it, coef] : last.terms)
    if (it != inner && c.iters[it].extent != 1) return 1;
  for (std::size_t d = 0; d + 1 < acc.indices.size(); ++d)
    if (acc.indices[d].uses(inner)) return 1;
  const std::int64_t extent = c.iters[inner].extent, dim = c.tensor_of(acc).shape.back();
  int vec = 128 / bits;
  while (vec > 1 && (extent % vec || dim % vec)) vec /= 2;
  return vec;
}

nlohmann::json to_json(const ScheduleParams& p) {
  return {{"block_m", p.block_m}, {"block_n", p.block_n}, {"block_k", p.block_k}, {"warp_m", p.warp_m},
          {"warp_n", p.warp_n},   {"stages", p.stages},   {"smem_pad", p.smem_pad}, {"split_k", p.split_k},
          {"panels", p.panels},   {"vec_a", p.vec_a},     {"vec_b", p.vec_b},       {"unroll", p.unroll},
          {"raster", p.raster},   {"async_copy", p.async_copy}};
}

ScheduleParams schedule_from_json(const nlohmann::json& j, const ScheduleParams& defaults) {
  ScheduleParams p = defaults;
  if (!j.is_object())
    throw UserError(format_diagnostic(SourceLoc::whole("--params"), "schedule parameters must be a JSON object",
                                      "for example '{\"block_m\": 64, \"block_n\": 64}'"));
  const std::pair<const char*, int*> fields[] = {{"block_m", &p.block_m}, {"block_n", &p.block_n},
                                                 {"block_k", &p.block_k}, {"warp_m", &p.warp_m},
                                                 {"warp_n", &p.warp_n},   {"stages", &p.stages},
                                                 {"smem_pad", &p.smem_pad}, {"split_k", &p.split_k},
                                                 {"panels", &p.panels},   {"vec_a", &p.vec_a},
                                                 {"vec_b", &p.vec_b},     {"unroll", &p.unroll},
                                                 {"raster", &p.raster},   {"async_copy", &p.async_copy}};
  for (const auto& [key, value] : j.items()) {
    auto it = std::find_if(std::begin(fields), std::end(fields), [&](const auto& f) { return key == f.first; });
    if (it == std::end(fields)) {
      std::vector<std::string> names;
      for (const auto& f : fields) names.push_back(f.first);
      throw UserError(format_diagnostic(SourceLoc::whole("--params"), "unknown schedule parameter \"" + key + "\"",
                                        "parameters are: " + join(names)));
    }
    if (!value.is_number_integer())
      throw UserError(format_diagnostic(SourceLoc::whole("--params"),
                                        "schedule parameter \"" + key + "\" must be an integer"));
    *it->second = value.get<int>();
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
    case ScheduleError::kBadStages: return "stages must be 1 or 2, or 3 or 4 with async_copy = 1";
    case ScheduleError::kBadOption: return "panels and unroll must be 0 or 1, raster between 1 and 32";
    case ScheduleError::kBadAsyncCopy:
      return "async_copy (0 or 1) needs sm_80 or newer and an operand loaded in 4-, 8- or 16-byte vectors";
    case ScheduleError::kBadVector:
      return "a vector width is not a power of two up to 16 bytes that the operand's contiguity and the tile allow";
    case ScheduleError::kMisalignedRows: return "a shared-memory row is not a multiple of 16 bytes, as WMMA requires";
    case ScheduleError::kMisalignedFragments:
      return "fragments would start at addresses not 32-byte aligned, as WMMA requires";
    case ScheduleError::kBadSplitK: return "split_k must be between 1 and the number of reduction steps";
    case ScheduleError::kGridTooLarge: return "the grid exceeds the device's limits";
  }
  return "unknown schedule error";
}

std::int64_t shared_bytes(const ImplicitGemm& g, const ScheduleParams& p) {
  auto t = tiles(g, p);
  std::int64_t operands = p.stages * (round_up(t[0].size_bytes(), 128) + round_up(t[1].size_bytes(), 128));
  return std::max(operands, round_up(t[2].size_bytes(), 128));  // the epilogue reuses the buffers
}

std::vector<ScheduleIssue> validate(const ImplicitGemm& g, const ScheduleParams& p, const DeviceLimits& limits) {
  std::vector<ScheduleIssue> out;
  const auto m = g.shape[Axis::kI], n = g.shape[Axis::kJ], k = g.shape[Axis::kK];
  auto fail = [&](ScheduleError e, std::string detail) { out.push_back({e, std::move(detail)}); };
  if (p.warp_m <= 0 || p.warp_n <= 0 || p.block_k <= 0 || p.warp_m % m || p.warp_n % n || p.block_k % k)
    fail(ScheduleError::kTileNotMultipleOfIntrinsic,
         "warp tile " + std::to_string(p.warp_m) + "x" + std::to_string(p.warp_n) + " and block_k " +
             std::to_string(p.block_k) + " against intrinsic " + g.shape.str());
  if (p.block_m <= 0 || p.block_n <= 0 || p.warp_m <= 0 || p.warp_n <= 0 || p.block_m % p.warp_m ||
      p.block_n % p.warp_n)
    fail(ScheduleError::kBlockNotMultipleOfWarp, "block " + std::to_string(p.block_m) + "x" + std::to_string(p.block_n) +
                                                     ", warp " + std::to_string(p.warp_m) + "x" + std::to_string(p.warp_n));
  // Gathers staged through registers overlap one tile at most; cp.async keeps up to 3 in flight.
  if (p.stages < 1 || p.stages > (p.async_copy == 1 ? 4 : 2))
    fail(ScheduleError::kBadStages,
         "stages = " + std::to_string(p.stages) + " with async_copy = " + std::to_string(p.async_copy));
  if (p.panels != 0 && p.panels != 1) fail(ScheduleError::kBadOption, "panels = " + std::to_string(p.panels));
  if (p.unroll != 0 && p.unroll != 1) fail(ScheduleError::kBadOption, "unroll = " + std::to_string(p.unroll));
  if (p.raster < 1 || p.raster > 32) fail(ScheduleError::kBadOption, "raster = " + std::to_string(p.raster));
  if (!out.empty()) return out;  // the checks below need a well-formed tiling
  const std::int64_t steps = g.serial * ((g.K + p.block_k - 1) / p.block_k);
  if (p.split_k < 1 || p.split_k > steps)
    fail(ScheduleError::kBadSplitK, "split_k = " + std::to_string(p.split_k) + " for " + std::to_string(steps) + " steps");
  const std::int64_t grid_y = (g.M + p.block_m - 1) / p.block_m, grid_z = g.batch * std::max(1, p.split_k);
  if (grid_y > 65535 || grid_z > 65535)
    fail(ScheduleError::kGridTooLarge, "grid y = " + std::to_string(grid_y) + ", z = " + std::to_string(grid_z) +
                                           " (at most 65535 each)");
  const std::int64_t threads = (p.block_m / p.warp_m) * (p.block_n / p.warp_n) * 32;
  if (threads > limits.max_threads_per_block)
    fail(ScheduleError::kTooManyThreads,
         std::to_string(threads) + " threads, the limit is " + std::to_string(limits.max_threads_per_block));
  const std::int64_t smem = shared_bytes(g, p);
  if (smem > limits.max_shared_bytes)
    fail(ScheduleError::kSharedMemoryExceeded,
         std::to_string(smem) + " bytes, the limit is " + std::to_string(limits.max_shared_bytes));
  for (const Tile& t : tiles(g, p)) {
    if (p.smem_pad < 0 || (t.ld * t.bits) % 128)
      fail(ScheduleError::kMisalignedRows, std::string(t.name) + " rows of " + std::to_string(t.ld) + " elements of " +
                                               std::to_string(t.bits) + " bits");
    if ((t.frag_rows * t.ld * t.bits) % 256 || t.col_step_bits % 256)
      fail(ScheduleError::kMisalignedFragments,
           std::string(t.name) + " fragments step " + std::to_string(t.col_step_bits / 8) +
               " bytes along a row (layout " + g.layout + ", intrinsic " + g.shape.str() +
               (p.panels ? ", panels" : ", rows; try panels") + ")");
  }
  const std::vector<Tile> t = tiles(g, p);
  if (p.async_copy != 0) {
    const int a_bytes = p.vec_a * storage_bits(g.hw->a_dtype) / 8, b_bytes = p.vec_b * storage_bits(g.hw->b_dtype) / 8;
    auto copyable = [](int vec, int bytes) { return vec > 1 && (bytes == 4 || bytes == 8 || bytes == 16); };
    if (p.async_copy != 1 || (limits.compute_capability != 0 && limits.compute_capability < 80) ||
        !(copyable(p.vec_a, a_bytes) || copyable(p.vec_b, b_bytes)))
      fail(ScheduleError::kBadAsyncCopy, "async_copy = " + std::to_string(p.async_copy) + " with vec_a = " +
                                             std::to_string(p.vec_a) + ", vec_b = " + std::to_string(p.vec_b) +
                                             " on sm_" + std::to_string(limits.compute_capability));
  }
  for (int which = 0; which < 2; ++which) {
    const int vec = which == 0 ? p.vec_a : p.vec_b;
    if (vec == 1) continue;
    const int limit = max_vector_width(g, which);
    // The vector must fit a row of the tile (or of a panel), and start 16-byte aligned rows.
    const std::int64_t row = t[which].panels ? t[which].frag_cols : t[which].cols;
    if (vec < 1 || (vec & (vec - 1)) || vec > limit || row % vec)
      fail(ScheduleError::kBadVector, std::string(which == 0 ? "vec_a" : "vec_b") + " = " + std::to_string(vec) +
                                          ": the operand allows at most " + std::to_string(limit) + ", rows of the " +
                                          (t[which].panels ? "panels" : "tile") + " are " + std::to_string(row) +
                                          " elements");
  }
  return out;
}

ScheduleParams default_schedule(const ImplicitGemm& g, const DeviceLimits& limits) {
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
  for (const auto& issue : validate(g, p, limits))
    if (issue.error == ScheduleError::kMisalignedFragments) p.panels = 1;
  if (shared_bytes(g, p) > limits.max_shared_bytes) p.stages = 1;
  // The widest global loads the operands and the tile allow.
  for (int which = 0; which < 2; ++which) {
    int& vec = which == 0 ? p.vec_a : p.vec_b;
    for (vec = max_vector_width(g, which); vec > 1; vec /= 2) {
      bool ok = true;
      for (const auto& issue : validate(g, p, limits)) ok = ok && issue.error != ScheduleError::kBadVector;
      if (ok) break;
    }
  }
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
