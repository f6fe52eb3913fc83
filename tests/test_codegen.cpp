// Code generation without a GPU: schedule validation reasons, and NVRTC compiles the kernel of
// every mapping, layout, shape and dtype family for sm_80 and sm_90.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <iterator>
#include <sys/stat.h>
#include <unistd.h>
#include <iostream>
#include <memory>
#include <set>
#include <thread>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tmap/codegen/reference_emitter.h"
#include "tmap/codegen/emitter.h"
#include "tmap/frontend/op_library.h"
#include "tmap/runtime/kernel_runner.h"
#include "tmap/runtime/launch.h"
#include "tmap/runtime/nvrtc_compiler.h"

namespace tmap {
namespace {

using testing::user_error_of;

using testing::shipped;
using testing::validation_text;

struct Job {
  std::string label;
  KernelSource kernel;
};

/// Compiles the jobs for each architecture (sm_90 as sm_90a) on all cores, the share of each that
/// testing::sweep_compiles gives it; returns the failures.
std::vector<std::string> compile_all(const std::vector<Job>& jobs, const std::vector<int>& archs = {80, 90}) {
  std::vector<CompileJob> sources;
  for (const Job& j : jobs) sources.push_back({j.kernel.name, j.kernel.code});
  std::vector<std::string> out;
  for (std::size_t a = 0; a < archs.size(); ++a) {
    const int cc = archs[a];
    NvrtcCompiler compiler(cc);
    const auto results = testing::compile_sweep(compiler, sources, a, archs.size());
    if (results.empty()) continue;
    double total = 0;
    for (const auto& [i, r] : results) {
      total += r.seconds;
      if (!r.ok) out.push_back(jobs[i].label + " sm_" + std::to_string(cc) + ":\n" + r.log);
    }
    std::cout << "sm_" << cc << ": " << results.size() << " kernels, " << total / results.size() << " s each on average\n";
  }
  return out;
}

/// One virtual GEMM per match of abstraction `hw_name` on `c` (each match's last mapping, or its
/// first that `pick` takes), in the matcher's order, in the written operand order only (the
/// swapped order's kernels are compiled by tests/test_coverage.cpp) or with input `a_input` as A;
/// `c` must outlive them.
std::vector<ImplicitGemm> gemm_per_match(const Compute& c, const std::string& hw_name, int a_input = -1,
                                         const std::function<bool(const Mapping&)>& pick = nullptr) {
  const HwAbstraction& hw = find_hw(shipped(), hw_name);
  std::vector<ImplicitGemm> out;
  const MatchReport r = match_compute(c, {hw}, Enumeration::kAll);
  if (a_input < 0 && !r.matches.empty()) a_input = r.matches.front().roles.a_input;
  for (const Match& m : r.matches) {
    if (m.roles.a_input != a_input) continue;
    const auto it = pick ? std::find_if(m.mappings.begin(), m.mappings.end(), pick) : m.mappings.end() - 1;
    if (it != m.mappings.end()) out.push_back(make_implicit_gemm(c, hw, m, *it));
  }
  return out;
}

/// A built-in op with its inputs' and output's dtypes replaced, kept alive in `keep`.
const Compute& typed_compute(std::vector<std::unique_ptr<Compute>>& keep, const std::string& op,
                             const std::string& in_t, const std::string& out_t, const std::vector<std::string>& sets) {
  SourceText src("<" + op + ">", builtin_op_source(op));
  ComputeDef def = parse_compute_json(src, op);
  for (auto& t : def.tensors) t.dtype = *parse_dtype(t.name == "C" || t.name == "Out" ? out_t : in_t);
  keep.push_back(std::make_unique<Compute>(build_compute(def, parse_param_overrides(sets))));
  return *keep.back();
}

/// testing::stored_as_op(), kept alive in `keep`.
const Compute& stored_as(std::vector<std::unique_ptr<Compute>>& keep, const std::string& op, const std::string& in_t,
                         const std::string& out_t, const std::vector<std::string>& sets) {
  keep.push_back(std::make_unique<Compute>(testing::stored_as_op(op, in_t, out_t, sets)));
  return *keep.back();
}

/// Two schedules per candidate: the default and a different valid one, when there is one.
std::vector<ScheduleParams> schedules_for(const ImplicitGemm& g) {
  DeviceLimits limits = DeviceLimits::for_arch(80);
  ScheduleParams d = default_schedule(g, limits);
  std::vector<ScheduleParams> out = {d};
  ScheduleParams alt = d;
  alt.stages = 3 - d.stages;
  alt.block_m = d.warp_m * 2;
  alt.block_n = d.warp_n;
  alt.unroll = 0;
  alt.raster = 4;
  alt.vec_a = alt.vec_a > 1 ? alt.vec_a / 2 : 1;  // a narrower vector where there is one
  if (validate(g, alt, limits).empty() && !(alt == d)) out.push_back(alt);
  return out;
}

/// Kernels for every mapping of one match under `all`, and for every layout and shape of the
/// first mapping; candidates whose schedule is invalid for alignment are counted, not compiled.
void add_jobs(const std::string& op_name, const std::vector<std::string>& sets, const std::string& hw_name,
              std::vector<Job>& jobs, std::vector<std::unique_ptr<Compute>>& keep, int& rejected) {
  keep.push_back(std::make_unique<Compute>(build_compute(builtin_op(op_name), parse_param_overrides(sets))));
  const Compute& c = *keep.back();
  const HwAbstraction& hw = find_hw(shipped(), hw_name);
  MatchReport r = match_compute(c, {hw}, Enumeration::kAll);
  ASSERT_FALSE(r.matches.empty()) << op_name;
  auto add = [&](const Match& m, const Mapping& map) {
    ImplicitGemm g = make_implicit_gemm(c, hw, m, map);
    for (const ScheduleParams& p : schedules_for(g)) {
      if (!validate(g, p, DeviceLimits::for_arch(80)).empty()) {
        ++rejected;
        continue;
      }
      jobs.push_back({op_name + " " + m.layout + " " + m.shape.str() + " mapping " + std::to_string(map.id),
                      emit_kernel(g, p)});
    }
  };
  for (const auto& map : r.matches[0].mappings) add(r.matches[0], map);
  for (std::size_t i = 1; i < r.matches.size(); ++i) add(r.matches[i], r.matches[i].mappings[0]);
}

TEST(Codegen, EveryMappingCompilesWithNvrtc) {
  std::vector<Job> jobs;
  std::vector<std::unique_ptr<Compute>> keep;
  int rejected = 0;
  add_jobs("conv2d", {}, "wmma_fp16_fp32", jobs, keep, rejected);
  add_jobs("conv2d_nhwc", {"N=2", "stride=2"}, "wmma_fp16_fp32", jobs, keep, rejected);
  add_jobs("gemm", {"M=17", "N=33", "K=65"}, "wmma_fp16_fp32", jobs, keep, rejected);
  add_jobs("conv1d", {}, "wmma_fp16_fp32", jobs, keep, rejected);
  // One conv and one GEMM per dtype family.
  for (const auto& [hw, dtypes] : std::vector<std::pair<std::string, std::pair<std::string, std::string>>>{
           {"wmma_fp16_fp16", {"float16", "float16"}},
           {"wmma_bf16_fp32", {"bfloat16", "float32"}},
           {"wmma_tf32_fp32", {"float32", "float32"}},
           {"wmma_int8_int32", {"int8", "int32"}},
           {"wmma_int4_int32", {"int4", "int32"}},
           {"wmma_fp64_fp64", {"float64", "float64"}}}) {
    for (const std::string op : {"gemm", "conv2d"}) {
      SourceText src("<" + op + ">", builtin_op_source(op));
      ComputeDef def = parse_compute_json(src, op);
      for (auto& t : def.tensors) t.dtype = *parse_dtype(t.name == "C" || t.name == "Out" ? dtypes.second : dtypes.first);
      keep.push_back(std::make_unique<Compute>(build_compute(def)));
      const Compute& c = *keep.back();
      const HwAbstraction& h = find_hw(shipped(), hw);
      MatchReport r = match_compute(c, {h}, Enumeration::kAll);
      ASSERT_FALSE(r.matches.empty()) << hw << " " << op;
      const Match& m = r.matches[0];
      const Mapping& map = m.mappings.back();  // fuses every candidate
      ImplicitGemm g = make_implicit_gemm(c, h, m, map);
      ScheduleParams p = default_schedule(g, DeviceLimits::for_arch(80));
      auto issues = validate(g, p, DeviceLimits::for_arch(80));
      ASSERT_TRUE(issues.empty()) << hw << " " << op << ": " << issues[0].detail;
      // int8 and int4 fragments are 16 bytes wide along k: only the panel layout aligns them.
      EXPECT_EQ(p.panels, hw == "wmma_int8_int32" || hw == "wmma_int4_int32" ? 1 : 0) << hw;
      if (hw == "wmma_int4_int32") EXPECT_EQ(p.smem_pad, 32) << "4-bit rows stay 16-byte aligned";
      jobs.push_back({hw + " " + op, emit_kernel(g, p)});
    }
  }
  // Vector loads of every width: 16, 8, 4 and 2 bytes of halves and of int8.
  for (const auto& [in_t, out_t, hw_name, k_extent, vec] : std::vector<std::tuple<std::string, std::string, std::string, int, int>>{
           {"float16", "float32", "wmma_fp16_fp32", 64, 8}, {"float16", "float32", "wmma_fp16_fp32", 36, 4},
           {"float16", "float32", "wmma_fp16_fp32", 34, 2}, {"int8", "int32", "wmma_int8_int32", 100, 4},
           {"int8", "int32", "wmma_int8_int32", 34, 2}, {"int8", "int32", "wmma_int8_int32", 40, 8}}) {
    SourceText src("<gemm>", builtin_op_source("gemm"));
    ComputeDef def = parse_compute_json(src, "gemm");
    for (auto& t : def.tensors) t.dtype = *parse_dtype(t.name == "C" ? out_t : in_t);
    keep.push_back(std::make_unique<Compute>(
        build_compute(def, parse_param_overrides({"M=64", "N=64", "K=" + std::to_string(k_extent)}))));
    const HwAbstraction& h = find_hw(shipped(), hw_name);
    MatchReport r = match_compute(*keep.back(), {h}, Enumeration::kAll);
    ImplicitGemm g = make_implicit_gemm(*keep.back(), h, r.matches[0], r.matches[0].mappings[0]);
    ScheduleParams p = default_schedule(g, DeviceLimits::for_arch(80));
    EXPECT_EQ(p.vec_a, vec) << in_t << " K=" << k_extent;
    ASSERT_TRUE(validate(g, p, DeviceLimits::for_arch(80)).empty());
    jobs.push_back({in_t + " gemm vec_a " + std::to_string(p.vec_a), emit_kernel(g, p)});
    // The same copies with cp.async: pipelines of 4 and 3 buffers, double and single buffered
    // (2-byte vectors keep registers).
    for (int stages : {4, 3, 2, 1}) {
      p.async_copy = 1;
      p.stages = stages;
      ASSERT_TRUE(validate(g, p, DeviceLimits::for_arch(80)).empty());
      EXPECT_NE(emit_kernel(g, p).code.find("cp_async<"), std::string::npos);
      jobs.push_back({in_t + " gemm vec_a " + std::to_string(p.vec_a) + " cp.async stages " + std::to_string(stages),
                      emit_kernel(g, p)});
    }
  }
  // Split-K: partial sums and the reduce kernel, for a float, a half and a double accumulator.
  for (const auto& [op, hw_name, split] : std::vector<std::tuple<std::string, std::string, int>>{
           {"conv2d", "wmma_fp16_fp32", 4}, {"gemm", "wmma_fp16_fp32", 2}}) {
    keep.push_back(std::make_unique<Compute>(build_compute(builtin_op(op))));
    const HwAbstraction& h = find_hw(shipped(), hw_name);
    MatchReport r = match_compute(*keep.back(), {h}, Enumeration::kAll);
    for (const Mapping* map : {&r.matches[0].mappings.front(), &r.matches[0].mappings.back()}) {
      ImplicitGemm g = make_implicit_gemm(*keep.back(), h, r.matches[0], *map);
      ScheduleParams p = default_schedule(g, DeviceLimits::for_arch(80));
      p.split_k = split;
      ASSERT_TRUE(validate(g, p, DeviceLimits::for_arch(80)).empty());
      KernelSource k = emit_kernel(g, p);
      EXPECT_FALSE(k.reduce_name.empty());
      EXPECT_EQ(k.workspace_bytes, split * g.batch * g.M * g.N * 4);
      // The reduce kernel is a programmatic dependent launch on sm_90: the main kernel lets it
      // launch after its main loop, and it waits for the partial sums.
      EXPECT_NE(k.code.find("griddepcontrol.launch_dependents"), std::string::npos);
      EXPECT_NE(k.code.find("griddepcontrol.wait"), std::string::npos);
      jobs.push_back({op + " split_k " + std::to_string(split), k});
      // Summed by each tile's last block instead: no reduce kernel; a counter per tile of each
      // batch entry after the partial sums, 256-byte aligned, which the plan zeroes.
      p.split_reduce = 1;
      ASSERT_TRUE(validate(g, p, DeviceLimits::for_arch(80)).empty());
      KernelSource last = emit_kernel(g, p);
      EXPECT_TRUE(last.reduce_name.empty());
      const std::int64_t partials = split * g.batch * g.M * g.N * 4, offset = (partials + 255) / 256 * 256;
      const std::int64_t tiles = g.batch * ((g.M + p.block_m - 1) / p.block_m) * ((g.N + p.block_n - 1) / p.block_n);
      EXPECT_EQ(last.zeroed_offset, offset);
      EXPECT_EQ(last.zeroed_bytes, tiles * 4);
      EXPECT_EQ(last.workspace_bytes, offset + tiles * 4);
      EXPECT_EQ(last.code.find("griddepcontrol"), std::string::npos) << "nothing depends on it";
      EXPECT_NE(last.code.find("atomicAdd(arrivals, 1u)"), std::string::npos);
      const LaunchPlan plan = plan_launch(last);
      EXPECT_EQ(plan.plan.num_steps, 1);
      EXPECT_EQ(plan.plan.zeroed_offset, offset);
      EXPECT_EQ(to_json(launch_plan_from_json(to_json(plan))), to_json(plan));
      jobs.push_back({op + " split_k " + std::to_string(split) + " summed by the last block", last});
    }
  }
  std::vector<std::string> failures = compile_all(jobs);
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << jobs.size() * 2 << " failed; first:\n"
                                << (failures.empty() ? "" : failures.front());
  EXPECT_GT(jobs.size(), 250u);
  EXPECT_EQ(rejected, 0) << "default schedules switch to panels where rows would misalign fragments";
  std::cout << "compiled " << jobs.size() << " kernels for sm_80 and sm_90; " << rejected
            << " candidate schedules rejected for alignment\n";
}

struct IssueCase {
  std::string name;
  ScheduleParams params;
  ScheduleError error;
};

TEST(Schedule, EveryValidationReasonHasACase) {
  Compute c = build_compute(builtin_op("gemm"));
  const HwAbstraction& hw = find_hw(shipped(), "wmma_fp16_fp32");
  MatchReport r = match_compute(c, {hw}, Enumeration::kAll);
  const Match& nnn16 = r.matches[0];  // nnn 16x16x16
  const Match& nnn32x8 = r.matches[1];  // nnn 32x8x16: B fragments 8 halves wide
  ImplicitGemm g = make_implicit_gemm(c, hw, nnn16, nnn16.mappings[0]);
  DeviceLimits limits = DeviceLimits::for_arch(90);
  EXPECT_TRUE(validate(g, ScheduleParams{}, limits).empty());
  auto with = [](auto edit) {
    ScheduleParams p;
    edit(p);
    return p;
  };
  const IssueCase cases[] = {
      {"warp tile", with([](ScheduleParams& p) { p.warp_m = 24; }), ScheduleError::kTileNotMultipleOfIntrinsic},
      {"block_k", with([](ScheduleParams& p) { p.block_k = 24; }), ScheduleError::kTileNotMultipleOfIntrinsic},
      {"block vs warp", with([](ScheduleParams& p) { p.block_m = 48; }), ScheduleError::kBlockNotMultipleOfWarp},
      {"threads", with([](ScheduleParams& p) { p.block_m = 256; p.block_n = 256; p.warp_m = 16; p.warp_n = 16; }),
       ScheduleError::kTooManyThreads},
      {"shared memory", with([](ScheduleParams& p) { p.block_m = 512; p.block_n = 512; p.block_k = 128; p.warp_m = 128; p.warp_n = 128; }),
       ScheduleError::kSharedMemoryExceeded},
      {"stages", with([](ScheduleParams& p) { p.stages = 3; }), ScheduleError::kBadStages},
      {"stages with cp.async", with([](ScheduleParams& p) { p.stages = 5; p.async_copy = 1; p.vec_a = 8; }),
       ScheduleError::kBadStages},
      {"panels", with([](ScheduleParams& p) { p.panels = 2; }), ScheduleError::kBadOption},
      {"unroll", with([](ScheduleParams& p) { p.unroll = -1; }), ScheduleError::kBadOption},
      {"raster", with([](ScheduleParams& p) { p.raster = 0; }), ScheduleError::kBadOption},
      {"vector not a power of two", with([](ScheduleParams& p) { p.vec_a = 3; }), ScheduleError::kBadVector},
      {"vector over 16 bytes", with([](ScheduleParams& p) { p.vec_b = 16; }), ScheduleError::kBadVector},
      {"async_copy not 0 or 1", with([](ScheduleParams& p) { p.async_copy = 2; p.vec_a = 8; }), ScheduleError::kBadAsyncCopy},
      {"async_copy of scalars", with([](ScheduleParams& p) { p.async_copy = 1; }), ScheduleError::kBadAsyncCopy},
      {"row alignment", with([](ScheduleParams& p) { p.smem_pad = 3; }), ScheduleError::kMisalignedRows},
      {"split_k zero", with([](ScheduleParams& p) { p.split_k = 0; }), ScheduleError::kBadSplitK},
      {"split_k over steps", with([](ScheduleParams& p) { p.split_k = 33; }), ScheduleError::kBadSplitK},  // K 1024 / 32
      {"split_reduce without splits", with([](ScheduleParams& p) { p.split_reduce = 1; }), ScheduleError::kBadSplitK},
      {"split_reduce of too many splits", with([](ScheduleParams& p) { p.split_k = 65; p.split_reduce = 1; }),
       ScheduleError::kBadSplitK},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto issues = validate(g, c.params, limits);
    ASSERT_FALSE(issues.empty());
    EXPECT_EQ(issues[0].error, c.error) << message(issues[0].error) << ": " << issues[0].detail;
    EXPECT_FALSE(message(c.error).empty());
  }
  auto turing = validate(g, with([](ScheduleParams& p) { p.async_copy = 1; p.vec_a = 8; }), DeviceLimits::for_arch(75));
  ASSERT_FALSE(turing.empty());
  EXPECT_EQ(turing[0].error, ScheduleError::kBadAsyncCopy) << "cp.async needs sm_80";
  EXPECT_TRUE(validate(g, with([](ScheduleParams& p) { p.async_copy = 1; p.vec_a = 8; }), limits).empty());
  Compute tall = build_compute(builtin_op("gemm"), parse_param_overrides({"M=4194304", "N=16", "K=16"}));
  MatchReport tr = match_compute(tall, {hw}, Enumeration::kAll);
  auto grid_issues = validate(make_implicit_gemm(tall, hw, tr.matches[0], tr.matches[0].mappings[0]), ScheduleParams{}, limits);
  ASSERT_FALSE(grid_issues.empty());
  EXPECT_EQ(grid_issues[0].error, ScheduleError::kGridTooLarge) << grid_issues[0].detail;
  ImplicitGemm narrow = make_implicit_gemm(c, hw, nnn32x8, nnn32x8.mappings[0]);
  auto issues = validate(narrow, with([](ScheduleParams& p) { p.warp_n = 16; p.block_n = 32; }), limits);
  ASSERT_FALSE(issues.empty());
  EXPECT_EQ(issues[0].error, ScheduleError::kMisalignedFragments);
  EXPECT_NE(issues[0].detail.find("B fragments step 16 bytes"), std::string::npos) << issues[0].detail;
  EXPECT_TRUE(validate(narrow, with([](ScheduleParams& p) { p.warp_n = 16; p.block_n = 32; p.panels = 1; }), limits).empty());
}

// The mma.sync family: every abstraction x layout on GEMMs with tails and on convolutions of
// every rank and layout, with schedules that reach each branch of the emitter (swizzled and
// padded tiles, ldmatrix and .trans, cp.async rings of 1-5 stages or register staging, scalar
// gathers, split-K, epilogue vectors along n or m, warp tiles 16x16 to 64x64, rasterization).
TEST(Codegen, MmaSyncCompilesEveryLayoutDtypeAndSchedule) {
  std::vector<Job> jobs;
  std::vector<std::unique_ptr<Compute>> keep;
  const DeviceLimits limits = DeviceLimits::for_arch(80);
  int skipped = 0;
  auto add = [&](const Compute& c, const std::string& hw_name, const std::string& label, bool variants) {
    const HwAbstraction& hw = find_hw(shipped(), hw_name);
    const std::vector<ImplicitGemm> gemms = gemm_per_match(c, hw_name);
    ASSERT_FALSE(gemms.empty()) << label;
    for (const ImplicitGemm& g : gemms) {
      ScheduleParams d = default_schedule(g, limits);
      auto issues = validate(g, d, limits);
      ASSERT_TRUE(issues.empty()) << label << " " << g.layout << ": " << issues[0].detail;
      EXPECT_EQ(d.swizzle, 1) << label << " " << g.layout << ": the default swizzles";
      std::vector<std::pair<std::string, ScheduleParams>> schedules = {{"default", d}};
      if (variants) {
        auto edit = [&](const std::string& name, auto f) {
          ScheduleParams p = d;
          f(p);
          if (validate(g, p, limits).empty()) schedules.emplace_back(name, p);
          else ++skipped;  // e.g. cp.async stages where no operand has vectors
        };
        edit("padded", [&](ScheduleParams& p) { p.swizzle = 0; p.smem_pad = 16 / (dtype_bits(hw.a_dtype) / 8); });
        edit("stages 5", [](ScheduleParams& p) { p.stages = 5; });
        edit("stages 1", [](ScheduleParams& p) { p.stages = 1; });
        edit("registers", [](ScheduleParams& p) { p.async_copy = 0; p.stages = 2; });
        edit("scalar", [](ScheduleParams& p) { p.async_copy = 0; p.stages = 1; p.vec_a = p.vec_b = 1; p.unroll = 0; });
        edit("split 2", [](ScheduleParams& p) { p.split_k = 2; });
        edit("warp 16x16 raster 4", [](ScheduleParams& p) { p.warp_m = p.warp_n = 16; p.block_m = 32; p.block_n = 32; p.raster = 4; });
      }
      for (const auto& [name, p] : schedules) {
        KernelSource k = emit_kernel(g, p);
        EXPECT_NE(k.code.find(hw.compute_intrinsic), std::string::npos);
        EXPECT_NE(k.code.find(g.layout[0] == 't' || g.layout[1] == 'n' ? "ldmatrix_x4_trans(" : "ldmatrix_x4("),
                  std::string::npos);
        jobs.push_back({label + " " + g.layout + " " + name, k});
      }
    }
  };
  auto typed = [&](const std::string& op, const std::string& in_t, const std::string& out_t,
                   const std::vector<std::string>& sets) -> const Compute& {
    return typed_compute(keep, op, in_t, out_t, sets);
  };
  add(typed("gemm", "float16", "float32", {"M=200", "N=136", "K=520"}), "mma_sync_fp16_fp32", "gemm", true);
  add(typed("gemm", "float16", "float32", {"M=17", "N=33", "K=65"}), "mma_sync_fp16_fp32", "gemm 17x33x65", false);
  add(typed("conv2d", "float16", "float32", {"N=2", "stride=2"}), "mma_sync_fp16_fp32", "conv2d", true);
  add(typed("conv2d_nhwc", "float16", "float32", {"N=2", "C=24", "H=9", "W=11", "K=40", "R=1", "S=1", "pad=0"}),
      "mma_sync_fp16_fp32", "conv2d_nhwc 1x1", false);
  add(typed("conv1d", "float16", "float32", {"N=3", "W=77"}), "mma_sync_fp16_fp32", "conv1d", false);
  add(typed("conv3d", "float16", "float32", {"N=2", "D=7", "H=9", "W=9"}), "mma_sync_fp16_fp32", "conv3d", false);
  for (const auto& [hw, in_t, out_t] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"mma_sync_bf16_fp32", "bfloat16", "float32"},
           {"mma_sync_tf32_fp32", "float32", "float32"},
           {"mma_sync_int8_int32", "int8", "int32"}}) {
    add(typed("gemm_nt", in_t, out_t, {"M=300", "N=200", "K=96"}), hw, hw + " gemm_nt", true);
    add(typed("conv2d_nhwc", in_t, out_t, {"N=2"}), hw, hw + " conv2d_nhwc", false);
    add(typed("conv2d", in_t, out_t, {"N=2"}), hw, hw + " conv2d", false);
  }
  // The epilogue writes 16-byte vectors along n for row-major outputs and along m for NCHW ones.
  for (const auto& job : jobs) {
    if (job.label.rfind("gemm ", 0) == 0 && job.label.find("split") == std::string::npos &&
        job.label.find("17x33") == std::string::npos)  // N = 33 allows no vector
      EXPECT_NE(job.kernel.code.find("store_d_vec(out"), std::string::npos) << job.label;
  }
  std::vector<std::string> failures = compile_all(jobs);
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << jobs.size() * 2 << " failed; first:\n"
                                << (failures.empty() ? "" : failures.front());
  EXPECT_GT(jobs.size(), 60u);
  std::cout << "compiled " << jobs.size() << " mma_sync kernels for sm_80 and sm_90; " << skipped
            << " variants did not apply\n";
}

// The wgmma family, for sm_90a only: every abstraction (fp16, bf16, tf32, int8, fp8), every layout
// (K-major and transposed operands), GEMMs with tails, NHWC / NCHW / 3-D convolutions, and the
// corners of its schedule space (one or two m64 accumulators, N from 16 to 256, 3-6 stages,
// 128-element k steps, scalar gathers, split-K, rasterization).
TEST(Codegen, WgmmaCompilesEveryAbstractionLayoutAndSchedule) {
  std::vector<Job> jobs;
  std::vector<std::unique_ptr<Compute>> keep;
  const DeviceLimits limits = DeviceLimits::for_arch(90);
  int skipped = 0;
  auto typed = [&](const std::string& op, const std::string& in_t, const std::string& out_t,
                   const std::vector<std::string>& sets) -> const Compute& {
    return typed_compute(keep, op, in_t, out_t, sets);
  };
  auto add = [&](const Compute& c, const std::string& hw_name, const std::string& label, bool variants) {
    const std::vector<ImplicitGemm> gemms = gemm_per_match(c, hw_name);
    ASSERT_FALSE(gemms.empty()) << label;
    for (const ImplicitGemm& g : gemms) {
      ScheduleParams d = default_schedule(g, limits);
      auto issues = validate(g, d, limits);
      ASSERT_TRUE(issues.empty()) << label << " " << g.layout << ": " << issues[0].detail;
      std::vector<std::pair<std::string, ScheduleParams>> schedules = {{"default", d}};
      if (variants) {
        auto edit = [&](const std::string& name, auto f) {
          ScheduleParams p = d;
          f(p);
          if (validate(g, p, limits).empty()) schedules.emplace_back(name, p);
          else ++skipped;
        };
        edit("stages 3", [](ScheduleParams& p) { p.stages = 3; });
        edit("stages 6 64x64", [](ScheduleParams& p) { p.stages = 6; p.block_m = 64; p.block_n = p.warp_n = 64; });
        edit("wm 128 wn 64", [](ScheduleParams& p) { p.warp_m = p.block_m = 128; p.warp_n = 64; p.block_n = 128; });
        edit("wn 16", [](ScheduleParams& p) { p.warp_n = 16; p.block_n = 32; });
        edit("bk x2", [](ScheduleParams& p) { p.block_k *= 2; p.stages = 3; });
        edit("scalar", [](ScheduleParams& p) { p.async_copy = 0; p.vec_a = p.vec_b = 1; p.unroll = 0; });
        edit("split 2 raster 4", [](ScheduleParams& p) { p.split_k = 2; p.raster = 4; });
      }
      for (const auto& [name, p] : schedules) {
        KernelSource k = emit_kernel(g, p);
        EXPECT_NE(k.code.find("wgmma.mma_async.sync.aligned.m64n" + std::to_string(p.warp_n) + "k"), std::string::npos)
            << label << " " << name;
        EXPECT_EQ(k.threads, p.block_m / p.warp_m * (p.block_n / p.warp_n) * 128 + (p.producer ? 128 : 0));
        jobs.push_back({label + " " + g.layout + " " + name, k});
      }
    }
  };
  add(typed("gemm", "float16", "float32", {"M=200", "N=136", "K=520"}), "wgmma_fp16_fp32", "gemm", true);
  for (const char* op : {"gemm_nt", "gemm_tn", "gemm_tt"})
    add(typed(op, "float16", "float32", {"M=200", "N=136", "K=520"}), "wgmma_fp16_fp32", op, true);
  add(typed("gemm", "float16", "float32", {"M=67", "N=33", "K=65"}), "wgmma_fp16_fp32", "gemm 67x33x65", false);
  add(typed("conv2d_nhwc", "float16", "float32", {"N=2", "stride=2"}), "wgmma_fp16_fp32", "conv2d_nhwc", true);
  add(typed("conv2d", "float16", "float32", {"N=2", "stride=2"}), "wgmma_fp16_fp32", "conv2d", false);
  add(typed("conv3d", "float16", "float32", {"N=2", "D=7", "H=9", "W=9"}), "wgmma_fp16_fp32", "conv3d", false);
  for (const auto& [hw, in_t, out_t] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"wgmma_bf16_fp32", "bfloat16", "float32"},
           {"wgmma_tf32_fp32", "float32", "float32"},
           {"wgmma_int8_int32", "int8", "int32"},
           {"wgmma_e4m3_fp32", "float8_e4m3", "float32"},
           {"wgmma_e5m2_fp32", "float8_e5m2", "float32"}}) {
    add(typed("gemm_nt", in_t, out_t, {"M=300", "N=200", "K=256"}), hw, hw + " gemm_nt", true);
    add(typed("conv2d_nhwc", in_t, out_t, {"N=2"}), hw, hw + " conv2d_nhwc", false);
  }
  std::vector<std::string> failures = compile_all(jobs, {90});
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << jobs.size() << " failed; first:\n"
                                << (failures.empty() ? "" : failures.front());
  EXPECT_GT(jobs.size(), 50u);
  std::cout << "compiled " << jobs.size() << " wgmma kernels for sm_90a; " << skipped << " variants did not apply\n";
}

// The warp-specialized wgmma kernels (producer = 1): a producer warpgroup's TMA boxes feed one or
// two consumer warpgroups through an mbarrier ring. Every operand that is a strided view of its
// tensor (GEMMs in every layout, batched GEMMs, 1x1 convolutions) gets tensor maps whose boxes
// are one 128-byte line by the tile's rows; the kernels compile for sm_90a; operands TMA cannot
// box are refused with the reason.
TEST(Codegen, WgmmaTmaProducer) {
  std::vector<Job> jobs;
  std::vector<std::unique_ptr<Compute>> keep;
  const DeviceLimits limits = DeviceLimits::for_arch(90);
  auto typed = [&](const std::string& op, const std::string& in_t, const std::string& out_t,
                   const std::vector<std::string>& sets) -> const Compute& {
    return typed_compute(keep, op, in_t, out_t, sets);
  };
  int persistent = 0;
  // The first layout of each compute whose default schedule takes a producer, with variants.
  auto add = [&](const Compute& c, const std::string& hw_name, const std::string& label) {
    const std::vector<ImplicitGemm> gemms = gemm_per_match(c, hw_name);
    ASSERT_FALSE(gemms.empty()) << label;
    int layouts = 0;
    std::string reasons;
    for (const ImplicitGemm& g : gemms) {
      ScheduleParams d = default_schedule(g, limits);
      d.producer = 1;
      if (auto issues = validate(g, d, limits); !issues.empty()) {
        reasons += "\n  " + g.layout + ": " + issues[0].detail;
        continue;
      }
      ++layouts;
      std::vector<std::pair<std::string, ScheduleParams>> schedules = {{"default", d}};
      auto edit = [&](const std::string& name, auto f) {
        ScheduleParams p = d;
        f(p);
        auto issues = validate(g, p, limits);
        if (issues.empty()) schedules.emplace_back(name, p);
      };
      edit("2 consumers 128x256", [](ScheduleParams& p) { p.block_m = 128; p.warp_m = 64; p.block_n = p.warp_n = 256; });
      edit("wm 128 wn 64 stages 6", [](ScheduleParams& p) { p.warp_m = p.block_m = 128; p.warp_n = 64; p.block_n = 128; p.stages = 6; });
      edit("bk x2 split 3 raster 4", [](ScheduleParams& p) { p.block_k *= 2; p.stages = 3; p.split_k = 3; p.raster = 4; });
      edit("persistent", [](ScheduleParams& p) { p.producer = 2; });
      edit("persistent 2 consumers 128x256 raster 4",
           [](ScheduleParams& p) { p.producer = 2; p.block_m = 128; p.warp_m = 64; p.block_n = p.warp_n = 256; p.stages = 3; p.raster = 4; });
      for (const auto& [name, p] : schedules) {
        KernelSource k = emit_kernel(g, p);
        if (p.producer == 2) {
          // One launch dimension of every output tile, taken with a grid stride; the consumers
          // alone meet at named barrier 1 around the epilogue tile, which follows the ring.
          ++persistent;
          EXPECT_TRUE(k.persistent) << label << " " << name;
          EXPECT_EQ(k.grid[0], (g.M + p.block_m - 1) / p.block_m * ((g.N + p.block_n - 1) / p.block_n) * g.batch);
          EXPECT_EQ(k.grid[1] * k.grid[2], 1);
          EXPECT_NE(k.code.find("bar.sync 1, " + std::to_string(k.threads - 128)), std::string::npos) << label;
          EXPECT_NE(k.code.find("tile += gridDim.x"), std::string::npos) << label;
        } else {
          EXPECT_FALSE(k.persistent) << label << " " << name;
        }
        EXPECT_EQ(k.tensor_maps.size(), 2u) << label << " " << name;
        EXPECT_TRUE(k.code.find("tma_load_") != std::string::npos || k.code.find("tma_im2col_") != std::string::npos ||
                    k.code.find("tma_multicast_") != std::string::npos)
            << label << " " << name << ": no TMA load";
        EXPECT_EQ(k.threads, p.block_m / p.warp_m * (p.block_n / p.warp_n) * 128 + 128) << label << " " << name;
        EXPECT_LE(k.shared_bytes, limits.max_shared_bytes);
        jobs.push_back({label + " " + g.layout + " " + name, k});
      }
    }
    EXPECT_GT(layouts, 0) << label << ": no layout takes a TMA producer:" << reasons;
  };
  for (const char* op : {"gemm", "gemm_nt", "gemm_tn", "gemm_tt"})
    add(typed(op, "float16", "float32", {"M=200", "N=136", "K=520"}), "wgmma_fp16_fp32", op);
  add(typed("gemm", "float16", "float32", {"M=67", "N=40", "K=72"}), "wgmma_fp16_fp32", "gemm 67x40x72");
  add(typed("batched_gemm", "float16", "float32", {"BATCH=3", "M=72", "N=64", "K=64"}), "wgmma_fp16_fp32", "batched");
  add(typed("conv2d_nhwc", "float16", "float32", {"N=3", "C=24", "H=9", "W=11", "K=40", "R=1", "S=1", "pad=0"}),
      "wgmma_fp16_fp32", "conv2d_nhwc 1x1");
  add(typed("gemm_nt", "bfloat16", "float32", {"M=300", "N=200", "K=256"}), "wgmma_bf16_fp32", "bf16");
  add(typed("gemm_nt", "float32", "float32", {"M=300", "N=200", "K=256"}), "wgmma_tf32_fp32", "tf32");
  add(typed("gemm_nt", "int8", "int32", {"M=300", "N=200", "K=256"}), "wgmma_int8_int32", "int8");
  add(typed("gemm_nt", "float8_e4m3", "float32", {"M=300", "N=200", "K=256"}), "wgmma_e4m3_fp32", "e4m3");
  // 16-bit outputs: a persistent kernel's epilogue tile holds them rounded (half the bytes).
  add(stored_as(keep, "gemm", "float16", "float16", {"M=200", "N=136", "K=520"}), "wgmma_fp16_fp32", "gemm float16 out");
  add(stored_as(keep, "gemm_nt", "bfloat16", "bfloat16", {"M=300", "N=200", "K=256"}), "wgmma_bf16_fp32", "bf16 out");
  add(stored_as(keep, "gemm_nt", "float8_e5m2", "float16", {"M=300", "N=200", "K=256"}), "wgmma_e5m2_fp32",
      "e5m2 in, float16 out");

  // The tensor maps of gemm (A [M][K] K-major, B [K][N] read along n) with 128 x 128 x 64 tiles.
  {
    const ImplicitGemm g =
        gemm_per_match(typed("gemm", "float16", "float32", {"M=200", "N=136", "K=520"}), "wgmma_fp16_fp32").at(0);
    ASSERT_EQ(g.layout, "nnn");
    ScheduleParams p = default_schedule(g, limits);
    p.producer = 1;
    p.block_m = p.block_n = p.warp_n = 128;
    p.warp_m = 64;
    p.block_k = 64;
    ASSERT_TRUE(validate(g, p, limits).empty());
    KernelSource k = emit_kernel(g, p);
    ASSERT_EQ(k.tensor_maps.size(), 2u);
    const TensorMapSpec &a = k.tensor_maps[0], &b = k.tensor_maps[1];
    EXPECT_EQ(a.operand, 0);
    EXPECT_EQ(a.rank, 2);
    EXPECT_EQ(a.dims[0], 520u);      // k, contiguous
    EXPECT_EQ(a.dims[1], 200u);      // m
    EXPECT_EQ(a.strides[0], 1040u);  // bytes per row of A
    EXPECT_EQ(a.box[0], 64u);        // one 128-byte line of k
    EXPECT_EQ(a.box[1], 128u);       // the block's rows
    EXPECT_EQ(b.operand, 1);
    EXPECT_EQ(b.dims[0], 136u);      // n, contiguous: B is read transposed
    EXPECT_EQ(b.dims[1], 520u);
    EXPECT_EQ(b.strides[0], 272u);
    EXPECT_EQ(b.box[0], 64u);
    EXPECT_EQ(b.box[1], 64u);        // block_k rows
    EXPECT_EQ(k.threads, 3 * 128);
  }
  // A batched GEMM's batch is a third dimension of its tensor maps, with boxes one deep.
  {
    const ImplicitGemm g =
        gemm_per_match(typed("batched_gemm", "float16", "float32", {"BATCH=3", "M=72", "N=64", "K=64"}), "wgmma_fp16_fp32")
            .at(0);
    ScheduleParams p = default_schedule(g, limits);
    p.producer = 1;
    ASSERT_TRUE(validate(g, p, limits).empty());
    KernelSource k = emit_kernel(g, p);
    for (const TensorMapSpec& m : k.tensor_maps) {
      EXPECT_EQ(m.rank, 3);
      EXPECT_EQ(m.dims[2], 3u);
      EXPECT_EQ(m.box[2], 1u);
    }
  }
  // Refusals: an input whose rows move with the filter taps, a row of 130 bytes, another family.
  auto refusal = [&](const Compute& c, const std::string& hw_name, int producer = 1) {
    const ImplicitGemm g = gemm_per_match(c, hw_name).at(0);
    ScheduleParams p = default_schedule(g, limits);
    p.producer = producer;
    auto issues = validate(g, p, limits);
    return issues.empty() ? std::string() : issues[0].detail;
  };
  // 24 channels: 48-byte rows, no whole 128-byte line of channels for an im2col box either.
  const std::string no_box = refusal(typed("conv2d_nhwc", "float16", "float32", {"N=2", "C=24"}), "wgmma_fp16_fp32");
  EXPECT_NE(no_box.find("operand A (I)"), std::string::npos) << no_box;
  EXPECT_NE(no_box.find("nor is it an im2col view"), std::string::npos) << no_box;
  EXPECT_NE(refusal(typed("gemm", "float16", "float32", {"M=67", "N=33", "K=65"}), "wgmma_fp16_fp32")
                .find("multiples of 16 bytes"),
            std::string::npos);
  const std::string persistent_refused =
      refusal(typed("gemm", "float16", "float32", {"M=67", "N=33", "K=65"}), "wgmma_fp16_fp32", 2);
  EXPECT_NE(persistent_refused.find("producer = 2 loads operands with TMA"), std::string::npos) << persistent_refused;
  EXPECT_NE(refusal(typed("gemm", "float16", "float32", {}), "mma_sync_fp16_fp32").find("only wgmma"),
            std::string::npos);

  std::vector<std::string> failures = compile_all(jobs, {90});
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << jobs.size() << " failed; first:\n"
                                << (failures.empty() ? "" : failures.front());
  EXPECT_GT(jobs.size(), 25u);
  EXPECT_GE(persistent, 10);
  std::cout << "compiled " << jobs.size() << " warp-specialized wgmma kernels for sm_90a (" << persistent
            << " persistent)\n";
}

// Stream-K (stream_k 1 or 2, a persistent kernel of single blocks): one launch dimension of a
// block per step at most (the launch starts as many as stay resident); a workspace of a partial
// tile per block of at most SK_BLOCKS and a flag per block, zero before the first launch; pieces
// that lack their tile's first step leave their sums and raise a flag, the first piece waits for
// the others'. Every layout, dtype, a batch, im2col convolutions, 16-bit outputs and TMA stores
// compile for sm_90a, in both forms; other producers and pairs of blocks are refused with the rule.
TEST(Codegen, WgmmaStreamK) {
  std::vector<Job> jobs;
  std::vector<std::unique_ptr<Compute>> keep;
  const DeviceLimits limits = DeviceLimits::for_arch(90);
  std::string refusals;
  auto add = [&](const Compute& c, const std::string& hw_name, const std::string& label) {
    int layouts = 0;
    for (const ImplicitGemm& g : gemm_per_match(c, hw_name)) {
      ScheduleParams p = default_schedule(g, limits);
      p.producer = 2;
      p.stream_k = 1;
      p.split_k = 1;
      if (!validate(g, p, limits).empty()) p.stages = 3;  // the epilogue tile beside a ring of 256-wide tiles
      if (!validate(g, p, limits).empty()) continue;
      ++layouts;
      for (const auto [bulk_store, form] : {std::pair{0, 1}, {2, 1}, {0, 2}}) {
        ScheduleParams q = p;
        q.bulk_store = bulk_store;
        q.stream_k = form;
        if (!validate(g, q, limits).empty()) continue;
        const KernelSource k = emit_kernel(g, q);
        const std::int64_t tiles = (g.M + q.block_m - 1) / q.block_m * ((g.N + q.block_n - 1) / q.block_n) * g.batch;
        const std::int64_t steps = g.serial * ((g.K + q.block_k - 1) / q.block_k);
        EXPECT_TRUE(k.persistent) << label;
        EXPECT_EQ(k.grid[0], tiles * steps) << label;
        const std::int64_t flags = (132 * q.block_m * q.block_n * 4 + 255) / 256 * 256;
        EXPECT_EQ(k.zeroed_offset, flags) << label;
        EXPECT_EQ(k.zeroed_bytes, 132 * 4) << label;
        EXPECT_EQ(k.workspace_bytes, flags + 132 * 4) << label;
        EXPECT_TRUE(k.reduce_name.empty()) << label;
        for (const std::string piece : {"flag_raise(&sk_flags[blockIdx.x])", "flag_wait(&sk_flags[b])",
                                        "for (int step = s0; step < s1; ++step, ++t)", "sk_flags[b] = 0;",
                                        "stream_peer(walk.units, sk_blocks, b, tile, STEPS)",
                                        form == 2 ? "blockIdx.x, true);" : "blockIdx.x, false);"})
          EXPECT_NE(k.code.find(piece), std::string::npos) << label << ": " << piece;
        jobs.push_back({label + " " + g.layout + (bulk_store ? " tma stores" : "") + " form " + std::to_string(form), k});
      }
      // Refused beside another producer, and in pairs of blocks.
      for (auto change : {+[](ScheduleParams& q) { q.producer = 1; }, +[](ScheduleParams& q) { q.producer = 3; },
                          +[](ScheduleParams& q) { q.cluster = 2; }}) {
        ScheduleParams q = p;
        change(q);
        for (const ScheduleIssue& i : validate(g, q, limits)) refusals += i.detail + "\n";
      }
    }
    EXPECT_GT(layouts, 0) << label;
  };
  for (const char* op : {"gemm", "gemm_nt", "gemm_tn", "gemm_tt"})
    add(typed_compute(keep, op, "float16", "float32", {"M=200", "N=136", "K=520"}), "wgmma_fp16_fp32", op);
  add(typed_compute(keep, "batched_gemm", "float16", "float32", {"BATCH=3", "M=72", "N=64", "K=200"}),
      "wgmma_fp16_fp32", "batched");
  add(typed_compute(keep, "conv2d_nhwc", "float16", "float32", {"N=8", "C=64", "H=56", "W=56", "K=64", "pad=1"}),
      "wgmma_fp16_fp32", "conv2d_nhwc 3x3 im2col");
  add(stored_as(keep, "gemm_nt", "bfloat16", "bfloat16", {"M=200", "N=28672", "K=4096"}), "wgmma_bf16_fp32",
      "bf16 gate_up");
  add(typed_compute(keep, "gemm_nt", "float32", "float32", {"M=300", "N=200", "K=256"}), "wgmma_tf32_fp32", "tf32");
  add(typed_compute(keep, "gemm_nt", "int8", "int32", {"M=300", "N=200", "K=256"}), "wgmma_int8_int32", "int8");
  add(typed_compute(keep, "gemm_nt", "float8_e4m3", "float32", {"M=300", "N=200", "K=256"}), "wgmma_e4m3_fp32", "e4m3");
  add(stored_as(keep, "gemm_nt", "bfloat16", "bfloat16", {"M=300", "N=200", "K=256"}), "wgmma_bf16_fp32", "bf16 out");
  add(stored_as(keep, "gemm", "float16", "float16", {"M=2304", "N=2304", "K=512"}), "wgmma_fp16_fp32",
      "whole waves and the last");
  EXPECT_NE(refusals.find("stream_k = 1 with producer = 1, cluster = 0: runs of steps are cut for a persistent kernel "
                          "of single blocks; use producer 2 and cluster 0, or stream_k 0"),
            std::string::npos) << refusals;
  EXPECT_NE(refusals.find("stream_k = 1 with producer = 3"), std::string::npos) << refusals;
  EXPECT_NE(refusals.find("stream_k = 1 with producer = 2, cluster = 2"), std::string::npos) << refusals;
  // Families without it refuse any value but 0.
  const ImplicitGemm mma =
      gemm_per_match(typed_compute(keep, "gemm", "float16", "float32", {}), "mma_sync_fp16_fp32").at(0);
  ScheduleParams q = default_schedule(mma, limits);
  q.stream_k = 1;
  const std::vector<ScheduleIssue> issues = validate(mma, q, limits);
  ASSERT_FALSE(issues.empty());
  EXPECT_NE(issues.front().detail.find("stream_k"), std::string::npos) << issues.front().detail;

  const std::vector<std::string> failures = compile_all(jobs, {90});
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << jobs.size() << " failed; first:\n"
                                << (failures.empty() ? "" : failures.front());
  EXPECT_GE(jobs.size(), 21u);
}

// A tile that would reach past the output's end loads, instead, the rows that end at the extent's
// end (TMA boxes past a tensor's end load slowly): its boxes start at m_box (n_box). Along m, and
// along n where n is the epilogue tile's contiguous axis, the accumulators rotate, the rows that
// the tile before stores to its end; along n where n is its row axis the stores read the rows
// skip_n later. Only axes whose tiles (a pair's, in a cluster along the axis) may not
// divide the extent, and whose operand's boxes take their rows along it, are clamped: kernels
// whose tiles divide their extents are left as they were.
TEST(Codegen, WgmmaBoxesOfTheLastTileEndAtTheExtentsEnd) {
  const DeviceLimits limits = DeviceLimits::for_arch(90);
  std::vector<std::unique_ptr<Compute>> keep;
  std::vector<Job> jobs;
  auto code_of = [&](const std::string& op, const std::vector<std::string>& sets,
                     const std::function<void(ScheduleParams&)>& tweak) -> std::string {
    const Compute& c = typed_compute(keep, op, "float16", "float32", sets);
    // A convolution's weights as A (its output channels along m), its pixels (n, p, q) in n and
    // only c in k: the pixels are then rows of a tiled view, not im2col boxes.
    const bool conv = op == "conv2d_nhwc";
    const auto tiled = [&](const Mapping& x) {
      return x.axes[1].size() == 3 && x.axes[2].size() == 1 && x.fused_extent[2] > 1;
    };
    const std::vector<ImplicitGemm> gemms =
        gemm_per_match(c, "wgmma_fp16_fp32", conv ? 1 : -1, conv ? std::function<bool(const Mapping&)>(tiled) : nullptr);
    const std::string layout = op == "gemm" ? "nnn" : "ntn";  // B [N][K] read along k as rows of n
    const auto it = std::find_if(gemms.begin(), gemms.end(), [&](const ImplicitGemm& g) { return g.layout == layout; });
    if (it == gemms.end()) {
      ADD_FAILURE() << op << ": no match of layout " << layout;
      return "";
    }
    const ImplicitGemm& g = *it;
    ScheduleParams p = default_schedule(g, limits);
    p.producer = 1;
    p.split_k = 1;
    p.cluster = 0;
    p.block_m = p.block_n = p.warp_n = 128;
    p.warp_m = 64;
    p.block_k = 64;
    tweak(p);
    const std::string label = op + " " + sets[0] + " " + sets[1] + " " + to_json(p).dump();
    EXPECT_TRUE(validate(g, p, limits).empty()) << label;
    jobs.push_back({label, emit_kernel(g, p)});
    return jobs.back().kernel.code;
  };
  auto has = [](const std::string& code, const std::string& s) { return code.find(s) != std::string::npos; };
  const auto plain = [](ScheduleParams&) {};
  const std::string divides = code_of("gemm_nt", {"M=256", "N=256", "K=128"}, plain);
  EXPECT_FALSE(has(divides, "m_box") || has(divides, "n_box") || has(divides, "skip_") || has(divides, "rot_"))
      << divides;

  // Along m the writes rotate (a thread's accumulators take MI positions along m): 200 rows, not
  // a multiple of 16, make r + 8 rotate itself.
  const std::string m_short = code_of("gemm_nt", {"M=200", "N=256", "K=128"}, plain);
  EXPECT_TRUE(has(m_short, "const int m_box = min(m0, max(M - BM, 0));")) << m_short;
  EXPECT_TRUE(has(m_short, "m_box);"));  // the A box's row coordinate
  EXPECT_TRUE(has(m_short, "const int rot_m = (2 * BM - (m0 - min(m0, max(M - BM, 0)))) % BM;"));
  EXPECT_TRUE(has(m_short, "const int r = rotated<BM>(wm0 + i * 64 + row, rot_m), c = wn0 + j * 8 + col, "
                           "r8 = rotated<BM>(wm0 + i * 64 + row + 8, rot_m);"));
  EXPECT_TRUE(has(m_short, "&Cs[mm * C_LD + nn]") && has(m_short, "e < BM * BN / 4;"));
  EXPECT_FALSE(has(m_short, "n_box") || has(m_short, "skip_") || has(m_short, "rot_n"));
  EXPECT_FALSE(has(code_of("gemm_nt", {"M=208", "N=256", "K=128"}, plain), "r8"));  // 208 = 13 x 16

  // n runs along the epilogue tile's vectors: the writes rotate; c + 1 stays inside the tile
  // where every skip is even (N even), and rotates itself where it may not be.
  const std::string n_short = code_of("gemm_nt", {"M=256", "N=200", "K=128"}, plain);
  EXPECT_TRUE(has(n_short, "n_box);") && has(n_short, "const int rot_n = (2 * BN - (n0 - min(n0, max(N - BN, 0)))) % BN;"))
      << n_short;
  EXPECT_TRUE(has(n_short, "c = rotated<BN>(wn0 + j * 8 + col, rot_n);"));
  EXPECT_TRUE(has(n_short, "&Cs[mm * C_LD + nn]"));
  EXPECT_FALSE(has(n_short, "m_box") || has(n_short, "c1"));
  EXPECT_TRUE(has(code_of("gemm_nt", {"M=256", "N=201", "K=128"}, plain),
                  "c1 = rotated<BN>(wn0 + j * 8 + col + 1, rot_n);"));

  // A 1x1 convolution's output channels (m) are contiguous: m rotates (200 channels, not a
  // multiple of 16, make r + 8 rotate itself); its pixels (n), the epilogue tile's rows, are read
  // skip_n rows on, over the rows inside the extent only.
  const std::string nhwc = code_of("conv2d_nhwc", {"K=200", "H=14", "N=1", "C=64", "W=14", "R=1", "S=1", "pad=0"}, plain);
  EXPECT_TRUE(has(nhwc, "const int r = rotated<BM>(wm0 + i * 64 + row, rot_m), c = wn0 + j * 8 + col, "
                        "r8 = rotated<BM>(wm0 + i * 64 + row + 8, rot_m);"))
      << nhwc;
  EXPECT_TRUE(has(nhwc, "n_box);") && has(nhwc, "const int skip_n = n0 - min(n0, max(N - BN, 0));"));
  EXPECT_TRUE(has(nhwc, "&Cs[(nn + skip_n) * C_LD + mm]") && has(nhwc, " - skip_n * (BM / ")) << nhwc;

  // A pair along m takes 2 BM rows: 192 rows leave the second block of the last pair past the end.
  const auto pair = [](ScheduleParams& p) {
    p.cluster = 2;
    p.block_m = 64;
  };
  EXPECT_TRUE(has(code_of("gemm_nt", {"M=192", "N=256", "K=128"}, pair), "m_box"));
  EXPECT_FALSE(has(code_of("gemm_nt", {"M=256", "N=256", "K=128"}, pair), "m_box"));

  const std::string persistent = code_of("gemm_nt", {"M=200", "N=256", "K=128"}, [](ScheduleParams& p) {
    p.producer = 2;
    p.stages = 3;
  });
  EXPECT_TRUE(has(persistent, "m_box") && has(persistent, "rot_m")) << persistent;
  // gemm's B [K][N] is read along n: its boxes' rows run along k, so n is not clamped.
  EXPECT_FALSE(has(code_of("gemm", {"M=256", "N=136", "K=128"}, plain), "n_box"));

  std::vector<std::string> failures = compile_all(jobs, {90});
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << jobs.size() << " failed; first:\n"
                                << (failures.empty() ? "" : failures.front());
}

// A fixed N no wider than one wgmma (a decode step's tokens on the swapped product) is offered
// as the instruction's N itself, rounded up to 16, beside the usual widths; those kernels
// compile with and without a TMA producer and with splits summed in a cluster.
TEST(Codegen, WgmmaOffersAShortNAsTheInstructionsWidth) {
  const DeviceLimits limits = DeviceLimits::for_arch(90);
  std::vector<std::unique_ptr<Compute>> keep;
  auto gemm_of = [&](const std::vector<std::string>& sets) {
    const std::vector<ImplicitGemm> gemms = gemm_per_match(typed_compute(keep, "gemm_nt", "bfloat16", "float32", sets),
                                                           "wgmma_bf16_fp32");
    const auto it = std::find_if(gemms.begin(), gemms.end(), [](const ImplicitGemm& g) { return g.layout == "ntn"; });
    EXPECT_NE(it, gemms.end());
    return it == gemms.end() ? ImplicitGemm{} : *it;
  };
  auto widths = [&](const ImplicitGemm& g) {
    return family_of(*g.hw).choices(g, default_schedule(g, limits), limits).values_of("warp_n");
  };
  const std::vector<int> usual = {16, 32, 64, 96, 128, 192, 256};
  const ImplicitGemm tokens200 = gemm_of({"M=6144", "N=200", "K=4096"});
  const ImplicitGemm tokens100 = gemm_of({"M=6144", "N=100", "K=4096"});
  EXPECT_EQ(widths(gemm_of({"M=6144", "N=256", "K=4096"})), usual);
  // (Beside them, the widths whose tiles fill a wave: WgmmaOffersWidthsThatFillAWave.)
  std::vector<int> with = usual;
  with.push_back(208);  // 24 tiles of 256 rows by 5 of 208 columns
  EXPECT_EQ(widths(gemm_of({"M=6144", "N=1000", "K=4096"})), with);
  with.insert(with.end(), {112, 48});
  EXPECT_EQ(widths(tokens200), with);
  with = usual;
  with.push_back(112);
  EXPECT_EQ(widths(tokens100), with);

  // Tokens as a range (M = 1..256 on the swapped product, weights on wgmma's M): a sample offers
  // its own size's width, the range itself only the usual ones.
  auto swapped = [&](const Compute& c) {
    const std::vector<ImplicitGemm> gemms = gemm_per_match(c, "wgmma_bf16_fp32", 1);
    const auto it = std::find_if(gemms.begin(), gemms.end(), [](const ImplicitGemm& g) { return g.layout == "ntn"; });
    EXPECT_TRUE(it != gemms.end() && it->dynamic() && it->dynamic_axis == 'n');
    return it == gemms.end() ? ImplicitGemm{} : *it;
  };
  const Compute& range = typed_compute(keep, "gemm_nt", "bfloat16", "float32", {"M=1..256", "N=6144", "K=4096"});
  EXPECT_EQ(widths(swapped(range)), usual);
  keep.push_back(std::make_unique<Compute>(range_sample(range, 200)));
  with.back() = 208;
  EXPECT_EQ(widths(swapped(*keep.back())), with);
  keep.push_back(std::make_unique<Compute>(range_sample(range, 128)));
  EXPECT_EQ(widths(swapped(*keep.back())), usual);

  std::vector<Job> jobs;
  for (const ImplicitGemm* g : {&tokens200, &tokens100})
    for (int form = 0; form < 3; ++form) {
      ScheduleParams p = default_schedule(*g, limits);
      p.warp_m = 64;
      p.block_m = 128;
      p.warp_n = p.block_n = static_cast<int>((g->N + 15) / 16 * 16);
      p.block_k = 64;
      p.producer = form == 0 ? 0 : 1;
      p.split_k = form == 2 ? 3 : 1;
      p.cluster = form == 2 ? 1 : 0;
      const std::string label = "gemm_nt N=" + std::to_string(g->N) + " " + to_json(p).dump();
      const std::vector<ScheduleIssue> issues = validate(*g, p, limits);
      EXPECT_TRUE(issues.empty()) << label << ": " << (issues.empty() ? "" : issues.front().detail);
      if (issues.empty()) jobs.push_back({label, emit_kernel(*g, p)});
    }
  const std::vector<std::string> failures = compile_all(jobs, {90});
  EXPECT_TRUE(failures.empty()) << failures.front();
  EXPECT_EQ(jobs.size(), 6u);
}

// A fixed GEMM is offered the widths whose tiles fill one wave of blocks (132 SMs on sm_90
// without a GPU): bert_qkv (512 x 2304 x 768) in 64 x 192 tiles is 96 blocks; swapped (2304 x
// 512), 64 x 176, 128 x 80 and 192 x 48 tiles are 108, 126 and 132. Where B is stored along n,
// only whole 128-byte lines; a range is offered none (its tile count varies with its size).
TEST(Codegen, WgmmaOffersWidthsThatFillAWave) {
  const DeviceLimits limits = DeviceLimits::for_arch(90);
  std::vector<std::unique_ptr<Compute>> keep;
  // The written product (A = input 0, layout nnn) or the swapped one (A = input 1, ttn).
  auto gemm_of = [&](const Compute& c, const std::string& layout, int a_input) {
    const std::vector<ImplicitGemm> gemms = gemm_per_match(c, "wgmma_fp16_fp32", a_input);
    const auto it = std::find_if(gemms.begin(), gemms.end(), [&](const ImplicitGemm& g) { return g.layout == layout; });
    EXPECT_NE(it, gemms.end()) << layout;
    return it == gemms.end() ? ImplicitGemm{} : *it;
  };
  auto widths_on = [&](const DeviceLimits& on, const Compute& c, const std::string& layout, int a_input) {
    const ImplicitGemm g = gemm_of(c, layout, a_input);
    return g.hw ? family_of(*g.hw).choices(g, default_schedule(g, on), on).values_of("warp_n") : std::vector<int>{};
  };
  auto widths = [&](const Compute& c, const std::string& layout, int a_input) { return widths_on(limits, c, layout, a_input); };
  const std::vector<int> usual = {16, 32, 64, 96, 128, 192, 256};
  auto with = [&](std::vector<int> extra) {
    std::vector<int> out = usual;
    out.insert(out.end(), extra.begin(), extra.end());
    return out;
  };
  const Compute& qkv = typed_compute(keep, "gemm", "float16", "float32", {"M=512", "N=2304", "K=768"});
  EXPECT_EQ(widths(qkv, "nnn", 0), usual);  // 144 and 80 rounded up to 64 are 192 and 128
  EXPECT_EQ(widths(qkv, "ttn", 1), with({176, 80, 48}));
  // The blocks of each added width's tiles fit one wave, and one more tile along n would not.
  const ImplicitGemm g = gemm_of(qkv, "ttn", 1);
  for (const auto& [bm, width] : std::vector<std::pair<std::int64_t, std::int64_t>>{{64, 176}, {128, 80}, {192, 48}}) {
    const std::int64_t m_tiles = (g.M + bm - 1) / bm, n_tiles = (g.N + width - 1) / width;
    EXPECT_LE(m_tiles * n_tiles, 132) << bm;
    EXPECT_GT(m_tiles * (n_tiles + 1), 132) << bm;
  }
  const Compute& range = typed_compute(keep, "gemm", "float16", "float32", {"M=1..512", "N=2304", "K=768"});
  EXPECT_EQ(widths(range, "ttn", 1), usual);
  // A GPU's own SM count (an H100 PCIe's 114: 128 x 96 and 192 x 64 tiles are usual widths);
  // none where neither the count nor the architecture is known.
  DeviceLimits pcie = limits;
  pcie.sm_count = 114;
  EXPECT_EQ(pcie.sms(), 114);
  EXPECT_EQ(limits.sms(), kSm90Sms);
  EXPECT_EQ(widths_on(pcie, qkv, "ttn", 1), with({176, 48}));
  const DeviceLimits unknown;
  EXPECT_EQ(unknown.sms(), 0);
  EXPECT_EQ(widths_on(unknown, qkv, "ttn", 1), usual);
}

// The narrower swizzles (swizzle 2, 3: 64- and 32-byte lines): the descriptors name layout type
// 2 or 3 with SBO of 8 lines, the shared index function XORs the line's 128-byte row masked to a
// line's chunks, tensor maps swizzle as the tile is laid out with one line per box; every layout,
// dtype, producer (none, TMA, persistent) and an im2col input of 32 or 16 channels (a whole line
// of the narrower modes only) compile for sm_90a. A short reduction takes the narrowest line that
// holds it by default; the refusals name the swizzle that would do.
TEST(Codegen, WgmmaNarrowSwizzles) {
  std::vector<Job> jobs;
  std::vector<std::unique_ptr<Compute>> keep;
  const DeviceLimits limits = DeviceLimits::for_arch(90);
  auto typed = [&](const std::string& op, const std::string& in_t, const std::string& out_t,
                   const std::vector<std::string>& sets) -> const Compute& {
    return typed_compute(keep, op, in_t, out_t, sets);
  };
  int checked_maps = 0;
  auto add = [&](const Compute& c, const std::string& hw_name, const std::string& label) {
    int layouts = 0;
    for (const ImplicitGemm& g : gemm_per_match(c, hw_name)) {
      const int bytes = dtype_bits(g.hw->a_dtype) / 8;
      for (int swizzle : {2, 3})
        for (int producer : {0, 1, 2}) {
          ScheduleParams p = default_schedule(g, limits);
          p.swizzle = swizzle;
          p.block_k = (128 >> (swizzle - 1)) / bytes * (producer == 0 ? 2 : 1);  // one or two lines
          p.producer = producer;
          p.split_k = 1;
          if (!validate(g, p, limits).empty()) continue;
          ++layouts;
          const int line = 128 >> (swizzle - 1);
          KernelSource k = emit_kernel(g, p);
          const std::string name = label + " " + g.layout + " swizzle " + std::to_string(swizzle) + " producer " +
                                   std::to_string(producer);
          EXPECT_NE(k.code.find("smem_desc<" + std::to_string(swizzle) + ">("), std::string::npos) << name;
          EXPECT_NE(k.code.find(", " + std::to_string(8 * line) + ");"), std::string::npos) << name << ": SBO of 8 lines";
          EXPECT_NE(k.code.find("_T, " + std::to_string(line) + ">(r, c)"), std::string::npos) << name << ": the line's swizzle";
          for (const TensorMapSpec& m : k.tensor_maps) {
            EXPECT_EQ(m.swizzle_bytes, line) << name;
            EXPECT_EQ(m.box[0] * static_cast<std::uint32_t>(dtype_bits(m.dtype) / 8), static_cast<std::uint32_t>(line))
                << name << ": one line per box";
            ++checked_maps;
          }
          jobs.push_back({name, k});
        }
    }
    EXPECT_GT(layouts, 0) << label << ": no layout takes a narrower swizzle";
  };
  for (const char* op : {"gemm", "gemm_nt", "gemm_tn", "gemm_tt"})
    add(typed(op, "float16", "float32", {"M=200", "N=136", "K=520"}), "wgmma_fp16_fp32", op);
  add(typed("gemm_nt", "bfloat16", "float32", {"M=300", "N=200", "K=256"}), "wgmma_bf16_fp32", "bf16");
  add(typed("gemm_nt", "float32", "float32", {"M=300", "N=200", "K=256"}), "wgmma_tf32_fp32", "tf32");
  add(typed("gemm_nt", "int8", "int32", {"M=300", "N=200", "K=256"}), "wgmma_int8_int32", "int8");
  add(typed("gemm_nt", "float8_e4m3", "float32", {"M=300", "N=200", "K=256"}), "wgmma_e4m3_fp32", "e4m3");
  add(typed("conv2d_nhwc", "float16", "float32", {"N=2", "C=32", "H=9", "W=11", "K=40", "pad=1"}), "wgmma_fp16_fp32",
      "conv2d_nhwc C=32");
  add(typed("conv2d_nhwc", "float16", "float32", {"N=2", "C=16", "H=9", "W=11", "K=40", "pad=1"}), "wgmma_fp16_fp32",
      "conv2d_nhwc C=16");
  add(typed("conv2d", "float16", "float32", {"N=2", "C=32", "H=9", "W=11", "K=40", "pad=1"}), "wgmma_fp16_fp32",
      "conv2d C=32");
  EXPECT_GT(checked_maps, 20);

  // The im2col boxes of 32 channels (64 bytes) need the 64- or 32-byte swizzle; the refusal of the
  // 128-byte one says so.
  {
    const Compute& c = typed("conv2d_nhwc", "float16", "float32", {"N=2", "C=32", "H=9", "W=11", "K=40", "pad=1"});
    bool refused = false;
    for (const ImplicitGemm& g : gemm_per_match(c, "wgmma_fp16_fp32")) {
      ScheduleParams p = default_schedule(g, limits);
      p.producer = 1;
      p.swizzle = 2;
      p.block_k = 32;
      if (!validate(g, p, limits).empty()) continue;  // the layout's other operand has no TMA box
      p.swizzle = 1;
      p.block_k = 64;
      const std::string said = validation_text(g, p, limits);
      EXPECT_NE(said.find("32 channels are not whole lines; use swizzle 2"), std::string::npos) << said;
      refused = true;
    }
    EXPECT_TRUE(refused) << "no layout of a 32-channel convolution reads its input in im2col boxes";
  }
  // Short reductions default to the narrowest line that holds them.
  for (const auto& [k, swizzle] : std::vector<std::pair<std::string, int>>{{"K=16", 3}, {"K=32", 2}, {"K=40", 1}, {"K=64", 1}}) {
    const ImplicitGemm g = gemm_per_match(typed("gemm_nt", "float16", "float32", {"M=256", "N=256", k}), "wgmma_fp16_fp32").at(0);
    const ScheduleParams d = default_schedule(g, limits);
    EXPECT_EQ(d.swizzle, swizzle) << k;
    EXPECT_EQ(d.block_k, (128 >> (swizzle - 1)) / 2) << k;
    EXPECT_TRUE(validate(g, d, limits).empty()) << k;
    jobs.push_back({"gemm_nt " + k + " default", emit_kernel(g, d)});
  }
  // The search offers the narrower lines only where 128-byte ones fall short.
  {
    auto swizzles = [&](const Compute& c) {
      const ImplicitGemm g = gemm_per_match(c, "wgmma_fp16_fp32").back();
      return family_of(*g.hw).choices(g, default_schedule(g, limits), limits).values_of("swizzle");
    };
    EXPECT_EQ(swizzles(typed("gemm_nt", "float16", "float32", {"M=256", "N=256", "K=512"})), std::vector<int>{1});
    EXPECT_EQ(swizzles(typed("gemm_nt", "float16", "float32", {"M=256", "N=256", "K=32"})), (std::vector<int>{1, 2, 3}));
    EXPECT_EQ(swizzles(typed("conv2d_nhwc", "float16", "float32", {"N=2", "C=32", "H=9", "W=11", "K=40", "pad=1"})),
              (std::vector<int>{1, 2, 3}));
    EXPECT_EQ(swizzles(typed("conv2d_nhwc", "float16", "float32", {"N=2", "C=64", "H=9", "W=11", "K=40", "pad=1"})),
              std::vector<int>{1});
  }
  // Refusals: a swizzle wgmma has no mode for, and the narrower lines on mma_sync.
  {
    const ImplicitGemm g = gemm_per_match(typed("gemm", "float16", "float32", {}), "wgmma_fp16_fp32").at(0);
    ScheduleParams p = default_schedule(g, limits);
    p.swizzle = 4;
    auto issues = validate(g, p, limits);
    ASSERT_FALSE(issues.empty());
    EXPECT_EQ(issues[0].error, ScheduleError::kBadOption);
    EXPECT_NE(issues[0].detail.find("swizzle = 4"), std::string::npos) << issues[0].detail;
    EXPECT_NE(issues[0].detail.find("swizzle takes 0 to 3"), std::string::npos) << issues[0].detail;
    const ImplicitGemm m = gemm_per_match(typed("gemm", "float16", "float32", {}), "mma_sync_fp16_fp32").at(0);
    ScheduleParams q = default_schedule(m, limits);
    q.swizzle = 2;
    issues = validate(m, q, limits);
    ASSERT_FALSE(issues.empty());
    EXPECT_NE(issues.back().detail.find("only wgmma kernels take 2"), std::string::npos) << issues.back().detail;
  }

  std::vector<std::string> failures = compile_all(jobs, {90});
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << jobs.size() << " failed; first:\n"
                                << (failures.empty() ? "" : failures.front());
  EXPECT_GT(jobs.size(), 40u);
  std::cout << "compiled " << jobs.size() << " wgmma kernels with 64- and 32-byte swizzles for sm_90a\n";
}

// Operand A from registers (a_regs 1, wgmma's register form): every dtype, A K-major (ldmatrix)
// and MN-major (ldmatrix.trans), every producer and swizzle, one or two m64 accumulators; the
// kernels load A's fragments into two register sets by step parity, two steps a loop iteration
// (a branch picking the set made ptxas serialize the wgmmas where the step bounds are not
// constants: split-K), and compile for sm_90a without ptxas serializing the wgmmas. The register
// budget counts the fragments, and other families refuse the option.
TEST(Codegen, WgmmaRegisterA) {
  std::vector<Job> jobs;
  std::vector<std::unique_ptr<Compute>> keep;
  const DeviceLimits limits = DeviceLimits::for_arch(90);
  auto typed = [&](const std::string& op, const std::string& in_t, const std::string& out_t,
                   const std::vector<std::string>& sets) -> const Compute& {
    return typed_compute(keep, op, in_t, out_t, sets);
  };
  int transposed = 0;
  auto add = [&](const Compute& c, const std::string& hw_name, const std::string& label) {
    int layouts = 0;
    for (const ImplicitGemm& g : gemm_per_match(c, hw_name)) {
      const ScheduleParams d = default_schedule(g, limits);
      const int line = 128 / (dtype_bits(g.hw->a_dtype) / 8);
      std::vector<std::pair<std::string, ScheduleParams>> schedules;
      auto edit = [&](const std::string& name, auto f) {
        ScheduleParams p = d;
        p.a_regs = 1;
        f(p);
        if (validate(g, p, limits).empty()) schedules.emplace_back(name, p);
      };
      edit("default", [](ScheduleParams&) {});
      edit("gather", [](ScheduleParams& p) { p.producer = 0; });
      // Runtime step bounds (a split's share, an odd count of steps in some: the first step
      // alone), and split-K summed in a cluster.
      edit("gather split 3", [](ScheduleParams& p) { p.producer = 0; p.split_k = 3; p.cluster = 0; });
      edit("gather cluster split 2", [](ScheduleParams& p) { p.producer = 0; p.split_k = 2; p.cluster = 1; });
      edit("tma wm 128 bk x2", [&](ScheduleParams& p) { p.producer = 1; p.warp_m = p.block_m = 128; p.warp_n = p.block_n = 64; p.block_k = 2 * line; p.stages = 3; });
      edit("persistent 2 consumers", [](ScheduleParams& p) { p.producer = 2; p.block_m = 128; p.warp_m = 64; p.split_k = 1; });
      edit("swizzle 2 split 2", [&](ScheduleParams& p) { p.swizzle = 2; p.block_k = line / 2; p.split_k = 2; p.producer = 1; });
      edit("swizzle 3 persistent", [&](ScheduleParams& p) { p.swizzle = 3; p.block_k = line / 4; p.producer = 2; p.split_k = 1; });
      // A pair sharing A by multicast: each block's ldmatrix reads its own copy.
      edit("persistent pair n", [](ScheduleParams& p) { p.producer = 2; p.split_k = 1; p.cluster = 3; });
      edit("pair m", [](ScheduleParams& p) { p.producer = 1; p.split_k = 1; p.cluster = 2; });
      if (schedules.empty()) continue;
      ++layouts;
      for (const auto& [name, p] : schedules) {
        const KernelSource k = emit_kernel(g, p);
        const std::string what = label + " " + g.layout + " " + name;
        const bool mn = g.layout[0] == 't';
        transposed += mn;
        EXPECT_NE(k.code.find(mn ? "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" : "ldmatrix.sync.aligned.m8n8.x4.shared.b16"),
                  std::string::npos) << what;
        EXPECT_NE(k.code.find("const unsigned (&a)[4], unsigned long long desc_b"), std::string::npos) << what;
        EXPECT_EQ(k.code.find("a_desc"), std::string::npos) << what << ": A has no descriptor";
        EXPECT_NE(k.code.find("consume(step + 1, a_odd);"), std::string::npos) << what << ": two steps an iteration";
        EXPECT_EQ(k.code.find("t & 1"), std::string::npos) << what << ": no branch picks the set";
        jobs.push_back({what, k});
      }
    }
    EXPECT_GT(layouts, 0) << label << ": no layout takes A from registers";
  };
  for (const char* op : {"gemm", "gemm_nt", "gemm_tn", "gemm_tt"})
    add(typed(op, "float16", "float32", {"M=200", "N=136", "K=520"}), "wgmma_fp16_fp32", op);
  add(typed("gemm_nt", "bfloat16", "float32", {"M=300", "N=200", "K=256"}), "wgmma_bf16_fp32", "bf16");
  add(typed("gemm_nt", "float32", "float32", {"M=300", "N=200", "K=256"}), "wgmma_tf32_fp32", "tf32");
  add(typed("gemm_nt", "int8", "int32", {"M=300", "N=200", "K=256"}), "wgmma_int8_int32", "int8");
  add(typed("gemm_nt", "float8_e4m3", "float32", {"M=300", "N=200", "K=256"}), "wgmma_e4m3_fp32", "e4m3");
  add(typed("conv2d_nhwc", "float16", "float32", {"N=2", "C=64", "H=9", "W=11", "K=40", "pad=1"}), "wgmma_fp16_fp32",
      "conv2d_nhwc");
  EXPECT_GT(transposed, 0) << "an A stored along m (ldmatrix.trans)";

  // The fragments count against the register budget: two consumers of 128 x 192 (192
  // accumulators, 232 registers a thread once the producer gave its own) have room for no
  // 2 x 2 x 4 x 4 more; and two sets hold at most 64.
  {
    std::vector<ImplicitGemm> gemms =
        gemm_per_match(typed("gemm_nt", "float16", "float32", {"M=512", "N=512", "K=512"}), "wgmma_fp16_fp32");
    const auto tma = std::find_if(gemms.begin(), gemms.end(),
                                  [&](const ImplicitGemm& each) { return default_schedule(each, limits).producer == 1; });
    ASSERT_NE(tma, gemms.end()) << "a layout that takes a TMA producer";
    const ImplicitGemm& g = *tma;
    ScheduleParams p = default_schedule(g, limits);
    p.block_m = 256;
    p.warp_m = 128;
    p.block_n = p.warp_n = 192;
    p.block_k = 64;
    p.stages = 3;
    p.a_regs = 1;
    std::string said = validation_text(g, p, limits);
    EXPECT_NE(said.find("leave 232 registers a consumer thread (the producer warpgroup keeping 40), too few for 192 "
                        "accumulators and 64 registers of A fragments"),
              std::string::npos) << said;
    p.a_regs = 0;
    const auto without = validate(g, p, limits);
    EXPECT_TRUE(without.empty()) << without[0].detail;
    p.a_regs = 1;
    p.block_m = 128;
    p.warp_m = 64;
    p.block_n = p.warp_n = 64;
    p.block_k = 256;
    said = validation_text(g, p, limits);
    EXPECT_NE(said.find("128 registers of A fragments (two sets of 1 m64 accumulators x 16 k steps x 4), at most 64"),
              std::string::npos) << said;
    const ImplicitGemm m = gemm_per_match(typed("gemm", "float16", "float32", {}), "mma_sync_fp16_fp32").at(0);
    ScheduleParams q = default_schedule(m, limits);
    q.a_regs = 1;
    said = validation_text(m, q, limits);
    EXPECT_NE(said.find("only wgmma kernels take a_regs"), std::string::npos) << said;
  }

  std::vector<CompileJob> sources;
  for (const Job& j : jobs) sources.push_back({j.kernel.name, j.kernel.code});
  NvrtcCompiler compiler(90);
  // Every kernel, but the sample testing::sweep_compiles gives the sanitizer build's run.
  const auto results = testing::compile_sweep(compiler, sources);
  std::size_t failed = 0;
  for (const auto& [i, r] : results) {
    EXPECT_TRUE(r.ok) << jobs[i].label << ":\n" << r.log;
    failed += !r.ok;
    // ptxas says so (C7510-C7520) when it must serialize wgmmas around register accesses.
    EXPECT_EQ(r.log.find("wgmma.mma_async"), std::string::npos) << jobs[i].label << ":\n" << r.log;
  }
  EXPECT_GT(jobs.size(), 40u);
  EXPECT_FALSE(results.empty());
  std::cout << "compiled " << results.size() - failed << " of " << results.size() << " of the " << jobs.size()
            << " wgmma kernels with A from registers\n";
}

using ScheduleEdit = std::pair<std::string, std::function<void(ScheduleParams&)>>;

/// A persistent kernel's 64 x 64 tile as it is, with two consumers, and in ping-pong: the
/// schedules whose stores the bulk_store tests vary.
std::vector<ScheduleEdit> persistent_store_edits() {
  return {{"64x64", [](ScheduleParams&) {}},
          {"2 consumers 128x128", [](ScheduleParams& p) { p.block_m = 128; p.warp_m = 64; p.block_n = p.warp_n = 128; }},
          {"ping-pong 64x128", [](ScheduleParams& p) { p.producer = 3; p.block_m = p.warp_m = 64; p.block_n = p.warp_n = 128; }}};
}

// Persistent kernels that store their tiles by bulk copies (bulk_store 1): GEMMs and an im2col
// convolution in both operand orders (the epilogue tile's rows along m, and along n in the
// transposed product), float16 and float32 outputs, two consumers, ping-pong and pairs of blocks,
// compile for sm_90a and store through out_address(); kernels without the knob carry no trace of
// it; validation names what it refuses.
TEST(Codegen, WgmmaBulkStore) {
  std::vector<Job> jobs;
  std::vector<std::unique_ptr<Compute>> keep;
  const DeviceLimits limits = DeviceLimits::for_arch(90);
  std::vector<ScheduleEdit> edits = persistent_store_edits();
  edits.push_back({"pair along m", [](ScheduleParams& p) { p.cluster = 2; }});
  const std::vector<std::pair<std::string, std::vector<std::string>>> computes = {
      {"gemm_nt", {"M=256", "N=384", "K=520"}}, {"gemm", {"M=256", "N=512", "K=200"}},
      {"gemm_nt", {"M=200", "N=136", "K=72"}},  // last tiles past the end, their boxes clamped
      {"conv2d_nhwc", {"N=8", "C=64", "H=16", "W=16", "K=128", "pad=1"}}};
  for (const auto& [op, sets] : computes)
    for (const std::string out : {"float16", "float32"})
      for (int a_input : {0, 1}) {
        keep.push_back(std::make_unique<Compute>(testing::narrowed_op(op, out, sets)));
        auto persistent = [&](const ImplicitGemm& g) {
          ScheduleParams p = default_schedule(g, limits);
          p.producer = 2, p.split_k = 1;
          p.block_m = p.warp_m = p.block_n = p.warp_n = 64;
          return p;
        };
        // The first layout whose operands a TMA producer reads.
        const std::vector<ImplicitGemm> layouts = gemm_per_match(*keep.back(), "wgmma_fp16_fp32", a_input);
        const auto g_it = std::find_if(layouts.begin(), layouts.end(),
                                       [&](const ImplicitGemm& g) { return validate(g, persistent(g), limits).empty(); });
        ASSERT_NE(g_it, layouts.end()) << op << " " << out << ": no layout takes a persistent kernel";
        const ImplicitGemm& g = *g_it;
        for (const auto& [label, edit] : edits) {
          if (out == "float32" && label != "64x64") continue;
          const std::string what = op + " " + out + " " + g.layout + (a_input ? " transposed " : " ") + label;
          ScheduleParams p = persistent(g);
          edit(p);
          if (!validate(g, p, limits).empty()) continue;  // a pair shares tiled boxes only
          const std::string plain = emit_kernel(g, p).code;
          EXPECT_EQ(plain.find("bulk_store(out_address"), std::string::npos) << what;
          EXPECT_EQ(plain.find("TmaMap tma_c"), std::string::npos) << what;
          for (int form : {1, 2}) {
            p.bulk_store = form;
            const std::string said = validation_text(g, p, limits);
            EXPECT_EQ(said, "") << what << " bulk_store " << form;
            if (!said.empty()) continue;
            jobs.push_back({what + " bulk_store " + std::to_string(form), emit_kernel(g, p)});
            const std::string& code = jobs.back().kernel.code;
            if (form == 1) EXPECT_NE(code.find("bulk_store(out_address"), std::string::npos) << what;
            if (form == 2) EXPECT_NE(code.find("(tma_c, Ct + slice * CS_ROWS * CS_W"), std::string::npos) << what;
            // The transposed ragged GEMM's last tiles along n (N = 200 there, the tile's rows) are
            // stored whole by TMA: their writes rotate along n instead of the stores reading on.
            if (form == 2 && a_input == 1 && sets[0] == "M=200")
              EXPECT_NE(code.find("rotated<BN>("), std::string::npos) << what;
            EXPECT_EQ(jobs.back().kernel.tensor_maps.size(), form == 2 ? 3u : 2u) << what;
          }
        }
      }
  // 4 computes x 2 orders x 4 in float16, 8 in float32, less the transposed convolution's pair
  // (its B, the pixels, is read in im2col boxes, which a pair does not share), in both forms.
  EXPECT_EQ(jobs.size(), 78u);
  // The clamped last tiles: rows rotated into place, and rows read skip_n further on.
  const auto skipping = std::count_if(jobs.begin(), jobs.end(), [](const Job& j) {
    return j.kernel.code.find("&Cs[(row + skip_n) * C_LD + col]") != std::string::npos;
  });
  const auto rotating = std::count_if(jobs.begin(), jobs.end(), [](const Job& j) {
    return j.kernel.code.find("rotated<BM>(") != std::string::npos;
  });
  EXPECT_GT(skipping, 0);
  EXPECT_GT(rotating, 0);
  for (const std::string& f : compile_all(jobs, {90})) ADD_FAILURE() << f;
  // Refusals, each with its reason.
  auto refusal = [&](const Compute& c, const std::string& hw, const std::function<void(ScheduleParams&)>& edit) {
    const ImplicitGemm g = gemm_per_match(c, hw).at(0);
    ScheduleParams p = default_schedule(g, limits);
    p.producer = 2, p.split_k = 1, p.bulk_store = 1;
    edit(p);
    return validation_text(g, p, limits);
  };
  const Compute gemm = testing::narrowed_op("gemm", "float16", {"M=256", "N=256", "K=64"});
  EXPECT_NE(refusal(gemm, "wgmma_fp16_fp32", [](ScheduleParams& p) { p.producer = 1; }).find("only persistent kernels"),
            std::string::npos);
  const Compute odd = testing::narrowed_op("gemm", "float16", {"M=200", "N=130", "K=64"});
  EXPECT_NE(refusal(odd, "wgmma_fp16_fp32", [](ScheduleParams&) {}).find("not contiguous, aligned runs of 16 bytes"),
            std::string::npos);
  const Compute fused = testing::fused_op("gemm", "float16", "Y[m, n] = relu(C[m, n] + bias[n])", {"M=256", "N=256", "K=64"});
  EXPECT_NE(refusal(fused, "wgmma_fp16_fp32", [](ScheduleParams&) {}).find("a fused epilogue"), std::string::npos);
  EXPECT_NE(refusal(gemm, "mma_sync_fp16_fp32", [](ScheduleParams& p) { p.producer = 0; }).find("only wgmma kernels take bulk_store"),
            std::string::npos);
}

// TMA stores (bulk_store 2) of outputs with a fused epilogue: the consumers apply it to their
// epilogue tile in place (epi_in_place) between two barriers, then one thread stores the tile.
// Per-channel and full-shape operands, rows along n and (transposed) along m, one and two
// consumers and ping-pong compile for sm_90a; bulk copies of rows (1) still refuse an epilogue.
TEST(Codegen, WgmmaTmaStoreEpilogue) {
  std::vector<Job> jobs;
  std::vector<std::unique_ptr<Compute>> keep;
  const DeviceLimits limits = DeviceLimits::for_arch(90);
  const std::vector<ScheduleEdit> edits = persistent_store_edits();
  const std::vector<std::tuple<std::string, std::string, std::vector<std::string>>> computes = {
      {"gemm", "Y[m, n] = relu(C[m, n] + bias[n])", {"M=256", "N=384", "K=200"}},
      {"gemm", "Y[m, n] = gelu(C[m, n] * s[m]) + R[m, n]", {"M=192", "N=200", "K=72"}},  // last tiles rotated
      {"conv2d_nhwc", "Y[n, p, q, k] = relu(Out[n, p, q, k] * s[k] + b[k] + R[n, p, q, k])",
       {"N=8", "C=64", "H=16", "W=16", "K=128", "pad=1"}}};
  int refused_rows = 0;
  for (const auto& [op, epilogue, sets] : computes) {
    keep.push_back(std::make_unique<Compute>(testing::fused_op(op, "float16", epilogue, sets)));
    for (int a_input : {0, 1})
      for (const ImplicitGemm& g : gemm_per_match(*keep.back(), "wgmma_fp16_fp32", a_input)) {
        ScheduleParams base = default_schedule(g, limits);
        base.producer = 2, base.split_k = 1, base.bulk_store = 2;
        base.block_m = base.warp_m = base.block_n = base.warp_n = 64;
        if (!validate(g, base, limits).empty()) continue;  // the first layout that takes TMA stores
        for (const auto& [label, edit] : edits) {
          ScheduleParams p = base;
          edit(p);
          const std::string what = op + " " + g.layout + (a_input ? " transposed " : " ") + label;
          const std::string said = validation_text(g, p, limits);
          EXPECT_EQ(said, "") << what;
          if (!said.empty()) continue;
          jobs.push_back({what, emit_kernel(g, p)});
          const std::string& code = jobs.back().kernel.code;
          EXPECT_NE(code.find("epi_in_place(out, m0 + mm, n0 + nn, z, &Ct[cs_at("), std::string::npos) << what;
          EXPECT_NE(code.find("(tma_c, Ct + slice * CS_ROWS * CS_W"), std::string::npos) << what;
          EXPECT_EQ(code.find("store_d_vec(out, m0"), std::string::npos) << what << ": stored twice";
        }
        ScheduleParams rows = base;
        rows.bulk_store = 1;
        const std::string said = validation_text(g, rows, limits);
        refused_rows += said.find("a fused epilogue reads its operands") != std::string::npos;
        break;
      }
  }
  EXPECT_EQ(refused_rows, 6) << "row copies refuse an epilogue";
  // 3 computes x 2 operand orders x 3 schedules.
  EXPECT_EQ(jobs.size(), 18u);
  for (const std::string& f : compile_all(jobs, {90})) ADD_FAILURE() << f;
}

// Consumers of a TMA producer's ring that wait on a stage warp-uniformly (uniform_wait 1): the
// kernels compile for sm_90a, wait through mbar_wait_warp() (vote.all), and ptxas serializes the
// wgmmas of fewer of them than with per-thread waits; uniform_wait 0 emits no trace of it.
TEST(Codegen, WgmmaUniformWait) {
  std::vector<Job> plain, uniform;
  std::vector<std::unique_ptr<Compute>> keep;
  const DeviceLimits limits = DeviceLimits::for_arch(90);
  // Short reductions, whose consumer loop ptxas unrolls whole, with one or two m64 accumulators
  // a warpgroup: with per-thread waits ptxas serializes most of the second kind.
  for (const char* k : {"K=72", "K=128", "K=256"}) {
    const Compute& c = typed_compute(keep, "gemm", "float16", "float32", {"M=4096", "N=4096", k});
    for (const ImplicitGemm& g : gemm_per_match(c, "wgmma_fp16_fp32"))
      for (int producer : {1, 2})
        for (int wm : {64, 128}) {
          ScheduleParams p = default_schedule(g, limits);
          p.producer = producer;
          p.split_k = 1;
          p.block_m = 128, p.warp_m = wm, p.block_n = p.warp_n = 128;
          if (!validate(g, p, limits).empty()) continue;
          const std::string what =
              std::string(k) + " " + g.layout + " producer " + std::to_string(producer) + " warp_m " + std::to_string(wm);
          plain.push_back({what, emit_kernel(g, p)});
          p.uniform_wait = 1;
          ASSERT_TRUE(validate(g, p, limits).empty()) << what;
          uniform.push_back({what + " uniform", emit_kernel(g, p)});
          EXPECT_EQ(plain.back().kernel.code.find("mbar_wait_warp"), std::string::npos) << what;
          EXPECT_NE(uniform.back().kernel.code.find("mbar_wait_warp(&full[buf]"), std::string::npos) << what;
        }
  }
  ASSERT_GT(plain.size(), 3u);
  auto serialized = [](const std::vector<Job>& jobs) {
    std::vector<CompileJob> sources;
    for (const Job& j : jobs) sources.push_back({j.kernel.name, j.kernel.code});
    NvrtcCompiler compiler(90);
    int count = 0;
    const std::vector<CompileResult> results = compile_parallel(compiler, sources);
    for (std::size_t i = 0; i < results.size(); ++i) {
      EXPECT_TRUE(results[i].ok) << jobs[i].label << ":\n" << results[i].log;
      count += results[i].log.find("wgmma.mma_async") != std::string::npos;  // ptxas C7510-C7520
    }
    return count;
  };
  const int before = serialized(plain), after = serialized(uniform);
  std::cout << "serialized wgmma kernels: " << before << " of " << plain.size() << " with per-thread waits, " << after
            << " with warp-uniform waits\n";
  EXPECT_LT(after, before);
  // Refusals: without a producer nothing waits on stages, and the other families take no such knob.
  const ImplicitGemm g = gemm_per_match(typed_compute(keep, "gemm", "float16", "float32", {}), "wgmma_fp16_fp32").at(0);
  ScheduleParams p = default_schedule(g, limits);
  p.producer = 0;
  p.uniform_wait = 1;
  std::string said = validation_text(g, p, limits);
  EXPECT_NE(said.find("uniform_wait = 1 without a TMA producer"), std::string::npos) << said;
  const ImplicitGemm m = gemm_per_match(typed_compute(keep, "gemm", "float16", "float32", {}), "mma_sync_fp16_fp32").at(0);
  ScheduleParams q = default_schedule(m, limits);
  q.uniform_wait = 1;
  said = validation_text(m, q, limits);
  EXPECT_NE(said.find("only wgmma kernels take uniform_wait"), std::string::npos) << said;
}

// Ping-pong consumers (producer 3): two consumer warpgroups each multiplying whole tiles (the
// block tile is the warpgroup's), every other of the block's tiles, taking turns on the main loop
// through two mbarriers and storing through an epilogue tile each, synchronized per warpgroup.
// GEMMs of the four layouts with tails, bf16 and fp8, narrow outputs, a batched GEMM and im2col
// convolutions in both operand orders compile for sm_90a, the GEMMs' without ptxas serializing
// the wgmmas (the convolutions' 9-step reductions, whose step loop ptxas unrolls whole, it
// serializes in some schedules, as it does some persistent ones': the tuner measures them). The
// tuner draws the block tile of the warpgroup's; the refusals name their reason.
TEST(Codegen, WgmmaPingPong) {
  std::vector<Job> jobs;
  std::vector<std::unique_ptr<Compute>> keep;
  const DeviceLimits limits = DeviceLimits::for_arch(90);
  int layouts = 0;
  auto add = [&](const Compute& c, const std::string& hw_name, const std::string& label, int a_input = -1) {
    for (const ImplicitGemm& g : gemm_per_match(c, hw_name, a_input)) {
      const ScheduleParams d = default_schedule(g, limits);
      int here = 0;
      auto edit = [&](const std::string& name, auto f) {
        ScheduleParams p = d;
        p.producer = 3;
        p.split_k = 1;
        p.cluster = 0;
        f(p);
        if (!validate(g, p, limits).empty()) return;
        ++here;
        const KernelSource k = emit_kernel(g, p);
        const std::string what = label + " " + g.layout + " " + name;
        EXPECT_EQ(k.threads, 384) << what << ": two consumer warpgroups and the producer";
        EXPECT_TRUE(k.persistent) << what;
        for (const char* s : {"mbar_init(&turn[0], 4);", "mbar_arrive(&turn[1 - wg]);", "tile += 2 * gridDim.x",
                              "int t = wg * STEPS;", "consumer_sync(wg);", "e += 128)", "CS_OFFSET + (wg % 2) * CS_STRIDE",
                              "mbar_init(&empty[b], 4);", "const int wm0 = 0, wn0 = 0;"})
          EXPECT_NE(k.code.find(s), std::string::npos) << what << ": " << s;
        jobs.push_back({what, k});
      };
      edit("128x128", [](ScheduleParams& p) { p.block_m = p.warp_m = 128; p.block_n = p.warp_n = 128; p.stages = 4; });
      edit("64x256", [](ScheduleParams& p) { p.block_m = p.warp_m = 64; p.block_n = p.warp_n = 256; p.stages = 4; });
      edit("64x128 raster 4 stages 6", [](ScheduleParams& p) { p.block_m = p.warp_m = 64; p.block_n = p.warp_n = 128; p.stages = 6; p.raster = 4; });
      edit("64x128 uniform wait", [](ScheduleParams& p) { p.block_m = p.warp_m = 64; p.block_n = p.warp_n = 128; p.uniform_wait = 1; });
      edit("64x128 a_regs", [](ScheduleParams& p) { p.block_m = p.warp_m = 64; p.block_n = p.warp_n = 128; p.a_regs = 1; });
      layouts += here > 0;
    }
  };
  for (const char* op : {"gemm", "gemm_nt", "gemm_tn", "gemm_tt"})
    add(typed_compute(keep, op, "float16", "float32", {"M=200", "N=136", "K=520"}), "wgmma_fp16_fp32", op);
  add(stored_as(keep, "gemm_nt", "bfloat16", "bfloat16", {"M=4096", "N=4096", "K=256"}), "wgmma_bf16_fp32", "bf16 out");
  add(typed_compute(keep, "gemm_nt", "float8_e4m3", "float32", {"M=300", "N=200", "K=256"}), "wgmma_e4m3_fp32", "e4m3");
  add(typed_compute(keep, "batched_gemm", "float16", "float32", {"BATCH=3", "M=72", "N=64", "K=200"}), "wgmma_fp16_fp32",
      "batched");
  keep.push_back(std::make_unique<Compute>(
      testing::narrowed_op("conv2d_nhwc", "float16", {"N=8", "C=64", "H=56", "W=56", "K=64", "pad=1"})));
  add(*keep.back(), "wgmma_fp16_fp32", "conv2d_nhwc im2col", 0);
  add(*keep.back(), "wgmma_fp16_fp32", "conv2d_nhwc im2col transposed", 1);
  EXPECT_GE(layouts, 8);
  EXPECT_GE(jobs.size(), 30u);
  std::vector<CompileJob> sources;
  for (const Job& j : jobs) sources.push_back({j.kernel.name, j.kernel.code});
  NvrtcCompiler compiler(90);
  const std::vector<CompileResult> results = compile_parallel(compiler, sources);
  int serialized = 0;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_TRUE(results[i].ok) << jobs[i].label << ":\n" << results[i].log;
    // ptxas says so (C7510-C7520) when it must serialize wgmmas around register accesses.
    const bool said = results[i].log.find("wgmma.mma_async") != std::string::npos;
    serialized += said;
    if (jobs[i].label.rfind("conv2d", 0) != 0) EXPECT_FALSE(said) << jobs[i].label << ":\n" << results[i].log;
  }
  std::cout << "compiled " << jobs.size() << " ping-pong kernels; wgmmas serialized in " << serialized << "\n";

  // The tuner draws the warpgroup's tile as the block's; other tiles, pairs and splits are refused.
  const ImplicitGemm g = gemm_per_match(typed_compute(keep, "gemm", "float16", "float32", {}), "wgmma_fp16_fp32").at(0);
  ScheduleParams p = default_schedule(g, limits);
  p.producer = 3;
  p.split_k = 1;
  p.warp_m = 64, p.warp_n = 128;
  EXPECT_EQ(family_of(*g.hw).block_tiles(g, p, 'm'), std::vector<int>{64});
  EXPECT_EQ(family_of(*g.hw).block_tiles(g, p, 'n'), std::vector<int>{128});
  auto said = [&](const ScheduleParams& q) {
    return validation_text(g, q, limits);
  };
  p.block_m = 128, p.block_n = 128;
  EXPECT_NE(said(p).find("producer = 3: each ping-pong consumer warpgroup multiplies whole tiles"), std::string::npos)
      << said(p);
  p.block_m = 64;
  EXPECT_TRUE(said(p).empty()) << said(p);
  ScheduleParams q = p;
  q.cluster = 2;
  EXPECT_NE(said(q).find("ping-pong consumers take tiles of their own, not a pair's"), std::string::npos) << said(q);
  q = p;
  q.split_k = 2;
  EXPECT_NE(said(q).find("a persistent kernel (producer = 3) takes whole output tiles"), std::string::npos) << said(q);
  q = p;
  q.producer = 4;
  EXPECT_NE(said(q).find("producer = 4: producer takes 0 to 3"), std::string::npos) << said(q);
}

// Pairs of blocks sharing an operand tile by TMA multicast (cluster 2: along m sharing B, 3: along
// n sharing A): the kernel is a cluster of 2 along x, the grid's x a whole number of pairs, the
// shared operand's boxes half its rows, its loads multicast and the ring's empty barriers counting
// both blocks' consumers; persistent kernels walk the pairs' tiles. Persistent kernels whose
// consumers need more registers than an even split rebalance them with setmaxnreg. Every variant
// compiles for sm_90a, and the refusals name their reason.
TEST(Codegen, WgmmaClusterPairsAndRegisterRebalance) {
  std::vector<Job> jobs;
  std::vector<std::unique_ptr<Compute>> keep;
  const DeviceLimits limits = DeviceLimits::for_arch(90);
  auto producer_gemm = [&](const Compute& c) {
    for (const ImplicitGemm& g : gemm_per_match(c, "wgmma_fp16_fp32")) {
      ScheduleParams d = default_schedule(g, limits);
      d.producer = 1;
      d.split_k = 1;
      if (validate(g, d, limits).empty()) return std::make_pair(g, d);
    }
    ADD_FAILURE() << c.name << ": no layout takes a TMA producer";
    return std::make_pair(gemm_per_match(c, "wgmma_fp16_fp32").at(0), ScheduleParams{});
  };
  int pairs = 0;
  auto add = [&](const Compute& c, const std::string& label, const std::vector<int>& clusters) {
    const auto chosen = producer_gemm(c);  // not a structured binding: Clang 14 cannot capture one
    const ImplicitGemm& g = chosen.first;
    const ScheduleParams& d = chosen.second;
    for (int cluster : clusters)
      for (int producer : {1, 2})
        for (int raster : {1, 4}) {
          ScheduleParams p = d;
          p.cluster = cluster;
          p.producer = producer;
          p.raster = raster;
          const std::string name = label + " " + g.layout + " cluster " + std::to_string(cluster) + " producer " +
                                   std::to_string(producer) + " raster " + std::to_string(raster);
          const auto issues = validate(g, p, limits);
          ASSERT_TRUE(issues.empty()) << name << ": " << issues[0].detail;
          KernelSource k = emit_kernel(g, p);
          ++pairs;
          EXPECT_EQ(k.cluster_x, 2) << name;
          EXPECT_EQ(k.grid[0] % 2, 0) << name;
          const std::int64_t pair_m = cluster == 2 ? 2 * p.block_m : p.block_m, pair_n = cluster == 3 ? 2 * p.block_n : p.block_n;
          const std::int64_t tiles = (g.M + pair_m - 1) / pair_m * ((g.N + pair_n - 1) / pair_n);
          EXPECT_EQ(k.grid[0], 2 * tiles * (producer == 2 ? g.batch : 1)) << name;
          EXPECT_EQ(k.grid[2], producer == 2 ? 1 : g.batch) << name;
          EXPECT_NE(k.code.find("__cluster_dims__(2, 1, 1)"), std::string::npos) << name;
          EXPECT_NE(k.code.find("tma_multicast_"), std::string::npos) << name;
          EXPECT_NE(k.code.find("4 * CONSUMERS * 2"), std::string::npos) << name;
          EXPECT_NE(k.code.find("mbar_arrive_pair(&empty"), std::string::npos) << name;
          EXPECT_EQ(k.code.find("mbar_arrive(&empty"), std::string::npos) << name << ": every release reaches both blocks";
          // A tile's rows: k where it is stored along m (n), else m (n).
          auto rows = [&](int which) {
            return static_cast<std::uint32_t>(stored_along_mn(g, which) ? p.block_k : which == 0 ? p.block_m : p.block_n);
          };
          const int shared = cluster == 2 ? 1 : 0;
          EXPECT_EQ(k.tensor_maps.at(shared).box[1], rows(shared) / 2) << name;
          EXPECT_EQ(k.tensor_maps.at(1 - shared).box[1], rows(1 - shared)) << name;
          EXPECT_EQ(k.persistent, producer == 2) << name;
          if (producer == 2) EXPECT_NE(k.code.find("tile += gridDim.x / 2"), std::string::npos) << name;
          jobs.push_back({name, k});
        }
  };
  for (const char* op : {"gemm", "gemm_nt", "gemm_tn", "gemm_tt"})
    add(typed_compute(keep, op, "float16", "float32", {"M=200", "N=136", "K=520"}), op, {2, 3});
  add(typed_compute(keep, "batched_gemm", "float16", "float32", {"BATCH=3", "M=72", "N=64", "K=64"}), "batched", {2, 3});
  add(stored_as(keep, "gemm", "float16", "float16", {"M=200", "N=136", "K=520"}), "gemm float16 out", {2, 3});
  // A convolution's input is read in im2col boxes: only the filters (B) are shared, along m.
  const Compute& conv = typed_compute(keep, "conv2d_nhwc", "float16", "float32", {"N=2", "C=64", "H=9", "W=11", "K=40", "pad=1"});
  add(conv, "conv2d_nhwc im2col", {2});

  // The reason against `edit` of the first layout with a valid TMA producer (mma_sync: the first).
  auto refusal = [&](const Compute& c, const std::string& hw, const std::function<void(ScheduleParams&)>& edit) {
    auto chosen = hw == "wgmma_fp16_fp32" ? producer_gemm(c)
                                          : std::make_pair(gemm_per_match(c, hw).at(0), ScheduleParams{});
    const ImplicitGemm& g = chosen.first;
    ScheduleParams& p = chosen.second;
    if (hw != "wgmma_fp16_fp32") p = default_schedule(g, limits);
    edit(p);
    auto issues = validate(g, p, limits);
    return issues.empty() ? std::string() : issues[0].detail;
  };
  const Compute& gemm = typed_compute(keep, "gemm", "float16", "float32", {"M=200", "N=136", "K=520"});
  const std::string im2col = refusal(conv, "wgmma_fp16_fp32", [](ScheduleParams& p) { p.cluster = 3; });
  EXPECT_NE(im2col.find("im2col boxes"), std::string::npos) << im2col;
  EXPECT_NE(im2col.find("use cluster 2"), std::string::npos) << im2col;
  EXPECT_NE(refusal(gemm, "wgmma_fp16_fp32", [](ScheduleParams& p) { p.cluster = 2; p.split_k = 2; }).find("split_k 1"),
            std::string::npos);
  EXPECT_NE(refusal(gemm, "wgmma_fp16_fp32", [](ScheduleParams& p) { p.cluster = 1; p.split_k = 2; p.split_reduce = 1; })
                .find("the cluster's blocks sum the splits"),
            std::string::npos);
  EXPECT_NE(refusal(gemm, "wgmma_fp16_fp32", [](ScheduleParams& p) { p.cluster = 2; p.producer = 0; }).find("TMA producer"),
            std::string::npos);
  EXPECT_NE(refusal(gemm, "wgmma_fp16_fp32", [](ScheduleParams& p) { p.cluster = 4; }).find("cluster takes 0 to 3"), std::string::npos);
  // A K-major B of 40 rows (gemm_nt, n = 40) cannot be halved into whole 8-row atoms.
  const Compute& nt = typed_compute(keep, "gemm_nt", "float16", "float32", {"M=200", "N=40", "K=512"});
  const std::string rows = refusal(nt, "wgmma_fp16_fp32", [](ScheduleParams& p) { p.block_n = p.warp_n = 40; p.cluster = 2; });
  EXPECT_NE(rows.find("multiple of 16"), std::string::npos) << rows;
  EXPECT_NE(refusal(gemm, "mma_sync_fp16_fp32", [](ScheduleParams& p) { p.producer = 0; p.cluster = 2; }).find("only wgmma"),
            std::string::npos);
  EXPECT_EQ(refusal(gemm, "wgmma_fp16_fp32", [](ScheduleParams& p) { p.cluster = 2; }), "");

  // setmaxnreg: a persistent kernel of 4 consumers of 64 x 128 (640 threads, 96 registers each at
  // launch) gives the producer 40 and its consumers 104; 2 consumers (168 each) need no rebalance;
  // without the persistent loop the same tile is refused for its registers.
  const Compute& half_out = stored_as(keep, "gemm", "float16", "float16", {"M=1024", "N=1024", "K=512"});
  const ImplicitGemm g = gemm_per_match(half_out, "wgmma_fp16_fp32").at(0);
  ScheduleParams four = default_schedule(g, limits);
  four.producer = 2;
  four.split_k = 1;
  four.block_m = 256;
  four.warp_m = 64;
  four.block_n = four.warp_n = 128;
  four.stages = 3;
  ASSERT_TRUE(validate(g, four, limits).empty()) << validate(g, four, limits)[0].detail;
  KernelSource k = emit_kernel(g, four);
  EXPECT_EQ(k.threads, 640);
  EXPECT_NE(k.code.find("setmaxnreg.dec.sync.aligned.u32 40;"), std::string::npos);
  EXPECT_NE(k.code.find("setmaxnreg.inc.sync.aligned.u32 104;"), std::string::npos);
  jobs.push_back({"persistent 4 consumers 256x128", k});
  ScheduleParams three = four;
  three.block_m = 192;
  three.block_n = three.warp_n = 192;
  ASSERT_TRUE(validate(g, three, limits).empty()) << validate(g, three, limits)[0].detail;
  k = emit_kernel(g, three);
  EXPECT_NE(k.code.find("setmaxnreg.inc.sync.aligned.u32 152;"), std::string::npos);
  jobs.push_back({"persistent 3 consumers 192x192", k});
  three.cluster = 2;
  ASSERT_TRUE(validate(g, three, limits).empty()) << validate(g, three, limits)[0].detail;
  jobs.push_back({"persistent 3 consumers 192x192 pair m", emit_kernel(g, three)});
  ScheduleParams two = four;
  two.block_m = 128;
  two.block_n = two.warp_n = 256;
  EXPECT_EQ(emit_kernel(g, two).code.find("setmaxnreg"), std::string::npos);
  // Without the persistent loop the producer gives its registers away too, and leaves: the
  // epilogue is the consumers' (their barrier, their stride), where no barrier of every thread
  // follows the main loop; a last block summing the splits is one, so that kernel is refused.
  ScheduleParams joined = four;
  joined.producer = 1;
  ASSERT_TRUE(validate(g, joined, limits).empty()) << validate(g, joined, limits)[0].detail;
  k = emit_kernel(g, joined);
  EXPECT_NE(k.code.find("setmaxnreg.inc.sync.aligned.u32 104;"), std::string::npos);
  EXPECT_NE(k.code.find("return;  // the epilogue is the consumers'"), std::string::npos);
  EXPECT_NE(k.code.find("consumer_sync();  // every box was consumed"), std::string::npos);
  EXPECT_NE(k.code.find("e += (THREADS - 128)"), std::string::npos);
  EXPECT_EQ(k.code.find("__syncthreads();  // every box was consumed"), std::string::npos);
  jobs.push_back({"producer 1, 4 consumers 256x128", k});
  ScheduleParams summed = joined;
  summed.split_k = 2;
  summed.split_reduce = 1;
  const auto issues = validate(g, summed, limits);
  ASSERT_FALSE(issues.empty());
  EXPECT_NE(issues[0].detail.find("96 registers a thread"), std::string::npos) << issues[0].detail;
  // Two consumers of 128 x 192 (192 accumulators) take 232 registers each; 128 x 256 (256) is
  // refused for its accumulators.
  ScheduleParams wide = joined;
  wide.warp_m = 128;
  wide.block_n = wide.warp_n = 192;
  ASSERT_TRUE(validate(g, wide, limits).empty()) << validate(g, wide, limits)[0].detail;
  k = emit_kernel(g, wide);
  EXPECT_EQ(k.threads, 384);
  EXPECT_NE(k.code.find("setmaxnreg.inc.sync.aligned.u32 232;"), std::string::npos);
  jobs.push_back({"producer 1, 2 consumers 256x192", k});
  for (int cluster : {2, 3}) {  // pairs: the producer passes the pair's last barrier before it leaves
    ScheduleParams pair = wide;
    pair.cluster = cluster;
    ASSERT_TRUE(validate(g, pair, limits).empty()) << validate(g, pair, limits)[0].detail;
    const KernelSource kp = emit_kernel(g, pair);
    EXPECT_NE(kp.code.find("cluster_sync();  // the pair's last barrier"), std::string::npos) << cluster;
    EXPECT_NE(kp.code.find("setmaxnreg.inc.sync.aligned.u32 232;"), std::string::npos) << cluster;
    jobs.push_back({"producer 1, 2 consumers 256x192 cluster " + std::to_string(cluster), kp});
  }
  NvrtcCompiler nvrtc(90);
  const CompileResult wide_binary = nvrtc.compile(k.code, k.name);
  EXPECT_TRUE(wide_binary.ok) << wide_binary.log.substr(0, 2000);
  EXPECT_EQ(wide_binary.log.find("wgmma.mma_async"), std::string::npos) << "ptxas serialized the wgmmas:\n" << wide_binary.log;
  wide.block_n = wide.warp_n = 256;
  const auto too_many = validate(g, wide, limits);
  ASSERT_FALSE(too_many.empty());
  EXPECT_NE(too_many[0].detail.find("256 accumulator registers per thread (at most 192)"), std::string::npos)
      << too_many[0].detail;
  // Beyond 128 accumulators only there: not in ping-pong (nor persistent) kernels, nor without a producer.
  for (int producer : {3, 0}) {
    ScheduleParams other = four;
    other.producer = producer;
    other.block_m = producer == 3 ? 128 : 256;
    other.warp_m = 128;
    other.block_n = other.warp_n = 192;
    const auto refused = validate(g, other, limits);
    ASSERT_FALSE(refused.empty()) << producer;
    EXPECT_NE(refused[0].detail.find("192 accumulator registers per thread (at most 128; up to 192 with producer 1"),
              std::string::npos) << refused[0].detail;
  }

  std::vector<std::string> failures = compile_all(jobs, {90});
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << jobs.size() << " failed; first:\n"
                                << (failures.empty() ? "" : failures.front());
  EXPECT_GE(pairs, 40);
  std::cout << "compiled " << jobs.size() << " paired or rebalanced wgmma kernels for sm_90a\n";
}

// Convolution inputs read by TMA in im2col mode (producer = 1): channels-last inputs in place
// (3x3 with padding, stride 2, dilation 2, 1x1 stride 2, the image in m or in the grid) and the
// channels-last copies of NCW, NCHW and NCDHW convolutions (rank 3, 4 and 5 maps) get an im2col
// map for A and a tiled one for B; in the transposed product (filters as A, pixels on n) the
// input is B's im2col map and the filters A's tiled one; the kernels compile for sm_90a; the
// map's corners, strides and traversal steps are those of the convolution; a block_k not
// dividing K is refused.
TEST(Codegen, WgmmaIm2colProducer) {
  std::vector<Job> jobs;
  std::vector<std::unique_ptr<Compute>> keep;
  const DeviceLimits limits = DeviceLimits::for_arch(90);
  auto typed = [&](const std::string& op, const std::vector<std::string>& sets) -> const Compute& {
    return typed_compute(keep, op, "float16", "float32", sets);
  };
  int im2col = 0, transposed = 0;
  auto add = [&](const ImplicitGemm& g, const std::string& label) {
    const int which = g.a_input == 0 ? 0 : 1;  // the input tensor I (or X) is the compute's first
    ScheduleParams d = default_schedule(g, limits);
    d.producer = 1;
    d.relayout = g.relayout_knob;
    const auto issues = validate(g, d, limits);
    if (!issues.empty()) return issues[0].detail;
    std::vector<std::pair<std::string, ScheduleParams>> schedules = {{"default", d}};
    auto edit = [&](const std::string& name, auto f) {
      ScheduleParams p = d;
      f(p);
      if (validate(g, p, limits).empty()) schedules.emplace_back(name, p);
    };
    edit("2 consumers 256x128", [](ScheduleParams& p) { p.block_m = 256; p.warp_m = 128; p.block_n = p.warp_n = 128; });
    edit("2 consumers 64x256", [](ScheduleParams& p) { p.block_m = p.warp_m = 64; p.block_n = 256; p.warp_n = 128; });
    edit("persistent raster 2", [](ScheduleParams& p) { p.producer = 2; p.raster = 2; });
    edit("bm 64 stages 6 raster 4", [](ScheduleParams& p) { p.block_m = 64; p.stages = 6; p.raster = 4; });
    edit("split 3", [](ScheduleParams& p) { p.split_k = 3; });
    for (const auto& [name, p] : schedules) {
      KernelSource k = emit_kernel(g, p);
      EXPECT_EQ(k.tensor_maps.size(), 2u) << label;
      if (k.tensor_maps.size() != 2u) continue;
      EXPECT_TRUE(k.tensor_maps[which].im2col) << label;
      EXPECT_FALSE(k.tensor_maps[1 - which].im2col) << label;
      EXPECT_EQ(k.tensor_maps[which].operand, which) << label;
      EXPECT_NE(k.code.find("tma_im2col_"), std::string::npos) << label;
      EXPECT_EQ(k.tensor_maps[which].box[1], static_cast<std::uint32_t>(which == 0 ? p.block_m : p.block_n))
          << label << ": one pixel per row of the tile";
      im2col += k.tensor_maps[which].im2col;
      transposed += which == 1;
      jobs.push_back({label + " " + g.layout + " " + name, k});
    }
    return std::string();
  };
  // Channels-last inputs in place.
  for (const auto& sets : testing::im2col_conv_shapes()) {
    const Compute& c = typed("conv2d_nhwc", sets);
    std::string why;
    for (const ImplicitGemm& g : gemm_per_match(c, "wgmma_fp16_fp32")) {
      why = add(g, "conv2d_nhwc " + sets[1] + " " + sets[4] + " " + sets[5]);
      if (why.empty()) break;
    }
    EXPECT_EQ(why, "") << sets[1] << " " << sets[5] << ": no layout takes an im2col producer";
    // The transposed product: the pixels on n, read as B.
    const HwAbstraction& hw = find_hw(shipped(), "wgmma_fp16_fp32");
    const MatchReport r = match_compute(c, {hw}, Enumeration::kAll);
    why = "no transposed match";
    for (const Match& m : r.matches) {
      if (m.roles.a_input == 0) continue;
      why = add(make_implicit_gemm(c, hw, m, m.mappings.back()), "conv2d_nhwc transposed " + sets[1] + " " + sets[5]);
      if (why.empty()) break;
    }
    EXPECT_EQ(why, "") << sets[1] << " " << sets[5] << ": no transposed layout takes an im2col producer";
  }
  // Channels-last copies (relayout views) of channels-first convolutions: rank 3, 4 and 5 maps.
  for (const auto& [op, sets] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"conv1d", {"N=4", "C=128", "W=100", "K=96", "S=5", "pad=2"}},
           {"conv1d", {"N=2", "C=128", "W=40", "K=64", "S=3", "dil=3", "pad=3"}},
           {"conv2d", {"N=2", "C=64", "H=15", "W=13", "K=96", "stride=2", "pad=1"}},
           {"conv3d", {"N=2", "C=64", "D=6", "H=7", "W=9", "K=64", "pad=1"}}}) {
    const Compute& c = typed(op, sets);
    const HwAbstraction& hw = find_hw(shipped(), "wgmma_fp16_fp32");
    const MatchReport r = match_compute(c, {hw}, Enumeration::kAll);
    std::string why = "no relayout view";
    for (const Match& m : r.matches) {
      for (const Mapping& map : m.mappings) {
        RelayoutView v = relayout_view(make_implicit_gemm(c, hw, m, map));
        if (!v.why_not.empty()) continue;
        keep.push_back(std::make_unique<Compute>(*v.gemm.compute));  // unused; views own their compute
        why = add(v.gemm, op + " view");
        if (why.empty()) break;
      }
      if (why.empty()) break;
    }
    EXPECT_EQ(why, "") << op << ": no view takes an im2col producer";
  }
  EXPECT_GE(im2col, 12);
  EXPECT_GE(transposed, 5);

  // The map of a 3x3 stride-2 convolution of a [2][9][11][64] input: P = 5, Q = 6.
  {
    const Compute& c = typed("conv2d_nhwc", {"N=2", "C=64", "H=9", "W=11", "K=40", "stride=2", "pad=1"});
    ImplicitGemm g;
    ScheduleParams p;
    for (const ImplicitGemm& each : gemm_per_match(c, "wgmma_fp16_fp32")) {  // the layout B boxes read
      g = each;
      p = default_schedule(g, limits);
      p.producer = 1;
      p.block_m = 128;
      p.warp_m = 64;
      if (validate(g, p, limits).empty()) break;
    }
    ASSERT_EQ(validate(g, p, limits).size(), 0u) << validate(g, p, limits)[0].detail;
    const TensorMapSpec a = emit_kernel(g, p).tensor_maps.at(0);
    EXPECT_TRUE(a.im2col);
    EXPECT_EQ(a.rank, 4);
    EXPECT_EQ(a.dims, (std::array<std::uint64_t, 5>{64, 11, 9, 2, 0}));  // C, W, H, N
    EXPECT_EQ(a.strides, (std::array<std::uint64_t, 4>{128, 1408, 12672, 0}));
    EXPECT_EQ(a.lower, (std::array<int, 3>{-1, -1, 0}));   // -pad
    EXPECT_EQ(a.upper, (std::array<int, 3>{-1, -1, 0}));   // W: -1 + 5 * 2 + 1 - 11; H: -1 + 4 * 2 + 1 - 9
    EXPECT_EQ(a.traversal, (std::array<std::uint32_t, 5>{1, 2, 2, 1, 1}));
    EXPECT_EQ(a.box[0], 64u);   // one 128-byte line of channels
    EXPECT_EQ(a.box[1], 128u);  // the block's pixels
    // The transposed product reads the same input through the same map, as B, BN pixels a box.
    {
      const HwAbstraction& hw = find_hw(shipped(), "wgmma_fp16_fp32");
      const MatchReport r = match_compute(c, {hw}, Enumeration::kAll);
      bool found = false;
      for (const Match& m : r.matches) {
        if (m.roles.a_input == 0 || found) continue;
        const ImplicitGemm t = make_implicit_gemm(c, hw, m, m.mappings.back());
        ScheduleParams tp = default_schedule(t, limits);
        tp.producer = 1;
        tp.block_n = 128;
        tp.warp_n = 128;
        if (!validate(t, tp, limits).empty()) continue;
        found = true;
        const KernelSource tk = emit_kernel(t, tp);
        const TensorMapSpec b = tk.tensor_maps.at(1);
        EXPECT_FALSE(tk.tensor_maps.at(0).im2col);
        EXPECT_TRUE(b.im2col);
        EXPECT_EQ(b.operand, 1);
        EXPECT_EQ(b.dims, a.dims);
        EXPECT_EQ(b.strides, a.strides);
        EXPECT_EQ(b.lower, a.lower);
        EXPECT_EQ(b.upper, a.upper);
        EXPECT_EQ(b.traversal, a.traversal);
        EXPECT_EQ(b.box[1], 128u);
        EXPECT_NE(tk.code.find("const int b_x1 = -1 + 2 * (n0 % 6);"), std::string::npos) << tk.code;
      }
      EXPECT_TRUE(found) << "no transposed layout takes an im2col producer";
    }
    // Persistent, float16 output, the transposed product: the epilogue tile [BN][BM + 8] of half
    // (16-byte aligned rows for the output's vectors along m).
    {
      const Compute& h = stored_as(keep, "conv2d_nhwc", "float16", "float16",
                                   {"N=2", "C=64", "H=9", "W=11", "K=64", "stride=2", "pad=1"});
      const HwAbstraction& hw = find_hw(shipped(), "wgmma_fp16_fp32");
      const MatchReport r = match_compute(h, {hw}, Enumeration::kAll);
      int persistent = 0;
      for (const Match& m : r.matches) {
        const ImplicitGemm t = make_implicit_gemm(h, hw, m, m.mappings.back());
        ScheduleParams tp = default_schedule(t, limits);
        tp.producer = 2;
        if (!validate(t, tp, limits).empty()) continue;
        const KernelSource tk = emit_kernel(t, tp);
        const bool along_m = m.roles.a_input != 0;
        EXPECT_NE(tk.code.find(along_m ? "C_LD = BM + 8" : "C_LD = BN + 8"), std::string::npos) << m.layout;
        EXPECT_NE(tk.code.find("half* Cs"), std::string::npos) << m.layout;
        jobs.push_back({"conv2d_nhwc float16 out persistent " + m.layout + (along_m ? " transposed" : ""), tk});
        ++persistent;
      }
      EXPECT_GE(persistent, 2);
    }
    // K = 9 x 64: a block_k of 128 leaves a tail im2col boxes cannot zero.
    p.block_k = 128;
    const auto issues = validate(g, p, limits);
    ASSERT_FALSE(issues.empty());
    EXPECT_NE(issues[0].detail.find("dividing K = 576"), std::string::npos) << issues[0].detail;
  }

  std::vector<std::string> failures = compile_all(jobs, {90});
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << jobs.size() << " failed; first:\n"
                                << (failures.empty() ? "" : failures.front());
  std::cout << "compiled " << jobs.size() << " im2col wgmma kernels for sm_90a\n";

}

TEST(Schedule, WgmmaValidationReasons) {
  Compute c = build_compute(builtin_op("gemm"));
  const HwAbstraction& hw = find_hw(shipped(), "wgmma_fp16_fp32");
  MatchReport r = match_compute(c, {hw}, Enumeration::kAll);
  ASSERT_EQ(r.matches.size(), 8u);  // 4 layouts, then the same with A and B swapped
  const Match& nnn = r.matches[0];  // B stored [K][N]: wgmma reads it transposed
  ASSERT_EQ(nnn.layout, "nnn");
  ImplicitGemm g = make_implicit_gemm(c, hw, nnn, nnn.mappings[0]);
  const DeviceLimits limits = DeviceLimits::for_arch(90);
  // The default takes a TMA producer warpgroup (both operands are plain strided tensors); the
  // reasons below are those of the kernel whose threads all gather.
  ScheduleParams d = default_schedule(g, limits);
  EXPECT_EQ(d.producer, 1);
  EXPECT_EQ(block_threads(g, d), d.block_m / d.warp_m * (d.block_n / d.warp_n) * 128 + 128);
  d.producer = 0;
  ASSERT_TRUE(validate(g, d, limits).empty());
  EXPECT_EQ(block_threads(g, d), d.block_m / d.warp_m * (d.block_n / d.warp_n) * 128);
  auto with = [&](auto edit) {
    ScheduleParams p = d;
    edit(p);
    return p;
  };
  struct Case {
    const char* name;
    ScheduleParams params;
    ScheduleError error;
    const char* says;
  };
  const Case cases[] = {
      {"warp_m not of m64", with([](ScheduleParams& p) { p.warp_m = 32; }), ScheduleError::kTileNotMultipleOfIntrinsic, "64x8x16"},
      {"N past 256", with([](ScheduleParams& p) { p.warp_n = p.block_n = 512; }), ScheduleError::kTileNotMultipleOfIntrinsic,
       "from 8 to 256"},
      {"transposed B in half a line", with([](ScheduleParams& p) { p.warp_n = 32; p.block_n = 64; }),
       ScheduleError::kTileNotMultipleOfIntrinsic, "blocks of 64"},
      {"two stages", with([](ScheduleParams& p) { p.stages = 2; }), ScheduleError::kBadStages, "3 to 6"},
      {"eight stages filled by cp.async", with([](ScheduleParams& p) { p.stages = 8; }), ScheduleError::kBadStages,
       "up to 12 with a TMA producer"},
      {"thirteen stages filled by TMA", with([](ScheduleParams& p) { p.stages = 13; p.producer = 1; }),
       ScheduleError::kBadStages, "up to 12 with a TMA producer"},
      {"not swizzled", with([](ScheduleParams& p) { p.swizzle = 0; p.smem_pad = 8; }), ScheduleError::kBadOption,
       "swizzled tiles only"},
      {"k off the line", with([](ScheduleParams& p) { p.block_k = 32; }), ScheduleError::kMisalignedRows, "128-byte lines"},
      {"too many accumulators", with([](ScheduleParams& p) { p.warp_m = p.block_m = 128; }), ScheduleError::kBadOption,
       "256 accumulator registers"},
      {"registers", with([](ScheduleParams& p) { p.block_m = 256; p.block_n = 192; p.warp_m = 64; p.warp_n = 192; p.stages = 3; p.producer = 1; }),
       ScheduleError::kTooManyThreads, "640 threads leave 104 registers a consumer thread (the producer warpgroup keeping 40)"},
      {"shared memory", with([](ScheduleParams& p) { p.block_m = 128; p.warp_m = 64; p.stages = 6; }),
       ScheduleError::kSharedMemoryExceeded, "limit"},
      {"producer 4", with([](ScheduleParams& p) { p.producer = 4; }), ScheduleError::kBadOption, "producer takes 0 to 3"},
      {"ping-pong of two warpgroup tiles", with([](ScheduleParams& p) { p.producer = 3; p.block_m = 128; p.warp_m = 64; p.block_n = p.warp_n = 128; }),
       ScheduleError::kBadOption, "each ping-pong consumer warpgroup multiplies whole tiles"},
      {"persistent split", with([](ScheduleParams& p) { p.producer = 2; p.split_k = 2; }), ScheduleError::kBadSplitK,
       "whole output tiles"},
  };
  for (const auto& ic : cases) {
    SCOPED_TRACE(ic.name);
    auto issues = validate(g, ic.params, limits);
    ASSERT_FALSE(issues.empty());
    EXPECT_EQ(issues[0].error, ic.error) << message(issues[0].error) << ": " << issues[0].detail;
    EXPECT_NE(issues[0].detail.find(ic.says), std::string::npos) << issues[0].detail;
  }
  // A TMA producer waits on each buffer's barriers, so its ring may be deeper than cp.async's.
  ScheduleParams deep = with([](ScheduleParams& p) {
    p.producer = 1;
    p.block_m = p.warp_m = p.block_n = p.warp_n = 64;
    p.stages = 8;
  });
  EXPECT_TRUE(validate(g, deep, limits).empty());
  // Another architecture gets the family refused with the reason, and sm_90a names sm_90.
  for (int cc : {80, 100}) {
    auto other = validate(g, d, DeviceLimits::for_arch(cc));
    ASSERT_FALSE(other.empty());
    EXPECT_NE(other[0].detail.find("sm_90 (H100, H200) only"), std::string::npos) << other[0].detail;
  }
  EXPECT_EQ(parse_arch("sm_90a"), 90);
  // tf32 and 8-bit operands have no transpose: their abstractions list K-major layouts only.
  for (const char* name : {"wgmma_tf32_fp32", "wgmma_int8_int32", "wgmma_e4m3_fp32", "wgmma_e5m2_fp32"})
    EXPECT_EQ(find_hw(shipped(), name).layouts, std::vector<std::string>{"ntn"}) << name;
}

// Operands contiguous along the tile's rows but not aligned to its vectors (NCHW / NCW / NCDHW
// inputs along the output's width, with padding and filter taps moving the start): both
// families fetch the two aligned vectors that cover a group and shift it into place, in every
// main loop (cp.async rings of 2 and 3+ stages beside the shifted copies, register double
// buffering, one buffer). Weights run on along (c, r, s) and take cp.async vectors.
TEST(Codegen, ShiftedVectorsCompileForEveryFamilyAndLoop) {
  std::vector<Job> jobs;
  const DeviceLimits limits = DeviceLimits::for_arch(80);
  int shifted = 0, skipped = 0;
  for (const auto& [op, sets] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"conv2d", {"N=2", "C=32", "H=12", "W=16", "K=48"}},
           {"conv2d", {"N=2", "C=16", "H=12", "W=12", "K=32", "R=5", "S=5", "pad=2"}},
           {"conv1d", {"N=2", "C=40", "W=64", "K=48", "pad=2", "dil=2"}},
           {"conv3d", {"N=2", "C=16", "D=5", "H=6", "W=8", "K=32"}}}) {
    for (const std::string hw_name : {"wmma_fp16_fp32", "mma_sync_fp16_fp32", "mma_sync_bf16_fp32"}) {
      const HwAbstraction& hw = find_hw(shipped(), hw_name);
      const Compute typed = testing::typed_op(op, hw.a_dtype == DType::kBFloat16 ? "bfloat16" : "float16", "float32", sets);
      MatchReport r = match_compute(typed, {hw}, Enumeration::kAll);
      bool first = true;  // every main loop on the first shifted layout, the default on the others
      for (const Match& m : r.matches) {
        if (m.roles.a_input != r.matches.front().roles.a_input) continue;  // the written operand order
        ImplicitGemm g = make_implicit_gemm(typed, hw, m, m.mappings.back());
        const ScheduleParams d = default_schedule(g, limits);
        if (!copies_shifted(g, d, 0) && !copies_shifted(g, d, 1)) continue;
        ++shifted;
        const bool loops = std::exchange(first, false) && sets[1] == "C=32";
        const std::string label = op + " " + sets[1] + " " + hw_name + " " + m.layout + " " + m.shape.str();
        std::vector<std::pair<std::string, ScheduleParams>> schedules = {{"default", d}};
        auto edit = [&](const std::string& name, auto f) {
          ScheduleParams p = d;
          f(p);
          if (!loops) return;
          if (validate(g, p, limits).empty()) schedules.emplace_back(name, p);
          else ++skipped;
        };
        edit("stages 2", [](ScheduleParams& p) { p.stages = 2; });
        edit("stages 3 bk 64", [](ScheduleParams& p) { p.stages = 3; p.block_k = 64; });
        edit("registers", [](ScheduleParams& p) { p.async_copy = 0; p.stages = 2; });
        edit("one buffer", [](ScheduleParams& p) { p.async_copy = 0; p.stages = 1; });
        edit("half vectors", [](ScheduleParams& p) { p.vec_a = std::max(2, p.vec_a / 2); p.vec_b = std::max(2, p.vec_b / 2); });
        for (const auto& [name, p] : schedules) {
          KernelSource k = emit_kernel(g, p);
          EXPECT_NE(k.code.find("store_shifted(&"), std::string::npos) << label << " " << name;
          jobs.push_back({label + " " + name, k});
        }
      }
    }
  }
  // Every op has a layout that stores its input along the width: both families, two dtypes.
  EXPECT_GE(shifted, 4 * 3);
  std::vector<std::string> failures = compile_all(jobs);
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << jobs.size() * 2 << " failed; first:\n"
                                << (failures.empty() ? "" : failures.front());
  std::cout << "compiled " << jobs.size() << " kernels with shifted vectors for sm_80 and sm_90; " << skipped
            << " variants did not apply\n";
}

// wgmma's ring of thread-gathered stages copies operands that are contiguous but not aligned to
// their vectors (NCHW / NCW / NCDHW inputs along the output's width) in shifted vectors: fetched
// into registers with the step's copies, stored once the step's wgmmas are issued. Every such
// layout of each op, fp16 and bf16, and variants of the ring (3 and 5 stages, split-K, A from
// registers, two consumers), compiled for sm_90a.
TEST(Codegen, WgmmaShiftedVectorsCompile) {
  std::vector<Job> jobs;
  int ops = 0;
  for (const auto& [op, sets] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"conv2d", {"N=2", "C=32", "H=12", "W=16", "K=48"}},
           {"conv2d", {"N=2", "C=16", "H=12", "W=12", "K=32", "R=5", "S=5", "pad=2"}},
           {"conv1d", {"N=2", "C=40", "W=64", "K=48", "pad=2", "dil=2"}},
           {"conv1d", {"N=3", "C=64", "W=96", "K=64", "S=3", "pad=1"}},
           {"conv3d", {"N=2", "C=16", "D=5", "H=6", "W=8", "K=32"}}}) {
    for (const std::string hw_name : {"wgmma_fp16_fp32", "wgmma_bf16_fp32"}) {
      const HwAbstraction& hw = find_hw(shipped(), hw_name);
      const Compute typed = testing::typed_op(op, hw.a_dtype == DType::kBFloat16 ? "bfloat16" : "float16", "float32", sets);
      const auto schedules = testing::wgmma_shifted_schedules(typed, hw);
      ops += !schedules.empty();
      for (const auto& [label, gp] : schedules) {
        KernelSource k = emit_kernel(gp.first, gp.second);
        EXPECT_NE(k.code.find("store_shifted(&"), std::string::npos) << label;
        EXPECT_NE(k.code.find("store_staged((t + STAGES - 2) % STAGES)"), std::string::npos) << label;
        jobs.push_back({op + " " + sets[1] + " " + label, k});
      }
    }
  }
  EXPECT_EQ(ops, 10) << "every op has a layout that stores its input along the width, in both dtypes";
  EXPECT_GE(jobs.size(), 40u);
  std::vector<std::string> failures = compile_all(jobs, {90});
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << jobs.size() << " failed; first:\n"
                                << (failures.empty() ? "" : failures.front());
}

// Stride-2 inputs along the output's width (every other element, padding and taps moving the
// start): each group is read as the two aligned vectors that cover it and its elements picked
// out in registers (store_strided), by every family that gathers tiles through threads, for
// 1-, 2- and 4-byte elements; wgmma's ring with its variants, for sm_90a.
TEST(Codegen, StridedVectorsCompileForEveryFamily) {
  std::vector<Job> jobs, wgmma_jobs;
  const DeviceLimits limits = DeviceLimits::for_arch(80);
  std::set<std::string> families, element_bytes;
  for (const auto& [op, sets] : testing::strided_conv_shapes()) {
    for (const auto& [hw_name, in_t, out_t] : std::vector<std::tuple<std::string, std::string, std::string>>{
             {"wmma_fp16_fp32", "float16", "float32"}, {"mma_sync_fp16_fp32", "float16", "float32"},
             {"mma_sync_bf16_fp32", "bfloat16", "float32"}, {"mma_sync_tf32_fp32", "float32", "float32"},
             {"simt_fp16_fp32", "float16", "float32"}, {"simt_int8_int32", "int8", "int32"},
             {"simt_fp32_fp32", "float32", "float32"}, {"wgmma_fp16_fp32", "float16", "float32"},
             {"wgmma_bf16_fp32", "bfloat16", "float32"}}) {
      const HwAbstraction& hw = find_hw(shipped(), hw_name);
      const Compute c = testing::typed_op(op, in_t, out_t, sets);
      const std::string label = op + " " + sets[3] + " " + hw_name;
      if (hw.family == "wgmma") {
        if (in_t == "bfloat16" && op != "conv1d") continue;  // bf16 differs from fp16 in its type names only
        for (const auto& [name, gp] : testing::wgmma_shifted_schedules(c, hw)) {
          if (operand_contiguity(gp.first, 0).step != 2 && operand_contiguity(gp.first, 1).step != 2) continue;
          KernelSource k = emit_kernel(gp.first, gp.second);
          EXPECT_NE(k.code.find("store_strided<"), std::string::npos) << name;
          wgmma_jobs.push_back({label + " " + name, k});
          families.insert(hw.family);
        }
        continue;
      }
      MatchReport r = match_compute(c, {hw}, Enumeration::kAll);
      for (const Match& m : r.matches) {
        ImplicitGemm g = make_implicit_gemm(c, hw, m, m.mappings.back());
        const ScheduleParams d = default_schedule(g, limits);
        for (int which = 0; which < 2; ++which) {
          if (!copies_strided(g, d, which)) continue;
          ASSERT_TRUE(validate(g, d, limits).empty()) << label << " " << m.layout;
          KernelSource k = emit_kernel(g, d);
          EXPECT_NE(k.code.find("store_strided<"), std::string::npos) << label << " " << m.layout;
          jobs.push_back({label + " " + m.layout + " " + m.shape.str(), k});
          families.insert(hw.family);
          element_bytes.insert(in_t);
        }
      }
    }
  }
  EXPECT_EQ(families.size(), 4u) << "wmma, mma_sync, simt and wgmma copy strided vectors";
  EXPECT_EQ(element_bytes.size(), 4u) << "halves of both kinds, bytes and words";
  std::vector<std::string> failures = compile_all(jobs);
  std::vector<std::string> wgmma_failures = compile_all(wgmma_jobs, {90});
  failures.insert(failures.end(), wgmma_failures.begin(), wgmma_failures.end());
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << jobs.size() * 2 + wgmma_jobs.size()
                                << " failed; first:\n" << (failures.empty() ? "" : failures.front());
  std::cout << "compiled " << jobs.size() << " kernels with strided vectors for sm_80 and sm_90, "
            << wgmma_jobs.size() << " wgmma kernels for sm_90a\n";
}

// float16 / bfloat16 outputs of float32 sums: both families convert in the epilogue (16-byte
// vectors of 8 outputs for mma_sync), also after a split-K reduction.
// Split-K summed in a thread block cluster (sm_90): no reduce kernel and no workspace, the grid's
// z in clusters of split_k, and the epilogue's cluster barriers and remote reads; for each family
// that can (mma_sync, wgmma with and without its TMA producer, SIMT), a float16 and a float32
// output; and the reasons a cluster is refused.
TEST(Codegen, ClusterSplitKCompilesForSm90) {
  std::vector<Job> jobs;
  std::vector<std::unique_ptr<Compute>> keep;
  const DeviceLimits hopper = DeviceLimits::for_arch(90);
  for (const std::string out : {"float16", "float32"})
    for (const std::string hw_name : {"mma_sync_fp16_fp32", "wgmma_fp16_fp32", "simt_fp16_fp32"}) {
      keep.push_back(std::make_unique<Compute>(testing::narrowed_op("gemm", out, {"M=40", "N=200", "K=1000"})));
      const Compute& c = *keep.back();
      const HwAbstraction& hw = find_hw(shipped(), hw_name);
      MatchReport r = match_compute(c, {hw}, Enumeration::kAll);
      ASSERT_FALSE(r.matches.empty()) << hw_name;
      ImplicitGemm g = make_implicit_gemm(c, hw, r.matches[0], r.matches[0].mappings[0]);
      for (int producer : {0, 1}) {
        ScheduleParams p = default_schedule(g, hopper);
        p.producer = producer;
        if (producer && !validate(g, p, hopper).empty()) continue;  // TMA where the family has it
        for (int split : {2, 3, 8}) {
          p.split_k = split;
          p.cluster = 1;
          const auto issues = validate(g, p, hopper);
          ASSERT_TRUE(issues.empty()) << hw_name << " split " << split << ": " << issues.front().detail;
          KernelSource k = emit_kernel(g, p);
          const std::string label = hw_name + " " + out + (producer ? " tma" : "") + " split " + std::to_string(split);
          EXPECT_TRUE(k.reduce_name.empty()) << label;
          EXPECT_EQ(k.workspace_bytes, 0) << label;
          EXPECT_EQ(k.grid[2] % split, 0) << label;
          EXPECT_NE(k.code.find("__cluster_dims__(1, 1, SPLIT_K)"), std::string::npos) << label;
          EXPECT_NE(k.code.find("cluster_address("), std::string::npos) << label;
          EXPECT_EQ(k.code.find("griddepcontrol"), std::string::npos) << label << ": no dependent to launch";
          jobs.push_back({label, k});
        }
      }
    }
  EXPECT_GE(jobs.size(), 18u);
  std::vector<std::string> failures = compile_all(jobs, {90});
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << jobs.size() << " failed; first:\n"
                                << (failures.empty() ? "" : failures.front());

  // Refused: before sm_90, more splits than a portable cluster, no split, a family without it.
  const Compute& c = typed_compute(keep, "gemm", "float16", "float32", {"M=40", "N=200", "K=1000"});
  auto issue_of = [&](const std::string& hw_name, int cc, int split) {
    const HwAbstraction& hw = find_hw(shipped(), hw_name);
    MatchReport r = match_compute(c, {hw}, Enumeration::kAll);
    ImplicitGemm g = make_implicit_gemm(c, hw, r.matches[0], r.matches[0].mappings[0]);
    ScheduleParams p = default_schedule(g, DeviceLimits::for_arch(cc));
    p.split_k = split;
    p.cluster = 1;
    const auto issues = validate(g, p, DeviceLimits::for_arch(cc));
    return issues.empty() ? std::string() : issues.front().detail;
  };
  EXPECT_NE(issue_of("mma_sync_fp16_fp32", 80, 2).find("sm_90"), std::string::npos);
  EXPECT_NE(issue_of("mma_sync_fp16_fp32", 90, 16).find("2 to 8 splits"), std::string::npos);
  EXPECT_NE(issue_of("mma_sync_fp16_fp32", 90, 1).find("2 to 8 splits"), std::string::npos);
  EXPECT_NE(issue_of("wmma_fp16_fp32", 90, 2).find("only mma_sync, wgmma and simt"), std::string::npos);
  EXPECT_EQ(issue_of("mma_sync_fp16_fp32", 90, 4), "");
  // The JSON of a schedule carries it, and records without it read as 0.
  ScheduleParams p;
  p.cluster = 1;
  EXPECT_EQ(schedule_from_json(to_json(p)).cluster, 1);
  EXPECT_EQ(schedule_from_json(nlohmann::json::parse(R"({"split_k": 4})")).cluster, 0);
}

TEST(Codegen, NarrowOutputsCompileForEveryFamily) {
  std::vector<Job> jobs;
  const DeviceLimits limits = DeviceLimits::for_arch(90);
  for (const std::string out : {"float16", "bfloat16"})
    for (const auto& [op, sets] : std::vector<std::pair<std::string, std::vector<std::string>>>{
             {"gemm", {"M=200", "N=136", "K=520"}}, {"conv2d", {"N=2"}}, {"conv2d_nhwc", {"N=2"}}}) {
      static std::vector<std::unique_ptr<Compute>> keep;
      keep.push_back(std::make_unique<Compute>(testing::narrowed_op(op, out, sets)));
      const Compute& c = *keep.back();
      for (const std::string hw_name : {"wmma_fp16_fp32", "mma_sync_fp16_fp32"}) {
        const HwAbstraction& hw = find_hw(shipped(), hw_name);
        MatchReport r = match_compute(c, {hw}, Enumeration::kAll);
        ASSERT_FALSE(r.matches.empty()) << op << " " << out << " " << hw_name;
        const Match& m = r.matches.front();
        ImplicitGemm g = make_implicit_gemm(c, hw, m, m.mappings.back());
        ScheduleParams p = default_schedule(g, limits);
        for (int split : {1, 3}) {
          p.split_k = split;
          ASSERT_TRUE(validate(g, p, limits).empty()) << op;
          KernelSource k = emit_kernel(g, p);
          const std::string type = out == "float16" ? "half" : "__nv_bfloat16";
          EXPECT_NE(k.code.find(type + "* __restrict__ out"), std::string::npos) << op << " " << hw_name;
          if (hw_name == "mma_sync_fp16_fp32" && split == 1 && op == "gemm")
            EXPECT_NE(k.code.find(type + " converted[8]"), std::string::npos) << op << ": 8 outputs per 16 bytes";
          jobs.push_back({op + " " + out + " " + hw_name + " split " + std::to_string(split), k});
        }
      }
    }
  std::vector<std::string> failures = compile_all(jobs);
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << jobs.size() * 2 << " failed; first:\n"
                                << (failures.empty() ? "" : failures.front());
}

TEST(Schedule, MmaSyncValidationReasons) {
  Compute c = build_compute(builtin_op("gemm"));
  const HwAbstraction& hw = find_hw(shipped(), "mma_sync_fp16_fp32");
  MatchReport r = match_compute(c, {hw}, Enumeration::kAll);
  ASSERT_EQ(r.matches.size(), 8u);  // 4 layouts, then the same with A and B swapped
  const Match& nnn = r.matches[0];
  const Match& tnn = r.matches[2];  // A stored [BK][BM]: rows of block_m halves
  ASSERT_EQ(tnn.layout, "tnn");
  ImplicitGemm g = make_implicit_gemm(c, hw, nnn, nnn.mappings[0]);
  ImplicitGemm gt = make_implicit_gemm(c, hw, tnn, tnn.mappings[0]);
  const DeviceLimits limits = DeviceLimits::for_arch(90);
  const ScheduleParams d = default_schedule(g, limits);
  ASSERT_TRUE(validate(g, d, limits).empty());
  auto with = [&](auto edit) {
    ScheduleParams p = d;
    edit(p);
    return p;
  };
  const IssueCase cases[] = {
      {"warp_n of one fragment", with([](ScheduleParams& p) { p.warp_n = 8; p.block_n = 16; }),
       ScheduleError::kTileNotMultipleOfIntrinsic},
      {"warp_m not of m16", with([](ScheduleParams& p) { p.warp_m = 24; }), ScheduleError::kTileNotMultipleOfIntrinsic},
      {"stages 6 with cp.async", with([](ScheduleParams& p) { p.stages = 6; }), ScheduleError::kBadStages},
      {"stages 3 without cp.async", with([](ScheduleParams& p) { p.stages = 3; p.async_copy = 0; }),
       ScheduleError::kBadStages},
      {"stages 0", with([](ScheduleParams& p) { p.stages = 0; }), ScheduleError::kBadStages},
      {"panels", with([](ScheduleParams& p) { p.panels = 1; }), ScheduleError::kBadOption},
      {"swizzle 2", with([](ScheduleParams& p) { p.swizzle = 2; }), ScheduleError::kBadOption},
      {"swizzle with padding", with([](ScheduleParams& p) { p.smem_pad = 8; }), ScheduleError::kMisalignedRows},
      {"padded rows off 16 bytes", with([](ScheduleParams& p) { p.swizzle = 0; p.smem_pad = 3; }),
       ScheduleError::kMisalignedRows},
      {"negative padding", with([](ScheduleParams& p) { p.swizzle = 0; p.smem_pad = -8; }), ScheduleError::kMisalignedRows},
      {"vector past the tile", with([](ScheduleParams& p) { p.vec_a = 16; }), ScheduleError::kBadVector},
      {"split_k over steps", with([](ScheduleParams& p) { p.split_k = 33; }), ScheduleError::kBadSplitK},
      {"shared memory", with([](ScheduleParams& p) { p.block_m = p.block_n = 256; p.block_k = 128; p.stages = 5; }),
       ScheduleError::kSharedMemoryExceeded},
  };
  for (const auto& ic : cases) {
    SCOPED_TRACE(ic.name);
    auto issues = validate(g, ic.params, limits);
    ASSERT_FALSE(issues.empty());
    EXPECT_EQ(issues[0].error, ic.error) << message(issues[0].error) << ": " << issues[0].detail;
  }
  // Swizzled rows must be a power of two of at least 32 bytes: block_m 48 stores A's rows as 96 bytes.
  ScheduleParams odd_rows = default_schedule(gt, limits);
  odd_rows.block_m = 48;
  odd_rows.warp_m = 16;
  auto rows = validate(gt, odd_rows, limits);
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows[0].error, ScheduleError::kMisalignedRows);
  EXPECT_NE(rows[0].detail.find("A rows of 96 bytes"), std::string::npos) << rows[0].detail;
  odd_rows.swizzle = 0;
  odd_rows.smem_pad = 8;
  EXPECT_TRUE(validate(gt, odd_rows, limits).empty()) << "padded rows of 112 bytes are fine";
  // sm_75 has no ldmatrix-era mma.sync m16n8k16 path with cp.async: the family says so.
  auto turing = validate(g, with([](ScheduleParams& p) { p.async_copy = 0; p.stages = 2; }), DeviceLimits::for_arch(75));
  ASSERT_FALSE(turing.empty());
  EXPECT_NE(turing[0].detail.find("need sm_80"), std::string::npos) << turing[0].detail;
  // WMMA does not take the swizzle: the registry says which families do.
  const HwAbstraction& wmma = find_hw(shipped(), "wmma_fp16_fp32");
  MatchReport wr = match_compute(c, {wmma}, Enumeration::kAll);
  ScheduleParams sw;
  sw.swizzle = 1;
  auto wmma_issues = validate(make_implicit_gemm(c, wmma, wr.matches[0], wr.matches[0].mappings[0]), sw, limits);
  ASSERT_FALSE(wmma_issues.empty());
  EXPECT_NE(wmma_issues[0].detail.find("only mma_sync and wgmma kernels take swizzle"), std::string::npos)
      << wmma_issues[0].detail;
}

TEST(Schedule, VectorWidthFollowsContiguity) {
  const HwAbstraction& hw = find_hw(shipped(), "wmma_fp16_fp32");
  struct Case {
    std::string op;
    std::vector<std::string> sets;
    std::string layout;
    int a, b;        // the widest vectors of A and B
    int aligned_a;   // A's widest vector that needs no shift
  };
  // gemm: A[m, k] is contiguous along k (row-major tiles), B[k, n] along n. NCHW conv: along k
  // the input's last index is q + s - 1 with s of extent 3, no vector; along m it is q shifted by
  // s - 1: vectors of 4 (Q = 28) shifted into place, none aligned; with a 1x1 filter and no
  // padding (p, q) run on contiguously (784 elements). The weight W[k, c, r, s] runs on along
  // (c, r, s) (128 * 9) in NCHW as W[k, r, s, c] does in NHWC. NHWC: the input's last index is
  // c alone; C = 12 allows 4 halves (and 12 * 9 for the weights). conv1d with dilation 2 and padding
  // 2: q + 2 s - 2 leaves pairs aligned. Stride 2 (strided: 2 q + s - pad, every other element):
  // a group of vectors of 2 q's spans the two aligned vectors of the widest load dividing W (8
  // halves for W = 56, 4 for W = 28, 2 for W = 14), at most half of it and at least 4 bytes.
  for (const auto& t : std::vector<Case>{{"gemm", {}, "nnn", 8, 8, 8},
                                         {"gemm", {}, "tnn", 1, 8, 1},
                                         {"gemm", {"K=20"}, "nnn", 4, 8, 4},
                                         {"conv2d_nhwc", {}, "ntn", 8, 8, 8},
                                         {"conv2d_nhwc", {"C=12"}, "ntn", 4, 4, 4},
                                         {"conv2d", {}, "ntn", 1, 8, 1},
                                         {"conv2d", {}, "ttn", 4, 8, 1},
                                         {"conv2d", {"R=1", "S=1", "pad=0"}, "ttn", 8, 8, 8},
                                         {"conv2d", {"R=1", "S=1", "pad=0", "stride=2"}, "ttn", 2, 8, 1},
                                         {"conv2d", {"H=56", "W=56", "stride=2"}, "ttn", 4, 8, 1},
                                         {"conv2d", {"H=14", "W=14", "R=1", "S=1", "pad=0", "stride=2"}, "ttn", 1, 8, 1},
                                         {"conv2d", {"stride=3"}, "ttn", 1, 8, 1},
                                         {"conv1d", {"pad=2", "dil=2"}, "ttn", 8, 8, 2}}) {
    SCOPED_TRACE(t.op + " " + t.layout);
    Compute c = build_compute(builtin_op(t.op), parse_param_overrides(t.sets));
    MatchReport r = match_compute(c, {hw}, Enumeration::kAll);
    const Match* m = nullptr;
    for (const auto& x : r.matches)
      if (x.layout == t.layout && x.shape.str() == "16x16x16") m = &x;
    ASSERT_NE(m, nullptr);
    // The mapping that fuses every candidate iterator, as the implicit GEMM of cuDNN does.
    ImplicitGemm g = make_implicit_gemm(c, hw, *m, m->mappings.back());
    EXPECT_EQ(max_vector_width(g, 0), t.a);
    EXPECT_EQ(max_vector_width(g, 1), t.b);
    EXPECT_EQ(operand_contiguity(g, 0).aligned, t.aligned_a);
    ScheduleParams p = default_schedule(g, DeviceLimits::for_arch(90));
    EXPECT_EQ(p.vec_a, t.a);
    EXPECT_EQ(p.vec_b, t.b);
    EXPECT_TRUE(validate(g, p, DeviceLimits::for_arch(90)).empty());
    p.vec_a = 2 * t.a;
    auto issues = validate(g, p, DeviceLimits::for_arch(90));
    ASSERT_FALSE(issues.empty());
    EXPECT_EQ(issues[0].error, ScheduleError::kBadVector) << issues[0].detail;
  }
}

// flat_stride(): where it gives an axis's stride, stepping the axis's flat coordinate moves the
// access's element by that stride from every digit's place (checked against the offset the
// iterators' digits give, over every coordinate of the axis, for each mapping of each compute);
// an NHWC output's pixels step by K, an NCHW output's (batch 2) do not step evenly.
TEST(Schedule, FlatStridesAgreeWithTheDigits) {
  const HwAbstraction& hw = find_hw(shipped(), "wmma_fp16_fp32");
  const std::vector<std::pair<std::string, Compute>> computes = {
      {"gemm", build_compute(builtin_op("gemm"), parse_param_overrides({"M=48", "N=32", "K=16"}))},
      {"batched_gemm", build_compute(builtin_op("batched_gemm"), parse_param_overrides({}))},
      {"conv2d nchw", build_compute(builtin_op("conv2d"), parse_param_overrides({"N=2", "H=6", "W=5", "C=16", "K=32"}))},
      {"conv2d_nhwc grouped", build_compute(builtin_op("conv2d_nhwc"),
                                            parse_param_overrides({"N=2", "H=6", "W=5", "C=32", "K=32", "groups=2"}))},
      {"conv2d_nhwc fused", testing::fused_op("conv2d_nhwc", "float16",
                                              "Y[n, p, q, k] = relu(Out[n, p, q, k] * s[k] + b[k] + R[n, p, q, k])",
                                              {"N=2", "C=16", "H=6", "W=5", "K=32"})}};
  int even = 0, uneven = 0;
  for (const auto& entry : computes) {
    SCOPED_TRACE(entry.first);
    const Compute& c = entry.second;  // not a structured binding: the lambda below captures it
    const MatchReport r = match_compute(c, {hw}, Enumeration::kAll);
    ASSERT_FALSE(r.matches.empty());
    std::vector<const Access*> accesses = {&c.output};
    for (const Access& a : c.epilogue.operands) accesses.push_back(&a);
    for (const Match& m : r.matches)
      for (const Mapping& mapping : m.mappings) {
        const ImplicitGemm g = make_implicit_gemm(c, hw, m, mapping);
        for (const Access* a : accesses)
          for (const std::vector<int>* axis : {&g.m_iters, &g.n_iters, &g.batch_iters}) {
            const std::optional<std::int64_t> stride = flat_stride(c, *a, *axis);
            (stride ? even : uneven) += 1;
            if (!stride) continue;
            std::int64_t extent = 1;
            for (int it : *axis) extent *= c.iters[it].extent;
            auto element = [&](std::int64_t flat) {  // the offset from the digits of `flat`
              std::vector<std::int64_t> value(c.iters.size(), 0);
              for (std::size_t i = axis->size(); i-- > 0; flat /= c.iters[(*axis)[i]].extent)
                value[(*axis)[i]] = flat % c.iters[(*axis)[i]].extent;
              std::int64_t offset = 0;
              for (std::size_t d = 0; d < a->indices.size(); ++d) {
                std::int64_t index = a->indices[d].constant;
                for (const auto& [it, coef] : a->indices[d].terms) index += coef * value[it];
                offset += index * c.tensor_of(*a).stride(d);
              }
              return offset;
            };
            for (std::int64_t x = 0; x < extent; ++x) ASSERT_EQ(element(x) - element(0), *stride * x) << x;
          }
      }
  }
  EXPECT_GT(even, 0);
  EXPECT_GT(uneven, 0);
  // The output's pixels (n, p, q) in NHWC step by K; in NCHW, with two images, they do not.
  auto pixels_stride = [&](const Compute& c) {
    const MatchReport r = match_compute(c, {hw}, Enumeration::kAll);
    for (const Match& m : r.matches)
      if (m.layout == "ntn" || m.layout == "ttn") {
        const ImplicitGemm g = make_implicit_gemm(c, hw, m, m.mappings.back());
        if (g.m_iters.size() == 3) return flat_stride(c, c.output, g.m_iters);
      }
    ADD_FAILURE() << "no mapping of (n, p, q) to m";
    return std::optional<std::int64_t>{};
  };
  EXPECT_EQ(pixels_stride(computes[4].second), std::optional<std::int64_t>{32});
  EXPECT_EQ(pixels_stride(computes[2].second), std::nullopt);
}

TEST(Schedule, DefaultSplitsTheReductionWhenTilesLeaveSmsIdle) {
  const HwAbstraction& hw = find_hw(shipped(), "wmma_fp16_fp32");
  DeviceLimits h100 = DeviceLimits::for_arch(90);
  h100.sm_count = 132;
  struct Case {
    std::vector<std::string> sets;
    int split;
  };
  // conv2d layer 5 at batch 1: 13 x 2 tiles of 64 x 64, 36 steps of 32 -> 9 splits (4 steps each).
  // 4096^3 GEMM: 4096 tiles already fill the GPU. K = 64: too few steps to split.
  for (const auto& [sets, split] : std::vector<std::pair<std::string, Case>>{
           {"conv2d", {{}, 9}}, {"gemm", {{"M=4096", "N=4096", "K=4096"}, 1}}, {"gemm", {{"M=64", "N=64", "K=64"}, 1}}}) {
    Compute c = build_compute(builtin_op(sets), parse_param_overrides(split.sets));
    MatchReport r = match_compute(c, {hw}, Enumeration::kAll);
    ImplicitGemm g = make_implicit_gemm(c, hw, r.matches[0], r.matches[0].mappings.back());
    ScheduleParams p = default_schedule(g, h100);
    EXPECT_EQ(p.split_k, split.split) << sets;
    EXPECT_TRUE(validate(g, p, h100).empty());
    EXPECT_EQ(default_schedule(g, DeviceLimits::for_arch(90)).split_k, 1) << "unknown SM count: no split";
  }
}

TEST(Schedule, ParamsRoundTripAndRejectUnknownKeys) {
  ScheduleParams p{128, 64, 64, 64, 32, 1, 16, 3, 1, 4, 2, 0, 8, 1};
  EXPECT_EQ(schedule_from_json(to_json(p)), p);
  EXPECT_NE(user_error_of([] { schedule_from_json(nlohmann::json{{"tile", 4}}); }).find("unknown schedule parameter \"tile\""),
            std::string::npos);
  EXPECT_NE(user_error_of([] { schedule_from_json(nlohmann::json{{"stages", "two"}}); }).find("must be an integer"),
            std::string::npos);
  EXPECT_EQ(parse_arch("sm_90"), 90);
  EXPECT_EQ(parse_arch("sm_90a"), 90);
  EXPECT_NE(user_error_of([] { parse_arch("hopper"); }).find("not of the form sm_XY"), std::string::npos);
  // Architectures NVRTC cannot compile for are named as such, with the ones it can.
  for (const char* arch : {"sm_99", "sm_1000", "sm_00", "sm_70"}) {
    const std::string said = user_error_of([&] { parse_arch(arch); });
    EXPECT_NE(said.find("is not one NVRTC compiles for"), std::string::npos) << arch << ": " << said;
    EXPECT_NE(said.find("sm_90"), std::string::npos) << said;
    EXPECT_EQ(said.find("bug in tmap"), std::string::npos) << said;
  }
  const std::vector<int> archs = supported_archs();
  EXPECT_NE(std::find(archs.begin(), archs.end(), 90), archs.end());
}

TEST(Codegen, ReferenceKernelsCompileForEveryOpAndDtype) {
  NvrtcCompiler compiler(90);
  for (const auto& op : builtin_op_names()) {
    KernelSource k = emit_reference_kernel(build_compute(builtin_op(op)));
    CompileResult r = compiler.compile(k.code, k.name);
    EXPECT_TRUE(r.ok) << op << ":\n" << r.log;
  }
  for (const auto& [in, out] : std::vector<std::pair<std::string, std::string>>{
           {"bfloat16", "float32"}, {"float16", "float16"}, {"int8", "int32"}, {"int4", "int32"},
           {"float64", "float64"}}) {
    SourceText src("<gemm>", builtin_op_source("gemm"));
    ComputeDef def = parse_compute_json(src, "gemm");
    for (auto& t : def.tensors) t.dtype = *parse_dtype(t.name == "C" ? out : in);
    KernelSource k = emit_reference_kernel(build_compute(def));
    CompileResult r = compiler.compile(k.code, k.name);
    EXPECT_TRUE(r.ok) << in << ":\n" << r.log;
  }
}

// A warp shares an output point when an input would be read a row apart across the lanes of a
// thread-per-point kernel (gemm_nt's B[n][k], the NHWC filter's K) and the reduction fills a warp.
TEST(Codegen, ReferenceKernelsSplitTheReductionOverAWarpWhereThreadsWouldReadAcrossRows) {
  NvrtcCompiler compiler(90);
  const std::pair<std::string, std::vector<std::string>> warp[] = {
      {"gemm_nt", {"M=4", "N=64", "K=64"}}, {"conv2d_nhwc", {"N=1", "C=16", "H=8", "W=8", "K=8"}}, {"gemv", {}}};
  const std::pair<std::string, std::vector<std::string>> thread[] = {
      {"gemm", {"M=4", "N=64", "K=64"}}, {"conv2d", {}}, {"depthwise_conv2d", {}}, {"gemm_nt", {"K=16"}}};
  for (const auto& [op, sets] : warp) {
    const Compute c = build_compute(builtin_op(op), parse_param_overrides(sets));
    const KernelSource k = emit_reference_kernel(c);
    EXPECT_NE(k.code.find("One warp per output element"), std::string::npos) << op;
    EXPECT_EQ(k.grid[0] * k.threads, (c.tensor_of(c.output).num_elements() * 32 + 255) / 256 * 256) << op;
    EXPECT_TRUE(compiler.compile(k.code, k.name).ok) << op;
  }
  for (const auto& [op, sets] : thread) {
    const KernelSource k = emit_reference_kernel(build_compute(builtin_op(op), parse_param_overrides(sets)));
    EXPECT_NE(k.code.find("One thread per output element"), std::string::npos) << op;
  }
  for (const char* in : {"int8", "int4", "float8_e4m3"}) {  // integer sums shuffled as long long
    const Compute c = testing::typed_op("gemm_nt", in, dtype_is_float(*parse_dtype(in)) ? "float32" : "int32", {"K=64"});
    const KernelSource k = emit_reference_kernel(c);
    const CompileResult r = compiler.compile(k.code, k.name);
    EXPECT_TRUE(r.ok) << in << ":\n" << r.log;
  }
}

TEST(Codegen, TmapsOwnKernelsCompile) {
  NvrtcCompiler compiler(90);
  for (const CompileJob& k : builtin_kernel_sources()) {
    const CompileResult r = compiler.compile(k.source, k.name);
    EXPECT_TRUE(r.ok) << k.name << ":\n" << r.log;
  }
}

TEST(Codegen, CompileErrorsKeepNvrtcsLog) {
  NvrtcCompiler compiler(90);
  CompileResult bad = compiler.compile("extern \"C\" __global__ void k() { undefined_thing(); }", "bad");
  EXPECT_FALSE(bad.ok);
  EXPECT_NE(bad.log.find("undefined_thing"), std::string::npos) << bad.log;
  CompileResult good = compiler.compile("extern \"C\" __global__ void k(float* x) { x[0] = 1; }", "good");
  EXPECT_TRUE(good.ok) << good.log;
  EXPECT_FALSE(good.cubin.empty());
  CompileResult again = compiler.compile("extern \"C\" __global__ void k(float* x) { x[0] = 1; }", "good");
  EXPECT_TRUE(again.cached);
  EXPECT_EQ(again.cubin, good.cubin);
}

TEST(Codegen, DiskCacheServesASecondCompiler) {
  std::filesystem::path dir = std::filesystem::temp_directory_path() / ("tmap_cache_" + std::to_string(::getpid()));
  const std::string src = "extern \"C\" __global__ void k(int* x) { x[threadIdx.x] = 7; }";
  CompileResult first = NvrtcCompiler(90, dir.string()).compile(src, "disk");
  ASSERT_TRUE(first.ok) << first.log;
  EXPECT_FALSE(first.cached);
  CompileResult second = NvrtcCompiler(90, dir.string()).compile(src, "disk");  // a new process would do the same
  EXPECT_TRUE(second.cached);
  EXPECT_EQ(second.cubin, first.cubin);
  CompileResult other_arch = NvrtcCompiler(80, dir.string()).compile(src, "disk");
  EXPECT_FALSE(other_arch.cached);
  std::filesystem::remove_all(dir);
}

TEST(Codegen, DiskCacheCompilesAgainWhatItCannotRead) {
  std::filesystem::path dir = std::filesystem::temp_directory_path() / ("tmap_cache_bad_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const std::string src = "extern \"C\" __global__ void k(int* x) { x[threadIdx.x] = 3; }";
  const CompileResult first = NvrtcCompiler(90, dir.string()).compile(src, "bad_cache");
  ASSERT_TRUE(first.ok) << first.log;
  ASSERT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()), 1)
      << "one cubin, no temporary file left";
  const std::filesystem::path file = std::filesystem::directory_iterator(dir)->path();
  std::filesystem::resize_file(file, 0);  // an empty cubin: compiled again and written whole
  const CompileResult empty = NvrtcCompiler(90, dir.string()).compile(src, "bad_cache");
  EXPECT_FALSE(empty.cached);
  EXPECT_EQ(empty.cubin, first.cubin);
  EXPECT_EQ(std::filesystem::file_size(file), first.cubin.size());
  std::filesystem::remove(file);  // a FIFO, which a read would wait on forever: compiled again, left alone
  ASSERT_EQ(::mkfifo(file.c_str(), 0600), 0);
  const CompileResult fifo = NvrtcCompiler(90, dir.string()).compile(src, "bad_cache");
  EXPECT_TRUE(fifo.ok);
  EXPECT_FALSE(fifo.cached);
  EXPECT_TRUE(std::filesystem::is_fifo(file));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tmap
