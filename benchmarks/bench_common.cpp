// What tmap_bench's baselines share (bench_common.h).
#include "bench_common.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace bench {

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
void cudnn_ok(cudnnStatus_t s, const char* what) {
  if (s != CUDNN_STATUS_SUCCESS) throw std::runtime_error(std::string(what) + ": " + cudnnGetErrorString(s));
}
void cublas_ok(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string(what) + ": cuBLAS status " + std::to_string(s));
}

std::size_t bytes_of(tmap::DType t, std::size_t n) {
  return (n * static_cast<std::size_t>(tmap::dtype_bits(t)) + 7) / 8;
}

std::vector<double> read_output(const void* dev, std::size_t n, tmap::DType t) {
  std::vector<unsigned char> bytes(bytes_of(t, n));
  cuda_ok(cudaMemcpy(bytes.data(), dev, bytes.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
  return tmap::decode_values(bytes, t, n);
}

std::unique_ptr<Buffer> upload(const std::vector<double>& values, tmap::DType t) {
  const std::vector<unsigned char> bytes = tmap::encode_values(values, t);
  auto b = std::make_unique<Buffer>(bytes.size());
  cuda_ok(cudaMemcpy(b->p, bytes.data(), bytes.size(), cudaMemcpyHostToDevice), "upload");
  return b;
}

cudaDataType_t cuda_type(tmap::DType t) {
  switch (t) {
    case tmap::DType::kFloat16: return CUDA_R_16F;
    case tmap::DType::kBFloat16: return CUDA_R_16BF;
    case tmap::DType::kFloat32: return CUDA_R_32F;
    case tmap::DType::kFloat64: return CUDA_R_64F;
    case tmap::DType::kInt8: return CUDA_R_8I;
    case tmap::DType::kInt32: return CUDA_R_32I;
    case tmap::DType::kFloat8E4M3: return CUDA_R_8F_E4M3;
    case tmap::DType::kFloat8E5M2: return CUDA_R_8F_E5M2;
    default: throw std::runtime_error("cuBLAS has no type for " + std::string(tmap::dtype_name(t)));
  }
}

cudnnDataType_t cudnn_type(tmap::DType t) {
  switch (t) {
    case tmap::DType::kFloat16: return CUDNN_DATA_HALF;
    case tmap::DType::kBFloat16: return CUDNN_DATA_BFLOAT16;
    case tmap::DType::kFloat32: return CUDNN_DATA_FLOAT;
    case tmap::DType::kInt8: return CUDNN_DATA_INT8;
    case tmap::DType::kInt32: return CUDNN_DATA_INT32;
    default: throw std::runtime_error("cuDNN has no type for " + std::string(tmap::dtype_name(t)));
  }
}

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

int param_of(const Compute& c, const std::string& name) {
  for (const auto& [n, v] : c.params)
    if (n == name) return static_cast<int>(v);
  throw std::runtime_error("the compute has no parameter " + name);
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

cudnnDataType_t conv_compute_type(const ConvShape& s) {
  return tmap::dtype_is_float(s.in_dtype) ? CUDNN_DATA_FLOAT : CUDNN_DATA_INT32;
}

ConvShape conv_shape(const Compute& c, int rank, bool nhwc) {
  auto param = [&](const std::string& name) { return param_of(c, name); };
  ConvShape s;
  s.n = param("N"), s.c = param("C");
  // Depthwise: one filter per channel (K = C, groups = C, filters [C, 1, R, S] as tmap's [C, R, S]).
  const bool depthwise = c.name == "depthwise_conv2d";
  s.k = depthwise ? s.c : param("K");
  s.groups = depthwise ? s.c : rank == 2 ? param("groups") : 1;
  s.tmap_channels_last = nhwc;
  s.in_dtype = c.tensor_of(c.inputs[0]).dtype, s.out_dtype = c.tensor_of(c.output).dtype;
  if (c.tensor_of(c.inputs[1]).dtype != s.in_dtype)
    throw std::runtime_error("cuDNN takes an input and a filter of one dtype");
  // cuDNN writes an int8 convolution's int32 sums as float32 (or requantized int8): the same
  // bytes as tmap's int32, and exact for sums below 2^24, as these inputs' are.
  if (s.in_dtype == tmap::DType::kInt8) s.out_dtype = tmap::DType::kFloat32;
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

BackendDesc backend_tensor(std::int64_t uid, const std::vector<int>& dims, bool channels_last, cudnnDataType_t type,
                           bool virtual_tensor) {
  BackendDesc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  std::vector<std::int64_t> d(dims.begin(), dims.end()), st = strides_of(dims, channels_last);
  const std::int64_t align = 16;
  cudnn_ok(t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &type), "tensor dtype");
  cudnn_ok(t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, d.data(), static_cast<std::int64_t>(d.size())), "dims");
  cudnn_ok(t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, st.data(), static_cast<std::int64_t>(st.size())), "strides");
  cudnn_ok(t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &uid), "uid");
  cudnn_ok(t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &align), "alignment");
  if (virtual_tensor) cudnn_ok(t.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, &virtual_tensor), "virtual");
  cudnn_ok(t.finalize(), "tensor finalize");
  return t;
}

std::optional<Baseline> faster(std::optional<Baseline> a, std::optional<Baseline> b) {
  if (!a) return b;
  if (!b) return a;
  return b->time.warm_us < a->time.warm_us ? b : a;
}

std::function<int(void*)> then_post(std::function<int(void*)> launch, const PostOps* post, const void* contraction_out) {
  if (!post) return launch;
  return [launch = std::move(launch), post, contraction_out](void* stream) {
    const int e = launch(stream);
    return e ? e : post->run(stream, contraction_out);
  };
}

bool Search::consider(const std::string& name, const std::function<int(void*)>& launch) {
  cuda_ok(cudaMemset(out, 0xFF, out_bytes), "poison");
  if (post) post->poison();
  const std::function<int(void*)> run = then_post(launch, post, out);
  trace(name);
  if (run(nullptr) != 0 || cudaDeviceSynchronize() != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  ++tried;
  offer(best, name, post ? post->read() : output(), ref, tmap_out, run, graph_runs, wrong);
  return true;
}

std::optional<Baseline> Search::result() const {
  std::optional<Baseline> b = best;
  if (b) b->tried = tried, b->wrong = wrong;
  return b;
}

}  // namespace bench
