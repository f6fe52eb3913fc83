#include "tmap/tune/search_space.h"

#include <algorithm>

#include "tmap/codegen/emitter.h"
#include "tmap/support/diagnostic.h"

namespace tmap {
namespace {

constexpr int kFields = 16;

/// The schedule's parameters by position, in declaration order.
int* field(ScheduleParams& p, int i) {
  int* fields[kFields] = {&p.block_m, &p.block_n, &p.block_k, &p.warp_m, &p.warp_n, &p.stages, &p.smem_pad,
                          &p.split_k, &p.panels,  &p.vec_a,   &p.vec_b,  &p.unroll, &p.raster, &p.async_copy, &p.swizzle,
                          &p.producer};
  return fields[i];
}

}  // namespace

SearchSpace::SearchSpace(const Compute& c, const std::vector<HwAbstraction>& hws, Enumeration e,
                         const DeviceLimits& limits, int compute_capability)
    : compute_(c), limits_(limits) {
  std::vector<HwAbstraction> usable;
  for (const auto& h : hws) {
    if (h.min_compute_capability > compute_capability) continue;
    if (!find_family(h.family)) {  // loaded from a user's file naming a family without an emitter
      empty_reason_ += (empty_reason_.empty() ? "" : "; ") + h.name + ": family \"" + h.family +
                       "\" has no code generator (families: " + join(family_names()) + ")";
      continue;
    }
    usable.push_back(h);
  }
  report_ = match_compute(c, usable, e);
  for (const auto& r : report_.rejected) empty_reason_ += (empty_reason_.empty() ? "" : "; ") + r.hw_abs + ": " + r.reason;
  for (const Match& m : report_.matches) {
    const HwAbstraction* hw = nullptr;
    for (const auto& h : hws)
      if (h.name == m.hw_abs) hw = &h;
    for (const Mapping& map : m.mappings) {
      if (!map.feasible) continue;
      SpaceEntry entry{hw, &m, &map, make_implicit_gemm(c, *hw, m, map), "", {}, {}};
      entry.defaults = default_schedule(entry.gemm, limits_);
      if (!validate(entry.gemm, entry.defaults, limits_).empty()) continue;
      entry.choices = family_of(*hw).choices(entry.gemm, entry.defaults);
      entries_.push_back(std::move(entry));
      entries_.back().label = candidate_label(ref(static_cast<int>(entries_.size()) - 1, entries_.back().defaults));
    }
  }
  if (entries_.empty() && empty_reason_.empty())
    empty_reason_ = "no mapping has a valid schedule on this device";
}


bool SearchSpace::valid(int entry, const ScheduleParams& p) const {
  const ImplicitGemm& g = entries_[entry].gemm;
  if (!validate(g, p, limits_).empty()) return false;
  // Accumulators beyond the family's limit per warp spill registers.
  return (p.warp_m / g.shape[Axis::kI]) * (p.warp_n / g.shape[Axis::kJ]) <= family_of(*g.hw).max_fragments_per_warp(g);
}

ScheduleParams SearchSpace::sample(int entry, std::mt19937_64& rng) const {
  const auto& ch = entries_[entry].choices;
  for (int attempt = 0; attempt < 400; ++attempt) {
    ScheduleParams p;
    for (int i = 0; i < kFields; ++i) *field(p, i) = ch[i][rng() % ch[i].size()];
    // Blocks are whole multiples of warps: draw the warp count instead of the block size.
    p.block_m = p.warp_m * static_cast<int>(1u << (rng() % 3));
    p.block_n = p.warp_n * static_cast<int>(1u << (rng() % 3));
    if (valid(entry, p)) return p;
  }
  return entries_[entry].defaults;
}

ScheduleParams SearchSpace::mutate(int entry, const ScheduleParams& parent, std::mt19937_64& rng) const {
  const auto& ch = entries_[entry].choices;
  for (int attempt = 0; attempt < 50; ++attempt) {
    ScheduleParams p = parent;
    const int changes = 1 + static_cast<int>(rng() % 2);
    for (int c = 0; c < changes; ++c) {
      const int i = static_cast<int>(rng() % kFields);
      *field(p, i) = ch[i][rng() % ch[i].size()];
      // A new warp tile keeps the block's warp count when it can.
      if (i == 3) p.block_m = std::max(p.block_m, p.warp_m) / p.warp_m * p.warp_m;
      if (i == 4) p.block_n = std::max(p.block_n, p.warp_n) / p.warp_n * p.warp_n;
    }
    if (!(p == parent) && valid(entry, p)) return p;
  }
  return parent;
}

ScheduleParams SearchSpace::crossover(int entry, const ScheduleParams& a, const ScheduleParams& b,
                                      std::mt19937_64& rng) const {
  for (int attempt = 0; attempt < 20; ++attempt) {
    ScheduleParams p = a, other = b;
    for (int i = 0; i < kFields; ++i)
      if (rng() % 2) *field(p, i) = *field(other, i);
    if (valid(entry, p)) return p;
  }
  return a;
}

CandidateRef SearchSpace::ref(int entry, const ScheduleParams& p) const {
  const SpaceEntry& e = entries_[entry];
  CandidateRef r;
  r.hw_abs = e.hw->name;
  r.layout = e.match->layout;
  r.shape = e.match->shape.extent;
  r.mapping_id = e.mapping->id;
  for (int a = 0; a < 3; ++a)
    for (int it : e.mapping->axes[a]) r.axes[a].push_back(compute_.iters[it].name);
  r.params = p;
  return r;
}

int SearchSpace::find(const CandidateRef& r) const {
  for (int i = 0; i < static_cast<int>(entries_.size()); ++i) {
    const SpaceEntry& e = entries_[i];
    if (e.hw->name != r.hw_abs || e.match->layout != r.layout || e.match->shape.extent != r.shape) continue;
    bool same = true;
    for (int a = 0; a < 3 && same; ++a) {
      same = e.mapping->axes[a].size() == r.axes[a].size();
      for (std::size_t k = 0; same && k < r.axes[a].size(); ++k)
        same = compute_.iters[e.mapping->axes[a][k]].name == r.axes[a][k];
    }
    if (same) return i;
  }
  return -1;
}

std::string SearchSpace::key(int entry, const ScheduleParams& p) {
  return std::to_string(entry) + ":" + to_json(p).dump();
}

}  // namespace tmap
