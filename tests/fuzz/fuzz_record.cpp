// Log records down to generated kernels, as `tmap replay` takes them: every record that
// validation accepts stays in bounds by an independent check at the corners of its iteration
// space (tests/corner_check.h), and regenerates its kernel or is refused with a UserError.
#include "../corner_check.h"
#include "fuzz_util.h"
#include "tmap/tune/tune_log.h"
#include "tmap/tune/tuner.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tmap;
  const LogContents log = parse_log_text(fuzz::text_of(data, size), "fuzz.jsonl");
  for (const TuneRecord& r : log.records) {
    const std::string fault = testing::corner_fault(compute_from_json(r.workload.compute, "accepted record"));
    if (!fault.empty()) throw std::logic_error("validation accepted a record that leaves its bounds: " + fault);
    fuzz::expect_clean([&] { (void)regenerate(r, fuzz::shipped_hw(), 90); });
  }
  return 0;
}
