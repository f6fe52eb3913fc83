// tmap_bench's pages (benchmarks/bench_report.h): the Markdown lines make_results.sh reads, the
// epilogue's cost, the model's total and the CSV's columns, from rows made here (no GPU).

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "bench_report.h"

namespace bench {
namespace {

Baseline baseline(const std::string& name, double warm, double cold) {
  Baseline b;
  b.name = name;
  b.time = {warm, cold};
  return b;
}

/// A row of `gflop` that tmap ran in `tmap` and `base` in `baseline`.
Row timed_row(const std::string& name, double gflop, Timing tmap, const Baseline& base) {
  Row r;
  r.name = name;
  r.gflop = gflop;
  r.tmap = tmap;
  r.baseline = base;
  return r;
}

/// Two fused rows timed against cuDNN and the unfused sequence, one of them with the epilogue's
/// A/B, and a row that has no kernel of tmap's.
std::vector<Row> fused_rows() {
  Row a = timed_row("Conv7", 3.7, Timing{10, 12}, baseline("cudnn fused", 11, 13.2));
  a.count = 2;
  a.unfused = baseline("cudnn + 2 elementwise", 20, 24);
  a.bare_us = 9.5;
  a.fused_ab_us = 10.45;
  Row b = a;
  b.name = "Conv12";
  b.count = 1;
  b.tmap = Timing{5, 6};
  b.baseline = baseline("cudnn fused", 4, 4.8);
  b.bare_us.reset();
  Row c;
  c.name = "Conv16";
  c.note = "not in the log (tune it first)";
  return {a, b, c};
}

Report fused_report() {
  Report r;
  r.title = "ResNet-50 fused (workload table), float16 output";
  r.device = "Device GPU, driver 13.0, CUDA 13.0, cuDNN 9.14.0, cuBLAS 13";
  r.commit = "abc1234";
  r.date = "2026-11-28";
  r.peak_tflops = 989.4;
  r.fused = true;
  r.model = true;
  return r;
}

TEST(BenchReport, MarkdownHasTheLinesMakeResultsReads) {
  const std::string md = markdown(fused_rows(), fused_report());
  EXPECT_EQ(md.rfind("### ResNet-50 fused (workload table), float16 output\n\n", 0), 0u) << md;
  EXPECT_NE(md.find("Device GPU, driver 13.0, CUDA 13.0, cuDNN 9.14.0, cuBLAS 13; tmap abc1234, 2026-11-28. Times in us"),
            std::string::npos);
  EXPECT_NE(md.find("| workload | tmap us | baseline | baseline us | speedup | cold speedup | unfused us | vs unfused | "
                    "epilogue cost | tmap TFLOP/s | % of peak |\n| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | "
                    "---: | ---: | ---: |\n"),
            std::string::npos);
  EXPECT_NE(md.find("| Conv7 | 10.00 | cudnn fused | 11.00 | 1.10 | 1.10 | 20.00 | 2.00 | +10.0% | 370.0 | 37.4 |\n"),
            std::string::npos) << md;
  EXPECT_NE(md.find("| Conv12 | 5.00 | cudnn fused | 4.00 | 0.80 | 0.80 | 20.00 | 4.00 | - |"), std::string::npos);
  EXPECT_NE(md.find("| Conv16 | - | - | - | - | - | - | - | - | - | - | not in the log (tune it first)\n"),
            std::string::npos) << md;
  // Geometric means: sqrt(1.1 * 0.8) = 0.938; against the unfused sequence sqrt(2 * 4) = 2.83.
  EXPECT_NE(md.find("\nGeometric-mean speedup over 2 workloads: 0.94 (cold L2: 0.94); against the unfused sequence: 2.83.\n"),
            std::string::npos) << md;
  // Only Conv7 has both sides of the A/B, and its bare kernel is under 10 us.
  EXPECT_NE(md.find("\nEpilogue cost (tmap's kernel against its own schedule without the epilogue, warm, 7 "
                    "alternating rounds in this run): median +10.0% over 1 workloads.\n"),
            std::string::npos) << md;
  // Model total: tmap 2 x 10 + 5, the baselines 2 x 11 + 4 and 2 x 20 + 20; Conv16 left out.
  EXPECT_NE(md.find("\nModel total (sum of count x time over 2 workloads, 1 without both left out): tmap 25.00 us, "
                    "cuDNN/cuBLAS 26.00 us (speedup 1.04), the unfused sequence 60.00 us (speedup 2.40).\n"),
            std::string::npos) << md;
}

TEST(BenchReport, TheEpilogueCostIsSummedOverLongRowsAndWrittenToTheCsv) {
  std::vector<Row> rows = fused_rows();
  rows[1].bare_us = 12.0;  // a long row: 5 us fused against 12 bare, -58.3%
  rows[1].fused_ab_us = 5.0;
  const std::string md = markdown(rows, fused_report());
  // The upper median of two, as tmap's medians; the largest cost among rows of 10 us or more.
  EXPECT_NE(md.find("median +10.0% over 2 workloads; over the 1 of 10 us or more, at most -58.3% (Conv12).\n"),
            std::string::npos) << md;
  std::ostringstream csv;
  write_csv(csv, rows, fused_report());
  std::istringstream lines(csv.str());
  std::string header, first;
  std::getline(lines, header);
  std::getline(lines, first);
  EXPECT_EQ(header.substr(header.rfind(",unfused_us,")),
            ",unfused_us,speedup_vs_unfused,bare_us,epilogue_cost_pct,dispatched_ab_us,own_size_us,dispatch_loss_pct");
  EXPECT_EQ(first.rfind("Conv7,,3.7,10,12,370,cudnn fused,11,13.2,1.1,1.1,", 0), 0u) << first;
  EXPECT_EQ(first.substr(first.rfind(",cudnn + 2 elementwise,")), ",cudnn + 2 elementwise,20,2,9.5,10,,,");
}

TEST(BenchReport, LayoutsAndBandwidthTakeTheirColumns) {
  Row r = timed_row("l1", 1, Timing{2, 4}, baseline("cudnn nchw", 3, 4));
  r.bytes = 2e6;
  r.other = baseline("cudnn nhwc", 1, 2);
  Report rep = fused_report();
  rep.fused = rep.model = false;
  rep.layout_cols = true;
  rep.copy_gbs = 1000;
  const std::string md = markdown({r}, rep);
  // 2 MB over 4 us: 500 GB/s, half the copy bandwidth.
  EXPECT_NE(md.find("| l1 | 2.00 | cudnn nchw | 3.00 | 1.50 | 1.00 | 1.00 | 0.50 | 500.0 | 50.5 | 500 | 50.0 |\n"),
            std::string::npos) << md;
  EXPECT_NE(md.find("workloads: 1.50 (cold L2: 1.00); against cuDNN's fastest layout: 0.50.\n"), std::string::npos) << md;
  EXPECT_EQ(md.find("Model total"), std::string::npos);
  EXPECT_EQ(md.find("Epilogue cost"), std::string::npos);
}

TEST(BenchReport, SizesOfARangeAreComparedWithTheirOwnTuning) {
  // m1: its bucket's kernel 4% slower than its own size's; m2: 10% slower; m3: no sample there.
  Row m1 = timed_row("qkv_m1", 0.05, Timing{10, 12}, baseline("cublasGemmEx", 11, 12));
  m1.dispatched_ab_us = 10.4;
  m1.own_size_us = 10;
  Row m2 = m1;
  m2.name = "qkv_m2";
  m2.dispatched_ab_us = 11;
  Row m3 = timed_row("qkv_m3", 0.05, Timing{10, 12}, baseline("cublasGemmEx", 11, 12));
  Row m4;
  m4.name = "qkv_m4";
  m4.note = "not in the log (tune it first)";
  Report rep = fused_report();
  rep.fused = false;
  rep.ranged = true;
  const std::string md = markdown({m1, m2, m3, m4}, rep);
  EXPECT_NE(md.find(" tmap TFLOP/s | % of peak | vs own size |\n| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | "
                    "---: |\n"),
            std::string::npos) << md;
  EXPECT_NE(md.find("| qkv_m1 | 10.00 | cublasGemmEx | 11.00 | 1.10 | 1.00 | 5.0 | 0.5 | +4.0% |\n"), std::string::npos) << md;
  EXPECT_NE(md.find("| qkv_m3 | 10.00 | cublasGemmEx | 11.00 | 1.10 | 1.00 | 5.0 | 0.5 | - |\n"), std::string::npos) << md;
  EXPECT_NE(md.find("| qkv_m4 | - | - | - | - | - | - | - | - | not in the log (tune it first)\n"), std::string::npos) << md;
  EXPECT_NE(md.find("vs own size; warm, 7 alternating rounds in this run): within 5% at 1 of 2 sizes, at most "
                    "+10.0% (qkv_m2); beyond 5%: qkv_m2 +10.0%.\n"),
            std::string::npos) << md;
  std::ostringstream csv;
  write_csv(csv, {m2}, rep);
  EXPECT_NE(csv.str().find(",11,10,10\n"), std::string::npos) << csv.str();
}

}  // namespace
}  // namespace bench
