// `--params` against the default mapping of a small GEMM for each family, and a depthwise
// convolution's window-staging mapping (SIMT): read, validated, and, when valid, turned into CUDA
// source (not compiled). Validation must refuse whatever the emitters cannot generate.
#include "fuzz_util.h"
#include "tmap/codegen/emitter.h"
#include "tmap/frontend/json_locations.h"
#include "tmap/frontend/op_library.h"
#include "tmap/gemm/implicit_gemm.h"
#include "tmap/match/match_report.h"
#include "tmap/schedule/schedule.h"

namespace {

struct Target {
  tmap::Compute compute, depthwise;
  tmap::MatchReport report, depthwise_report;
  std::vector<tmap::ImplicitGemm> gemms;  // the first mapping of one match per abstraction, then the window's
};

const Target& target() {
  static const Target t = [] {
    using namespace tmap;
    Target t{build_compute(builtin_op("gemm"), parse_param_overrides({"M=96", "N=80", "K=72"})),
             build_compute(builtin_op("depthwise_conv2d"), parse_param_overrides({"C=6", "H=14", "W=14", "stride=2"})),
             {}, {}, {}};
    t.report = match_compute(t.compute, fuzz::shipped_hw(), Enumeration::kAmos);
    std::vector<std::string> seen;
    for (const Match& m : t.report.matches) {
      if (m.mappings.empty() || std::find(seen.begin(), seen.end(), m.hw_abs) != seen.end()) continue;
      seen.push_back(m.hw_abs);
      t.gemms.push_back(make_implicit_gemm(t.compute, find_hw(fuzz::shipped_hw(), m.hw_abs), m, m.mappings.front()));
    }
    const HwAbstraction& simt = find_hw(fuzz::shipped_hw(), "simt_fp16_fp32");
    t.depthwise_report = match_compute(t.depthwise, {simt}, Enumeration::kAmos);
    for (const Match& m : t.depthwise_report.matches)
      for (const Mapping& map : m.mappings) {
        ImplicitGemm g = make_implicit_gemm(t.depthwise, simt, m, map);
        if (t.gemms.back().compute != &t.depthwise && default_schedule(g, DeviceLimits::for_arch(90)).window)
          t.gemms.push_back(g);
      }
    return t;
  }();
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tmap;
  if (size == 0) return 0;
  const Target& t = target();
  // The first byte picks the abstraction, the rest is the --params text.
  const ImplicitGemm& g = t.gemms[data[0] % t.gemms.size()];
  const SourceText src("--params", fuzz::text_of(data + 1, size - 1));
  fuzz::expect_clean([&] {
    const DeviceLimits limits = DeviceLimits::for_arch(90);
    nlohmann::json j = parse_json_text(src, "");
    ScheduleParams p = schedule_from_json(j, default_schedule(g, limits));
    if (validate(g, p, limits).empty()) (void)emit_kernel(g, p);
  });
  return 0;
}
