// The SIMT family's window staging (ScheduleParams::window = 1): for sliding-window computations
// that apply one small filter per channel, depthwise convolutions above all.
//
// As an implicit GEMM such a computation is a poor fit for any staging through im2col tiles: N is
// 1 (one filter per channel), K is the filter's R x S taps, and each input element is gathered
// once per tap that reads it (9 times for a 3 x 3 window). Staged as a window instead, a block
// copies the input rows and columns its outputs read once, in vectors along the image's
// contiguous last dimension (zeros where the window hangs over the padding), and each thread
// computes a run of warp_m neighbouring outputs of one row from registers: per filter row, the
// run's input segment is read from shared memory once and every tap of that row multiplies it.
// The filter's taps are read from global memory into registers while the window lands.
//
// A block covers block_m consecutive outputs of the flattened (row, column) axis m, within one
// row when block_m divides the row (only the columns they read are staged) or whole rows when
// it is a multiple of one (full rows are staged), for block_n consecutive batch entries (the
// channels of a depthwise convolution), each with its own window in shared memory.
//
// Channels last (NHWC), the image's contiguous dimension is the batch entries themselves: the
// block's entries are staged side by side ([rows][columns][entries], copied vec_a entries at a
// time), a warp's lanes take consecutive entries, each thread computes its run for warp_n
// consecutive entries, read from shared memory as one vector, and the block's filter taps are
// read into shared memory once (each thread would otherwise load taps x warp_n of them).
#include <algorithm>
#include <numeric>
#include <sstream>

#include "tile_pipeline.h"
#include "tmap/codegen/reference_emitter.h"
#include "tmap/support/diagnostic.h"

namespace tmap::pipeline {
namespace {

/// The most filter taps held in registers, and the most inputs of one thread's row segment.
constexpr std::int64_t kMaxTaps = 64, kMaxSegment = 64;

/// The staged window of one batch entry for a schedule.
struct WindowTile {
  bool one_row = false;         ///< The block's outputs lie in one row (block_m divides the row).
  std::int64_t rows_out = 1;    ///< Output rows a block's outputs can span.
  std::int64_t in_rows = 1;     ///< Image rows staged.
  std::int64_t ld = 1;          ///< Elements per staged row (a multiple of the copy's vector).
  std::int64_t segment = 1;     ///< Inputs of one filter row that a thread's run of outputs reads.
  /// Where every thread's segment starts relative to vectors of `chunk` elements, when the
  /// schedule fixes it: the segment is then read in `chunks` aligned vectors from `lead`
  /// elements before its start (1: element by element).
  std::int64_t chunk = 1, lead = 0, chunks = 0, misalign = 0;
  std::int64_t slice() const { return in_rows * ld; }
};

WindowTile window_tile(const WindowPlan& w, const ScheduleParams& p) {
  WindowTile t;
  const std::int64_t q = w.col.outputs, bm = p.block_m;
  t.one_row = q % bm == 0;
  const std::int64_t cols_out = t.one_row ? bm : q;
  t.rows_out = t.one_row ? 1 : std::min(w.row.outputs, bm % q == 0 ? bm / q : (bm - 1) / q + 2);
  t.in_rows = (t.rows_out - 1) * w.row.stride + (w.row.taps - 1) * w.row.dilation + 1;
  const std::int64_t span = (cols_out - 1) * w.col.stride + (w.col.taps - 1) * w.col.dilation + 1;
  t.segment = (p.warp_m - 1) * w.col.stride + (w.col.taps - 1) * w.col.dilation + 1;
  if (w.channels_last) {  // copied along the channels: the columns are staged as they are
    t.ld = span;
    return t;
  }
  // The first column is aligned down to the vector: up to vec - 1 more elements.
  t.ld = round_up(span + p.vec_a - 1, p.vec_a);
  // The window is staged from w0, the first column aligned down to the vector: a thread's segment
  // then starts (w_start - w0) + a multiple of warp_m x stride elements into its row. The first
  // term is the schedule's when every block's w_start lies the same way against the vector
  // (whole rows, or parts of rows that span whole vectors).
  const std::int64_t v = p.vec_a;
  if (!t.one_row || (bm * w.col.stride) % v == 0) {
    t.misalign = ((w.col.offset % v) + v) % v;
    t.chunk = std::gcd(std::int64_t{p.warp_m} * w.col.stride, v);
    t.lead = t.misalign % t.chunk;
    t.chunks = (t.lead + t.segment + t.chunk - 1) / t.chunk;
  }
  return t;
}

std::string element_to_float(DType t, const std::string& x) {
  if (t == DType::kFloat16) return "__half2float(" + x + ")";
  if (t == DType::kBFloat16) return "__bfloat162float(" + x + ")";
  return x;
}

/// `const int it_x = 0;` for the iterators of extent 1 on m, n, k or serial that `acc` uses (they are not
/// decomposed from any coordinate).
void zero_iterators(std::ostringstream& os, const ImplicitGemm& g, const Access& acc, const std::string& indent) {
  const Compute& c = *g.compute;
  for (const auto* axis : {&g.m_iters, &g.n_iters, &g.k_iters, &g.serial_iters})
    for (int it : *axis)
      if (c.iters[it].extent == 1 && acc.uses(it))
        os << indent << "const int it_" << c.iters[it].name << " = 0;  // extent 1\n";
}

/// Whether index `e` can leave [0, size) as its iterators range over their extents.
bool may_leave(const Compute& c, const AffineExpr& e, std::int64_t size) {
  const auto [lo, hi] = c.index_range(e);
  return lo < 0 || hi >= size;
}

/// The bounds check (empty when the indices cannot leave the tensor) and the offset (empty when
/// 0) of access `a` in generated code, over its dimensions but those in `skip`.
std::pair<std::string, std::string> bounds_and_offset(const Compute& c, const Access& a, std::vector<int> skip) {
  const Tensor& t = c.tensor_of(a);
  std::string ok, offset;
  for (std::size_t d = 0; d < a.indices.size(); ++d) {
    if (contains(skip, static_cast<int>(d))) continue;
    const std::string idx = affine_code(a.indices[d], c);
    if (may_leave(c, a.indices[d], t.shape[d]))
      ok += (ok.empty() ? "" : " && ") + std::string("(unsigned)(") + idx + ") < " + std::to_string(t.shape[d]) + "u";
    if (a.indices[d].terms.empty() && a.indices[d].constant == 0) continue;
    offset += (offset.empty() ? "" : " + ") + std::string("(") + idx + ") * " + std::to_string(t.stride(d));
  }
  return {ok, offset};
}

/// Why `g`'s mapping cannot stage windows at all (empty: it can).
std::string window_mapping_error(const ImplicitGemm& g) {
  if (g.shape[Axis::kK] != 1)
    return "its multiply-add packs " + std::to_string(g.shape[Axis::kK]) +
           " elements of k; windows are multiplied one element at a time (fma.rn.f32 abstractions)";
  if (!stored_along_mn(g, 0) || !stored_along_mn(g, 1))
    return "windows are staged on the layout with A stored along m and B along n (tnn), not " + g.layout;
  if (g.N != 1) return "N = " + std::to_string(g.N) + ": a window has one filter per batch entry (N = 1)";
  if (g.serial != 1) return "a reduction is a serial loop; every filter tap must be on k";
  return {};
}

/// Dimension `d` of the image as a window: its output iterator (of m) and its tap iterator (of
/// k), or why it is not one. `kept` says whether the plan keeps it: a window, or a last dimension
/// that no iterator moves (a window of one output and one tap, as along W = 1).
std::string image_dimension(const ImplicitGemm& g, const std::vector<int>& m_live, const std::vector<int>& k_live,
                            std::size_t d, WindowDim& wd, bool& kept) {
  const Compute& c = *g.compute;
  const Access& img = c.inputs[g.a_input];
  const std::string not_window = "dimension " + std::to_string(d) + " of the image is not a window";
  wd.dim = static_cast<int>(d);
  wd.offset = img.indices[d].constant;
  wd.size = c.tensor_of(img).shape[d];
  bool window = false, batch = false;
  for (const auto& [it, coef] : img.indices[d].terms) {
    if (c.iters[it].extent == 1) continue;
    if (contains(m_live, it)) {
      if (wd.out_iter >= 0 || coef <= 0) return not_window;
      wd.out_iter = it, wd.stride = coef, wd.outputs = c.iters[it].extent, window = true;
    } else if (contains(k_live, it)) {
      if (wd.tap_iter >= 0 || coef <= 0) return not_window;
      wd.tap_iter = it, wd.dilation = coef, wd.taps = c.iters[it].extent, window = true;
    } else {
      batch = true;
    }
  }
  if (window && batch) return "dimension " + std::to_string(d) + " of the image mixes a window with batch iterators";
  kept = window || (!batch && d + 1 == img.indices.size());
  return {};
}

/// Why the window dimensions `dims` do not cover m and k (their iterators of extent above 1)
/// exactly as outputs and taps (empty: they do).
std::string window_cover_error(const std::vector<WindowDim>& dims, const std::vector<int>& m_live,
                               std::vector<int> k_live) {
  std::vector<int> outs, taps;
  for (const WindowDim& d : dims) {
    if (d.out_iter >= 0) outs.push_back(d.out_iter);
    if (d.tap_iter >= 0) taps.push_back(d.tap_iter);
  }
  if (outs != m_live) return "m is not the window's outputs, rows then columns";
  std::sort(k_live.begin(), k_live.end());
  std::sort(taps.begin(), taps.end());
  if (k_live != taps) return "k is not the window's taps";
  return {};
}

/// The one iterator of extent above 1 that index `e` adds with coefficient 1 and nothing else, or -1.
int sole_iterator(const Compute& c, const AffineExpr& e) {
  int it = -1;
  for (const auto& [i, coef] : e.terms) {
    if (c.iters[i].extent == 1) continue;
    if (it >= 0 || coef != 1) return -1;
    it = i;
  }
  return e.constant == 0 ? it : -1;
}

/// Why the image's last dimension `last` is not the channels of a channels-last window (empty:
/// it is): indexed by one batch iterator alone, the one that varies fastest over the batch entries,
/// over the dimension's whole extent, so that consecutive entries are consecutive elements.
std::string channels_last_error(const ImplicitGemm& g, int last) {
  const Compute& c = *g.compute;
  const Access& img = c.inputs[g.a_input];
  const int chan = sole_iterator(c, img.indices[static_cast<std::size_t>(last)]);
  if (chan < 0) return "it is not indexed by one iterator alone";
  const std::vector<int> live = c.live_iterators(g.batch_iters);
  if (live.empty() || live.back() != chan)
    return "iterator " + c.iters[chan].name + " is not the fastest of the batch entries";
  if (c.iters[chan].extent != c.tensor_of(img).shape[static_cast<std::size_t>(last)])
    return "iterator " + c.iters[chan].name + " does not cover the dimension";
  return {};
}

}  // namespace

WindowPlan window_plan(const ImplicitGemm& g) {
  WindowPlan w;
  auto fail = [&](std::string why) {
    w.why_not = std::move(why);
    return w;
  };
  if (std::string why = window_mapping_error(g); !why.empty()) return fail(std::move(why));
  const Compute& c = *g.compute;
  const Tensor& t = c.tensor_of(c.inputs[g.a_input]);
  const std::vector<int> m_live = c.live_iterators(g.m_iters), k_live = c.live_iterators(g.k_iters);
  std::vector<WindowDim> dims;
  for (std::size_t d = 0; d < t.shape.size(); ++d) {
    WindowDim wd;
    bool kept = false;
    if (std::string why = image_dimension(g, m_live, k_live, d, wd, kept); !why.empty()) return fail(std::move(why));
    if (kept) dims.push_back(wd);
  }
  if (dims.empty() || dims.size() > 2)
    return fail("the image has " + std::to_string(dims.size()) + " window dimensions; windows of 1 or 2 are staged");
  w.col = dims.back();
  const int last = static_cast<int>(t.shape.size()) - 1;
  if (w.col.dim != last) {
    if (std::string why = channels_last_error(g, last); !why.empty())
      return fail("the image's last (contiguous) dimension is neither a window dimension nor the channels: " + why);
    w.channels_last = true;
    w.channels = t.shape[static_cast<std::size_t>(last)];
    w.col_stride = t.stride(static_cast<std::size_t>(w.col.dim));
    const Access& out = c.output;
    const Tensor& out_t = c.tensor_of(out);
    w.output_channels_last = sole_iterator(c, out.indices.back()) == sole_iterator(c, c.inputs[g.a_input].indices.back()) &&
                             out_t.shape.back() == w.channels;
  }
  if (dims.size() == 2) {
    w.row = dims.front();
    w.row_stride = t.stride(static_cast<std::size_t>(w.row.dim));
  }
  if (std::string why = window_cover_error(dims, m_live, k_live); !why.empty()) return fail(std::move(why));
  if (w.row.taps * w.col.taps > kMaxTaps)
    return fail(std::to_string(w.row.taps * w.col.taps) + " filter taps; at most " + std::to_string(kMaxTaps) +
                " are held in registers");
  return w;
}

int window_vector_limit(const ImplicitGemm& g) {
  const WindowPlan w = window_plan(g);
  if (!w.why_not.empty()) return 1;
  const int bytes = std::max(1, dtype_bits(g.hw->a_dtype) / 8);
  const std::int64_t along = w.channels_last ? w.channels : w.col.size;
  int v = 1;
  while (v * 2 * bytes <= 16 && along % (v * 2) == 0) v *= 2;
  return v;
}

int window_block_k(const ImplicitGemm& g) {
  for (int k = 8; k <= 256; k *= 2)
    if (k >= g.K) return k;
  return 0;
}

namespace {

/// Channels last, warp_n counts a thread's consecutive channels: read from shared memory as one
/// vector of up to 16 bytes, and stored as one where the output's channels are contiguous.
template <typename Fail>
void validate_channel_vector(const ImplicitGemm& g, const WindowPlan& w, const ScheduleParams& p, Fail&& fail) {
  const int cv = p.warp_n;
  const int bytes = std::max(1, dtype_bits(g.hw->a_dtype) / 8);
  if (cv < 1 || (cv & (cv - 1)) || cv * bytes > 16 || w.channels % cv || p.block_n % cv)
    return fail(ScheduleError::kBadOption, "warp_n = " + std::to_string(cv) +
                                               ": a thread's channels are a power of two of at most 16 bytes "
                                               "dividing the " + std::to_string(w.channels) + " channels and block_n = " +
                                               std::to_string(p.block_n));
  if (w.row.taps * w.col.taps * cv > kMaxTaps * 2 || std::int64_t{p.warp_m} * cv > kMaxTaps)
    fail(ScheduleError::kBadOption, "warp_n = " + std::to_string(cv) + ": each thread would hold " +
                                        std::to_string(w.row.taps * w.col.taps * cv) + " filter taps and " +
                                        std::to_string(p.warp_m * cv) + " sums (at most " + std::to_string(kMaxTaps * 2) +
                                        " and " + std::to_string(kMaxTaps) + ")");
}

}  // namespace

void validate_window(const ImplicitGemm& g, const ScheduleParams& p, const DeviceLimits& limits,
                     std::vector<ScheduleIssue>& out) {
  auto fail = [&](ScheduleError e, std::string detail) { out.push_back({e, "window = 1: " + std::move(detail)}); };
  const WindowPlan w = window_plan(g);
  if (!w.why_not.empty()) return fail(ScheduleError::kBadOption, "no window to stage: " + w.why_not);
  // Parameters of im2col staging have one value here, so that no two schedules emit one kernel.
  auto fixed = [&](const char* name, int value, int wanted, const char* why) {
    if (value != wanted)
      fail(ScheduleError::kBadOption, std::string(name) + " = " + std::to_string(value) + ": use " +
                                          std::to_string(wanted) + " (" + why + ")");
  };
  fixed("split_k", p.split_k, 1, "the whole window is summed in one step");
  fixed("stages", p.stages, 1, "one window per block");
  fixed("raster", p.raster, 1, "blocks share no tiles");
  fixed("smem_pad", p.smem_pad, 0, "staged rows are read along their length");
  fixed("unroll", p.unroll, 1, "the taps are always unrolled");
  fixed("k_lanes", p.k_lanes, 1, "a thread sums its outputs' windows");
  fixed("vec_b", p.vec_b, 1, "the taps are read one by one into registers");
  if (!w.channels_last) fixed("warp_n", p.warp_n, 1, "N is 1; block_n counts batch entries");
  fixed("block_k", p.block_k, window_block_k(g), "the smallest block_k covering K, one step");
  const std::int64_t q = w.col.outputs;
  if (q % p.warp_m)
    fail(ScheduleError::kBlockNotMultipleOfWarp, "warp_m = " + std::to_string(p.warp_m) + " does not divide the row of " +
                                                     std::to_string(q) + " outputs (a thread's outputs share a row)");
  if (q % p.block_m && p.block_m % q)
    fail(ScheduleError::kBlockNotMultipleOfWarp, "block_m = " + std::to_string(p.block_m) +
                                                     " neither divides nor is a multiple of the row of " +
                                                     std::to_string(q) + " outputs");
  const int limit = window_vector_limit(g);
  if (p.vec_a < 1 || (p.vec_a & (p.vec_a - 1)) || p.vec_a > limit)
    fail(ScheduleError::kBadVector, "vec_a = " + std::to_string(p.vec_a) + ": the image's " +
                                        (w.channels_last ? std::to_string(w.channels) + " channels"
                                                         : "rows of " + std::to_string(w.col.size) + " elements") +
                                        " allow vectors of up to " + std::to_string(limit));
  if (w.channels_last && p.vec_a > 0 && p.block_n % p.vec_a)
    fail(ScheduleError::kBadVector, "block_n = " + std::to_string(p.block_n) + " is not a multiple of vec_a = " +
                                        std::to_string(p.vec_a) + " (channels last: a copy spans vec_a batch entries)");
  const std::int64_t bytes = std::int64_t{p.vec_a} * std::max(1, dtype_bits(g.hw->a_dtype) / 8);
  if (p.async_copy != 0 && (p.async_copy != 1 || (bytes != 4 && bytes != 8 && bytes != 16) ||
                            (limits.compute_capability != 0 && limits.compute_capability < 80)))
    fail(ScheduleError::kBadAsyncCopy, "async_copy = " + std::to_string(p.async_copy) + " with copies of " +
                                           std::to_string(bytes) + " bytes on sm_" +
                                           std::to_string(limits.compute_capability));
  if (p.block_n < 1 || (g.batch + p.block_n - 1) / p.block_n > 65535)
    fail(ScheduleError::kGridTooLarge, "block_n = " + std::to_string(p.block_n) + " batch entries per block of " +
                                           std::to_string(g.batch));
  if (w.channels_last) validate_channel_vector(g, w, p, fail);
  if (out.empty() && window_tile(w, p).segment * p.warp_n > kMaxSegment)
    fail(ScheduleError::kBadOption, "warp_m = " + std::to_string(p.warp_m) + ", warp_n = " + std::to_string(p.warp_n) +
                                        ": each thread would hold " +
                                        std::to_string(window_tile(w, p).segment * p.warp_n) +
                                        " inputs of a row (at most " + std::to_string(kMaxSegment) + ")");
}

namespace {
/// Bytes of the block's staged windows (before the filter taps, channels last), 128-aligned.
std::int64_t staged_window_bytes(const ImplicitGemm& g, const ScheduleParams& p, const WindowTile& t) {
  return round_up(std::int64_t{p.block_n} * t.slice() * std::max(1, dtype_bits(g.hw->a_dtype) / 8), 128);
}
}  // namespace

std::int64_t window_shared_bytes(const ImplicitGemm& g, const ScheduleParams& p) {
  const WindowPlan w = window_plan(g);
  // Parameters out of any sane range are refused by validate_window; only keep the arithmetic
  // below from overflowing on them.
  if (!w.why_not.empty() || p.block_m < 1 || p.vec_a < 1 || p.warp_m < 1 || p.block_n < 1 || p.vec_a > 16 ||
      p.block_m > (1 << 24) || p.block_n > (1 << 24))
    return 0;
  const std::int64_t image = staged_window_bytes(g, p, window_tile(w, p));
  // Channels last, the block's filter taps follow as float: [TAPS_R * TAPS_C][BZ].
  return w.channels_last ? image + round_up(std::int64_t{p.block_n} * w.row.taps * w.col.taps * 4, 128) : image;
}

std::vector<int> window_block_tiles(const ImplicitGemm& g, const ScheduleParams& p, char axis) {
  const WindowPlan w = window_plan(g);
  std::vector<int> out;
  if (axis == 'n') {
    for (int b = w.channels_last ? std::max(1, p.vec_a) : 1; b <= 64 && b < 2 * g.batch; b *= 2) out.push_back(b);
    return out;
  }
  const std::int64_t q = w.col.outputs;
  // Parts of a row (divisors of it that are runs of whole warp tiles), then whole rows in powers of two.
  for (std::int64_t d = p.warp_m; d < q && d <= 1024; d += p.warp_m)
    if (q % d == 0) out.push_back(static_cast<int>(d));
  for (std::int64_t rows = 1; rows <= 2 * w.row.outputs && q * rows / p.warp_m <= 1024; rows *= 2)
    out.push_back(static_cast<int>(q * rows));
  if (out.empty()) out.push_back(p.warp_m);
  return out;
}

ScheduleParams window_default_schedule(const ImplicitGemm& g, const DeviceLimits& limits) {
  const WindowPlan w = window_plan(g);
  ScheduleParams p;
  p.window = 1;
  p.smem_pad = 0;
  p.stages = 1;
  p.warp_n = 1;
  p.block_k = window_block_k(g);
  const std::int64_t q = w.col.outputs;
  p.warp_m = q % 4 == 0 ? 4 : q % 2 == 0 ? 2 : 1;
  p.vec_a = window_vector_limit(g);
  const int bytes = p.vec_a * std::max(1, dtype_bits(g.hw->a_dtype) / 8);
  p.async_copy = (bytes == 4 || bytes == 8 || bytes == 16) &&
                 (limits.compute_capability == 0 || limits.compute_capability >= 80);
  if (w.channels_last) {
    // 32 channels (a warp's lanes), then the longest run of a row's outputs up to 256 threads.
    p.block_n = std::max(p.vec_a, 32);
    p.warp_n = w.channels % 2 == 0 ? 2 : 1;
    p.block_m = p.warp_m;
    for (std::int64_t d = p.warp_m; d <= q && d / p.warp_m * (p.block_n / p.warp_n) <= 256; d += p.warp_m)
      if (q % d == 0) p.block_m = static_cast<int>(d);
    return p;
  }
  // Whole rows, about 64 threads of them; a part of a row when one row needs more threads.
  std::int64_t rows = 1;
  while (rows * 2 <= w.row.outputs && q * rows * 2 / p.warp_m <= 64) rows *= 2;
  p.block_m = static_cast<int>(q * rows);
  while (p.block_m / p.warp_m > 256 && p.block_m % 2 == 0 && q % (p.block_m / 2) == 0 && (p.block_m / 2) % p.warp_m == 0)
    p.block_m /= 2;
  // Batch entries until the block has about 128 threads.
  p.block_n = 1;
  while (p.block_n * 2 <= g.batch && (p.block_m / p.warp_m) * p.block_n * 2 <= 128) p.block_n *= 2;
  return p;
}

KnobChoices window_choices(const ImplicitGemm& g) {
  const WindowPlan w = window_plan(g);
  std::vector<int> warp_m;  // outputs per thread along a row
  for (int t : {1, 2, 4, 8})
    if (w.col.outputs % t == 0) warp_m.push_back(t);
  KnobChoices c;
  // block_m and block_n (batch entries per block) are drawn by window_block_tiles.
  c.set("block_m", {1})
      .set("block_n", {1})
      .set("block_k", {window_block_k(g)})  // the whole window in one step
      .set_each("warp_m", warp_m)
      .set_each("warp_n", w.channels_last ? std::vector<int>{1, 2, 4, 8} : std::vector<int>{1})  // channels a thread
      .set("stages", {1})
      .set("smem_pad", {0})
      .set_each("vec_a", powers_up_to(window_vector_limit(g)))  // the image's copies
      .set("async_copy", {0, 1})  // where the copies allow it
      .set("window", {1});
  return c;
}

/// The window's constants: the block's outputs and batch entries, the window's geometry, the
/// staged slice and, where segments are misaligned, the aligned chunks they are read in.
void emit_window_constants(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p,
                           const WindowPlan& w, const WindowTile& t) {
  const int threads = block_threads(g, p);
  os << "constexpr int M = " << g.M << ", N = 1;  // outputs per batch entry (rows x columns); one filter each\n"
     << "constexpr int BATCH = " << g.batch << ";\n"
     << "constexpr int BM = " << p.block_m << ", BZ = " << p.block_n << ";  // outputs and batch entries per block\n"
     << "constexpr int TM = " << p.warp_m << ";  // outputs per thread, along a row\n"
     << "constexpr int THREADS = " << threads << ";\n"
     << "// The window: input index = output * ST + tap * DIL + OFF along rows (R) and columns (C)\n"
     << "constexpr int OQ = " << w.col.outputs << ";  // outputs per row\n"
     << "constexpr int ST_R = " << w.row.stride << ", DIL_R = " << w.row.dilation << ", OFF_R = " << w.row.offset
     << ", TAPS_R = " << w.row.taps << ", H_R = " << w.row.size << ";\n"
     << "constexpr int ST_C = " << w.col.stride << ", DIL_C = " << w.col.dilation << ", OFF_C = " << w.col.offset
     << ", TAPS_C = " << w.col.taps << ", W_C = " << w.col.size << ";\n"
     << "constexpr int ROW_STRIDE = " << w.row_stride << ";  // image elements between rows\n";
  if (w.channels_last)
    os << "constexpr int COL_STRIDE = " << w.col_stride << ";  // image elements between columns\n"
       << "constexpr int CV = " << p.warp_n << ";  // consecutive channels (batch entries) per thread\n"
       << "constexpr int X_BYTES = " << staged_window_bytes(g, p, t)
       << ";  // the staged window; the filter taps follow\n"
       << "// Channels last: the block's BZ batch entries (consecutive channels) are staged side by side,\n"
       << "// [IN_ROWS][LD][BZ], and copied V channels at a time.\n";
  os
     << "constexpr int V = " << p.vec_a << ";  // image elements per copy\n"
     << "constexpr int IN_ROWS = " << t.in_rows << ", LD = " << t.ld << ";  // the staged window of one batch entry\n"
     << "constexpr int SLICE = IN_ROWS * LD;\n"
     << "constexpr int SEG = " << t.segment << ";  // inputs of one filter row that a thread's outputs read\n"
     << "constexpr bool ONE_ROW = " << (t.one_row ? "true" : "false") << ";  // a block's outputs lie in one row\n";
  if (t.chunk > 1)
    os << "// Every segment starts MIS elements past a multiple of CHUNK: read as CHUNKS aligned vectors\n"
       << "// of CHUNK elements from LEAD elements before it.\n"
       << "constexpr int MIS = " << t.misalign << ", CHUNK = " << t.chunk << ", LEAD = " << t.lead
       << ", CHUNKS = " << t.chunks << ";\n";
  os << "\n";
}

/// image_base (the image's offset for a batch entry) and tap (one filter tap, as float).
void emit_window_accessors(std::ostringstream& os, const ImplicitGemm& g, const WindowPlan& w) {
  const Compute& c = *g.compute;
  const Access& img = c.inputs[g.a_input];
  const Access& wts = c.inputs[g.b_input];
  const Tensor& img_t = c.tensor_of(img);
  const Tensor& wts_t = c.tensor_of(wts);
  const std::string tb = storage_type(g.hw->b_dtype);
  // The image's part that the batch entry fixes: every dimension but the window's.
  {
    std::vector<bool> used = used_by(c, img);
    os << "// " << img_t.name << ": offset and bounds of batch entry z (its dimensions outside the window)\n"
       << "struct ImageBase {\n  int offset;\n  bool ok;\n};\n"
       << "__device__ __forceinline__ ImageBase image_base(int z) {\n";
    decompose(os, c, g.batch_iters, "z", used, "  ");
    zero_iterators(os, g, img, "  ");
    const auto [ok, offset] = bounds_and_offset(c, img, {w.col.dim, w.row.dim});
    os << "  ImageBase b;\n  b.ok = z < BATCH" << (ok.empty() ? "" : " && " + ok) << ";\n"
       << "  b.offset = b.ok ? " << (offset.empty() ? "0" : offset) << " : 0;\n  return b;\n}\n\n";
  }
  // One filter tap of batch entry z.
  {
    std::vector<bool> used = used_by(c, wts);
    os << "// " << wts_t.name << " at tap (tr, ts) of batch entry z, as float; zero outside the tensor\n"
       << "__device__ __forceinline__ float tap(const " << tb << "* __restrict__ src, int z, int tr, int ts) {\n";
    decompose(os, c, g.batch_iters, "z", used, "  ");
    zero_iterators(os, g, wts, "  ");
    if (w.row.tap_iter >= 0 && wts.uses(w.row.tap_iter))
      os << "  const int it_" << c.iters[w.row.tap_iter].name << " = tr;\n";
    if (w.col.tap_iter >= 0 && wts.uses(w.col.tap_iter))
      os << "  const int it_" << c.iters[w.col.tap_iter].name << " = ts;\n";
    os << "  (void)tr;\n  (void)ts;\n";
    const auto [ok, offset] = bounds_and_offset(c, wts, {});
    const std::string at = "src[" + (offset.empty() ? std::string("0") : offset) + "]";
    if (ok.empty())
      os << "  return " << element_to_float(g.hw->b_dtype, at) << ";\n}\n\n";
    else
      os << "  return (" << ok << ") ? " << element_to_float(g.hw->b_dtype, at) << " : 0.f;\n}\n\n";
  }
}

/// The end of a staging loop: one copy of vec_a elements from a_src + offset to dst (zeros where
/// !ok), with cp.async (then committed) or a vector or element copy.
void emit_window_copy(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p) {
  const int copy_bytes = p.vec_a * std::max(1, dtype_bits(g.hw->a_dtype) / 8);
  const bool async = p.async_copy == 1;
  if (async)
    os << "    cp_async<" << copy_bytes << ">(dst, a_src + offset, ok);\n";
  else if (p.vec_a > 1)
    os << "    " << vector_type(copy_bytes) << " v{};\n"
       << "    if (ok) v = *reinterpret_cast<const " << vector_type(copy_bytes) << "*>(a_src + offset);\n"
       << "    *reinterpret_cast<" << vector_type(copy_bytes) << "*>(dst) = v;\n";
  else
    os << "    *dst = ok ? a_src[offset] : static_cast<" << storage_type(g.hw->a_dtype) << ">(0.0f);\n";
  os << "  }\n";
  if (async) os << "  cp_async_commit();\n";
}

/// The block copies the window its outputs read into shared memory: the head of the copy loop,
/// up to each copy's source offset, ok and dst; emit_window_copy() ends it.
void emit_window_staging(std::ostringstream& os, const ImplicitGemm& g) {
  const std::string ta = storage_type(g.hw->a_dtype);
  os << "  const int m0 = blockIdx.y * BM, z0 = blockIdx.z * BZ;\n"
     << "  // The block's first output row and column, and the window they read: image rows from h0,\n"
     << "  // columns from w_start, staged from w0 (aligned down to the copies' vectors).\n"
     << "  const int p_lo = m0 / OQ, c_lo = ONE_ROW ? m0 % OQ : 0;\n"
     << "  const int h0 = p_lo * ST_R + OFF_R;\n"
     << "  const int w_start = c_lo * ST_C + OFF_C, w0 = w_start - (w_start & (V - 1));\n"
     << "  constexpr int ROW_COPIES = LD / V, COPIES = BZ * IN_ROWS * ROW_COPIES;\n"
     << "  for (int e = threadIdx.x; e < COPIES; e += THREADS) {\n"
     << "    const int zl = e / (IN_ROWS * ROW_COPIES), rest = e % (IN_ROWS * ROW_COPIES);\n"
     << "    const int r = rest / ROW_COPIES, col = rest % ROW_COPIES * V;\n"
     << "    const ImageBase b = image_base(z0 + zl);\n"
     << "    const int h = h0 + r, w = w0 + col;  // whole vectors lie inside or outside the row (W_C % V == 0)\n"
     << "    const bool ok = b.ok && (unsigned)h < (unsigned)H_R && (unsigned)w < (unsigned)W_C;\n"
     << "    const int offset = ok ? b.offset + h * ROW_STRIDE + w : 0;\n"
     << "    " << ta << "* dst = X + zl * SLICE + r * LD + col;\n";
}

/// Channels last: the block copies its BZ channels of the window, V channels a copy (the head of
/// the copy loop, as emit_window_staging()).
void emit_channels_last_staging(std::ostringstream& os, const ImplicitGemm& g) {
  os << "  const int m0 = blockIdx.y * BM, z0 = blockIdx.z * BZ;\n"
     << "  // The block's first output row and column, and the window they read: image rows from h0,\n"
     << "  // columns from w0.\n"
     << "  const int p_lo = m0 / OQ, c_lo = ONE_ROW ? m0 % OQ : 0;\n"
     << "  const int h0 = p_lo * ST_R + OFF_R, w0 = c_lo * ST_C + OFF_C;\n"
     << "  constexpr int ZV = BZ / V, COPIES = IN_ROWS * LD * ZV;\n"
     << "  for (int e = threadIdx.x; e < COPIES; e += THREADS) {\n"
     << "    const int zv = e % ZV, rest = e / ZV, r = rest / LD, col = rest % LD;\n"
     << "    const ImageBase b = image_base(z0 + zv * V);  // V channels of one image (the channels % V == 0)\n"
     << "    const int h = h0 + r, w = w0 + col;\n"
     << "    const bool ok = b.ok && (unsigned)h < (unsigned)H_R && (unsigned)w < (unsigned)W_C;\n"
     << "    const int offset = ok ? b.offset + h * ROW_STRIDE + w * COL_STRIDE : 0;\n"
     << "    " << storage_type(g.hw->a_dtype) << "* dst = X + (r * LD + col) * BZ + zv * V;\n";
}

/// Each thread's run of TM outputs from the staged window and its filter taps, then the stores.
void emit_window_math(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p, const WindowTile& t,
                      int out_vec) {
  const std::string ta = storage_type(g.hw->a_dtype), tb = storage_type(g.hw->b_dtype),
                    tout = storage_type(g.compute->tensor_of(g.compute->output).dtype);
  const int elem_bytes = std::max(1, dtype_bits(g.hw->a_dtype) / 8);
  const bool async = p.async_copy == 1;
  os << "  // This thread's batch entry and run of outputs; its filter taps load while the window lands.\n"
     << "  const int zl = threadIdx.x / (BM / TM), mt = m0 + threadIdx.x % (BM / TM) * TM, z = z0 + zl;\n"
     << "  const bool active = z < BATCH && mt < M;\n"
     << "  float wt[TAPS_R][TAPS_C];\n"
     << "  #pragma unroll\n  for (int tr = 0; tr < TAPS_R; ++tr)\n"
     << "    #pragma unroll\n    for (int ts = 0; ts < TAPS_C; ++ts) wt[tr][ts] = active ? tap(b_src, z, tr, ts) : 0.f;\n";
  if (async) os << "  cp_async_wait<0>();\n";
  os << "  __syncthreads();\n"
     << "  if (!active) return;\n"
     << "  const int pr = mt / OQ, cc = mt % OQ;\n"
     << "  float acc[TM];\n"
     << "  #pragma unroll\n  for (int j = 0; j < TM; ++j) acc[j] = 0.f;\n";
  if (t.chunk > 1) {
    const std::string vt = vector_type(static_cast<int>(t.chunk) * elem_bytes);
    os << "  // w_start - w0 == MIS in every block of this schedule; x is CHUNK-aligned.\n"
       << "  const " << ta << "* x = X + zl * SLICE + (pr - p_lo) * ST_R * LD + (cc - c_lo) * ST_C + (MIS - LEAD);\n"
       << "  #pragma unroll\n  for (int tr = 0; tr < TAPS_R; ++tr) {\n"
       << "    const " << vt << "* row = reinterpret_cast<const " << vt << "*>(x + tr * DIL_R * LD);\n"
       << "    " << vt << " raw[CHUNKS];  // the row's inputs, each read from shared memory once\n"
       << "    #pragma unroll\n    for (int i = 0; i < CHUNKS; ++i) raw[i] = row[i];\n"
       << "    const " << ta << "* in = reinterpret_cast<const " << ta << "*>(raw) + LEAD;\n"
       << "    float seg[SEG];\n"
       << "    #pragma unroll\n    for (int i = 0; i < SEG; ++i) seg[i] = " << element_to_float(g.hw->a_dtype, "in[i]")
       << ";\n";
  } else {
    os << "  const " << ta << "* x = X + zl * SLICE + (pr - p_lo) * ST_R * LD + (cc - c_lo) * ST_C + (w_start - w0);\n"
       << "  #pragma unroll\n  for (int tr = 0; tr < TAPS_R; ++tr) {\n"
       << "    const " << ta << "* row = x + tr * DIL_R * LD;\n"
       << "    float seg[SEG];  // the row's inputs, each read from shared memory once\n"
       << "    #pragma unroll\n    for (int i = 0; i < SEG; ++i) seg[i] = " << element_to_float(g.hw->a_dtype, "row[i]")
       << ";\n";
  }
  os
     << "    #pragma unroll\n    for (int j = 0; j < TM; ++j)\n"
     << "      #pragma unroll\n      for (int ts = 0; ts < TAPS_C; ++ts) acc[j] += wt[tr][ts] * seg[j * ST_C + ts * DIL_C];\n"
     << "  }\n";
  if (out_vec > 1 && !g.compute->epilogue.empty())  // the epilogue rounds its result
    os << "  #pragma unroll\n  for (int j = 0; j < TM; j += " << out_vec << ") store_d_vec(out, mt + j, 0, z, acc + j);\n";
  else if (out_vec > 1)
    os << "  __align__(16) " << tout << " values[TM];  // rounded to the output's dtype\n"
       << "  #pragma unroll\n  for (int j = 0; j < TM; ++j) values[j] = (" << tout << ")acc[j];\n"
       << "  #pragma unroll\n  for (int j = 0; j < TM; j += " << out_vec << ") store_d_vec(out, mt + j, 0, z, values + j);\n";
  else
    os << "  #pragma unroll\n  for (int j = 0; j < TM; ++j) store_d(out, mt + j, 0, z, " << stored_value(g, tout, "acc[j]") << ");\n";
  os << "}\n";
}

/// Channels last: each thread's run of TM outputs for its CV consecutive channels, read from the
/// staged window CV at a time; a warp's lanes take consecutive channels, so that its reads are
/// conflict-free and its stores coalesced (one vector of CV outputs where the output's channels
/// are contiguous and no epilogue loads per element).
void emit_channels_last_math(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p, bool vector_store) {
  const std::string ta = storage_type(g.hw->a_dtype), tout = storage_type(g.compute->tensor_of(g.compute->output).dtype);
  const int bytes = p.warp_n * std::max(1, dtype_bits(g.hw->a_dtype) / 8);
  const bool async = p.async_copy == 1;
  os << "  // The block's filter taps, read once while the window lands (lanes along the channels: no\n"
     << "  // bank conflicts).\n"
     << "  constexpr int TAPS = TAPS_R * TAPS_C;\n"
     << "  float* Wt_s = reinterpret_cast<float*>(smem + X_BYTES);  // [TAPS][BZ]\n"
     << "  for (int e = threadIdx.x; e < BZ * TAPS; e += THREADS) {\n"
     << "    const int zt = e % BZ, t = e / BZ;\n"
     << "    Wt_s[t * BZ + zt] = z0 + zt < BATCH ? tap(b_src, z0 + zt, t / TAPS_C, t % TAPS_C) : 0.f;\n"
     << "  }\n";
  if (async) os << "  cp_async_wait<0>();\n";
  os << "  __syncthreads();\n"
     << "  // This thread's channels and run of outputs.\n"
     << "  const int zl = threadIdx.x % (BZ / CV) * CV, mt = m0 + threadIdx.x / (BZ / CV) * TM, z = z0 + zl;\n"
     << "  if (z >= BATCH || mt >= M) return;  // all CV channels or none (BATCH % CV == 0)\n"
     << "  float wt[CV][TAPS_R][TAPS_C];\n"
     << "  #pragma unroll\n  for (int tr = 0; tr < TAPS_R; ++tr)\n"
     << "    #pragma unroll\n    for (int ts = 0; ts < TAPS_C; ++ts)\n"
     << "      #pragma unroll\n      for (int c = 0; c < CV; ++c) wt[c][tr][ts] = Wt_s[(tr * TAPS_C + ts) * BZ + zl + c];\n"
     << "  const int pr = mt / OQ, cc = mt % OQ;\n"
     << "  float acc[TM][CV] = {};\n"
     << "  const " << ta << "* x = X + ((pr - p_lo) * ST_R * LD + (cc - c_lo) * ST_C) * BZ + zl;\n"
     << "  #pragma unroll\n  for (int tr = 0; tr < TAPS_R; ++tr) {\n"
     << "    const " << ta << "* row = x + tr * DIL_R * LD * BZ;\n"
     << "    float seg[SEG][CV];  // the row's inputs, each read from shared memory once\n"
     << "    #pragma unroll\n    for (int i = 0; i < SEG; ++i) {\n"
     << "      const " << vector_type(bytes) << " raw = *reinterpret_cast<const " << vector_type(bytes)
     << "*>(row + i * BZ);\n"
     << "      #pragma unroll\n      for (int c = 0; c < CV; ++c) seg[i][c] = "
     << element_to_float(g.hw->a_dtype, "reinterpret_cast<const " + ta + "*>(&raw)[c]") << ";\n    }\n"
     << "    #pragma unroll\n    for (int j = 0; j < TM; ++j)\n"
     << "      #pragma unroll\n      for (int ts = 0; ts < TAPS_C; ++ts)\n"
     << "        #pragma unroll\n        for (int c = 0; c < CV; ++c) acc[j][c] += wt[c][tr][ts] * seg[j * ST_C + ts * DIL_C][c];\n"
     << "  }\n";
  if (vector_store)
    os << "  #pragma unroll\n  for (int j = 0; j < TM; ++j) {\n"
       << "    __align__(16) " << tout << " values[CV];  // rounded to the output's dtype\n"
       << "    #pragma unroll\n    for (int c = 0; c < CV; ++c) values[c] = (" << tout << ")acc[j][c];\n"
       << "    store_d_vec(out, mt + j, 0, z, values);\n  }\n";
  else
    os << "  #pragma unroll\n  for (int j = 0; j < TM; ++j)\n"
       << "    #pragma unroll\n    for (int c = 0; c < CV; ++c) store_d(out, mt + j, 0, z + c, "
       << stored_value(g, tout, "acc[j][c]") << ");\n";
  os << "}\n";
}

KernelSource emit_simt_window(const ImplicitGemm& g, const ScheduleParams& p) {
  const WindowPlan w = window_plan(g);
  TMAP_CHECK(w.why_not.empty(), "window staging of a mapping without a window: " + w.why_not);
  const DType out_dtype = g.compute->tensor_of(g.compute->output).dtype;
  const std::string ta = storage_type(g.hw->a_dtype), tb = storage_type(g.hw->b_dtype), tout = storage_type(out_dtype);
  const WindowTile t = window_tile(w, p);
  KernelSource k = kernel_shell(g, p, block_threads(g, p));
  k.grid = {1, (g.M + p.block_m - 1) / p.block_m, (g.batch + p.block_n - 1) / p.block_n};
  const bool async = p.async_copy == 1;
  // Outputs of a thread's run stored together where consecutive m are contiguous in the output.
  int out_vec = std::min(p.warp_m, output_vector_width(g, 'm', dtype_bits(out_dtype)));
  while (out_vec > 1 && out_vec * dtype_bits(out_dtype) / 8 > 16) out_vec /= 2;
  // Channels last: a thread's CV channels are stored as one vector where they are contiguous.
  const bool vector_store = w.channels_last && p.warp_n > 1 && w.output_channels_last &&
                            g.compute->epilogue.empty() && p.warp_n * dtype_bits(out_dtype) / 8 <= 16;
  if (w.channels_last) out_vec = vector_store ? p.warp_n : 1;

  std::ostringstream os;
  emit_header(os, g);
  os << "// SIMT window staging: each block copies the input window its outputs read into shared memory\n"
     << "// once; each thread computes TM neighbouring outputs of one row from it.\n";
  auto uses = [&](DType d) { return g.hw->a_dtype == d || g.hw->b_dtype == d || out_dtype == d; };
  if (uses(DType::kFloat16)) os << "#include <cuda_fp16.h>\n";
  if (uses(DType::kBFloat16)) os << "#include <cuda_bf16.h>\n";
  os << "\nnamespace {\n";
  emit_window_constants(os, g, p, w, t);
  if (async) emit_cp_async_helpers(os);

  emit_window_accessors(os, g, w);
  emit_output_scatter(os, g, tout, out_vec, w.channels_last ? 'z' : 'm');
  os << "}  // namespace\n\n";

  os << "extern \"C\" __global__ void __launch_bounds__(THREADS)\n"
     << k.name << "(const " << ta << "* __restrict__ a_src, const " << tb << "* __restrict__ b_src, "
     << output_params(g, tout) << ", float* __restrict__ partial) {\n"
     << output_bundle(g) << "  (void)partial;\n"
     << "  extern __shared__ __align__(128) unsigned char smem[];\n"
     << "  " << ta << "* X = reinterpret_cast<" << ta << "*>(smem);  // "
     << (w.channels_last ? "[IN_ROWS][LD][BZ]\n" : "[BZ][IN_ROWS][LD]\n");
  if (w.channels_last)
    emit_channels_last_staging(os, g);
  else
    emit_window_staging(os, g);
  emit_window_copy(os, g, p);
  if (w.channels_last)
    emit_channels_last_math(os, g, p, vector_store);
  else
    emit_window_math(os, g, p, t, out_vec);
  k.code = os.str();
  return k;
}

}  // namespace tmap::pipeline
