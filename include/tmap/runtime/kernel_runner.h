// Runs generated kernels on the GPU: a workspace holds one compute's tensors with fresh random
// inputs; the reference kernel (generated from the IR) gives the expected output once; each
// candidate runs on a poisoned output, is compared by relative L2 error and timed with CUDA
// events after warm-up (median of repeats).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tmap/codegen/emitter.h"
#include "tmap/runtime/launch.h"
#include "tmap/runtime/nvrtc_compiler.h"

namespace tmap {

/// The reference output computed on the CPU, in double (for checking the GPU reference on
/// small shapes). `tensors` holds one vector per tensor of the compute; the output's is ignored.
std::vector<double> cpu_reference(const Compute& c, const std::vector<std::vector<double>>& tensors);

/// Values as the bytes of a tensor of dtype `t` (rounded as the dtype rounds; int4 packed two to
/// a byte, low nibble first), and back: the `n` values of such bytes.
std::vector<unsigned char> encode_values(const std::vector<double>& values, DType t);
std::vector<double> decode_values(const std::vector<unsigned char>& bytes, DType t, std::size_t n);

/// Whether a workspace keeps its inputs' values on the host (host_values()) for a CPU-side use
/// of them, or only on the device: a measuring worker keeps many workspaces, and a value held as
/// a double takes four times its 16-bit tensor's bytes.
enum class HostValues { kKeep, kDrop };

/// One compute's tensors on device 0: inputs drawn from `seed` (uniform in [-1, 1], rounded
/// to each dtype; small integers for integer types; the same values whether kept or not). CUDA
/// failures throw std::runtime_error.
class Workspace {
 public:
  Workspace(const Compute& c, std::uint64_t seed, HostValues keep = HostValues::kKeep);
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  const Compute& compute() const { return compute_; }
  /// Each input's values (empty with HostValues::kDrop); the output's is empty.
  const std::vector<std::vector<double>>& host_values() const { return values_; }
  /// The bytes it holds on the device: its tensors, and a reference keep_reference() kept.
  std::size_t device_bytes() const { return device_bytes_; }
  void* device(int tensor) const { return device_[tensor]; }
  /// Sets every output byte to 0xFF: NaN for floats, -1 for integers.
  void poison_output();
  std::vector<double> read_output() const;
  /// relative_l2(read_output(), reference), reading the output into a buffer kept for the next
  /// call and comparing its elements as they are (converting a 0.8 M-element float16 output
  /// to doubles first took 11 of the 34 ms that measuring one candidate took).
  /// Where `reference` is the one keep_reference() kept, the sums are taken on the GPU instead.
  double output_error(const std::vector<double>& reference) const;
  /// Keeps `reference` (this workspace's reference output; the vector may move, its values must
  /// stay) on the device too, so that output_error() sums the error there: a tuning worker's
  /// host copy and pass took 10-20 ms a candidate on outputs of 5-13 M elements while compiles
  /// kept the host's cores busy.
  void keep_reference(const std::vector<double>& reference);

 private:
  /// output_error() on the GPU; nullopt for an output type without a kernel there.
  std::optional<double> device_output_error() const;

  const Compute& compute_;
  std::vector<std::vector<double>> values_;
  std::vector<void*> device_;
  std::size_t device_bytes_ = 0;
  mutable std::vector<unsigned char> host_output_;
  const double* kept_reference_ = nullptr;  ///< keep_reference()'s values (on the device at device_reference_).
  void* device_reference_ = nullptr;
  void* error_sums_ = nullptr;  ///< Two doubles and a NaN flag.
};

/// The reference kernel's output for the workspace's inputs, compiled here.
std::vector<double> gpu_reference(Workspace& ws, NvrtcCompiler& compiler);
/// The same from the binary of emit_reference_kernel(ws.compute()), compiled elsewhere.
std::vector<double> gpu_reference(Workspace& ws, const std::vector<char>& cubin);

/// The relative L2 error a correct kernel stays under: 1e-2 for 16-bit floating operands,
/// 1e-3 for tf32, 1e-9 for float64, 0 (exact) for integers.
double verification_tolerance(const HwAbstraction& hw);

/// ||got - ref|| / ||ref||; infinite when an element of `got` is NaN.
double relative_l2(const std::vector<double>& got, const std::vector<double>& ref);
/// The same of the output bytes `bytes` of dtype `t` (reference.size() elements, as
/// encode_values writes them), compared as they are rather than decoded into a vector first.
double relative_l2_of_bytes(const unsigned char* bytes, DType t, const std::vector<double>& reference);

struct TimingOptions {
  int warmup = 3;
  int min_repeats = 10;
  double min_total_ms = 20;  ///< Repeat until both this time and min_repeats are reached.
  /// > 0: capture this many back-to-back runs in a CUDA graph and time its replays (each
  /// repeat is one replay, divided by the count), which hides launch gaps of short kernels.
  int graph_runs = 0;
  /// Read a buffer twice the L2 size before each run (leaving the L2 full of clean lines of it),
  /// so inputs come from device memory, as in a network where other layers ran in between. In event mode the flush precedes each
  /// timed run; with graph_runs, the graph holds (flush, run) pairs and a second graph the
  /// flushes alone, whose time is subtracted (so host launch overhead never counts).
  bool flush_l2 = false;
  /// > 0: when the first (verifying) run takes longer than this, the candidate is timed with
  /// events, one warm-up and 3 repeats instead: graph replay and long series only matter for
  /// short kernels, and a slow candidate must not run into the measurement timeout.
  double long_run_ms = 0;
  /// > 0: a repeat slower per run than this ends the timing. A tuner's worker sets it to
  /// `slow_factor` (below) times the fastest candidate of the workload it has timed: one repeat
  /// of a candidate that far behind is enough to rank it, and such candidates, the most of a
  /// search, took about half of its timing to reach min_repeats and min_total_ms.
  double slow_us = 0;
  double slow_factor = 0;  ///< For the worker, as above (0: every candidate timed in full).
};

/// tmap's own kernels (drawing a workspace's inputs, summing an output's error, flushing the
/// L2), to compile in tests without a GPU.
std::vector<CompileJob> builtin_kernel_sources();

/// Times `launch` (one run of whatever is measured, enqueued on the stream it is given, a
/// cudaStream_t; it returns a cudaError_t) the way tmap times its own kernels: warm-up runs, then
/// repeats until both min_repeats and min_total_ms are reached, each repeat one CUDA-graph replay
/// of graph_runs runs (divided by the count) or, with graph_runs = 0, one event-timed run (after
/// an L2 flush with flush_l2). Returns every repeat in microseconds; throws std::runtime_error
/// naming the step that failed. Baselines (cuDNN, cuBLAS) are timed through this too.
std::vector<double> time_launches(const std::function<int(void* stream)>& launch, const TimingOptions& timing);

/// The median of a non-empty series.
double median_of(std::vector<double> v);

/// Where a candidate failed: loading the binary, launching it, or while it ran (a fault, after
/// which the CUDA context is unusable).
enum class FailureKind { kNone, kLoad, kLaunch, kRuntime };

/// Where a measurement's time went, in seconds: preparing its shape's inputs and computing its
/// reference output (once per shape a worker keeps), loading the kernel's module, its first run
/// with the output check, and the timed runs. Summed over a tuning run, it says what a faster
/// measurement must cut.
struct MeasurePhases {
  double inputs = 0, reference = 0, load = 0, check = 0, time = 0;
  double other = 0;           ///< In the worker, outside the phases above: the request, the module's release.
  double reference_wait = 0;  ///< The parent awaiting the reference kernel's compile.
  double exchange = 0;        ///< The parent's own share: the kernel's file, the pipe both ways.
  MeasurePhases& operator+=(const MeasurePhases& o) {
    inputs += o.inputs, reference += o.reference, load += o.load, check += o.check, time += o.time;
    other += o.other, reference_wait += o.reference_wait, exchange += o.exchange;
    return *this;
  }
  /// The worker's seconds, as it timed them (`other` included).
  double in_worker() const { return inputs + reference + load + check + time + other; }
};

struct KernelRun {
  bool ok = false;
  MeasurePhases phases;  ///< All but `inputs` and `reference`, which are the caller's.
  FailureKind failure = FailureKind::kNone;
  std::string error;     ///< CUDA's error name and message.
  double rel_l2 = 0;
  double median_us = 0;
  std::vector<double> times_us;
};

/// Runs a candidate's launch plan on the workspace, tensors `a_tensor` and `b_tensor` (indices
/// into Compute::tensors) in slots kSlotA and kSlotB, the output in kSlotOut: poisons the
/// output, runs once, checks against `reference` (skipped when empty), then times it. A plan of a
/// range of sizes runs at `size`, the workspace's compute being its compute_at(size); a plan of
/// one shape takes size 0.
KernelRun run_candidate(Workspace& ws, const std::vector<double>& reference, int a_tensor, int b_tensor,
                        const LaunchPlan& launch, const std::vector<char>& cubin, const TimingOptions& timing = {},
                        std::int64_t size = 0);
/// The same for kernel `k`, through plan_launch(k).
KernelRun run_candidate(Workspace& ws, const std::vector<double>& reference, int a_tensor, int b_tensor,
                        const KernelSource& k, const std::vector<char>& cubin, const TimingOptions& timing = {},
                        std::int64_t size = 0);

}  // namespace tmap
