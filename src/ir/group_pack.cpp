#include "tmap/ir/group_pack.h"

#include <algorithm>

namespace tmap {
namespace {

/// Where a compute's group iterator sits: `g` indexes the output and dimension `x_dim` of input
/// `x` beside a reduction iterator (g*Cg + c) and dimension `y_dim` of input `y` beside a spatial
/// one (g*Kg + k), in mixed radix.
struct GroupSite {
  int g = -1, x = -1, y = -1, x_dim = -1, y_dim = -1, c = -1, k = -1;
};

/// The dimension of `a` that uses `it`, or -1 (also where more than one does).
int only_dim(const Access& a, int it) {
  int found = -1;
  for (int d = 0; d < static_cast<int>(a.indices.size()); ++d)
    if (a.indices[d].uses(it)) {
      if (found >= 0) return -1;
      found = d;
    }
  return found;
}

/// The iterator of `kind` beside `g` in `e` whose extent times coefficient is g's coefficient.
int partner(const Compute& c, const AffineExpr& e, int g, IterKind kind) {
  for (const auto& [it, coef] : e.terms)
    if (it != g && c.iters[it].kind == kind && coef > 0 && coef * c.iters[it].extent == e.coef(g)) return it;
  return -1;
}

GroupSite find_group(const Compute& c) {
  if (c.inputs.size() != 2 || c.update != UpdateKind::kAccumulate) return {};
  for (int g = 0; g < static_cast<int>(c.iters.size()); ++g) {
    if (c.iters[g].kind != IterKind::kSpatial || c.iters[g].extent < 2 || g == c.dynamic.iter) continue;
    if (only_dim(c.output, g) < 0) continue;
    for (int x = 0; x < 2; ++x) {
      GroupSite s{g, x, 1 - x, only_dim(c.inputs[x], g), only_dim(c.inputs[1 - x], g), -1, -1};
      if (s.x_dim < 0 || s.y_dim < 0) continue;
      s.c = partner(c, c.inputs[x].indices[s.x_dim], g, IterKind::kReduction);
      s.k = partner(c, c.inputs[s.y].indices[s.y_dim], g, IterKind::kSpatial);
      if (s.c >= 0 && s.k >= 0) return s;
    }
  }
  return {};
}

/// `e` with its iterators renumbered by `id` and g's term `a*g` replaced by a*pack*go + a*inner.
AffineExpr rewrite(const AffineExpr& e, const std::vector<int>& id, int g, int go, int inner, int pack) {
  AffineExpr out;
  out.constant = e.constant;
  for (const auto& [it, coef] : e.terms) {
    if (it != g) {
      out.terms.push_back({id[it], coef});
      continue;
    }
    out.terms.push_back({go, coef * pack});
    out.terms.push_back({inner, coef});
  }
  return out;
}

}  // namespace

std::vector<int> group_packs(const Compute& c) {
  const GroupSite s = find_group(c);
  std::vector<int> packs;
  if (s.g < 0) return packs;
  const std::int64_t groups = c.iters[s.g].extent, widest = std::max(c.iters[s.c].extent, c.iters[s.k].extent);
  for (int p = 2; p <= 32 && p * widest <= 64; p *= 2)
    if (groups % p == 0) packs.push_back(p);
  return packs;
}

namespace {

/// `c` with group iterator `s.g` split into go, gi and the reduction gj added (pack_groups()).
Compute packed(const Compute& c, const GroupSite& s, int pack) {
  const Iterator& g = c.iters[s.g];
  Compute p = c;
  p.group_pack = c.group_pack * pack;
  // Iterators: g becomes go, gi in place; gj joins the reductions just before c.
  p.iters.clear();
  std::vector<int> id(c.iters.size(), -1);
  int go = -1, gj = -1;
  for (int it = 0; it < static_cast<int>(c.iters.size()); ++it) {
    if (it == s.c) {
      gj = static_cast<int>(p.iters.size());
      p.iters.push_back({g.name + "j", pack, IterKind::kReduction});
    }
    if (it == s.g) {
      go = static_cast<int>(p.iters.size());
      p.iters.push_back({g.name + "o", g.extent / pack, IterKind::kSpatial});
      p.iters.push_back({g.name + "i", pack, IterKind::kSpatial});
      continue;
    }
    id[it] = static_cast<int>(p.iters.size());
    p.iters.push_back(c.iters[it]);
  }
  const int gi = go + 1;
  auto remap = [&](Access& a, int inner) {
    for (AffineExpr& e : a.indices) e = rewrite(e, id, s.g, go, inner, pack);
  };
  remap(p.output, gi);
  remap(p.inputs[s.x], gj);
  remap(p.inputs[s.y], gi);
  for (Access& a : p.epilogue.operands) remap(a, gi);
  if (p.dynamic.active()) p.dynamic.iter = id[p.dynamic.iter];
  // The filters' diagonal: a dimension of size 1 indexed by gj - gi, after the group's.
  Access& y = p.inputs[s.y];
  AffineExpr diagonal;
  diagonal.terms = {{gi, -1}, {gj, 1}};
  y.indices.insert(y.indices.begin() + s.y_dim + 1, diagonal);
  Tensor& wt = p.tensors[y.tensor];
  wt.shape.insert(wt.shape.begin() + s.y_dim + 1, 1);
  return p;
}

}  // namespace

GroupPack pack_groups(const Compute& c, int pack) {
  GroupPack out;
  const GroupSite s = find_group(c);
  if (s.g < 0) {
    out.why_not = "no group iterator indexes the output and both inputs beside a channel iterator";
    return out;
  }
  const Iterator& g = c.iters[s.g];
  if (pack < 2 || g.extent % pack != 0) {
    out.why_not = "a pack of " + std::to_string(pack) + " does not divide the " + std::to_string(g.extent) + " groups";
    return out;
  }
  for (const char* suffix : {"o", "i", "j"})
    if (c.find_iterator(g.name + suffix) >= 0) {
      out.why_not = "iterator '" + g.name + suffix + "' exists already";
      return out;
    }
  out.compute = packed(c, s, pack);
  return out;
}

}  // namespace tmap
