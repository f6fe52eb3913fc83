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

}  // namespace

Contiguity contiguity(const Compute& c, const Access& acc, const std::vector<int>& axis, int bits, int max_bytes) {
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
  const int max = max_bytes * 8 / bits;
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

int contiguous_width(const Compute& c, const Access& acc, const std::vector<int>& axis, int bits, int max_bytes) {
  return contiguity(c, acc, axis, bits, max_bytes).aligned;
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
