// TMA views of a wgmma kernel's operands and output (wgmma_tma.h).
#include "wgmma_tma.h"

#include <sstream>

#include "tmap/support/diagnostic.h"

namespace tmap::wgmma {

using namespace pipeline;

namespace {

/// Operand `which`'s access as the TMA views read it: its tensor, the name errors give it, its
/// element size, and which tensor dimension each iterator indexes. Iterators of extent 1 never
/// count: their terms are always zero.
struct OperandAccess {
  OperandAccess(const ImplicitGemm& g, int which)
      : which(which),
        c(*g.compute),
        acc(c.inputs[which == 0 ? g.a_input : g.b_input]),
        t(c.tensor_of(acc)),
        name("operand " + std::string(which == 0 ? "A" : "B") + " (" + t.name + ")"),
        bytes(elem_bytes(which == 0 ? g.hw->a_dtype : g.hw->b_dtype)),
        rank(static_cast<int>(acc.indices.size())) {}
  /// The output's access, as TMA stores write it (which 2).
  explicit OperandAccess(const ImplicitGemm& g)
      : which(2),
        c(*g.compute),
        acc(c.output),
        t(c.tensor_of(acc)),
        name("the output (" + t.name + ")"),
        bytes(dtype_bits(t.dtype) / 8),
        rank(static_cast<int>(acc.indices.size())) {}

  std::int64_t extent(int it) const { return c.iters[it].extent; }
  /// The terms of `e` whose iterators have an extent above 1.
  std::vector<std::pair<int, std::int64_t>> live_terms(const AffineExpr& e) const {
    std::vector<std::pair<int, std::int64_t>> out;
    for (const auto& [x, coef] : e.terms)
      if (extent(x) != 1) out.push_back({x, coef});
    return out;
  }
  /// Whether `e` is iterator `it` alone.
  bool alone(const AffineExpr& e, int it) const {
    if (e.constant != 0 || e.coef(it) != 1) return false;
    for (const auto& [x, coef] : e.terms)
      if (x != it && extent(x) != 1) return false;
    return true;
  }
  /// The one dimension iterator `it` indexes (-1: none or several).
  int dim_of(int it) const {
    int found = -1;
    for (int d = 0; d < rank; ++d)
      if (acc.indices[d].uses(it)) {
        if (found >= 0) return -1;
        found = d;
      }
    return found;
  }

  const int which;  ///< 0: A, 1: B, 2: the output
  const Compute& c;
  const Access& acc;
  const Tensor& t;
  const std::string name;
  const int bytes, rank;
};

/// Appends to `dims` the dimension that virtual axis `axis` (iterators, outermost first) runs
/// along: its iterators must index consecutive tensor dimensions alone, all but the outermost
/// covered whole. Marks those dimensions `used`; returns the reason when the axis is no such run.
std::string tma_axis(const OperandAccess& a, const std::vector<int>& axis, TmaDim::Role role, const char* axis_name,
                     std::vector<bool>& used, std::vector<TmaDim>& dims) {
  const std::vector<int> its = a.c.live_iterators(axis);
  if (its.empty()) return a.name + ": its " + axis_name + " axis has extent 1";
  int d = a.dim_of(its.back());
  if (d < 0 || !a.alone(a.acc.indices[d], its.back()))
    return a.name + ": its " + axis_name + " axis is not one tensor dimension indexed by an iterator alone";
  TmaDim dim{role, static_cast<std::uint64_t>(a.extent(its.back())), static_cast<std::uint64_t>(a.t.stride(d) * a.bytes)};
  used[d] = true;
  for (int x = static_cast<int>(its.size()) - 2; x >= 0; --x) {
    const int inner = d;
    d = a.dim_of(its[x]);
    if (d != inner - 1 || !a.alone(a.acc.indices[d], its[x]) || a.t.shape[inner] != a.extent(its[x + 1]))
      return a.name + ": its " + axis_name + " axis is not one strided run of the tensor";
    dim.extent *= static_cast<std::uint64_t>(a.extent(its[x]));
    used[d] = true;
  }
  dims.push_back(dim);
  return "";
}

/// Appends to `dims` the tensor's dimensions that no axis runs along: each indexed by one batch or
/// serial iterator alone, or by a constant. Returns the reason when one is neither.
std::string tma_other_dims(const ImplicitGemm& g, const OperandAccess& a, const std::vector<bool>& used,
                           std::vector<TmaDim>& dims) {
  for (int d = 0; d < a.rank; ++d) {
    if (used[d]) continue;
    const AffineExpr& e = a.acc.indices[d];
    const auto live = a.live_terms(e);
    const auto st = static_cast<std::uint64_t>(a.t.stride(d) * a.bytes), ext = static_cast<std::uint64_t>(a.t.shape[d]);
    if (live.empty()) {
      if (a.t.shape[d] == 1 && e.constant == 0) continue;
      if (e.constant < 0 || e.constant >= a.t.shape[d])
        return a.name + ": dimension " + std::to_string(d) + " is out of bounds";
      dims.push_back({TmaDim::kFixed, ext, st, -1, e.constant});
    } else if (const int it = live[0].first; live.size() == 1 && a.alone(e, it) && a.dim_of(it) == d &&
                                             (contains(g.batch_iters, it) || contains(g.serial_iters, it))) {
      dims.push_back({contains(g.batch_iters, it) ? TmaDim::kBatch : TmaDim::kSerial, ext, st, it});
    } else {
      return a.name + ": dimension " + std::to_string(d) + " is not indexed by one batch or serial iterator alone";
    }
  }
  return "";
}

/// What a tensor map holds: at most 5 dimensions, row strides in multiples of 16 bytes below
/// 2^40, extents up to 2^32.
std::string tma_limits(const std::string& name, const std::vector<TmaDim>& dims) {
  if (dims.size() > 5) return name + ": a TMA view has at most 5 dimensions, this one " + std::to_string(dims.size());
  for (std::size_t d = 1; d < dims.size(); ++d)
    if (dims[d].stride_bytes % 16 || dims[d].stride_bytes >= (1ull << 40))
      return name + ": a row stride of " + std::to_string(dims[d].stride_bytes) +
             " bytes; TMA needs multiples of 16 bytes";
  for (const TmaDim& d : dims)
    if (d.extent > (1ull << 32)) return name + ": a dimension of more than 2^32 elements";
  return "";
}

}  // namespace

std::string tma_view(const ImplicitGemm& g, int which, std::vector<TmaDim>& dims) {
  const OperandAccess a(g, which);
  std::vector<bool> used(a.rank, false);
  dims.clear();
  const bool mn = stored_along_mn(g, which);
  const std::vector<int>& mn_iters = which == 0 ? g.m_iters : g.n_iters;
  const char* mn_name = which == 0 ? "m" : "n";
  std::string why = tma_axis(a, mn ? mn_iters : g.k_iters, TmaDim::kCols, mn ? mn_name : "k", used, dims);
  if (why.empty()) why = tma_axis(a, mn ? g.k_iters : mn_iters, TmaDim::kRows, mn ? "k" : mn_name, used, dims);
  if (!why.empty()) return why;
  if (dims[0].stride_bytes != static_cast<std::uint64_t>(a.bytes)) return a.name + ": its stored rows are not contiguous";
  why = tma_other_dims(g, a, used, dims);
  return why.empty() ? tma_limits(a.name, dims) : why;
}

std::string output_tma_view(const ImplicitGemm& g, bool c_row, std::vector<TmaDim>& dims) {
  const OperandAccess a(g);
  std::vector<bool> used(a.rank, false);
  dims.clear();
  std::string why = tma_axis(a, c_row ? g.n_iters : g.m_iters, TmaDim::kCols, c_row ? "n" : "m", used, dims);
  if (why.empty()) why = tma_axis(a, c_row ? g.m_iters : g.n_iters, TmaDim::kRows, c_row ? "m" : "n", used, dims);
  if (!why.empty()) return why;
  if (dims[0].stride_bytes != static_cast<std::uint64_t>(a.bytes)) return a.name + ": its tile rows are not contiguous";
  why = tma_other_dims(g, a, used, dims);
  return why.empty() ? tma_limits(a.name, dims) : why;
}

namespace {

/// Reads dimension `d` (1 .. rank - 2) of an im2col operand's tensor as an output position times
/// a stride plus a filter tap times a dilation (either may be absent), into `sp`. The tap must be
/// a reduction (or serial) iterator other than the channels' `ci` and not one `taps_seen` holds;
/// it joins them. Returns the reason when the dimension is no such sum or TMA cannot walk it.
std::string im2col_spatial(const ImplicitGemm& g, const OperandAccess& a, int d, int ci,
                           const std::vector<int>& k_iters, std::vector<int>& taps_seen, Im2colView::Spatial& sp) {
  const std::vector<int>& pixels = a.which == 0 ? g.m_iters : g.n_iters;
  const AffineExpr& e = a.acc.indices[d];
  sp.lower = e.constant;
  for (const auto& [x, coef] : a.live_terms(e)) {
    if (contains(pixels, x) && sp.out < 0) {
      sp.out = x;
      sp.stride = coef;
    } else if ((contains(k_iters, x) || contains(g.serial_iters, x)) && x != ci && sp.tap < 0 && !contains(taps_seen, x)) {
      sp.tap = x;
      sp.dil = coef;
      taps_seen.push_back(x);
    } else {
      return a.name + ": dimension " + std::to_string(d) + " is not an output position times a stride plus a filter tap";
    }
  }
  if (sp.stride < 1 || sp.stride > 8) return a.name + ": a stride of " + std::to_string(sp.stride) + " (TMA walks 1 to 8)";
  if (sp.dil < 1 || sp.dil * (sp.tap >= 0 ? a.extent(sp.tap) - 1 : 0) > 65535)
    return a.name + ": a dilation of " + std::to_string(sp.dil) + " (im2col offsets are 0 to 65535)";
  sp.extent = sp.out >= 0 ? a.extent(sp.out) : 1;
  sp.upper = sp.lower + (sp.extent - 1) * sp.stride + 1 - a.t.shape[d];
  const std::int64_t range = a.rank == 3 ? 32768 : a.rank == 4 ? 128 : 16;
  if (sp.lower < -range || sp.lower >= range || sp.upper < -range || sp.upper >= range)
    return a.name + ": its bounding box corners " + std::to_string(sp.lower) + ", " + std::to_string(sp.upper) +
           " exceed what a rank-" + std::to_string(a.rank) + " im2col map holds (" + std::to_string(-range) + " to " +
           std::to_string(range - 1) + ")";
  return "";
}

/// Reads dimension 0 of an im2col operand's tensor: a constant 0, or one batch iterator or one
/// of the output positions' `pixels` (on `axis`) alone, into `batch_iter`. The reason if neither.
std::string im2col_batch(const ImplicitGemm& g, const OperandAccess& a, const std::vector<int>& pixels, const char* axis,
                         int& batch_iter) {
  const AffineExpr& first = a.acc.indices[0];
  const auto terms = a.live_terms(first);
  if (terms.empty()) return first.constant != 0 ? a.name + ": dimension 0 has a constant index" : "";
  if (terms.size() != 1 || terms[0].second != 1 || first.constant != 0 ||
      !(contains(g.batch_iters, terms[0].first) || contains(pixels, terms[0].first)))
    return a.name + ": dimension 0 is not indexed by one batch or " + axis + " iterator alone";
  batch_iter = terms[0].first;
  return "";
}

/// Why the reduction of an im2col operand is more than its channels `ci` and the filter taps
/// `taps` of its spatial dimensions, or a tap indexes its batch or channels ("" when neither).
std::string im2col_taps_only(const OperandAccess& a, const std::vector<int>& k_iters, int ci, const std::vector<int>& taps) {
  for (int it : k_iters)
    if (it != ci && !contains(taps, it)) return a.name + ": a reduction iterator that is not a filter tap";
  for (int d = 0; d < a.rank; ++d)
    for (const auto& [x, coef] : a.live_terms(a.acc.indices[d]))
      if (contains(taps, x) && (d == 0 || d == a.rank - 1)) return a.name + ": a filter tap indexes its batch or channels";
  return "";
}

}  // namespace

std::string im2col_view(const ImplicitGemm& g, int which, Im2colView& v) {
  const OperandAccess a(g, which);
  const std::string& name = a.name;
  const char* axis = which == 0 ? "m" : "n";
  const std::vector<int>& pixels = which == 0 ? g.m_iters : g.n_iters;
  const int rank = a.rank;
  if (stored_along_mn(g, which))
    return name + ": stored along " + axis + "; an im2col box holds k (channels) along its lines";
  if (rank < 3 || rank > 5) return name + ": im2col views tensors of 3 to 5 dimensions, this one has " + std::to_string(rank);
  const std::vector<int> k_iters = a.c.live_iterators(g.k_iters);
  if (k_iters.empty()) return name + ": no reduction axis";
  const int ci = k_iters.back();
  const AffineExpr& last = a.acc.indices[rank - 1];
  {
    const auto terms = a.live_terms(last);
    if (last.constant != 0 || terms.size() != 1 || terms[0].first != ci || terms[0].second != 1 ||
        a.extent(ci) != a.t.shape[rank - 1])
      return name + ": its last dimension is not the innermost reduction iterator over all its channels";
  }
  // Whole lines of the narrowest swizzle; validate() checks against the schedule's.
  if ((a.extent(ci) * a.bytes) % 32)
    return name + ": " + std::to_string(a.extent(ci)) + " channels are not a whole number of 32-byte lines";
  v = Im2colView{};
  v.which = which;
  v.rank = rank;
  v.shape.assign(a.t.shape.begin(), a.t.shape.end());
  v.channels = a.extent(ci);
  if (std::string why = im2col_batch(g, a, pixels, axis, v.batch_iter); !why.empty()) return why;
  std::vector<int> expected;  // the m (n) iterators im2col walks, slowest first
  if (v.batch_iter >= 0 && contains(pixels, v.batch_iter)) expected.push_back(v.batch_iter);
  std::vector<int> taps_seen;
  for (int d = 1; d < rank - 1; ++d) {
    Im2colView::Spatial sp;
    if (std::string why = im2col_spatial(g, a, d, ci, k_iters, taps_seen, sp); !why.empty()) return why;
    if (sp.out >= 0) expected.push_back(sp.out);
    v.spatial.push_back(sp);
  }
  if (a.c.live_iterators(pixels) != expected)  // both hold iterators of extent > 1 only
    return name + ": its " + axis + " iterators are not the image and output positions in the tensor's order";
  return im2col_taps_only(a, k_iters, ci, taps_seen);
}

std::string tma_source(const ImplicitGemm& g, int which, std::vector<TmaDim>& dims, Im2colView* im2col) {
  const std::string tiled = tma_view(g, which, dims);
  if (tiled.empty()) return tiled;
  Im2colView v;
  const std::string why = im2col_view(g, which, v);
  if (why.empty()) {
    if (im2col) *im2col = v;
    return "";
  }
  return tiled + "; nor is it an im2col view: " + why.substr(why.find(": ") + 2);
}

bool tma_operands(const ImplicitGemm& g) {
  std::vector<TmaDim> dims;
  return tma_source(g, 0, dims).empty() && tma_source(g, 1, dims).empty();
}

TensorMapSpec tensor_map(const ImplicitGemm& g, const ScheduleParams& p, int which, const std::vector<TmaDim>& dims) {
  const StoredTile t = stored_tile(g, p, which);
  TensorMapSpec m;
  m.operand = which;
  m.swizzle_bytes = line_bytes(p);
  m.dtype = which == 0 ? g.hw->a_dtype : g.hw->b_dtype;
  m.rank = static_cast<int>(dims.size());
  for (std::size_t d = 0; d < dims.size(); ++d) {
    m.dims[d] = dims[d].extent;
    if (d > 0) m.strides[d - 1] = dims[d].stride_bytes;
    m.box[d] = d == 0 ? static_cast<std::uint32_t>(line(t, p)) : d == 1 ? static_cast<std::uint32_t>(t.rows) : 1;
  }
  return m;
}

std::string tma_coordinate(const ImplicitGemm& g, int which, const TmaDim& d, const std::string& block, bool clamped) {
  const Compute& c = *g.compute;
  const bool mn = stored_along_mn(g, which);
  const std::string origin = std::string(which == 0 ? "m" : "n") + (clamped ? "_box" : "0");
  const std::string up = which == 0 ? "A" : "B";
  switch (d.role) {
    case TmaDim::kCols: return (mn ? origin : "k0") + " + " + block + " * " + up + "_W";
    case TmaDim::kRows: return mn ? "k0" : origin;
    case TmaDim::kBatch: return digit_code(c, g.batch_iters, d.iter, "z");
    case TmaDim::kSerial: return digit_code(c, g.serial_iters, d.iter, "s");
    case TmaDim::kFixed: return std::to_string(d.value);
  }
  return "0";
}

namespace {

/// `digit` (a digit_code()) as a factor of a product: its % parenthesized.
std::string factor(const std::string& digit) {
  return digit.find(" % ") == std::string::npos ? digit : "(" + digit + ")";
}

}  // namespace

TensorMapSpec im2col_map(const ImplicitGemm& g, const ScheduleParams& p, const Im2colView& v) {
  const StoredTile t = stored_tile(g, p, v.which);
  TensorMapSpec m;
  m.operand = v.which;
  m.swizzle_bytes = line_bytes(p);
  m.dtype = v.which == 0 ? g.hw->a_dtype : g.hw->b_dtype;
  m.rank = v.rank;
  m.im2col = true;
  std::uint64_t stride = static_cast<std::uint64_t>(t.bytes);
  for (int d = 0; d < v.rank; ++d) {
    const int dim = v.rank - 1 - d;  // innermost first
    m.dims[d] = static_cast<std::uint64_t>(v.shape[dim]);
    if (d > 0) m.strides[d - 1] = stride;
    stride *= static_cast<std::uint64_t>(v.shape[dim]);
  }
  for (int j = 0; j < v.rank - 2; ++j) {
    const Im2colView::Spatial& sp = v.spatial[v.rank - 3 - j];  // innermost spatial dimension first
    m.lower[j] = static_cast<int>(sp.lower);
    m.upper[j] = static_cast<int>(sp.upper);
    m.traversal[1 + j] = static_cast<std::uint32_t>(sp.stride);
  }
  m.box[0] = static_cast<std::uint32_t>(line(t, p));
  m.box[1] = static_cast<std::uint32_t>(t.rows);
  return m;
}

std::string im2col_origin(const ImplicitGemm& g, const Im2colView& v) {
  const Compute& c = *g.compute;
  const std::vector<int>& pixels = v.which == 0 ? g.m_iters : g.n_iters;
  const std::string op = v.which == 0 ? "a" : "b", origin = v.which == 0 ? "m0" : "n0";
  std::ostringstream os;
  os << "      // " << (v.which == 0 ? "A" : "B")
     << "'s im2col origin: the input coordinates of the block's first output pixel at tap 0.\n";
  for (int j = 0; j < v.rank - 2; ++j) {
    const Im2colView::Spatial& sp = v.spatial[v.rank - 3 - j];
    os << "      const int " << op << "_x" << j + 1 << " = " << sp.lower;
    if (sp.out >= 0) os << " + " << sp.stride << " * " << factor(digit_code(c, pixels, sp.out, origin));
    os << ";\n";
  }
  os << "      const int " << op << "_x" << v.rank - 1 << " = ";
  if (v.batch_iter < 0)
    os << "0";
  else if (contains(pixels, v.batch_iter))
    os << digit_code(c, pixels, v.batch_iter, origin);
  else
    os << digit_code(c, g.batch_iters, v.batch_iter, "z");
  os << ";\n";
  return os.str();
}

std::string im2col_loads(const ImplicitGemm& g, const Im2colView& v, int blocks) {
  const Compute& c = *g.compute;
  const std::string op = v.which == 0 ? "a" : "b", up = v.which == 0 ? "A" : "B", base = v.which == 0 ? "As" : "Bs";
  std::ostringstream l;
  l << "        #pragma unroll\n        for (int blk = 0; blk < " << blocks << "; ++blk) {\n"
    << "          const int kk = k0 + blk * " << up << "_W;  // whole lines of one tap (C = " << v.channels << ")\n";
  for (int j = 0; j < v.rank - 2; ++j) {
    const Im2colView::Spatial& sp = v.spatial[v.rank - 3 - j];
    l << "          const unsigned short off" << j + 1 << " = ";
    if (sp.tap < 0)
      l << "0";
    else
      l << "(unsigned short)(" << sp.dil << " * "
        << factor(contains(g.serial_iters, sp.tap) ? digit_code(c, g.serial_iters, sp.tap, "s")
                                                   : digit_code(c, g.k_iters, sp.tap, "kk"))
        << ")";
    l << ";\n";
  }
  l << "          tma_im2col_" << v.rank << "d(" << base << " + buf * (" << up << "_BYTES / (int)sizeof(*" << base
    << ")) + blk * " << up << "_ROWS * " << up << "_W, tma_" << op << ", &full[buf], kk % " << v.channels;
  for (int j = 1; j < v.rank; ++j) l << ", " << op << "_x" << j;
  for (int j = 1; j < v.rank - 1; ++j) l << ", off" << j;
  l << ");\n        }\n";
  return l.str();
}

}  // namespace tmap::wgmma
