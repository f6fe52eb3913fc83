// Tuning logs: one JSON record per line, appended as each result arrives.
//
// A record is self-contained: it holds the workload (the compute as tmap's IR document, its
// canonical statement, shapes and dtypes, and a stable key derived from them), the target it
// was measured on, the candidate (abstraction, layout, intrinsic shape, mapping as axis sets,
// schedule parameters) and the result. From a record alone the kernel can be regenerated.
//
// Schema (version 1), one object per line:
//   {"schema": 1, "recorded_at": "2026-11-22T10:00:00Z",
//    "workload": {"key": "9f2c...", "name": "conv2d", "statement": "Out[n, k, p, q] += ...",
//                 "params": {"N": 1, ...}, "tensors": [{"name": "I", "shape": [...], "dtype": "float16"}, ...],
//                 "flops": 2.3e8, "compute": {<to_json(Compute)>}},
//    "target": {"arch": "sm_90", "device": "NVIDIA H100 80GB HBM3", "driver": "13.0", "cuda": "13.0", "tmap": "0.1.0"},
//    "candidate": {"hw_abs": "wmma_fp16_fp32", "layout": "nnn", "shape": [16, 16, 16],
//                  "mapping": {"id": 7, "i": ["n", "p", "q"], "j": ["k"], "k": ["c", "r", "s"]},
//                  "params": {<to_json(ScheduleParams)>}},
//    "result": {"status": "ok", "measured": true, "median_us": 21.4, "times_us": [...], "rel_l2": 2e-7,
//               "estimated_us": 19.0, "compile_seconds": 0.31, "error": "..."}}
// "status" is one of status_name(MeasureStatus) or "unmeasured" (ranked by the model only).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tmap/ir/compute.h"
#include "tmap/schedule/schedule.h"

namespace tmap {

inline constexpr int kLogSchemaVersion = 1;
/// The largest log tmap reads: about 180,000 records.
inline constexpr std::uintmax_t kMaxLogBytes = std::uintmax_t{256} << 20;

/// What a workload is, independent of how it is computed.
struct Workload {
  std::string key;  ///< 16 hex digits of a 64-bit FNV-1a hash of the canonical description.
  nlohmann::json description;  ///< name, statement, params, tensors, flops (no key, no compute).
  nlohmann::json compute;      ///< to_json(Compute).
};

/// The canonical description and key of a compute: the statement with concrete indices and
/// every tensor's shape and dtype decide it; names of parameters or of the source do not.
Workload make_workload(const Compute& c);

/// Where a record was measured.
struct Target {
  std::string arch;    ///< "sm_90"
  std::string device;  ///< The GPU's name, empty when unmeasured.
  std::string driver, cuda, tmap;
  bool operator==(const Target&) const = default;
};

/// The candidate of a record, with the mapping as iterator names so that it does not depend on
/// the enumeration that produced it.
struct CandidateRef {
  std::string hw_abs, layout;
  std::array<std::int64_t, 3> shape{};
  int mapping_id = -1;
  std::array<std::vector<std::string>, 3> axes;  ///< Iterators fused into i, j, k.
  ScheduleParams params;
};

/// "wmma_fp16_fp32 nnn 16x16x16 map 7 {n, p, q}x{k}x{c, r, s}" (the schedule left out; "relayout" and
/// "groups packed by 4" name the views whose mappings they are).
std::string candidate_label(const CandidateRef& c);
/// What identifies a candidate within a workload: the mapping and the whole schedule.
std::string candidate_signature(const CandidateRef& c);

struct TuneResult {
  std::string status = "unmeasured";  ///< status_name(MeasureStatus), or "unmeasured".
  double median_us = 0;
  std::vector<double> times_us;
  double rel_l2 = 0;
  double estimated_us = 0;  ///< The cost model's estimate when the candidate was chosen.
  double compile_seconds = 0;
  std::string error;
  /// > 0: a confirmation, the candidate measured again at the end of tuning in this many rounds
  /// taken in turn with the other fastest candidates; median_us is the median of the rounds'
  /// medians. See best_records.
  int confirm_rounds = 0;
  /// The GPU it was measured on (of those visible to the tuner; -1: not measured on a GPU, or
  /// recorded before tmap said), and that GPU's UUID, which stays the same under any numbering.
  int gpu = -1;
  std::string gpu_uuid;
  /// A record of a range of sizes (its compute has a dynamic extent): the size the kernel ran
  /// at; a bucket record (tune_range's choice) also names the sizes [bucket_lo, bucket_hi] its
  /// kernel serves, and `size` is where it came closest to the loss allowed. 0: one shape.
  std::int64_t size = 0, bucket_lo = 0, bucket_hi = 0;
  bool bucket() const { return bucket_hi > 0; }
  bool ok() const { return status == "ok"; }
  bool measured() const { return status != "unmeasured"; }
};

struct TuneRecord {
  Workload workload;
  Target target;
  CandidateRef candidate;
  TuneResult result;
  std::string recorded_at;  ///< UTC, ISO 8601.
  double flops = 0;         ///< The workload's useful work (2 x multiply-adds).
};

nlohmann::json to_json(const TuneRecord& r);
/// Throws std::runtime_error naming the field when the document is not a record of a known
/// schema version. The workload's compute and description are moved out of `j`.
TuneRecord record_from_json(nlohmann::json j);

/// The current time as "2026-11-22T10:00:00Z".
std::string utc_now();

/// The record of one trial as the tuner and `tmap run --log` append it: recorded now, with the
/// workload's FLOPs.
TuneRecord make_record(const Workload& w, const Target& t, CandidateRef candidate, TuneResult result);

/// Appends records to a log file, one line each. Every line is written with one write() under
/// an exclusive flock on an O_APPEND descriptor, so two tuners appending to one log never
/// interleave lines, and what was appended survives the process.
class LogWriter {
 public:
  explicit LogWriter(const std::string& path);  ///< Creates the file and its directory.
  ~LogWriter();
  LogWriter(const LogWriter&) = delete;
  LogWriter& operator=(const LogWriter&) = delete;
  void append(const TuneRecord& r);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

struct LogContents {
  std::vector<TuneRecord> records;
  /// One per skipped line: "<file>:<line>: <why>".
  std::vector<std::string> warnings;
};

/// Reads a log; malformed, truncated or unknown-schema lines are skipped with a warning that
/// names the line. A missing file is an empty log.
LogContents read_log(const std::string& path);

/// The same for a log's text; `path` names it in the warnings. With `refuse_other_schemas`, a
/// record of another schema version is a UserError naming its line instead of a warning.
LogContents parse_log_text(const std::string& text, const std::string& path, bool refuse_other_schemas = false);

/// The bucket records in force: of each range of sizes, for each size, the last bucket record
/// that serves it (a later tuning of the range supersedes an earlier one), in file order.
std::vector<const TuneRecord*> range_buckets(const std::vector<TuneRecord>& records);

/// Whether `w` is a sample of a range (DynamicExtent::at): a step of tuning the range, whose
/// kernels serve through the range's buckets, not on their own.
bool is_range_sample(const Workload& w);

/// The best record of each workload, in first-seen order (records of a range, measured at one of
/// its sizes, are not ranked: see range_buckets; nor, unless `samples`, are the workloads of a
/// range's samples). A candidate measured more than once
/// counts by its latest record (a confirmation that failed rules it out), and confirmed
/// candidates come first: the best is the fastest correct confirmed one when there is one, and
/// the fastest correct measured one otherwise. The fastest of ~1000 single measurements is the
/// luckiest as much as the fastest: on the H100 the best of a run replayed 2-3% slower than
/// logged, up to 8%.
std::vector<const TuneRecord*> best_records(const std::vector<TuneRecord>& records, bool samples = false);
/// The model's choice for each workload without a correct measured record (none that
/// best_records returns, samples included): its unmeasured record of the lowest estimated time,
/// first seen first.
std::vector<const TuneRecord*> model_choices(const std::vector<TuneRecord>& records);
/// Each workload's best record: its best measured one (best_records, the samples of ranges
/// included: what each size's own tuning found, against which tmap_bench compares the bucket's
/// kernel), else the model's choice (model_choices), and each range's buckets in force
/// (range_buckets). What `tmap logs best`, `logs prune` and `logs merge --best` keep.
std::vector<const TuneRecord*> kept_records(const std::vector<TuneRecord>& records);
/// The order best_records ranks two correct records of a workload by: whether `a` beats `b`.
bool ranks_before(const TuneRecord& a, const TuneRecord& b);

struct MergedLogs {
  std::vector<TuneRecord> records;  ///< In order of first appearance.
  std::size_t read = 0;             ///< Records read from all the logs.
  std::size_t duplicates = 0;       ///< Records equal to one read before, dropped.
  std::vector<std::string> warnings;
};

/// The records of the logs at `paths` (`tmap logs merge`, e.g. of shards): each distinct record
/// once (a record copied into two logs, such as a prior log every shard resumed, is one), or with
/// `best_only` the best of each workload only (kept_records). A record of another schema version is a
/// UserError naming its file and line: two tmap versions' records are not comparable.
MergedLogs merge_logs(const std::vector<std::string>& paths, bool best_only);

}  // namespace tmap
