#include "tmap/match/mapping.h"

#include <cmath>

#include "tmap/support/diagnostic.h"

namespace tmap {

std::string_view enumeration_name(Enumeration e) { return e == Enumeration::kAmos ? "amos" : "all"; }

std::string axis_set_text(const Compute& c, const std::vector<int>& iters) {
  std::string out = "{";
  for (std::size_t i = 0; i < iters.size(); ++i) out += (i ? ", " : "") + c.iters[iters[i]].name;
  return out + "}";
}

namespace {

/// The candidate subsets of one axis: every non-empty subset in bitmask order, or only the
/// empty set when the axis has no candidate.
std::vector<std::vector<int>> axis_choices(const std::vector<int>& candidates) {
  if (candidates.empty()) return {{}};
  std::vector<std::vector<int>> out;
  const unsigned n = static_cast<unsigned>(candidates.size());
  for (unsigned mask = 1; mask < (1u << n); ++mask) {
    std::vector<int> set;
    for (unsigned bit = 0; bit < n; ++bit)
      if (mask & (1u << bit)) set.push_back(candidates[bit]);
    out.push_back(std::move(set));
  }
  return out;
}

/// x and y are partners in `access` unless some dimension's index uses both.
bool partners(const Access& access, int x, int y) {
  for (const auto& idx : access.indices)
    if (idx.uses(x) && idx.uses(y)) return false;
  return true;
}

bool every_has_partner(const Access& access, const std::vector<int>& from, const std::vector<int>& to) {
  for (int x : from) {
    bool found = false;
    for (int y : to) found = found || partners(access, x, y);
    if (!found) return false;
  }
  return true;
}

/// AMOS's rule over each intrinsic operand with two mapped axes: A (i, k), B (k, j), D (i, j).
bool amos_valid(const Compute& c, const ExprMatch& roles, const std::array<std::vector<int>, 3>& axes) {
  struct OperandAxes {
    const Access* access;
    int u, v;
  };
  const OperandAxes operands[] = {{&c.inputs[roles.a_input], 0, 2},
                                  {&c.inputs[roles.b_input], 2, 1},
                                  {&c.output, 0, 1}};
  for (const auto& op : operands) {
    const auto& su = axes[op.u];
    const auto& sv = axes[op.v];
    if (su.empty() || sv.empty()) continue;
    if (!every_has_partner(*op.access, su, sv) || !every_has_partner(*op.access, sv, su)) return false;
  }
  return true;
}

}  // namespace

std::vector<Mapping> enumerate_mappings(const Compute& c, const IndexMatch& index, const ExprMatch& roles,
                                        Enumeration e) {
  TMAP_CHECK(index.ok(), "enumerate_mappings needs a successful index match");
  // Every subset of each axis's candidates: exponential in the iterators, so bounded.
  double count = 1;
  std::string per_axis;
  for (int ax = 0; ax < 3; ++ax) {
    const std::size_t n = index.candidates[ax].size();
    count *= n ? std::exp2(static_cast<double>(n)) - 1 : 1;
    per_axis += std::string(ax ? ", " : "") + "ijk"[ax] + ": " + std::to_string(n);
  }
  if (count > kMaxMappingsPerMatch)
    throw UserError(format_diagnostic(
        SourceLoc::whole(c.name), "'" + c.name + "' has " + std::to_string(static_cast<long long>(count)) +
                                      " candidate mappings onto one intrinsic (candidate iterators per axis " + per_axis +
                                      "); tmap enumerates at most " + std::to_string(kMaxMappingsPerMatch),
        "fuse iterators that always appear together into one (flatten those dimensions of the tensors)"));
  auto is = axis_choices(index.candidates[0]);
  auto js = axis_choices(index.candidates[1]);
  auto ks = axis_choices(index.candidates[2]);
  std::vector<Mapping> out;
  int id = 0;
  for (const auto& si : is)
    for (const auto& sj : js)
      for (const auto& sk : ks) {
        Mapping m;
        m.id = id++;
        m.axes = {si, sj, sk};
        if (e == Enumeration::kAmos && !amos_valid(c, roles, m.axes)) continue;
        for (int ax = 0; ax < 3; ++ax)
          for (int it : m.axes[ax]) m.fused_extent[ax] *= c.iters[it].extent;
        out.push_back(std::move(m));
      }
  return out;
}

void check_feasibility(const Compute& c, const IntrinsicShape& shape, Mapping& m) {
  static const char* kShapeLetter[3] = {"m", "n", "k"};
  m.padding.clear();
  double useful = 1.0, padded = 1.0;
  for (int ax = 0; ax < 3; ++ax) {
    std::int64_t e = 1;
    for (int it : m.axes[ax]) e *= c.iters[it].extent;
    m.fused_extent[ax] = e;
    const std::int64_t s = shape.extent[ax];
    if (!m.axes[ax].empty() && e < s)
      m.padding += std::string(m.padding.empty() ? "" : "; ") + "axis " + axis_name(static_cast<Axis>(ax)) + " fuses " +
                   axis_set_text(c, m.axes[ax]) + " of extent " + std::to_string(e) + ", padded to the intrinsic's " +
                   kShapeLetter[ax] + " = " + std::to_string(s);
    useful *= static_cast<double>(e);
    padded *= static_cast<double>((e + s - 1) / s * s);
  }
  m.padding_waste = 1.0 - useful / padded;
}

}  // namespace tmap
