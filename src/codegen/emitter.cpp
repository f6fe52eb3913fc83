#include "tmap/codegen/emitter.h"

#include <vector>

#include "tile_pipeline.h"
#include "tmap/codegen/device_library.h"
#include "tmap/support/diagnostic.h"

namespace tmap {
namespace {

/// The families, in the order messages list them: the one list a new family joins.
const std::vector<const EmitterFamily*>& families() {
  static const std::vector<const EmitterFamily*> all = {&wmma_family(), &mma_sync_family(), &wgmma_family(),
                                                        &simt_family()};
  return all;
}

}  // namespace

const EmitterFamily* find_family(std::string_view name) {
  for (const EmitterFamily* f : families())
    if (f->name() == name) return f;
  return nullptr;
}

std::vector<std::string> family_names() {
  std::vector<std::string> out;
  for (const EmitterFamily* f : families()) out.emplace_back(f->name());
  return out;
}

const EmitterFamily& family_of(const HwAbstraction& hw) {
  if (const EmitterFamily* f = find_family(hw.family)) return *f;
  throw UserError(format_diagnostic(SourceLoc::whole(hw.source_file.empty() ? hw.name : hw.source_file),
                                    "hardware abstraction '" + hw.name + "' has family \"" + hw.family +
                                        "\", which no code generator implements",
                                    "families with an emitter: " + join(family_names())));
}

std::vector<int> EmitterFamily::block_tiles(const ImplicitGemm&, const ScheduleParams& p, char axis) const {
  const int warp = axis == 'm' ? p.warp_m : p.warp_n;
  std::vector<int> out;
  for (int i = 0; i <= max_warp_tiles_log2(); ++i) out.push_back(warp << i);
  return out;
}

const KnobUse* find_knob_use(const EmitterFamily& family, std::string_view knob) {
  for (const KnobUse& use : family.knob_uses())
    if (use.knob == knob) return &use;
  return nullptr;
}

std::vector<std::pair<const EmitterFamily*, KnobUse>> knob_users(const Knob& knob) {
  std::vector<std::pair<const EmitterFamily*, KnobUse>> out;
  for (const EmitterFamily* f : families())
    if (const KnobUse* use = find_knob_use(*f, knob.name)) out.emplace_back(f, *use);
  return out;
}

std::string knob_takers(const Knob& knob) {
  if (knob.every_family) return "every family";
  std::string out;
  for (const auto& [family, use] : knob_users(knob))
    out += (out.empty() ? "" : ", ") + std::string(family->name()) + " " + std::to_string(use.min) + "-" +
           std::to_string(use.max);
  return out.empty() ? "none" : out;
}

std::string knob_reference_markdown() {
  std::string out =
      "| knob | default | values | families | what it does |\n| --- | --- | --- | --- | --- |\n";
  for (const Knob& k : knobs())
    out += "| `" + std::string(k.name) + "` | " + std::to_string(k.default_value) + " | " + std::to_string(k.min) +
           "-" + std::to_string(k.max) + " | " + knob_takers(k) + " | " + std::string(k.doc) + " |\n";
  return out;
}

KernelSource emit_kernel(const ImplicitGemm& in, const ScheduleParams& p) {
  ImplicitGemm storage;
  const ImplicitGemm& g = gemm_for(in, p, storage);
  KernelSource k = family_of(*g.hw).emit(g, p);
  if (g.relayouted()) pipeline::emit_relayout(k, g);
  k.epilogue_operands = static_cast<int>(g.compute->epilogue.operands.size());
  gather_device_includes(k.code);
  return k;
}

}  // namespace tmap
