// What `tmap tune`, `tmap replay`, `tmap logs` and `tmap export` share: the machine a command
// targets and the reading of logs (tools/cmd_tune.cpp, cmd_replay.cpp, cmd_logs.cpp).
#pragma once

#include <string>
#include <vector>

#include "cli_common.h"
#include "tmap/runtime/device.h"
#include "tmap/schedule/schedule.h"
#include "tmap/tune/features.h"
#include "tmap/tune/tune_log.h"

namespace tmap::cli {

/// The target of this machine: its GPU, or the named architecture without one.
struct Machine {
  RuntimeInfo rt;
  std::vector<DeviceInfo> gpus;  ///< Those to measure on (--gpus), of one model; the first is the target.
  int cc = 0;
  bool has_gpu = false;
  Target target;
  DeviceLimits limits;
  DeviceModel model;
};

/// `gpus`: --gpus of `tmap tune` ("" elsewhere: the first GPU).
Machine detect(const std::string& arch, const std::string& gpus = "");

/// Reads a log that must exist; its skipped lines are warned about.
LogContents load_log(const std::string& path);

/// A measured record's TFLOP/s.
double tflops(const TuneRecord& r);

void register_replay(CLI::App& app);
void register_logs(CLI::App& app);
void register_export(CLI::App& app);

}  // namespace tmap::cli
