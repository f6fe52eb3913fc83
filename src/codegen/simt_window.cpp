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
  // The first column is aligned down to the vector: up to vec - 1 more elements.
  t.ld = round_up(span + p.vec_a - 1, p.vec_a);
  t.segment = (p.warp_m - 1) * w.col.stride + (w.col.taps - 1) * w.col.dilation + 1;
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
  if (w.col.dim != static_cast<int>(t.shape.size()) - 1)
    return fail("the image's last (contiguous) dimension is not a window dimension");
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
  int v = 1;
  while (v * 2 * bytes <= 16 && w.col.size % (v * 2) == 0) v *= 2;
  return v;
}

int window_block_k(const ImplicitGemm& g) {
  for (int k = 8; k <= 256; k *= 2)
    if (k >= g.K) return k;
  return 0;
}

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
  fixed("warp_n", p.warp_n, 1, "N is 1; block_n counts batch entries");
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
    fail(ScheduleError::kBadVector, "vec_a = " + std::to_string(p.vec_a) + ": the image's rows of " +
                                        std::to_string(w.col.size) + " elements allow vectors of up to " +
                                        std::to_string(limit));
  const std::int64_t bytes = std::int64_t{p.vec_a} * std::max(1, dtype_bits(g.hw->a_dtype) / 8);
  if (p.async_copy != 0 && (p.async_copy != 1 || (bytes != 4 && bytes != 8 && bytes != 16) ||
                            (limits.compute_capability != 0 && limits.compute_capability < 80)))
    fail(ScheduleError::kBadAsyncCopy, "async_copy = " + std::to_string(p.async_copy) + " with copies of " +
                                           std::to_string(bytes) + " bytes on sm_" +
                                           std::to_string(limits.compute_capability));
  if (p.block_n < 1 || (g.batch + p.block_n - 1) / p.block_n > 65535)
    fail(ScheduleError::kGridTooLarge, "block_n = " + std::to_string(p.block_n) + " batch entries per block of " +
                                           std::to_string(g.batch));
  if (out.empty() && window_tile(w, p).segment > kMaxSegment)
    fail(ScheduleError::kBadOption, "warp_m = " + std::to_string(p.warp_m) + ": each thread would hold " +
                                        std::to_string(window_tile(w, p).segment) + " inputs of a row (at most " +
                                        std::to_string(kMaxSegment) + ")");
}

std::int64_t window_shared_bytes(const ImplicitGemm& g, const ScheduleParams& p) {
  const WindowPlan w = window_plan(g);
  // Parameters out of any sane range are refused by validate_window; only keep the arithmetic
  // below from overflowing on them.
  if (!w.why_not.empty() || p.block_m < 1 || p.vec_a < 1 || p.warp_m < 1 || p.block_n < 1 || p.vec_a > 16 ||
      p.block_m > (1 << 24) || p.block_n > (1 << 24))
    return 0;
  const int bytes = std::max(1, dtype_bits(g.hw->a_dtype) / 8);
  return round_up(std::int64_t{p.block_n} * window_tile(w, p).slice() * bytes, 128);
}

std::vector<int> window_block_tiles(const ImplicitGemm& g, const ScheduleParams& p, char axis) {
  const WindowPlan w = window_plan(g);
  std::vector<int> out;
  if (axis == 'n') {
    for (int b = 1; b <= 64 && b < 2 * g.batch; b *= 2) out.push_back(b);
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
  // Whole rows, about 64 threads of them; a part of a row when one row needs more threads.
  std::int64_t rows = 1;
  while (rows * 2 <= w.row.outputs && q * rows * 2 / p.warp_m <= 64) rows *= 2;
  p.block_m = static_cast<int>(q * rows);
  while (p.block_m / p.warp_m > 256 && p.block_m % 2 == 0 && q % (p.block_m / 2) == 0 && (p.block_m / 2) % p.warp_m == 0)
    p.block_m /= 2;
  // Batch entries until the block has about 128 threads.
  p.block_n = 1;
  while (p.block_n * 2 <= g.batch && (p.block_m / p.warp_m) * p.block_n * 2 <= 128) p.block_n *= 2;
  p.vec_a = window_vector_limit(g);
  const int bytes = p.vec_a * std::max(1, dtype_bits(g.hw->a_dtype) / 8);
  p.async_copy = (bytes == 4 || bytes == 8 || bytes == 16) &&
                 (limits.compute_capability == 0 || limits.compute_capability >= 80);
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
      .set("warp_n", {1})
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
     << "constexpr int ROW_STRIDE = " << w.row_stride << ";  // image elements between rows\n"
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

/// The block copies the window its outputs read into shared memory (with cp.async, or vectors).
void emit_window_staging(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p) {
  const std::string ta = storage_type(g.hw->a_dtype);
  const int copy_bytes = p.vec_a * std::max(1, dtype_bits(g.hw->a_dtype) / 8);
  const bool async = p.async_copy == 1;
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
  if (async)
    os << "    cp_async<" << copy_bytes << ">(dst, a_src + offset, ok);\n";
  else if (p.vec_a > 1)
    os << "    " << vector_type(copy_bytes) << " v{};\n"
       << "    if (ok) v = *reinterpret_cast<const " << vector_type(copy_bytes) << "*>(a_src + offset);\n"
       << "    *reinterpret_cast<" << vector_type(copy_bytes) << "*>(dst) = v;\n";
  else
    os << "    *dst = ok ? a_src[offset] : static_cast<" << ta << ">(0.0f);\n";
  os << "  }\n";
  if (async) os << "  cp_async_commit();\n";
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
  emit_output_scatter(os, g, tout, out_vec, 'm');
  os << "}  // namespace\n\n";

  os << "extern \"C\" __global__ void __launch_bounds__(THREADS)\n"
     << k.name << "(const " << ta << "* __restrict__ a_src, const " << tb << "* __restrict__ b_src, "
     << output_params(g, tout) << ", float* __restrict__ partial) {\n"
     << output_bundle(g) << "  (void)partial;\n"
     << "  extern __shared__ __align__(128) unsigned char smem[];\n"
     << "  " << ta << "* X = reinterpret_cast<" << ta << "*>(smem);  // [BZ][IN_ROWS][LD]\n";
  emit_window_staging(os, g, p);
  emit_window_math(os, g, p, t, out_vec);
  k.code = os.str();
  return k;
}

}  // namespace tmap::pipeline
