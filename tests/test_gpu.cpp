// Generated kernels on the GPU, checked against the reference kernel (itself checked against the
// CPU reference) on fresh random inputs with poisoned outputs. Tolerance: relative L2 error
// below 1e-2 for 16-bit floating inputs, 1e-3 for tf32, 1e-9 for float64. Skipped without a GPU.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>

#include <nlohmann/json.hpp>
#include <memory>
#include <thread>
#include <tuple>
#include <utility>

#include <cuda_runtime_api.h>

#include "gpu_cases.h"
#include "record_mutations.h"
#include "test_util.h"
#include "tmap/frontend/op_library.h"
#include "tmap/runtime/device.h"
#include "tmap/runtime/kernel_runner.h"
#include "tmap/runtime/nvrtc_compiler.h"
#include "tmap/tune/tuner.h"

namespace tmap {
namespace {

using testing::shipped;
using testing::typed_op;

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

using testing::have_gpu;

using testing::device_cc;

// The GPU reference kernel agrees with the CPU reference (small shapes, every op and dtype).
TEST(Gpu, ReferenceKernelMatchesCpuReference) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  NvrtcCompiler compiler(device_cc());
  const std::pair<std::string, std::vector<std::string>> cases[] = {
      {"gemm", {"M=33", "N=17", "K=40"}},
      {"gemm_nt", {"M=5", "N=33", "K=70"}},  // a warp a point (its lanes split K)
      {"gemv", {"M=70", "K=33"}},
      {"batched_gemm", {"BATCH=3", "M=20", "N=12", "K=9"}},
      {"conv1d", {"W=50", "C=5", "K=7", "stride=2"}},
      {"conv2d", {"N=2", "C=8", "H=9", "W=7", "K=6", "groups=2", "dil=2", "pad=2"}},
      {"conv2d_nhwc", {"N=2", "C=6", "H=8", "W=8", "K=4", "stride=2"}},
      {"depthwise_conv2d", {"C=5", "H=9", "W=9"}},
      {"conv3d", {"C=3", "D=5", "H=6", "W=6", "K=4"}},
  };
  for (const auto& [op, sets] : cases) {
    SCOPED_TRACE(op);
    Compute c = build_compute(builtin_op(op), parse_param_overrides(sets));
    Workspace ws(c, 7);
    std::vector<double> gpu = gpu_reference(ws, compiler);
    std::vector<double> cpu = cpu_reference(c, ws.host_values());
    // The GPU sums in double in another order: agreement to rounding of the float32 output.
    EXPECT_LT(relative_l2(gpu, cpu), 1e-6);
  }
  // Integer inputs, int4 packed two to a byte: exact.
  for (const std::string in_t : {"int8", "int4"}) {
    SCOPED_TRACE(in_t);
    SourceText src("<conv2d>", builtin_op_source("conv2d"));
    ComputeDef def = parse_compute_json(src, "conv2d");
    for (auto& t : def.tensors) t.dtype = *parse_dtype(t.name == "Out" ? "int32" : in_t);
    Compute c = build_compute(def, parse_param_overrides({"N=2", "C=5", "H=7", "W=9", "K=3", "pad=1"}));
    Workspace ws(c, 11);
    std::vector<double> cpu = cpu_reference(c, ws.host_values());
    EXPECT_EQ(relative_l2(gpu_reference(ws, compiler), cpu), 0.0);
  }
  for (const std::string in_t : {"int8", "int4"}) {  // summed by a warp
    SCOPED_TRACE(in_t + " gemm_nt");
    const Compute c = typed_op("gemm_nt", in_t, "int32", {"M=3", "N=9", "K=100"});
    Workspace ws(c, 12);
    EXPECT_EQ(relative_l2(gpu_reference(ws, compiler), cpu_reference(c, ws.host_values())), 0.0);
  }
}

void expect_same_inputs(const Compute& c, const Workspace& a, const Workspace& b) {
  for (const Access& in : c.inputs) {
    const Tensor& t = c.tensor_of(in);
    const std::size_t bytes = (static_cast<std::size_t>(t.num_elements()) * dtype_bits(t.dtype) + 7) / 8;
    std::vector<unsigned char> x(bytes), y(bytes);
    ASSERT_EQ(cudaMemcpy(x.data(), a.device(in.tensor), bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(y.data(), b.device(in.tensor), bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_TRUE(x == y) << t.name << " (" << dtype_name(t.dtype) << ") differs";
  }
}

// A workspace that drops its host values (as the measuring worker's do, drawing them on the GPU)
// holds the same inputs as one that keeps them (drawn on the host): the same bytes and the same
// reference output, for every input dtype.
TEST(Gpu, WorkspacesDrawTheSameInputsWhetherTheyKeepTheHostValuesOrNot) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  NvrtcCompiler compiler(device_cc());
  const std::pair<const char*, const char*> types[] = {{"float16", "float32"},     {"bfloat16", "float32"},
                                                       {"float32", "float32"},     {"float64", "float64"},
                                                       {"int8", "int32"},          {"int4", "int32"},
                                                       {"float8_e4m3", "float32"}, {"float8_e5m2", "float32"}};
  for (const auto& [in_t, out_t] : types) {
    SCOPED_TRACE(in_t);
    Compute c = typed_op("gemm", in_t, out_t, {"M=33", "N=17", "K=40"});
    Workspace kept(c, 9), dropped(c, 9, HostValues::kDrop);
    EXPECT_FALSE(kept.host_values()[c.inputs[0].tensor].empty());
    EXPECT_TRUE(dropped.host_values()[c.inputs[0].tensor].empty());
    EXPECT_EQ(dropped.device_bytes(), kept.device_bytes());
    expect_same_inputs(c, kept, dropped);
    const std::vector<double> expected = gpu_reference(kept, compiler);
    EXPECT_EQ(gpu_reference(dropped, compiler), expected);
    // And they are the values drawn: the reference of the kept values on the CPU.
    EXPECT_LT(relative_l2(expected, cpu_reference(c, kept.host_values())), 1e-6);
  }
  // Inputs larger than one pass of the drawing kernel's grid.
  const Compute large = typed_op("gemm", "bfloat16", "float32", {"M=1024", "N=1100", "K=3000"});
  Workspace kept(large, 5), dropped(large, 5, HostValues::kDrop);
  expect_same_inputs(large, kept, dropped);
}

// The output check the tuner uses (elements compared as they are in the output's dtype) gives
// relative_l2 of the converted output, for every output dtype, and infinity on a poisoned one:
// on the host, and on the GPU against a reference kept there (keep_reference), at a size below
// the summing kernel's grid and at one that loops over it.
TEST(Gpu, OutputErrorMatchesRelativeL2OfTheConvertedOutput) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  NvrtcCompiler compiler(device_cc());
  const std::pair<const char*, const char*> types[] = {
      {"float16", "float16"}, {"bfloat16", "bfloat16"}, {"float16", "float32"}, {"float64", "float64"}, {"int8", "int32"}};
  for (const char* m : {"M=33", "M=2100"})
    for (const auto& [in_t, out_t] : types)
      for (const bool on_gpu : {false, true}) {
        SCOPED_TRACE(std::string(out_t) + " " + m + (on_gpu ? " on the GPU" : " on the host"));
        Compute c = typed_op("gemm", in_t, out_t, {m, "N=1017", "K=40"});
        Workspace ws(c, 5);
        const std::vector<double> out = gpu_reference(ws, compiler);  // the output now holds it
        std::vector<double> other(out.size());
        for (std::size_t i = 0; i < out.size(); ++i) other[i] = out[i] * (1 + 0.01 * std::sin(double(i))) + 0.25;
        if (on_gpu) ws.keep_reference(other);
        const double expected = relative_l2(out, other);
        EXPECT_GT(expected, 0);
        EXPECT_NEAR(ws.output_error(other), expected, 1e-12 * expected);
        if (!on_gpu) EXPECT_EQ(ws.output_error(out), 0.0);
        EXPECT_THROW(ws.output_error(std::vector<double>(out.size() + 1)), std::exception);
        ws.poison_output();  // NaN for floats, -1 for integers
        if (std::string(out_t) == "int32")
          EXPECT_NEAR(ws.output_error(other), relative_l2(std::vector<double>(out.size(), -1.0), other), 1e-12);
        else
          EXPECT_EQ(ws.output_error(other), INFINITY);
      }
}

// time_launches' graph replays time the runs themselves: a kernel that spins for 20 us by the
// GPU's global timer (and writes how long it spun) is timed at its own duration, whether or
// not the host is slow to submit the graph.
TEST(Gpu, GraphTimingIsTheKernelsOwnDuration) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  NvrtcCompiler compiler(device_cc());
  const std::string code = R"(
extern "C" __global__ void spin(unsigned long long ns, unsigned long long* took) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); while (t - t0 < ns);
  *took = t - t0;
})";
  CompileResult bin = compiler.compile(code, "spin");
  ASSERT_TRUE(bin.ok) << bin.log;
  cudaLibrary_t lib = nullptr;
  cudaKernel_t kernel = nullptr;
  ASSERT_EQ(cudaLibraryLoadData(&lib, bin.cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0), cudaSuccess);
  ASSERT_EQ(cudaLibraryGetKernel(&kernel, lib, "spin"), cudaSuccess);
  void* took = nullptr;
  ASSERT_EQ(cudaMalloc(&took, sizeof(unsigned long long)), cudaSuccess);
  unsigned long long ns = 20000;
  auto launch = [&](void* stream) {
    void* args[] = {&ns, &took};
    const cudaError_t e = cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(1), dim3(32), args, 0,
                                           static_cast<cudaStream_t>(stream));
    return static_cast<int>(e);
  };
  TimingOptions t;
  t.warmup = 1;
  t.min_repeats = 7;
  t.min_total_ms = 0;
  t.graph_runs = 10;
  const double quiet = median_of(time_launches(launch, t));
  // The same with the host busy on every core while it submits.
  std::atomic<bool> stop{false};
  std::vector<std::thread> hogs;
  for (unsigned i = 0; i < std::max(2u, std::thread::hardware_concurrency()); ++i)
    hogs.emplace_back([&] {
      volatile double x = 1;
      while (!stop) x = x * 1.0000001 + 1e-9;
    });
  const double busy = median_of(time_launches(launch, t));
  stop = true;
  for (auto& h : hogs) h.join();
  unsigned long long spun = 0;
  ASSERT_EQ(cudaMemcpy(&spun, took, sizeof(spun), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(took);
  cudaLibraryUnload(lib);
  std::printf("20 us spin: %.2f us per run (quiet host), %.2f us (busy host); the kernel spun %.2f us\n", quiet, busy,
              spun / 1e3);
  EXPECT_GE(spun, ns);
  for (double us : {quiet, busy}) {
    EXPECT_GE(us, ns / 1e3 * 0.99);
    EXPECT_LT(us, ns / 1e3 + 3) << "more than the kernel's own time and a launch gap per run";
  }
}

using testing::GpuCase;
using testing::run_cases;

TEST(Gpu, Conv2dEveryAmosMappingTwoSchedules) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  Compute c = build_compute(builtin_op("conv2d"));  // (1,128,28,28,128,3,3,1,1,1)
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
    alt.unroll = 0;
    alt.raster = 3;  // 28 * 28 / 32 rows of tiles: the last group is partial
    cases.push_back({"conv2d map " + std::to_string(map.id) + " default", g, d, 1e-2});
    cases.push_back({"conv2d map " + std::to_string(map.id) + " stages " + std::to_string(alt.stages) + " raster 3",
                     g, alt, 1e-2});
  }
  run_cases(c, cases, 1);
}

/// The mapping that fuses every candidate of each axis (the classic implicit GEMM).
GpuCase full_mapping(const Compute& c, const std::string& hw_name, const std::string& label, double tol,
                     std::size_t match_index = 0) {
  const HwAbstraction& hw = find_hw(shipped(), hw_name);
  static std::vector<MatchReport> keep;
  keep.push_back(match_compute(c, {hw}, Enumeration::kAll));
  const Match& m = keep.back().matches.at(match_index);
  ImplicitGemm g = make_implicit_gemm(c, hw, m, m.mappings.back());
  return {label + " " + m.layout + " " + m.shape.str(), g, default_schedule(g, DeviceLimits::for_arch(90)), tol};
}

TEST(Gpu, ResNet18LayersDefaultSchedule) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  std::ifstream in(std::string(TMAP_SOURCE_DIR) + "/benchmarks/workloads/resnet18_conv2d.json");
  nlohmann::json table = nlohmann::json::parse(in);
  std::uint64_t seed = 100;
  for (int batch : {1, 16})
    for (const std::string op : {"conv2d", "conv2d_nhwc"})
      for (const auto& layer : table["layers"]) {
        std::vector<std::string> sets = {"N=" + std::to_string(batch)};
        for (const char* key : {"C", "H", "W", "K", "R", "S", "stride", "pad"})
          sets.push_back(std::string(key) + "=" + std::to_string(layer[key].get<int>()));
        Compute c = build_compute(builtin_op(op), parse_param_overrides(sets));
        std::string label = layer["name"].get<std::string>() + " b" + std::to_string(batch) + " " + op;
        GpuCase gc = full_mapping(c, "wmma_fp16_fp32", label, 1e-2);
        // The default schedule for this GPU: it splits K when the tiles leave SMs idle.
        DeviceLimits limits = DeviceLimits::for_arch(device_cc());
        limits.sm_count = query_runtime().devices.front().sm_count;
        gc.p = default_schedule(gc.g, limits);
        gc.label += " split_k " + std::to_string(gc.p.split_k);
        run_cases(c, {gc}, seed++);
      }
}

TEST(Gpu, SplitKIsCorrect) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  auto with_split = [](GpuCase gc, int split) {
    gc.p.split_k = split;
    gc.label += " split_k " + std::to_string(split);
    return gc;
  };
  std::uint64_t seed = 300;
  {
    Compute c = build_compute(builtin_op("gemm"), parse_param_overrides({"M=17", "N=33", "K=65"}));
    GpuCase base = full_mapping(c, "wmma_fp16_fp32", "gemm 17x33x65", 1e-2);
    run_cases(c, {with_split(base, 2), with_split(base, 3)}, seed++);
  }
  {
    Compute c = build_compute(builtin_op("conv2d"));  // ResNet-18 layer 5
    GpuCase full = full_mapping(c, "wmma_fp16_fp32", "conv2d", 1e-2);
    // Mapping 0 fuses only c into k: r and s are serial loops, split across blocks too.
    const HwAbstraction& hw = find_hw(shipped(), "wmma_fp16_fp32");
    static MatchReport r = match_compute(c, {hw}, Enumeration::kAll);
    ImplicitGemm serial = make_implicit_gemm(c, hw, r.matches[0], r.matches[0].mappings[0]);
    GpuCase serial_case{"conv2d mapping 0 (serial r, s)", serial, default_schedule(serial, DeviceLimits::for_arch(90)), 1e-2};
    run_cases(c, {with_split(full, 4), with_split(full, 36), with_split(serial_case, 5)}, seed++);
  }
  for (const auto& [hw, in_t, out_t, tol] : std::vector<std::tuple<std::string, std::string, std::string, double>>{
           {"wmma_fp16_fp16", "float16", "float16", 1e-2}, {"wmma_fp64_fp64", "float64", "float64", 1e-9}}) {
    SourceText src("<gemm>", builtin_op_source("gemm"));
    ComputeDef def = parse_compute_json(src, "gemm");
    for (auto& t : def.tensors) t.dtype = *parse_dtype(t.name == "C" ? out_t : in_t);
    Compute c = build_compute(def, parse_param_overrides({"M=200", "N=100", "K=300"}));
    run_cases(c, {with_split(full_mapping(c, hw, hw + " gemm", tol), 3)}, seed++);
  }
}


/// Variants of one case's schedule: each entry changes some parameters; invalid ones are skipped
/// (and counted, so a typo cannot silently skip them all).
std::vector<GpuCase> variants(const GpuCase& base,
                              const std::vector<std::pair<std::string, std::function<void(ScheduleParams&)>>>& edits) {
  std::vector<GpuCase> out = {base};
  for (const auto& [label, edit] : edits) {
    GpuCase gc = base;
    edit(gc.p);
    gc.label += " " + label;
    // Some edits do not apply everywhere (cp.async stages where an operand has no vectors).
    const auto issues = validate(gc.g, gc.p, DeviceLimits::for_arch(device_cc()));
    if (issues.empty()) out.push_back(gc);
    else std::printf("%-60s skipped: %s\n", gc.label.c_str(), std::string(message(issues.front().error)).c_str());
  }
  EXPECT_GE(out.size(), edits.size() / 2 + 1) << base.label << ": most variants should apply";
  return out;
}

/// Edits that split the reduction `splits` ways, the splits summed as setting `summer` to 1 says
/// (ScheduleParams::cluster or split_reduce), labelled "WHAT of SPLITS".
std::vector<std::pair<std::string, std::function<void(ScheduleParams&)>>> split_edits(
    const std::string& what, std::initializer_list<int> splits, int ScheduleParams::*summer) {
  std::vector<std::pair<std::string, std::function<void(ScheduleParams&)>>> edits;
  for (int split : splits)
    edits.push_back({what + " of " + std::to_string(split), [split, summer](ScheduleParams& p) {
                       p.split_k = split;
                       p.*summer = 1;
                     }});
  return edits;
}

// Split-K summed in a thread block cluster (sm_90): every family that can, 2 to 8 splits, tails in
// M, N and K, float16 (vector epilogue) and float32 outputs, a batch (clusters along the grid's
// z), serial filter taps split across the cluster, and int8 (exact). (A decode-shaped GEMV with
// each way of summing its splits: SplitKSummedByTheTilesLastBlockIsCorrect.)
TEST(Gpu, SplitKSummedInAClusterIsCorrect) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  if (device_cc() < 90) GTEST_SKIP() << "thread block clusters need sm_90, the GPU is sm_" << device_cc();
  auto clustered = [](std::initializer_list<int> splits) { return split_edits("cluster", splits, &ScheduleParams::cluster); };
  std::uint64_t seed = 2300;
  for (const std::string out : {"float32", "float16"}) {
    Compute c = testing::narrowed_op("gemm", out, {"M=200", "N=136", "K=520"});
    for (const std::string hw : {"mma_sync_fp16_fp32", "wgmma_fp16_fp32", "simt_fp16_fp32"}) {
      GpuCase base = full_mapping(c, hw, hw + " gemm 200x136x520 " + out, 1e-2);
      std::vector<GpuCase> cases = variants(base, clustered({2, 3, 8}));
      cases.erase(cases.begin());  // the base itself has no split
      if (hw == "wgmma_fp16_fp32") {
        GpuCase tma = base;
        tma.p.producer = 1;
        tma.p.split_k = 4;
        tma.p.cluster = 1;
        tma.label += " tma cluster of 4";
        if (validate(tma.g, tma.p, DeviceLimits::for_arch(90)).empty()) cases.push_back(tma);
        else ADD_FAILURE() << tma.label << " is not valid";
      }
      run_cases(c, cases, seed++);
    }
  }
  {
    Compute b = build_compute(builtin_op("batched_gemm"), parse_param_overrides({"BATCH=3", "M=72", "N=64", "K=200"}));
    std::vector<GpuCase> cases = variants(full_mapping(b, "mma_sync_fp16_fp32", "batched_gemm 3x72x64x200", 1e-2),
                                          clustered({4}));
    run_cases(b, {cases.begin() + 1, cases.end()}, seed++);
  }
  {
    Compute c = build_compute(builtin_op("conv2d_nhwc"), parse_param_overrides({"N=2", "C=32", "H=9", "W=9", "K=48", "pad=1"}));
    const HwAbstraction& hw = find_hw(shipped(), "mma_sync_fp16_fp32");
    static MatchReport r = match_compute(c, {hw}, Enumeration::kAll);
    ImplicitGemm serial = make_implicit_gemm(c, hw, r.matches[0], r.matches[0].mappings[0]);  // r, s serial
    GpuCase base{"conv2d_nhwc mapping 0 (serial r, s)", serial, default_schedule(serial, DeviceLimits::for_arch(90)), 1e-2};
    std::vector<GpuCase> cases = variants(base, clustered({5, 7}));
    run_cases(c, {cases.begin() + 1, cases.end()}, seed++);
  }
  {
    Compute c = typed_op("gemm_nt", "int8", "int32", {"M=300", "N=200", "K=192"});
    std::vector<GpuCase> cases = variants(full_mapping(c, "mma_sync_int8_int32", "int8 gemm_nt", 0.0), clustered({2, 3}));
    run_cases(c, {cases.begin() + 1, cases.end()}, seed++);
  }
}

// Split-K summed by the last block of each tile to store its partial tile (split_reduce): every
// family, 2 to 16 splits, tails in M, N and K, float16 and float32 outputs, a batch, serial filter
// taps and int8 (exact). The runner checks the output again after the timed runs, so the tile
// counters are back to zero after every launch. Then a decode-shaped GEMV with its splits summed
// by each of the three ways, for a first look at the times (printed, not asserted).
TEST(Gpu, SplitKSummedByTheTilesLastBlockIsCorrect) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  auto last_block = [](std::initializer_list<int> splits) {
    return split_edits("last block", splits, &ScheduleParams::split_reduce);
  };
  auto without_base = [](std::vector<GpuCase> cases) { return std::vector<GpuCase>(cases.begin() + 1, cases.end()); };
  std::uint64_t seed = 2400;
  for (const std::string out : {"float32", "float16"}) {
    Compute c = testing::narrowed_op("gemm", out, {"M=200", "N=136", "K=520"});
    for (const std::string hw : {"mma_sync_fp16_fp32", "wmma_fp16_fp32", "simt_fp16_fp32", "wgmma_fp16_fp32"}) {
      if (hw == "wgmma_fp16_fp32" && device_cc() != 90) continue;
      GpuCase base = full_mapping(c, hw, hw + " gemm 200x136x520 " + out, 1e-2);
      std::vector<GpuCase> cases = without_base(variants(base, last_block({2, 3, 16})));
      if (hw == "wgmma_fp16_fp32") {
        GpuCase tma = base;
        tma.p.producer = 1;
        tma.p.split_k = 4;
        tma.p.split_reduce = 1;
        tma.label += " tma last block of 4";
        if (validate(tma.g, tma.p, DeviceLimits::for_arch(90)).empty()) cases.push_back(tma);
        else ADD_FAILURE() << tma.label << " is not valid";
      }
      run_cases(c, cases, seed++);
    }
  }
  {
    Compute b = build_compute(builtin_op("batched_gemm"), parse_param_overrides({"BATCH=3", "M=72", "N=64", "K=200"}));
    run_cases(b, without_base(variants(full_mapping(b, "mma_sync_fp16_fp32", "batched_gemm 3x72x64x200", 1e-2), last_block({4}))),
              seed++);
  }
  {
    Compute c = build_compute(builtin_op("conv2d_nhwc"), parse_param_overrides({"N=2", "C=32", "H=9", "W=9", "K=48", "pad=1"}));
    const HwAbstraction& hw = find_hw(shipped(), "mma_sync_fp16_fp32");
    static MatchReport r = match_compute(c, {hw}, Enumeration::kAll);
    ImplicitGemm serial = make_implicit_gemm(c, hw, r.matches[0], r.matches[0].mappings[0]);  // r, s serial
    GpuCase base{"conv2d_nhwc mapping 0 (serial r, s)", serial, default_schedule(serial, DeviceLimits::for_arch(device_cc())), 1e-2};
    run_cases(c, without_base(variants(base, last_block({5, 9}))), seed++);
  }
  {
    Compute c = typed_op("gemm_nt", "int8", "int32", {"M=300", "N=200", "K=192"});
    run_cases(c, without_base(variants(full_mapping(c, "mma_sync_int8_int32", "int8 gemm_nt", 0.0), last_block({2, 3}))),
              seed++);
  }
  {
    Compute c = testing::narrowed_op("gemm", "float16", {"M=1", "N=4096", "K=4096"});
    GpuCase base = full_mapping(c, "mma_sync_fp16_fp32", "decode M=1", 1e-2);
    base.p.block_m = base.p.warp_m = 16;
    base.p.block_n = 64;
    base.p.warp_n = 32;
    base.p.block_k = 128;
    base.p.stages = 4;
    std::vector<GpuCase> cases;
    for (const auto& [label, cluster, reduce] : std::vector<std::tuple<std::string, int, int>>{
             {" split 8 reduce kernel", 0, 0}, {" split 8 last block", 0, 1}, {" split 8 cluster", 1, 0}}) {
      if (cluster && device_cc() < 90) continue;
      GpuCase gc = base;
      gc.p.split_k = 8;
      gc.p.cluster = cluster;
      gc.p.split_reduce = reduce;
      gc.label += label;
      cases.push_back(gc);
    }
    run_cases(c, cases, seed++);
  }
}

// The mma.sync family: ldmatrix (and .trans) fragments, swizzled or padded tiles, cp.async rings of
// 1-5 stages, register-blocked warp tiles from 16x16 to 64x64, split-K, vector epilogues along n
// or m; on GEMMs with tails in every dimension, NCHW and NHWC convolutions with padding and
// stride, conv1d and conv3d, and every dtype of the family.
TEST(Gpu, MmaSyncFamily) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  std::uint64_t seed = 500;
  using Edit = std::pair<std::string, std::function<void(ScheduleParams&)>>;
  const std::vector<Edit> edits = {
      {"padded", [](ScheduleParams& p) { p.swizzle = 0; p.smem_pad = 8; }},
      {"stages 5", [](ScheduleParams& p) { p.stages = 5; }},
      {"stages 3 bk 64", [](ScheduleParams& p) { p.stages = 3; p.block_k = 64; }},
      {"registers stages 2", [](ScheduleParams& p) { p.async_copy = 0; p.stages = 2; }},
      {"registers stages 1 scalar", [](ScheduleParams& p) { p.async_copy = 0; p.stages = 1; p.vec_a = p.vec_b = 1; }},
      {"warp 16x16 raster 3", [](ScheduleParams& p) { p.warp_m = p.warp_n = 16; p.block_m = 32; p.block_n = 48; p.raster = 3; }},
      {"warp 32x64 split 3", [](ScheduleParams& p) { p.warp_m = 32; p.warp_n = 64; p.block_m = 64; p.block_n = 64; p.split_k = 3; }},
  };
  {
    // Tails in M, N and K; each of the four shared layouts (ldmatrix / .trans on A and B).
    Compute c = build_compute(builtin_op("gemm"), parse_param_overrides({"M=200", "N=136", "K=520"}));
    for (std::size_t i = 0; i < 4; ++i) {
      GpuCase base = full_mapping(c, "mma_sync_fp16_fp32", "gemm 200x136x520", 1e-2, i);
      run_cases(c, variants(base, edits), seed++);
    }
    Compute odd = build_compute(builtin_op("gemm"), parse_param_overrides({"M=17", "N=33", "K=65"}));
    std::vector<GpuCase> cases;
    for (std::size_t i = 0; i < 4; ++i) cases.push_back(full_mapping(odd, "mma_sync_fp16_fp32", "gemm 17x33x65", 1e-2, i));
    run_cases(odd, cases, seed++);
  }
  for (const auto& [op, sets] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"conv2d", {"N=2", "C=64", "H=15", "W=15", "K=96", "stride=2", "pad=1"}},
           {"conv2d_nhwc", {"N=2", "C=64", "H=15", "W=15", "K=96", "stride=2", "pad=1"}},
           {"conv2d_nhwc", {"N=3", "C=24", "H=9", "W=11", "K=40", "R=1", "S=1", "pad=0"}},
           {"conv1d", {"N=3", "C=40", "W=77", "K=48", "S=3", "pad=1"}},
           {"conv3d", {"N=2", "C=16", "D=7", "H=9", "W=9", "K=32", "pad=1"}}}) {
    Compute c = build_compute(builtin_op(op), parse_param_overrides(sets));
    MatchReport r = match_compute(c, {find_hw(shipped(), "mma_sync_fp16_fp32")}, Enumeration::kAll);
    std::vector<GpuCase> cases;
    for (std::size_t i = 0; i < r.matches.size(); ++i) {
      GpuCase gc = full_mapping(c, "mma_sync_fp16_fp32", op + " " + sets[0] + " " + sets[1], 1e-2, i);
      cases.push_back(gc);
      gc.p.swizzle = 0;
      gc.p.smem_pad = 8;
      gc.label += " padded";
      if (validate(gc.g, gc.p, DeviceLimits::for_arch(device_cc())).empty()) cases.push_back(gc);
    }
    run_cases(c, cases, seed++);
  }
  for (const auto& [hw, in_t, out_t, tol] : std::vector<std::tuple<std::string, std::string, std::string, double>>{
           {"mma_sync_bf16_fp32", "bfloat16", "float32", 1e-2},
           {"mma_sync_tf32_fp32", "float32", "float32", 1e-3},
           {"mma_sync_int8_int32", "int8", "int32", 0.0}}) {
    for (const std::string op : {"gemm_nt", "conv2d_nhwc"}) {
      Compute c = typed_op(op, in_t, out_t, op == "gemm_nt" ? std::vector<std::string>{"M=300", "N=200", "K=96"}
                                                            : std::vector<std::string>{"N=2"});
      GpuCase base = full_mapping(c, hw, hw + " " + op, tol);
      const int pad = in_t == "float32" ? 4 : in_t == "int8" ? 16 : 8;  // 16 bytes
      run_cases(c, variants(base, {{"padded", [pad](ScheduleParams& p) { p.swizzle = 0; p.smem_pad = pad; }},
                                   {"split 2", [](ScheduleParams& p) { p.split_k = 2; }}}),
                seed++);
    }
    Compute bf = typed_op("gemm", in_t, out_t, {"M=64", "N=48", "K=128"});
    MatchReport r = match_compute(bf, {find_hw(shipped(), hw)}, Enumeration::kAll);
    std::vector<GpuCase> cases;
    for (std::size_t i = 0; i < r.matches.size(); ++i) cases.push_back(full_mapping(bf, hw, hw + " gemm", tol, i));
    run_cases(bf, cases, seed++);
  }
  // Large GEMMs with the default schedule, for a first look at speed (no goal is asserted here).
  for (const char* n : {"N=4096", "N=2048"}) {
    std::string size = std::string(n).substr(2);
    Compute c = build_compute(builtin_op("gemm"), parse_param_overrides({"M=" + size, n, "K=" + size}));
    GpuCase base = full_mapping(c, "mma_sync_fp16_fp32", "gemm " + size + "^3", 1e-2, 0);
    run_cases(c, variants(base, {{"128x256 warp 64x64 stages 3", [](ScheduleParams& p) { p.block_n = 256; p.stages = 3; }},
                                 {"256x128 stages 3 raster 8", [](ScheduleParams& p) { p.block_m = 256; p.stages = 3; p.raster = 8; }},
                                 {"bk 64 stages 3", [](ScheduleParams& p) { p.block_k = 64; p.stages = 3; }}}),
              seed++);
  }
}

// The wgmma family (sm_90a): K-major and transposed (MN-major) operands through 128-byte-swizzle
// descriptors, one or two m64 accumulators per warpgroup, N from 16 to 256, rings of 3-6
// stages, split-K and rasterization; GEMMs of all four layouts with tails in M, N and K,
// NHWC and NCHW convolutions with stride, padding and dilation, and every dtype of the family.
TEST(Gpu, WgmmaFamily) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  if (device_cc() != 90) GTEST_SKIP() << "wgmma needs sm_90, the GPU is sm_" << device_cc();
  std::uint64_t seed = 900;
  using Edit = std::pair<std::string, std::function<void(ScheduleParams&)>>;
  const std::vector<Edit> edits = {
      {"stages 3", [](ScheduleParams& p) { p.stages = 3; }},
      {"stages 6 bm 64", [](ScheduleParams& p) { p.stages = 6; p.block_m = 64; }},
      {"wm 128 wn 64", [](ScheduleParams& p) { p.warp_m = 128; p.block_m = 128; p.warp_n = 64; p.block_n = 128; }},
      {"bk 128 raster 3", [](ScheduleParams& p) { p.block_k = 128; p.stages = 3; p.raster = 3; }},
      {"scalar gathers", [](ScheduleParams& p) { p.async_copy = 0; p.vec_a = p.vec_b = 1; }},
      {"split 3", [](ScheduleParams& p) { p.split_k = 3; }},
  };
  // The four layouts (A and B each K-major or transposed), with tails in M, N and K.
  for (const char* op : {"gemm", "gemm_nt", "gemm_tn", "gemm_tt"}) {
    Compute c = build_compute(builtin_op(op), parse_param_overrides({"M=200", "N=136", "K=520"}));
    GpuCase base = full_mapping(c, "wgmma_fp16_fp32", std::string(op) + " 200x136x520", 1e-2);
    run_cases(c, variants(base, edits), seed++);
    Compute odd = build_compute(builtin_op(op), parse_param_overrides({"M=67", "N=33", "K=65"}));
    run_cases(odd, {full_mapping(odd, "wgmma_fp16_fp32", std::string(op) + " 67x33x65", 1e-2)}, seed++);
  }
  for (const auto& [op, sets] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"conv2d_nhwc", {"N=2", "C=64", "H=15", "W=15", "K=96", "stride=2", "pad=1"}},
           {"conv2d_nhwc", {"N=2", "C=64", "H=13", "W=13", "K=128", "dil=2", "pad=2"}},
           {"conv2d_nhwc", {"N=3", "C=24", "H=9", "W=11", "K=40", "R=1", "S=1", "pad=0"}},
           {"conv2d", {"N=2", "C=64", "H=15", "W=15", "K=96", "stride=2", "pad=1"}},
           {"conv3d", {"N=2", "C=16", "D=7", "H=9", "W=9", "K=32", "pad=1"}}}) {
    Compute c = build_compute(builtin_op(op), parse_param_overrides(sets));
    MatchReport r = match_compute(c, {find_hw(shipped(), "wgmma_fp16_fp32")}, Enumeration::kAll);
    std::vector<GpuCase> cases;
    for (std::size_t i = 0; i < r.matches.size(); ++i) {
      GpuCase gc = full_mapping(c, "wgmma_fp16_fp32", op + " " + sets[0] + " " + sets[1] + " " + sets[4], 1e-2, i);
      if (validate(gc.g, gc.p, DeviceLimits::for_arch(90)).empty()) cases.push_back(gc);
    }
    EXPECT_FALSE(cases.empty()) << op << ": no layout of the convolution has a valid default wgmma schedule";
    run_cases(c, cases, seed++);
  }
  for (const auto& [hw, in_t, out_t, tol] : std::vector<std::tuple<std::string, std::string, std::string, double>>{
           {"wgmma_bf16_fp32", "bfloat16", "float32", 1e-2},
           {"wgmma_tf32_fp32", "float32", "float32", 1e-2},  // wgmma truncates fp32 to tf32
           {"wgmma_int8_int32", "int8", "int32", 0.0}}) {
    for (const std::string op : {"gemm_nt", "conv2d_nhwc"}) {
      Compute c = typed_op(op, in_t, out_t, op == "gemm_nt" ? std::vector<std::string>{"M=300", "N=200", "K=96"}
                                                            : std::vector<std::string>{"N=2"});
      GpuCase base = full_mapping(c, hw, hw + " " + op, tol);
      run_cases(c, variants(base, {{"split 2", [](ScheduleParams& p) { p.split_k = 2; }},
                                   {"wn 64", [](ScheduleParams& p) { p.warp_n = 64; p.block_n = 128; }}}),
                seed++);
    }
  }
  // Large GEMMs with the default schedule, for a first look at speed (no goal is asserted here).
  for (const char* op : {"gemm", "gemm_nt"}) {
    Compute c = build_compute(builtin_op(op), parse_param_overrides({"M=4096", "N=4096", "K=4096"}));
    GpuCase base = full_mapping(c, "wgmma_fp16_fp32", std::string(op) + " 4096^3", 1e-2, 0);
    run_cases(c, variants(base, {{"stages 5 raster 8", [](ScheduleParams& p) { p.stages = 5; p.raster = 8; }},
                                 {"128x128 stages 6", [](ScheduleParams& p) { p.block_n = 128; p.warp_n = 128; p.stages = 6; }},
                                 {"256x128 wm 64 wn 128", [](ScheduleParams& p) { p.block_m = 256; p.block_n = 128; p.warp_n = 128; p.stages = 4; }}}),
              seed++);
  }
}

// Persistent kernels that store their output tiles by bulk copies (bulk_store 1) and by TMA
// (bulk_store 2): GEMMs and an im2col convolution in both operand orders (the epilogue tile's rows along m, and along n in the
// transposed product), float16 and float32 outputs, two consumers, ping-pong and pairs of blocks.
TEST(Gpu, WgmmaBulkStore) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  if (device_cc() != 90) GTEST_SKIP() << "wgmma needs sm_90, the GPU is sm_" << device_cc();
  using Edit = std::pair<std::string, std::function<void(ScheduleParams&)>>;
  const std::vector<Edit> edits = {
      {"2 consumers 128x128", [](ScheduleParams& p) { p.block_m = 128; p.warp_m = 64; p.block_n = p.warp_n = 128; }},
      {"ping-pong 64x128", [](ScheduleParams& p) { p.producer = 3; p.block_m = p.warp_m = 64; p.block_n = p.warp_n = 128; }},
      {"pair along m", [](ScheduleParams& p) { p.cluster = 2; }},
      {"raster 4 stages 6", [](ScheduleParams& p) { p.raster = 4; p.stages = 6; }},
  };
  std::uint64_t seed = 2400;
  int ran = 0, tma_ran = 0;
  const std::vector<std::pair<std::string, std::vector<std::string>>> computes = {
      {"gemm_nt", {"M=256", "N=384", "K=520"}}, {"gemm", {"M=256", "N=512", "K=200"}},
      {"gemm_nt", {"M=200", "N=136", "K=72"}},  // last tiles past the end, their boxes clamped
      {"conv2d_nhwc", {"N=8", "C=64", "H=16", "W=16", "K=128", "pad=1"}}};
  for (const auto& [op, sets] : computes)
    for (const std::string out : {"float16", "float32"}) {
      Compute c = testing::narrowed_op(op, out, sets);
      MatchReport r = match_compute(c, {find_hw(shipped(), "wgmma_fp16_fp32")}, Enumeration::kAll);
      for (int swapped = 0; swapped < 2; ++swapped)
        for (std::size_t i = 0; i < r.matches.size(); ++i) {
          if ((r.matches[i].roles.a_input != 0) != (swapped == 1)) continue;
          GpuCase gc = full_mapping(c, "wgmma_fp16_fp32", op + " " + out + " bulk store", 1e-2, i);
          gc.p.producer = 2;
          gc.p.block_m = gc.p.warp_m = 64;
          gc.p.block_n = gc.p.warp_n = 64;
          gc.p.split_k = 1;
          gc.p.bulk_store = 1;
          if (!validate(gc.g, gc.p, DeviceLimits::for_arch(90)).empty()) continue;
          gc.label += swapped ? " transposed" : "";
          run_cases(c, variants(gc, edits), seed++);
          // TMA stores of a swizzled tile (bulk_store 2), the last tiles' rows rotated into place.
          GpuCase tma = gc;
          tma.p.bulk_store = 2;
          tma.label += " tma";
          if (validate(tma.g, tma.p, DeviceLimits::for_arch(90)).empty()) run_cases(c, variants(tma, edits), seed++), ++tma_ran;
          ++ran;
          break;
        }
    }
  EXPECT_EQ(ran, 16) << "each compute and output dtype in both operand orders";
  EXPECT_EQ(tma_ran, 16) << "each in TMA stores too";
}

// Warp-specialized wgmma kernels (producer = 1): TMA boxes through an mbarrier ring, zero-filled
// outside the tensor (tails in M, N and K), one or two consumer warpgroups, split-K, every GEMM
// layout, batched GEMMs (the batch a tensor-map dimension), 1x1 convolutions and every dtype.
TEST(Gpu, WgmmaTmaProducer) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  if (device_cc() != 90) GTEST_SKIP() << "wgmma needs sm_90, the GPU is sm_" << device_cc();
  std::uint64_t seed = 1900;
  using Edit = std::pair<std::string, std::function<void(ScheduleParams&)>>;
  // The first layout of `c` whose default schedule takes a TMA producer (the one that reads each
  // operand in its memory order).
  auto tma = [](const Compute& c, const std::string& hw, const std::string& label, double tol) {
    MatchReport r = match_compute(c, {find_hw(shipped(), hw)}, Enumeration::kAll);
    for (std::size_t i = 0; i < r.matches.size(); ++i) {
      GpuCase gc = full_mapping(c, hw, label, tol, i);
      gc.p.producer = 1;
      gc.label += " tma";
      if (validate(gc.g, gc.p, DeviceLimits::for_arch(90)).empty()) return gc;
    }
    ADD_FAILURE() << label << ": no layout takes a TMA producer";
    return full_mapping(c, hw, label, tol);
  };
  const std::vector<Edit> edits = {
      {"stages 3", [](ScheduleParams& p) { p.stages = 3; }},
      {"stages 6 bm 64", [](ScheduleParams& p) { p.stages = 6; p.block_m = 64; }},
      {"stages 8 bm 64", [](ScheduleParams& p) { p.stages = 8; p.block_m = 64; }},
      // A ring deeper than the reduction's 9 steps.
      {"persistent stages 12 64x64", [](ScheduleParams& p) {
         p.producer = 2; p.stages = 12; p.block_m = p.warp_m = p.block_n = p.warp_n = 64; }},
      {"2 consumers 128x256", [](ScheduleParams& p) { p.block_m = 128; p.warp_m = 64; p.block_n = p.warp_n = 256; }},
      {"wm 128 wn 64", [](ScheduleParams& p) { p.warp_m = 128; p.block_m = 128; p.warp_n = 64; p.block_n = 128; }},
      {"bk 128 raster 3", [](ScheduleParams& p) { p.block_k = 128; p.stages = 3; p.raster = 3; }},
      {"split 3", [](ScheduleParams& p) { p.split_k = 3; }},
      {"persistent", [](ScheduleParams& p) { p.producer = 2; }},
      {"persistent bm 64 raster 3", [](ScheduleParams& p) { p.producer = 2; p.block_m = 64; p.stages = 6; p.raster = 3; }},
      {"uniform wait", [](ScheduleParams& p) { p.uniform_wait = 1; }},
      {"persistent uniform wait split 1", [](ScheduleParams& p) { p.producer = 2; p.uniform_wait = 1; p.split_k = 1; }},
      // Stream-K: 4 tiles of 9 steps on 36 blocks, each tile finished from 8 partial tiles; with
      // A from registers, a piece's first step picks the register set.
      {"stream-K", [](ScheduleParams& p) { p.producer = 2; p.stream_k = 1; p.split_k = 1; }},
      {"stream-K bm 64 stages 6 a_regs", [](ScheduleParams& p) {
         p.producer = 2; p.stream_k = 1; p.split_k = 1; p.block_m = 64; p.stages = 6; p.a_regs = 1; }},
  };
  for (const char* op : {"gemm", "gemm_nt", "gemm_tn", "gemm_tt"}) {
    Compute c = build_compute(builtin_op(op), parse_param_overrides({"M=200", "N=136", "K=520"}));
    // The layout whose operands are stored as the tensors are (the first match, "nnn", reads each
    // operand in its memory order).
    GpuCase base = tma(c, "wgmma_fp16_fp32", std::string(op) + " 200x136x520", 1e-2);
    run_cases(c, variants(base, edits), seed++);
  }
  {
    Compute c = build_compute(builtin_op("gemm"), parse_param_overrides({"M=67", "N=40", "K=72"}));
    run_cases(c, {tma(c, "wgmma_fp16_fp32", "gemm 67x40x72", 1e-2)}, seed++);
    Compute b = build_compute(builtin_op("batched_gemm"), parse_param_overrides({"BATCH=3", "M=72", "N=64", "K=200"}));
    run_cases(b, variants(tma(b, "wgmma_fp16_fp32", "batched_gemm 3x72x64x200", 1e-2),
                          {{"split 2", [](ScheduleParams& p) { p.split_k = 2; }},
                           {"persistent", [](ScheduleParams& p) { p.producer = 2; }},
                           {"stream-K", [](ScheduleParams& p) { p.producer = 2; p.stream_k = 1; }}}),
              seed++);
    Compute v = build_compute(builtin_op("conv2d_nhwc"),
                              parse_param_overrides({"N=3", "C=24", "H=9", "W=11", "K=40", "R=1", "S=1", "pad=0"}));
    run_cases(v, {tma(v, "wgmma_fp16_fp32", "conv2d_nhwc 1x1", 1e-2)}, seed++);
  }
  // Channels-last convolution inputs in TMA's im2col mode: padding (zero-filled by TMA), stride,
  // dilation, 1x1 stride 2, 5x5, M tails that wrap into the next image, split-K, 2 consumers.
  for (const auto& sets : testing::im2col_conv_shapes()) {
    Compute c = build_compute(builtin_op("conv2d_nhwc"), parse_param_overrides(sets));
    GpuCase base = tma(c, "wgmma_fp16_fp32", "conv2d_nhwc " + sets[1] + " " + sets[5] + " im2col", 1e-2);
    if (!base.p.producer) continue;  // tma() reported the failure
    run_cases(c, variants(base, {{"split 3", [](ScheduleParams& p) { p.split_k = 3; }},
                                 {"2 consumers 256x128", [](ScheduleParams& p) { p.block_m = 256; p.warp_m = 128; p.block_n = p.warp_n = 128; }},
                                 {"bm 64 stages 6 raster 4", [](ScheduleParams& p) { p.block_m = 64; p.stages = 6; p.raster = 4; }},
                                 {"persistent", [](ScheduleParams& p) { p.producer = 2; }},
                                 {"persistent bm 64 raster 2", [](ScheduleParams& p) { p.producer = 2; p.block_m = 64; p.raster = 2; }},
                                 {"stream-K", [](ScheduleParams& p) { p.producer = 2; p.stream_k = 1; }}}),
              seed++);
  }
  // Persistent blocks that walk many tiles each (196 tiles of 128 pixels, about one block per SM),
  // the input read in im2col boxes, in both operand orders, float32 and float16 outputs (an
  // epilogue tile of half along n, and along m in the transposed product).
  for (const std::string out : {"float32", "float16"}) {
    Compute c = testing::narrowed_op("conv2d_nhwc", out, {"N=8", "C=64", "H=56", "W=56", "K=64", "pad=1"});
    MatchReport r = match_compute(c, {find_hw(shipped(), "wgmma_fp16_fp32")}, Enumeration::kAll);
    std::vector<GpuCase> cases;
    for (int swapped = 0; swapped < 2; ++swapped)
      for (std::size_t i = 0; i < r.matches.size(); ++i) {
        if ((r.matches[i].roles.a_input != 0) != (swapped == 1)) continue;
        GpuCase gc = full_mapping(c, "wgmma_fp16_fp32", "conv2d_nhwc 8x56x56x64 " + out + " persistent", 1e-2, i);
        gc.p.producer = 2;
        gc.p.block_m = gc.p.warp_m = swapped ? 64 : 128;
        gc.p.warp_m = 64;
        gc.p.block_n = gc.p.warp_n = swapped ? 128 : 64;
        gc.p.split_k = 1;
        if (!validate(gc.g, gc.p, DeviceLimits::for_arch(90)).empty()) continue;
        gc.label += swapped ? " transposed" : "";
        cases.push_back(gc);
        gc.p.stream_k = 1;  // 196 tiles of 9 steps in 132 runs: most tiles cut in two
        gc.label += " stream-K";
        cases.push_back(gc);
        if (!swapped) {  // 392 tiles: 132 whole, then 260 in 132 runs
          gc.p.stream_k = 2;
          gc.p.block_m = 64;
          gc.label += " whole waves first bm 64";
          if (validate(gc.g, gc.p, DeviceLimits::for_arch(90)).empty()) cases.push_back(gc);
        }
        break;
      }
    EXPECT_EQ(cases.size(), 5u) << "persistent and stream-K im2col kernels in both operand orders, whole waves first";
    run_cases(c, cases, seed++);
  }
  // The transposed product (filters as A on m, pixels on n): the input is B, read in im2col boxes of
  // BN pixels; one consumer 64 x 256, two side by side along n, split-K, a deeper ring.
  for (const auto& sets : testing::im2col_conv_shapes()) {
    Compute c = build_compute(builtin_op("conv2d_nhwc"), parse_param_overrides(sets));
    const std::string label = "conv2d_nhwc " + sets[1] + " " + sets[5] + " transposed im2col";
    MatchReport r = match_compute(c, {find_hw(shipped(), "wgmma_fp16_fp32")}, Enumeration::kAll);
    std::vector<GpuCase> cases;
    for (std::size_t i = 0; i < r.matches.size() && cases.empty(); ++i) {
      if (r.matches[i].roles.a_input == 0) continue;
      GpuCase gc = full_mapping(c, "wgmma_fp16_fp32", label, 1e-2, i);
      gc.p.producer = 1;
      gc.p.block_m = gc.p.warp_m = 64;
      gc.p.block_n = gc.p.warp_n = 256;
      if (!validate(gc.g, gc.p, DeviceLimits::for_arch(90)).empty()) continue;
      cases = variants(gc, {{"2 consumers 64x256", [](ScheduleParams& p) { p.block_n = 256; p.warp_n = 128; }},
                            {"bn 128 stages 6", [](ScheduleParams& p) { p.block_n = p.warp_n = 128; p.stages = 6; }},
                            {"split 3", [](ScheduleParams& p) { p.split_k = 3; }},
                            {"persistent", [](ScheduleParams& p) { p.producer = 2; }}});
    }
    if (cases.empty()) ADD_FAILURE() << label << ": no transposed layout takes an im2col producer";
    else run_cases(c, cases, seed++);
  }
  for (const auto& [hw, in_t, out_t, tol] : std::vector<std::tuple<std::string, std::string, std::string, double>>{
           {"wgmma_bf16_fp32", "bfloat16", "float32", 1e-2},
           {"wgmma_bf16_fp32", "bfloat16", "bfloat16", 1e-2},
           {"wgmma_fp16_fp32", "float16", "float16", 1e-2},
           {"wgmma_tf32_fp32", "float32", "float32", 1e-2},
           {"wgmma_int8_int32", "int8", "int32", 0.0}}) {
    // 16-bit outputs are stored from float32 sums; float32 and int32 ones are the sums.
    Compute c = out_t == "float16" || out_t == "bfloat16" ? testing::stored_as_op("gemm_nt", in_t, out_t, {"M=300", "N=200", "K=192"})
                                                          : typed_op("gemm_nt", in_t, out_t, {"M=300", "N=200", "K=192"});
    run_cases(c, variants(tma(c, hw, hw + " gemm_nt " + out_t + " out", tol),
                          {{"split 2", [](ScheduleParams& p) { p.split_k = 2; }},
                           {"persistent bm 64", [](ScheduleParams& p) { p.producer = 2; p.block_m = 64; }},
                           {"stream-K bm 64", [](ScheduleParams& p) { p.producer = 2; p.block_m = 64; p.stream_k = 1; }},
                           {"wn 64", [](ScheduleParams& p) { p.warp_n = 64; p.block_n = 128; }}}),
              seed++);
  }
  // Large GEMMs, for a first look at speed (no goal is asserted here).
  for (const char* op : {"gemm", "gemm_nt"}) {
    Compute c = build_compute(builtin_op(op), parse_param_overrides({"M=4096", "N=4096", "K=4096"}));
    GpuCase base = tma(c, "wgmma_fp16_fp32", std::string(op) + " 4096^3", 1e-2);
    run_cases(c, variants(base, {{"2 consumers 128x256", [](ScheduleParams& p) { p.block_m = 128; p.warp_m = 64; p.block_n = p.warp_n = 256; p.stages = 4; }},
                                 {"2 consumers 128x256 raster 8", [](ScheduleParams& p) { p.block_m = 128; p.warp_m = 64; p.block_n = p.warp_n = 256; p.stages = 4; p.raster = 8; }},
                                 {"2 consumers 256x128", [](ScheduleParams& p) { p.block_m = 256; p.warp_m = 128; p.block_n = p.warp_n = 128; p.stages = 4; }},
                                 {"128x128 stages 6", [](ScheduleParams& p) { p.block_n = p.warp_n = 128; p.stages = 6; }},
                                 {"persistent 2 consumers 128x256", [](ScheduleParams& p) { p.producer = 2; p.block_m = 128; p.warp_m = 64; p.block_n = p.warp_n = 256; p.stages = 3; }},
                                 {"persistent 2 consumers 128x256 raster 8", [](ScheduleParams& p) { p.producer = 2; p.block_m = 128; p.warp_m = 64; p.block_n = p.warp_n = 256; p.stages = 3; p.raster = 8; }},
                                 {"persistent 2 consumers 256x128", [](ScheduleParams& p) { p.producer = 2; p.block_m = 256; p.warp_m = 128; p.block_n = p.warp_n = 128; p.stages = 3; }},
                                 // 512 tiles: stream-K over all of them, or over the last 248 after 264 whole.
                                 {"stream-K 2 consumers 128x256", [](ScheduleParams& p) { p.producer = 2; p.stream_k = 1; p.split_k = 1; p.block_m = 128; p.warp_m = 64; p.block_n = p.warp_n = 256; p.stages = 3; }},
                                 {"stream-K whole waves first 2 consumers 128x256", [](ScheduleParams& p) { p.producer = 2; p.stream_k = 2; p.split_k = 1; p.block_m = 128; p.warp_m = 64; p.block_n = p.warp_n = 256; p.stages = 3; }}}),
              seed++);
  }
}

/// Each edit of `edits` on every layout of `c` in its written operand order (the matches storing A
/// and B K-major or along m, n), where it is valid (a TMA producer needs both operands boxed);
/// every edit must apply to at least one layout.
std::vector<GpuCase> on_every_layout(const Compute& c, const std::string& hw, const std::string& label, double tol,
                                     const std::vector<std::pair<std::string, std::function<void(ScheduleParams&)>>>& edits) {
  const MatchReport r = match_compute(c, {find_hw(shipped(), hw)}, Enumeration::kAll);
  std::vector<GpuCase> out;
  std::vector<int> applied(edits.size(), 0);
  for (std::size_t i = 0; i < r.matches.size(); ++i) {
    if (r.matches[i].roles.a_input != r.matches.front().roles.a_input) continue;
    const GpuCase base = full_mapping(c, hw, label, tol, i);
    for (std::size_t e = 0; e < edits.size(); ++e) {
      GpuCase gc = base;
      edits[e].second(gc.p);
      gc.label += " " + edits[e].first;
      if (!validate(gc.g, gc.p, DeviceLimits::for_arch(device_cc())).empty()) continue;
      ++applied[e];
      out.push_back(gc);
    }
  }
  for (std::size_t e = 0; e < edits.size(); ++e)
    EXPECT_GT(applied[e], 0) << label << ": " << edits[e].first << " applies to no layout";
  return out;
}

// Ping-pong consumers (producer 3): two consumer warpgroups take every other tile of their block
// and turns on the main loop. GEMMs of all four layouts with tails in M, N and K, large GEMMs
// whose blocks walk many tiles (so that both consumers take several and wait on the ring across
// tiles), 16-bit outputs through the epilogue tiles, A from registers, warp-uniform waits,
// batched GEMMs and im2col convolutions in both operand orders.
TEST(Gpu, WgmmaPingPong) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  if (device_cc() != 90) GTEST_SKIP() << "wgmma needs sm_90, the GPU is sm_" << device_cc();
  std::uint64_t seed = 2900;
  using Edit = std::pair<std::string, std::function<void(ScheduleParams&)>>;
  auto tile = [](int bm, int bn) {
    return [=](ScheduleParams& p) {
      p.producer = 3;
      p.split_k = 1;
      p.cluster = 0;
      p.block_m = p.warp_m = bm;
      p.block_n = p.warp_n = bn;
    };
  };
  // Two float32 epilogue tiles of 128 x 128 (or 64 x 256) do not fit beside a ring: those tiles
  // with a 16-bit output below.
  const std::vector<Edit> edits = {
      {"ping-pong 64x128", tile(64, 128)},
      {"ping-pong 128x64", tile(128, 64)},
      {"ping-pong 64x64 raster 3 stages 6", [&](ScheduleParams& p) { tile(64, 64)(p); p.raster = 3; p.stages = 6; }},
      {"ping-pong 64x128 a_regs", [&](ScheduleParams& p) { tile(64, 128)(p); p.a_regs = 1; }},
      {"ping-pong 64x128 uniform wait", [&](ScheduleParams& p) { tile(64, 128)(p); p.uniform_wait = 1; }},
  };
  for (const char* op : {"gemm", "gemm_nt", "gemm_tn", "gemm_tt"}) {
    Compute c = build_compute(builtin_op(op), parse_param_overrides({"M=200", "N=136", "K=520"}));
    run_cases(c, on_every_layout(c, "wgmma_fp16_fp32", std::string(op) + " 200x136x520", 1e-2, edits), seed++);
  }
  // 512 and 1024 tiles of 64 x 128 on about one block per SM: each consumer walks several.
  for (const auto& [in_t, out_t] : std::vector<std::pair<std::string, std::string>>{{"float16", "float32"},
                                                                                     {"bfloat16", "bfloat16"}}) {
    const std::string hw = in_t == "float16" ? "wgmma_fp16_fp32" : "wgmma_bf16_fp32";
    Compute c = out_t == "bfloat16" ? testing::stored_as_op("gemm_nt", in_t, out_t, {"M=4096", "N=2048", "K=512"})
                                    : typed_op("gemm_nt", in_t, out_t, {"M=2048", "N=2048", "K=1024"});
    std::vector<Edit> large = {{"ping-pong 64x128", tile(64, 128)},
                               {"ping-pong 128x64 raster 8", [&](ScheduleParams& p) { tile(128, 64)(p); p.raster = 8; }}};
    if (out_t == "bfloat16") {
      large.push_back({"ping-pong 128x128 raster 8", [&](ScheduleParams& p) { tile(128, 128)(p); p.raster = 8; }});
      large.push_back({"ping-pong 64x256 stages 3", [&](ScheduleParams& p) { tile(64, 256)(p); p.stages = 3; }});
    }
    run_cases(c, on_every_layout(c, hw, hw + " gemm_nt " + out_t + " out, many tiles", 1e-2, large), seed++);
  }
  Compute b = build_compute(builtin_op("batched_gemm"), parse_param_overrides({"BATCH=3", "M=72", "N=64", "K=200"}));
  run_cases(b, on_every_layout(b, "wgmma_fp16_fp32", "batched_gemm 3x72x64x200", 1e-2, {{"ping-pong 64x64", tile(64, 64)}}),
            seed++);
  // 196 tiles of 128 pixels read in im2col boxes, in both operand orders, a float16 output.
  Compute v = testing::narrowed_op("conv2d_nhwc", "float16", {"N=8", "C=64", "H=56", "W=56", "K=64", "pad=1"});
  MatchReport r = match_compute(v, {find_hw(shipped(), "wgmma_fp16_fp32")}, Enumeration::kAll);
  std::vector<GpuCase> cases;
  for (int swapped = 0; swapped < 2; ++swapped)
    for (std::size_t i = 0; i < r.matches.size(); ++i) {
      if ((r.matches[i].roles.a_input != 0) != (swapped == 1)) continue;
      GpuCase gc = full_mapping(v, "wgmma_fp16_fp32", "conv2d_nhwc 8x56x56x64 ping-pong", 1e-2, i);
      tile(swapped ? 64 : 128, 64)(gc.p);
      if (!validate(gc.g, gc.p, DeviceLimits::for_arch(90)).empty()) continue;
      gc.label += swapped ? " transposed" : "";
      cases.push_back(gc);
      break;
    }
  EXPECT_EQ(cases.size(), 2u) << "ping-pong im2col kernels in both operand orders";
  run_cases(v, cases, seed++);
}

// Operand A from registers (a_regs 1): fragments loaded by ldmatrix (.trans for an A stored along
// m) into two register sets by step parity, B by descriptor; GEMMs of all four layouts with tails,
// every producer (threads' gathers, TMA, persistent), two consumers, split-K, the narrower
// swizzles, pairs of blocks (A multicast into both), bf16, tf32 and int8 fragments, and an
// im2col convolution input as A.
TEST(Gpu, WgmmaRegisterA) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  if (device_cc() != 90) GTEST_SKIP() << "wgmma needs sm_90, the GPU is sm_" << device_cc();
  std::uint64_t seed = 3900;
  using Edit = std::pair<std::string, std::function<void(ScheduleParams&)>>;
  auto rs = [](GpuCase gc) {
    gc.p.a_regs = 1;
    gc.label += " a_regs";
    return gc;
  };
  auto regs = [](std::function<void(ScheduleParams&)> f) {
    return [f](ScheduleParams& p) {
      p.a_regs = 1;
      f(p);
    };
  };
  const std::vector<Edit> edits = {
      {"a_regs gather", regs([](ScheduleParams& p) { p.producer = 0; })},
      {"a_regs tma stages 3", regs([](ScheduleParams& p) { p.producer = 1; p.stages = 3; })},
      {"a_regs persistent 2 consumers", regs([](ScheduleParams& p) { p.producer = 2; p.block_m = 128; p.warp_m = 64; p.split_k = 1; })},
      {"a_regs wm 128 wn 64", regs([](ScheduleParams& p) { p.warp_m = p.block_m = 128; p.warp_n = 64; p.block_n = 128; })},
      {"a_regs split 3", regs([](ScheduleParams& p) { p.split_k = 3; })},
      {"a_regs swizzle 2 persistent", regs([](ScheduleParams& p) { p.swizzle = 2; p.block_k = 32; p.producer = 2; p.split_k = 1; })},
      {"a_regs pair m", regs([](ScheduleParams& p) { p.producer = 1; p.split_k = 1; p.cluster = 2; })},
      {"a_regs persistent pair n (A multicast)", regs([](ScheduleParams& p) { p.producer = 2; p.split_k = 1; p.cluster = 3; })},
  };
  int transposed = 0;
  for (const char* op : {"gemm", "gemm_tn"}) {
    Compute c = build_compute(builtin_op(op), parse_param_overrides({"M=200", "N=136", "K=520"}));
    const std::vector<GpuCase> cases = on_every_layout(c, "wgmma_fp16_fp32", std::string(op) + " 200x136x520", 1e-2, edits);
    for (const GpuCase& gc : cases) transposed += stored_along_mn(gc.g, 0);
    run_cases(c, cases, seed++);
    Compute odd = build_compute(builtin_op(op), parse_param_overrides({"M=67", "N=33", "K=65"}));
    run_cases(odd, on_every_layout(odd, "wgmma_fp16_fp32", std::string(op) + " 67x33x65", 1e-2, {edits[0]}), seed++);
  }
  EXPECT_GT(transposed, 0) << "an A stored along m, read by ldmatrix.trans";
  for (const auto& [hw, in_t, out_t, tol] : std::vector<std::tuple<std::string, std::string, std::string, double>>{
           {"wgmma_bf16_fp32", "bfloat16", "float32", 1e-2},
           {"wgmma_tf32_fp32", "float32", "float32", 1e-2},
           {"wgmma_int8_int32", "int8", "int32", 0.0}}) {
    Compute c = typed_op("gemm_nt", in_t, out_t, {"M=300", "N=200", "K=192"});
    run_cases(c, on_every_layout(c, hw, hw + " gemm_nt", tol,
                                 {{"a_regs", regs([](ScheduleParams&) {})},
                                  {"a_regs persistent", regs([](ScheduleParams& p) { p.producer = 2; p.split_k = 1; })},
                                  {"a_regs gather wm 128", regs([](ScheduleParams& p) { p.producer = 0; p.warp_m = p.block_m = 128; p.warp_n = 64; p.block_n = 64; })}}),
              seed++);
  }
  // The input of a channels-last convolution as A, read in im2col boxes, then by ldmatrix.
  {
    Compute c = build_compute(builtin_op("conv2d_nhwc"),
                              parse_param_overrides({"N=2", "C=64", "H=15", "W=15", "K=96", "stride=2", "pad=1"}));
    MatchReport r = match_compute(c, {find_hw(shipped(), "wgmma_fp16_fp32")}, Enumeration::kAll);
    std::vector<GpuCase> cases;
    for (std::size_t i = 0; i < r.matches.size() && cases.empty(); ++i) {
      if (r.matches[i].roles.a_input != 0) continue;
      GpuCase gc = rs(full_mapping(c, "wgmma_fp16_fp32", "conv2d_nhwc im2col", 1e-2, i));
      gc.p.producer = 1;
      if (!validate(gc.g, gc.p, DeviceLimits::for_arch(90)).empty()) continue;
      cases = variants(gc, {{"persistent", [](ScheduleParams& p) { p.producer = 2; p.split_k = 1; }}});
    }
    EXPECT_FALSE(cases.empty()) << "an im2col input as A from registers";
    run_cases(c, cases, seed++);
  }
}

// The 64- and 32-byte swizzles (swizzle 2, 3): tiles gathered by every thread or boxed by TMA in
// those modes, the descriptors' layout types and SBO of 8 lines, MN-major operands with LBO from
// one block of 32 or 16 m (n) values to the next (a warp tile of 32 n is whole lines here), tails
// in M, N and K, persistent kernels, tf32 and int8, and im2col boxes of 32 and 16 channels (one
// line of the narrower modes, no 128-byte line for the widest).
TEST(Gpu, WgmmaNarrowSwizzles) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  if (device_cc() != 90) GTEST_SKIP() << "wgmma needs sm_90, the GPU is sm_" << device_cc();
  std::uint64_t seed = 2900;
  using Edit = std::pair<std::string, std::function<void(ScheduleParams&)>>;
  auto swizzled = [](int swizzle, int producer, int lines) {
    return [=](ScheduleParams& p) {
      p.swizzle = swizzle;
      p.block_k = (128 >> (swizzle - 1)) / 2 * lines;  // 16-bit operands
      p.producer = producer;
      p.split_k = 1;
    };
  };
  const std::vector<Edit> edits = {
      {"swizzle 2 gather", swizzled(2, 0, 1)},
      {"swizzle 3 gather bk x2", swizzled(3, 0, 2)},
      {"swizzle 2 tma bk x2", swizzled(2, 1, 2)},
      {"swizzle 3 tma", swizzled(3, 1, 1)},
      {"swizzle 2 persistent wn 32", [=](ScheduleParams& p) { swizzled(2, 2, 1)(p); p.warp_n = 32; p.block_n = 64; }},
      {"swizzle 3 persistent wn 16 wm 128",
       [=](ScheduleParams& p) { swizzled(3, 2, 1)(p); p.warp_n = 16; p.block_n = 32; p.warp_m = p.block_m = 128; }},
  };
  for (const char* op : {"gemm", "gemm_tn"}) {  // A and B each K-major or along m, n on some layout
    Compute c = build_compute(builtin_op(op), parse_param_overrides({"M=200", "N=136", "K=520"}));
    run_cases(c, on_every_layout(c, "wgmma_fp16_fp32", std::string(op) + " 200x136x520", 1e-2, edits), seed++);
  }
  // Short reductions: the default takes the narrowest line that holds K.
  for (const std::string k : {"K=16", "K=32"}) {
    Compute c = build_compute(builtin_op("gemm_nt"), parse_param_overrides({"M=300", "N=200", k}));
    const std::vector<GpuCase> cases = on_every_layout(c, "wgmma_fp16_fp32", "gemm_nt 300x200 " + k, 1e-2,
                                                       {{"default", [](ScheduleParams&) {}},
                                                        {"persistent", [](ScheduleParams& p) { p.producer = 2; }}});
    for (const GpuCase& gc : cases) EXPECT_EQ(gc.p.swizzle, k == "K=16" ? 3 : 2) << gc.label;
    run_cases(c, cases, seed++);
  }
  for (const auto& [hw, in_t, tol] : std::vector<std::tuple<std::string, std::string, double>>{
           {"wgmma_tf32_fp32", "float32", 1e-2}, {"wgmma_int8_int32", "int8", 0.0}}) {
    Compute c = typed_op("gemm_nt", in_t, in_t == "int8" ? "int32" : "float32", {"M=300", "N=200", "K=192"});
    const int bytes = in_t == "int8" ? 1 : 4;
    auto with = [=](int swizzle, int producer) {
      return [=](ScheduleParams& p) {
        p.swizzle = swizzle;
        p.block_k = (128 >> (swizzle - 1)) / bytes;
        p.producer = producer;
        p.split_k = 1;
      };
    };
    run_cases(c, on_every_layout(c, hw, hw + " gemm_nt", tol,
                                 {{"swizzle 2 tma", with(2, 1)}, {"swizzle 3 persistent", with(3, 2)},
                                  {"swizzle 3 gather", with(3, 0)}}),
              seed++);
  }
  // Im2col boxes of one narrower line of channels: 32 channels (64 bytes), 16 (32 bytes), in both
  // operand orders where a layout reads the input in im2col boxes.
  for (const auto& [channels, swizzle] : std::vector<std::pair<std::string, int>>{{"C=32", 2}, {"C=16", 3}}) {
    Compute c = build_compute(builtin_op("conv2d_nhwc"),
                              parse_param_overrides({"N=2", channels, "H=13", "W=11", "K=40", "stride=2", "pad=1"}));
    MatchReport r = match_compute(c, {find_hw(shipped(), "wgmma_fp16_fp32")}, Enumeration::kAll);
    std::vector<GpuCase> cases;
    for (std::size_t i = 0; i < r.matches.size(); ++i) {
      GpuCase gc = full_mapping(c, "wgmma_fp16_fp32", "conv2d_nhwc " + channels + " im2col", 1e-2, i);
      swizzled(swizzle, 1, 1)(gc.p);
      if (!validate(gc.g, gc.p, DeviceLimits::for_arch(90)).empty()) continue;
      for (GpuCase& v : variants(gc, {{"persistent", [](ScheduleParams& p) { p.producer = 2; }}})) cases.push_back(v);
    }
    EXPECT_GE(cases.size(), 2u) << channels << ": im2col boxes of one " << (128 >> (swizzle - 1)) << "-byte line";
    run_cases(c, cases, seed++);
  }
}

// Pairs of blocks sharing an operand tile by TMA multicast (cluster 2: along m, sharing B; 3:
// along n, sharing A), with and without the persistent loop, rasterized: GEMMs in all four
// layouts with M and N tails that leave the second block of the last pair partly or wholly past
// the output, a batched GEMM, the im2col convolutions (sharing the filters); persistent kernels
// whose consumers take registers from the producer (setmaxnreg), alone and paired, and kernels
// of one tile a block whose producer gives its registers and leaves (128 x 192 warpgroup tiles,
// single and in pairs). Then 4096^3
// GEMMs with float16 outputs, for a first look at the time (printed, not asserted).
TEST(Gpu, WgmmaClusterPairs) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  if (device_cc() != 90) GTEST_SKIP() << "wgmma needs sm_90, the GPU is sm_" << device_cc();
  std::uint64_t seed = 2600;
  using Edit = std::pair<std::string, std::function<void(ScheduleParams&)>>;
  auto tma = [](const Compute& c, const std::string& label) {
    MatchReport r = match_compute(c, {find_hw(shipped(), "wgmma_fp16_fp32")}, Enumeration::kAll);
    for (std::size_t i = 0; i < r.matches.size(); ++i) {
      GpuCase gc = full_mapping(c, "wgmma_fp16_fp32", label, 1e-2, i);
      gc.p.producer = 1;
      gc.p.split_k = 1;
      if (validate(gc.g, gc.p, DeviceLimits::for_arch(90)).empty()) return gc;
    }
    ADD_FAILURE() << label << ": no layout takes a TMA producer";
    return full_mapping(c, "wgmma_fp16_fp32", label, 1e-2);
  };
  auto pair = [](int cluster, int producer, int raster) {
    return [=](ScheduleParams& p) { p.cluster = cluster; p.producer = producer; p.raster = raster; };
  };
  const std::vector<Edit> gemm_edits = {
      {"pair m", pair(2, 1, 1)},
      {"pair n", pair(3, 1, 1)},
      {"pair m raster 3", pair(2, 1, 3)},
      {"pair m persistent", pair(2, 2, 1)},
      {"pair n persistent raster 2", pair(3, 2, 2)},
      {"pair m bm 64 stages 6", [](ScheduleParams& p) { p.cluster = 2; p.block_m = 64; p.stages = 6; }},
  };
  for (const char* op : {"gemm", "gemm_nt", "gemm_tn", "gemm_tt"}) {
    Compute c = build_compute(builtin_op(op), parse_param_overrides({"M=200", "N=136", "K=520"}));
    run_cases(c, variants(tma(c, std::string(op) + " 200x136x520"), gemm_edits), seed++);
  }
  {
    // M = 40: the second block of the pair lies wholly past the output rows (zero-filled boxes).
    Compute c = build_compute(builtin_op("gemm"), parse_param_overrides({"M=40", "N=200", "K=136"}));
    GpuCase base = tma(c, "gemm 40x200x136");
    base.p.block_m = 64;
    run_cases(c, variants(base, {{"pair m", pair(2, 1, 1)}, {"pair m persistent", pair(2, 2, 1)}}), seed++);
    Compute b = build_compute(builtin_op("batched_gemm"), parse_param_overrides({"BATCH=3", "M=72", "N=64", "K=200"}));
    run_cases(b, variants(tma(b, "batched_gemm 3x72x64x200"),
                          {{"pair m", pair(2, 1, 1)}, {"pair n persistent", pair(3, 2, 1)}}),
              seed++);
  }
  // Convolutions: the input read in im2col boxes, the filters (B) shared along m.
  for (const auto& sets : testing::im2col_conv_shapes()) {
    Compute c = build_compute(builtin_op("conv2d_nhwc"), parse_param_overrides(sets));
    GpuCase base = tma(c, "conv2d_nhwc " + sets[1] + " " + sets[5] + " im2col");
    run_cases(c, variants(base, {{"pair m", pair(2, 1, 1)},
                                 {"pair m persistent raster 2", pair(2, 2, 2)},
                                 {"pair m bm 64", [](ScheduleParams& p) { p.cluster = 2; p.block_m = 64; }}}),
              seed++);
  }
  // Consumers that take registers from the producer (3 of 64 x 192, 4 of 64 x 128), float16 out.
  const std::vector<Edit> rebalanced = {
      {"persistent 3 consumers 192x192", [](ScheduleParams& p) { p.producer = 2; p.block_m = 192; p.warp_m = 64; p.block_n = p.warp_n = 192; p.stages = 3; }},
      {"persistent 4 consumers 256x128", [](ScheduleParams& p) { p.producer = 2; p.block_m = 256; p.warp_m = 64; p.block_n = p.warp_n = 128; p.stages = 3; }},
      {"persistent 4 consumers 256x128 pair n", [](ScheduleParams& p) { p.producer = 2; p.block_m = 256; p.warp_m = 64; p.block_n = p.warp_n = 128; p.stages = 3; p.cluster = 3; }},
      // Without the persistent loop: the producer leaves, the epilogue is the consumers'.
      {"producer 1, 3 consumers 192x192", [](ScheduleParams& p) { p.producer = 1; p.block_m = 192; p.warp_m = 64; p.block_n = p.warp_n = 192; p.stages = 4; }},
      {"producer 1, 4 consumers 256x128", [](ScheduleParams& p) { p.producer = 1; p.block_m = 256; p.warp_m = 64; p.block_n = p.warp_n = 128; p.stages = 4; }},
      {"producer 1, 2 consumers 256x192", [](ScheduleParams& p) { p.producer = 1; p.block_m = 256; p.warp_m = 128; p.block_n = p.warp_n = 192; p.stages = 4; }},
      {"producer 1, 2 consumers 256x192 split_k 2", [](ScheduleParams& p) { p.producer = 1; p.block_m = 256; p.warp_m = 128; p.block_n = p.warp_n = 192; p.stages = 3; p.split_k = 2; }},
      {"producer 1, 2 consumers 256x192 pair m", [](ScheduleParams& p) { p.producer = 1; p.block_m = 256; p.warp_m = 128; p.block_n = p.warp_n = 192; p.stages = 4; p.cluster = 2; }},
      {"producer 1, 2 consumers 256x192 pair n", [](ScheduleParams& p) { p.producer = 1; p.block_m = 256; p.warp_m = 128; p.block_n = p.warp_n = 192; p.stages = 4; p.cluster = 3; }},
  };
  {
    Compute c = testing::stored_as_op("gemm", "float16", "float16", {"M=520", "N=400", "K=320"});
    run_cases(c, variants(tma(c, "gemm 520x400x320 float16 out"), rebalanced), seed++);
  }
  for (const char* op : {"gemm", "gemm_nt"}) {
    Compute c = testing::stored_as_op(op, "float16", "float16", {"M=4096", "N=4096", "K=4096"});
    GpuCase base = tma(c, std::string(op) + " 4096^3 float16 out");
    auto tile = [](ScheduleParams& p, int producer, int stages, int cluster, int raster) {
      p.block_m = 128; p.warp_m = 64; p.block_n = p.warp_n = 256;
      p.producer = producer; p.stages = stages; p.cluster = cluster; p.raster = raster;
    };
    std::vector<Edit> edits = {
        {"128x256", [&](ScheduleParams& p) { tile(p, 1, 4, 0, 1); }},
        {"128x256 pair m", [&](ScheduleParams& p) { tile(p, 1, 4, 2, 1); }},
        {"128x256 pair n", [&](ScheduleParams& p) { tile(p, 1, 4, 3, 1); }},
        {"128x256 persistent raster 8", [&](ScheduleParams& p) { tile(p, 2, 3, 0, 8); }},
        {"128x256 persistent raster 8 pair m", [&](ScheduleParams& p) { tile(p, 2, 3, 2, 8); }},
        {"128x256 persistent raster 8 pair n", [&](ScheduleParams& p) { tile(p, 2, 3, 3, 8); }},
        {"128x256 persistent pair m", [&](ScheduleParams& p) { tile(p, 2, 3, 2, 1); }},
    };
    edits.insert(edits.end(), rebalanced.begin(), rebalanced.end());
    run_cases(c, variants(base, edits), seed++);
  }
}

// Shifted vectors (an NCHW / NCW / NCDHW input copied along the output's width, padding and
// taps moving the start of each group, reads at both edges of the padding) and fused vectors
// (weights along (c, r, s); a 1x1 NCHW input along (p, q)), in both families and every main
// loop, against the reference.
TEST(Gpu, ShiftedAndFusedVectors) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  std::uint64_t seed = 900;
  const DeviceLimits limits = DeviceLimits::for_arch(device_cc());
  int shifted = 0, fused = 0;
  using Edit = std::pair<std::string, std::function<void(ScheduleParams&)>>;
  const std::vector<Edit> loops = {
      {"stages 2", [](ScheduleParams& p) { p.stages = 2; }},
      {"stages 3 bk 64", [](ScheduleParams& p) { p.stages = 3; p.block_k = 64; }},
      {"registers", [](ScheduleParams& p) { p.async_copy = 0; p.stages = 2; }},
      {"one buffer", [](ScheduleParams& p) { p.async_copy = 0; p.stages = 1; }},
      {"half vectors split 2", [](ScheduleParams& p) { p.vec_a = std::max(2, p.vec_a / 2); p.split_k = 2; }},
  };
  for (const auto& [op, sets] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"conv2d", {"N=2", "C=24", "H=11", "W=16", "K=40"}},
           {"conv2d", {"N=1", "C=16", "H=12", "W=12", "K=32", "R=5", "S=5", "pad=2"}},
           {"conv2d", {"N=2", "C=32", "H=12", "W=12", "K=48", "R=1", "S=1", "pad=0"}},
           {"conv1d", {"N=3", "C=40", "W=64", "K=48", "pad=2", "dil=2"}},
           {"conv1d", {"N=2", "C=24", "W=40", "K=32", "S=3", "pad=1"}},
           {"conv3d", {"N=2", "C=16", "D=5", "H=6", "W=8", "K=32"}}}) {
    Compute c = build_compute(builtin_op(op), parse_param_overrides(sets));
    std::vector<GpuCase> cases;
    for (const std::string hw : {"wmma_fp16_fp32", "mma_sync_fp16_fp32"}) {
      MatchReport r = match_compute(c, {find_hw(shipped(), hw)}, Enumeration::kAll);
      bool first = true;
      for (std::size_t i = 0; i < r.matches.size(); ++i) {
        GpuCase gc = full_mapping(c, hw, op + " " + sets[1] + " " + sets[4], 1e-2, i);
        const bool shift = copies_shifted(gc.g, gc.p, 0) || copies_shifted(gc.g, gc.p, 1);
        const bool fuse = !shift && (gc.p.vec_a > 1 || gc.p.vec_b > 1) &&
                          (gc.g.k_iters.size() > 1 || gc.g.m_iters.size() > 1);
        if (!shift && !fuse) continue;
        shifted += shift;
        fused += fuse;
        if (std::exchange(first, false)) {
          for (const GpuCase& v : variants(gc, loops)) cases.push_back(v);
        } else {
          cases.push_back(gc);
        }
      }
    }
    for (const auto& gc : cases) ASSERT_TRUE(validate(gc.g, gc.p, limits).empty()) << gc.label;
    run_cases(c, cases, seed++);
  }
  EXPECT_GE(shifted, 10);
  EXPECT_GE(fused, 2);
}

// wgmma's thread-gathered ring reading NCHW / NCW / NCDHW inputs in place in shifted vectors
// (padding and filter taps move each row's start off the vectors' alignment): every such layout,
// with 3 and 5 stages, split-K, A from registers and two consumers, fp16 and bf16.
TEST(Gpu, WgmmaShiftedVectors) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  if (device_cc() != 90) GTEST_SKIP() << "wgmma needs sm_90, the GPU is sm_" << device_cc();
  std::uint64_t seed = 6100;
  int runs = 0;
  for (const auto& [op, sets] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"conv2d", {"N=2", "C=24", "H=11", "W=16", "K=40"}},
           {"conv2d", {"N=1", "C=16", "H=12", "W=12", "K=32", "R=5", "S=5", "pad=2"}},
           {"conv1d", {"N=3", "C=40", "W=64", "K=48", "pad=2", "dil=2"}},
           {"conv1d", {"N=3", "C=64", "W=96", "K=72", "S=3", "pad=1"}},
           {"conv3d", {"N=2", "C=16", "D=5", "H=6", "W=8", "K=32"}}}) {
    for (const std::string hw_name : {"wgmma_fp16_fp32", "wgmma_bf16_fp32"}) {
      if (hw_name == "wgmma_bf16_fp32" && op != "conv1d") continue;
      const Compute c = hw_name == "wgmma_bf16_fp32" ? typed_op(op, "bfloat16", "float32", sets)
                                                     : build_compute(builtin_op(op), parse_param_overrides(sets));
      std::vector<GpuCase> cases;
      for (const auto& [label, gp] : testing::wgmma_shifted_schedules(c, find_hw(shipped(), hw_name)))
        cases.push_back({op + " " + sets[1] + " " + label, gp.first, gp.second, 1e-2});
      EXPECT_FALSE(cases.empty()) << op << " " << sets[1] << " " << hw_name << ": no layout copies shifted vectors";
      runs += static_cast<int>(cases.size());
      run_cases(c, cases, seed++);
    }
  }
  EXPECT_GE(runs, 30);
}

// Stride-2 inputs read along the output's width in strided vectors (two aligned vectors per
// group, every other element picked out in registers; padding and taps move the start): the
// families that gather tiles through threads, 1-, 2- and 4-byte elements, the main loops of one
// layout, and wgmma's ring with split-K and A from registers, against the reference.
TEST(Gpu, StridedVectors) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  std::uint64_t seed = 7300;
  const DeviceLimits limits = DeviceLimits::for_arch(device_cc());
  using Edit = std::pair<std::string, std::function<void(ScheduleParams&)>>;
  const std::vector<Edit> loops = {
      {"stages 2", [](ScheduleParams& p) { p.stages = 2; }},
      {"registers", [](ScheduleParams& p) { p.async_copy = 0; p.stages = 2; }},
      {"one buffer", [](ScheduleParams& p) { p.async_copy = 0; p.stages = 1; }},
      {"split 2", [](ScheduleParams& p) { p.split_k = 2; }},
  };
  int runs = 0;
  std::map<std::string, int> per_family;
  for (const auto& [op, sets] : testing::strided_conv_shapes()) {
    for (const auto& [hw_name, in_t, tolerance] : std::vector<std::tuple<std::string, std::string, double>>{
             {"mma_sync_fp16_fp32", "float16", 1e-2}, {"wmma_fp16_fp32", "float16", 1e-2},
             {"simt_fp32_fp32", "float32", 1e-5}, {"simt_int8_int32", "int8", 0.0},
             {"wgmma_fp16_fp32", "float16", 1e-2}}) {
      const HwAbstraction& hw = find_hw(shipped(), hw_name);
      if (hw.family == "wgmma" && device_cc() != 90) continue;
      const Compute c = typed_op(op, in_t, in_t == "int8" ? "int32" : "float32", sets);
      const std::string label = op + " " + sets[3] + " " + hw_name;
      std::vector<GpuCase> cases;
      if (hw.family == "wgmma") {
        for (const auto& [name, gp] : testing::wgmma_shifted_schedules(c, hw))
          if ((operand_contiguity(gp.first, 0).step == 2 || operand_contiguity(gp.first, 1).step == 2) &&
              (name.ends_with("shifted") || name.ends_with("split 2") || name.ends_with("a_regs")))
            cases.push_back({label + " " + name, gp.first, gp.second, tolerance});
      } else {
        MatchReport r = match_compute(c, {hw}, Enumeration::kAll);
        for (const Match& m : r.matches) {
          ImplicitGemm g = make_implicit_gemm(c, hw, m, m.mappings.back());
          const ScheduleParams d = default_schedule(g, limits);
          if (!(copies_strided(g, d, 0) || copies_strided(g, d, 1)) || cases.size() >= 2) continue;
          GpuCase gc{label + " " + m.layout + " " + m.shape.str(), g, d, tolerance};
          if (cases.empty() && hw_name == "mma_sync_fp16_fp32") {
            for (const GpuCase& v : variants(gc, loops)) cases.push_back(v);
          } else {
            cases.push_back(gc);
          }
        }
      }
      // A family's default schedule may gather a shape's input another way (SIMT blocks of one
      // output row for 2-D windows); each family must copy strided vectors for some shape.
      if (cases.empty()) continue;
      per_family[hw_name] += static_cast<int>(cases.size());
      runs += static_cast<int>(cases.size());
      run_cases(c, cases, seed++);
    }
  }
  EXPECT_EQ(per_family.size(), device_cc() == 90 ? 5u : 4u) << "every family copies strided vectors for some shape";
  EXPECT_GE(runs, 30);
}

// float32 sums stored as float16 or bfloat16 (--out-dtype), by both families, with vector and
// scalar epilogues and split-K, on GEMMs with tails and NCHW / NHWC convolutions with padding.
TEST(Gpu, NarrowOutputs) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  std::uint64_t seed = 700;
  for (const std::string out : {"float16", "bfloat16"})
    for (const auto& [op, sets] : std::vector<std::pair<std::string, std::vector<std::string>>>{
             {"gemm", {"M=200", "N=136", "K=520"}},
             {"conv2d", {"N=2", "C=64", "H=15", "W=15", "K=96", "stride=2", "pad=1"}},
             {"conv2d_nhwc", {"N=2", "C=64", "H=15", "W=15", "K=96", "stride=2", "pad=1"}}}) {
      Compute c = testing::narrowed_op(op, out, sets);
      std::vector<GpuCase> cases;
      for (const std::string hw : {"wmma_fp16_fp32", "mma_sync_fp16_fp32"}) {
        GpuCase base = full_mapping(c, hw, op + " -> " + out + " " + hw, 1e-2);
        for (GpuCase gc : variants(base, {{"split 3", [](ScheduleParams& p) { p.split_k = 3; }}})) cases.push_back(gc);
      }
      run_cases(c, cases, seed++);
    }
}

TEST(Gpu, TimingModes) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  Compute c = build_compute(builtin_op("gemm"), parse_param_overrides({"M=512", "N=512", "K=512"}));
  GpuCase gc = full_mapping(c, "wmma_fp16_fp32", "gemm 512^3", 1e-2);
  gc.p.split_k = 2;  // two launches per run: graphs and flushes cover the reduce kernel too
  NvrtcCompiler compiler(device_cc());
  Workspace ws(c, 400);
  std::vector<double> reference = gpu_reference(ws, compiler);
  KernelSource k = emit_kernel(gc.g, gc.p);
  CompileResult compiled = compiler.compile(k.code, k.name);
  ASSERT_TRUE(compiled.ok) << compiled.log;
  const int a = c.inputs[gc.g.a_input].tensor, b = c.inputs[gc.g.b_input].tensor;
  for (const auto& [label, timing] : std::vector<std::pair<std::string, TimingOptions>>{
           {"events", TimingOptions{}}, {"graph of 20", TimingOptions{3, 10, 20, 20, false}},
           {"events, cold L2", TimingOptions{3, 10, 20, 0, true}},
           {"graph of 20, cold L2 (flushes subtracted)", TimingOptions{3, 10, 20, 20, true}},
           {"long run: 3 event-timed repeats", TimingOptions{3, 10, 20, 20, false, 1e-3}},
           {"slow: one repeat", TimingOptions{3, 10, 20, 20, false, 0, 1e-3}}}) {
    KernelRun run = run_candidate(ws, reference, a, b, k, compiled.cubin, timing);
    ASSERT_TRUE(run.ok) << label << ": " << run.error;
    EXPECT_LT(run.rel_l2, 1e-2) << label;
    if (timing.long_run_ms > 0) EXPECT_EQ(run.times_us.size(), 3u) << label;
    else if (timing.slow_us > 0) EXPECT_EQ(run.times_us.size(), 1u) << label;
    else EXPECT_GE(run.times_us.size(), 10u) << label;
    EXPECT_GT(run.median_us, 0) << label;
    std::printf("%-20s median %8.2f us over %zu repeats\n", label.c_str(), run.median_us, run.times_us.size());
  }
}

TEST(Gpu, GemmShapesLayoutsAndDtypes) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  std::uint64_t seed = 200;
  {
    Compute c = build_compute(builtin_op("gemm"), parse_param_overrides({"M=17", "N=33", "K=65"}));
    std::vector<GpuCase> cases;
    for (std::size_t i = 0; i < 12; ++i) {  // every layout and shape (panels where rows misalign)
      GpuCase gc = full_mapping(c, "wmma_fp16_fp32", "gemm 17x33x65", 1e-2, i);
      gc.label += gc.p.panels ? " panels" : " rows";
      cases.push_back(gc);
      if (!gc.p.panels) {  // the panel layout must be right where rows are too
        gc.p.panels = 1;
        gc.label += "->panels";
        cases.push_back(gc);
      }
      // Scalar loads and rolled loops, where the default uses vectors and unrolls.
      gc.p.vec_a = gc.p.vec_b = 1;
      gc.p.unroll = 0;
      gc.label += " scalar";
      cases.push_back(gc);
    }
    run_cases(c, cases, seed++);
  }
  {
    // K = 64 and N = 36: 16-byte vectors of A, 8-byte of B, with tails in M; raster 2.
    Compute vc = build_compute(builtin_op("gemm"), parse_param_overrides({"M=100", "N=36", "K=64"}));
    GpuCase vector = full_mapping(vc, "wmma_fp16_fp32", "gemm 100x36x64 vectors", 1e-2);
    EXPECT_EQ(vector.p.vec_a, 8);
    EXPECT_EQ(vector.p.vec_b, 4);
    vector.p.block_n = vector.p.warp_n = 16;
    vector.p.raster = 2;
    vector.label += " raster 2";
    GpuCase async = vector, async1 = vector;
    async.p.async_copy = async1.p.async_copy = 1;
    async1.p.stages = 1;
    async.label += " cp.async";
    async1.label += " cp.async stages 1";
    GpuCase async3 = async, async4 = async;
    async3.p.stages = 3;
    async4.p.stages = 4;
    async3.label += " stages 3";
    async4.label += " stages 4";
    run_cases(vc, {vector, async, async1, async3, async4}, seed++);
    // Pipelines longer than the loop and much shorter: K = 520 is 17 steps of 32 with a tail; with
    // split_k 3 a block starts mid-way (first != 0) and runs 5 or 6 steps.
    Compute lk = build_compute(builtin_op("gemm"), parse_param_overrides({"M=100", "N=36", "K=520"}));
    GpuCase deep = full_mapping(lk, "wmma_fp16_fp32", "gemm 100x36x520 cp.async", 1e-2);
    deep.p.async_copy = 1;
    deep.p.block_k = 32;
    std::vector<GpuCase> deep_cases;
    for (int stages : {2, 3, 4})
      for (int split : {1, 3}) {
        GpuCase dc = deep;
        dc.p.stages = stages;
        dc.p.split_k = split;
        dc.label += " stages " + std::to_string(stages) + " split_k " + std::to_string(split);
        deep_cases.push_back(dc);
      }
    run_cases(lk, deep_cases, seed++);
    // A convolution whose padding makes cp.async zero-fill: NHWC layer 5, every operand vectorized.
    Compute conv = build_compute(builtin_op("conv2d_nhwc"));
    GpuCase cv = full_mapping(conv, "wmma_fp16_fp32", "conv2d_nhwc l5 cp.async", 1e-2);
    cv.p.async_copy = 1;
    GpuCase cv4 = cv;
    cv4.p.stages = 4;
    cv4.label += " stages 4";
    run_cases(conv, {cv, cv4}, seed++);
  }
  std::ifstream in(std::string(TMAP_SOURCE_DIR) + "/benchmarks/workloads/gemm.json");
  nlohmann::json table = nlohmann::json::parse(in);
  std::vector<std::vector<std::string>> shapes = {{"M=1000", "N=1000", "K=1000"}};
  for (const auto& s : table["shapes"])
    if (s["name"].get<std::string>().rfind("amos_", 0) == 0)
      shapes.push_back({"M=" + std::to_string(s["M"].get<int>()), "N=" + std::to_string(s["N"].get<int>()),
                        "K=" + std::to_string(s["K"].get<int>())});
  for (const auto& sets : shapes) {
    Compute c = build_compute(builtin_op("gemm"), parse_param_overrides(sets));
    run_cases(c, {full_mapping(c, "wmma_fp16_fp32", "gemm " + sets[0] + " " + sets[1] + " " + sets[2], 1e-2)}, seed++);
  }
  for (const auto& [hw, in_t, out_t, tol] : std::vector<std::tuple<std::string, std::string, std::string, double>>{
           {"wmma_fp16_fp16", "float16", "float16", 1e-2},
           {"wmma_bf16_fp32", "bfloat16", "float32", 1e-2},
           {"wmma_tf32_fp32", "float32", "float32", 1e-3},
           {"wmma_int8_int32", "int8", "int32", 0.0},
           {"wmma_int4_int32", "int4", "int32", 0.0},
           {"wmma_fp64_fp64", "float64", "float64", 1e-9}}) {
    for (const std::string op : {"gemm", "conv2d"}) {
      SourceText src("<" + op + ">", builtin_op_source(op));
      ComputeDef def = parse_compute_json(src, op);
      for (auto& t : def.tensors) t.dtype = *parse_dtype(t.name == "C" || t.name == "Out" ? out_t : in_t);
      Compute c = build_compute(def, parse_param_overrides(op == "gemm" ? std::vector<std::string>{"M=300", "N=200", "K=100"}
                                                                        : std::vector<std::string>{}));
      run_cases(c, {full_mapping(c, hw, hw + " " + op, tol)}, seed++);
    }
  }
}

}  // namespace
// Altered log records that validation accepts (record_mutations.h, the same draw as the CPU
// test TuneLog.AlteredRecordsThatValidationAcceptsStayInBounds) regenerate kernels that run
// correctly: every one against the reference on fresh inputs, outputs poisoned. Run under
// `compute-sanitizer --tool memcheck`, this is the memory check of #48's corpus.
TEST(GpuHostile, AlteredRecordsThatValidationAcceptsRunCorrectly) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  const LogContents log = parse_log_text(testing::altered_shipped_records(TMAP_SOURCE_DIR), "altered.jsonl");
  NvrtcCompiler compiler(device_cc());
  int ran = 0;
  for (const TuneRecord& r : log.records) {
    std::unique_ptr<Regenerated> g;
    try {
      g = std::make_unique<Regenerated>(regenerate(r, shipped(), device_cc()));
    } catch (const UserError&) {
      continue;
    }
    SCOPED_TRACE(candidate_label(r.candidate) + " of " + r.workload.compute.dump());
    Workspace ws(*g->compute, 500 + ran);
    const std::vector<double> reference = gpu_reference(ws, compiler);
    const CompileResult compiled = compiler.compile(g->kernel.code, g->kernel.name);
    ASSERT_TRUE(compiled.ok) << compiled.log;
    const Compute& c = *g->compute;
    const KernelRun run = run_candidate(ws, reference, c.inputs[g->gemm().a_input].tensor,
                                        c.inputs[g->gemm().b_input].tensor, g->kernel, compiled.cubin);
    ASSERT_TRUE(run.ok) << run.error;
    EXPECT_LT(run.rel_l2, verification_tolerance(*g->gemm().hw));
    ++ran;
  }
  std::printf("%zu altered records accepted, %d ran correctly\n", log.records.size(), ran);
  EXPECT_GT(ran, 10);
}

}  // namespace tmap
