// Features of a candidate (virtual GEMM + schedule) for the cost models, and the analytic model
// that ranks candidates before enough measurements exist.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "tmap/gemm/implicit_gemm.h"
#include "tmap/schedule/schedule.h"

namespace tmap {

/// The machine the models reason about.
struct DeviceModel {
  int compute_capability = 90;
  int sm_count = kSm90Sms;
  double clock_ghz = 1.755;
  /// Dense tensor-core rate of the WMMA (mma.sync) path per SM per clock, in FLOP, for 16-bit
  /// operands; other dtypes scale by dtype_rate().
  double tensor_flops_per_clock_sm = 2048;
  double dram_bytes_per_s = 3.0e12;  ///< Device memory bandwidth.
  double l2_bytes_per_s = 8.0e12;
  int max_threads_per_sm = 2048, max_blocks_per_sm = 32, registers_per_sm = 65536;
  std::int64_t shared_bytes_per_sm = 228 * 1024;
  double launch_us = 1.0;  ///< Fixed cost of a kernel launch as timed (graph replay).
  /// Rates for a known architecture (sm_80, sm_86, sm_89, sm_90); sm_count when given > 0.
  static DeviceModel for_arch(int compute_capability, int sm_count = 0);
};

/// The features computed from the GEMM and the schedule together, in order; each is documented
/// where it is computed (features.cpp). The knobs' own features (knobs.def) follow them.
inline constexpr std::array<std::string_view, 24> kDerivedFeatureNames = {
    "log2_M",          "log2_N",         "log2_K",          "log2_batch_serial", "padding_waste",
    "fragments",       "warps",          "log2_smem_bytes", "est_registers",     "occupancy",
    "waves",           "wave_efficiency", "log2_tile_bytes", "intensity",        "vec_a_bytes",
    "vec_b_bytes",     "contig_a_bytes", "contig_b_bytes",  "intrinsic_m",       "intrinsic_k",
    "dtype_rate",      "log2_analytic_us", "family",        "log2_relayout_bytes"};
inline constexpr std::size_t kNumFeatures = kDerivedFeatureNames.size() + kNumKnobFeatures;
/// Every feature's name, in order: the derived ones, then one per knob the cost model sees
/// ("<knob>", or "log2_<knob>").
std::vector<std::string> feature_names();
/// The position of derived feature `name` (kNumFeatures when there is none).
constexpr std::size_t feature_index(std::string_view name) {
  for (std::size_t i = 0; i < kDerivedFeatureNames.size(); ++i)
    if (kDerivedFeatureNames[i] == name) return i;
  return kNumFeatures;
}
inline constexpr std::size_t kAnalyticFeature = feature_index("log2_analytic_us");
static_assert(kAnalyticFeature < kNumFeatures, "the analytic estimate is a feature");

using Features = std::array<float, kNumFeatures>;

/// Blocks of this schedule resident on one SM at once (0 when it does not fit).
int blocks_per_sm(const ImplicitGemm& g, const ScheduleParams& p, const DeviceModel& d);

/// Registers per thread the kernel is estimated to need (accumulators, fragments, addresses).
int estimated_registers(const ImplicitGemm& g, const ScheduleParams& p);

/// The analytic model's time estimate in microseconds: the slowest of tensor-core work (padded,
/// spread over the waves the grid makes), operand traffic (DRAM for first reads, L2 for the
/// re-reads of other tiles) and gather instructions (scalar gathers with index arithmetic cost
/// more per element than vectors), plus launch and the split-K reduction. For a sample of a range
/// (DynamicExtent::at) it and candidate_features see the GEMM at the sample's size.
double analytic_time_us(const ImplicitGemm& g, const ScheduleParams& p, const DeviceModel& d);

Features candidate_features(const ImplicitGemm& g, const ScheduleParams& p, const DeviceModel& d);

}  // namespace tmap
