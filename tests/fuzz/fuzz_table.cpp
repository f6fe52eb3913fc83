// A workload table (tmap import's JSON, read by tune --table and tmap_bench): read and validated;
// a valid one writes back as JSON that reads again to the same workloads.
#include "fuzz_util.h"
#include "tmap/frontend/workload_table.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tmap;
  fuzz::expect_clean([&] {
    const WorkloadTable t = parse_workload_table(SourceText("fuzz.json", fuzz::text_of(data, size)));
    const WorkloadTable again = parse_workload_table(SourceText("again.json", workload_table_json(t)));
    if (again.workloads.size() != t.workloads.size()) throw std::logic_error("a table does not survive a write and a read");
    for (std::size_t i = 0; i < t.workloads.size(); ++i)
      if (again.workloads[i].name != t.workloads[i].name || again.workloads[i].op != t.workloads[i].op ||
          again.workloads[i].params != t.workloads[i].params || again.workloads[i].count != t.workloads[i].count ||
          again.workloads[i].flops != t.workloads[i].flops)
        throw std::logic_error("workload " + t.workloads[i].name + " does not survive a write and a read");
  });
  return 0;
}
