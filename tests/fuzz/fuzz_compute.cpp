// A compute file: loaded, built with its own parameters, matched against the shipped
// abstractions, and the first mapping of the first match turned into CUDA source (not compiled).
#include "fuzz_util.h"
#include "tmap/codegen/emitter.h"
#include "tmap/frontend/compute_loader.h"
#include "tmap/gemm/implicit_gemm.h"
#include "tmap/match/match_report.h"
#include "tmap/schedule/schedule.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tmap;
  const SourceText src("fuzz.json", fuzz::text_of(data, size));
  fuzz::expect_clean([&] {
    Compute c = build_compute(parse_compute_json(src, "fuzz"));
    MatchReport report = match_compute(c, fuzz::shipped_hw(), Enumeration::kAmos);
    for (const Match& m : report.matches) {
      if (m.mappings.empty()) continue;
      const HwAbstraction& hw = find_hw(fuzz::shipped_hw(), m.hw_abs);
      ImplicitGemm g = make_implicit_gemm(c, hw, m, m.mappings.front());
      const DeviceLimits limits = DeviceLimits::for_arch(90);
      ScheduleParams p = default_schedule(g, limits);
      if (validate(g, p, limits).empty()) (void)emit_kernel(g, p);
      break;
    }
  });
  return 0;
}
