#include "tmap/tune/search_space.h"

#include <algorithm>
#include <array>
#include <map>
#include <set>

#include "tmap/codegen/emitter.h"
#include "tmap/ir/group_pack.h"
#include "tmap/support/diagnostic.h"

namespace tmap {

namespace {

std::size_t mapping_count(const MatchReport& report) {
  std::size_t total = 0;
  for (const Match& m : report.matches) total += m.mappings.size();
  return total;
}

}  // namespace

SearchSpace::SearchSpace(const Compute& c, const std::vector<HwAbstraction>& hws, Enumeration e,
                         const DeviceLimits& limits, int compute_capability)
    : compute_(c), limits_(limits) {
  std::vector<HwAbstraction> usable;
  auto add_reason = [&](const std::string& r) { empty_reason_ += "\n  - " + r; };
  for (const auto& h : hws) {
    if (h.min_compute_capability > compute_capability) {
      add_reason(h.name + ": needs sm_" + std::to_string(h.min_compute_capability) + " or newer, the target is sm_" +
                 std::to_string(compute_capability));
      continue;
    }
    if (!find_family(h.family)) {  // loaded from a user's file naming a family without an emitter
      add_reason(h.name + ": family \"" + h.family +
                       "\" has no code generator (families: " + join(family_names()) + ")");
      continue;
    }
    usable.push_back(h);
  }
  report_ = match_compute(c, usable, e);
  for (const auto& r : report_.rejected) add_reason(r.hw_abs + ": " + r.reason);
  check_mapping_count(c, report_);
  std::set<std::string> scheduled;                 // matched abstractions with an arm
  std::map<std::string, std::string> unscheduled;  // the first invalid default of each, as a reason
  add_arms(c, report_, hws, scheduled, unscheduled);
  // A grouped compute's packs (pack_groups()): more arms, of their own computes.
  for (int pack : group_packs(c)) {
    GroupPack gp = pack_groups(c, pack);
    if (!gp.why_not.empty()) continue;
    auto packed = std::make_unique<PackedCompute>();
    packed->compute = std::move(gp.compute);
    packed->report = match_compute(packed->compute, usable, e);
    if (mapping_count(packed->report) > kMaxSearchMappings) continue;  // the compute as written stands
    packs_.push_back(std::move(packed));
    add_arms(packs_.back()->compute, packs_.back()->report, hws, scheduled, unscheduled);
  }
  for (const auto& [name, why] : unscheduled)
    if (!scheduled.count(name)) add_reason(name + ": " + why);
  if (entries_.empty() && empty_reason_.empty())
    empty_reason_ = "no mapping has a valid schedule on this device";
}

void SearchSpace::check_mapping_count(const Compute& c, const MatchReport& report) const {
  const std::size_t total = mapping_count(report);
  if (total > kMaxSearchMappings)
    throw UserError(format_diagnostic(
        SourceLoc::whole(c.name), "'" + c.name + "' has " + std::to_string(total) + " mappings onto " +
                                      std::to_string(report.matches.size()) + " matches; tmap searches at most " +
                                      std::to_string(kMaxSearchMappings),
        "choose abstractions with --hw, keep --enumerate amos, or fuse iterators that always appear together"));
}

void SearchSpace::add_arms(const Compute& c, const MatchReport& report, const std::vector<HwAbstraction>& hws,
                           std::set<std::string>& scheduled, std::map<std::string, std::string>& unscheduled) {
  // Padded mappings that differ from another mapping only by iterators of extent 1 (conv2d's n at
  // batch 1, r and s of a 1x1 window) do the same work: one arm stands for them, a mapping that
  // fits the intrinsic if there is one, else the first in enumeration order. Mappings that fit
  // are all kept (logs name them, and their vector widths can differ).
  std::set<std::string> arms;
  for (const Match& m : report.matches)
    for (const Mapping& map : m.mappings)
      if (map.fits()) arms.insert(arm_key(c, m.hw_abs, m.layout, m.shape.extent, map.axes));
  for (const Match& m : report.matches) {
    const HwAbstraction* hw = nullptr;
    for (const auto& h : hws)
      if (h.name == m.hw_abs) hw = &h;
    for (const Mapping& map : m.mappings) {
      if (!map.fits() && !arms.insert(arm_key(c, m.hw_abs, m.layout, m.shape.extent, map.axes)).second) continue;
      // The mapping's arm, and where relayout_view() offers them, twins reading channels-last
      // copies (relayout 1; relayout 2 for channels padded to 8-byte vectors).
      auto add = [&](ImplicitGemm gemm, int relayout) {
        SpaceEntry entry{hw, &m, &map, &c, std::move(gemm), "", {}, {}};
        entry.defaults = default_schedule(entry.gemm, limits_);
        entry.defaults.relayout = relayout;
        if (auto issues = validate(entry.gemm, entry.defaults, limits_); !issues.empty()) {
          unscheduled.emplace(m.hw_abs, "matched, but no mapping has a valid schedule (mapping " +
                                            std::to_string(map.id) + ", layout " + m.layout + ": " +
                                            std::string(message(issues.front().error)) + ": " + issues.front().detail + ")");
          return;
        }
        scheduled.insert(m.hw_abs);
        entry.choices = family_of(*hw).choices(entry.gemm, entry.defaults, limits_);
        entry.choices.set("relayout", {relayout});
        entry.choices.set("group_pack", {c.group_pack});
        entries_.push_back(std::move(entry));
        entries_.back().label = candidate_label(ref(static_cast<int>(entries_.size()) - 1, entries_.back().defaults));
      };
      ImplicitGemm gemm = make_implicit_gemm(c, *hw, m, map);
      std::array<RelayoutView, 2> twins = {relayout_view(gemm, 1), relayout_view(gemm, 2)};
      add(std::move(gemm), 0);
      for (int knob : {1, 2})
        if (twins[knob - 1].why_not.empty()) add(std::move(twins[knob - 1].gemm), knob);
    }
  }
}

bool SearchSpace::valid(int entry, const ScheduleParams& p) const {
  const ImplicitGemm& g = entries_[entry].gemm;
  if (!validate(g, p, limits_).empty()) return false;
  // Accumulators beyond the family's limit per warp spill registers.
  return (p.warp_m / g.shape[Axis::kI]) * (p.warp_n / g.shape[Axis::kJ]) <= family_of(*g.hw).max_fragments_per_warp(g);
}

ScheduleParams SearchSpace::sample(int entry, std::mt19937_64& rng) const {
  const KnobChoices& ch = entries_[entry].choices;
  const std::span<const Knob> all = knobs();
  for (int attempt = 0; attempt < 400; ++attempt) {
    ScheduleParams p;
    for (std::size_t i = 0; i < all.size(); ++i) all[i].set(p, ch.draw(static_cast<int>(i), rng));
    // Nothing to sum without splits, and pairs take whole tiles: a cluster or a last-block sum
    // would only be refused.
    if (p.split_k == 1 && p.cluster == 1) p.cluster = 0;
    if (p.split_k > 1 && p.cluster >= 2) p.cluster -= 2;
    if (p.split_k == 1 || p.cluster == 1) p.split_reduce = 0;  // no splits, or the cluster sums them
    if (p.producer != 2 || p.cluster >= 2) p.stream_k = 0;     // runs of steps: persistent single blocks
    // Blocks are whole multiples of warps: drawn from the family's block tiles for the warp tile.
    const EmitterFamily& family = family_of(*entries_[entry].hw);
    const std::vector<int> tiles_m = family.block_tiles(entries_[entry].gemm, p, 'm'),
                           tiles_n = family.block_tiles(entries_[entry].gemm, p, 'n');
    p.block_m = tiles_m[rng() % tiles_m.size()];
    p.block_n = tiles_n[rng() % tiles_n.size()];
    fit_stages(entries_[entry].gemm, p, limits_);
    if (valid(entry, p)) return p;
  }
  return entries_[entry].defaults;
}

ScheduleParams SearchSpace::mutate(int entry, const ScheduleParams& parent, std::mt19937_64& rng) const {
  const KnobChoices& ch = entries_[entry].choices;
  const std::span<const Knob> all = knobs();
  static const int warp_m = knob_index("warp_m"), warp_n = knob_index("warp_n");
  for (int attempt = 0; attempt < 50; ++attempt) {
    ScheduleParams p = parent;
    const int changes = 1 + static_cast<int>(rng() % 2);
    for (int c = 0; c < changes; ++c) {
      const int i = static_cast<int>(rng() % all.size());
      all[i].set(p, ch.draw(i, rng));
      // A new warp tile keeps the block's warp count when it can.
      if (i == warp_m) p.block_m = std::max(p.block_m, p.warp_m) / p.warp_m * p.warp_m;
      if (i == warp_n) p.block_n = std::max(p.block_n, p.warp_n) / p.warp_n * p.warp_n;
    }
    fit_stages(entries_[entry].gemm, p, limits_);
    if (!(p == parent) && valid(entry, p)) return p;
  }
  return parent;
}

ScheduleParams SearchSpace::crossover(int entry, const ScheduleParams& a, const ScheduleParams& b,
                                      std::mt19937_64& rng) const {
  for (int attempt = 0; attempt < 20; ++attempt) {
    ScheduleParams p = a;
    for (const Knob& k : knobs())
      if (rng() % 2) k.set(p, k.get(b));
    fit_stages(entries_[entry].gemm, p, limits_);
    if (valid(entry, p)) return p;
  }
  return a;
}

CandidateRef candidate_ref(const Compute& c, const std::string& hw_abs, const Match& m, const Mapping& map,
                           const ScheduleParams& p) {
  CandidateRef r;
  r.hw_abs = hw_abs;
  r.layout = m.layout;
  r.shape = m.shape.extent;
  r.mapping_id = map.id;
  for (int a = 0; a < 3; ++a)
    for (int it : map.axes[a]) r.axes[a].push_back(c.iters[it].name);
  r.params = p;
  return r;
}

CandidateRef SearchSpace::ref(int entry, const ScheduleParams& p) const {
  const SpaceEntry& e = entries_[entry];
  return candidate_ref(*e.compute, e.hw->name, *e.match, *e.mapping, p);
}

int SearchSpace::find(const CandidateRef& r) const {
  // The record's axes as iterator ids of an arm's compute (none where it lacks a name).
  auto axes_in = [&](const Compute& c) -> std::optional<std::array<std::vector<int>, 3>> {
    std::array<std::vector<int>, 3> axes;
    for (int a = 0; a < 3; ++a)
      for (const auto& name : r.axes[a]) {
        const int id = c.find_iterator(name);
        if (id < 0) return std::nullopt;
        axes[a].push_back(id);
      }
    return axes;
  };
  // The arm of exactly that mapping, else the arm that stands for it (a padded mapping the same
  // up to extent-1 iterators). A record with relayout 1 or 2 belongs to the mapping's relayout
  // twin of that value, one with group_pack P to an arm of the compute packed by P.
  auto same_match = [&](const SpaceEntry& e) {
    return e.hw->name == r.hw_abs && e.match->layout == r.layout && e.match->shape.extent == r.shape &&
           e.gemm.relayout_knob == r.params.relayout && e.compute->group_pack == r.params.group_pack;
  };
  // The record's axes and arm key, looked up once per compute (the space's and its packs').
  struct Named {
    std::optional<std::array<std::vector<int>, 3>> axes;
    std::string key;
  };
  std::map<const Compute*, Named> by_compute;
  for (bool exact : {true, false})
    for (int i = 0; i < static_cast<int>(entries_.size()); ++i) {
      const SpaceEntry& e = entries_[i];
      if (!same_match(e)) continue;
      auto found = by_compute.find(e.compute);
      if (found == by_compute.end()) {
        Named n{axes_in(*e.compute), ""};
        if (n.axes) n.key = arm_key(*e.compute, r.hw_abs, r.layout, r.shape, *n.axes);
        found = by_compute.emplace(e.compute, std::move(n)).first;
      }
      const Named& n = found->second;
      if (!n.axes) continue;
      if (exact ? e.mapping->axes == *n.axes : arm_key(*e.compute, r.hw_abs, r.layout, r.shape, e.mapping->axes) == n.key)
        return i;
    }
  return -1;
}

std::vector<std::pair<int, ScheduleParams>> SearchSpace::twins(int entry, const ScheduleParams& p) const {
  std::vector<std::pair<int, ScheduleParams>> out;
  const SpaceEntry& of = entries_[entry];
  for (int i = 0; i < static_cast<int>(entries_.size()); ++i) {
    const SpaceEntry& e = entries_[i];
    if (i == entry || e.match != of.match || e.mapping != of.mapping) continue;
    if (auto q = narrowed(i, p)) out.emplace_back(i, *q);
  }
  return out;
}

std::optional<ScheduleParams> SearchSpace::narrowed(int entry, ScheduleParams p) const {
  // A twin of 8-byte rows holds half the elements of a 16-byte vector: the widest loads valid there.
  p.relayout = entries_[entry].gemm.relayout_knob;
  const int vec_a = p.vec_a, vec_b = p.vec_b;
  for (p.vec_a = vec_a; p.vec_a >= 1; p.vec_a /= 2)
    for (p.vec_b = vec_b; p.vec_b >= 1; p.vec_b /= 2)
      if (valid(entry, p)) return p;
  return std::nullopt;
}

std::string SearchSpace::arm_key(const Compute& c, const std::string& hw_abs, const std::string& layout,
                                 const std::array<std::int64_t, 3>& shape, const std::array<std::vector<int>, 3>& axes) {
  std::string key = hw_abs + " " + layout + " " + std::to_string(shape[0]) + "x" + std::to_string(shape[1]) + "x" +
                    std::to_string(shape[2]);
  for (const auto& axis : axes) {
    key += " {";
    for (int it : axis)
      if (c.iters[it].extent > 1) key += std::to_string(it) + ",";
    key += "}";
  }
  return key;
}

std::string SearchSpace::key(int entry, const ScheduleParams& p) {
  return std::to_string(entry) + ":" + to_json(p).dump();
}

}  // namespace tmap
