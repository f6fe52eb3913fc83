// What a row of tmap_bench holds (tmap's time, the baselines', the epilogue's cost) and how a
// table of rows is written: the CSV that make_results.sh reads by column name, and the Markdown
// page with the geometric means, the epilogue's cost and the model's total.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace bench {

/// Rounds of an A/B timing (each side warm, alternating, then each side's median): seven, so that
/// two slow rounds on either side leave the median alone; the epilogue's cost is a few percent.
constexpr int kAbRounds = 7;

struct Timing {
  double warm_us = 0, cold_us = 0;
};

/// The fastest correct baseline of a workload.
struct Baseline {
  std::string name;  ///< e.g. "cudnn IMPLICIT_PRECOMP_GEMM", "cublasLt algo 3", "cublasGemmEx"
  Timing time;
  double err_ref = 0, err_tmap = 0;  ///< Relative L2 against the reference and tmap's output.
  int tried = 0, wrong = 0;
};

/// Where a replayed schedule was tuned, when not for the workload itself.
enum class Transfer { kNone, kOtherDtype, kWithoutEpilogue };

std::string transfer_note(Transfer t);

struct Row {
  int count = 1;  ///< Runs per inference (workload tables).
  std::string name, workload_key;
  double gflop = 0;
  double bytes = 0;  ///< Every tensor read or written once: the least traffic of any kernel.
  std::optional<Timing> tmap;
  double tmap_err = 0;
  std::optional<Baseline> baseline;
  std::optional<Baseline> other;  ///< Convolutions: cuDNN in the other layout.
  /// A workload with an epilogue: the bare contraction's strongest baseline followed by one
  /// elementwise kernel per operation. `baseline` is then the faster of it and the fused calls.
  std::optional<Baseline> unfused;
  /// A workload with an epilogue: tmap's schedule without it, and tmap's kernel again, timed warm
  /// in kAbRounds alternating rounds (medians): what the epilogue costs, A/B in the same run.
  std::optional<double> bare_us, fused_ab_us;
  /// A size of a range that was one of its samples: the kernel of its bucket and the kernel of the
  /// sample's own tuning, timed warm in kAbRounds alternating rounds (medians): what dispatching costs there.
  std::optional<double> dispatched_ab_us, own_size_us;
  std::string note;

  /// The epilogue's cost as a fraction of the bare kernel's time (0.04: 4% slower).
  std::optional<double> epilogue_cost() const {
    if (!bare_us || !fused_ab_us) return std::nullopt;
    return *fused_ab_us / *bare_us - 1;
  }

  /// The dispatched kernel's time over that of the size's own tuning, less one (0.04: 4% slower).
  std::optional<double> dispatch_loss() const {
    if (!dispatched_ab_us || !own_size_us) return std::nullopt;
    return *dispatched_ab_us / *own_size_us - 1;
  }

  /// The faster of the two layouts' baselines.
  const std::optional<Baseline>& fastest() const {
    return other && (!baseline || other->time.warm_us < baseline->time.warm_us) ? other : baseline;
  }
};

/// A CSV field: its commas become semicolons, so that readers (make_results.sh's awk among them)
/// split rows on commas alone.
std::string csv_text(std::string s);
/// Today's date in UTC, as YYYY-MM-DD.
std::string utc_date();
std::string fixed(double v, int digits = 2);
/// "+4.1%", or "-" for none.
std::string percent_text(std::optional<double> fraction);

/// What a results table says besides its rows.
struct Report {
  std::string title;   ///< The heading, after "### ".
  std::string device;  ///< "Device NAME, driver X, CUDA Y, cuDNN Z, cuBLAS W".
  std::string commit;  ///< The tmap commit measured; empty when unknown.
  std::string date;    ///< YYYY-MM-DD.
  int graph_runs = 20;
  double peak_tflops = 0;
  double copy_gbs = 0;       ///< Memory-bound tables: the copy bandwidth of this run; 0: no such columns.
  bool layout_cols = false;  ///< Convolutions: cuDNN's other layout.
  bool fused = false;        ///< Fused workloads: the unfused sequence and the epilogue's cost.
  bool model = false;        ///< A workload table: the model's total.
  bool ranged = false;       ///< Sizes of ranges: each against its own size's tuning.
  std::string out_dtype;     ///< The output's dtype, named where schedules of another one are replayed.
};

/// The rows as CSV, with a header line naming the columns.
void write_csv(std::ostream& csv, const std::vector<Row>& rows, const Report& report);
/// The rows as a Markdown page: heading, method, table, geometric means and totals.
std::string markdown(const std::vector<Row>& rows, const Report& report);

}  // namespace bench
