// The GPUs `tmap tune` measures on (--gpus): a worker per GPU in one pool, the progress lines
// per GPU, and the utilization summary at the end.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tmap/tune/tuner.h"

namespace tmap::cli {

/// One WorkerMeasurer per chosen GPU, driven by one pool.
struct TuneGpus {
  std::vector<DeviceInfo> devices;
  std::vector<std::unique_ptr<WorkerMeasurer>> measurers;
  std::unique_ptr<MeasurePool> pool;
};
TuneGpus open_gpus(const std::vector<DeviceInfo>& devices, double timeout_s, double measure_ms, std::uint64_t seed);

/// A GPU's progress line: its trials, its latest workload and that workload's best, how busy it was.
std::vector<std::string> gpu_lines(const MeasurePool& pool, double elapsed_s);

/// Lines shown on stderr: on a terminal rewritten in place (with more than one line the block
/// is redrawn below the text above it), else printed as they come.
class ProgressBlock {
 public:
  explicit ProgressBlock(bool tty) : tty_(tty) {}
  void show(const std::vector<std::string>& lines);
  /// Ends the block on a terminal, so that what follows starts on a fresh line.
  void end();

 private:
  bool tty_;
  std::size_t drawn_ = 0;
};

/// The summary after tuning: per GPU, its trials and busy time over `wall_s`, and what bounded
/// the trial rate (bound_by()).
void print_gpu_summary(const TuneGpus& g, double wall_s, double compile_wait_gpu_s);
nlohmann::json gpu_summary_json(const TuneGpus& g, double wall_s, double compile_wait_gpu_s);

}  // namespace tmap::cli
