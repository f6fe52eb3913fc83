// `tmap map`: which intrinsics a compute matches, every mapping of its loops onto them, and
// why the other abstractions do not match.
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "commands.h"
#include "tmap/hw/hw_abstraction.h"
#include "tmap/ir/group_pack.h"
#include "tmap/match/match_report.h"

namespace tmap::cli {
namespace {

struct MapArgs {
  ComputeArgs compute;
  HwSelection hw;
  std::string enumerate = "amos";
  std::string format = "text";
  int group_pack = 1;
};

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

std::string names_text(const Compute& c, const std::vector<int>& ids) {
  if (ids.empty()) return "none";
  std::string out;
  for (int id : ids) out += (out.empty() ? "" : ", ") + c.iters[id].name;
  return out;
}

/// The workload: statement, iterators and tensors.
void print_workload(const Compute& c) {
  std::printf("workload %s: %s\n", c.name.c_str(), c.statement_text().c_str());
  if (!c.epilogue.empty()) std::printf("  epilogue: %s\n", c.epilogue_text().c_str());
  std::string spatial, reduction;
  for (std::size_t i = 0; i < c.iters.size(); ++i) {
    const Iterator& it = c.iters[i];
    const bool varies = c.dynamic.iter == static_cast<int>(i);
    (it.kind == IterKind::kSpatial ? spatial : reduction) +=
        " " + it.name + "=" + (varies ? std::to_string(c.dynamic.lo) + ".." : "") + std::to_string(it.extent);
  }
  std::printf("  spatial:%s   reduction:%s\n", spatial.c_str(), reduction.empty() ? " none" : reduction.c_str());
  if (c.dynamic.active())
    std::printf("  '%s' takes its size at run time (%s); shapes below are the largest\n",
                c.iters[c.dynamic.iter].name.c_str(), c.dynamic.param.c_str());
  for (std::size_t t = 0; t < c.tensors.size(); ++t) {
    const Tensor& tensor = c.tensors[t];
    const bool narrowed = static_cast<int>(t) == c.output.tensor && c.accumulate != tensor.dtype;
    std::printf("  %s %s %s%s\n", tensor.name.c_str(), std::string(dtype_name(tensor.dtype)).c_str(),
                shape_text(tensor.shape).c_str(),
                narrowed ? (" (summed in " + std::string(dtype_name(c.accumulate)) + ")").c_str() : "");
  }
}

/// "A, B" of a match's operand roles.
std::string operands_text(const Compute& c, const Match& m) {
  return c.tensor_of(c.inputs[m.roles.a_input]).name + ", " + c.tensor_of(c.inputs[m.roles.b_input]).name;
}

/// One line a match: abstraction, layout, intrinsic shape, operands, mappings that fit.
void print_matches(const Compute& c, const MatchReport& r) {
  std::printf("\n%zu match(es), mappings enumerated by '%s':\n", r.matches.size(),
              std::string(enumeration_name(r.enumeration)).c_str());
  if (!r.matches.empty())
    std::printf("  %-3s %-18s %-7s %-9s %-16s %s\n", "#", "abstraction", "layout", "shape", "A, B -> D", "fit the intrinsic");
  for (std::size_t i = 0; i < r.matches.size(); ++i) {
    const Match& m = r.matches[i];
    int fit = 0;
    for (const auto& map : m.mappings) fit += map.fits();
    const std::string ops = operands_text(c, m) + " -> " + c.tensor_of(c.output).name;
    std::printf("  %-3zu %-18s %-7s %-9s %-16s %d of %zu\n", i, m.hw_abs.c_str(), m.layout.c_str(), m.shape.str().c_str(),
                ops.c_str(), fit, m.mappings.size());
  }
}

/// The mappings of match `m`, whose layouts are `layouts`.
void print_mappings(const Compute& c, const Match& m, const std::string& layouts) {
  std::printf("\nmappings onto %s %s (A, B = %s; layouts %s); batch loops: %s; outer loops: %s\n", m.hw_abs.c_str(),
              m.shape.str().c_str(), operands_text(c, m).c_str(), layouts.c_str(), names_text(c, m.index.batch).c_str(),
              names_text(c, m.index.outer).c_str());
  std::printf("  %-4s %-14s %-10s %-14s %-22s %-7s %s\n", "id", "i", "j", "k", "fused extents i x j x k", "waste",
              "status");
  for (const auto& map : m.mappings) {
    std::string ext = std::to_string(map.fused_extent[0]) + " x " + std::to_string(map.fused_extent[1]) + " x " +
                      std::to_string(map.fused_extent[2]);
    char waste[16];
    std::snprintf(waste, sizeof waste, "%.1f%%", 100.0 * map.padding_waste);
    std::printf("  %-4d %-14s %-10s %-14s %-22s %-7s %s\n", map.id, axis_set_text(c, map.axes[0]).c_str(),
                axis_set_text(c, map.axes[1]).c_str(), axis_set_text(c, map.axes[2]).c_str(), ext.c_str(), waste,
                map.fits() ? "fits" : ("padded: " + map.padding).c_str());
  }
}

void print_text(const Compute& c, const MatchReport& r) {
  print_workload(c);
  print_matches(c, r);
  // Mappings and their padding depend on the abstraction, shape and operand roles, not on the
  // layout: print each table once.
  auto table = [](const Match& m) { return m.hw_abs + " " + m.shape.str() + " " + std::to_string(m.roles.a_input); };
  std::map<std::string, std::vector<std::string>> layouts;
  std::vector<const Match*> firsts;
  for (const auto& m : r.matches) {
    auto& l = layouts[table(m)];
    if (l.empty()) firsts.push_back(&m);
    l.push_back(m.layout);
  }
  for (const Match* m : firsts) {
    std::string ls;
    for (const auto& l : layouts[table(*m)]) ls += (ls.empty() ? "" : ", ") + l;
    print_mappings(c, *m, ls);
  }
  if (!r.rejected.empty()) std::printf("\nrejected:\n");
  for (const auto& rej : r.rejected) std::printf("  %-18s %s\n", rej.hw_abs.c_str(), rej.reason.c_str());
}

}  // namespace

Compute packed_compute(const Compute& c, int pack) {
  if (pack == 1) return c;
  GroupPack p = pack_groups(c, pack);
  if (!p.why_not.empty()) {
    std::string offered;
    for (int q : group_packs(c)) offered += (offered.empty() ? "" : ", ") + std::to_string(q);
    bad("--group-pack", "'" + c.name + "' cannot pack " + std::to_string(pack) + " groups into one: " + p.why_not,
        offered.empty() ? "drop --group-pack: only a grouped contraction packs groups"
                        : "the tuner offers " + offered + "; or drop --group-pack");
  }
  return std::move(p.compute);
}

void add_group_pack_option(CLI::App& cmd, int& pack) {
  cmd.add_option("--group-pack", pack,
                 "Pack this many groups of a grouped convolution into one block-diagonal product, whose mappings "
                 "the schedule's group_pack names (default 1: the compute as written)")
      ->check(between(1, 32));
}

void register_map(CLI::App& app) {
  auto args = std::make_shared<MapArgs>();
  auto* cmd = app.add_subcommand("map", "Match a compute against the hardware abstractions and enumerate its mappings");
  args->compute.add_to(*cmd);
  args->hw.add_to(*cmd, "Only these abstractions (repeatable; see 'tmap hw list')");
  cmd->add_option("--enumerate", args->enumerate, "amos: AMOS's partner rule; all: every mapping tmap can generate")
      ->check(CLI::IsMember({"amos", "all"}));
  cmd->add_option("--format", args->format, "text or json (one JSON document on stdout)")
      ->check(CLI::IsMember({"text", "json"}));
  add_group_pack_option(*cmd, args->group_pack);
  cmd->callback([args] {
    Compute c = packed_compute(args->compute.build(), args->group_pack);
    const std::vector<HwAbstraction> chosen = args->hw.chosen(args->hw.all());
    spdlog::debug("matching '{}' against {} abstraction(s)", c.name, chosen.size());
    MatchReport r = match_compute(c, chosen, args->enumerate == "all" ? Enumeration::kAll : Enumeration::kAmos);
    if (args->format == "json") std::cout << to_json(c, r).dump(2) << "\n";
    else print_text(c, r);
  });
}

}  // namespace tmap::cli
