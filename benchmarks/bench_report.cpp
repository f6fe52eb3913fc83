// Writing tmap_bench's rows: CSV and Markdown (bench_report.h).
#include "bench_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>
#include <sstream>

#include "tmap/runtime/kernel_runner.h"

namespace bench {
namespace {

/// The epilogues' cost over the rows that measured it: the median, and the largest among the
/// rows whose bare kernel takes 10 us or more (shorter ones are dominated by launch and tail).
std::string epilogue_cost_summary(const std::vector<Row>& rows) {
  std::vector<double> costs;
  const Row* worst = nullptr;
  int long_rows = 0;
  for (const auto& r : rows) {
    if (!r.epilogue_cost()) continue;
    costs.push_back(*r.epilogue_cost());
    if (*r.bare_us < 10) continue;
    ++long_rows;
    if (!worst || *r.epilogue_cost() > *worst->epilogue_cost()) worst = &r;
  }
  if (costs.empty()) return "";
  std::string s = "\nEpilogue cost (tmap's kernel against its own schedule without the epilogue, warm, " +
                  std::to_string(kAbRounds) + " alternating rounds in this run): median " +
                  percent_text(tmap::median_of(costs)) + " over " + std::to_string(costs.size()) + " workloads";
  if (worst)
    s += "; over the " + std::to_string(long_rows) + " of 10 us or more, at most " +
         percent_text(worst->epilogue_cost()) + " (" + worst->name + ")";
  return s + ".\n";
}

/// The sizes of ranges against their own sizes' tuning: within 5% (the tuner's default loss) at
/// how many, the worst, and those beyond.
std::string dispatch_summary(const std::vector<Row>& rows) {
  int n = 0, within = 0;
  const Row* worst = nullptr;
  std::string beyond;
  for (const auto& r : rows) {
    if (!r.dispatch_loss()) continue;
    ++n;
    if (*r.dispatch_loss() <= 0.05) ++within;
    else beyond += (beyond.empty() ? "" : ", ") + r.name + " " + percent_text(r.dispatch_loss());
    if (!worst || *r.dispatch_loss() > *worst->dispatch_loss()) worst = &r;
  }
  if (!n) return "";
  return "\nEach size's dispatched kernel against the kernel of its own tuning (the range's sample at that size; "
         "vs own size; warm, " + std::to_string(kAbRounds) +
         " alternating rounds in this run): within 5% at " + std::to_string(within) + " of " +
         std::to_string(n) + " sizes, at most " + percent_text(worst->dispatch_loss()) + " (" + worst->name + ")" +
         (beyond.empty() ? "" : "; beyond 5%: " + beyond) + ".\n";
}

/// Which of a row's baselines a speedup is against.
using Against = std::function<const std::optional<Baseline>&(const Row&)>;

/// Geometric mean of baseline / tmap, warm or `cold`, over the rows where tmap and the baseline
/// `against` picks both ran, and how many rows that was.
std::pair<double, int> geometric_mean(const std::vector<Row>& rows, const Against& against, bool cold) {
  double log_sum = 0;
  int n = 0;
  for (const auto& r : rows) {
    const std::optional<Baseline>& b = against(r);
    if (!r.tmap || !b) continue;
    log_sum += std::log(cold ? b->time.cold_us / r.tmap->cold_us : b->time.warm_us / r.tmap->warm_us);
    ++n;
  }
  return {n ? std::exp(log_sum / n) : 0, n};
}

/// The heading, the method and the table's header lines.
std::string markdown_head(const Report& rep) {
  const bool bandwidth = rep.copy_gbs > 0, extra_cols = rep.layout_cols || rep.fused;
  std::ostringstream md;
  md << "### " << rep.title << "\n\n"
     << rep.device << "; tmap " << (rep.commit.empty() ? "(commit unknown)" : rep.commit) << ", " << rep.date
     << ". Times in us: median of CUDA-graph replays of " << rep.graph_runs
     << " runs (warm L2); cold: the same with an L2 flush (a read of twice the L2's size) before each run, the "
        "flushes' own time subtracted. "
        "Speedup = baseline / tmap.\n\n"
     << (rep.layout_cols ? "cuDNN runs in tmap's layout (baseline, speedup) and in the other layout, on the same values "
                           "transposed (other layout us; vs fastest: against the faster of the two).\n\n"
                         : "")
     << (rep.fused ? "Fused epilogues, all in tmap's layout: the baseline is the fastest of cuDNN's fused calls (the "
                     "backend graph of the convolution and the epilogue's pointwise operations; "
                     "cudnnConvolutionBiasActivationForward), cuBLASLt's epilogues, and the unfused sequence (the "
                     "strongest bare contraction, then one elementwise kernel per operation through memory, as a "
                     "framework without fusion runs them: unfused us, vs unfused).\n\n"
                   : "")
     << (bandwidth ? "Memory-bound: tmap GB/s is every tensor's bytes moved once over tmap's cold time; the "
                     "device-to-device copy bandwidth measured in this run is " + fixed(rep.copy_gbs, 0) + " GB/s.\n\n"
                   : "")
     << "| workload | tmap us | baseline | baseline us | speedup | cold speedup |"
     << (rep.layout_cols ? " other layout us | vs fastest |" : rep.fused ? " unfused us | vs unfused | epilogue cost |" : "")
     << " tmap TFLOP/s | % of peak |" << (bandwidth ? " tmap GB/s (cold) | % of copy |" : "")
     << (rep.ranged ? " vs own size |" : "") << "\n"
     << "| --- | ---: | --- | ---: | ---: | ---: |" << (extra_cols ? " ---: | ---: |" : "") << (rep.fused ? " ---: |" : "")
     << " ---: | ---: |" << (bandwidth ? " ---: | ---: |" : "") << (rep.ranged ? " ---: |" : "") << "\n";
  return md.str();
}

/// One row of the table.
std::string markdown_row(const Row& r, const Report& rep) {
  const bool bandwidth = rep.copy_gbs > 0, extra_cols = rep.layout_cols || rep.fused;
  auto gbs = [](const Row& row) { return row.bytes / (row.tmap->cold_us * 1e-6) / 1e9; };
  std::ostringstream md;
  md << "| " << r.name << " | " << (r.tmap ? fixed(r.tmap->warm_us) : "-") << " | "
     << (r.baseline ? r.baseline->name : "-") << " | " << (r.baseline ? fixed(r.baseline->time.warm_us) : "-") << " | ";
  const std::optional<Baseline>& other = rep.fused ? r.unfused : r.other;
  const std::optional<Baseline>& vs = rep.fused ? r.unfused : r.fastest();
  const std::string other_cols =
      !extra_cols ? ""
                  : (other ? fixed(other->time.warm_us) : std::string("-")) + " | " +
                        (r.tmap && vs ? fixed(vs->time.warm_us / r.tmap->warm_us) : std::string("-")) + " | " +
                        (!rep.fused ? std::string() : percent_text(r.epilogue_cost()) + " | ");
  if (r.tmap && r.baseline)
    md << fixed(r.baseline->time.warm_us / r.tmap->warm_us) << " | " << fixed(r.baseline->time.cold_us / r.tmap->cold_us)
       << " | " << other_cols << fixed(r.gflop / r.tmap->warm_us * 1e3, 1) << " | "
       << fixed(r.gflop / r.tmap->warm_us * 1e3 / rep.peak_tflops * 100, 1) << " |";
  if (r.tmap && r.baseline && bandwidth) md << " " << fixed(gbs(r), 0) << " | " << fixed(gbs(r) / rep.copy_gbs * 100, 1) << " |";
  const std::string own_size = rep.ranged ? std::string(" ").append(percent_text(r.dispatch_loss())).append(" |") : "";
  if (r.tmap && r.baseline) md << own_size;
  if (!r.tmap || !r.baseline)
    md << "- | - | " << other_cols << "- | - |" << own_size << (r.note.empty() ? "" : " " + r.note);
  md << "\n";
  return md.str();
}

/// The line of geometric-mean speedups.
std::string geometric_means(const std::vector<Row>& rows, const Report& rep) {
  const Against baseline = [](const Row& r) -> const std::optional<Baseline>& { return r.baseline; };
  const Against fastest = [](const Row& r) -> const std::optional<Baseline>& { return r.fastest(); };
  const Against unfused = [](const Row& r) -> const std::optional<Baseline>& { return r.unfused; };
  const auto [geo, both] = geometric_mean(rows, baseline, false);
  return "\nGeometric-mean speedup over " + std::to_string(both) + " workloads: " + fixed(geo) +
         " (cold L2: " + fixed(geometric_mean(rows, baseline, true).first) + ")" +
         (rep.layout_cols ? "; against cuDNN's fastest layout: " + fixed(geometric_mean(rows, fastest, false).first)
                          : std::string()) +
         (rep.fused ? "; against the unfused sequence: " + fixed(geometric_mean(rows, unfused, false).first)
                    : std::string()) +
         ".\n";
}

/// The model's time: each workload's time times its count, over the workloads that have both.
std::string model_total(const std::vector<Row>& rows, const Report& rep) {
  double t = 0, base = 0, fastest = 0, unfused = 0;
  int n = 0, skipped = 0;
  for (const auto& r : rows) {
    if (!r.tmap || !r.baseline) {
      ++skipped;
      continue;
    }
    t += r.count * r.tmap->warm_us;
    base += r.count * r.baseline->time.warm_us;
    fastest += r.count * (r.fastest() ? r.fastest()->time.warm_us : r.baseline->time.warm_us);
    unfused += r.count * (r.unfused ? r.unfused->time.warm_us : r.baseline->time.warm_us);
    ++n;
  }
  auto speedup = [&](double b) { return fixed(t > 0 ? b / t : 0); };
  return "\nModel total (sum of count x time over " + std::to_string(n) + " workloads" +
         (skipped ? ", " + std::to_string(skipped) + " without both left out" : std::string()) + "): tmap " + fixed(t) +
         " us, cuDNN/cuBLAS " + fixed(base) + " us (speedup " + speedup(base) + ")" +
         (rep.layout_cols ? ", cuDNN in its fastest layout " + fixed(fastest) + " us (speedup " + speedup(fastest) + ")"
                          : std::string()) +
         (rep.fused ? ", the unfused sequence " + fixed(unfused) + " us (speedup " + speedup(unfused) + ")" : std::string()) +
         ".\n";
}

/// How many rows' notes say `note`.
int rows_noting(const std::vector<Row>& rows, const std::string& note) {
  return static_cast<int>(std::count_if(rows.begin(), rows.end(), [&](const Row& r) { return r.note.find(note) != std::string::npos; }));
}

}  // namespace

std::string transfer_note(Transfer t) {
  return t == Transfer::kOtherDtype        ? "schedule tuned for another output dtype"
         : t == Transfer::kWithoutEpilogue ? "schedule tuned without the epilogue"
                                           : "";
}


std::string csv_text(std::string s) {
  std::replace(s.begin(), s.end(), ',', ';');
  return s;
}

std::string utc_date() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

std::string fixed(double v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string percent_text(std::optional<double> fraction) {
  if (!fraction) return "-";
  std::string s = *fraction >= 0 ? "+" : "";
  s += fixed(*fraction * 100, 1);
  return s + "%";
}

void write_csv(std::ostream& csv, const std::vector<Row>& rows, const Report& report) {
  auto gbs = [](const Row& r) { return r.bytes / (r.tmap->cold_us * 1e-6) / 1e9; };
  csv << "workload,key,gflop,tmap_us,tmap_cold_us,tmap_tflops,baseline,baseline_us,baseline_cold_us,speedup,"
         "speedup_cold,pct_peak,tmap_rel_l2,baseline_vs_tmap_rel_l2,note,other_layout_baseline,other_layout_us,"
         "speedup_vs_fastest_layout,tmap_cold_gbs,pct_copy_bandwidth,unfused_baseline,unfused_us,speedup_vs_unfused,"
         "bare_us,epilogue_cost_pct,dispatched_ab_us,own_size_us,dispatch_loss_pct\n";
  for (const auto& r : rows) {
    csv << csv_text(r.name) << "," << r.workload_key << "," << r.gflop << ",";
    if (r.tmap) csv << r.tmap->warm_us << "," << r.tmap->cold_us << "," << r.gflop / r.tmap->warm_us * 1e3;
    else csv << ",,";
    csv << ",";
    if (r.baseline) csv << csv_text(r.baseline->name) << "," << r.baseline->time.warm_us << "," << r.baseline->time.cold_us;
    else csv << ",,";
    csv << ",";
    if (r.tmap && r.baseline)
      csv << r.baseline->time.warm_us / r.tmap->warm_us << "," << r.baseline->time.cold_us / r.tmap->cold_us << ","
          << r.gflop / r.tmap->warm_us * 1e3 / report.peak_tflops * 100;
    else csv << ",,";
    csv << "," << (r.tmap ? r.tmap_err : 0) << "," << (r.baseline ? r.baseline->err_tmap : 0) << "," << csv_text(r.note);
    if (r.other) csv << "," << csv_text(r.other->name) << "," << r.other->time.warm_us;
    else csv << ",,";
    csv << ",";
    if (r.tmap && r.fastest()) csv << r.fastest()->time.warm_us / r.tmap->warm_us;
    csv << ",";
    if (r.tmap && report.copy_gbs > 0) csv << gbs(r) << "," << gbs(r) / report.copy_gbs * 100;
    else csv << ",";
    if (r.unfused) csv << "," << csv_text(r.unfused->name) << "," << r.unfused->time.warm_us << ",";
    else csv << ",,,";
    if (r.tmap && r.unfused) csv << r.unfused->time.warm_us / r.tmap->warm_us;
    csv << ",";
    if (r.epilogue_cost()) csv << *r.bare_us << "," << *r.epilogue_cost() * 100;
    else csv << ",";
    csv << ",";
    if (r.dispatch_loss()) csv << *r.dispatched_ab_us << "," << *r.own_size_us << "," << *r.dispatch_loss() * 100;
    else csv << ",,";
    csv << "\n";
  }
}

std::string markdown(const std::vector<Row>& rows, const Report& rep) {
  std::string md = markdown_head(rep);
  for (const auto& r : rows) md += markdown_row(r, rep);
  md += geometric_means(rows, rep);
  if (rep.fused) md += epilogue_cost_summary(rows);
  if (rep.ranged) md += dispatch_summary(rows);
  if (rep.model) md += model_total(rows, rep);
  if (const int n = rows_noting(rows, transfer_note(Transfer::kOtherDtype)))
    md += std::to_string(n) + " of tmap's kernels replay schedules tuned for another output dtype (the log's " +
          rep.out_dtype + "-output record of their workload, where it holds one, was slower).\n";
  if (const int n = rows_noting(rows, transfer_note(Transfer::kWithoutEpilogue)))
    md += std::to_string(n) + " of tmap's kernels replay the schedule tuned for their contraction without the " +
          "epilogue (the log holds no record of the fused workload).\n";
  return md;
}

}  // namespace bench
