// A tuning log: each line is a record or a warning; records print back as JSON that reads again.
#include "fuzz_util.h"
#include "tmap/tune/tune_log.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tmap;
  LogContents log = parse_log_text(fuzz::text_of(data, size), "fuzz.jsonl");
  for (const TuneRecord& r : log.records) {
    (void)candidate_label(r.candidate);
    const nlohmann::json j = to_json(r);
    TuneRecord again = record_from_json(j);
    if (to_json(again) != j) throw std::logic_error("a record does not survive a write and a read");
  }
  (void)best_records(log.records);
  return 0;
}
