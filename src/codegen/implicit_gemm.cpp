#include "tmap/codegen/implicit_gemm.h"

#include <algorithm>

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
  return g;
}

}  // namespace tmap
