#include "tmap/gemm/contiguity.h"

#include <algorithm>
#include <initializer_list>

namespace tmap {
namespace {

/// The widest power of two, at most `cap`, that divides every value (0 is divisible by all).
int widest_dividing(int cap, std::initializer_list<std::int64_t> values) {
  int w = cap;
  for (std::int64_t v : values)
    while (w > 1 && v % w != 0) w /= 2;
  return w;
}

/// An access's indices seen from its iterators.
struct IndexView {
  const Compute& c;
  const Access& acc;
  int last = static_cast<int>(acc.indices.size()) - 1;

  std::int64_t extent(int it) const { return c.iters[it].extent; }
  /// Whether `e` is iterator `it` alone (terms of extent-1 iterators, a group index when groups =
  /// 1, are always zero).
  bool alone(const AffineExpr& e, int it) const {
    if (e.constant != 0 || e.coef(it) != 1) return false;
    for (const auto& [x, coef] : e.terms)
      if (x != it && extent(x) != 1) return false;
    return true;
  }
  /// Whether no dimension but `dim` uses iterator `it`.
  bool only_in(int it, int dim) const {
    for (int d = 0; d <= last; ++d)
      if (d != dim && acc.indices[d].uses(it)) return false;
    return true;
  }
};

/// Strided (the innermost iterator with coefficient 2): two aligned vectors of `load` elements
/// cover a group of width <= load / 2.
Contiguity strided(const IndexView& v, const Tensor& t, int inner, int max, int bits) {
  Contiguity out;
  const int load = widest_dividing(max, {t.shape[v.last]});
  const int width = widest_dividing(load / 2, {v.extent(inner)});
  if (width * bits >= 32) {
    out.width = width;
    out.step = 2;
    out.load = load;
  }
  return out;
}

/// Fused (the last index is the innermost iterator alone): the run extends outwards while each
/// dimension is covered whole by its iterator of `axis`.
Contiguity fused(const IndexView& v, const Tensor& t, const std::vector<int>& axis, int max) {
  std::int64_t run = v.extent(axis.back()), stride = 1;
  int d = v.last;
  for (int a = static_cast<int>(axis.size()) - 1; d > 0 && a > 0; --d, --a) {
    if (t.shape[d] != v.extent(axis[a]) || !v.alone(v.acc.indices[d - 1], axis[a - 1]) || !v.only_in(axis[a - 1], d - 1))
      break;
    stride *= t.shape[d];
    run *= v.extent(axis[a - 1]);
  }
  // Dimensions outside the run step by multiples of the outermost run dimension's extent.
  Contiguity out;
  out.width = widest_dividing(max, {run, d > 0 ? t.shape[d] * stride : 0});
  out.aligned = out.width;
  return out;
}

/// Shifted (other terms in the last index): they move the group's start; the dimension's bounds
/// cut it anywhere. The group runs on over the axis's next iterators while the index holds them
/// in mixed radix after the innermost (a packed group's gj * C/groups + c), which do not shift it.
Contiguity shifted(const IndexView& v, const Tensor& t, const std::vector<int>& axis, int max) {
  const AffineExpr& e = v.acc.indices[v.last];
  std::int64_t run = v.extent(axis.back());
  std::vector<int> in_run = {axis.back()};
  for (int a = static_cast<int>(axis.size()) - 2; a >= 0 && e.coef(axis[a]) == run && v.only_in(axis[a], v.last); --a) {
    run *= v.extent(axis[a]);
    in_run.push_back(axis[a]);
  }
  Contiguity out;
  out.width = widest_dividing(max, {run, t.shape[v.last]});
  out.aligned = out.width;
  for (const auto& [x, coef] : e.terms)
    if (std::find(in_run.begin(), in_run.end(), x) == in_run.end() && v.extent(x) != 1)
      out.aligned = widest_dividing(out.aligned, {coef});
  out.aligned = widest_dividing(out.aligned, {e.constant});
  return out;
}

}  // namespace

Contiguity contiguity(const Compute& c, const Access& acc, const std::vector<int>& axis, int bits, int max_bytes) {
  if (acc.indices.empty() || axis.empty() || bits < 8) return {};
  const IndexView v{c, acc};
  const Tensor& t = c.tensor_of(acc);
  const int inner = axis.back();
  const AffineExpr& e = acc.indices[v.last];
  const int max = max_bytes * 8 / bits;
  if (e.coef(inner) == 2 && v.only_in(inner, v.last)) return strided(v, t, inner, max, bits);
  if (e.coef(inner) != 1 || !v.only_in(inner, v.last)) return {};
  return v.alone(e, inner) ? fused(v, t, axis, max) : shifted(v, t, axis, max);
}

int contiguous_width(const Compute& c, const Access& acc, const std::vector<int>& axis, int bits, int max_bytes) {
  return contiguity(c, acc, axis, bits, max_bytes).aligned;
}

std::optional<std::int64_t> flat_stride(const Compute& c, const Access& acc, const std::vector<int>& axis) {
  const Tensor& t = c.tensor_of(acc);
  auto stride_of = [&](int it) {  // the element's move for one step of iterator `it`
    std::int64_t s = 0;
    for (std::size_t d = 0; d < acc.indices.size(); ++d) s += acc.indices[d].coef(it) * t.stride(d);
    return s;
  };
  if (axis.empty()) return 0;
  const std::int64_t flat = stride_of(axis.back());
  std::int64_t expected = flat;
  for (int a = static_cast<int>(axis.size()) - 2; a >= 0; --a) {
    expected *= c.iters[axis[a + 1]].extent;
    if (c.iters[axis[a]].extent != 1 && stride_of(axis[a]) != expected) return std::nullopt;
  }
  return flat;
}

Contiguity operand_contiguity(const ImplicitGemm& g, int which) {
  const DType dtype = which == 0 ? g.hw->a_dtype : g.hw->b_dtype;
  const int bits = dtype_bits(dtype);
  if (bits < 8) return {};  // packed sub-byte elements are gathered in pairs, not in vectors
  // The virtual axis along the shared tile's rows.
  const std::vector<int>& axis = !stored_along_mn(g, which) ? g.k_iters : which == 0 ? g.m_iters : g.n_iters;
  return contiguity(*g.compute, g.compute->inputs[which == 0 ? g.a_input : g.b_input], axis, bits);
}

int max_vector_width(const ImplicitGemm& g, int which) { return operand_contiguity(g, which).width; }


bool stored_along_mn(const ImplicitGemm& g, int which) {
  return which == 0 ? g.layout[0] == 't' : g.layout[1] == 'n';
}

}  // namespace tmap
