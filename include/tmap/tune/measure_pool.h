// The GPUs a tuning run measures on. A Measurer measures on one GPU, one candidate at a time; a
// MeasurePool drives one Measurer per GPU from its own thread, so that a batch's candidates are
// measured on every GPU of the host at once while the tuner's thread proposes, records and
// learns. With one GPU it is the same measurement, handed to one thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tmap/runtime/device.h"
#include "tmap/runtime/measure_worker.h"
#include "tmap/runtime/nvrtc_compiler.h"

namespace tmap {

struct ImplicitGemm;
struct ScheduleParams;

/// Which GPU a measurer measures on (index -1: none in particular, as in tests).
struct MeasureGpu {
  int index = -1;
  std::string uuid, name;
};

/// Measures compiled candidates on one GPU. The GPU implementation runs them in the isolated
/// worker; tests substitute their own.
class Measurer {
 public:
  virtual ~Measurer() = default;
  virtual MeasureResult measure(const Compute& c, const ImplicitGemm& g, const ScheduleParams& p,
                                const KernelSource& k, const CompileResult& binary) = 0;
  virtual MeasureGpu gpu() const { return {}; }
  /// Gets ready to measure candidates of `c` (e.g. compiles its reference in the background).
  virtual void prepare(const Compute&) {}
};

class MeasureClient;

class MeasurePool {
 public:
  /// The measurers, one per GPU (not owned; they outlive the pool).
  explicit MeasurePool(std::vector<Measurer*> gpus);
  ~MeasurePool();  ///< Waits for the jobs in flight.
  MeasurePool(const MeasurePool&) = delete;
  MeasurePool& operator=(const MeasurePool&) = delete;

  using Job = std::function<MeasureResult(Measurer&)>;
  struct Done {
    std::uint64_t tag = 0;
    MeasureClient* client = nullptr;  ///< Who submitted the job (deliver() hands it back).
    std::size_t gpu = 0;
    MeasureResult result;
    double seconds = 0;  ///< The job's time on its GPU.
  };
  /// What each GPU has done, and what it measures (for progress lines).
  struct Usage {
    int measured = 0;
    double busy_s = 0;
    std::string workload;  ///< Of its latest measurement.
    double best_us = 0;    ///< That workload's best when it ended (0: none yet).
  };

  std::size_t size() const { return gpus_.size(); }
  Measurer& measurer(std::size_t gpu) { return *gpus_[gpu]; }
  const Measurer& measurer(std::size_t gpu) const { return *gpus_[gpu]; }
  std::size_t in_flight() const;
  std::size_t idle() const { return size() - in_flight(); }

  /// Starts `job` on an idle GPU (idle() > 0) and returns that GPU. A job that throws finishes
  /// as a worker error with its message. `client` (may be null) is who deliver() hands it to.
  std::size_t submit(std::uint64_t tag, Job job, MeasureClient* client = nullptr);
  /// A finished job, waiting for one up to `timeout_s` (forever when negative); none after that
  /// or when nothing is in flight.
  std::optional<Done> collect(double timeout_s);
  /// Hands a finished job to the client that submitted it: model-level tuning starts the next
  /// workload's candidates while the last of the previous one's are measured, and whichever
  /// task collects a result delivers it to the task it belongs to.
  void deliver(Done d);
  /// Collects and delivers every job in flight.
  void deliver_all();
  /// Waits for every job in flight and drops its result (while unwinding: the jobs read the
  /// state of the tasks that submitted them, which must outlive them).
  void abandon_all();
  /// Runs `job` on GPU `gpu` and waits for it; only while nothing else is in flight (the tuner
  /// confirms its fastest candidates on one GPU so that they are ranked on one device).
  Done run_on(std::size_t gpu, Job job);

  const std::vector<Usage>& usage() const { return usage_; }
  /// Each GPU gets ready to measure candidates of `c` (Measurer::prepare), in the background.
  void prepare(const Compute& c);
  /// Names the workload and its best time for the GPU's progress line.
  void label(std::size_t gpu, std::string workload, double best_us);

 private:
  struct Lane {
    std::optional<Job> job;
    std::uint64_t tag = 0;
    MeasureClient* client = nullptr;
  };
  void serve(std::size_t gpu);
  void start(std::size_t gpu, std::uint64_t tag, Job job, MeasureClient* client);

  std::vector<Measurer*> gpus_;
  // Touched by the caller's thread only: a GPU is taken from its job's submit to its collect.
  std::vector<Usage> usage_;
  std::vector<bool> taken_;
  std::mutex mu_;
  std::condition_variable work_, finished_;
  std::vector<Lane> lanes_;
  std::vector<Done> done_;
  bool closing_ = false;
  std::vector<std::thread> threads_;
};

/// Who submits jobs to a pool and records their results (a tuning task).
class MeasureClient {
 public:
  virtual ~MeasureClient() = default;
  /// A job of this client has finished; called on the thread that delivers it.
  virtual void measured(MeasurePool::Done d, MeasurePool& gpus) = 0;
};

/// The GPUs `spec` names among the visible ones: "all" (or "") for every one, else indices such
/// as "0,2". A UserError, naming `--gpus` and the fix, for an unknown or repeated index, or for
/// GPUs of different models or architectures (a record is comparable only on its own device
/// type).
std::vector<DeviceInfo> choose_gpus(const std::string& spec, const std::vector<DeviceInfo>& visible);

/// What bounded a run's trial rate, from its GPUs' busy time over `wall_s` and the GPU-seconds
/// they waited for compiled candidates: "compilation" when that wait is over a tenth of the
/// GPUs' time, else "measurement" when they were busy at least 80% of it, else "the search"
/// (proposing, recording and learning on the tuner's thread).
std::string bound_by(const MeasurePool& gpus, double wall_s, double compile_wait_gpu_s);

}  // namespace tmap
