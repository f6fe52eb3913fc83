// A hardware-abstraction file: the file schema it prints back must load again, and a kernel
// generated with it must hold no text of the file but identifiers, numbers and the instruction
// its family writes (docs/formats.md, "What reaches generated code").
#include <cctype>
#include <functional>

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

bool is_identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_') return false;
  return true;
}

/// Every string in `j`, keys included.
void strings_of(const nlohmann::ordered_json& j, std::vector<std::string>& out) {
  if (j.is_string()) out.push_back(j.get<std::string>());
  if (j.is_object())
    for (const auto& [k, v] : j.items()) out.push_back(k), strings_of(v, out);
  if (j.is_array())
    for (const auto& v : j) strings_of(v, out);
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
    const std::string code = kernel_of(hw);
    std::vector<std::string> texts;
    strings_of(nlohmann::ordered_json::parse(src.text()), texts);
    for (const std::string& s : texts)
      if (s.size() >= 6 && !is_identifier(s) && s != family_intrinsic(hw) && code.find(s) != std::string::npos)
        throw std::logic_error("text from an abstraction file reached a kernel: " + s);
  });
  return 0;
}
