// GPU test cases shared by the test files: candidates of one compute run against its reference
// kernel (fresh random inputs, outputs poisoned by the runner), one row printed per candidate.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tmap/codegen/emitter.h"
#include "tmap/runtime/device.h"
#include "tmap/runtime/kernel_runner.h"
#include "tmap/runtime/nvrtc_compiler.h"

namespace tmap::testing {

inline int device_cc() { return query_runtime().devices.front().compute_capability; }

struct GpuCase {
  std::string label;
  ImplicitGemm g;
  ScheduleParams p;
  double tolerance;
};

/// Runs candidates of one compute against its GPU reference; prints a row per candidate. The
/// kernels are compiled first, on every core.
inline void run_cases(const Compute& c, const std::vector<GpuCase>& cases, std::uint64_t seed) {
  NvrtcCompiler compiler(device_cc());
  Workspace ws(c, seed);
  std::vector<double> reference = gpu_reference(ws, compiler);
  std::vector<KernelSource> kernels;
  std::vector<CompileJob> jobs;
  for (const auto& gc : cases) {
    const auto issues = validate(gc.g, gc.p, DeviceLimits::for_arch(device_cc()));
    ASSERT_TRUE(issues.empty()) << gc.label << ": " << issues.front().detail;
    kernels.push_back(emit_kernel(gc.g, gc.p));
    jobs.push_back({kernels.back().name, kernels.back().code});
  }
  const std::vector<CompileResult> compiled = compile_parallel(compiler, jobs);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const GpuCase& gc = cases[i];
    SCOPED_TRACE(gc.label);
    ASSERT_TRUE(compiled[i].ok) << compiled[i].log;
    KernelRun run = run_candidate(ws, reference, c.inputs[gc.g.a_input].tensor, c.inputs[gc.g.b_input].tensor,
                                  kernels[i], compiled[i].cubin);
    ASSERT_TRUE(run.ok) << run.error;
    if (gc.tolerance == 0) EXPECT_EQ(run.rel_l2, 0.0);  // integers: exact
    else EXPECT_LT(run.rel_l2, gc.tolerance);
    std::printf("%-60s %-9.2e %9.2f us %8.2f TFLOP/s  compile %.2f s\n", gc.label.c_str(), run.rel_l2, run.median_us,
                gc.g.flops() / (run.median_us * 1e-6) / 1e12, compiled[i].seconds);
    std::fflush(stdout);
  }
}

}  // namespace tmap::testing
