// The isolated measurement worker: failures of the worker itself become results, never
// crashes of the parent; faulting and hanging kernels on the GPU too (skipped without a GPU).
#include <gtest/gtest.h>

#include <functional>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "test_util.h"
#include "tmap/codegen/reference_emitter.h"
#include "tmap/frontend/op_library.h"
#include "tmap/runtime/device.h"
#include "tmap/runtime/measure_worker.h"
#include "tmap/runtime/nvrtc_compiler.h"
#include "tmap/tune/tuner.h"

namespace tmap {
namespace {

/// A request for a kernel `name` of grid x threads that takes operands, output and workspace.
MeasureRequest gemm_request(const std::string& name = "k", std::int64_t blocks = 1, int threads = 32) {
  KernelSource k;
  k.name = name;
  k.grid = {blocks, 1, 1};
  k.threads = threads;
  const Compute c = build_compute(builtin_op("gemm"), parse_param_overrides({"M=64", "N=64", "K=64"}));
  return MeasureRequest::for_kernel(c, k, "/nonexistent.cubin", 0, 1);
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

TEST(CompileWorkers, CompilesWaitingForAWorkerAreCancelledAndNotCached) {
  std::vector<CompileJob> jobs;
  for (int i = 0; i < 4; ++i)
    jobs.push_back({"c" + std::to_string(i), "extern \"C\" __global__ void k(int* x) { x[threadIdx.x] = " +
                                                 std::to_string(100 + i) + "; }"});
  ASSERT_EQ(use_compile_workers(TMAP_BINARY, 1), 1u);
  NvrtcCompiler compiler(90);
  // One worker, four threads: once a job is back, the ones still waiting for the worker give up.
  std::atomic<int> finished{0};
  const std::vector<CompileResult> first = compile_parallel(
      compiler, jobs, 4, [&] { return finished.load() > 0; },
      [&](std::size_t, const CompileResult& r) { finished += !r.cancelled; });
  int ok = 0, cancelled = 0;
  for (const CompileResult& r : first) {
    EXPECT_NE(r.ok, r.cancelled) << r.log;
    ok += r.ok;
    cancelled += r.cancelled;
  }
  EXPECT_GE(ok, 1);
  EXPECT_GE(cancelled, 1) << "the compiles waiting for the busy worker were not cancelled";
  // A cancelled compile is no result of its source: asked again, every job compiles.
  for (const CompileResult& r : compile_parallel(compiler, jobs, 2)) EXPECT_TRUE(r.ok) << r.log;
  // Cancelled before they start: none compiles.
  NvrtcCompiler fresh(90);
  for (const CompileResult& r : compile_parallel(fresh, jobs, 2, [] { return true; })) {
    EXPECT_TRUE(r.cancelled);
    EXPECT_FALSE(r.ok);
  }
  use_compile_workers("");
}

// A compile running in a worker when its job is cancelled (a run's end, a stop) is not waited
// for: the worker is killed, and the next compile starts a fresh one.
TEST(CompileWorkers, ACompileRunningInAWorkerIsCancelledByKillingTheWorker) {
  // About 4000 inlined steps: many seconds of NVRTC.
  const std::string slow =
      "template <int N, int O> struct F { __device__ __forceinline__ static float f(float s, const float* x) {\n"
      "  return F<N / 2, O>::f(F<N - N / 2, O + N / 2>::f(s, x), x); } };\n"
      "template <int O> struct F<1, O> { __device__ __forceinline__ static float f(float s, const float* x) {\n"
      "  return s * 1.0001f + x[(O * 7) & 1023]; } };\n"
      "extern \"C\" __global__ void k(float* x) { x[threadIdx.x] = F<4000, 0>::f(x[threadIdx.x], x); }\n";
  ASSERT_EQ(use_compile_workers(TMAP_BINARY, 1), 1u);
  NvrtcCompiler compiler(90);
  const auto t0 = std::chrono::steady_clock::now();
  const auto after = [&](double s) {
    return [&, s] { return std::chrono::steady_clock::now() - t0 > std::chrono::duration<double>(s); };
  };
  const CompileResult r = compiler.compile(slow, "slow", after(0.5));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(r.cancelled) << r.log;
  EXPECT_FALSE(r.ok);
  EXPECT_LT(took, 3.0) << "the run waited for the compile";
  EXPECT_TRUE(compile_worker_pids().empty()) << "the worker of the cancelled compile still runs";
  const CompileResult next = compiler.compile("extern \"C\" __global__ void k(int* x) { x[0] = 1; }", "next");
  EXPECT_TRUE(next.ok) << next.log;
  EXPECT_EQ(compile_worker_pids().size(), 1u);
  use_compile_workers("");
}

TEST(Worker, RequestsAndResultsRoundTrip) {
  // A warp-specialized kernel's TMA descriptions travel with it (the worker encodes them), an
  // im2col map's corners and traversal steps, and a persistent kernel of block pairs.
  TensorMapSpec map;
  map.operand = 1;
  map.dtype = DType::kBFloat16;
  map.rank = 3;
  map.dims = {520, 200, 3, 0, 0};
  map.strides = {1040, 208000, 0, 0};
  map.box = {64, 128, 1, 0, 0};
  KernelSource k;
  k.name = "k";
  k.threads = 384;
  k.grid = {132, 1, 1};
  k.tensor_maps = {map, map};
  k.tensor_maps[0].operand = 0;
  k.tensor_maps[0].im2col = true;
  k.tensor_maps[0].lower = {-1, -2, 0};
  k.tensor_maps[0].upper = {-3, 1, 0};
  k.tensor_maps[0].traversal = {1, 2, 2, 1, 1};
  k.persistent = true;
  k.cluster_x = 2;
  const Compute c = build_compute(builtin_op("gemm"), parse_param_overrides({"M=64", "N=64", "K=64"}));
  MeasureRequest r = MeasureRequest::for_kernel(c, k, "/nonexistent.cubin", 0, 1);
  r.seed = 42;
  r.timing.min_repeats = 7;
  r.timing.long_run_ms = 2.5;
  r.timing.slow_factor = 2;
  r.reference_cubin_path = "/tmp/reference0.cubin";
  MeasureRequest back = request_from_json(nlohmann::json::parse(to_json(r).dump()));
  EXPECT_EQ(to_json(back), to_json(r));
  EXPECT_EQ(back.seed, 42u);
  EXPECT_EQ(back.reference_cubin_path, r.reference_cubin_path);
  nlohmann::json older = to_json(r);
  older.erase("reference_cubin");
  EXPECT_EQ(request_from_json(older).reference_cubin_path, "") << "without one the worker compiles the reference";
  EXPECT_EQ(back.timing.min_repeats, 7);
  EXPECT_EQ(back.timing.slow_factor, 2);
  const tmap_launch_plan& p = back.launch.plan;
  ASSERT_EQ(p.num_maps, 2);
  EXPECT_EQ(p.maps[0].source.slot, kSlotA);
  EXPECT_EQ(p.maps[1].source.slot, kSlotB);
  EXPECT_EQ(p.maps[1].strides[1], 208000u);
  EXPECT_EQ(p.maps[1].box[1], 128u);
  EXPECT_TRUE(p.maps[0].im2col);
  EXPECT_FALSE(p.maps[1].im2col);
  EXPECT_EQ(p.maps[0].lower[1], -2);
  EXPECT_EQ(p.maps[0].upper[0], -3);
  EXPECT_EQ(p.maps[0].traversal[2], 2u);
  ASSERT_EQ(p.num_steps, 1);
  EXPECT_TRUE(p.steps[0].persistent);
  EXPECT_EQ(p.steps[0].cluster_x, 2);
  ASSERT_EQ(p.steps[0].num_args, 6) << "A, B, output, workspace, then the two maps";
  EXPECT_EQ(p.steps[0].args[5].slot, TMAP_SLOT_MAP + 1);
  MeasureResult res{MeasureStatus::kTimeout, "slow", 0.5, 12.5, {12.0, 13.0}, {0.25, 0.75, 0.125, 0.5, 2.0, 0.0625}};
  MeasureResult res_back = result_from_json(to_json(res));
  EXPECT_EQ(res_back.status, MeasureStatus::kTimeout);
  EXPECT_EQ(res_back.times_us, res.times_us);
  EXPECT_EQ(res_back.phases.inputs, 0.25);
  EXPECT_EQ(res_back.phases.reference, 0.75);
  EXPECT_EQ(res_back.phases.load, 0.125);
  EXPECT_EQ(res_back.phases.check, 0.5);
  EXPECT_EQ(res_back.phases.time, 2.0);
  EXPECT_EQ(res_back.phases.other, 0.0625);
}

// A run's measurers share the reference kernels: each compute's is compiled once (in the
// background, from prepare) and every GPU's worker loads the same file.
TEST(Worker, EachReferenceKernelIsCompiledOnceForEveryGpu) {
  const Compute a = build_compute(builtin_op("gemm"), parse_param_overrides({"M=64", "N=64", "K=64"}));
  const Compute b = build_compute(builtin_op("gemm"), parse_param_overrides({"M=128", "N=64", "K=64"}));
  std::string dir;
  {
    ReferenceBinaries refs(90);
    refs.prepare(to_json(a));
    const std::string pa = refs.path(to_json(a)), pb = refs.path(to_json(b));
    ASSERT_FALSE(pa.empty());
    ASSERT_FALSE(pb.empty());
    EXPECT_NE(pa, pb);
    EXPECT_EQ(refs.path(to_json(a)), pa) << "compiled once";
    EXPECT_GT(std::filesystem::file_size(pa), 0u);
    const KernelSource k = emit_reference_kernel(a);
    const CompileResult here = NvrtcCompiler(90).compile(k.code, k.name);
    ASSERT_TRUE(here.ok) << here.log;
    std::ifstream in(pa, std::ios::binary);
    const std::vector<char> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(file.size(), here.cubin.size()) << "the binary of emit_reference_kernel(compute)";
    dir = std::filesystem::path(pa).parent_path();
  }
  EXPECT_FALSE(std::filesystem::exists(dir)) << "the files go with the run";
}

/// Plans arrive as JSON and index fixed arrays: every count, index, slot and offset is checked.
// The worker keeps a shape's inputs and reference for every request of that shape: a range's
// sample tuned as a shape of its own and the range's kernels measured at that size share them
// (each drew its inputs and ran its reference before); another size or seed does not.
TEST(Worker, ARangesSampleAndTheRangesKernelsAtItsSizeShareOneShape) {
  const Compute range = build_compute(builtin_op("gemm_nt"), parse_param_overrides({"M=1..256", "N=96", "K=64"}));
  ASSERT_TRUE(range.dynamic.active());
  KernelSource k;
  k.name = "k";
  k.threads = 128;
  auto request = [&](const Compute& c, std::int64_t size, std::uint64_t seed) {
    MeasureRequest r = MeasureRequest::for_kernel(c, k, "/nonexistent.cubin", 0, 1, size);
    r.launch.plan.size_lo = range.dynamic.lo;
    r.launch.plan.size_hi = range.dynamic.hi;
    r.seed = seed;
    return shape_key(request_from_json(to_json(r)));  // as the worker reads it
  };
  const std::string at57 = request(range, 57, 1);
  EXPECT_EQ(request(range_sample(range, 57), 57, 1), at57);
  EXPECT_NE(request(range, 58, 1), at57);
  EXPECT_NE(request(range, 57, 2), at57);
  // A size the range does not take is refused, not prepared.
  EXPECT_THROW(request(range, 257, 1), std::runtime_error);
}

TEST(Worker, LaunchPlansFromJsonAreChecked) {
  KernelSource k;
  k.name = "main";
  k.grid = {4, 1, 1};
  k.threads = 128;
  k.workspace_bytes = 1024;
  k.reduce_name = "main_reduce";
  k.reduce_blocks = 2;
  const nlohmann::json good = to_json(plan_launch(k));
  EXPECT_EQ(to_json(launch_plan_from_json(good)), good);
  auto refused = [&](const std::function<void(nlohmann::json&)>& change, const std::string& why) {
    nlohmann::json j = good;
    change(j);
    try {
      launch_plan_from_json(j);
      ADD_FAILURE() << "accepted: " << why;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("launch plan"), std::string::npos) << e.what();
    }
  };
  refused([](nlohmann::json& j) { j["steps"][0]["kernel"] = 2; }, "a kernel index past the names");
  refused([](nlohmann::json& j) { j["steps"][0]["args"][0] = {TMAP_PLAN_MAX_SLOTS, 0}; }, "a slot past the slots");
  refused([](nlohmann::json& j) { j["steps"][0]["args"][0] = {-1, 0}; }, "a negative slot");
  refused([](nlohmann::json& j) { j["steps"][0]["args"][0] = {TMAP_SLOT_MAP, 0}; }, "a tensor map the plan lacks");
  refused([](nlohmann::json& j) { j["steps"][0]["args"][3] = {kSlotWorkspace, 1024}; }, "an offset past the workspace");
  refused([](nlohmann::json& j) { j["steps"][0]["args"][0] = {kSlotA, 16}; }, "an offset into a tensor");
  refused([](nlohmann::json& j) { j["workspace_slot"] = TMAP_PLAN_MAX_SLOTS; }, "the workspace past the slots");
  refused([](nlohmann::json& j) { j["zeroed"] = {1000, 25}; }, "zeroed bytes past the workspace");
  refused([](nlohmann::json& j) { j["zeroed"] = {0, 0}; }, "no zeroed bytes named");
  refused([](nlohmann::json& j) { j["steps"][0]["cluster_x"] = 0; }, "clusters of no block");
  refused([](nlohmann::json& j) { j["steps"][0]["grid"] = {1, 1}; }, "a grid of two dimensions");
  refused([](nlohmann::json& j) { for (int i = 0; i < 2; ++i) j["steps"].push_back(j["steps"][0]); }, "4 steps");
  refused([](nlohmann::json& j) { j["steps"] = nlohmann::json::array(); }, "no step");
  refused([](nlohmann::json& j) { j["steps"][0]["args"] = std::vector<nlohmann::json>(TMAP_PLAN_MAX_ARGS + 1, {0, 0}); },
          "more arguments than a step holds");
  refused([&](nlohmann::json& j) { j["maps"] = std::vector<nlohmann::json>(TMAP_PLAN_MAX_MAPS + 1, nlohmann::json::object()); },
          "more maps than a plan holds");
  refused([](nlohmann::json& j) { j["maps"] = {nlohmann::json::object()}; }, "a tensor map without its fields");
  refused([](nlohmann::json& j) { j.erase("steps"); }, "no steps field");
  refused([](nlohmann::json& j) { j["workspace_bytes"] = "1024"; }, "a size given as text");
  refused([](nlohmann::json& j) { j["steps"][0]["args"][0] = {"0", 0}; }, "a slot given as text");
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
  auto request = [&](const std::string& name, const std::string& body, int threads) {
    MeasureRequest r = gemm_request(name, 64, threads);
    r.cubin_path = compile_to_file(name, body);
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

// With a slow factor, a candidate that far behind the fastest correct one of its workload is
// timed with one repeat; the fastest and those near it in full.
TEST(Worker, CandidatesFarBehindTheFastestAreTimedOnce) {
  if (query_runtime().devices.empty()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  MeasureWorker worker(TMAP_BINARY, 10.0);
  const std::string gemm = "int i = blockIdx.x, j = threadIdx.x; float s = 0; for (int k = 0; k < 64; ++k) s += "
                           "__half2float(a[i * 64 + k]) * __half2float(b[k * 64 + j]);";
  auto request = [&](const std::string& name, const std::string& body) {
    MeasureRequest r = gemm_request(name, 64, 64);
    r.cubin_path = compile_to_file(name, body);
    r.timing = tuning_timing(1);
    r.timing.slow_factor = 2;
    return r;
  };
  const MeasureResult fast = worker.measure(request("fast", gemm + " out[i * 64 + j] = s;"));
  ASSERT_EQ(fast.status, MeasureStatus::kOk) << fast.message;
  EXPECT_GE(fast.times_us.size(), 5u);
  // The same sums, then about 50 us of spinning: far behind.
  const MeasureResult slow = worker.measure(request(
      "slow", gemm + " long long t = clock64(); while (clock64() - t < 100000) {} out[i * 64 + j] = s;"));
  ASSERT_EQ(slow.status, MeasureStatus::kOk) << slow.message;
  EXPECT_GT(slow.median_us, 2 * fast.median_us);
  EXPECT_EQ(slow.times_us.size(), 1u);
  const MeasureResult again = worker.measure(request("again", gemm + " out[i * 64 + j] = s;"));
  ASSERT_EQ(again.status, MeasureStatus::kOk) << again.message;
  EXPECT_GE(again.times_us.size(), 5u);
}

// A measurement says where the worker's time went: the shape is prepared for its first
// candidate only, and every candidate is loaded, checked and timed, within the measurement's time.
TEST(Worker, EachMeasurementSaysWhereItsTimeWent) {
  if (query_runtime().devices.empty()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  MeasureWorker worker(TMAP_BINARY, 10.0);
  const std::string gemm = "int i = blockIdx.x, j = threadIdx.x; float s = 0; for (int k = 0; k < 64; ++k) s += "
                           "__half2float(a[i * 64 + k]) * __half2float(b[k * 64 + j]); out[i * 64 + j] = s;";
  std::vector<MeasurePhases> phases;
  for (const char* name : {"first", "second"}) {
    MeasureRequest r = gemm_request(name, 64, 64);
    r.cubin_path = compile_to_file(name, gemm);
    r.timing = tuning_timing(5);
    const auto t0 = std::chrono::steady_clock::now();
    const MeasureResult m = worker.measure(r);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_EQ(m.status, MeasureStatus::kOk) << m.message;
    const MeasurePhases& p = m.phases;
    EXPECT_GT(p.load, 0) << name;
    EXPECT_GT(p.check, 0) << name;
    EXPECT_GE(p.time, 0.005) << name << ": timed until 5 ms of runs";
    EXPECT_GT(p.other, 0) << name << ": the request read, the module released";
    EXPECT_LT(p.in_worker(), wall) << name;
    phases.push_back(p);
  }
  EXPECT_GT(phases[0].inputs, 0) << "the shape's inputs";
  EXPECT_GT(phases[0].reference, 0) << "the shape's reference output";
  EXPECT_EQ(phases[1].inputs + phases[1].reference, 0) << "the second candidate finds the shape kept";
}

}  // namespace
}  // namespace tmap

namespace tmap {
namespace {

// `tmap tune --gpus` starts a worker per GPU (`tmap worker --device N`); one for a GPU that is
// not there answers every candidate with an error that names it.
TEST(Worker, AWorkerForAMissingGpuSaysWhichGpu) {
  MeasureWorker worker(TMAP_BINARY, 30.0, 37);
  MeasureResult r = worker.measure(gemm_request());
  EXPECT_EQ(r.status, MeasureStatus::kWorkerError);
  EXPECT_NE(r.message.find("device 37 is not one of the"), std::string::npos) << r.message;
  MeasureResult again = worker.measure(gemm_request());  // a fresh worker, after the error
  EXPECT_EQ(again.message, r.message);
  EXPECT_EQ(worker.restarts(), 1);
}

}  // namespace
}  // namespace tmap
