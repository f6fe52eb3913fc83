// The isolated measurement worker: failures of the worker itself become results, never
// crashes of the parent; faulting and hanging kernels on the GPU too (skipped without a GPU).
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "test_util.h"
#include "tmap/frontend/op_library.h"
#include "tmap/runtime/device.h"
#include "tmap/runtime/measure_worker.h"
#include "tmap/runtime/nvrtc_compiler.h"

namespace tmap {
namespace {

MeasureRequest gemm_request() {
  MeasureRequest r;
  r.compute = to_json(build_compute(builtin_op("gemm"), parse_param_overrides({"M=64", "N=64", "K=64"})));
  r.kernel.name = "k";
  r.cubin_path = "/nonexistent.cubin";
  r.kernel.threads = 32;
  return r;
}

/// The `tmap compile-worker` processes this process has started.
std::set<pid_t> compile_worker_pids() {
  std::set<pid_t> out;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream children(task.path() / "children");
    for (pid_t pid; children >> pid;) {
      std::ifstream cmdline("/proc/" + std::to_string(pid) + "/cmdline");
      std::stringstream ss;
      ss << cmdline.rdbuf();
      if (ss.str().find("compile-worker") != std::string::npos) out.insert(pid);
    }
  }
  return out;
}

TEST(CompileWorkers, CompileLikeNvrtcInProcessAndOutliveTheirFailures) {
  std::vector<CompileJob> jobs;
  for (int i = 0; i < 5; ++i)
    jobs.push_back({"k" + std::to_string(i), "extern \"C\" __global__ void k(int* x) { x[threadIdx.x] = " +
                                                 std::to_string(i) + "; }"});
  jobs.push_back({"bad", "extern \"C\" __global__ void k() { undefined_thing(); }"});
  ASSERT_EQ(use_compile_workers(""), 0u);
  const std::vector<CompileResult> here = compile_parallel(*std::make_unique<NvrtcCompiler>(90), jobs, 3);
  EXPECT_TRUE(compile_worker_pids().empty());

  ASSERT_EQ(use_compile_workers(TMAP_BINARY, 2), 2u);
  const std::vector<CompileResult> there = compile_parallel(*std::make_unique<NvrtcCompiler>(90), jobs, 3);
  const std::set<pid_t> workers = compile_worker_pids();
  EXPECT_EQ(workers.size(), 2u) << "the jobs were not compiled in two worker processes";
  ASSERT_EQ(there.size(), jobs.size());
  for (std::size_t i = 0; i + 1 < jobs.size(); ++i) {
    EXPECT_TRUE(there[i].ok) << there[i].log;
    EXPECT_EQ(there[i].cubin, here[i].cubin) << jobs[i].name << ": a worker's binary differs from NVRTC's in-process";
    EXPECT_GT(there[i].seconds, 0);
  }
  EXPECT_FALSE(there.back().ok);
  EXPECT_NE(there.back().log.find("undefined_thing"), std::string::npos) << there.back().log;

  // A worker killed between jobs: the next job on it is compiled in-process, then a new worker starts.
  for (pid_t pid : workers) kill(pid, SIGKILL);
  const std::vector<CompileResult> after = compile_parallel(*std::make_unique<NvrtcCompiler>(90), jobs, 2);
  for (std::size_t i = 0; i + 1 < jobs.size(); ++i) EXPECT_EQ(after[i].cubin, here[i].cubin) << jobs[i].name;
  EXPECT_FALSE(after.back().ok);
  for (pid_t pid : compile_worker_pids()) EXPECT_FALSE(workers.count(pid)) << "a killed worker was reused";

  // A binary that cannot run: everything compiles in-process.
  ASSERT_EQ(use_compile_workers("/nonexistent/tmap", 2), 2u);
  const std::vector<CompileResult> fallback = compile_parallel(*std::make_unique<NvrtcCompiler>(90), jobs, 2);
  for (std::size_t i = 0; i + 1 < jobs.size(); ++i) EXPECT_EQ(fallback[i].cubin, here[i].cubin) << jobs[i].name;
  use_compile_workers("");
  EXPECT_TRUE(compile_worker_pids().empty()) << "workers left running after the pool was turned off";
}

TEST(Worker, RequestsAndResultsRoundTrip) {
  MeasureRequest r = gemm_request();
  r.seed = 42;
  r.timing.min_repeats = 7;
  r.timing.long_run_ms = 2.5;
  // A warp-specialized kernel's TMA descriptions travel with it (the worker encodes them).
  TensorMapSpec map;
  map.operand = 1;
  map.dtype = DType::kBFloat16;
  map.rank = 3;
  map.dims = {520, 200, 3, 0, 0};
  map.strides = {1040, 208000, 0, 0};
  map.box = {64, 128, 1, 0, 0};
  r.kernel.tensor_maps = {map, map};
  r.kernel.tensor_maps[0].operand = 0;
  // And an im2col map's corners and traversal steps.
  r.kernel.tensor_maps[0].im2col = true;
  r.kernel.tensor_maps[0].lower = {-1, -2, 0};
  r.kernel.tensor_maps[0].upper = {-3, 1, 0};
  r.kernel.tensor_maps[0].traversal = {1, 2, 2, 1, 1};
  // A persistent kernel of block pairs: the worker launches whole clusters.
  r.kernel.persistent = true;
  r.kernel.cluster_x = 2;
  MeasureRequest back = request_from_json(nlohmann::json::parse(to_json(r).dump()));
  EXPECT_EQ(to_json(back), to_json(r));
  ASSERT_EQ(back.kernel.tensor_maps.size(), 2u);
  EXPECT_EQ(back.kernel.tensor_maps[0].operand, 0);
  EXPECT_EQ(back.kernel.tensor_maps[1].dtype, DType::kBFloat16);
  EXPECT_EQ(back.kernel.tensor_maps[1].strides[1], 208000u);
  EXPECT_EQ(back.kernel.tensor_maps[1].box, map.box);
  EXPECT_TRUE(back.kernel.tensor_maps[0].im2col);
  EXPECT_FALSE(back.kernel.tensor_maps[1].im2col);
  EXPECT_EQ(back.kernel.tensor_maps[0].lower, (std::array<int, 3>{-1, -2, 0}));
  EXPECT_EQ(back.kernel.tensor_maps[0].upper, (std::array<int, 3>{-3, 1, 0}));
  EXPECT_EQ(back.kernel.tensor_maps[0].traversal, (std::array<std::uint32_t, 5>{1, 2, 2, 1, 1}));
  EXPECT_TRUE(back.kernel.persistent);
  EXPECT_EQ(back.kernel.cluster_x, 2);
  MeasureResult res{MeasureStatus::kTimeout, "slow", 0.5, 12.5, {12.0, 13.0}};
  MeasureResult res_back = result_from_json(to_json(res));
  EXPECT_EQ(res_back.status, MeasureStatus::kTimeout);
  EXPECT_EQ(res_back.times_us, res.times_us);
}

TEST(Worker, AHangingWorkerIsKilledAtTheTimeout) {
  MeasureWorker worker(std::string(TMAP_SOURCE_DIR) + "/tests/data/hanging_worker.sh", 1.0);
  auto start = std::chrono::steady_clock::now();
  MeasureResult r = worker.measure(gemm_request());
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.status, MeasureStatus::kTimeout);
  EXPECT_NE(r.message.find("no result within 1"), std::string::npos) << r.message;
  EXPECT_LT(seconds, 5.0);
  // The next request starts a new worker.
  EXPECT_EQ(worker.measure(gemm_request()).status, MeasureStatus::kTimeout);
  EXPECT_EQ(worker.restarts(), 1);
}

TEST(Worker, AWorkerThatDiesIsAResult) {
  MeasureWorker worker("/bin/false", 5.0);
  MeasureResult r = worker.measure(gemm_request());
  EXPECT_EQ(r.status, MeasureStatus::kWorkerError);
  EXPECT_FALSE(r.message.empty());
}

TEST(Worker, WithoutAGpuTheWorkerSaysWhy) {
  if (!query_runtime().devices.empty()) GTEST_SKIP() << "this checks the no-GPU path";
  MeasureWorker worker(TMAP_BINARY, 30.0);
  MeasureResult r = worker.measure(gemm_request());
  EXPECT_EQ(r.status, MeasureStatus::kWorkerError);
  EXPECT_NE(r.message.find("cudaMalloc"), std::string::npos) << r.message;
}

/// Writes a kernel with the candidates' signature, compiled for the GPU, to a file.
std::string compile_to_file(const std::string& name, const std::string& body) {
  NvrtcCompiler compiler(query_runtime().devices.at(0).compute_capability);
  std::string src = "#include <cuda_fp16.h>\nextern \"C\" __global__ void " + name +
                    "(const half* a, const half* b, float* out) {\n" + body + "\n}\n";
  CompileResult r = compiler.compile(src, name);
  EXPECT_TRUE(r.ok) << r.log;
  std::string path = std::filesystem::temp_directory_path() / (name + std::to_string(::getpid()) + ".cubin");
  std::ofstream(path, std::ios::binary).write(r.cubin.data(), static_cast<std::streamsize>(r.cubin.size()));
  return path;
}

TEST(Worker, FaultingAndHangingKernelsAreErrorsAndTheNextCandidateRuns) {
  if (query_runtime().devices.empty()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  MeasureWorker worker(TMAP_BINARY, 10.0);
  auto request = [&](const std::string& name, const std::string& body, std::int64_t threads) {
    MeasureRequest r = gemm_request();
    r.kernel.name = name;
    r.cubin_path = compile_to_file(name, body);
    r.kernel.grid = {64, 1, 1};
    r.kernel.threads = static_cast<int>(threads);
    return r;
  };
  // Out of bounds by far: an illegal address.
  MeasureResult fault = worker.measure(request("faulting", "out[threadIdx.x + (1ll << 40)] = 1.0f;", 64));
  EXPECT_EQ(fault.status, MeasureStatus::kRuntimeError) << fault.message;
  EXPECT_NE(fault.message.find("cudaErrorIllegalAddress"), std::string::npos) << fault.message;
  // Never returns (inputs are in [-1, 1]; the volatile reads keep the loop): killed at the timeout.
  MeasureResult hang = worker.measure(request(
      "hanging", "const volatile unsigned short* p = reinterpret_cast<const volatile unsigned short*>(a);\n"
                 "while (p[0] != 0x7c01u) {}  // a NaN pattern the inputs never hold", 64));
  EXPECT_EQ(hang.status, MeasureStatus::kTimeout) << hang.message;
  // Too many threads: a launch error.
  MeasureResult launch = worker.measure(request("too_big", "", 4096));
  EXPECT_EQ(launch.status, MeasureStatus::kLaunchError) << launch.message;
  // A correct GEMM (one thread per output element) after all that: measured and verified.
  MeasureResult good = worker.measure(request(
      "good", "int i = blockIdx.x, j = threadIdx.x; float s = 0; for (int k = 0; k < 64; ++k) s += __half2float(a[i * 64 + k]) * __half2float(b[k * 64 + j]); out[i * 64 + j] = s;", 64));
  EXPECT_EQ(good.status, MeasureStatus::kOk) << good.message;
  EXPECT_LT(good.rel_l2, 1e-5);
  EXPECT_GT(good.median_us, 0);
  // A wrong one is measured but marked.
  MeasureResult wrong = worker.measure(request("wrong", "out[blockIdx.x * 64 + threadIdx.x] = 1.0f;", 64));
  EXPECT_EQ(wrong.status, MeasureStatus::kWrongResult) << wrong.message;
  EXPECT_GE(worker.restarts(), 3);
}

}  // namespace
}  // namespace tmap
