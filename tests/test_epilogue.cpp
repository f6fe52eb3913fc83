// Fused epilogues (ir/epilogue.h): the text and its checks, the compute's round trip through
// logs, every function compiled on every family by NVRTC, and fused kernels on the GPU against
// the reference kernel, which computes the epilogue in double independently.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu_cases.h"
#include "test_util.h"
#include "tmap/codegen/emitter.h"
#include "tmap/codegen/reference_emitter.h"
#include "tmap/frontend/op_library.h"
#include "tmap/match/matcher.h"
#include "tmap/runtime/nvrtc_compiler.h"

namespace tmap {
namespace {

using testing::have_gpu;
using testing::shipped;
using testing::user_error_of;

Compute fused(const std::string& op, const std::string& out_dtype, const std::string& epilogue,
              const std::vector<std::string>& sets) {
  return testing::fused_op(op, out_dtype, epilogue, sets);
}

/// Every function, operator and kind of operand (per column, per tensor, full shape) at once.
const char* kEveryFunction =
    "Y[m, n] = clamp(gelu(C[m, n] * scale[n] + bias[n]), -6, 6.5) + silu(R[m, n]) - tanh(leaky_relu(C[m, n], 0.1)) * "
    "sigmoid(alpha[0]) + max(gelu_tanh(C[m, n]), min(relu(R[m, n]), 2.5)) / 3 - -0.25";

TEST(Epilogue, TextBuildsOperandsAndPrintsBack) {
  const Compute c = fused("gemm", "float16", kEveryFunction, {"M=96", "N=80", "K=64"});
  EXPECT_EQ(c.tensor_of(c.output).name, "Y");
  EXPECT_EQ(c.tensor_of(c.output).dtype, DType::kFloat16);
  EXPECT_EQ(c.accumulate, DType::kFloat32);
  EXPECT_EQ(c.epilogue.acc, "C");
  ASSERT_EQ(c.epilogue.operands.size(), 4u) << "scale, bias, R and alpha, each access once";
  const std::vector<std::pair<std::string, std::vector<std::int64_t>>> shapes = {
      {"scale", {80}}, {"bias", {80}}, {"R", {96, 80}}, {"alpha", {1}}};
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const Tensor& t = c.tensor_of(c.epilogue.operands[i]);
    EXPECT_EQ(t.name, shapes[i].first);
    EXPECT_EQ(t.shape, shapes[i].second) << t.name << ": the smallest shape its indices fit in";
    EXPECT_EQ(t.dtype, DType::kFloat16) << "undeclared operands take the output's dtype";
  }
  EXPECT_EQ(c.statement_text(), "C[m, n] += A[m, k] * B[k, n]");
  EXPECT_EQ(c.epilogue_text(),
            "Y[m, n] = clamp(gelu(C[m, n] * scale[n] + bias[n]), -6, 6.5) + silu(R[m, n]) - tanh(leaky_relu(C[m, n], "
            "0.10000000000000001)) * sigmoid(alpha[0]) + max(gelu_tanh(C[m, n]), min(relu(R[m, n]), 2.5)) / 3 - -0.25");
  // The text parses back to the same program: a log's record rebuilds to the same compute.
  const Compute again = rebuild_recorded_compute(to_json(c), workload_key(c), "record");
  EXPECT_EQ(to_json(again), to_json(c));
  EXPECT_EQ(again.epilogue, c.epilogue);
  EXPECT_EQ(again.tensors, c.tensors);
  // The epilogue is part of what a workload is.
  const Compute plain = testing::narrowed_op("gemm", "float16", {"M=96", "N=80", "K=64"});
  EXPECT_NE(workload_key(plain), workload_key(c));
  EXPECT_FALSE(to_json(plain).contains("epilogue"));
  // Its contraction alone is the op's own workload, whose tuned schedules a fused tune starts from.
  EXPECT_EQ(workload_key(contraction_of(c)), workload_key(plain));
  EXPECT_EQ(contraction_of(c).tensors, plain.tensors);
  EXPECT_EQ(workload_key(contraction_of(plain)), workload_key(plain));
}

TEST(Epilogue, ParenthesesKeepTheTree) {
  for (const std::string e : {"Y[m, n] = C[m, n] - (bias[n] - 1)", "Y[m, n] = C[m, n] / (2 * bias[n])",
                              "Y[m, n] = -(C[m, n] + 1) * 2", "Y[m, n] = (C[m, n] - 1) - 2",
                              "Y[m, n] = -2 * -C[m, n]", "Y[m, n] = 1e-3 * C[m, n] + 1.5e+2"}) {
    const Compute c = fused("gemm", "float32", e, {"M=16", "N=16", "K=16"});
    const Compute again = rebuild_recorded_compute(to_json(c), "", "record");
    EXPECT_EQ(again.epilogue.program, c.epilogue.program) << e << " printed as " << c.epilogue_text();
  }
  const Compute c = fused("gemm", "float32", "Y[m, n] = C[m, n] - (bias[n] - 1)", {"M=16", "N=16", "K=16"});
  EXPECT_EQ(c.epilogue_text(), "Y[m, n] = C[m, n] - (bias[n] - 1)");
}

TEST(Epilogue, DeclaredTensorsKeepTheirShapeAndDtype) {
  const Compute c = testing::build_json(R"json({
    "compute": "Out[n, k] += I[n, c] * W[k, c]",
    "params": {"N": 8, "C": 32, "K": 48},
    "tensors": {"I": {"shape": ["N", "C"], "dtype": "float16"}, "W": {"shape": ["K", "C"], "dtype": "float16"},
                "Out": {"shape": ["N", "K"], "dtype": "float32"},
                "Y": {"shape": ["N", "K"], "dtype": "bfloat16"}, "b": {"shape": [1, "K"], "dtype": "float32"}},
    "epilogue": "Y[n, k] = relu(Out[n, k] + b[0, k])"
  })json");
  EXPECT_EQ(c.tensor_of(c.output).name, "Y");
  EXPECT_EQ(c.tensor_of(c.output).dtype, DType::kBFloat16);
  EXPECT_EQ(c.accumulate, DType::kFloat32);
  ASSERT_EQ(c.epilogue.operands.size(), 1u);
  EXPECT_EQ(c.tensor_of(c.epilogue.operands[0]).dtype, DType::kFloat32);
  EXPECT_EQ(c.tensor_of(c.epilogue.operands[0]).shape, (std::vector<std::int64_t>{1, 48}));
  EXPECT_EQ(to_json(rebuild_recorded_compute(to_json(c), workload_key(c), "record")), to_json(c));
}

TEST(Epilogue, MistakesAreNamedWithTheFix) {
  const std::vector<std::string> gemm = {"M=16", "N=24", "K=16"};
  auto error = [&](const std::string& e, const std::string& out = "float32") {
    return user_error_of([&] { fused("gemm", out, e, gemm); });
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"Y[m, n] = relu(C[m, n], 2)", "'relu' takes 1 argument, not 2"},
      {"Y[m, n] = swish(C[m, n])", "'swish' is neither a function nor a tensor access"},
      {"Y[m, n] = C[m, n] + b[k]", "'k' in index 0 of 'b' is a reduction iterator"},
      {"Y[m, n] = C[m, n] + b[q]", "'q' in index 0 of 'b' is not an iterator"},
      {"Y[n, m] = C[m, n]", "is not indexed as the contraction's output"},
      {"Y[m, n] = C[n, m]", "reads 'C' at other indices"},
      {"Y[m, n] = bias[n]", "does not read the contraction's value"},
      {"Y[m, n] = C[m, n] + A[m, 0]", "'A' is an input of the contraction"},
      {"Y[m, n] = C[m, n] + Y[m, n]", "reads its own result"},
      {"C[m, n] = relu(C[m, n])", "writes 'C', the contraction's own output"},
      {"Y[m, n] = C[m, n] * 1e39", "beyond float32's range"},
      {"Y[m, n] = C[m, n] * 1.5.2", "malformed number"},
      {"Y[m, n] = C[m, n] + b[m - 1]", "ranges over [-1, 14]"},
      {"Y[m, n] relu(C[m, n])", "expected '=' after the epilogue's result"},
      {"Y[m, n] = C[m, n] +", "expected a number, a tensor access"},
  };
  for (const auto& [text, expected] : cases) EXPECT_NE(error(text).find(expected), std::string::npos) << text << "\n" << error(text);
  EXPECT_NE(user_error_of([&] { fused("gemm", "int32", "Y[m, n] = C[m, n]", gemm); }).find("float16, bfloat16 or float32"),
            std::string::npos);
  const std::string declared = user_error_of([] {
    testing::build_json(R"json({"compute": "C[m, n] += A[m, k] * B[k, n]", "params": {"M": 16, "N": 8, "K": 4},
      "tensors": {"A": {"shape": ["M", "K"], "dtype": "float16"}, "B": {"shape": ["K", "N"], "dtype": "float16"},
                  "C": {"shape": ["M", "N"], "dtype": "float32"}, "Y": {"shape": ["M"], "dtype": "float16"}},
      "epilogue": "Y[m, n] = C[m, n]"})json");
  });
  EXPECT_NE(declared.find("the epilogue's result 'Y' is declared [16], but the contraction's output 'C' is [16, 8]"),
            std::string::npos) << declared;
  std::string many = "Y[m, n] = C[m, n]";
  for (int i = 0; i < 9; ++i) many += " + t" + std::to_string(i) + "[n]";
  EXPECT_NE(error(many).find("more than 8 tensor accesses"), std::string::npos);
  std::string deep = "Y[m, n] = C[m, n]";
  for (int i = 0; i < 300; ++i) deep += " + 1";
  EXPECT_NE(error(deep).find("more than 256 terms"), std::string::npos);
}

TEST(Epilogue, AlteredRecordsAreRefused) {
  const Compute c = fused("gemm", "float16", "Y[m, n] = relu(C[m, n] + bias[n])", {"M=32", "N=32", "K=32"});
  const nlohmann::json good = to_json(c);
  auto refused = [&](const std::function<void(nlohmann::json&)>& alter) {
    nlohmann::json j = good;
    alter(j);
    return user_error_of([&] { rebuild_recorded_compute(j, "", "record"); });
  };
  EXPECT_NE(refused([](auto& j) { j["epilogue"]["program"][0][0] = 99; }).find("an unknown operation"), std::string::npos);
  EXPECT_NE(refused([](auto& j) { j["epilogue"]["program"][1][1] = 7; }).find("operand 7 of 1"), std::string::npos);
  EXPECT_NE(refused([](auto& j) { j["epilogue"]["program"].erase(2); }).find("leaves 2 values"), std::string::npos);
  EXPECT_NE(refused([](auto& j) { j["epilogue"]["program"][0][2] = 1e300; }).find("record"), std::string::npos);
  // A bias read past its end: a well-formed document whose compute does not build.
  EXPECT_NE(refused([](auto& j) { j["epilogue"]["operands"][0]["indices"][0]["constant"] = 5; }).find("not one tmap builds"),
            std::string::npos);
  // Renaming the sums builds, but is another workload than the record's key says.
  nlohmann::json renamed = good;
  renamed["epilogue"]["acc"] = "Q";
  EXPECT_NE(user_error_of([&] { rebuild_recorded_compute(renamed, workload_key(c), "record"); }).find("is not its compute's"),
            std::string::npos);
}

/// Kernels of `c` for each family: the default schedule of the first full mapping, and variants
/// (split-K summed by a reduce kernel, by the tile's last block and in a cluster, wgmma's
/// producer, persistent and ping-pong, with vector or TMA stores, a residual asked of L2 at the
/// tile's start, the epilogue applied to the accumulators) where valid.
std::vector<testing::GpuCase> family_cases(const Compute& c, const std::string& label, int cc) {
  std::vector<testing::GpuCase> out;
  for (const std::string hw_name : {"wmma_fp16_fp32", "mma_sync_fp16_fp32", "wgmma_fp16_fp32", "simt_fp16_fp32"}) {
    if (cc < 90 && hw_name.rfind("wgmma", 0) == 0) continue;
    const HwAbstraction& hw = find_hw(shipped(), hw_name);
    static std::vector<MatchReport> keep;
    keep.push_back(match_compute(c, {hw}, Enumeration::kAll));
    if (keep.back().matches.empty()) continue;
    const Match& m = keep.back().matches.front();
    const ImplicitGemm g = make_implicit_gemm(c, hw, m, m.mappings.back());
    const DeviceLimits limits = DeviceLimits::for_arch(cc);
    const ScheduleParams base = default_schedule(g, limits);
    std::vector<std::pair<std::string, ScheduleParams>> schedules = {{"default", base}};
    ScheduleParams split = base;
    split.split_k = 2;
    schedules.push_back({"split_k 2", split});
    ScheduleParams last_block = split;
    last_block.split_reduce = 1;
    schedules.push_back({"split_k 2 summed by the last block", last_block});
    if (cc >= 90) {
      ScheduleParams cluster = split;
      cluster.cluster = 1;
      schedules.push_back({"split_k 2 in a cluster", cluster});
    }
    if (hw_name.rfind("wgmma", 0) == 0) {
      ScheduleParams producer = base;
      producer.producer = 1;
      schedules.push_back({"producer", producer});
      ScheduleParams persistent = base;  // its epilogue loads operands the same along the loop once
      persistent.producer = 2;
      schedules.push_back({"persistent", persistent});
      ScheduleParams streamed = persistent;  // the epilogue once a tile, by the block that finishes it
      streamed.stream_k = 1;
      schedules.push_back({"stream-K", streamed});
      ScheduleParams ping_pong = base;  // two consumers' epilogues, each over its own tile
      ping_pong.producer = 3;
      ping_pong.block_m = ping_pong.warp_m;
      ping_pong.block_n = ping_pong.warp_n;
      schedules.push_back({"ping-pong", ping_pong});
      // Two consumers of 128 x 192 with the producer's registers: their epilogue without it.
      ScheduleParams wide = producer;
      wide.block_m = 256;
      wide.warp_m = 128;
      wide.block_n = wide.warp_n = 192;
      wide.stages = 3;
      schedules.push_back({"producer, 128 x 192 warpgroups", wide});
      wide.split_k = 2;
      schedules.push_back({"producer, 128 x 192 warpgroups, split_k 2", wide});
      // TMA stores: the epilogue applied to the epilogue tile in place before the tile is stored.
      for (ScheduleParams tma : {persistent, ping_pong, streamed}) {
        tma.bulk_store = 2;
        schedules.push_back({tma.producer == 3 ? "ping-pong, TMA stores"
                             : tma.stream_k ? "stream-K, TMA stores"
                                            : "persistent, TMA stores",
                             tma});
      }
    }
    const std::size_t plain = schedules.size();
    for (std::size_t i = 0; i < plain; ++i) {
      ScheduleParams prefetch = schedules[i].second;
      prefetch.epi_prefetch = 1;
      schedules.push_back({schedules[i].first + ", residual prefetched", prefetch});
      ScheduleParams on_acc = schedules[i].second;
      on_acc.epi_regs = 1;
      schedules.push_back({schedules[i].first + ", epilogue on the accumulators", on_acc});
    }
    for (const auto& [what, p] : schedules)
      if (validate(g, p, limits).empty()) out.push_back({label + " " + hw_name + " " + what, g, p, 1e-2});
  }
  return out;
}

/// The fused computes the tests run: every function on a GEMM, a convolution's bias, residual and
/// ReLU in NHWC (vector stores along the channels) and NCHW (along the image).
std::vector<std::pair<std::string, Compute>> fused_computes() {
  return {{"gemm every function", fused("gemm", "float16", kEveryFunction, {"M=96", "N=80", "K=64"})},
          {"conv2d_nhwc bias residual relu",
           fused("conv2d_nhwc", "float16", "Y[n, p, q, k] = relu(Out[n, p, q, k] * s[k] + b[k] + R[n, p, q, k])",
                 {"N=2", "C=32", "H=9", "W=9", "K=64"})},
          {"conv2d bias silu", fused("conv2d", "bfloat16", "Y[n, k, p, q] = silu(Out[n, k, p, q] + b[k])",
                                     {"N=2", "C=32", "H=8", "W=16", "K=48"})},
          // Per-row and per-tensor operands only: applied to the accumulators (M = 96 leaves a
          // partial tile, whose TMA boxes are clamped to end at M).
          {"gemm per-row scale bias relu",
           fused("gemm", "float16", "Y[m, n] = relu(C[m, n] * s[m] + b[m]) * alpha[0]", {"M=96", "N=80", "K=64"})},
          // A per-row scale and a per-column bias: on the accumulators too, rows and columns
          // loaded (N = 80 leaves a partial tile along n).
          {"gemm per-row scale per-column bias gelu",
           fused("gemm", "float16", "Y[m, n] = gelu(C[m, n] * s[m] + b[n])", {"M=96", "N=80", "K=64"})}};
}

TEST(Epilogue, EveryFunctionCompilesOnEveryFamily) {
  std::vector<std::string> failures;
  std::size_t kernels = 0;
  std::vector<std::string> families_seen;
  int tma_stores = 0;  // wgmma kernels that apply the epilogue in their epilogue tile
  int consumers_alone = 0;  // wgmma kernels whose producer leaves before the epilogue
  for (int cc : {80, 90}) {
    NvrtcCompiler compiler(cc);
    std::vector<CompileJob> jobs;
    std::vector<std::string> labels;
    for (const auto& [label, c] : fused_computes()) {
      const KernelSource ref = emit_reference_kernel(c);
      jobs.push_back({ref.name, ref.code});
      labels.push_back(label + " reference");
      for (const auto& gc : family_cases(c, label, cc)) {
        const KernelSource k = emit_kernel(gc.g, gc.p);
        EXPECT_EQ(k.epilogue_operands, static_cast<int>(c.epilogue.operands.size()));
        EXPECT_NE(k.code.find("struct Output"), std::string::npos) << gc.label;
        jobs.push_back({k.name, k.code});
        labels.push_back(gc.label + " sm_" + std::to_string(cc));
        if (cc == 90) families_seen.push_back(gc.g.hw->family);
        if (gc.p.bulk_store == 2) ++tma_stores;
        if (gc.p.warp_m == 128 && gc.p.warp_n == 192) {
          ++consumers_alone;
          EXPECT_NE(k.code.find("(THREADS - 128)"), std::string::npos) << gc.label;
        }
      }
    }
    kernels += jobs.size();
    for (const auto& [i, r] : testing::compile_sweep(compiler, jobs))
      if (!r.ok) failures.push_back(labels[i] + ":\n" + r.log.substr(0, 3000));
  }
  for (const std::string f : {"wmma", "mma_sync", "wgmma", "simt"})
    EXPECT_NE(std::find(families_seen.begin(), families_seen.end(), f), families_seen.end()) << f << " not compiled";
  EXPECT_GE(kernels, 30u);
  EXPECT_GE(tma_stores, 4) << "the GEMM's and the NHWC convolution's, persistent and ping-pong";
  EXPECT_GE(consumers_alone, 4) << "a GEMM's and a convolution's, whole and split";
  EXPECT_TRUE(failures.empty()) << failures.size() << " failed, first: " << failures.front();
}

// Where a wgmma block has the SM to itself (persistent, or too much shared memory for two), its
// epilogue loads a per-channel scale and bias once per thread (and converts them to float once),
// before the main loop so that the loads' latency hides behind it, and a residual a chunk of
// vectors ahead of the stores. Blocks that may share the SM keep loading every operand per vector,
// which holds no registers across the loop.
TEST(Epilogue, OperandsTheSameAlongTheLoopAreLoadedOnce) {
  // A GEMM's per-column scale and bias, a per-tensor alpha, and a full-shape R (outputs stored in
  // vectors along n); a convolution's per-channel s and b and full-shape R (along the channels).
  const std::vector<std::pair<std::string, Compute>> computes = {
      {"gemm", fused("gemm", "float16", "Y[m, n] = relu(C[m, n] * scale[n] + bias[n] + R[m, n]) * alpha[0]",
                     {"M=96", "N=80", "K=64"})},
      fused_computes()[1]};
  const std::vector<std::vector<std::string>> fixed = {{"scale", "bias", "alpha"}, {"s", "b"}};
  std::size_t hoisting = 0, per_vector = 0;
  for (std::size_t i = 0; i < computes.size(); ++i)
    for (const auto& gc : family_cases(computes[i].second, computes[i].first, 90)) {
      if (gc.p.split_k > 1) continue;
      const std::string code = emit_kernel(gc.g, gc.p).code;
      if (code.find("store_d_vec") == std::string::npos) continue;  // outputs stored one by one
      ASSERT_NE(code.find("struct EpiVec"), std::string::npos) << gc.label;
      for (const std::string& t : fixed[i])
        EXPECT_NE(code.find("// " + t + ": the same along the loop"), std::string::npos) << gc.label << " " << t;
      EXPECT_EQ(code.find("// R: the same along the loop"), std::string::npos) << gc.label;
      const bool hoists = code.find("fixed = epi_fixed(epi_early);") != std::string::npos;
      if (hoists) {
        EXPECT_EQ(gc.g.hw->family, "wgmma") << gc.label;
        // The kernel loads them before its main loop, whose end is the wait for its last wgmmas,
        // not when the epilogue starts.
        const std::size_t body = code.find("__global__"), load = code.find("epi_load(out, m0 + mm, n0 + nn, z, epi_early, 1);");
        ASSERT_NE(load, std::string::npos) << gc.label;
        EXPECT_LT(body, load) << gc.label;
        EXPECT_LT(load, code.find("wgmma_wait<0>();", body)) << gc.label;
        // Converted to float once, before the loop: EpiFixed holds a float array of each of them,
        // and the stores read them from there.
        const std::size_t at = code.find("struct EpiFixed {");
        ASSERT_NE(at, std::string::npos) << gc.label;
        const std::string fields = code.substr(at, code.find("};", at) - at);
        std::size_t floats = 0;
        for (std::size_t f = fields.find("  float epi_"); f != std::string::npos; f = fields.find("  float epi_", f + 1))
          ++floats;
        EXPECT_EQ(floats, fixed[i].size()) << gc.label;
        EXPECT_NE(code.find("(use_f ? f.epi_"), std::string::npos) << gc.label;
      }
      if (gc.g.hw->family == "wgmma" && gc.p.producer >= 2) EXPECT_TRUE(hoists) << gc.label << ": persistent";
      ++(hoists ? hoisting : per_vector);
    }
  EXPECT_GE(hoisting, 1u);
  EXPECT_GE(per_vector, 4u);
}

// epi_prefetch asks L2 for the operands of the output's shape (R), never for per-channel or
// per-tensor ones, and only where the tile's sums reach the epilogue in the same block.
TEST(Epilogue, AResidualIsAskedOfL2WhenTheTileStarts) {
  std::size_t prefetching = 0;
  for (const auto& [label, c] : fused_computes()) {
    const bool residual = label.find("residual") != std::string::npos || label.find("every") != std::string::npos;
    for (const auto& gc : family_cases(c, label, 90)) {
      const std::string code = emit_kernel(gc.g, gc.p).code;
      const bool asks = code.find("epi_prefetch_l2(out.") != std::string::npos;
      EXPECT_EQ(asks, gc.p.epi_prefetch == 1) << gc.label;
      if (!asks) continue;
      ++prefetching;
      EXPECT_TRUE(residual) << gc.label;
      EXPECT_EQ(gc.p.split_k, 1) << gc.label;
      EXPECT_NE(code.find("// R, "), std::string::npos) << gc.label << ": R is the one operand of the output's shape";
      for (const std::string other : {"// s, ", "// b, ", "// scale, ", "// bias, ", "// alpha, "})
        EXPECT_EQ(code.find(other), std::string::npos) << gc.label << " " << other;
    }
  }
  EXPECT_GE(prefetching, 6u) << "every family, both computes with a residual";
  // Refused, with the reason, where nothing would be asked for.
  const auto [label, c] = fused_computes()[2];  // a bias only
  for (const auto& gc : family_cases(c, label, 90)) {
    EXPECT_EQ(gc.p.epi_prefetch, 0) << gc.label;
    ScheduleParams p = gc.p;
    p.epi_prefetch = 1;
    const std::vector<ScheduleIssue> issues = validate(gc.g, p, DeviceLimits::for_arch(90));
    std::string why;
    for (const ScheduleIssue& i : issues) why += i.detail + "\n";
    EXPECT_NE(why.find(p.split_k > 1 ? "split sums reach the epilogue later" : "no epilogue operand of the output's shape"),
              std::string::npos) << gc.label << ": " << why;
    EXPECT_NE(why.find("use epi_prefetch 0"), std::string::npos) << why;
  }
}

// epi_regs 1: where every operand varies along m or along n, not both, wgmma and mma_sync kernels whose whole
// sum is in the block apply the epilogue to their accumulators, in float32 before the one
// rounding, and store the epilogue tile as it is; wgmma kernels load the per-row operands before
// their main loop. Refused, with the reason, for split sums,
// other families and operands along both m and n (a residual).
TEST(Epilogue, PerRowOperandsAreAppliedToTheAccumulators) {
  std::size_t applied = 0;
  const DeviceLimits limits = DeviceLimits::for_arch(90);
  for (const auto& [label, c] : fused_computes()) {
    const bool per_row = label.find("per-row") != std::string::npos;
    const bool full_shape = label.find("every") != std::string::npos || label.find("residual") != std::string::npos;
    const bool per_column = label.find("per-column") != std::string::npos;
    for (const auto& gc : family_cases(c, label, 90)) {
      const std::string code = emit_kernel(gc.g, gc.p).code;
      const bool on_acc = code.find("// The epilogue applied to the accumulators") != std::string::npos;
      EXPECT_EQ(on_acc, gc.p.epi_regs == 1) << gc.label;
      if (gc.p.epi_regs == 0) {
        // Offered where it would hold: the same schedule with epi_regs 1 validates or says why not.
        ScheduleParams p = gc.p;
        p.epi_regs = 1;
        std::string why;
        for (const ScheduleIssue& i : validate(gc.g, p, limits)) why += i.detail + "\n";
        const bool family = gc.g.hw->family == "wgmma" || gc.g.hw->family == "mma_sync";
        const bool whole_sum = gc.p.split_k == 1 && gc.p.stream_k == 0;
        if (!family || !whole_sum || full_shape) EXPECT_FALSE(why.empty()) << gc.label;
        if (!full_shape && family && whole_sum) EXPECT_EQ(why, "") << gc.label;
        if (full_shape && family) EXPECT_NE(why.find("varies along both m and n"), std::string::npos) << gc.label << ": " << why;
        if (!why.empty() && family) EXPECT_NE(why.find("use epi_regs 0"), std::string::npos) << why;
        continue;
      }
      ++applied;
      EXPECT_FALSE(full_shape) << gc.label;
      // Each operand loaded inside the output only: two rows a thread per m16 tile (s, and b
      // where it is per row) or two columns per n8 quad (a per-column b; a convolution's
      // per-channel one where the channels are n).
      for (int i = 0; i < static_cast<int>(c.epilogue.operands.size()); ++i) {
        const std::string x = "epi_" + std::to_string(i);
        const bool rows = code.find(x + "_rows[i][h] = m < M ? (float)__ldg(out." + x) != std::string::npos;
        const bool cols = code.find(x + "_cols[w] = n < N ? (float)__ldg(out." + x) != std::string::npos;
        EXPECT_NE(rows, cols) << gc.label << " " << x;
        if (per_row && i == 0) EXPECT_TRUE(rows) << gc.label;
        if (per_column && i == 1) EXPECT_TRUE(cols) << gc.label;
        // A wgmma kernel loads its rows' operands before the main loop (whose end waits for the last wgmmas).
        if (rows && gc.g.hw->family == "wgmma")
          EXPECT_LT(code.find(x + "_rows[i][h] = m < M"), code.find("wgmma_wait<0>();", code.find("__global__"))) << gc.label;
      }
      // The stores copy the tile: no operand loads, no in-place pass before TMA stores.
      EXPECT_EQ(code.find("epi_load(out, m0"), std::string::npos) << gc.label;
      EXPECT_EQ(code.find("epi_in_place("), std::string::npos) << gc.label;
      if (gc.p.bulk_store != 2) EXPECT_NE(code.find("store_d_vec(out.data, m0 + mm"), std::string::npos) << gc.label;
    }
  }
  EXPECT_GE(applied, 6u) << "mma_sync, wgmma with and without a producer, persistent, ping-pong, TMA stores";
}

TEST(GpuEpilogue, FusedKernelsMatchTheReference) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  std::uint64_t seed = 4900;
  for (const auto& [label, c] : fused_computes()) {
    const std::vector<testing::GpuCase> cases = family_cases(c, label, testing::device_cc());
    EXPECT_GE(cases.size(), 4u) << label;
    testing::run_cases(c, cases, seed++);
  }
}

}  // namespace
}  // namespace tmap
