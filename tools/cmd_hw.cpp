// `tmap hw list|show`: the hardware abstractions, shipped and the user's own.
#include <iomanip>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "commands.h"
#include "tmap/hw/hw_abstraction.h"
#include "tmap/runtime/device.h"

namespace tmap::cli {
namespace {

struct HwArgs {
  HwSelection dirs;  ///< --hw-dir
  std::string format = "text";
  std::string name;
};

std::string shapes_text(const HwAbstraction& hw) {
  std::string out;
  for (const auto& s : hw.shapes) out += (out.empty() ? "" : ",") + s.str();
  return out;
}

std::string layouts_text(const HwAbstraction& hw) {
  std::string out;
  for (const auto& l : hw.layouts) out += (out.empty() ? "" : ",") + l;
  return out;
}

}  // namespace

void register_hw(CLI::App& app) {
  auto args = std::make_shared<HwArgs>();
  auto* hw = app.add_subcommand("hw", "The hardware abstractions (intrinsic DAGs described as data)");
  hw->require_subcommand(1);
  args->dirs.add_to(*hw);

  auto* list = hw->add_subcommand("list", "List the abstractions, and which the detected GPU supports");
  list->add_option("--format", args->format, "text or json")->check(CLI::IsMember({"text", "json"}));
  list->callback([args] {
    auto all = args->dirs.all();
    spdlog::debug("loaded {} hardware abstractions ({})", all.size(), builtin_hw_directory());
    if (args->format == "json") {
      nlohmann::ordered_json j = nlohmann::ordered_json::array();
      for (const auto& h : all) {
        nlohmann::ordered_json hj = to_json(h);
        hj["source_file"] = h.source_file;
        j.push_back(std::move(hj));
      }
      std::cout << j.dump(2) << "\n";
      return;
    }
    RuntimeInfo rt = query_runtime();
    int cc = rt.devices.empty() ? 0 : rt.devices.front().compute_capability;
    std::cout << std::left << std::setw(21) << "name" << std::setw(10) << "family" << std::setw(30)
              << "dtypes (A, B -> D)" << std::setw(28) << "shapes (m x n x k)" << std::setw(17) << "layouts"
              << std::setw(7) << "min sm" << (cc ? "on this GPU" : "") << "\n";
    for (const auto& h : all) {
      std::string dtypes = std::string(dtype_name(h.a_dtype)) + ", " + std::string(dtype_name(h.b_dtype)) + " -> " +
                           std::string(dtype_name(h.d_dtype));
      std::cout << std::setw(21) << h.name << std::setw(10) << h.family << std::setw(30) << dtypes << std::setw(30)
                << shapes_text(h) << std::setw(17) << layouts_text(h) << std::setw(7)
                << ("sm_" + std::to_string(h.min_compute_capability))
                << (cc ? (cc >= h.min_compute_capability ? "yes" : "no") : "") << "\n";
    }
    if (cc == 0) std::cout << "(" << rt.status << ")\n";
  });

  auto* show = hw->add_subcommand("show", "Print one abstraction as validated data (JSON)");
  show->add_option("name", args->name, "The abstraction, e.g. wmma_fp16_fp32")->required();
  show->callback([args] {
    auto all = args->dirs.all();
    std::cout << to_json(find_hw(all, args->name)).dump(2) << "\n";
  });
}

}  // namespace tmap::cli
