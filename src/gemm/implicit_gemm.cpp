#include "tmap/gemm/implicit_gemm.h"

#include <algorithm>

#include "tmap/gemm/contiguity.h"

namespace tmap {

ImplicitGemm make_implicit_gemm(const Compute& c, const HwAbstraction& hw, const Match& match, const Mapping& mapping) {
  ImplicitGemm g;
  g.compute = &c;
  g.hw = &hw;
  g.layout = match.layout;
  g.shape = match.shape;
  g.a_input = match.roles.a_input;
  g.b_input = match.roles.b_input;
  g.mapping_id = mapping.id;
  g.m_iters = mapping.axes[0];
  g.n_iters = mapping.axes[1];
  g.k_iters = mapping.axes[2];
  auto mapped = [&](int it) {
    for (const auto& axis : mapping.axes)
      if (std::find(axis.begin(), axis.end(), it) != axis.end()) return true;
    return false;
  };
  for (int it = 0; it < static_cast<int>(c.iters.size()); ++it) {
    if (mapped(it)) continue;
    (c.iters[it].kind == IterKind::kSpatial ? g.batch_iters : g.serial_iters).push_back(it);
  }
  auto product = [&](const std::vector<int>& its) {
    std::int64_t p = 1;
    for (int it : its) p *= c.iters[it].extent;
    return p;
  };
  g.M = product(g.m_iters);
  g.N = product(g.n_iters);
  g.K = product(g.k_iters);
  g.batch = product(g.batch_iters);
  g.serial = product(g.serial_iters);
  const int varying = c.dynamic.iter;
  if (varying >= 0 && !g.m_iters.empty() && g.m_iters.front() == varying) {
    g.per_size = g.M / c.iters[varying].extent;
    g.dynamic_axis = 'm';
  } else if (varying >= 0 && !g.n_iters.empty() && g.n_iters.front() == varying) {
    g.per_size = g.N / c.iters[varying].extent;
    g.dynamic_axis = 'n';
  }
  return g;
}

std::string dynamic_gemm_error(const ImplicitGemm& g) {
  const Compute& c = *g.compute;
  if (!c.dynamic.active() || g.dynamic()) return {};
  const std::string name = c.iters[c.dynamic.iter].name;
  auto in = [&](const std::vector<int>& v) { return std::find(v.begin(), v.end(), c.dynamic.iter) != v.end(); };
  const std::string where = in(g.m_iters)   ? "an inner iterator of the virtual M"
                            : in(g.n_iters) ? "an inner iterator of the virtual N"
                                            : "the grid's batch";
  return "this mapping puts '" + name + "', whose size is given at run time, in " + where +
         "; kernels take a run-time size only as the slowest iterator of the virtual M or N";
}

ImplicitGemm gemm_at_size(const ImplicitGemm& g, std::int64_t size) {
  ImplicitGemm at = g;
  if (g.dynamic()) (g.dynamic_axis == 'm' ? at.M : at.N) = size * g.per_size;
  return at;
}

namespace {

/// The dimension of `a` that iterator `it` indexes alone (coefficient 1, no constant, no other
/// iterator of extent > 1), when it appears in no other dimension; else -1.
int sole_dimension(const Compute& c, const Access& a, int it) {
  int found = -1;
  for (int d = 0; d < static_cast<int>(a.indices.size()); ++d) {
    const AffineExpr& e = a.indices[d];
    if (!e.uses(it)) continue;
    if (found >= 0 || e.constant != 0 || e.coef(it) != 1) return -1;
    for (const auto& [x, coef] : e.terms)
      if (x != it && c.iters[x].extent != 1) return -1;
    found = d;
  }
  return found;
}

/// The best aligned vector (elements) of operand `which` in place, along k or along m / n,
/// whichever is better (the layouts a mapping may store it in).
int best_in_place(const ImplicitGemm& g, int which) {
  const Access& a = g.compute->inputs[which == 0 ? g.a_input : g.b_input];
  const int bits = dtype_bits(which == 0 ? g.hw->a_dtype : g.hw->b_dtype);
  return std::max(contiguity(*g.compute, a, g.k_iters, bits).aligned,
                  contiguity(*g.compute, a, which == 0 ? g.m_iters : g.n_iters, bits).aligned);
}

/// The reduction iterator to make innermost, and its dimension in A and in B: the innermost of k
/// that indexes one dimension of both operands alone (-1: none does).
std::pair<int, std::array<int, 2>> relayout_iterator(const ImplicitGemm& g) {
  const Compute& c = *g.compute;
  for (auto it = g.k_iters.rbegin(); it != g.k_iters.rend(); ++it) {
    if (c.iters[*it].extent == 1) continue;
    const int da = sole_dimension(c, c.inputs[g.a_input], *it), db = sole_dimension(c, c.inputs[g.b_input], *it);
    if (da >= 0 && db >= 0) return {*it, {da, db}};
  }
  return {-1, {-1, -1}};
}

/// Moves dimension `dim` of operand `which`'s tensor and access in `owned` last, with extent
/// `padded`, and says in `view.relayout` how its copy is made. Empty, or why it cannot be.
std::string move_last(Compute& owned, ImplicitGemm& view, int which, int dim, std::int64_t extent, std::int64_t padded) {
  const int input = which == 0 ? view.a_input : view.b_input;
  Access& acc = owned.inputs[input];
  const int last = static_cast<int>(acc.indices.size()) - 1;
  if (dim == last && padded == extent) return {};
  for (std::size_t i = 0; i < owned.inputs.size(); ++i)
    if (static_cast<int>(i) != input && owned.inputs[i].tensor == acc.tensor) return "the operand's tensor is read twice";
  Tensor& t = owned.tensors[acc.tensor];
  if (padded != extent && t.shape[dim] != extent)
    return "the channels' dimension is longer than the iterator's extent; it is not padded";
  OperandRelayout& r = view.relayout[which];
  r.bytes = dtype_bits(t.dtype) / 8;
  for (int d = 0; d <= last; ++d) (d < dim ? r.outer : d == dim ? r.moved : r.inner) *= t.shape[d];
  r.padded = padded;
  // Dimensions after it all of extent 1 (1x1 filters): the same bytes, read in place as they
  // are, unless padded.
  r.active = (r.inner > 1 && r.moved > 1) || r.pads();
  std::rotate(t.shape.begin() + dim, t.shape.begin() + dim + 1, t.shape.end());
  std::rotate(acc.indices.begin() + dim, acc.indices.begin() + dim + 1, acc.indices.end());
  t.shape.back() = padded;
  return {};
}

/// Why the relayout `view` of `g` is not worth a prologue (empty: it is): it is, where an operand
/// that has no aligned vectors of `bytes` in place gets them along the axis this mapping's layout
/// stores it, and no operand loses.
std::string relayout_loss(const ImplicitGemm& g, const ImplicitGemm& view, int bytes) {
  bool gains = false;
  for (int which = 0; which < 2; ++which) {
    const int full = 8 * bytes / dtype_bits(which == 0 ? g.hw->a_dtype : g.hw->b_dtype);
    const int before = best_in_place(g, which), after = operand_contiguity(view, which).aligned;
    if (after < std::min(before, full) && after < operand_contiguity(g, which).aligned)
      return "operand " + std::string(which == 0 ? "A" : "B") + " would be read in narrower vectors";
    if (view.relayout[which].active && before < full && after >= full) gains = true;
  }
  return gains ? "" : "no operand gains aligned " + std::to_string(bytes) +
                          "-byte vectors along the axis this layout stores it";
}

/// The channels' extent padded to whole vectors of `bytes` of both operands' types.
std::int64_t padded_channels(const ImplicitGemm& g, std::int64_t extent, int bytes) {
  const int unit = 8 * bytes / std::min(dtype_bits(g.hw->a_dtype), dtype_bits(g.hw->b_dtype));
  return (extent + unit - 1) / unit * unit;
}

}  // namespace

RelayoutView relayout_view(const ImplicitGemm& g, int knob) {
  if (g.relayouted()) return {"already a relayout view", {}};
  if (knob != 1 && knob != 2) return {"relayout = " + std::to_string(knob) + " is not a view: use 1 or 2", {}};
  const Compute& c = *g.compute;
  if (dtype_bits(g.hw->a_dtype) < 8 || dtype_bits(g.hw->b_dtype) < 8) return {"packed sub-byte operands are not copied", {}};
  const auto [iter, dims] = relayout_iterator(g);
  if (iter < 0) return {"no reduction iterator of k indexes one dimension of both operands alone", {}};
  const int bytes = relayout_vector_bytes(knob);
  const std::int64_t extent = c.iters[iter].extent, padded = padded_channels(g, extent, bytes);
  if (knob == 2 && padded == padded_channels(g, extent, relayout_vector_bytes(1)))
    return {"the channels pad to the same extent in 8-byte vectors as in 16-byte ones: relayout = 1 covers it", {}};
  auto owned = std::make_shared<Compute>(c);
  ImplicitGemm view = g;
  view.k_iters.erase(std::find(view.k_iters.begin(), view.k_iters.end(), iter));
  view.k_iters.push_back(iter);
  // Channels that are not a whole number of vectors of both operands are padded with zeros to the
  // next one in both copies, whose rows are then read in aligned vectors.
  for (int which = 0; which < 2; ++which)
    if (std::string why = move_last(*owned, view, which, dims[which], extent, padded); !why.empty())
      return {std::move(why), {}};
  if (padded != extent) {
    if (!view.relayout[0].active || !view.relayout[1].active)
      return {"the channels would be padded in one operand only", {}};
    owned->iters[iter].extent = padded;
    view.K = view.K / extent * padded;
  }
  if (!view.relayout[0].active && !view.relayout[1].active)
    return {"both operands already have the reduction's dimension innermost in memory", {}};
  view.compute = owned.get();
  view.view_owner = owned;
  view.relayout_knob = knob;
  if (std::string why = relayout_loss(g, view, bytes); !why.empty()) return {std::move(why), {}};
  RelayoutView v;
  v.gemm = std::move(view);
  return v;
}

}  // namespace tmap
