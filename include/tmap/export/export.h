// `tmap export`: tuned kernels out of tmap. For the best record of each workload of a log it
// writes a standalone CUDA source with a launch function taking plain device pointers (the
// compute's tensors, in its order) and a cudaStream_t, plus what builds and checks them:
//   DIR/tmap_kernels.h        declarations of every launch function, with shapes and times
//   DIR/kernels/<name>.cu     one kernel (renamed to be unique), its launch plan as a constant and
//                             its launch function, which hands the plan to tmap_plan_launch
//   DIR/tmap_runtime.cu       src/runtime/launch_plan.cpp as it is: the code tmap itself runs
//   DIR/tmap/runtime/launch_plan.h  plans executed (TMA maps through the driver entry point, never
//                             linking libcuda)
//   DIR/check.cu              a program that runs each kernel on random inputs against the
//                             reference kernel generated from the IR (relative L2), and times it
//   DIR/CMakeLists.txt        the static library tmap_kernels and tmap_kernels_check
//   DIR/torch/                an example PyTorch C++ extension calling the first kernel
#pragma once

#include <string>
#include <vector>

#include "tmap/hw/hw_abstraction.h"
#include "tmap/tune/tune_log.h"

namespace tmap {

struct ExportedKernel {
  std::string function;  ///< The launch function, tmap_<name>.
  std::string file;      ///< Relative to the output directory.
  std::string workload_key, label;
  double logged_us = 0;  ///< 0 for an unmeasured record.
};

/// Writes the files above for `records` (one per workload), compiled for sm_<cc> ("a" suffix on
/// sm_90 and later, for wgmma); `source` names the log in comments. UserError when a record no
/// longer regenerates (see regenerate()) or the directory cannot be written.
std::vector<ExportedKernel> export_kernels(const std::vector<const TuneRecord*>& records,
                                           const std::vector<HwAbstraction>& hws, int cc, const std::string& dir,
                                           const std::string& source);

}  // namespace tmap
