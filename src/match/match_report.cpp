#include "tmap/match/match_report.h"

#include <nlohmann/json.hpp>

namespace tmap {

MatchReport match_compute(const Compute& c, const std::vector<HwAbstraction>& hws, Enumeration e) {
  MatchReport report;
  report.enumeration = e;
  for (const auto& hw : hws) {
    DagMatch dag = match_dag(c, hw);
    if (!dag.ok()) {
      report.rejected.push_back({hw.name, dag.failure, reason_text(dag.failure, dag.detail)});
      continue;
    }
    ExprMatch roles = match_expression(c, hw);
    if (!roles.ok()) {
      report.rejected.push_back({hw.name, roles.failure, reason_text(roles.failure, roles.detail)});
      continue;
    }
    IndexMatch index = match_indices(c, roles);
    if (!index.ok()) {
      report.rejected.push_back({hw.name, index.failure, reason_text(index.failure, index.detail)});
      continue;
    }
    auto add_matches = [&](const ExprMatch& r, const IndexMatch& idx) {
      std::vector<Mapping> mappings = enumerate_mappings(c, idx, r, e);
      for (const auto& layout : hw.layouts) {
        for (const auto& shape : hw.shapes) {
          Match m{hw.name, layout, shape, r, idx, mappings};
          for (auto& mapping : m.mappings) check_feasibility(c, shape, mapping);
          report.matches.push_back(std::move(m));
        }
      }
    };
    add_matches(roles, index);
    // The transposed product, when it can put an axis on a side of the intrinsic that the
    // written order cannot (a mapping without i and j would only repeat the written one).
    if (shapes_symmetric(hw) || (index.candidates[0].empty() && index.candidates[1].empty())) continue;
    ExprMatch swapped = swapped_roles(c, hw, roles);
    if (!swapped.ok()) continue;
    add_matches(swapped, match_indices(c, swapped));
  }
  return report;
}

nlohmann::json to_json(const Compute& c, const MatchReport& r) {
  nlohmann::json doc;
  doc["workload"] = to_json(c);
  doc["enumerate"] = enumeration_name(r.enumeration);
  doc["matches"] = nlohmann::json::array();
  for (const auto& m : r.matches) {
    nlohmann::json mj;
    mj["hw_abs"] = m.hw_abs;
    mj["layout"] = m.layout;
    mj["shape"] = m.shape.extent;
    mj["operands"] = {{"A", c.tensor_of(c.inputs[m.roles.a_input]).name},
                      {"B", c.tensor_of(c.inputs[m.roles.b_input]).name},
                      {"D", c.tensor_of(c.output).name}};
    auto names = [&](const std::vector<int>& ids) {
      std::vector<std::string> out;
      for (int id : ids) out.push_back(c.iters[id].name);
      return out;
    };
    mj["batch"] = names(m.index.batch);
    mj["outer"] = names(m.index.outer);
    mj["mappings"] = nlohmann::json::array();
    for (const auto& map : m.mappings) {
      mj["mappings"].push_back({{"id", map.id},
                                {"axes", {{"i", names(map.axes[0])}, {"j", names(map.axes[1])}, {"k", names(map.axes[2])}}},
                                {"fused_extent", map.fused_extent},
                                {"fits", map.fits()},
                                {"padding", map.padding},
                                {"padding_waste", map.padding_waste}});
    }
    doc["matches"].push_back(std::move(mj));
  }
  doc["rejected"] = nlohmann::json::array();
  for (const auto& rej : r.rejected)
    doc["rejected"].push_back({{"hw_abs", rej.hw_abs}, {"stage", stage(rej.failure)}, {"reason", rej.reason}});
  return doc;
}

}  // namespace tmap
