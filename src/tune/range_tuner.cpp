#include "tmap/tune/range_tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "tmap/codegen/emitter.h"
#include "tmap/support/diagnostic.h"
#include "tmap/support/files.h"
#include "tmap/tune/model_tuner.h"
#include "tmap/tune/range_looks.h"

namespace tmap {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kInf = std::numeric_limits<double>::infinity();
/// The most times the buckets are chosen again after their kernels are measured a second time.
constexpr int kChoiceRounds = 4;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// The worst ratio of candidate `c` over the best across samples [i, j]; infinite if it fails one.
double worst_ratio(const std::vector<std::vector<double>>& us, const std::vector<double>& best, int c, std::size_t i,
                   std::size_t j) {
  double worst = 0;
  for (std::size_t t = i; t <= j; ++t) worst = std::max(worst, us[c][t] / best[t]);
  return worst;
}

/// A candidate of the range: its record form, its kernel and binary, its times at the samples.
struct RangeCandidate {
  CandidateRef ref;
  int entry = -1;
  std::vector<std::size_t> origins;  ///< The samples it was among the fastest of.
  KernelSource kernel;
  CompileResult binary;
  std::vector<double> us;
  std::vector<bool> confirmed;  ///< Per sample: measured a second time (RangeRun::choose).
};

/// The distinct correct candidates of one sample's tuning, read back from the log, fastest first.
std::vector<CandidateRef> fastest_of(const std::vector<TuneRecord>& log, const std::string& key, const Target& target) {
  std::vector<const TuneRecord*> ok;
  for (const TuneRecord& r : log)
    if (r.workload.key == key && r.target.arch == target.arch && r.result.ok() && r.result.size == 0) ok.push_back(&r);
  std::stable_sort(ok.begin(), ok.end(), [](const TuneRecord* a, const TuneRecord* b) { return ranks_before(*a, *b); });
  std::vector<CandidateRef> out;
  std::set<std::string> seen;
  for (const TuneRecord* r : ok)
    if (seen.insert(candidate_signature(r->candidate)).second) out.push_back(r->candidate);
  return out;
}

/// The best correct time of each sample's own tuning on `target`'s architecture, by key.
std::map<std::string, double> own_bests(const std::vector<TuneRecord>& log, const Target& target) {
  std::map<std::string, double> out;
  for (const TuneRecord* r : best_records(log, true))
    if (r->target.arch == target.arch) out.emplace(r->workload.key, r->result.median_us);
  return out;
}

TuneResult result_of(const MeasureResult& m, const RangeCandidate& c, std::int64_t size, const MeasurePool& gpus) {
  TuneResult r;
  r.status = status_name(m.status);
  r.median_us = m.median_us;
  r.times_us = m.times_us;
  r.rel_l2 = m.rel_l2;
  r.compile_seconds = c.binary.seconds;
  r.error = m.message;
  r.size = size;
  const MeasureGpu on = gpus.measurer(0).gpu();
  r.gpu = on.index;
  r.gpu_uuid = on.uuid;
  return r;
}

/// Tunes the samples (range_sample) as the workloads of one model: one cost model, one budget
/// (80% of the range's), each sample a batch first (in range_look_order()), then batches where
/// they gain the most; the next sample's candidates compile while one is measured. Their kernels
/// are the range's, so a schedule that one sample shares with another as a seed is compiled once
/// (`o`'s compile cache). No confirmation: measure_samples() measures each sample's fastest again.
ModelTuneSummary tune_samples(const Compute& range, const std::vector<HwAbstraction>& hws,
                              const RangeTuneOptions& o, const std::vector<std::int64_t>& sizes, MeasurePool& gpus) {
  std::vector<Compute> computes;
  for (std::int64_t size : sizes) computes.push_back(range_sample(range, size));
  std::vector<ModelTask> tasks;  // in the warm-up's order: tune_model() keeps it among equal FLOPs
  for (std::size_t i : range_look_order(sizes))
    tasks.push_back({range.name + "@" + range.dynamic.param + "=" + std::to_string(sizes[i]), &computes[i], 1});
  ModelTuneOptions m;
  m.tune = o.tune;
  m.tune.confirm_top = 0;
  m.tune.range_looks = std::make_shared<RangeLooks>();
  // Every sample gets its batch even when the trials are few (the warm-up takes the largest first).
  const int floor = static_cast<int>(sizes.size()) * o.tune.batch;
  m.trials = o.tune.trials > 0 ? std::max(floor, static_cast<int>(std::lround(0.8 * o.tune.trials))) : 0;
  m.time_budget_s = 0.8 * o.tune.time_budget_s;
  m.warmup_batches = 1;
  return tune_model(tasks, hws, m, gpus);
}

}  // namespace

std::vector<std::size_t> range_look_order(const std::vector<std::int64_t>& sizes) {
  auto ratio = [](std::int64_t a, std::int64_t b) {  // of sizes, each at least 1
    return static_cast<double>(std::max<std::int64_t>(a, 1)) / static_cast<double>(std::max<std::int64_t>(b, 1));
  };
  const std::size_t n = sizes.size();
  std::vector<std::size_t> order;
  std::vector<bool> taken(n, false);
  auto take = [&](std::size_t i) {
    order.push_back(i);
    taken[i] = true;
  };
  if (n > 0) take(n - 1);
  if (n > 1) take(0);
  while (order.size() < n) {
    std::size_t pick = 0;
    double farthest = -1;
    for (std::size_t i = 0; i < n; ++i) {
      if (taken[i]) continue;
      double nearest = kInf;
      for (std::size_t j : order) nearest = std::min(nearest, std::abs(std::log(ratio(sizes[i], sizes[j]))));
      if (nearest > farthest) farthest = nearest, pick = i;
    }
    take(pick);
  }
  return order;
}

std::vector<std::int64_t> range_sample_sizes(std::int64_t lo, std::int64_t hi) {
  std::set<std::int64_t> s{lo, hi};
  for (std::int64_t p = 1; p <= hi; p *= 2) {
    if (p >= lo) s.insert(p);
    if (3 * p / 2 > p && 3 * p / 2 >= lo && 3 * p / 2 <= hi) s.insert(3 * p / 2);
  }
  return {s.begin(), s.end()};
}

namespace {

/// The candidate with the lowest worst ratio over samples [i, j] (-1 and an infinite ratio when
/// each fails at one of them); for a single sample whose candidates all failed, -1 and ratio 0:
/// an empty bucket, which the caller reports.
int best_candidate(const std::vector<std::vector<double>>& us, const std::vector<double>& best, std::size_t i,
                   std::size_t j, double& ratio) {
  int pick = -1;
  ratio = kInf;
  for (int c = 0; c < static_cast<int>(us.size()); ++c) {
    const double r = worst_ratio(us, best, c, i, j);
    if (r < ratio) ratio = r, pick = c;
  }
  if (pick < 0 && i == j) ratio = 0;
  return pick;
}

/// The buckets ending at each sample, read back from the last: from[j] is the bucket ending
/// before sample j.
std::vector<BucketChoice> read_back(const std::vector<BucketChoice>& from, std::size_t n) {
  std::vector<BucketChoice> out;
  for (std::size_t j = n; j > 0; j = from[j].first) out.push_back(from[j]);
  std::reverse(out.begin(), out.end());
  return out;
}

/// The fewest buckets within the loss (a sample that none serves within it alone, with its fastest).
std::vector<BucketChoice> fewest_within_loss(const std::vector<std::vector<double>>& us,
                                             const std::vector<double>& best, double loss) {
  const std::size_t n = best.size();
  // count[j], worst[j]: the fewest buckets over samples [0, j) and their worst ratio; from[j]
  // the bucket ending there.
  std::vector<int> count(n + 1, std::numeric_limits<int>::max());
  std::vector<double> worst(n + 1, kInf);
  std::vector<BucketChoice> from(n + 1);
  count[0] = 0;
  worst[0] = 0;
  for (std::size_t j = 0; j < n; ++j)
    for (std::size_t i = 0; i <= j; ++i) {
      if (count[i] == std::numeric_limits<int>::max()) continue;
      double ratio = kInf;
      const int pick = best_candidate(us, best, i, j, ratio);
      if (i != j && (pick < 0 || ratio > 1 + loss)) continue;
      const double w = std::max(worst[i], ratio);
      if (count[i] + 1 < count[j + 1] || (count[i] + 1 == count[j + 1] && w < worst[j + 1])) {
        count[j + 1] = count[i] + 1;
        worst[j + 1] = w;
        from[j + 1] = {i, j, pick};
      }
    }
  return read_back(from, n);
}

/// At most `most` buckets with the lowest worst ratio, whatever the loss; among those, the fewest.
std::vector<BucketChoice> lowest_worst_ratio(const std::vector<std::vector<double>>& us,
                                             const std::vector<double>& best, std::size_t most) {
  const std::size_t n = best.size();
  // worst[k][j]: the lowest worst ratio of k buckets over samples [0, j); from[k][j] the last.
  std::vector<std::vector<double>> worst(most + 1, std::vector<double>(n + 1, kInf));
  std::vector<std::vector<BucketChoice>> from(most + 1, std::vector<BucketChoice>(n + 1));
  worst[0][0] = 0;
  for (std::size_t k = 1; k <= most; ++k)
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t i = 0; i <= j; ++i) {
        if (worst[k - 1][i] == kInf) continue;
        double ratio = kInf;
        const int pick = best_candidate(us, best, i, j, ratio);
        const double w = std::max(worst[k - 1][i], ratio);
        if ((pick >= 0 || i == j) && w < worst[k][j + 1]) {
          worst[k][j + 1] = w;
          from[k][j + 1] = {i, j, pick};
        }
      }
  std::size_t k = 1;
  for (std::size_t c = 2; c <= most; ++c)
    if (worst[c][n] < worst[k][n]) k = c;
  std::vector<BucketChoice> out;
  if (worst[k][n] == kInf) return out;  // no kernel runs across what so few buckets would span
  for (std::size_t j = n; j > 0; --k) {
    out.push_back(from[k][j]);
    j = from[k][j].first;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace

std::vector<BucketChoice> choose_buckets(const std::vector<std::vector<double>>& us, const std::vector<double>& best,
                                         double loss, std::size_t most) {
  std::vector<BucketChoice> out = fewest_within_loss(us, best, loss);
  if (most == 0 || out.size() <= most) return out;
  std::vector<BucketChoice> capped = lowest_worst_ratio(us, best, most);
  return capped.empty() ? out : capped;
}

namespace {

/// One run of tune_range after its samples are tuned: the candidates of the range, measured and
/// recorded, and the buckets chosen.
class RangeRun {
 public:
  RangeRun(const Compute& range, const SearchSpace& space, const RangeTuneOptions& o, std::vector<std::int64_t> sizes,
           MeasurePool& gpus, const MeasureAt& measure_at)
      : range_(range), space_(space), o_(o), sizes_(std::move(sizes)), gpus_(gpus), measure_at_(measure_at),
        log_(read_log(o.tune.log_path).records), writer_(o.tune.log_path), workload_(make_workload(range)),
        own_best_(own_bests(log_, o.tune.target)), own_(sizes_.size(), -1) {}

  /// Each sample's fastest candidates that take the size at run time (a sample's winner may map
  /// it elsewhere), as kernels of the range, compiled; the fastest of each its own (own_).
  bool collect() {
    std::map<std::string, int> index;  // by candidate_signature: its place in cands_
    for (std::size_t i = 0; i < sizes_.size(); ++i) {
      const std::string key = make_workload(range_sample(range_, sizes_[i])).key;
      int taken = 0;
      for (const CandidateRef& ref : fastest_of(log_, key, o_.tune.target)) {
        if (taken == o_.per_size) break;
        const int entry = space_.find(ref);
        if (entry < 0 || !validate(space_.entries()[entry].gemm, ref.params, o_.tune.limits).empty()) continue;
        RangeCandidate c;
        c.entry = entry;
        c.ref = space_.ref(entry, ref.params);
        const auto [at, fresh] = index.emplace(candidate_signature(c.ref), static_cast<int>(cands_.size()));
        if (taken++ == 0) own_[i] = at->second;
        if (!fresh) {  // another sample's candidate too
          cands_[at->second].origins.push_back(i);
          continue;
        }
        c.origins = {i};
        c.kernel = emit_kernel(space_.entries()[entry].gemm, ref.params);
        c.us.assign(sizes_.size(), kInf);
        c.confirmed.assign(sizes_.size(), false);
        cands_.push_back(std::move(c));
      }
    }
    NvrtcCompiler compiler(o_.tune.compute_capability, o_.tune.compile_cache_dir);  // the samples compiled them
    std::vector<CompileJob> jobs;
    for (const RangeCandidate& c : cands_) jobs.push_back({c.kernel.name, c.kernel.code});
    std::vector<CompileResult> compiled = compile_parallel(compiler, jobs, o_.tune.compile_threads);
    for (std::size_t i = 0; i < cands_.size(); ++i) cands_[i].binary = std::move(compiled[i]);
    summary_.candidates = static_cast<int>(cands_.size());
    return !cands_.empty();
  }

  /// Each candidate at the samples within reach of its own, nearest first: at its own samples
  /// always, at the others until `deadline` (those left out are counted as skipped).
  void measure_samples(Clock::time_point deadline) {
    for (std::size_t reach = 0; reach <= kRangeReach; ++reach)
      for (std::size_t i = 0; i < sizes_.size(); ++i)
        for (RangeCandidate& c : cands_) {
          if ((o_.tune.stop && o_.tune.stop->load()) || distance(c, i) != reach) continue;
          if (reach > 0 && Clock::now() > deadline) {
            ++summary_.skipped;
            skipped_.push_back({static_cast<std::size_t>(&c - cands_.data()), i});
            continue;
          }
          measure_cell(c, i);
        }
  }

  /// Buckets within the loss of the fastest kernel measured across the range at each sample: a
  /// sample whose own tuning measured one faster (a single measurement, or a candidate not among
  /// its fastest few) shows the difference as its ratio, instead of splitting the range into a
  /// bucket per sample. Each chosen kernel, and the fastest at each sample, is measured again
  /// there, on another workspace, and keeps the slower of its two times; the buckets are chosen
  /// again until every such kernel was measured twice (a lucky single measurement, or a kernel
  /// fast only where its sample's tensors happened to lie, would otherwise take a bucket).
  void choose() {
    const std::size_t most = static_cast<std::size_t>(std::max(0, o_.max_buckets));
    std::vector<BucketChoice> picks;
    for (int round = 0; round < kChoiceRounds; ++round) {
      picks = choose_buckets(times(), best_of_range(), o_.loss, most);
      // More buckets than allowed while neighbours were left out at the time budget: one of
      // those may hold a kernel that spans more, so they are measured after all.
      if (most && picks.size() > most && measure_skipped()) picks = choose_buckets(times(), best_of_range(), o_.loss, most);
      const bool picks_measured = confirm(picks);
      if (!confirm_bests() && !picks_measured) break;
    }
    summary_.over_cap = most && picks.size() > most;
    // Each sample's own fastest kernel, measured twice as the dispatched one is, for the ratio
    // of the two (the log's best of its tuning is the luckiest of many single measurements).
    for (std::size_t i = 0; i < sizes_.size(); ++i)
      if (own_[i] >= 0) confirm_cell(cands_[own_[i]], i);
    const std::vector<BucketStart> starts = lower_ends(picks);
    for (std::size_t k = 0; k < picks.size(); ++k)
      record_bucket(picks[k], starts[k], k + 1 < picks.size() ? starts[k + 1].lo - 1 : range_.dynamic.hi);
    for (RangePoint& p : summary_.points) p.tuned_us = own_us(p.size);
  }

  RangeTuneSummary& summary() { return summary_; }

 private:
  /// The time at sample `size` of its own tuning's fastest kernel: measured across the range,
  /// else as the log has it (0 when none ran correctly).
  double own_us(std::int64_t size) const {
    const std::size_t i = std::lower_bound(sizes_.begin(), sizes_.end(), size) - sizes_.begin();
    if (own_[i] >= 0 && std::isfinite(cands_[own_[i]].us[i])) return cands_[own_[i]].us[i];
    const auto it = own_best_.find(make_workload(range_sample(range_, size)).key);
    return it == own_best_.end() ? 0 : it->second;
  }

  /// Each candidate's times at the samples.
  std::vector<std::vector<double>> times() const {
    std::vector<std::vector<double>> us;
    for (const RangeCandidate& c : cands_) us.push_back(c.us);
    return us;
  }

  /// The fastest kernel of the range at each sample.
  std::vector<double> best_of_range() const {
    std::vector<double> best(sizes_.size(), kInf);
    for (const RangeCandidate& c : cands_)
      for (std::size_t i = 0; i < sizes_.size(); ++i) best[i] = std::min(best[i], c.us[i]);
    return best;
  }

  /// Candidate `c` at sample `i`.
  void measure_cell(RangeCandidate& c, std::size_t i) { c.us[i] = measure(c, sizes_[i]); }

  /// The measurements left out at the time budget, made now; false when there were none.
  bool measure_skipped() {
    for (const auto& [candidate, sample] : skipped_) measure_cell(cands_[candidate], sample);
    summary_.beyond_budget += static_cast<int>(skipped_.size());
    summary_.skipped -= static_cast<int>(skipped_.size());
    const bool any = !skipped_.empty();
    skipped_.clear();
    return any;
  }

  /// Measures each picked kernel again where it ran once in its bucket, keeping the slower time;
  /// false when there was none to measure.
  bool confirm(const std::vector<BucketChoice>& picks) {
    bool measured = false;
    for (const BucketChoice& b : picks)
      if (b.candidate >= 0)
        for (std::size_t t = b.first; t <= b.last; ++t) measured |= confirm_cell(cands_[b.candidate], t);
    return measured;
  }

  /// The same for the fastest kernel at each sample: the bar a bucket's kernel is held to is no
  /// luckier a measurement than that kernel's own.
  bool confirm_bests() {
    bool measured = false;
    for (std::size_t t = 0; t < sizes_.size(); ++t) {
      RangeCandidate* fastest = nullptr;
      for (RangeCandidate& c : cands_)
        if (!fastest || c.us[t] < fastest->us[t]) fastest = &c;
      if (fastest) measured |= confirm_cell(*fastest, t);
    }
    return measured;
  }

  /// Candidate `c` at sample `t` again, keeping the slower time, unless it ran twice or failed.
  /// The second run is on another workspace: a kernel whose time depends on where its tensors
  /// lie is held to its slower placement.
  bool confirm_cell(RangeCandidate& c, std::size_t t) {
    if (c.confirmed[t] || !std::isfinite(c.us[t])) return false;
    c.us[t] = std::max(c.us[t], measure(c, sizes_[t], 1));
    c.confirmed[t] = true;
    return true;
  }

  /// How many samples sample `i` is from the nearest of those `c` came from.
  static std::size_t distance(const RangeCandidate& c, std::size_t i) {
    std::size_t d = std::numeric_limits<std::size_t>::max();
    for (std::size_t j : c.origins) d = std::min(d, i > j ? i - j : j - i);
    return d;
  }

  /// Candidate `c` at `size` on `workspace` (MeasureAt), recorded; its time, infinite when it failed.
  double measure(const RangeCandidate& c, std::int64_t size, int workspace = 0) {
    MeasureResult m;
    if (!c.binary.ok) {
      m.status = MeasureStatus::kLoadError;
      m.message = "did not compile";
    } else {
      m = measure_at_(range_, size, workspace, space_.entries()[c.entry].gemm, c.ref.params, c.kernel, c.binary);
    }
    ++summary_.measurements;
    summary_.failed += m.status != MeasureStatus::kOk;
    summary_.cross_phases += m.phases;
    writer_.append(make_record(workload_, o_.tune.target, c.ref, result_of(m, c, size, gpus_)));
    return m.status == MeasureStatus::kOk ? m.median_us : kInf;
  }

  /// Where a bucket starts, and its kernel's time there when that was measured (NaN: not yet).
  struct BucketStart {
    std::int64_t lo = 0;
    double us = std::nan("");
  };

  /// Where each pick's bucket starts. The sizes between two samples of neighbouring buckets were
  /// measured by neither: they go to the later bucket's kernel from the first size at which it
  /// runs no slower than the earlier one's. That is the size after the earlier sample when the
  /// later kernel is no slower there (two measurements), else bisected up to the later sample
  /// (each kernel's time taken to cross the other's once between them).
  std::vector<BucketStart> lower_ends(const std::vector<BucketChoice>& picks) {
    std::vector<BucketStart> out(picks.size(), {range_.dynamic.lo});
    for (std::size_t k = 1; k < picks.size(); ++k) {
      const BucketChoice &before = picks[k - 1], &b = picks[k];
      BucketStart& start = out[k];
      start.lo = sizes_[b.first - 1] + 1;
      std::int64_t hi = sizes_[b.first];
      if (before.candidate < 0 || b.candidate < 0 || start.lo == hi) continue;
      double at = 0;
      auto later_wins = [&](std::int64_t size) {
        at = measure(cands_[b.candidate], size);
        return at <= measure(cands_[before.candidate], size);
      };
      if (later_wins(start.lo)) {
        start.us = at;
        continue;
      }
      for (++start.lo; start.lo < hi;) {
        const std::int64_t mid = start.lo + (hi - start.lo) / 2;
        if (later_wins(mid)) hi = mid, start.us = at;
        else start.lo = mid + 1;
      }
    }
    return out;
  }

  /// The bucket record of choice `b` serving sizes start.lo..hi (lower_ends), after measuring its
  /// lowest size when that is no sample and lower_ends did not.
  void record_bucket(const BucketChoice& b, const BucketStart& start, std::int64_t hi) {
    if (b.candidate < 0) {
      summary_.unserved.push_back(sizes_[b.first]);
      return;
    }
    const RangeCandidate& c = cands_[b.candidate];
    const std::vector<double> best = best_of_range();
    RangeBucket bucket;
    bucket.lo = start.lo;
    bucket.hi = hi;
    bucket.candidate = c.ref;
    for (std::size_t t = b.first; t <= b.last; ++t)
      if (c.us[t] / best[t] >= bucket.worst_ratio)
        bucket.worst_ratio = c.us[t] / best[t], bucket.worst_size = sizes_[t], bucket.worst_us = c.us[t];
    if (bucket.lo != sizes_[b.first] && !std::isfinite(std::isnan(start.us) ? measure(c, bucket.lo) : start.us)) {
      summary_.unserved.push_back(bucket.lo);
      return;
    }
    TuneResult r;
    r.status = "ok";
    r.median_us = bucket.worst_us;
    r.times_us = {bucket.worst_us};
    r.size = bucket.worst_size;
    r.bucket_lo = bucket.lo;
    r.bucket_hi = bucket.hi;
    r.compile_seconds = c.binary.seconds;
    writer_.append(make_record(workload_, o_.tune.target, c.ref, r));
    for (std::size_t t = b.first; t <= b.last; ++t) summary_.points.push_back({sizes_[t], 0, c.us[t]});
    summary_.buckets.push_back(std::move(bucket));
  }

  const Compute& range_;
  const SearchSpace& space_;
  const RangeTuneOptions& o_;
  const std::vector<std::int64_t> sizes_;
  MeasurePool& gpus_;
  const MeasureAt& measure_at_;
  const std::vector<TuneRecord> log_;
  LogWriter writer_;
  const Workload workload_;
  const std::map<std::string, double> own_best_;  ///< The log's best times of each sample, by key.
  std::vector<int> own_;  ///< Per sample: its own tuning's fastest kernel among cands_ (-1: none).
  std::vector<RangeCandidate> cands_;
  std::vector<std::pair<std::size_t, std::size_t>> skipped_;  ///< (candidate, sample) left out at the time budget.
  RangeTuneSummary summary_;
};

/// The samples: those given, or range_sample_sizes(); the range's ends always among them, so that
/// the buckets cover it.
std::vector<std::int64_t> samples_of(const Compute& range, const std::vector<std::int64_t>& given) {
  std::set<std::int64_t> s(given.begin(), given.end());
  if (s.empty()) return range_sample_sizes(range.dynamic.lo, range.dynamic.hi);
  s.insert(range.dynamic.lo);
  s.insert(range.dynamic.hi);
  return {s.begin(), s.end()};
}

}  // namespace

RangeTuneSummary tune_range(const Compute& range, const std::vector<HwAbstraction>& hws, const RangeTuneOptions& o,
                            MeasurePool& gpus, const MeasureAt& measure_at) {
  const auto t0 = Clock::now();
  const std::string what = range.name + " (" + range.dynamic.param + "=" + std::to_string(range.dynamic.lo) + ".." +
                           std::to_string(range.dynamic.hi) + ")";
  if (!range.dynamic.active()) throw InternalError("tune_range of a compute of one shape");
  if (o.tune.log_path.empty())
    throw UserError(format_diagnostic(SourceLoc::whole(what), "tuning a range of sizes needs a log", "give --log"));
  // The range's own space: only kernels that take the size at run time have arms in it.
  const SearchSpace space(range, hws, Enumeration::kAll, o.tune.limits, o.tune.compute_capability);
  if (space.entries().empty())
    throw UserError(format_diagnostic(SourceLoc::whole(what), "no kernel takes '" + range.iters[range.dynamic.iter].name +
                                                                  "' at run time: " + space.empty_reason(),
                                      "tune the sizes one at a time"));
  const std::vector<std::int64_t> sizes = samples_of(range, o.sizes);
  std::optional<TemporaryDirectory> binaries;  // the samples' kernels, shared with the measuring across them
  RangeTuneOptions ro = o;
  if (ro.tune.compile_cache_dir.empty())
    ro.tune.compile_cache_dir = binaries.emplace("tmap_range", "the range's kernels").path();
  const ModelTuneSummary samples = tune_samples(range, hws, ro, sizes, gpus);
  const double tune_s = seconds_since(t0);
  RangeRun run(range, space, ro, sizes, gpus, measure_at);
  if (!run.collect())
    throw UserError(format_diagnostic(SourceLoc::whole(what), "no sample's fastest kernels take the size at run time",
                                      "tune with more trials, or the sizes one at a time"));
  const auto t1 = Clock::now();
  // The time budget is the whole range's: the samples took 80% of it, the rest bounds the
  // measuring at neighbouring samples.
  run.measure_samples(o.tune.time_budget_s > 0 ? t0 + std::chrono::duration_cast<Clock::duration>(
                                                          std::chrono::duration<double>(o.tune.time_budget_s))
                                               : Clock::time_point::max());
  run.choose();
  RangeTuneSummary s = std::move(run.summary());
  s.tune_s = tune_s;
  s.sample_trials = samples.measured;
  s.sample_setup_s = samples.setup_s;
  s.sample_finish_s = samples.finish_s;
  s.sample_finish_compile_s = samples.finish_compile_s;
  for (const ModelTaskResult& t : samples.tasks) s.sample_times.add_times(t.summary);
  s.cross_s = seconds_since(t1);
  s.wall_s = seconds_since(t0);
  return s;
}

Dispatch dispatch(const std::vector<TuneRecord>& records, const Compute& c, const std::string& arch) {
  Dispatch d;
  const std::string key = make_workload(c).key;
  for (const TuneRecord* b : range_buckets(records)) {
    if (b->target.arch != arch) continue;
    Compute range;
    try {
      range = compute_from_json(b->workload.compute, "the record of workload " + b->workload.key);
    } catch (const UserError&) {
      continue;  // regenerate() says why when the record is chosen; an unreadable one serves nothing
    }
    if (!range.dynamic.active() || range.iters.size() != c.iters.size()) continue;
    const std::int64_t size = c.iters[range.dynamic.iter].extent;
    const std::string span = range.dynamic.param + "=" + std::to_string(range.dynamic.lo) + ".." +
                             std::to_string(range.dynamic.hi);
    if (size < range.dynamic.lo || size > range.dynamic.hi) {
      // The same computation but for the varying extent: both cut to the range's largest size.
      Compute as_range = c;
      as_range.dynamic = range.dynamic;
      if (make_workload(compute_at(as_range, range.dynamic.hi)).key == make_workload(compute_at(range, range.dynamic.hi)).key)
        d.outside = span;
      continue;
    }
    if (size < b->result.bucket_lo || size > b->result.bucket_hi) continue;
    if (make_workload(compute_at(range, size)).key != key) continue;
    d.bucket = b;
    d.size = size;
    return d;
  }
  return d;
}

}  // namespace tmap
