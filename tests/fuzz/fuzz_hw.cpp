// A hardware-abstraction file: the file schema it prints back must load again, and the kernel
// generated with it depends on the file through identifiers and numbers only: it is the same
// kernel when every other text of the file is replaced (docs/formats.md, "What reaches
// generated code"). The instruction a kernel issues is its family's (checked at load).
#include <map>

#include "fuzz_util.h"
#include "tmap/codegen/emitter.h"
#include "tmap/codegen/validate.h"
#include "tmap/frontend/compute_loader.h"
#include "tmap/frontend/json_locations.h"
#include "tmap/frontend/op_library.h"
#include "tmap/gemm/implicit_gemm.h"
#include "tmap/match/matcher.h"
#include "tmap/schedule/schedule.h"

namespace {

using namespace tmap;

/// `hw` with every text that is neither an identifier nor a number replaced: its description,
/// its source file, and its DAG's node names and memory-intrinsic texts (edges renamed along).
HwAbstraction without_free_text(const HwAbstraction& hw) {
  HwAbstraction plain = hw;
  plain.description.clear();
  plain.source_file.clear();
  std::map<std::string, std::string> renamed = {{hw.compute_name, "compute"}};
  plain.compute_name = "compute";
  for (std::size_t i = 0; i < plain.memory.size(); ++i) {
    renamed[hw.memory[i].name] = plain.memory[i].name = "node" + std::to_string(i);
    plain.memory[i].intrinsic.clear();
  }
  for (auto& [from, to] : plain.edges) from = renamed[from], to = renamed[to];
  return plain;
}

/// A GEMM in the abstraction's dtypes, its first match's kernel with the default schedule.
std::string kernel_of(const HwAbstraction& hw) {
  ComputeDef def = builtin_op("gemm");
  auto stored = [](DType t) { return t == DType::kTFloat32 ? DType::kFloat32 : t; };  // tf32 reads float32 data
  for (auto& t : def.tensors) t.dtype = stored(t.name == "C" ? hw.d_dtype : t.name == "A" ? hw.a_dtype : hw.b_dtype);
  const Compute c = build_compute(def);
  const MatchReport r = match_compute(c, {hw}, Enumeration::kAmos);
  if (r.matches.empty()) return {};
  const Match& m = r.matches.front();
  const ImplicitGemm g = make_implicit_gemm(c, hw, m, m.mappings.back());
  const DeviceLimits limits = DeviceLimits::for_arch(90);
  const ScheduleParams p = default_schedule(g, limits);
  if (!validate(g, p, limits).empty()) return {};
  return emit_kernel(g, p).code;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const SourceText src("fuzz_hw.json", fuzz::text_of(data, size));
  fuzz::expect_clean([&] {
    HwAbstraction hw = parse_hw_abstraction(src);
    const std::string shown = to_json(hw).dump(2);
    HwAbstraction again = parse_hw_abstraction(SourceText("shown.json", shown));
    if (to_json(again).dump(2) != shown) throw std::logic_error("hw show output does not load back unchanged");
    // A kernel depends on the file through identifiers and numbers only: the same kernel comes
    // from the file with all other text replaced.
    if (kernel_of(hw) != kernel_of(without_free_text(hw)))
      throw std::logic_error("a kernel depends on an abstraction file's free text");
  });
  return 0;
}
