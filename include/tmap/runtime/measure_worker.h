// Isolated measurement: candidates run in a worker process (`tmap worker`), one JSON line per
// request and per result over pipes. A kernel that faults, fails to launch or hangs past the
// timeout becomes an error result for that candidate; the worker is restarted and the next
// candidate runs. The parent never loses what it recorded.
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <sys/types.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "tmap/runtime/kernel_runner.h"
#include "tmap/runtime/nvrtc_compiler.h"
#include "tmap/support/files.h"

namespace tmap {

/// One compiled candidate to measure.
struct MeasureRequest {
  /// The launch of a generated kernel `k` whose binary is at `cubin_path`.
  static MeasureRequest for_kernel(const Compute& c, const KernelSource& k, const std::string& cubin_path,
                                   int a_tensor, int b_tensor, std::int64_t size = 0);

  nlohmann::json compute;       ///< to_json(Compute): the worker rebuilds tensors and reference.
  /// > 0: `compute` is a range of sizes (Compute::dynamic) and the kernel runs at this one, on the
  /// tensors and reference of compute_at(compute, size).
  std::int64_t size = 0;
  LaunchPlan launch;            ///< plan_launch() of the kernel (its code is not sent).
  std::string cubin_path;       ///< The compiled binary, written by the parent.
  /// The reference kernel's binary (ReferenceBinaries); empty: the worker compiles it.
  std::string reference_cubin_path;
  int a_tensor = 0, b_tensor = 1;  ///< Tensors passed as the kernel's first two arguments.
  bool verify = true;
  double tolerance = 1e-2;
  TimingOptions timing;
  std::uint64_t seed = 1;       ///< Inputs are drawn once per compute and seed in a worker.
};

enum class MeasureStatus { kOk, kWrongResult, kLoadError, kLaunchError, kRuntimeError, kTimeout, kWorkerError };
const char* status_name(MeasureStatus s);  ///< "ok", "wrong_result", "launch_error", ...

struct MeasureResult {
  MeasureStatus status = MeasureStatus::kWorkerError;
  std::string message;
  double rel_l2 = 0;
  double median_us = 0;
  std::vector<double> times_us;
  MeasurePhases phases;  ///< In the worker.
};

/// The reference kernels' binaries of the computes a tuning run measures, each compiled once in
/// the background (in the compile workers, see use_compile_workers) and written to a file that
/// every GPU's worker loads: a worker compiling its own spent seconds of its GPU's time on each
/// workload, once per GPU. Shared by the measurers of a run; thread-safe.
class ReferenceBinaries {
 public:
  explicit ReferenceBinaries(int compute_capability);
  ~ReferenceBinaries();  ///< Waits for the compiles and removes the files.
  ReferenceBinaries(const ReferenceBinaries&) = delete;
  ReferenceBinaries& operator=(const ReferenceBinaries&) = delete;
  /// Starts compiling the reference of the compute (to_json(Compute)) unless it has started.
  void prepare(const nlohmann::json& compute);
  /// Its binary's path, waiting for its compile; empty when it did not compile (the worker then
  /// compiles it and reports the error).
  std::string path(const nlohmann::json& compute);

 private:
  std::shared_future<std::string> start(const nlohmann::json& compute);

  NvrtcCompiler compiler_;
  TemporaryDirectory dir_;
  std::mutex mu_;
  std::map<std::string, std::shared_future<std::string>> paths_;  ///< By the compute's text.
};

nlohmann::json to_json(const MeasureRequest& r);
MeasureRequest request_from_json(const nlohmann::json& j);
nlohmann::json to_json(const MeasureResult& r);
MeasureResult result_from_json(const nlohmann::json& j);

/// The shape a request's kernel runs on, as the worker keeps its tensors and reference: requests
/// with one key share them, whether they name the shape itself (a range's sample) or a range's
/// kernel at that size. Throws std::runtime_error for a size that the range or the plan refuses.
std::string shape_key(const MeasureRequest& req);

/// The parent's side: starts `binary worker` on first use and after any failure, on CUDA device
/// `device` (of the visible ones; -1: the runtime's default).
class MeasureWorker {
 public:
  MeasureWorker(std::string binary, double timeout_seconds, int device = -1);
  ~MeasureWorker();
  MeasureWorker(const MeasureWorker&) = delete;
  MeasureWorker& operator=(const MeasureWorker&) = delete;

  MeasureResult measure(const MeasureRequest& request);
  int restarts() const { return starts_ > 0 ? starts_ - 1 : 0; }

 private:
  void start();
  void stop(bool kill_now);

  std::string binary_;
  double timeout_;
  int device_;
  pid_t pid_ = -1;
  int to_child_ = -1, from_child_ = -1;
  std::string pending_;  ///< Bytes read past the last line.
  int starts_ = 0;
};

/// The worker's loop: reads requests from `in`, writes results to `out`, until end of input.
/// Exits (returns 3) after a failure that may have corrupted the CUDA context. `device` >= 0
/// selects the CUDA device first. The shapes it prepares (shape_key) are kept, the least
/// recently used dropped while they take more than a quarter of the device's memory.
int run_measure_worker(std::FILE* in, std::FILE* out, int device = -1);

}  // namespace tmap
