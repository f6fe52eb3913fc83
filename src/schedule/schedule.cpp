#include "tmap/schedule/schedule.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "tmap/support/diagnostic.h"
#include "tmap/support/json_integer.h"

namespace tmap {

bool copies_shifted(const ImplicitGemm& g, const ScheduleParams& p, int which) {
  const int vec = which == 0 ? p.vec_a : p.vec_b;
  return vec > 1 && vec > operand_contiguity(g, which).aligned;
}

bool copies_strided(const ImplicitGemm& g, const ScheduleParams& p, int which) {
  return copies_shifted(g, p, which) && operand_contiguity(g, which).step == 2;
}

int shifted_load_width(const ImplicitGemm& g, const ScheduleParams& p, int which) {
  const Contiguity c = operand_contiguity(g, which);
  return c.step == 2 ? c.load : which == 0 ? p.vec_a : p.vec_b;
}

bool copies_async(const ImplicitGemm& g, const ScheduleParams& p, int which) {
  const int vec = which == 0 ? p.vec_a : p.vec_b;
  const std::int64_t bytes = std::int64_t{vec} * dtype_bits(which == 0 ? g.hw->a_dtype : g.hw->b_dtype) / 8;
  return p.async_copy != 0 && vec > 1 && (bytes == 4 || bytes == 8 || bytes == 16) && !copies_shifted(g, p, which);
}

nlohmann::json to_json(const ScheduleParams& p) {
  nlohmann::json j = nlohmann::json::object();
  for (const Knob& k : knobs()) j[std::string(k.name)] = k.get(p);
  return j;
}

ScheduleParams schedule_from_json(const nlohmann::json& j, const ScheduleParams& defaults) {
  ScheduleParams p = defaults;
  if (!j.is_object())
    throw UserError(format_diagnostic(SourceLoc::whole("--params"), "schedule parameters must be a JSON object",
                                      "for example '{\"block_m\": 64, \"block_n\": 64}'"));
  for (const auto& item : j.items()) {
    const std::string key = item.key();  // not a structured binding: Clang 14 cannot capture one
    const auto& value = item.value();
    const Knob* knob = find_knob(key);
    if (!knob)
      throw UserError(format_diagnostic(SourceLoc::whole("--params"), "unknown schedule parameter \"" + key + "\"",
                                        "parameters are: " + join(knob_names())));
    if (!value.is_number_integer())
      throw UserError(format_diagnostic(SourceLoc::whole("--params"),
                                        "schedule parameter \"" + key + "\" must be an integer"));
    if (!is_integer_of<int>(value))
      throw UserError(format_diagnostic(SourceLoc::whole("--params"),
                                        "schedule parameter \"" + key + "\" is out of range: " + value.dump()));
    knob->set(p, value.get<int>());
  }
  return p;
}

DeviceLimits DeviceLimits::for_arch(int cc) {
  DeviceLimits l;
  l.compute_capability = cc;
  l.max_shared_bytes = cc >= 90 ? 227 * 1024 : cc >= 80 ? 163 * 1024 : cc >= 75 ? 64 * 1024 : 96 * 1024;
  return l;
}

std::string_view message(ScheduleError e) {
  switch (e) {
    case ScheduleError::kTileNotMultipleOfIntrinsic: return "a tile is not a multiple of the intrinsic's shape";
    case ScheduleError::kBlockNotMultipleOfWarp: return "the block tile is not a multiple of the warp tile";
    case ScheduleError::kTooManyThreads:
      return "the block has more threads than the device allows, or than its register file holds";
    case ScheduleError::kSharedMemoryExceeded: return "the shared memory exceeds the device's limit";
    case ScheduleError::kBadStages:
      return "stages must be 1 or 2, or up to the family's pipeline depth (wmma 4, mma_sync 5) with async_copy = 1";
    case ScheduleError::kBadOption:
      return "a knob has a value outside its range, or one its family does not take ('tmap knobs' lists each "
             "knob's values and families)";
    case ScheduleError::kBadAsyncCopy:
      return "async_copy (0 or 1) needs sm_80 or newer and an operand loaded in 4-, 8- or 16-byte vectors";
    case ScheduleError::kBadVector:
      return "a vector width is not a power of two up to 16 bytes that the operand's contiguity and the tile allow";
    case ScheduleError::kMisalignedRows:
      return "a shared-memory row is not a multiple of 16 bytes (or, swizzled, not a power of two of at least 32 "
             "bytes), as the fragment loads require";
    case ScheduleError::kMisalignedFragments:
      return "fragments would start at addresses not 32-byte aligned, as WMMA requires";
    case ScheduleError::kBadSplitK: return "split_k must be between 1 and the number of reduction steps";
    case ScheduleError::kGridTooLarge: return "the grid exceeds the device's limits";
  }
  return "unknown schedule error";
}

std::int64_t stored_row_length(const ImplicitGemm& g, const ScheduleParams& p, int which) {
  if (!stored_along_mn(g, which)) return p.block_k;
  return which == 0 ? p.block_m : p.block_n;
}

const ImplicitGemm* gemm_view_for(const ImplicitGemm& g, const ScheduleParams& p, ImplicitGemm& storage,
                                  std::string& why_not) {
  if (p.relayout == 0 || g.relayouted()) return &g;
  RelayoutView v = relayout_view(g, p.relayout);
  if (!v.why_not.empty()) {
    why_not = std::move(v.why_not);
    return nullptr;
  }
  storage = std::move(v.gemm);
  return &storage;
}

const ImplicitGemm& gemm_for(const ImplicitGemm& g, const ScheduleParams& p, ImplicitGemm& storage) {
  std::string why_not;
  const ImplicitGemm* view = gemm_view_for(g, p, storage, why_not);
  if (!view)
    throw UserError(format_diagnostic(SourceLoc::whole("--params"),
                                      "relayout = " + std::to_string(p.relayout) +
                                          " is not offered for this mapping: " + why_not,
                                      "use relayout = 0"));
  return *view;
}

}  // namespace tmap
