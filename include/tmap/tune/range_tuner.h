// Tuning a range of sizes (a compute with a dynamic extent, `--set M=1..256`): a few sample
// sizes are tuned as the workloads of one model (one cost model, one budget, model_tuner.h),
// each searching the kernels of the whole range (taking the size at run time) measured and
// modelled at its size (range_sample); the fastest candidates of every sample are then measured
// again at the samples near those they came from, without compiling again; and the fewest
// buckets of consecutive sizes are chosen whose kernel stays within a stated loss of the
// fastest kernel of the range at each sample in it; the sizes between two buckets' samples go
// to the kernel that is faster there. Each sample's dispatched kernel is
// reported against its own tuning's fastest, both measured twice. Every measurement and each
// bucket is recorded in the log (TuneResult's size and bucket), from which `tmap replay` and
// `tmap export` dispatch by size.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tmap/tune/tuner.h"

namespace tmap {

/// The sample sizes of [lo, hi]: lo, hi, the powers of two between and the midpoints (3 x 2^k)
/// between those, ascending.
std::vector<std::int64_t> range_sample_sizes(std::int64_t lo, std::int64_t hi);

/// The order in which the samples (ascending sizes) get their first batch: the largest, the
/// smallest, then each time the one farthest in log(size) from those before it. When a time
/// budget ends within the first round (a slow compiler), the samples tuned cover the range, and
/// the largest sizes, whose kernels differ most from the others', are not the ones left out.
std::vector<std::size_t> range_look_order(const std::vector<std::int64_t>& sizes);

/// A candidate is measured at the samples within this many of those it was among the fastest of:
/// the best kernel of M = 2 is rarely the best of M = 256, and measuring every candidate at every
/// sample took as long as tuning the samples.
inline constexpr std::size_t kRangeReach = 3;

/// One bucket chosen over the samples: samples [first, last] served by candidate `candidate`.
struct BucketChoice {
  std::size_t first = 0, last = 0;
  int candidate = -1;
};

/// The fewest buckets of consecutive samples covering all of them, each served by one candidate
/// whose time at every sample in it is within (1 + loss) of `best` there (us[candidate][sample],
/// infinite where it failed). Among as few buckets, the one whose worst ratio is lowest. A sample
/// that no candidate serves within the loss gets a bucket of its own with its fastest candidate;
/// a sample where every candidate failed, none (the caller reports it). When that takes more
/// than `most` buckets (0: no limit), at most `most` whose worst ratio is lowest, the loss aside
/// (unless no kernel runs across what so few would span).
std::vector<BucketChoice> choose_buckets(const std::vector<std::vector<double>>& us, const std::vector<double>& best,
                                         double loss, std::size_t most = 0);

struct RangeTuneOptions {
  /// How each sample is tuned: trials and time budget here are the whole range's (0: none), 80%
  /// of them for the samples. Measuring the candidates across the range takes the rest: each at
  /// the samples it came from always, at their neighbours, nearest first, until the time budget
  /// is spent. The log is required: the samples' candidates are read back from it.
  TuneOptions tune;
  std::vector<std::int64_t> sizes;  ///< Samples (the range's ends are added); empty: range_sample_sizes().
  double loss = 0.05;               ///< A bucket's kernel is within this of the best at its samples.
  /// At most this many buckets, at a larger loss if need be (0: no limit); the measurements at
  /// neighbouring samples that the time budget left out are made when the buckets exceed it.
  int max_buckets = 0;
  int per_size = 4;                 ///< Fastest distinct candidates of each sample tried across the range.
};

/// A sample: the time of its own tuning's fastest kernel and of the kernel dispatched to it,
/// each the slower of two measurements across the range (the log's best of its tuning where its
/// own kernel was not measured across).
struct RangePoint {
  std::int64_t size = 0;
  double tuned_us = 0, dispatched_us = 0;
};

struct RangeBucket {
  std::int64_t lo = 0, hi = 0;
  CandidateRef candidate;
  double worst_ratio = 0;  ///< Its time over the fastest kernel of the range at its worst sample.
  std::int64_t worst_size = 0;
  double worst_us = 0;
};

struct RangeTuneSummary {
  std::vector<RangePoint> points;
  std::vector<RangeBucket> buckets;
  int candidates = 0;      ///< Kernels of the range measured across it.
  int measurements = 0;    ///< Of them at the samples and between them (where buckets start).
  int failed = 0;          ///< Of which errors or wrong results.
  int skipped = 0;         ///< Measurements at neighbouring samples left out at the time budget.
  int beyond_budget = 0;   ///< Of those, made after all to keep to max_buckets (no longer skipped).
  bool over_cap = false;   ///< More buckets than max_buckets: no kernel measured spans fewer.
  std::vector<std::int64_t> unserved;  ///< Samples where every candidate failed.
  double tune_s = 0, cross_s = 0, wall_s = 0;
  MeasurePhases cross_phases;  ///< Where the workers' time of the measurements across went.
  /// The samples' tuning: its trials, where its time went (TuneSummary's seconds, summed), and
  /// its setting up and ending (ModelTuneSummary's).
  int sample_trials = 0;
  TuneSummary sample_times;
  double sample_setup_s = 0, sample_finish_s = 0, sample_finish_compile_s = 0;
};

/// A range's kernel measured at one size, on workspace `workspace` of that size (0: the one its
/// sample's tuning measured on; 1: another, see workspace_seed): WorkerMeasurer::measure_at in
/// tmap, a fake in tests.
using MeasureAt = std::function<MeasureResult(const Compute& range, std::int64_t size, int workspace,
                                              const ImplicitGemm& g, const ScheduleParams& p,
                                              const KernelSource& k, const CompileResult& binary)>;

/// Tunes the range `range` (Compute::dynamic active) as above: the samples on the pool's GPUs,
/// the candidates across the range through `measure_at`. Throws UserError when the range has no
/// kernel that takes its size at run time, or no log is given.
RangeTuneSummary tune_range(const Compute& range, const std::vector<HwAbstraction>& hws, const RangeTuneOptions& o,
                            MeasurePool& gpus, const MeasureAt& measure_at);

/// Which logged kernel serves `c`, a shape of one size of a tuned range: the bucket in force
/// (range_buckets) whose range's compute_at(size) is `c`, and that size. `outside` names a
/// logged range of the same computation that does not take c's size ("M=1..256"), for the
/// error of a size outside every range; bucket is null then, or when no range matches.
struct Dispatch {
  const TuneRecord* bucket = nullptr;
  std::int64_t size = 0;
  std::string outside;
};
Dispatch dispatch(const std::vector<TuneRecord>& records, const Compute& c, const std::string& arch);

}  // namespace tmap
