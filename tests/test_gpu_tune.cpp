// Tuning on the GPU (skipped without one): the search measures in the isolated worker, logs
// every trial, and the best record replays to a verified kernel close to its logged time.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <set>

#include "test_util.h"
#include "tmap/frontend/compute_loader.h"
#include "tmap/frontend/op_library.h"
#include "tmap/frontend/parser.h"
#include "tmap/runtime/device.h"
#include "tmap/tune/tuner.h"

namespace tmap {
namespace {

using testing::have_gpu;

struct Tuned {
  TuneSummary summary;
  MeasureResult replay;
};

/// Tunes `trials` candidates on the first `gpus` GPUs into a fresh log, then replays the log's
/// best record as `tmap replay` does (regenerated from the record alone, compiled, verified,
/// timed in a new worker on new random inputs).
Tuned tune_and_replay(const Compute& c, int trials, const std::string& name, std::size_t gpus = 1) {
  const RuntimeInfo rt = query_runtime();
  const DeviceInfo& dev = rt.devices.front();
  const std::vector<HwAbstraction>& hws = testing::shipped();
  TuneOptions o;
  o.trials = trials;
  o.seed = 42;
  o.log_path = (std::filesystem::temp_directory_path() / ("tmap_gpu_tune_" + std::to_string(::getpid()) + "_" + name + ".jsonl")).string();
  std::filesystem::remove(o.log_path);
  o.target = {"sm_" + std::to_string(dev.compute_capability), dev.name, cuda_version_text(rt.driver_version),
              cuda_version_text(rt.runtime_version), "test"};
  o.compute_capability = dev.compute_capability;
  o.limits = DeviceLimits::for_arch(dev.compute_capability);
  o.limits.sm_count = dev.sm_count;
  o.device = DeviceModel::for_arch(dev.compute_capability, dev.sm_count);
  const TimingOptions timing = tuning_timing();  // as `tmap tune` and `tmap replay` time
  Tuned t;
  {
    std::vector<std::unique_ptr<WorkerMeasurer>> measurers;
    std::vector<Measurer*> pool;
    for (std::size_t i = 0; i < gpus; ++i) {
      const DeviceInfo& d = rt.devices.at(i);
      measurers.push_back(std::make_unique<WorkerMeasurer>(TMAP_BINARY, 10, timing, true, 7,
                                                           MeasureGpu{d.index, d.uuid, d.name}));
      pool.push_back(measurers.back().get());
    }
    MeasurePool on(pool);
    t.summary = tune(c, hws, o, on);
  }
  LogContents log = read_log(o.log_path);
  EXPECT_TRUE(log.warnings.empty());
  // Each record names the GPU that measured it; the confirmations ran on the first.
  std::set<int> measured_on;
  for (const TuneRecord& r : log.records) {
    const bool known = r.result.gpu >= 0 && r.result.gpu < static_cast<int>(gpus);
    EXPECT_TRUE(known) << r.result.gpu;
    if (!known) continue;
    EXPECT_EQ(r.result.gpu_uuid, rt.devices[r.result.gpu].uuid);
    if (r.result.confirm_rounds) EXPECT_EQ(r.result.gpu, 0);
    else measured_on.insert(r.result.gpu);
  }
  EXPECT_EQ(measured_on.size(), gpus) << "a GPU measured nothing";
  // Every trial, and the confirmations of the fastest (measured again at the end, see TuneOptions).
  EXPECT_EQ(static_cast<int>(log.records.size()), t.summary.measured + t.summary.confirmed);
  EXPECT_EQ(t.summary.confirmed, std::min(o.confirm_top, t.summary.measured - t.summary.failed));
  EXPECT_GT(t.summary.best->result.confirm_rounds, 0) << "the best is a confirmed record";
  std::vector<const TuneRecord*> best = best_records(log.records);
  EXPECT_EQ(best.size(), 1u);
  if (best.empty()) return t;
  EXPECT_EQ(best[0]->result.median_us, t.summary.best->result.median_us);
  Regenerated g = regenerate(*best[0], hws, dev.compute_capability);
  NvrtcCompiler compiler(dev.compute_capability);
  CompileResult bin = compiler.compile(g.kernel.code, g.kernel.name);
  EXPECT_TRUE(bin.ok) << bin.log;
  WorkerMeasurer replayer(TMAP_BINARY, 30, timing, true, 12345);
  t.replay = replayer.measure(*g.compute, g.gemm(), g.params, g.kernel, bin);
  const double flops = best[0]->flops;
  std::printf("%s: %d trials in %.1f s (%d failed, %d mappings), best %.2f us = %.1f TFLOP/s, replayed %.2f us "
              "(rel L2 %.1e)\n  %s\n",
              name.c_str(), t.summary.measured, t.summary.wall_s, t.summary.failed, t.summary.arms,
              best[0]->result.median_us, flops / best[0]->result.median_us / 1e6, t.replay.median_us, t.replay.rel_l2,
              to_json(best[0]->candidate.params).dump().c_str());
  for (const auto& [trial, us] : t.summary.history) std::printf("  improved at trial %d: %.2f us\n", trial, us);
  double sum = 0;
  for (double r : t.summary.rank_correlations) sum += r;
  if (!t.summary.rank_correlations.empty())
    std::printf("  model rank correlation on unseen batches: mean %.2f over %zu batches\n",
                sum / t.summary.rank_correlations.size(), t.summary.rank_correlations.size());
  std::filesystem::remove(o.log_path);
  return t;
}

TEST(GpuTune, Gemm1024TunesAndReplaysWithinTenPercent) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  Compute c = build_compute(builtin_op("gemm"), parse_param_overrides({"M=1024", "N=1024", "K=1024"}));
  Tuned t = tune_and_replay(c, 64, "gemm1024");
  EXPECT_EQ(t.summary.measured, 64);
  ASSERT_EQ(t.replay.status, MeasureStatus::kOk) << t.replay.message;
  EXPECT_LT(t.replay.rel_l2, 1e-2);
  EXPECT_LT(std::abs(t.replay.median_us / t.summary.best->result.median_us - 1), 0.10);
}

TEST(GpuTune, TwoGpusTuneAtOnceAndTheBestReplays) {
  if (query_runtime().devices.size() < 2) GTEST_SKIP() << "needs two GPUs";
  Compute c = build_compute(builtin_op("gemm"), parse_param_overrides({"M=1024", "N=1024", "K=1024"}));
  Tuned t = tune_and_replay(c, 96, "gemm1024_two_gpus", 2);
  EXPECT_EQ(t.summary.measured, 96);
  ASSERT_EQ(t.replay.status, MeasureStatus::kOk) << t.replay.message;
  EXPECT_LT(t.replay.rel_l2, 1e-2);
  EXPECT_LT(std::abs(t.replay.median_us / t.summary.best->result.median_us - 1), 0.10);
}

// 8-bit float inputs on Hopper's wgmma, with a per-tensor scale as the epilogue, verified against
// the reference of the dequantized inputs (the inputs' float8 values summed in float32).
TEST(GpuTune, Fp8GemmWithAPerTensorScaleTunesAndReplaysVerified) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  if (query_runtime().devices.front().compute_capability != 90) GTEST_SKIP() << "8-bit float wgmma needs sm_90";
  ComputeDef def = builtin_op("gemm_nt");
  set_dtypes(def, "float8_e4m3", "bfloat16", "--dtype", "--out-dtype");
  const std::string epilogue = "Y[m, n] = C[m, n] * scale[0]";
  set_epilogue(def, epilogue, locator_for(SourceText("--epilogue", epilogue)), SourceLoc::whole("--epilogue"));
  Compute c = build_compute(def, parse_param_overrides({"M=2048", "N=2048", "K=2048"}));
  Tuned t = tune_and_replay(c, 64, "fp8_gemm2048");
  EXPECT_EQ(t.summary.measured, 64);
  EXPECT_EQ(t.summary.best->candidate.hw_abs, "wgmma_e4m3_fp32");
  ASSERT_EQ(t.replay.status, MeasureStatus::kOk) << t.replay.message;
  EXPECT_LT(t.replay.rel_l2, 1e-2);
}

TEST(GpuTune, ResNet18Layer5TunesAndReplaysVerified) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  Compute c = build_compute(builtin_op("conv2d"));  // layer 5 at batch 1: (1, 128, 28, 28, 128, 3, 3, 1, 1)
  Tuned t = tune_and_replay(c, 200, "r18_l5");
  EXPECT_EQ(t.summary.measured, 200);
  ASSERT_EQ(t.replay.status, MeasureStatus::kOk) << t.replay.message;
  EXPECT_LT(t.replay.rel_l2, 1e-2);
}

}  // namespace
}  // namespace tmap
