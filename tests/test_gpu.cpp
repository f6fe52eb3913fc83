// Generated kernels on the GPU, checked against the CPU reference on fresh random inputs with
// poisoned outputs. Tolerance: relative L2 error below 1e-2 for 16-bit floating inputs with
// wider accumulation, 1e-3 for tf32, 1e-9 for float64. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <tuple>

#include "test_util.h"
#include "tmap/frontend/op_library.h"
#include "tmap/runtime/device.h"
#include "tmap/runtime/kernel_runner.h"
#include "tmap/runtime/nvrtc_compiler.h"

namespace tmap {
namespace {

const std::vector<HwAbstraction>& shipped() {
  static const std::vector<HwAbstraction> all = load_hw_directory(std::string(TMAP_SOURCE_DIR) + "/hw_abstractions");
  return all;
}

// The CPU reference itself, against loops written out by hand (runs without a GPU).
TEST(Reference, MatchesHandWrittenConvolution) {
  Compute c = build_compute(builtin_op("conv2d"), parse_param_overrides({"C=3", "H=5", "W=6", "K=2", "stride=2", "dil=2", "pad=2"}));
  std::vector<std::vector<double>> t(3);
  for (int i = 0; i < 2; ++i) {
    t[i].resize(static_cast<std::size_t>(c.tensors[i].num_elements()));
    for (std::size_t e = 0; e < t[i].size(); ++e) t[i][e] = static_cast<double>((e * 7 + i * 3) % 11) - 5;
  }
  std::vector<double> ref = cpu_reference(c, t);
  const int C = 3, H = 5, W = 6, K = 2, R = 3, S = 3, stride = 2, dil = 2, pad = 2;
  const int P = (H + 2 * pad - dil * (R - 1) - 1) / stride + 1, Q = (W + 2 * pad - dil * (S - 1) - 1) / stride + 1;
  for (int k = 0; k < K; ++k)
    for (int p = 0; p < P; ++p)
      for (int q = 0; q < Q; ++q) {
        double acc = 0;
        for (int ch = 0; ch < C; ++ch)
          for (int r = 0; r < R; ++r)
            for (int s = 0; s < S; ++s) {
              int h = p * stride + r * dil - pad, w = q * stride + s * dil - pad;
              if (h < 0 || h >= H || w < 0 || w >= W) continue;
              acc += t[0][(ch * H + h) * W + w] * t[1][((k * C + ch) * R + r) * S + s];
            }
        EXPECT_EQ(ref[(k * P + p) * Q + q], acc) << k << " " << p << " " << q;
      }
}

bool have_gpu() { return !query_runtime().devices.empty(); }

struct GpuCase {
  std::string label;
  ImplicitGemm g;
  ScheduleParams p;
  double tolerance;
};

void run_cases(const std::vector<GpuCase>& cases) {
  int cc = query_runtime().devices.front().compute_capability;
  NvrtcCompiler compiler(cc);
  std::printf("%-58s %-10s %-10s %-9s\n", "candidate", "rel_l2", "time_us", "TFLOP/s");
  std::uint64_t seed = 1;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    ASSERT_TRUE(validate(c.g, c.p, DeviceLimits::for_arch(cc)).empty());
    KernelSource k = emit_wmma_kernel(c.g, c.p);
    std::printf("%-58s ", c.label.c_str());
    std::fflush(stdout);
    CompileResult compiled = compiler.compile(k.code, k.name);
    ASSERT_TRUE(compiled.ok) << compiled.log;
    KernelRun run = run_kernel(c.g, k, compiled.cubin, seed++);
    ASSERT_TRUE(run.ok) << run.error;
    EXPECT_LT(run.rel_l2, c.tolerance);
    std::fflush(stdout);
    std::printf("%-10.2e %-10.2f %-9.2f\n", run.rel_l2, run.median_us,
                c.g.flops() / (run.median_us * 1e-6) / 1e12);
  }
}

TEST(Gpu, Conv2dEveryAmosMappingTwoSchedules) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  // The mapping sweep uses a smaller layer than ResNet-18's (1,128,28,28,128): the CPU reference
  // is too slow for 70 runs of that size; the full layers wait for the GPU reference.
  static Compute c = build_compute(builtin_op("conv2d"), parse_param_overrides({"C=32", "H=14", "W=14", "K=48"}));
  const HwAbstraction& hw = find_hw(shipped(), "wmma_fp16_fp32");
  MatchReport r = match_compute(c, {hw}, Enumeration::kAmos);
  const Match& m = r.matches[0];  // nnn 16x16x16
  ASSERT_EQ(m.mappings.size(), 35u);
  std::vector<GpuCase> cases;
  for (const auto& map : m.mappings) {
    ImplicitGemm g = make_implicit_gemm(c, hw, m, map);
    ScheduleParams d = default_schedule(g, DeviceLimits::for_arch(90));
    ScheduleParams alt = d;
    alt.stages = 3 - d.stages;
    alt.block_k = 16;
    alt.block_m = d.warp_m;
    cases.push_back({"conv2d map " + std::to_string(map.id) + " default", g, d, 1e-2});
    cases.push_back({"conv2d map " + std::to_string(map.id) + " stages " + std::to_string(alt.stages), g, alt, 1e-2});
  }
  run_cases(cases);
}

TEST(Gpu, GemmShapesLayoutsAndDtypes) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  std::vector<GpuCase> cases;
  static std::vector<std::unique_ptr<Compute>> keep;
  auto add = [&](const std::string& label, Compute c, const std::string& hw_name, double tol, bool every_match) {
    keep.push_back(std::make_unique<Compute>(std::move(c)));
    const HwAbstraction& hw = find_hw(shipped(), hw_name);
    MatchReport r = match_compute(*keep.back(), {hw}, Enumeration::kAll);
    for (const auto& m : r.matches) {
      ImplicitGemm g = make_implicit_gemm(*keep.back(), hw, m, m.mappings.back());
      ScheduleParams p = default_schedule(g, DeviceLimits::for_arch(90));
      if (!validate(g, p, DeviceLimits::for_arch(90)).empty()) continue;  // alignment-invalid layouts
      cases.push_back({label + " " + m.layout + " " + m.shape.str(), g, p, tol});
      if (!every_match) break;
    }
  };
  add("gemm 17x33x65", build_compute(builtin_op("gemm"), parse_param_overrides({"M=17", "N=33", "K=65"})), "wmma_fp16_fp32", 1e-2, true);
  add("gemm_tt 256x384x200", build_compute(builtin_op("gemm_tt"), parse_param_overrides({"M=256", "N=384", "K=200"})), "wmma_fp16_fp32", 1e-2, false);
  add("gemm 512x512x256", build_compute(builtin_op("gemm"), parse_param_overrides({"M=512", "N=512", "K=256"})), "wmma_fp16_fp32", 1e-2, false);
  for (const auto& [hw, in, out, tol] : std::vector<std::tuple<std::string, std::string, std::string, double>>{
           {"wmma_fp16_fp16", "float16", "float16", 1e-2},
           {"wmma_bf16_fp32", "bfloat16", "float32", 1e-2},
           {"wmma_tf32_fp32", "float32", "float32", 1e-3},
           {"wmma_fp64_fp64", "float64", "float64", 1e-9}}) {
    for (const std::string op : {"gemm", "conv2d"}) {
      SourceText src("<" + op + ">", builtin_op_source(op));
      ComputeDef def = parse_compute_json(src, op);
      for (auto& t : def.tensors) t.dtype = *parse_dtype(t.name == "C" || t.name == "Out" ? out : in);
      std::vector<ParamOverride> sets = parse_param_overrides(op == "gemm" ? std::vector<std::string>{"M=96", "N=80", "K=72"}
                                                                           : std::vector<std::string>{"C=32", "K=48", "H=12", "W=10"});
      add(hw + " " + op, build_compute(def, sets), hw, tol, false);
    }
  }
  run_cases(cases);
}

}  // namespace
}  // namespace tmap
