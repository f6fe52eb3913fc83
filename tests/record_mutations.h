// Log records altered as someone handing tmap a log might alter them: index constants and
// coefficients, extents, shapes, iterator kinds, the schedule and the mapping, one or two at a
// time, with the workload key recomputed half of the time (the hash is public) so that the
// alterations reach the checks behind the key's.
#pragma once

#include <cstdint>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tmap/ir/compute.h"

namespace tmap::testing {

/// One alteration of `record` drawn from `rng`.
inline void alter_record(nlohmann::json& record, std::mt19937& rng) {
  auto pick = [&](std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng); };
  auto small = [&] { return static_cast<std::int64_t>(pick(7)) - 3; };
  nlohmann::json& c = record["workload"]["compute"];
  nlohmann::json& access = pick(3) == 0 ? c["output"] : c["inputs"][pick(c["inputs"].size())];
  nlohmann::json& index = access["indices"][pick(access["indices"].size())];
  static const std::int64_t coefficients[] = {-2, -1, 0, 2, 3, 64, std::int64_t{1} << 20, std::int64_t{1} << 40};
  static const char* knobs[] = {"block_m", "block_n", "block_k", "warp_m", "warp_n", "stages", "split_k", "vec_a", "vec_b"};
  static const int knob_values[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  switch (pick(8)) {
    case 0: index["constant"] = index["constant"].get<std::int64_t>() + small(); break;
    case 1:
      if (!index["terms"].empty()) index["terms"][pick(index["terms"].size())][1] = coefficients[pick(8)];
      break;
    case 2: {
      nlohmann::json& it = c["iterators"][pick(c["iterators"].size())];
      it["extent"] = pick(2) ? it["extent"].get<std::int64_t>() + small() : small();
      break;
    }
    case 3: {
      nlohmann::json& t = c["tensors"][pick(c["tensors"].size())];
      nlohmann::json& dim = t["shape"][pick(t["shape"].size())];
      dim = dim.get<std::int64_t>() + small();
      break;
    }
    case 4: {
      nlohmann::json& it = c["iterators"][pick(c["iterators"].size())];
      it["kind"] = it["kind"] == "spatial" ? "reduction" : "spatial";
      break;
    }
    case 5:
    case 6: record["candidate"]["params"][knobs[pick(9)]] = knob_values[pick(9)]; break;
    default: record["candidate"]["mapping"]["id"] = record["candidate"]["mapping"]["id"].get<int>() + small(); break;
  }
}

/// `count` altered copies of `record` (one or two alterations each), keys recomputed for half.
inline std::vector<nlohmann::json> altered_records(const nlohmann::json& record, int count, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<nlohmann::json> out;
  for (int i = 0; i < count; ++i) {
    nlohmann::json r = record;
    alter_record(r, rng);
    if (rng() % 2) alter_record(r, rng);
    if (rng() % 2) {
      try {
        r["workload"]["key"] = workload_key(compute_from_json(r["workload"]["compute"], "altered record"));
      } catch (const std::exception&) {  // unreadable: the key stays, and the record is refused anyway
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

/// The draw the tests share: the first record of six shipped logs (one per kind of op), 60
/// altered copies of each, as log text.
inline std::string altered_shipped_records(const std::string& source_dir) {
  std::string text;
  std::uint32_t seed = 1;
  for (const char* name : {"h100_gemm", "h100_resnet18_b1", "h200_conv1d_b1", "h100_conv3d_b1", "h100_depthwise_b1",
                           "h100_grouped_b1"}) {
    std::ifstream in(source_dir + "/logs/" + name + ".jsonl");
    std::string line;
    if (!std::getline(in, line)) throw std::runtime_error(std::string("cannot read the shipped log of ") + name);
    for (const nlohmann::json& r : altered_records(nlohmann::json::parse(line), 60, seed++)) text += r.dump() + "\n";
  }
  return text;
}

}  // namespace tmap::testing
