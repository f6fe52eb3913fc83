// What tmap_bench's baselines share: device buffers, error checks, how everything is timed, how
// a baseline is checked and kept, and the cuDNN descriptions of a convolution.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench_report.h"
#include "tmap/ir/compute.h"
#include "tmap/runtime/kernel_runner.h"

namespace bench {

using tmap::Compute;

void cuda_ok(cudaError_t e, const char* what);
void cudnn_ok(cudnnStatus_t s, const char* what);
void cublas_ok(cublasStatus_t s, const char* what);

/// A device buffer.
struct Buffer {
  void* p = nullptr;
  explicit Buffer(std::size_t bytes) {
    if (bytes) cuda_ok(cudaMalloc(&p, bytes), "cudaMalloc");
  }
  ~Buffer() { cudaFree(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

/// Bytes of `n` elements of dtype `t` (int4: two to a byte).
std::size_t bytes_of(tmap::DType t, std::size_t n);
/// The `n` elements of dtype `t` at device address `dev`, as doubles.
std::vector<double> read_output(const void* dev, std::size_t n, tmap::DType t);
/// A new device buffer holding `values` as dtype `t`.
std::unique_ptr<Buffer> upload(const std::vector<double>& values, tmap::DType t);

/// The library types of a tmap dtype: cuBLAS's (CUDA_R_*) and cuDNN's (CUDNN_DATA_*); a
/// std::runtime_error naming the dtype when the library has none.
cudaDataType_t cuda_type(tmap::DType t);
cudnnDataType_t cudnn_type(tmap::DType t);

/// How everything in the benchmark is timed, tmap's kernels and the baselines alike: CUDA-graph
/// replays of `graph_runs` runs after 3 warm-up runs, until 10 repeats and 30 ms; cold: each run
/// after an L2 flush, the flushes' time subtracted.
tmap::TimingOptions bench_timing(int graph_runs, bool cold);
Timing time_both(const std::function<int(void*)>& launch, int graph_runs);

/// The faster of two baselines (either may be missing).
std::optional<Baseline> faster(std::optional<Baseline> a, std::optional<Baseline> b);

/// What a framework without fusion runs after a contraction: `run` enqueues it on a stream,
/// reading the contraction's output (in tmap's layout) from `contraction_out` (cudaError_t);
/// `read` returns its final output, `poison` fills it with NaN. A baseline given one is the
/// contraction followed by it, checked on its final output and timed as one sequence.
struct PostOps {
  std::function<int(void* stream, const void* contraction_out)> run;
  std::function<std::vector<double>()> read;
  std::function<void()> poison;
};

/// `launch` followed by `post` (when given) on the same stream.
std::function<int(void*)> then_post(std::function<int(void*)> launch, const PostOps* post, const void* contraction_out);

/// One baseline search: each candidate runs once on a poisoned output, is checked against the
/// reference (and tmap's output) and, when correct, timed; the fastest correct one is kept.
struct Search {
  Search(const std::vector<double>& ref, const std::vector<double>& tmap_out, int graph_runs, void* out,
         std::size_t out_bytes, std::function<std::vector<double>()> output, const PostOps* post = nullptr)
      : ref(ref), tmap_out(tmap_out), graph_runs(graph_runs), out(out), out_bytes(out_bytes), output(std::move(output)),
        post(post) {}

  const std::vector<double>& ref;
  const std::vector<double>& tmap_out;
  int graph_runs = 20;
  void* out = nullptr;  ///< What a candidate writes (poisoned before each run).
  std::size_t out_bytes = 0;
  std::function<std::vector<double>()> output;  ///< A candidate's output, in tmap's layout.
  const PostOps* post = nullptr;                ///< Run after each candidate; its output is then checked.
  std::optional<Baseline> best;
  int tried = 0, wrong = 0;

  /// Runs, checks and times one candidate; false when it did not run.
  bool consider(const std::string& name, const std::function<int(void*)>& launch);
  /// The fastest correct candidate, with the counts of those tried and wrong.
  std::optional<Baseline> result() const;
};

int param_of(const Compute& c, const std::string& name);

/// Checks one baseline's output `got` against the reference (1e-2 relative L2, as tmap's own
/// fp16 kernels) and tmap's output; a correct one is timed and kept when it is the fastest.
void offer(std::optional<Baseline>& best, const std::string& name, const std::vector<double>& got,
           const std::vector<double>& ref, const std::vector<double>& tmap_out, const std::function<int(void*)>& launch,
           int graph_runs, int& wrong);

/// With TMAP_BENCH_TRACE set, each step of a row on stderr (to find what a slow row waits on).
void trace(const std::string& what);

/// A convolution as cuDNN describes it: 2 or 3 spatial dimensions (a 1-D convolution is a 2-D one
/// of height 1), and whether tmap's tensors are channels-last.
struct ConvShape {
  int n = 1, c = 1, k = 1, groups = 1;
  std::vector<int> in, filter, pad, stride, dil;  ///< Per spatial dimension, outermost first.
  bool tmap_channels_last = false;
  /// The data's dtypes (the input's, the filter being the same) and cuDNN's output's.
  tmap::DType in_dtype = tmap::DType::kFloat16, out_dtype = tmap::DType::kFloat16;
};

/// The convolution of `c` (of `rank` spatial dimensions, tmap's tensors channels-last with
/// `nhwc`) as cuDNN runs it; an int8 one writes float32.
ConvShape conv_shape(const Compute& c, int rank, bool nhwc);
/// The type cuDNN sums a convolution's products in: float32, or int32 for int8 inputs.
cudnnDataType_t conv_compute_type(const ConvShape& s);

/// [outer][channels][inner] <-> [outer][inner][channels] (channels-first to channels-last, or back
/// with `to_last` false).
std::vector<double> move_channels(const std::vector<double>& v, std::size_t outer, std::size_t channels,
                                  std::size_t inner, bool to_last);

std::size_t product(const std::vector<int>& v);

/// A cuDNN backend (graph API) descriptor, destroyed with its scope.
class BackendDesc {
 public:
  explicit BackendDesc(cudnnBackendDescriptorType_t type) {
    cudnn_ok(cudnnBackendCreateDescriptor(type, &d_), "cudnnBackendCreateDescriptor");
  }
  ~BackendDesc() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  BackendDesc(BackendDesc&& o) noexcept : d_(o.d_) { o.d_ = nullptr; }
  BackendDesc(const BackendDesc&) = delete;
  BackendDesc& operator=(const BackendDesc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }
  template <typename T>
  cudnnStatus_t set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const T* values,
                    std::int64_t count = 1) {
    return cudnnBackendSetAttribute(d_, name, type, count, values);
  }
  cudnnStatus_t finalize() { return cudnnBackendFinalize(d_); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

/// Strides of dims [N, C, spatial...] stored channels-first or channels-last.
std::vector<std::int64_t> strides_of(const std::vector<int>& dims, bool channels_last);

/// A finalized backend tensor; `virtual_tensor`: an intermediate of a graph, never in memory.
BackendDesc backend_tensor(std::int64_t uid, const std::vector<int>& dims, bool channels_last, cudnnDataType_t type,
                           bool virtual_tensor = false);

}  // namespace bench
