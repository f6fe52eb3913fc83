// Runs one generated kernel on the GPU: fresh random inputs, a poisoned output, the result
// checked against a CPU reference computed from the IR, and the kernel timed with CUDA events.
// (The isolated worker process, the GPU reference for large shapes and graph timing are still
// to come; see the code-generation issue.)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tmap/codegen/wmma_emitter.h"

namespace tmap {

struct KernelRun {
  bool ok = false;
  std::string error;           ///< The CUDA error, when the kernel failed to load, launch or run.
  double rel_l2 = 0;           ///< ||out - ref|| / ||ref||; infinite when an element is NaN.
  double median_us = 0;        ///< Median of the timed launches.
  std::vector<double> times_us;
};

/// The reference output of a compute for the given inputs (one vector of values per tensor,
/// in Compute::tensors order; the output's entry is ignored), accumulated in double.
std::vector<double> cpu_reference(const Compute& c, const std::vector<std::vector<double>>& tensors);

/// Loads `cubin`, runs kernel `k` of GEMM `g` on device 0 on random inputs drawn from `seed`,
/// verifies it and times `repeats` launches after `warmup`.
KernelRun run_kernel(const ImplicitGemm& g, const KernelSource& k, const std::vector<char>& cubin, std::uint64_t seed,
                     int warmup = 3, int repeats = 20);

}  // namespace tmap
