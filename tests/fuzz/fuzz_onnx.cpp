// An ONNX model (tmap import, tune --model), read as the first byte's options and the rest as the
// file: parsed, shape-inferred, its contractions and fusable patterns read into a workload table.
// Bad input must end in a UserError; a table that imports must write as JSON that reads again to
// the same workloads and epilogues, as `tmap import -o` and `tune --table` rely on.
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <unistd.h>

#include "fuzz_util.h"
#include "tmap/frontend/onnx_import.h"
#include "tmap/frontend/workload_table.h"

namespace {

/// The options one byte picks: --batch 2 or none, --dim seq=16 or none, NHWC, and fusion.
tmap::OnnxImportOptions options_of(std::uint8_t bits) {
  tmap::OnnxImportOptions o;
  if (bits & 1) o.batch = 2;
  if (bits & 2) o.dims["seq"] = 16;
  o.channels_last = bits & 4;
  o.fuse = !(bits & 8);
  if (bits & 16) o.dtype = "bfloat16";
  return o;
}

void check_round_trip(const tmap::WorkloadTable& t) {
  using namespace tmap;
  const WorkloadTable again = parse_workload_table(SourceText("again.json", workload_table_json(t)));
  if (again.workloads.size() != t.workloads.size()) throw std::logic_error("an imported table does not read again");
  for (std::size_t i = 0; i < t.workloads.size(); ++i) {
    const TableWorkload &a = again.workloads[i], &w = t.workloads[i];
    if (a.name != w.name || a.op != w.op || a.params != w.params || a.count != w.count || a.epilogue != w.epilogue)
      throw std::logic_error("imported workload " + w.name + " does not survive a write and a read");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tmap;
  if (size == 0 || !onnx_import_available()) return 0;
  static const std::string path =
      (std::filesystem::temp_directory_path() / ("tmap_fuzz_onnx_" + std::to_string(getpid()) + ".onnx")).string();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data + 1), static_cast<std::streamsize>(size - 1));
  }
  fuzz::expect_clean([&] { check_round_trip(import_onnx(path, options_of(data[0]))); });
  std::filesystem::remove(path);
  return 0;
}
