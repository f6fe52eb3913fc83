// tmap_bench: tmap's tuned kernels against cuDNN and cuBLAS, measured the same way in the same
// process, on the same random inputs.
//
// For each workload of a table (ResNet-18 conv2d layers at one batch and layout, or the GEMM
// table), it replays tmap's best record from a log (regenerated, compiled, run), then runs the
// baselines: for convolutions every cuDNN forward algorithm (legacy API), the fastest correct one
// kept; for GEMMs cublasLt's heuristic candidates and plain cublasGemmEx, the fastest correct one
// kept. Everything is timed by time_launches() (CUDA-graph replay of repeated runs, median of
// repeats), and again with the L2 flushed before each run (cold). Every output is compared with
// the reference kernel tmap generates from the IR, and the baselines' with tmap's own output.
// Writes a CSV and a Markdown table with the geometric-mean speedup.
#include <cstdlib>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "tmap/frontend/op_library.h"
#include "tmap/frontend/workload_table.h"
#include "tmap/runtime/device.h"
#include "tmap/runtime/kernel_runner.h"
#include "tmap/runtime/nvrtc_compiler.h"
#include "tmap/tune/tuner.h"

namespace {

using tmap::Compute;

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
void cudnn_ok(cudnnStatus_t s, const char* what) {
  if (s != CUDNN_STATUS_SUCCESS) throw std::runtime_error(std::string(what) + ": " + cudnnGetErrorString(s));
}
void cublas_ok(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string(what) + ": cuBLAS status " + std::to_string(s));
}

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

std::vector<double> read_half(const void* dev, std::size_t n) {
  std::vector<__half> h(n);
  cuda_ok(cudaMemcpy(h.data(), dev, n * sizeof(__half), cudaMemcpyDeviceToHost), "cudaMemcpy");
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = __half2float(h[i]);
  return out;
}
std::vector<double> read_float(const void* dev, std::size_t n) {
  std::vector<float> h(n);
  cuda_ok(cudaMemcpy(h.data(), dev, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
  return {h.begin(), h.end()};
}

/// A device output of the compute's output dtype (float16 or float32), as doubles.
std::vector<double> read_output(const void* dev, std::size_t n, bool half) {
  return half ? read_half(dev, n) : read_float(dev, n);
}

struct Timing {
  double warm_us = 0, cold_us = 0;
};

/// How everything in the benchmark is timed, tmap's kernels and the baselines alike: CUDA-graph
/// replays of `graph_runs` runs after 3 warm-up runs, until 10 repeats and 30 ms; cold: each run
/// after an L2 flush, the flushes' time subtracted.
tmap::TimingOptions bench_timing(int graph_runs, bool cold) {
  tmap::TimingOptions t;
  t.warmup = 3;
  t.min_repeats = 10;
  t.min_total_ms = 30;
  t.graph_runs = graph_runs;
  t.flush_l2 = cold;
  return t;
}

Timing time_both(const std::function<int(void*)>& launch, int graph_runs) {
  return {tmap::median_of(tmap::time_launches(launch, bench_timing(graph_runs, false))),
          tmap::median_of(tmap::time_launches(launch, bench_timing(graph_runs, true)))};
}

/// The fastest correct baseline of a workload.
struct Baseline {
  std::string name;  ///< e.g. "cudnn IMPLICIT_PRECOMP_GEMM", "cublasLt algo 3", "cublasGemmEx"
  Timing time;
  double err_ref = 0, err_tmap = 0;  ///< Relative L2 against the reference and tmap's output.
  int tried = 0, wrong = 0;
};

int param_of(const Compute& c, const std::string& name) {
  for (const auto& [n, v] : c.params)
    if (n == name) return static_cast<int>(v);
  throw std::runtime_error("the compute has no parameter " + name);
}

const char* algo_name(cudnnConvolutionFwdAlgo_t a) {
  switch (a) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return "IMPLICIT_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: return "IMPLICIT_PRECOMP_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return "GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return "DIRECT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return "FFT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return "FFT_TILING";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD: return "WINOGRAD";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED: return "WINOGRAD_NONFUSED";
    default: return "?";
  }
}

/// Checks one baseline's output `got` against the reference (1e-2 relative L2, as tmap's own
/// fp16 kernels) and tmap's output; a correct one is timed and kept when it is the fastest.
void offer(std::optional<Baseline>& best, const std::string& name, const std::vector<double>& got,
           const std::vector<double>& ref, const std::vector<double>& tmap_out, const std::function<int(void*)>& launch,
           int graph_runs, int& wrong) {
  Baseline b;
  b.name = name;
  b.err_ref = tmap::relative_l2(got, ref);
  b.err_tmap = tmap_out.empty() ? 0 : tmap::relative_l2(got, tmap_out);
  if (!(b.err_ref <= 1e-2)) {
    ++wrong;
    return;
  }
  b.time = time_both(launch, graph_runs);
  if (!best || b.time.warm_us < best->time.warm_us) best = b;
}

/// With TMAP_BENCH_TRACE set, each step of a row on stderr (to find what a slow row waits on).
void trace(const std::string& what) {
  static const bool on = std::getenv("TMAP_BENCH_TRACE") != nullptr;
  static const auto t0 = std::chrono::steady_clock::now();
  if (on)
    std::fprintf(stderr, "trace %8.3f s: %s\n",
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), what.c_str());
}

/// A convolution as cuDNN describes it: 2 or 3 spatial dimensions (a 1-D convolution is a 2-D one
/// of height 1), and whether tmap's tensors are channels-last.
struct ConvShape {
  int n = 1, c = 1, k = 1, groups = 1;
  std::vector<int> in, filter, pad, stride, dil;  ///< Per spatial dimension, outermost first.
  bool tmap_channels_last = false;
};

ConvShape conv_shape(const Compute& c, int rank, bool nhwc) {
  auto param = [&](const std::string& name) { return param_of(c, name); };
  ConvShape s;
  s.n = param("N"), s.c = param("C");
  // Depthwise: one filter per channel (K = C, groups = C, filters [C, 1, R, S] as tmap's [C, R, S]).
  const bool depthwise = c.name == "depthwise_conv2d";
  s.k = depthwise ? s.c : param("K");
  s.groups = depthwise ? s.c : rank == 2 ? param("groups") : 1;
  s.tmap_channels_last = nhwc;
  const int pad = param("pad"), stride = param("stride"), dil = param("dil");
  if (rank == 1) {  // height 1, no padding along it
    s.in = {1, param("W")}, s.filter = {1, param("S")};
    s.pad = {0, pad}, s.stride = {1, stride}, s.dil = {1, dil};
    return s;
  }
  s.in = rank == 3 ? std::vector<int>{param("D"), param("H"), param("W")} : std::vector<int>{param("H"), param("W")};
  s.filter = rank == 3 ? std::vector<int>{param("T"), param("R"), param("S")} : std::vector<int>{param("R"), param("S")};
  s.pad.assign(s.in.size(), pad), s.stride.assign(s.in.size(), stride), s.dil.assign(s.in.size(), dil);
  return s;
}

/// [outer][channels][inner] <-> [outer][inner][channels] (channels-first to channels-last, or back
/// with `to_last` false).
std::vector<double> move_channels(const std::vector<double>& v, std::size_t outer, std::size_t channels,
                                  std::size_t inner, bool to_last) {
  std::vector<double> out(v.size());
  for (std::size_t o = 0; o < outer; ++o)
    for (std::size_t ch = 0; ch < channels; ++ch)
      for (std::size_t i = 0; i < inner; ++i) {
        const std::size_t first = (o * channels + ch) * inner + i, last = (o * inner + i) * channels + ch;
        if (to_last) out[last] = v[first];
        else out[first] = v[last];
      }
  return out;
}

std::size_t product(const std::vector<int>& v) {
  std::size_t p = 1;
  for (int x : v) p *= static_cast<std::size_t>(x);
  return p;
}

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
std::vector<std::int64_t> strides_of(const std::vector<int>& dims, bool channels_last) {
  const std::size_t nb = dims.size();
  std::vector<std::int64_t> st(nb);
  if (!channels_last) {
    std::int64_t s = 1;
    for (std::size_t i = nb; i-- > 0;) st[i] = s, s *= dims[i];
    return st;
  }
  std::int64_t s = 1;
  st[1] = s, s *= dims[1];
  for (std::size_t i = nb; i-- > 2;) st[i] = s, s *= dims[i];
  st[0] = s;
  return st;
}

BackendDesc backend_tensor(std::int64_t uid, const std::vector<int>& dims, bool channels_last, cudnnDataType_t type) {
  BackendDesc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  std::vector<std::int64_t> d(dims.begin(), dims.end()), st = strides_of(dims, channels_last);
  const std::int64_t align = 16;
  cudnn_ok(t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &type), "tensor dtype");
  cudnn_ok(t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, d.data(), static_cast<std::int64_t>(d.size())), "dims");
  cudnn_ok(t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, st.data(), static_cast<std::int64_t>(st.size())), "strides");
  cudnn_ok(t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &uid), "uid");
  cudnn_ok(t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &align), "alignment");
  cudnn_ok(t.finalize(), "tensor finalize");
  return t;
}

/// cuDNN 9's engines through the backend (graph) API, as frameworks drive it: the engine configs
/// of heuristic modes A and B (tuned knobs), then every engine of the operation graph with its
/// default knobs. Each config that builds a plan is run once, checked and, when correct, timed;
/// the fastest correct one competes with the legacy algorithms in `best`.
void cudnn_backend_engines(cudnnHandle_t h, const ConvShape& shape, bool channels_last, const std::vector<int>& ydims,
                           bool half_out, const void* in, const void* filter, void* out, std::size_t out_bytes,
                           const std::function<std::vector<double>()>& output, const std::vector<double>& ref,
                           const std::vector<double>& tmap_out, int graph_runs, std::optional<Baseline>& best,
                           int& tried, int& wrong) {
  std::vector<int> xdims = {shape.n, shape.c}, wdims = {shape.k, shape.c / shape.groups};
  xdims.insert(xdims.end(), shape.in.begin(), shape.in.end());
  wdims.insert(wdims.end(), shape.filter.begin(), shape.filter.end());
  BackendDesc x = backend_tensor('x', xdims, channels_last, CUDNN_DATA_HALF);
  BackendDesc w = backend_tensor('w', wdims, channels_last, CUDNN_DATA_HALF);
  BackendDesc y = backend_tensor('y', ydims, channels_last, half_out ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT);
  BackendDesc conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const std::int64_t spatial = static_cast<std::int64_t>(shape.in.size());
  std::vector<std::int64_t> pad(shape.pad.begin(), shape.pad.end()), stride(shape.stride.begin(), shape.stride.end()),
      dil(shape.dil.begin(), shape.dil.end());
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnn_ok(conv.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &comp), "conv comp type");
  cudnn_ok(conv.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, &mode), "conv mode");
  cudnn_ok(conv.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, &spatial), "conv dims");
  cudnn_ok(conv.set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, pad.data(), spatial), "pre pad");
  cudnn_ok(conv.set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, pad.data(), spatial), "post pad");
  cudnn_ok(conv.set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, stride.data(), spatial), "strides");
  cudnn_ok(conv.set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, dil.data(), spatial), "dilations");
  cudnn_ok(conv.finalize(), "conv finalize");
  BackendDesc op(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  const float alpha = 1, beta = 0;
  cudnnBackendDescriptor_t xd = x.get(), wd = w.get(), yd = y.get(), cd = conv.get();
  cudnn_ok(op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, &xd), "op x");
  cudnn_ok(op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, &wd), "op w");
  cudnn_ok(op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, &yd), "op y");
  cudnn_ok(op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &cd), "op conv");
  cudnn_ok(op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, &alpha), "op alpha");
  cudnn_ok(op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, &beta), "op beta");
  if (op.finalize() != CUDNN_STATUS_SUCCESS) return;  // this convolution has no backend operation
  BackendDesc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  cudnnBackendDescriptor_t opd = op.get();
  cudnn_ok(graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, &opd), "graph ops");
  // The handle attributes are deprecated in cuDNN 9 but still what a plan is built against.
  const auto graph_handle = static_cast<cudnnBackendAttributeName_t>(800);  // CUDNN_ATTR_OPERATIONGRAPH_HANDLE
  const auto plan_handle = static_cast<cudnnBackendAttributeName_t>(400);   // CUDNN_ATTR_EXECUTION_PLAN_HANDLE
  cudnn_ok(graph.set(graph_handle, CUDNN_TYPE_HANDLE, &h), "graph handle");
  if (graph.finalize() != CUDNN_STATUS_SUCCESS) return;
  cudnnBackendDescriptor_t gd = graph.get();

  // The configs to try, each with a label.
  std::vector<std::pair<std::string, BackendDesc>> configs;
  auto engine_index = [](cudnnBackendDescriptor_t cfg) {
    BackendDesc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    cudnnBackendDescriptor_t e = engine.get();
    std::int64_t n = 0, index = -1;
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e) ==
        CUDNN_STATUS_SUCCESS)
      cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index);
    return index;
  };
  for (const auto& [heur_mode, heur_name] :
       {std::pair<cudnnBackendHeurMode_t, const char*>{CUDNN_HEUR_MODE_A, "heur A"}, {CUDNN_HEUR_MODE_B, "heur B"}}) {
    BackendDesc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    cudnn_ok(heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, &gd), "heur graph");
    cudnn_ok(heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &heur_mode), "heur mode");
    if (heur.finalize() != CUDNN_STATUS_SUCCESS) continue;
    std::int64_t count = 0;
    if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                 nullptr) != CUDNN_STATUS_SUCCESS)
      continue;
    count = std::min<std::int64_t>(count, 16);
    std::vector<BackendDesc> owned;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (std::int64_t i = 0; i < count; ++i) {
      owned.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
      raw.push_back(owned.back().get());
    }
    std::int64_t got = 0;
    if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                                 raw.data()) != CUDNN_STATUS_SUCCESS)
      continue;
    for (std::int64_t i = 0; i < got; ++i) {
      const std::int64_t index = engine_index(raw[i]);
      configs.emplace_back("cudnn9 engine " + std::to_string(index) + " (" + heur_name + " #" + std::to_string(i) + ")",
                           std::move(owned[i]));
    }
  }
  std::int64_t engines = 0, n = 0;
  cudnnBackendGetAttribute(gd, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, 1, &n, &engines);
  for (std::int64_t e = 0; e < engines; ++e) {
    BackendDesc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    cudnn_ok(engine.set(CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, &gd), "engine graph");
    cudnn_ok(engine.set(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, &e), "engine index");
    if (engine.finalize() != CUDNN_STATUS_SUCCESS) continue;  // not for this graph
    // Engines compiled at run time take seconds each to build per shape; the heuristics above
    // still offer them where cuDNN expects them to win.
    cudnnBackendBehaviorNote_t notes[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
    std::int64_t note_count = 0;
    cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                             CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &note_count, notes);
    if (std::find(notes, notes + note_count, CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) != notes + note_count) continue;
    BackendDesc cfg(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    cudnnBackendDescriptor_t ed = engine.get();
    cudnn_ok(cfg.set(CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, &ed), "cfg engine");
    if (cfg.finalize() != CUDNN_STATUS_SUCCESS) continue;
    configs.emplace_back("cudnn9 engine " + std::to_string(e) + " (all engines)", std::move(cfg));
  }

  // Build every config's plan; screen them by a quick timing (the minimum of 3 event-timed runs),
  // then check and fully time the fastest until 3 correct ones are found: timing each of ~100
  // engines the full way would take minutes per row.
  struct Ready {
    std::string label;
    std::unique_ptr<BackendDesc> plan, pack;
    std::unique_ptr<Buffer> scratch;
    float quick_ms = 0;
  };
  std::vector<Ready> ready;
  std::int64_t uids[3] = {'x', 'w', 'y'};
  cudaEvent_t e0, e1;
  cuda_ok(cudaEventCreate(&e0), "event");
  cuda_ok(cudaEventCreate(&e1), "event");
  for (auto& [label, cfg] : configs) {
    Ready r;
    r.label = label;
    r.plan = std::make_unique<BackendDesc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    cudnnBackendDescriptor_t cfgd = cfg.get();
    cudnn_ok(r.plan->set(plan_handle, CUDNN_TYPE_HANDLE, &h), "plan handle");
    cudnn_ok(r.plan->set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, &cfgd), "plan cfg");
    trace(label + " plan");
    if (r.plan->finalize() != CUDNN_STATUS_SUCCESS) continue;
    std::int64_t ws_bytes = 0;
    cudnnBackendGetAttribute(r.plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws_bytes);
    if (ws_bytes > (std::int64_t{4} << 30)) continue;
    r.scratch = std::make_unique<Buffer>(static_cast<std::size_t>(ws_bytes));
    void* ptrs[3] = {const_cast<void*>(in), const_cast<void*>(filter), out};
    r.pack = std::make_unique<BackendDesc>(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    cudnn_ok(r.pack->set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids, 3), "pack uids");
    cudnn_ok(r.pack->set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, ptrs, 3), "pack pointers");
    void* scratch_p = r.scratch->p;
    cudnn_ok(r.pack->set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &scratch_p), "pack workspace");
    if (r.pack->finalize() != CUDNN_STATUS_SUCCESS) continue;
    cudnnSetStream(h, nullptr);
    trace(label + " quick timing");
    cudaEventRecord(e0);
    bool ok = cudnnBackendExecute(h, r.plan->get(), r.pack->get()) == CUDNN_STATUS_SUCCESS;  // warm-up
    cudaEventRecord(e1);
    float first_ms = 0;
    ok = ok && cudaEventSynchronize(e1) == cudaSuccess && cudaEventElapsedTime(&first_ms, e0, e1) == cudaSuccess;
    r.quick_ms = first_ms;
    // Far slower than the best so far even cold: one run tells enough.
    const float best_ms = ready.empty() ? 1e30f : std::min_element(ready.begin(), ready.end(), [](const Ready& a, const Ready& b) {
                                                   return a.quick_ms < b.quick_ms;
                                                 })->quick_ms;
    for (int i = 0; ok && i < 3 && first_ms < 10 * best_ms; ++i) {
      cudaEventRecord(e0);
      ok = cudnnBackendExecute(h, r.plan->get(), r.pack->get()) == CUDNN_STATUS_SUCCESS;
      cudaEventRecord(e1);
      float ms = 0;
      ok = ok && cudaEventSynchronize(e1) == cudaSuccess && cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess;
      r.quick_ms = std::min(r.quick_ms, ms);
    }
    if (!ok) {
      cudaGetLastError();
      continue;
    }
    ready.push_back(std::move(r));
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(ready.begin(), ready.end(), [](const Ready& a, const Ready& b) { return a.quick_ms < b.quick_ms; });
  tried += static_cast<int>(ready.size());
  int correct = 0;
  for (const Ready& r : ready) {
    if (correct == 3) break;
    auto launch = [&](void* stream) {
      cudnnSetStream(h, static_cast<cudaStream_t>(stream));
      return cudnnBackendExecute(h, r.plan->get(), r.pack->get()) == CUDNN_STATUS_SUCCESS
                 ? 0
                 : static_cast<int>(cudaErrorUnknown);
    };
    cuda_ok(cudaMemset(out, 0xFF, out_bytes), "poison");
    trace(r.label + " run");
    if (launch(nullptr) != 0 || cudaDeviceSynchronize() != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    const int wrong_before = wrong;
    offer(best, r.label + (channels_last ? " (nhwc)" : " (nchw)"), output(), ref, tmap_out, launch, graph_runs, wrong);
    correct += wrong == wrong_before;
  }
}

/// Every cuDNN forward algorithm (fp16 in, fp32 accumulation, the compute's output dtype out: fp16
/// is PSEUDO_HALF_CONFIG) in channels-first (NCHW/KCRS, NCDHW/KCTRS) or channels-last layout. When
/// that is not tmap's layout, cuDNN gets the same values transposed, and its output is transposed
/// back to be checked.
std::optional<Baseline> cudnn_baseline(const Compute& c, tmap::Workspace& ws, const std::vector<double>& ref,
                                       const std::vector<double>& tmap_out, const ConvShape& shape,
                                       bool channels_last, int graph_runs) {
  const cudnnTensorFormat_t fmt = channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  const int nb = 2 + static_cast<int>(shape.in.size()), spatial = nb - 2;
  cudnnHandle_t h;
  cudnn_ok(cudnnCreate(&h), "cudnnCreate");
  std::unique_ptr<cudnnContext, decltype(&cudnnDestroy)> h_owner(h, &cudnnDestroy);
  cudnnTensorDescriptor_t x, y;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
  cudnn_ok(cudnnCreateTensorDescriptor(&x), "x");
  cudnn_ok(cudnnCreateTensorDescriptor(&y), "y");
  cudnn_ok(cudnnCreateFilterDescriptor(&w), "w");
  cudnn_ok(cudnnCreateConvolutionDescriptor(&conv), "conv");
  std::vector<int> xdims = {shape.n, shape.c}, wdims = {shape.k, shape.c / shape.groups};
  xdims.insert(xdims.end(), shape.in.begin(), shape.in.end());
  wdims.insert(wdims.end(), shape.filter.begin(), shape.filter.end());
  cudnn_ok(cudnnSetTensorNdDescriptorEx(x, fmt, CUDNN_DATA_HALF, nb, xdims.data()), "x");
  cudnn_ok(cudnnSetFilterNdDescriptor(w, CUDNN_DATA_HALF, fmt, nb, wdims.data()), "w");
  cudnn_ok(cudnnSetConvolutionNdDescriptor(conv, spatial, shape.pad.data(), shape.stride.data(), shape.dil.data(),
                                           CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
           "conv");
  cudnn_ok(cudnnSetConvolutionMathType(conv, CUDNN_TENSOR_OP_MATH), "math type");
  cudnn_ok(cudnnSetConvolutionGroupCount(conv, shape.groups), "group count");
  std::vector<int> ydims(nb);
  cudnn_ok(cudnnGetConvolutionNdForwardOutputDim(conv, x, w, nb, ydims.data()), "output dims");
  const bool half_out = c.tensor_of(c.output).dtype == tmap::DType::kFloat16;
  const std::size_t out_bytes = half_out ? sizeof(__half) : sizeof(float);
  cudnn_ok(cudnnSetTensorNdDescriptorEx(y, fmt, half_out ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT, nb, ydims.data()), "y");
  const std::size_t out_elems = product(ydims), out_inner = out_elems / ydims[0] / ydims[1];
  if (out_elems != ref.size()) throw std::runtime_error("cuDNN's output size differs from the compute's");
  Buffer out(out_elems * out_bytes);
  // The inputs in cuDNN's layout: tmap's own buffers, or transposed copies of their values.
  const bool transpose = channels_last != shape.tmap_channels_last;
  std::unique_ptr<Buffer> in_copy, filter_copy;
  auto upload = [&](int tensor, std::size_t outer, std::size_t channels, std::size_t inner) {
    const std::vector<double> v =
        move_channels(ws.host_values()[tensor], outer, channels, inner, channels_last);
    std::vector<__half> h(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) h[i] = __float2half(static_cast<float>(v[i]));
    auto b = std::make_unique<Buffer>(h.size() * sizeof(__half));
    cuda_ok(cudaMemcpy(b->p, h.data(), h.size() * sizeof(__half), cudaMemcpyHostToDevice), "upload");
    return b;
  };
  if (transpose) {
    in_copy = upload(c.inputs[0].tensor, shape.n, shape.c, product(shape.in));
    filter_copy = upload(c.inputs[1].tensor, shape.k, shape.c / shape.groups, product(shape.filter));
  }
  const void* in = transpose ? in_copy->p : ws.device(c.inputs[0].tensor);
  const void* filter = transpose ? filter_copy->p : ws.device(c.inputs[1].tensor);
  auto output = [&] {
    std::vector<double> got = read_output(out.p, out_elems, half_out);
    // Back into tmap's layout, to compare (channels-first to -last when tmap is channels-last).
    return transpose ? move_channels(got, ydims[0], ydims[1], out_inner, shape.tmap_channels_last) : got;
  };
  const float alpha = 1, beta = 0;
  std::optional<Baseline> best;
  int tried = 0, wrong = 0;
  for (int a = 0; a < CUDNN_CONVOLUTION_FWD_ALGO_COUNT; ++a) {
    const auto algo = static_cast<cudnnConvolutionFwdAlgo_t>(a);
    // cuDNN runs its FFT algorithms group by group: on a depthwise layer (mbv2_dw2, 192 groups)
    // FFT_TILING did not finish in 40 s. They never win on grouped convolutions; skip them there.
    if (shape.groups > 1 && (algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT || algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING))
      continue;
    std::size_t ws_bytes = 0;
    if (cudnnGetConvolutionForwardWorkspaceSize(h, x, w, conv, y, algo, &ws_bytes) != CUDNN_STATUS_SUCCESS) continue;
    Buffer scratch(ws_bytes);
    auto launch = [&](void* stream) {
      cudnnSetStream(h, static_cast<cudaStream_t>(stream));
      return cudnnConvolutionForward(h, &alpha, x, in, w, filter, conv, algo, scratch.p, ws_bytes, &beta, y, out.p) ==
                     CUDNN_STATUS_SUCCESS
                 ? 0
                 : static_cast<int>(cudaErrorUnknown);
    };
    cuda_ok(cudaMemset(out.p, 0xFF, out_elems * out_bytes), "poison");
    trace(std::string("cuDNN ") + algo_name(algo) + (channels_last ? " nhwc" : " nchw"));
    if (launch(nullptr) != 0) continue;  // not supported for this configuration
    cuda_ok(cudaDeviceSynchronize(), "cuDNN");
    ++tried;
    offer(best, std::string("cudnn ") + algo_name(algo) + (channels_last ? " (nhwc)" : " (nchw)"), output(), ref,
          tmap_out, launch, graph_runs, wrong);
  }
  // cuDNN 9's engines (the graph API frameworks use): the strongest baseline is the fastest of both.
  cudnn_backend_engines(h, shape, channels_last, ydims, half_out, in, filter, out.p, out_elems * out_bytes, output, ref,
                        tmap_out, graph_runs, best, tried, wrong);
  if (best) best->tried = tried, best->wrong = wrong;
  cudnnDestroyTensorDescriptor(x);
  cudnnDestroyTensorDescriptor(y);
  cudnnDestroyFilterDescriptor(w);
  cudnnDestroyConvolutionDescriptor(conv);
  return best;
}

/// cublasLt's heuristic candidates and cublasGemmEx for C[M,N] = A[M,K] * B[K,N] (fp16, row-major;
/// fp32 accumulation, C of the compute's output dtype): in cuBLAS's column-major terms C^T = B^T A^T.
std::optional<Baseline> cublas_baseline(const Compute& c, tmap::Workspace& ws, const std::vector<double>& ref,
                                        const std::vector<double>& tmap_out, int graph_runs) {
  auto param = [&](const std::string& name) { return param_of(c, name); };
  // The op (c.name) says how A and B are stored: gemm_tn / gemm_tt keep A as [K, M], gemm_nt /
  // gemm_tt keep B as [N, K]; batched_gemm has BATCH such products, gemv is N = 1.
  const std::string& opname = c.name;
  const bool ta = opname == "gemm_tn" || opname == "gemm_tt", tb = opname == "gemm_nt" || opname == "gemm_tt";
  const int batch = opname == "batched_gemm" ? param("BATCH") : 1;
  const int M = param("M"), N = opname == "gemv" ? 1 : param("N"), K = param("K");
  const void* A = ws.device(c.inputs[0].tensor);
  const void* B = ws.device(c.inputs[1].tensor);
  const std::size_t out_elems = static_cast<std::size_t>(M) * N * batch;
  const bool half_out = c.tensor_of(c.output).dtype == tmap::DType::kFloat16;
  const cudaDataType_t out_type = half_out ? CUDA_R_16F : CUDA_R_32F;
  const std::size_t out_bytes = half_out ? sizeof(__half) : sizeof(float);
  Buffer out(out_elems * out_bytes);
  const std::size_t ws_bytes = 32u << 20;
  Buffer scratch(ws_bytes);
  const float alpha = 1, beta = 0;
  std::optional<Baseline> best;
  int tried = 0, wrong = 0;
  auto consider = [&](const std::string& name, const std::function<int(void*)>& launch) {
    cuda_ok(cudaMemset(out.p, 0xFF, out_elems * out_bytes), "poison");
    if (launch(nullptr) != 0) return;
    cuda_ok(cudaDeviceSynchronize(), name.c_str());
    ++tried;
    offer(best, name, read_output(out.p, out_elems, half_out), ref, tmap_out, launch, graph_runs, wrong);
  };

  cublasHandle_t blas;
  cublas_ok(cublasCreate(&blas), "cublasCreate");
  std::unique_ptr<cublasContext, decltype(&cublasDestroy)> blas_owner(blas, &cublasDestroy);
  cublas_ok(cublasSetWorkspace(blas, scratch.p, ws_bytes), "cublasSetWorkspace");
  if (opname != "gemm") {  // row-major C = op(A) op(B) as column-major C^T = op(B)^T op(A)^T
    consider("cublasGemmStridedBatchedEx", [&](void* stream) {
      cublasSetStream(blas, static_cast<cudaStream_t>(stream));
      return cublasGemmStridedBatchedEx(blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K,
                                        &alpha, B, CUDA_R_16F, tb ? K : N, static_cast<long long>(K) * N, A, CUDA_R_16F,
                                        ta ? M : K, static_cast<long long>(M) * K, &beta, out.p, out_type, N,
                                        static_cast<long long>(M) * N, batch, CUBLAS_COMPUTE_32F,
                                        CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS
                 ? 0
                 : static_cast<int>(cudaErrorUnknown);
    });
    if (best) best->tried = tried, best->wrong = wrong;
    return best;
  }
  consider("cublasGemmEx", [&](void* stream) {
    cublasSetStream(blas, static_cast<cudaStream_t>(stream));
    return cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha, B, CUDA_R_16F, N, A, CUDA_R_16F, K, &beta,
                        out.p, out_type, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS
               ? 0
               : static_cast<int>(cudaErrorUnknown);
  });

  cublasLtHandle_t lt;
  cublas_ok(cublasLtCreate(&lt), "cublasLtCreate");
  std::unique_ptr<cublasLtContext, decltype(&cublasLtDestroy)> lt_owner(lt, &cublasLtDestroy);
  cublasLtMatmulDesc_t op;
  cublas_ok(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
  cublasLtMatrixLayout_t la, lb, lc;
  cublas_ok(cublasLtMatrixLayoutCreate(&la, CUDA_R_16F, N, K, N), "layout");  // B^T: N x K
  cublas_ok(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16F, K, M, K), "layout");  // A^T: K x M
  cublas_ok(cublasLtMatrixLayoutCreate(&lc, out_type, N, M, N), "layout");  // C^T: N x M
  cublasLtMatmulPreference_t pref;
  cublas_ok(cublasLtMatmulPreferenceCreate(&pref), "preference");
  cublas_ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                 sizeof ws_bytes),
            "preference");
  cublasLtMatmulHeuristicResult_t results[8];
  int found = 0;
  cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 8, results, &found);
  for (int i = 0; i < found; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
    consider("cublasLt heuristic #" + std::to_string(i), [&, i](void* stream) {
      return cublasLtMatmul(lt, op, &alpha, B, la, A, lb, &beta, out.p, lc, out.p, lc, &results[i].algo, scratch.p,
                            ws_bytes, static_cast<cudaStream_t>(stream)) == CUBLAS_STATUS_SUCCESS
                 ? 0
                 : static_cast<int>(cudaErrorUnknown);
    });
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
  if (best) best->tried = tried, best->wrong = wrong;
  return best;
}

bool is_conv_op(const std::string& op) { return op.rfind("conv", 0) == 0 || op == "depthwise_conv2d"; }

/// The compute of built-in `op` with `sets`, its output stored as `out_dtype`.
Compute build_workload(const std::string& op, const std::vector<std::string>& sets, const std::string& out_dtype) {
  tmap::ComputeDef def = tmap::builtin_op(op);
  const auto dtype = tmap::parse_dtype(out_dtype);
  if (!dtype) throw std::runtime_error("unknown --out-dtype " + out_dtype);
  tmap::set_output_dtype(def, *dtype, tmap::SourceLoc::whole("--out-dtype"));
  return tmap::build_compute(def, tmap::parse_param_overrides(sets));
}

/// The record whose kernel the benchmark replays for `c`: the fastest measured among the best of
/// its own workload and the best of the same computation stored in another output dtype (the
/// schedule carries over; only the epilogue's conversion differs), the latter flagged in
/// `transferred`. A short tuning run of one dtype so cannot hide a better schedule of the other.
const tmap::TuneRecord* find_record(const std::vector<const tmap::TuneRecord*>& best, const Compute& c,
                                    bool& transferred) {
  const std::string key = tmap::make_workload(c).key;
  const tmap::TuneRecord* chosen = nullptr;
  transferred = false;
  for (const auto* r : best) {
    bool other_dtype = false;
    if (r->workload.key != key) {
      Compute other = tmap::compute_from_json(r->workload.compute, "log record");
      if (other.tensors.size() != c.tensors.size()) continue;
      other.tensors[other.output.tensor].dtype = c.tensor_of(c.output).dtype;
      other.accumulate = c.accumulate;
      if (tmap::make_workload(other).key != key) continue;
      other_dtype = true;
    }
    if (!chosen || r->result.median_us < chosen->result.median_us) {
      chosen = r;
      transferred = other_dtype;
    }
  }
  return chosen;
}

/// Device-to-device copy bandwidth in GB/s (bytes read plus bytes written) of a 256 MiB
/// cudaMemcpy: the best of 10 timed with events after 3 warm-ups. The ceiling of memory-bound kernels.
double copy_bandwidth_gbs() {
  const std::size_t bytes = std::size_t{256} << 20;
  Buffer a(bytes), b(bytes);
  cudaEvent_t start, stop;
  cuda_ok(cudaEventCreate(&start), "event");
  cuda_ok(cudaEventCreate(&stop), "event");
  float best_ms = 1e30f;
  for (int i = 0; i < 13; ++i) {
    cuda_ok(cudaEventRecord(start), "record");
    cuda_ok(cudaMemcpy(b.p, a.p, bytes, cudaMemcpyDeviceToDevice), "copy");
    cuda_ok(cudaEventRecord(stop), "record");
    cuda_ok(cudaEventSynchronize(stop), "sync");
    float ms = 0;
    cuda_ok(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    if (i >= 3) best_ms = std::min(best_ms, ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return 2.0 * bytes / (best_ms * 1e-3) / 1e9;
}

struct Row {
  int count = 1;  ///< Runs per inference (workload tables).
  std::string name, workload_key;
  double gflop = 0;
  double bytes = 0;  ///< Every tensor read or written once: the least traffic of any kernel.
  std::optional<Timing> tmap;
  double tmap_err = 0;
  std::optional<Baseline> baseline;
  std::optional<Baseline> other;  ///< Convolutions: cuDNN in the other layout.
  std::string note;

  /// The faster of the two layouts' baselines.
  const std::optional<Baseline>& fastest() const {
    return other && (!baseline || other->time.warm_us < baseline->time.warm_us) ? other : baseline;
  }
};

/// Today's date in UTC, as YYYY-MM-DD.
std::string utc_date() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

std::string fixed(double v, int digits = 2) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tmap_bench: tmap's tuned kernels against cuDNN and cuBLAS, measured the same way"};
  std::string table_path, log_path, layout = "nhwc", csv_path, md_path, only, out_dtype = "float16", commit;
  int batch = 1, graph_runs = 20;
  double peak_tflops = 989.4;
  app.add_option("--table", table_path,
                 "benchmarks/workloads/resnet18_conv2d.json, conv1d.json, conv3d.json or gemm.json")
      ->required();
  app.add_option("--batch", batch, "Batch of the convolution table (see its \"batches\")");
  app.add_option("--layout", layout,
                 "nchw (channels first: NCW, NCHW, NCDHW) or nhwc (channels last; conv2d only) for tmap's kernels "
                 "and the first baseline; cuDNN also runs in the other layout")
      ->check(CLI::IsMember({"nchw", "nhwc"}));
  app.add_option("--log", log_path, "Tuning log with tmap's records")->required();
  app.add_option("--csv", csv_path, "Write the results as CSV");
  app.add_option("--md", md_path, "Write the results as a Markdown table");
  app.add_option("--only", only, "Only the workload of this name");
  app.add_option("--out-dtype", out_dtype,
                 "Output dtype of tmap and the baselines alike, sums in float32 (default float16, as cuDNN and "
                 "cuBLAS users run them)")
      ->check(CLI::IsMember({"float16", "float32"}));
  app.add_option("--graph", graph_runs, "Runs per CUDA graph replay (default 20)");
  bool print_workloads = false;
  app.add_flag("--print-workloads", print_workloads,
               "Print each workload as 'name key op --set ...' (for run.sh) and exit; no GPU needed. The key is "
               "that of the log record the benchmark would replay, when there is one");
  app.add_option("--commit", commit, "The tmap commit being measured, for the table's header (run.sh passes git's)");
  app.add_option("--peak", peak_tflops, "The GPU's dense fp16 peak in TFLOP/s, for '% of peak' (H100 SXM: 989.4)");
  CLI11_PARSE(app, argc, argv);
  const bool table_out_dtype_given = app.get_option("--out-dtype")->count() > 0;
  try {
    std::ifstream in(table_path);
    if (!in) {
      std::cerr << "tmap_bench: error: cannot read table '" << table_path << "'\n";
      return 2;
    }
    const nlohmann::json table = nlohmann::json::parse(in);
    // A workload table (tmap import): any mix of ops, each against cuDNN or cuBLAS by its kind,
    // with the model's weighted total (count x time) at the end.
    const bool workloads_table = table.contains("workloads");
    std::optional<tmap::WorkloadTable> model;
    if (workloads_table) model = tmap::load_workload_table(table_path);
    const bool conv = table.contains("layers");
    // Spatial dimensions of a convolution table, from its fields.
    int rank = 0;
    if (conv) {
      const auto& f = table.at("fields");
      auto has = [&](const char* key) { return std::find(f.begin(), f.end(), key) != f.end(); };
      rank = has("D") ? 3 : has("H") ? 2 : 1;
    }
    if (conv && rank != 2 && layout == "nhwc") {
      std::cerr << "tmap_bench: error: --layout nhwc: tmap has no channels-last conv" << rank
                << "d op; the table compares tmap's channels-first kernels with cuDNN in both layouts\n"
                << "  hint: use --layout nchw\n";
      return 2;
    }
    const bool depthwise = conv && std::find(table["fields"].begin(), table["fields"].end(), "K") == table["fields"].end();
    if (depthwise && layout == "nhwc") {
      std::cerr << "tmap_bench: error: --layout nhwc: tmap's depthwise_conv2d is channels-first\n  hint: use --layout nchw\n";
      return 2;
    }
    const std::string conv_op = depthwise ? "depthwise_conv2d" : rank == 1 ? "conv1d" : rank == 3 ? "conv3d"
                                : layout == "nhwc" ? "conv2d_nhwc" : "conv2d";
    // Memory-bound tables (their description asks for GB/s): achieved bandwidth beside the times,
    // against the device-to-device copy bandwidth measured in this run.
    const bool bandwidth = table.value("description", std::string()).find("GB/s") != std::string::npos;
    const std::string layout_name = rank == 1 ? "ncw" : rank == 3 ? "ncdhw" : layout;
    // Each workload of the table as the op and parameters tmap builds it from.
    struct Entry {
      std::string name, op;
      std::vector<std::string> sets;
      int count = 1;
    };
    std::vector<Entry> entries;
    if (model) {
      if (!table_out_dtype_given) out_dtype = model->out_dtype;
      for (const auto& w : model->workloads) {
        if (!only.empty() && w.name != only) continue;
        if (!w.epilogue.empty()) {
          // Timing a fused kernel against an unfused baseline would compare different work.
          std::cerr << "tmap_bench: error: workload '" << w.name << "' has a fused epilogue (" << w.epilogue
                    << "); fused baselines are not measured yet\n  hint: import the model with --no-fuse for this benchmark\n";
          return 2;
        }
        Entry e{w.name, w.op, {}, w.count};
        for (const auto& [k, v] : w.params) e.sets.push_back(k + "=" + std::to_string(v));
        entries.push_back(e);
      }
    }
    for (const auto& entry : model ? nlohmann::json::array() : conv ? table["layers"] : table["shapes"]) {
      Entry e{entry["name"], conv ? conv_op : "gemm", {}};
      if (!only.empty() && e.name != only) continue;
      if (conv) {
        e.sets.push_back("N=" + std::to_string(batch));
        for (const auto& field : table["fields"]) {
          const std::string key = field;
          if (key == "dilation") continue;
          e.sets.push_back(key + "=" + std::to_string(entry.at(key).get<int>()));
        }
        e.sets.push_back("dil=" + std::to_string(entry.value("dilation", 1)));
      } else {
        for (const char* key : {"M", "N", "K"}) e.sets.push_back(std::string(key) + "=" + std::to_string(entry[key].get<int>()));
      }
      entries.push_back(e);
    }
    if (print_workloads) {
      const tmap::LogContents log = tmap::read_log(log_path);
      const auto best = tmap::best_records(log.records);
      for (const auto& e : entries) {
        Compute c = build_workload(e.op, e.sets, out_dtype);
        bool transferred = false;
        const tmap::TuneRecord* record = find_record(best, c, transferred);
        std::cout << e.name << " " << (record ? record->workload.key : tmap::make_workload(c).key) << " " << e.op;
        for (const auto& s : e.sets) std::cout << " --set " << s;
        std::cout << "\n";
      }
      return 0;
    }
    const tmap::RuntimeInfo rt = tmap::query_runtime();
    if (rt.devices.empty()) {
      std::cerr << "tmap_bench: error: no GPU: " << rt.status << "\n  hint: run it on the GPU machine\n";
      return 2;
    }
    const int cc = rt.devices.front().compute_capability;
    const double copy_gbs = bandwidth ? copy_bandwidth_gbs() : 0;
    const std::vector<tmap::HwAbstraction> hws = tmap::load_hw_abstractions();
    tmap::LogContents log = tmap::read_log(log_path);
    for (const auto& w : log.warnings) std::cerr << "warning: " << w << "\n";
    const auto best = tmap::best_records(log.records);
    tmap::NvrtcCompiler compiler(cc);

    std::vector<Row> rows;
    for (const Entry& e : entries) {
      const std::string& name = e.name;
      Compute c = build_workload(e.op, e.sets, out_dtype);
      Row row;
      row.name = name;
      row.workload_key = tmap::make_workload(c).key;
      row.gflop = 2.0 * c.iteration_points() / 1e9;
      for (const auto& t : c.tensors) row.bytes += static_cast<double>(t.num_elements()) * tmap::dtype_bits(t.dtype) / 8;
      trace(name + ": reference");
      tmap::Workspace ws(c, 2024);
      const std::vector<double> ref = tmap::gpu_reference(ws, compiler);
      trace(name + ": tmap's kernel");
      std::vector<double> tmap_out;
      bool transferred = false;
      const tmap::TuneRecord* record = find_record(best, c, transferred);
      if (record) {
        tmap::TuneRecord adapted = *record;
        adapted.workload.compute = tmap::to_json(c);  // same mapping and schedule, this output dtype
        tmap::Regenerated g = tmap::regenerate(adapted, hws, cc);
        tmap::CompileResult bin = compiler.compile(g.kernel.code, g.kernel.name);
        if (!bin.ok) throw std::runtime_error("regenerated kernel does not compile:\n" + bin.log);
        const int a = c.inputs[g.gemm().a_input].tensor, b = c.inputs[g.gemm().b_input].tensor;
        tmap::KernelRun run = tmap::run_candidate(ws, ref, a, b, g.kernel, bin.cubin, bench_timing(graph_runs, false));
        if (!run.ok) throw std::runtime_error("tmap's kernel failed: " + run.error);
        tmap_out = ws.read_output();
        tmap::KernelRun cold_run = tmap::run_candidate(ws, {}, a, b, g.kernel, bin.cubin, bench_timing(graph_runs, true));
        if (!cold_run.ok) throw std::runtime_error("tmap's kernel failed when timed cold: " + cold_run.error);
        row.tmap = Timing{run.median_us, cold_run.median_us};
        row.tmap_err = run.rel_l2;
        if (run.rel_l2 > 1e-2) row.note = "tmap's kernel is WRONG";
        if (transferred) row.note += std::string(row.note.empty() ? "" : "; ") + "schedule tuned for another output dtype";
      } else {
        row.note = "not in the log (tune it first)";
      }
      trace(name + ": baselines");
      row.count = e.count;
      const bool conv_row = model ? is_conv_op(e.op) : conv;
      if (conv_row) {
        const int row_rank = model ? (e.op == "conv1d" ? 1 : e.op == "conv3d" ? 3 : 2) : rank;
        const bool nhwc = model ? e.op == "conv2d_nhwc" : layout == "nhwc";
        const ConvShape shape = conv_shape(c, row_rank, nhwc);
        row.baseline = cudnn_baseline(c, ws, ref, tmap_out, shape, nhwc, graph_runs);
        row.other = cudnn_baseline(c, ws, ref, tmap_out, shape, !nhwc, graph_runs);
      } else {
        row.baseline = cublas_baseline(c, ws, ref, tmap_out, graph_runs);
      }
      if (!row.baseline) row.note += row.note.empty() ? "no correct baseline" : "; no correct baseline";
      const Row& r = row;
      std::fprintf(stderr, "%-10s tmap %8s us  %-36s %8s us  speedup %s", r.name.c_str(),
                   r.tmap ? fixed(r.tmap->warm_us).c_str() : "-", r.baseline ? r.baseline->name.c_str() : "-",
                   r.baseline ? fixed(r.baseline->time.warm_us).c_str() : "-",
                   r.tmap && r.baseline ? fixed(r.baseline->time.warm_us / r.tmap->warm_us).c_str() : "-");
      if (r.other)
        std::fprintf(stderr, "  (other layout: %s %s us)", r.other->name.c_str(), fixed(r.other->time.warm_us).c_str());
      std::fprintf(stderr, "\n");
      rows.push_back(std::move(row));
    }

    // Geometric-mean speedups (baseline time / tmap time) over rows with both.
    double log_sum = 0, log_sum_cold = 0, log_sum_fastest = 0;
    int both = 0, with_fastest = 0;
    for (const auto& r : rows) {
      if (r.tmap && r.baseline) {
        log_sum += std::log(r.baseline->time.warm_us / r.tmap->warm_us);
        log_sum_cold += std::log(r.baseline->time.cold_us / r.tmap->cold_us);
        ++both;
      }
      if (r.tmap && r.fastest()) {
        log_sum_fastest += std::log(r.fastest()->time.warm_us / r.tmap->warm_us);
        ++with_fastest;
      }
    }
    const double geo = both ? std::exp(log_sum / both) : 0, geo_cold = both ? std::exp(log_sum_cold / both) : 0;
    const double geo_fastest = with_fastest ? std::exp(log_sum_fastest / with_fastest) : 0;
    int cudnn_version = static_cast<int>(cudnnGetVersion());
    int cublas_version = 0;
    cublasGetProperty(MAJOR_VERSION, &cublas_version);
    // The table's own name: its "title", else what its file is known as, else the file's stem.
    const std::string stem = std::filesystem::path(table_path).stem().string();
    const std::string kind = table.contains("title") && table["title"].is_string() ? table["title"].get<std::string>()
                             : depthwise                                        ? "depthwise conv2d"
                             : stem.find("grouped") != std::string::npos         ? "grouped conv2d"
                             : stem.find("resnet18") != std::string::npos        ? "ResNet-18 conv2d"
                             : stem == "conv1d" || stem == "conv3d"             ? stem
                                                                                : "conv" + std::to_string(rank) + "d (" + stem + ")";
    const std::string what = model ? kind + " (workload table), " + out_dtype + " output" : (conv ? kind + ", batch " + std::to_string(batch) + ", " + layout_name
                                   : table_path.find("skinny") != std::string::npos ? "skinny GEMM" : "GEMM") +
                             ", " + out_dtype + " output";
    // Achieved bandwidth of tmap's kernel, cold L2 (every tensor read or written once), and its
    // share of the copy bandwidth.
    auto gbs = [](const Row& r) { return r.bytes / (r.tmap->cold_us * 1e-6) / 1e9; };
    int transfers = 0;
    for (const auto& r : rows) transfers += r.note.find("another output dtype") != std::string::npos;
    if (!csv_path.empty()) {
      std::ofstream csv(csv_path);
      csv << "workload,key,gflop,tmap_us,tmap_cold_us,tmap_tflops,baseline,baseline_us,baseline_cold_us,speedup,"
             "speedup_cold,pct_peak,tmap_rel_l2,baseline_vs_tmap_rel_l2,note,other_layout_baseline,other_layout_us,"
             "speedup_vs_fastest_layout,tmap_cold_gbs,pct_copy_bandwidth\n";
      for (const auto& r : rows) {
        csv << r.name << "," << r.workload_key << "," << r.gflop << ",";
        if (r.tmap) csv << r.tmap->warm_us << "," << r.tmap->cold_us << "," << r.gflop / r.tmap->warm_us * 1e3;
        else csv << ",,";
        csv << ",";
        if (r.baseline) csv << r.baseline->name << "," << r.baseline->time.warm_us << "," << r.baseline->time.cold_us;
        else csv << ",,";
        csv << ",";
        if (r.tmap && r.baseline)
          csv << r.baseline->time.warm_us / r.tmap->warm_us << "," << r.baseline->time.cold_us / r.tmap->cold_us << ","
              << r.gflop / r.tmap->warm_us * 1e3 / peak_tflops * 100;
        else csv << ",,";
        csv << "," << (r.tmap ? r.tmap_err : 0) << "," << (r.baseline ? r.baseline->err_tmap : 0) << "," << r.note;
        if (r.other) csv << "," << r.other->name << "," << r.other->time.warm_us;
        else csv << ",,";
        csv << ",";
        if (r.tmap && r.fastest()) csv << r.fastest()->time.warm_us / r.tmap->warm_us;
        csv << ",";
        if (r.tmap && bandwidth) csv << gbs(r) << "," << gbs(r) / copy_gbs * 100;
        else csv << ",";
        csv << "\n";
      }
    }
    bool any_conv = conv;
    for (const auto& e : entries) any_conv = any_conv || (model && is_conv_op(e.op));
    std::ostringstream md;
    md << "### " << what << "\n\n"
       << "Device " << rt.devices.front().name << ", driver " << tmap::cuda_version_text(rt.driver_version) << ", CUDA "
       << tmap::cuda_version_text(rt.runtime_version) << ", cuDNN " << cudnn_version / 10000 << "."
       << cudnn_version % 10000 / 100 << "." << cudnn_version % 100 << ", cuBLAS " << cublas_version << "; tmap "
       << (commit.empty() ? "(commit unknown)" : commit) << ", " << utc_date()
       << ". Times in us: median of CUDA-graph replays of " << graph_runs
       << " runs (warm L2); cold: the same with an L2 flush (a read of twice the L2's size) before each run, the "
          "flushes' own time subtracted. "
          "Speedup = baseline / tmap.\n\n"
       << (any_conv ? "cuDNN runs in tmap's layout (baseline, speedup) and in the other layout, on the same values "
                  "transposed (other layout us; vs fastest: against the faster of the two).\n\n"
                : "")
       << (bandwidth ? "Memory-bound: tmap GB/s is every tensor's bytes moved once over tmap's cold time; the "
                       "device-to-device copy bandwidth measured in this run is " + fixed(copy_gbs, 0) + " GB/s.\n\n"
                     : "")
       << "| workload | tmap us | baseline | baseline us | speedup | cold speedup |"
       << (any_conv ? " other layout us | vs fastest |" : "") << " tmap TFLOP/s | % of peak |"
       << (bandwidth ? " tmap GB/s (cold) | % of copy |" : "") << "\n"
       << "| --- | ---: | --- | ---: | ---: | ---: |" << (any_conv ? " ---: | ---: |" : "") << " ---: | ---: |"
       << (bandwidth ? " ---: | ---: |" : "") << "\n";
    for (const auto& r : rows) {
      md << "| " << r.name << " | " << (r.tmap ? fixed(r.tmap->warm_us) : "-") << " | "
         << (r.baseline ? r.baseline->name : "-") << " | " << (r.baseline ? fixed(r.baseline->time.warm_us) : "-")
         << " | ";
      const std::string other_cols =
          !any_conv ? ""
                : (r.other ? fixed(r.other->time.warm_us) : std::string("-")) + " | " +
                      (r.tmap && r.fastest() ? fixed(r.fastest()->time.warm_us / r.tmap->warm_us) : std::string("-")) +
                      " | ";
      if (r.tmap && r.baseline)
        md << fixed(r.baseline->time.warm_us / r.tmap->warm_us) << " | "
           << fixed(r.baseline->time.cold_us / r.tmap->cold_us) << " | " << other_cols
           << fixed(r.gflop / r.tmap->warm_us * 1e3, 1)
           << " | " << fixed(r.gflop / r.tmap->warm_us * 1e3 / peak_tflops * 100, 1) << " |"
           << (bandwidth ? " " + fixed(gbs(r), 0) + " | " + fixed(gbs(r) / copy_gbs * 100, 1) + " |" : "");
      else
        md << "- | - | " << other_cols << "- | - |" << (r.note.empty() ? "" : " " + r.note);
      md << "\n";
    }
    md << "\nGeometric-mean speedup over " << both << " workloads: " << fixed(geo) << " (cold L2: " << fixed(geo_cold)
       << ")" << (any_conv ? "; against cuDNN's fastest layout: " + fixed(geo_fastest) : std::string()) << ".\n";
    if (model) {  // the model's time: each workload's time times its count, over the workloads all have
      double t = 0, base = 0, fastest = 0;
      int n = 0, skipped = 0;
      for (const auto& r : rows) {
        if (!r.tmap || !r.baseline) {
          ++skipped;
          continue;
        }
        t += r.count * r.tmap->warm_us;
        base += r.count * r.baseline->time.warm_us;
        fastest += r.count * (r.fastest() ? r.fastest()->time.warm_us : r.baseline->time.warm_us);
        ++n;
      }
      md << "\nModel total (sum of count x time over " << n << " workloads" << (skipped ? ", " + std::to_string(skipped) + " without both left out" : std::string())
         << "): tmap " << fixed(t) << " us, cuDNN/cuBLAS " << fixed(base) << " us (speedup " << fixed(t > 0 ? base / t : 0)
         << ")" << (any_conv ? ", cuDNN in its fastest layout " + fixed(fastest) + " us (speedup " + fixed(t > 0 ? fastest / t : 0) + ")" : std::string())
         << ".\n";
    }
    if (transfers)
      md << transfers << " of tmap's kernels replay schedules tuned for another output dtype (the log holds no "
         << out_dtype << "-output record of their workload).\n";
    if (!md_path.empty()) std::ofstream(md_path) << md.str();
    std::cout << md.str();
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "tmap_bench: error: " << e.what() << "\n";
    return 1;
  }
}
