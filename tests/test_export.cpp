// tmap export: kernels of every family (WMMA, mma.sync with a split-K reduction, wgmma with its
// TMA producer, on a GEMM and on a convolution read in im2col boxes, SIMT, mma.sync reading
// channels-last copies of an NCHW convolution, a fused epilogue) written as a standalone CMake project; nvcc builds it here (no GPU
// needed) and its launch functions refuse null and misaligned pointers, and on a GPU its checking
// program runs each kernel against the reference kernel.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli_util.h"
#include "test_util.h"
#include "tmap/export/export.h"
#include "tmap/runtime/launch.h"
#include "tmap/tune/search_space.h"
#include "tmap/tune/tuner.h"

namespace tmap {
namespace {

using namespace testing;

/// A record of the first arm of `family` on `c` whose default schedule, changed by `tweak`, is
/// valid (the change is checked to have stuck).
TuneRecord record_of(const Compute& c, const std::string& family, const std::function<void(ScheduleParams&)>& tweak) {
  DeviceLimits limits = DeviceLimits::for_arch(90);
  SearchSpace space(c, shipped(), Enumeration::kAll, limits, 90);
  for (int e = 0; e < static_cast<int>(space.entries().size()); ++e) {
    const SpaceEntry& x = space.entries()[e];
    if (x.hw->family != family) continue;
    ScheduleParams p = x.defaults;
    tweak(p);
    if (!space.valid(e, p)) continue;
    TuneRecord r;
    r.workload = make_workload(c);
    r.target = {"sm_90", "", "", "", "test"};
    r.candidate = space.ref(e, p);
    r.result.status = "unmeasured";
    r.result.estimated_us = 1;
    r.flops = 2.0 * c.iteration_points();
    return r;
  }
  ADD_FAILURE() << "no valid " << family << " schedule for " << c.name;
  return {};
}

std::vector<TuneRecord> every_family() {
  Compute gemm = narrowed_op("gemm", "float16", {"M=256", "N=192", "K=320"});
  Compute conv = narrowed_op("conv2d", "float16", {"N=2", "C=32", "H=14", "W=14", "K=48"});
  Compute gemv = narrowed_op("gemv", "float32", {"M=300", "K=200"});
  gemm.name = "gemm_tma";
  std::vector<TuneRecord> r;
  r.push_back(record_of(gemm, "wgmma", [](ScheduleParams& p) { p.producer = 1; }));
  EXPECT_EQ(r.back().candidate.params.producer, 1);
  Compute gemm2 = narrowed_op("gemm", "float16", {"M=128", "N=64", "K=1024"});
  gemm2.name = "gemm_split";
  r.push_back(record_of(gemm2, "mma_sync", [](ScheduleParams& p) { p.split_k = 4; }));
  EXPECT_EQ(r.back().candidate.params.split_k, 4);
  r.push_back(record_of(conv, "wmma", [](ScheduleParams&) {}));
  r.push_back(record_of(gemv, "simt", [](ScheduleParams&) {}));
  Compute nchw = narrowed_op("conv2d", "float16", {"N=2", "C=32", "H=13", "W=15", "K=48", "pad=1"});
  nchw.name = "conv2d_relayout";
  r.push_back(record_of(nchw, "mma_sync", [](ScheduleParams& p) { p.relayout = 1; }));
  EXPECT_EQ(r.back().candidate.params.relayout, 1);
  Compute gemm3 = narrowed_op("gemm", "float16", {"M=96", "N=128", "K=1024"});
  gemm3.name = "gemm_cluster";  // split-K summed in a thread block cluster: no reduce kernel to launch
  r.push_back(record_of(gemm3, "mma_sync", [](ScheduleParams& p) { p.split_k = 4; p.cluster = 1; }));
  EXPECT_EQ(r.back().candidate.params.cluster, 1);
  Compute im2col = narrowed_op("conv2d_nhwc", "float16", {"N=2", "C=64", "H=10", "W=12", "K=64", "stride=2", "pad=1"});
  im2col.name = "conv2d_im2col";  // the input read by TMA in im2col mode: an im2col tensor map to encode
  r.push_back(record_of(im2col, "wgmma", [](ScheduleParams& p) { p.producer = 1; }));
  EXPECT_EQ(r.back().candidate.params.producer, 1);
  Compute persistent = narrowed_op("gemm", "float16", {"M=520", "N=384", "K=256"});
  persistent.name = "gemm_persistent";  // grid sized at launch: as many blocks as stay resident
  r.push_back(record_of(persistent, "wgmma", [](ScheduleParams& p) { p.producer = 2; p.block_m = 64; p.warp_m = 64; p.stages = 3; }));
  EXPECT_EQ(r.back().candidate.params.producer, 2);
  Compute pair = narrowed_op("gemm", "float16", {"M=520", "N=384", "K=256"});
  pair.name = "gemm_pair";  // persistent pairs of blocks sharing B: whole clusters resident at once
  r.push_back(record_of(pair, "wgmma", [](ScheduleParams& p) { p.producer = 2; p.cluster = 2; p.block_m = 64; p.warp_m = 64; p.stages = 3; }));
  EXPECT_EQ(r.back().candidate.params.cluster, 2);
  Compute fused = fused_op("gemm", "float16", "Y[m, n] = gelu(C[m, n] + bias[n]) + R[m, n]", {"M=96", "N=128", "K=512"});
  fused.name = "gemm_fused";  // epilogue operands passed to the main and the reduce kernel
  r.push_back(record_of(fused, "mma_sync", [](ScheduleParams& p) { p.split_k = 2; }));
  EXPECT_EQ(r.back().candidate.params.split_k, 2);
  return r;
}

/// Two buckets of a range of sizes (M = 1..40): kernels that take M at run time behind one
/// launch function.
std::vector<TuneRecord> range_buckets_of_a_gemm() {
  const Compute range = build_compute(builtin_op("gemm_nt"), parse_param_overrides({"M=1..40", "N=128", "K=256"}));
  // The first bucket's splits are summed by each tile's last block: its plan zeroes the counters.
  std::vector<TuneRecord> r = {record_of(range, "mma_sync", [](ScheduleParams& p) { p.split_k = 2; p.split_reduce = 1; }),
                               record_of(range, "wgmma", [](ScheduleParams& p) { p.producer = 1; })};
  const std::int64_t buckets[2][2] = {{1, 16}, {17, 40}};
  for (int i = 0; i < 2; ++i) {
    r[i].result.status = "ok";
    r[i].result.median_us = 5;
    r[i].result.bucket_lo = buckets[i][0];
    r[i].result.size = r[i].result.bucket_hi = buckets[i][1];
  }
  return r;
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Exports every family into `dir` and checks what it wrote; then, given `build`, builds it with
/// CMake and nvcc. The build's output on failure.
std::string export_and_build(const ScratchDir& dir, bool build = true) {
  const std::vector<TuneRecord> records = every_family(), buckets = range_buckets_of_a_gemm();
  std::vector<const TuneRecord*> ptrs;
  for (const auto& r : records) ptrs.push_back(&r);
  for (const auto& r : buckets) ptrs.push_back(&r);
  const auto kernels = export_kernels(ptrs, shipped(), 90, dir / "out", "test records");
  EXPECT_EQ(kernels.size(), 11u) << "a workload each, and one function for the range";
  const std::string header = read(dir / "out/tmap_kernels.h");
  for (const auto& k : kernels) {
    EXPECT_TRUE(std::filesystem::exists(dir / ("out/" + k.file))) << k.file;
    EXPECT_NE(header.find("cudaError_t " + k.function + "("), std::string::npos) << k.function;
  }
  // Each launch function hands its kernel's launch plan, as tmap runs it, to tmap_plan_launch.
  std::vector<tmap_launch_plan> plans;
  for (std::size_t i = 0; i < records.size(); ++i) {
    plans.push_back(plan_launch(regenerate(records[i], shipped(), 90).kernel).plan);
    const std::string file = read(dir / ("out/" + kernels[i].file));
    EXPECT_NE(file.find(plan_initializer(plans.back())), std::string::npos) << kernels[i].function;
    EXPECT_NE(file.find("return tmap_plan_launch(&" + kernels[i].function + "_plan"), std::string::npos);
  }
  EXPECT_EQ(read(dir / "out/tmap/runtime/launch_plan.h"), read(TMAP_SOURCE_DIR "/include/tmap/runtime/launch_plan.h"));
  EXPECT_EQ(read(dir / "out/tmap_runtime.cu"), read(TMAP_SOURCE_DIR "/src/runtime/launch_plan.cpp"))
      << "exported launchers execute plans with tmap's own code";
  EXPECT_EQ(plans[0].num_maps, 2) << "the TMA kernel encodes its descriptors";
  EXPECT_EQ(plans[1].num_steps, 2) << "the split-K kernel's reduction";
  EXPECT_GT(plans[1].workspace_bytes, 0) << "the split-K kernel gets its workspace";
  EXPECT_TRUE(plans[1].steps[1].dependent) << "on sm_90 its reduce kernel is a programmatic dependent launch";
  EXPECT_EQ(plans[4].num_steps, 2) << "the operands are copied channels-last first";
  EXPECT_TRUE(plans[4].steps[1].dependent);
  const std::string cluster = read(dir / ("out/" + kernels[5].file));
  EXPECT_NE(cluster.find("__cluster_dims__(1, 1, SPLIT_K)"), std::string::npos) << "the cluster is the kernel's own";
  EXPECT_EQ(plans[5].num_steps, 1);
  EXPECT_EQ(plans[5].workspace_bytes, 0) << "its splits need no workspace";
  EXPECT_EQ(plans[6].num_maps, 2);
  EXPECT_TRUE(plans[6].maps[0].im2col || plans[6].maps[1].im2col) << "the input read in im2col boxes";
  EXPECT_TRUE(plans[7].steps[0].persistent) << "a persistent kernel's grid is sized at launch";
  EXPECT_EQ(plans[7].steps[0].cluster_x, 1);
  EXPECT_TRUE(plans[8].steps[0].persistent);
  EXPECT_EQ(plans[8].steps[0].cluster_x, 2) << "pairs are resident as whole clusters";
  EXPECT_NE(read(dir / ("out/" + kernels[8].file)).find("__cluster_dims__(2, 1, 1)"), std::string::npos);
  EXPECT_EQ(plans[9].steps[0].num_args, 6) << "A, B, the output, bias, R, the workspace";
  EXPECT_EQ(plans[9].steps[1].num_args, 4) << "the reduction applies the epilogue: workspace, output, bias, R";
  // The range's function chooses a bucket's kernel by M, and each bucket's plan takes M.
  const std::string dispatcher = read(dir / ("out/" + kernels[10].file));
  const std::string base = kernels[10].function;
  EXPECT_NE(header.find("cudaError_t " + base + "(const half* A, const half* B, float* C, long long M, cudaStream_t stream)"),
            std::string::npos) << header;
  EXPECT_NE(header.find("///   A [M, 256] float16"), std::string::npos);
  EXPECT_NE(dispatcher.find("if (M >= 1 && M <= 16) return " + base + "_1_16(A, B, C, M, stream);"), std::string::npos)
      << dispatcher;
  EXPECT_NE(dispatcher.find("return cudaErrorInvalidValue;"), std::string::npos);
  for (const char* bucket : {"_1_16", "_17_40"}) {
    const std::string file = read(dir / ("out/kernels/" + base + bucket + ".cu"));
    EXPECT_NE(file.find("slots, M, stream);"), std::string::npos) << bucket;
    EXPECT_NE(file.find("1ll, 40ll"), std::string::npos) << bucket << ": the plan takes the range's sizes";
    EXPECT_EQ(file.find("zeroed workspace bytes") != std::string::npos, std::string(bucket) == "_1_16") << bucket;
  }
  if (!build) return "";
  const auto r = testing::shell("cmake -S out -B build -G Ninja -DCMAKE_CUDA_COMPILER=" TMAP_NVCC
                                " -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build 2>&1",
                                dir.str());
  return r.code == 0 ? "" : r.out + r.err;
}

TEST(Export, EveryFamilyBuildsAsAStandaloneLibraryWithNvcc) {
  // Under the sanitizers (TMAP_TEST_SAMPLE) the export and its checks run and nvcc's build does
  // not: that is nvcc's and CMake's work, which the sanitizers do not watch and the release run did.
  const bool build = testing::sweep_sample() == 1;
  ScratchDir dir("tmap_export_build");
  const std::string failure = export_and_build(dir, build);
  ASSERT_EQ(failure, "");
  if (!build) GTEST_SKIP() << "the export checked; nvcc's build of it runs in the release suite";
  EXPECT_TRUE(std::filesystem::exists(dir / "build/libtmap_kernels.a"));
  EXPECT_TRUE(std::filesystem::exists(dir / "build/tmap_kernels_check"));
  const std::string ext = read(dir / "out/torch/tmap_ext.cpp");
  EXPECT_NE(ext.find("at::cuda::getCurrentCUDAStream()"), std::string::npos);
  EXPECT_NE(ext.find("16-byte aligned address"), std::string::npos) << "the extension says why it refuses a view";
  // The launch functions check their pointers before touching the GPU, so this part runs here.
  const auto r = testing::shell("./build/tmap_kernels_check --arguments-only", dir.str());
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  // The range's function is checked at both ends of each bucket, and refuses M = 41.
  EXPECT_NE(r.out.find("14 of 14 launch functions refuse null and misaligned pointers"), std::string::npos) << r.out;
}

TEST(Export, CheckProgramPassesOnTheGpu) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  ScratchDir dir("tmap_export_gpu");
  ASSERT_EQ(export_and_build(dir), "");
  const auto r = testing::shell("./build/tmap_kernels_check", dir.str());
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("14 passed, 0 failed"), std::string::npos) << r.out;
}

TEST(Cli, ExportRefusesLogsWithoutCorrectRecords) {
  ScratchDir dir("tmap_cli_export");
  auto r = testing::tmap("tune --op gemm --set M=64 --set N=64 --set K=64 --measure model --trials 2 --log l.jsonl", dir.str());
  ASSERT_EQ(r.code, 0) << r.err;
  r = testing::tmap("export l.jsonl --out exp", dir.str());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--allow-unmeasured"), std::string::npos) << r.err;
  r = testing::tmap("export l.jsonl --out exp --allow-unmeasured", dir.str());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("wrote 1 kernel(s)"), std::string::npos) << r.out;
  EXPECT_TRUE(std::filesystem::exists(dir / "exp/CMakeLists.txt"));
  r = testing::tmap("export missing.jsonl --out exp", dir.str());
  EXPECT_EQ(r.code, 2);
}

}  // namespace
}  // namespace tmap
