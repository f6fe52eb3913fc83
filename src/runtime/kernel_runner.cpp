#include "tmap/runtime/kernel_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <thread>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "tmap/codegen/reference_emitter.h"
#include "tmap/runtime/nvrtc_compiler.h"

namespace tmap {
namespace {

/// Rounds a value to what a tensor of this dtype can hold.
double quantize(double v, DType t) {
  switch (t) {
    case DType::kFloat16: return static_cast<double>(__half2float(__float2half(static_cast<float>(v))));
    case DType::kBFloat16: return static_cast<double>(__bfloat162float(__float2bfloat16(static_cast<float>(v))));
    case DType::kFloat32:
    case DType::kTFloat32: return static_cast<double>(static_cast<float>(v));
    case DType::kInt8: return std::round(v * 8);  // small integers in [-8, 8]
    case DType::kInt32: return std::round(v);
    case DType::kInt4: return std::round(v * 7);  // [-7, 7]
    case DType::kFloat64: return v;
    case DType::kFloat8E4M3: return static_cast<double>(static_cast<float>(__nv_fp8_e4m3(static_cast<float>(v))));
    case DType::kFloat8E5M2: return static_cast<double>(static_cast<float>(__nv_fp8_e5m2(static_cast<float>(v))));
  }
  return v;
}

std::int64_t offset_of(const Tensor& t, const Access& a, const std::vector<std::int64_t>& point, bool& in_bounds) {
  std::int64_t offset = 0;
  in_bounds = true;
  for (std::size_t d = 0; d < a.indices.size(); ++d) {
    std::int64_t idx = a.indices[d].constant;
    for (const auto& [it, coef] : a.indices[d].terms) idx += coef * point[it];
    if (idx < 0 || idx >= t.shape[d]) in_bounds = false;
    offset = offset * t.shape[d] + idx;
  }
  return offset;
}

/// Runs body(begin, end) over [0, n) in chunks on up to 16 threads: drawing a large GEMM's
/// inputs (2 x 67 M elements) on one thread cost more than its reference and first candidates.
void parallel_for(std::size_t n, const std::function<void(std::size_t, std::size_t)>& body) {
  const std::size_t chunk = std::size_t{1} << 20;
  const std::size_t threads = std::min<std::size_t>({(n + chunk - 1) / chunk, 16,
                                                     std::max(1u, std::thread::hardware_concurrency())});
  if (threads <= 1) return body(0, n);
  std::vector<std::thread> pool;
  const std::size_t per = (n + threads - 1) / threads;
  for (std::size_t t = 0; t < threads; ++t)
    pool.emplace_back([&, t] { body(std::min(n, t * per), std::min(n, (t + 1) * per)); });
  for (std::thread& th : pool) th.join();
}

/// SplitMix64's output function: a well-mixed 64-bit hash of `z`.
std::uint64_t splitmix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// Value `i` of `stream`: uniform in [-1, 1], rounded to `t`. A counter-based draw (SplitMix64
/// of the element's index), so the values do not depend on how the work is split.
double random_value(std::uint64_t key, std::size_t i, DType t) {
  const std::uint64_t z = splitmix64(key + (i + 1) * 0x9E3779B97F4A7C15ull);
  return quantize(static_cast<double>(z >> 11) * 0x1.0p-52 - 1.0, t);  // 53 random bits over [-1, 1)
}

std::uint64_t stream_key(std::uint64_t stream) { return splitmix64(stream + 0x9E3779B97F4A7C15ull); }

/// `n` values of `stream` (random_value).
std::vector<double> random_values(std::size_t n, DType t, std::uint64_t stream) {
  const std::uint64_t key = stream_key(stream);
  std::vector<double> v(n);
  parallel_for(n, [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) v[i] = random_value(key, i, t);
  });
  return v;
}

/// Writes `v` as one element of dtype `t` at `at` (not int4, which packs two to a byte).
void encode_one(double v, DType t, unsigned char* at) {
  auto put = [at](const auto& x) { std::memcpy(at, &x, sizeof x); };
  switch (t) {
    case DType::kFloat16: put(__float2half(static_cast<float>(v))); break;
    case DType::kBFloat16: put(__float2bfloat16(static_cast<float>(v))); break;
    case DType::kFloat32:
    case DType::kTFloat32: put(static_cast<float>(v)); break;
    case DType::kFloat64: put(v); break;
    case DType::kInt8: put(static_cast<signed char>(v)); break;
    case DType::kInt32: put(static_cast<int>(v)); break;
    case DType::kInt4: break;
    case DType::kFloat8E4M3: put(__nv_fp8_e4m3(static_cast<float>(v))); break;
    case DType::kFloat8E5M2: put(__nv_fp8_e5m2(static_cast<float>(v))); break;
  }
}

/// The bytes of `n` values of `stream`, drawn straight into them: the same bytes as
/// encode_values(random_values(...)), without holding each value as a double first.
std::vector<unsigned char> random_bytes(std::size_t n, DType t, std::uint64_t stream) {
  if (t == DType::kInt4) return encode_values(random_values(n, t, stream), t);
  const std::uint64_t key = stream_key(stream);
  const std::size_t size = static_cast<std::size_t>(dtype_bits(t)) / 8;
  std::vector<unsigned char> out(n * size);
  parallel_for(n, [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) encode_one(random_value(key, i, t), t, out.data() + i * size);
  });
  return out;
}

}  // namespace

std::vector<unsigned char> encode_values(const std::vector<double>& values, DType t) {
  if (t == DType::kInt4) {  // packed two to a byte, low nibble first
    std::vector<unsigned char> out((values.size() + 1) / 2, 0);
    for (std::size_t i = 0; i < values.size(); ++i)
      out[i / 2] |= static_cast<unsigned char>((static_cast<int>(values[i]) & 0xF) << (i % 2 * 4));
    return out;
  }
  const std::size_t size = static_cast<std::size_t>(dtype_bits(t)) / 8;
  std::vector<unsigned char> out(values.size() * size);
  parallel_for(values.size(), [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) encode_one(values[i], t, out.data() + i * size);
  });
  return out;
}

namespace {

/// Element `i` of the bytes of a tensor of dtype `t` (as encode_values writes them).
double decode_one(const unsigned char* bytes, DType t, std::size_t i) {
  switch (t) {
    case DType::kFloat16: { __half h; std::memcpy(&h, &bytes[i * 2], 2); return __half2float(h); }
    case DType::kBFloat16: { __nv_bfloat16 h; std::memcpy(&h, &bytes[i * 2], 2); return __bfloat162float(h); }
    case DType::kFloat32:
    case DType::kTFloat32: { float f; std::memcpy(&f, &bytes[i * 4], 4); return f; }
    case DType::kFloat64: { double d; std::memcpy(&d, &bytes[i * 8], 8); return d; }
    case DType::kInt8: return static_cast<signed char>(bytes[i]);
    case DType::kInt32: { int v; std::memcpy(&v, &bytes[i * 4], 4); return v; }
    case DType::kInt4: {
      const int byte = bytes[i / 2];
      return static_cast<signed char>(i % 2 ? byte & 0xF0 : byte << 4) >> 4;
    }
    case DType::kFloat8E4M3: { __nv_fp8_e4m3 f; std::memcpy(&f, &bytes[i], 1); return static_cast<float>(f); }
    case DType::kFloat8E5M2: { __nv_fp8_e5m2 f; std::memcpy(&f, &bytes[i], 1); return static_cast<float>(f); }
  }
  return 0;
}

}  // namespace

std::vector<double> decode_values(const std::vector<unsigned char>& bytes, DType t, std::size_t n) {
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = decode_one(bytes.data(), t, i);
  return out;
}

std::vector<double> cpu_reference(const Compute& c, const std::vector<std::vector<double>>& tensors) {
  const Tensor& out_t = c.tensor_of(c.output);
  std::vector<double> out(static_cast<std::size_t>(out_t.num_elements()), 0.0);
  std::vector<std::int64_t> point(c.iters.size(), 0);
  const std::int64_t total = c.iteration_points();
  for (std::int64_t flat = 0; flat < total; ++flat) {
    std::int64_t rem = flat;
    for (int i = static_cast<int>(c.iters.size()) - 1; i >= 0; --i) {
      point[i] = rem % c.iters[i].extent;
      rem /= c.iters[i].extent;
    }
    double product = 1;
    for (const auto& in : c.inputs) {
      bool inside = false;
      std::int64_t off = offset_of(c.tensor_of(in), in, point, inside);
      product *= inside ? tensors[in.tensor][off] : 0.0;
    }
    bool inside = false;
    std::int64_t off = offset_of(out_t, c.output, point, inside);
    TMAP_CHECK(inside, "the output is indexed out of bounds");
    out[off] += product;
  }
  return out;
}

namespace {

/// A CUDA failure, with the step it happened in.
struct CudaFailure : std::runtime_error {
  CudaFailure(const std::string& m, FailureKind k) : std::runtime_error(m), kind(k) {}
  FailureKind kind;
};

void check(cudaError_t e, const char* what, FailureKind kind = FailureKind::kRuntime) {
  if (e != cudaSuccess)
    throw CudaFailure(std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")", kind);
}

/// A cubin loaded through the runtime's library API, with the kernels a plan names.
class LoadedModule {
 public:
  LoadedModule(const std::vector<char>& cubin, const std::vector<std::string>& names) {
    check(cudaLibraryLoadData(&lib_, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0), "cudaLibraryLoadData",
          FailureKind::kLoad);
    try {
      for (const std::string& name : names) {
        cudaKernel_t kernel = nullptr;
        check(cudaLibraryGetKernel(&kernel, lib_, name.c_str()), "cudaLibraryGetKernel", FailureKind::kLoad);
        kernels_.push_back(reinterpret_cast<const void*>(kernel));
      }
    } catch (...) {
      cudaLibraryUnload(lib_);
      throw;
    }
  }
  ~LoadedModule() { cudaLibraryUnload(lib_); }
  LoadedModule(const LoadedModule&) = delete;
  LoadedModule& operator=(const LoadedModule&) = delete;
  const void* const* kernels() const { return kernels_.data(); }

 private:
  cudaLibrary_t lib_ = nullptr;
  std::vector<const void*> kernels_;
};

/// A module of tmap's own kernels (`source`, defining `names`) on the current device, compiled by
/// NVRTC on first use and kept for the process (never unloaded: a static's destructor may run
/// after the runtime is torn down).
const LoadedModule& builtin_module(const char* source, const std::vector<std::string>& names) {
  static std::mutex mutex;
  static std::map<std::pair<int, std::string>, const LoadedModule*> loaded;
  int device = 0, major = 0, minor = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  std::lock_guard<std::mutex> lock(mutex);
  const std::pair<int, std::string> key{device, names.front()};
  if (auto it = loaded.find(key); it != loaded.end()) return *it->second;
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "cudaDeviceGetAttribute");
  NvrtcCompiler compiler(major * 10 + minor);
  const CompileResult compiled = compiler.compile(source, names.front());
  if (!compiled.ok) throw std::runtime_error("compiling tmap's " + names.front() + " kernel: " + compiled.log);
  return *(loaded[key] = new LoadedModule(compiled.cubin, names));
}

/// Draws inputs on the GPU exactly as random_value does on the host: one kernel per storage
/// type, element i of a stream being SplitMix64 of its index, uniform in [-1, 1), rounded to
/// the type (integers: round(8 v) for int8, round(v) for int32).
constexpr const char* kDrawPrelude = R"(#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
__device__ __forceinline__ double draw(unsigned long long key, unsigned long long i) {
  unsigned long long z = key + (i + 1ull) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (double)(z >> 11) * 2.220446049250313080847263336181640625e-16 - 1.0;  // 2^-52
}
#define TMAP_DRAW(name, T, value)                                                         \
  extern "C" __global__ void name(T* out, unsigned long long n, unsigned long long key) { \
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; \
         i += (unsigned long long)gridDim.x * blockDim.x) {                               \
      const double v = draw(key, i);                                                      \
      out[i] = value;                                                                     \
    }                                                                                     \
  }
)";

/// One kernel of a module that holds one per storage type (drawing inputs, summing an output's
/// error): its dtype, name, element type, and the expression its macro puts in.
struct TypedKernel {
  DType dtype;
  const char* name;
  const char* type;
  const char* value;
};

/// The draw kernel of each storage type drawn on the GPU (int4 is drawn on the host): the
/// element made of v.
constexpr TypedKernel kDrawKernels[] = {
    {DType::kFloat16, "tmap_draw_f16", "__half", "__float2half((float)v)"},
    {DType::kBFloat16, "tmap_draw_bf16", "__nv_bfloat16", "__float2bfloat16((float)v)"},
    {DType::kFloat32, "tmap_draw_f32", "float", "(float)v"},
    {DType::kFloat64, "tmap_draw_f64", "double", "v"},
    {DType::kInt8, "tmap_draw_i8", "signed char", "(signed char)round(v * 8)"},
    {DType::kInt32, "tmap_draw_i32", "int", "(int)round(v)"},
    {DType::kFloat8E4M3, "tmap_draw_e4m3", "__nv_fp8_e4m3", "__nv_fp8_e4m3((float)v)"},
    {DType::kFloat8E5M2, "tmap_draw_e5m2", "__nv_fp8_e5m2", "__nv_fp8_e5m2((float)v)"},
};

/// A module's source: `prelude`, then `macro`(name, type, value) for each of `kernels`.
std::string typed_source(const char* prelude, const char* macro, std::span<const TypedKernel> kernels) {
  std::string s = prelude;
  for (const TypedKernel& k : kernels) s += std::string(macro) + "(" + k.name + ", " + k.type + ", " + k.value + ")\n";
  return s;
}

const std::string& draw_source() {
  static const std::string source = typed_source(kDrawPrelude, "TMAP_DRAW", kDrawKernels);
  return source;
}

/// Launches the kernel of storage type `t` (tf32 is stored as float32) of the module `source`
/// holding `kernels`, with `args`, in a grid-stride loop over `n` elements on the null stream;
/// false when `t` has no kernel there.
bool launch_typed(const std::string& source, std::span<const TypedKernel> kernels, DType t, std::size_t n,
                  void** args, const char* what) {
  if (t == DType::kTFloat32) t = DType::kFloat32;
  const auto it = std::find_if(kernels.begin(), kernels.end(), [t](const TypedKernel& k) { return k.dtype == t; });
  if (it == kernels.end()) return false;
  std::vector<std::string> names;
  for (const TypedKernel& k : kernels) names.push_back(k.name);
  const LoadedModule& module = builtin_module(source.c_str(), names);
  int device = 0, sms = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  const unsigned blocks = static_cast<unsigned>(std::clamp<std::size_t>((n + 255) / 256, 1, 8 * static_cast<std::size_t>(sms)));
  check(cudaLaunchKernel(module.kernels()[it - kernels.begin()], dim3(blocks), dim3(256), args, 0, nullptr), what);
  return true;
}

/// Fills `out` with the `n` values of `stream` in `t` on the GPU: the bytes random_bytes draws on
/// the host, which is slow for a large weight while compiles keep the host's cores busy. False
/// for a dtype drawn on the host only.
bool draw_on_device(void* out, std::size_t n, DType t, std::uint64_t stream) {
  unsigned long long count = n, key = stream_key(stream);
  void* args[] = {&out, &count, &key};
  return launch_typed(draw_source(), kDrawKernels, t, n, args, "drawing inputs");
}

/// The plan's tensor maps over `slots`, each error named.
void encode_maps(const tmap_launch_plan& plan, void* const* slots, std::int64_t size, tmap_tensor_map* maps) {
  if (!tmap_plan_takes_size(&plan, size))
    throw CudaFailure("launch: the kernel takes sizes " + std::to_string(plan.size_lo) + " to " +
                          std::to_string(plan.size_hi) + ", not " + std::to_string(size),
                      FailureKind::kLoad);
  const cudaError_t e = tmap_plan_encode_maps(&plan, slots, size, maps);
  if (e == cudaErrorNotSupported)
    throw CudaFailure("cuTensorMapEncode: not found in the CUDA driver (TMA kernels need a CUDA 12 or newer driver)",
                      FailureKind::kLoad);
  check(e, "cuTensorMapEncode (the driver refused a tensor map)", FailureKind::kLoad);
}

/// A CUDA event owned for the length of a scope.
class Event {
 public:
  Event() { check(cudaEventCreate(&e_), "cudaEventCreate"); }
  ~Event() { cudaEventDestroy(e_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

std::size_t bytes_of(const Tensor& t) {
  return (static_cast<std::size_t>(t.num_elements()) * static_cast<std::size_t>(dtype_bits(t.dtype)) + 7) / 8;
}

}  // namespace

Workspace::Workspace(const Compute& c, std::uint64_t seed, HostValues keep)
    : compute_(c), values_(c.tensors.size()), device_(c.tensors.size(), nullptr) {
  try {
    for (std::size_t i = 0; i < c.tensors.size(); ++i) {
      const Tensor& t = c.tensors[i];
      check(cudaMalloc(&device_[i], bytes_of(t)), "cudaMalloc");
      device_bytes_ += bytes_of(t);
      if (static_cast<int>(i) == c.output.tensor) continue;
      // Every tensor read, the epilogue's operands too, holds fresh values in [-1, 1].
      const std::size_t n = static_cast<std::size_t>(t.num_elements());
      const std::uint64_t stream = seed * c.tensors.size() + i;
      std::vector<unsigned char> host;
      if (keep == HostValues::kKeep) {
        values_[i] = random_values(n, t.dtype, stream);
        host = encode_values(values_[i], t.dtype);
      } else if (draw_on_device(device_[i], n, t.dtype, stream)) {
        continue;
      } else {
        host = random_bytes(n, t.dtype, stream);
      }
      check(cudaMemcpy(device_[i], host.data(), host.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
    }
    check(cudaDeviceSynchronize(), "drawing inputs");
  } catch (...) {
    for (void* p : device_) cudaFree(p);
    throw;
  }
}

Workspace::~Workspace() {
  for (void* p : device_) cudaFree(p);
  cudaFree(device_reference_);
  cudaFree(error_sums_);
}

void Workspace::keep_reference(const std::vector<double>& reference) {
  const Tensor& t = compute_.tensor_of(compute_.output);
  TMAP_CHECK(reference.size() == static_cast<std::size_t>(t.num_elements()), "a reference of another shape");
  if (!device_reference_) {
    check(cudaMalloc(&device_reference_, reference.size() * sizeof(double)), "cudaMalloc");
    check(cudaMalloc(&error_sums_, 3 * sizeof(double)), "cudaMalloc");
    device_bytes_ += reference.size() * sizeof(double) + 3 * sizeof(double);
  }
  check(cudaMemcpy(device_reference_, reference.data(), reference.size() * sizeof(double), cudaMemcpyHostToDevice),
        "cudaMemcpy");
  kept_reference_ = reference.data();
}

void Workspace::poison_output() {
  const Tensor& t = compute_.tensor_of(compute_.output);
  check(cudaMemset(device_[compute_.output.tensor], 0xFF, bytes_of(t)), "cudaMemset");
}

std::vector<double> Workspace::read_output() const {
  const Tensor& t = compute_.tensor_of(compute_.output);
  std::vector<unsigned char> host(bytes_of(t));
  check(cudaMemcpy(host.data(), device_[compute_.output.tensor], host.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
  return decode_values(host, t.dtype, static_cast<std::size_t>(t.num_elements()));
}

namespace {

/// Every float16 value as a float, built once.
const std::vector<float>& half_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(1 << 16);
    for (std::uint32_t i = 0; i < t.size(); ++i) {
      __half_raw raw;
      raw.x = static_cast<unsigned short>(i);
      t[i] = __half2float(__half(raw));
    }
    return t;
  }();
  return table;
}

/// ||got - ref|| / ||ref|| over n elements, got[i] = value(i); infinite when one is NaN. Large
/// outputs are summed in chunks on several threads (verifying a 1.2 M-element output, copy and
/// sum on one thread, took 4.5 ms of every candidate's measurement), the chunks' sums added in
/// order so that the result does not depend on the split.
template <class Value>
double relative_l2_of(std::size_t n, const std::vector<double>& ref, Value value) {
  struct Sums {
    std::size_t begin;
    double num, den;
    bool nan;
  };
  std::mutex mu;
  std::vector<Sums> parts;
  parallel_for(n, [&](std::size_t begin, std::size_t end) {
    Sums part{begin, 0, 0, false};
    for (std::size_t i = begin; i < end; ++i) {
      const double d = value(i) - ref[i];
      part.nan |= std::isnan(d);
      part.num += d * d;
      part.den += ref[i] * ref[i];
    }
    std::lock_guard<std::mutex> lock(mu);
    parts.push_back(part);
  });
  std::sort(parts.begin(), parts.end(), [](const Sums& x, const Sums& y) { return x.begin < y.begin; });
  double num = 0, den = 0;
  bool nan = false;
  for (const Sums& p : parts) num += p.num, den += p.den, nan |= p.nan;
  if (nan) num = INFINITY;
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace

double relative_l2_of_bytes(const unsigned char* bytes, DType t, const std::vector<double>& reference) {
  const std::size_t n = reference.size();
  auto load = [bytes](std::size_t i, auto type_tag) {
    decltype(type_tag) v;
    std::memcpy(&v, bytes + i * sizeof(v), sizeof(v));
    return v;
  };
  switch (t) {
    case DType::kFloat16: {
      const float* table = half_table().data();
      return relative_l2_of(n, reference, [&](std::size_t i) { return double(table[load(i, std::uint16_t{})]); });
    }
    case DType::kBFloat16:  // a bfloat16 is the upper half of a float
      return relative_l2_of(n, reference, [&](std::size_t i) {
        const std::uint32_t bits = std::uint32_t{load(i, std::uint16_t{})} << 16;
        float f;
        std::memcpy(&f, &bits, 4);
        return double(f);
      });
    case DType::kFloat32:
    case DType::kTFloat32: return relative_l2_of(n, reference, [&](std::size_t i) { return double(load(i, float{})); });
    case DType::kFloat64: return relative_l2_of(n, reference, [&](std::size_t i) { return load(i, double{}); });
    case DType::kInt32:
      return relative_l2_of(n, reference, [&](std::size_t i) { return double(load(i, std::int32_t{})); });
    default: return relative_l2_of(n, reference, [&](std::size_t i) { return decode_one(bytes, t, i); });
  }
}

namespace {

/// The relative L2 error's sums on the GPU, one kernel per output type: each thread sums
/// (out - ref)^2 and ref^2 in double over a grid-stride loop, a warp adds its lanes', and its
/// first lane adds them into sums[0] and sums[1]; a NaN difference sets sums[2]. The values are
/// those relative_l2_of_bytes reads (every type here converts to double exactly); only the order
/// of the additions differs.
constexpr const char* kErrorPrelude = R"(#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#define TMAP_L2(name, T, value)                                                                     \
  extern "C" __global__ void name(const T* out, const double* ref, unsigned long long n, double* sums) { \
    double num = 0, den = 0;                                                                         \
    bool bad = false;                                                                                \
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;    \
         i += (unsigned long long)gridDim.x * blockDim.x) {                                          \
      const T x = out[i];                                                                            \
      const double r = ref[i], d = (double)(value) - r;                                              \
      bad |= isnan(d);                                                                               \
      num += d * d;                                                                                  \
      den += r * r;                                                                                  \
    }                                                                                                \
    for (int o = 16; o > 0; o >>= 1) {                                                               \
      num += __shfl_down_sync(0xffffffffu, num, o);                                                  \
      den += __shfl_down_sync(0xffffffffu, den, o);                                                  \
    }                                                                                                \
    bad = __any_sync(0xffffffffu, bad);                                                              \
    if ((threadIdx.x & 31) == 0) {                                                                   \
      atomicAdd(sums, num);                                                                          \
      atomicAdd(sums + 1, den);                                                                      \
      if (bad) sums[2] = 1;                                                                          \
    }                                                                                                \
  }
)";

/// The error kernel of each output type summed on the GPU: the element's value as a double.
constexpr TypedKernel kErrorKernels[] = {
    {DType::kFloat16, "tmap_l2_f16", "__half", "__half2float(x)"},
    {DType::kBFloat16, "tmap_l2_bf16", "__nv_bfloat16", "__bfloat162float(x)"},
    {DType::kFloat32, "tmap_l2_f32", "float", "x"},
    {DType::kFloat64, "tmap_l2_f64", "double", "x"},
    {DType::kInt32, "tmap_l2_i32", "int", "x"},
    {DType::kInt8, "tmap_l2_i8", "signed char", "x"},
    {DType::kFloat8E4M3, "tmap_l2_e4m3", "__nv_fp8_e4m3", "(float)x"},
    {DType::kFloat8E5M2, "tmap_l2_e5m2", "__nv_fp8_e5m2", "(float)x"},
};

const std::string& error_source() {
  static const std::string source = typed_source(kErrorPrelude, "TMAP_L2", kErrorKernels);
  return source;
}

}  // namespace

std::optional<double> Workspace::device_output_error() const {
  const Tensor& t = compute_.tensor_of(compute_.output);
  const void* out = device_[compute_.output.tensor];
  const void* ref = device_reference_;
  unsigned long long n = static_cast<unsigned long long>(t.num_elements());
  void* sums = error_sums_;
  void* args[] = {&out, &ref, &n, &sums};
  check(cudaMemset(error_sums_, 0, 3 * sizeof(double)), "cudaMemset");
  if (!launch_typed(error_source(), kErrorKernels, t.dtype, n, args, "summing the error")) return std::nullopt;
  double host[3] = {};
  check(cudaMemcpy(host, error_sums_, sizeof host, cudaMemcpyDeviceToHost), "cudaMemcpy");
  const double num = host[2] != 0 ? INFINITY : host[0];
  return host[1] > 0 ? std::sqrt(num / host[1]) : std::sqrt(num);
}

double Workspace::output_error(const std::vector<double>& reference) const {
  const Tensor& t = compute_.tensor_of(compute_.output);
  const auto n = static_cast<std::size_t>(t.num_elements());
  TMAP_CHECK(reference.size() == n, "reference of " + std::to_string(reference.size()) + " elements for an output of " +
                                        std::to_string(n));
  if (kept_reference_ && kept_reference_ == reference.data())
    if (const std::optional<double> e = device_output_error()) return *e;
  host_output_.resize(bytes_of(t));
  check(cudaMemcpy(host_output_.data(), device_[compute_.output.tensor], host_output_.size(), cudaMemcpyDeviceToHost),
        "cudaMemcpy");
  return relative_l2_of_bytes(host_output_.data(), t.dtype, reference);
}

std::vector<double> gpu_reference(Workspace& ws, NvrtcCompiler& compiler) {
  const KernelSource k = emit_reference_kernel(ws.compute());
  CompileResult compiled = compiler.compile(k.code, k.name);
  TMAP_CHECK(compiled.ok, "the reference kernel does not compile:\n" + compiled.log);
  return gpu_reference(ws, compiled.cubin);
}

std::vector<double> gpu_reference(Workspace& ws, const std::vector<char>& cubin) {
  const KernelSource k = emit_reference_kernel(ws.compute());
  const LaunchPlan plan = plan_plain_launch(k, static_cast<int>(ws.compute().tensors.size()));
  LoadedModule module(cubin, plan.kernels);
  void* slots[TMAP_PLAN_MAX_SLOTS] = {};
  for (std::size_t i = 0; i < ws.compute().tensors.size(); ++i) slots[i] = ws.device(static_cast<int>(i));
  ws.poison_output();
  check(tmap_plan_enqueue(&plan.plan, module.kernels(), slots, nullptr, 0, nullptr, nullptr), "reference launch");
  check(cudaDeviceSynchronize(), "reference kernel");
  return ws.read_output();
}

double verification_tolerance(const HwAbstraction& hw) {
  switch (hw.a_dtype) {
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kFloat8E4M3:  // products exact in float32; the error is the output's rounding
    case DType::kFloat8E5M2: return 1e-2;
    case DType::kTFloat32: return 1e-3;
    case DType::kFloat32: return 1e-5;
    case DType::kFloat64: return 1e-9;
    default: return 0.0;
  }
}

double relative_l2(const std::vector<double>& got, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    double d = got[i] - ref[i];
    num += std::isnan(d) ? INFINITY : d * d;
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

double median_of(std::vector<double> v) {
  TMAP_CHECK(!v.empty(), "median of no values");
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

namespace {

/// Seconds between successive laps.
class PhaseClock {
 public:
  double lap() {
    const auto now = std::chrono::steady_clock::now();
    const double s = std::chrono::duration<double>(now - last_).count();
    last_ = now;
    return s;
  }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

/// Reads a buffer in 16-byte loads and writes nothing (the store is never taken: it only keeps
/// the loads), so that the L2 ends up holding the buffer's lines, all clean.
constexpr const char* kFlushSource = R"(
extern "C" __global__ void tmap_l2_flush(const uint4* __restrict__ p, unsigned long long n, unsigned* sink) {
  unsigned x = 0;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x) {
    const uint4 v = p[i];
    x += v.x ^ v.y ^ v.z ^ v.w;
  }
  if (x == 0x9e3779b9u) *sink = x;
}
)";

const void* flush_kernel() { return builtin_module(kFlushSource, {"tmap_l2_flush"}).kernels()[0]; }

/// A buffer twice the L2's size and the kernel that reads it, so that a run after it finds its
/// inputs in device memory (TimingOptions::flush_l2). A flush that wrote the buffer (a memset, as
/// before) left the L2 full of dirty lines, whose write-back then slowed the timed run: on the
/// H100 a kernel that only streams 32 MiB took 15.3 us after a memset and 12.4 us after a read.
class L2Flush {
 public:
  explicit L2Flush(cudaStream_t stream) : buffer_(nullptr, &cudaFree) {
    int device = 0, l2 = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device), "cudaDeviceGetAttribute");
    check(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
    const std::size_t bytes = 2 * static_cast<std::size_t>(l2);
    void* buffer = nullptr;
    check(cudaMalloc(&buffer, bytes), "cudaMalloc");
    buffer_.reset(buffer);
    check(cudaMemsetAsync(buffer, 0, bytes, stream), "cudaMemsetAsync");
    vectors_ = bytes / 16;
    kernel_ = flush_kernel();
  }
  void enqueue(cudaStream_t stream) {
    void* buffer = buffer_.get();
    void* args[] = {&buffer, &vectors_, &buffer};
    check(cudaLaunchKernel(kernel_, dim3(4 * sms_), dim3(512), args, 0, stream), "L2 flush", FailureKind::kLaunch);
  }

 private:
  std::unique_ptr<void, decltype(&cudaFree)> buffer_;
  unsigned long long vectors_ = 0;
  int sms_ = 0;
  const void* kernel_ = nullptr;
};

/// A stream of its own, what is timed on it and the events that time it. Graphs of runs carry
/// their events as nodes: recorded on the stream around cudaGraphLaunch, they also timed the
/// launch's submission, and a tuner whose host is busy compiling got the same 2.3 us kernel at
/// 2.35, 2.60 and 2.49 us in three rounds on the H100.
class LaunchTimer {
 public:
  using Graph = std::unique_ptr<std::remove_pointer_t<cudaGraphExec_t>, decltype(&cudaGraphExecDestroy)>;

  explicit LaunchTimer(const std::function<int(void* stream)>& launch) : launch_(launch) {
    cudaStream_t stream = nullptr;
    check(cudaStreamCreate(&stream), "cudaStreamCreate");
    stream_.reset(stream);
  }
  cudaStream_t stream() const { return stream_.get(); }
  void launch(const char* what) { check(static_cast<cudaError_t>(launch_(stream())), what, FailureKind::kLaunch); }

  /// `count` runs, each after a flush when `flush` is given, and without the runs when `runs`
  /// is false (the flushes alone); launched once, as a warm-up.
  Graph capture(int count, bool runs, L2Flush* flush) {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    check(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    check(cudaEventRecordWithFlags(start_.get(), stream(), cudaEventRecordExternal), "cudaEventRecordWithFlags");
    for (int i = 0; i < count; ++i) {
      if (flush) flush->enqueue(stream());
      if (runs) launch("graph capture");
    }
    check(cudaEventRecordWithFlags(stop_.get(), stream(), cudaEventRecordExternal), "cudaEventRecordWithFlags");
    check(cudaStreamEndCapture(stream(), &graph), "cudaStreamEndCapture");
    check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    cudaGraphDestroy(graph);
    Graph owned(exec, &cudaGraphExecDestroy);
    check(cudaGraphLaunch(exec, stream()), "graph warm-up");
    return owned;
  }
  /// Milliseconds of one replay of `g`, timed by its own events.
  double replay(const Graph& g) {
    check(cudaGraphLaunch(g.get(), stream()), "graph launch", FailureKind::kLaunch);
    return elapsed();
  }
  /// Milliseconds of one run, timed by events on the stream.
  double run() {
    check(cudaEventRecord(start_.get(), stream()), "cudaEventRecord");
    launch("timed launch");
    check(cudaEventRecord(stop_.get(), stream()), "cudaEventRecord");
    return elapsed();
  }

 private:
  double elapsed() {
    check(cudaEventSynchronize(stop_.get()), "timed kernel");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start_.get(), stop_.get()), "cudaEventElapsedTime");
    return static_cast<double>(ms);
  }

  const std::function<int(void* stream)>& launch_;
  std::unique_ptr<std::remove_pointer_t<cudaStream_t>, decltype(&cudaStreamDestroy)> stream_{nullptr, &cudaStreamDestroy};
  Event start_, stop_;
};

}  // namespace

std::vector<CompileJob> builtin_kernel_sources() {
  return {{"tmap_draw", draw_source()}, {"tmap_l2_error", error_source()}, {"tmap_l2_flush", kFlushSource}};
}

std::vector<double> time_launches(const std::function<int(void* stream)>& launch, const TimingOptions& timing) {
  LaunchTimer timer(launch);
  for (int i = 0; i < timing.warmup; ++i) timer.launch("warm-up launch");
  std::optional<L2Flush> flush;
  if (timing.flush_l2) flush.emplace(timer.stream());
  L2Flush* flushing = flush ? &*flush : nullptr;
  // With graph_runs: one graph of the runs (each after a flush when flushing), and with flushes
  // a second graph of the flushes alone, whose time is taken off.
  LaunchTimer::Graph runs(nullptr, &cudaGraphExecDestroy), flushes(nullptr, &cudaGraphExecDestroy);
  if (timing.graph_runs > 0) {
    runs = timer.capture(timing.graph_runs, true, flushing);
    if (flushing) flushes = timer.capture(timing.graph_runs, false, flushing);
  }
  std::vector<double> times;
  double total_ms = 0;
  while (static_cast<int>(times.size()) < timing.min_repeats || total_ms < timing.min_total_ms) {
    double ms = 0;
    if (runs) {
      ms = timer.replay(runs);
      total_ms += ms;
      // Never below zero, when a tiny kernel drowns in the flushes' noise.
      if (flushes) ms = std::max(0.0, ms - timer.replay(flushes));
    } else {
      if (flushing) flushing->enqueue(timer.stream());
      ms = timer.run();
      total_ms += ms;
    }
    times.push_back(ms * 1000.0 / std::max(1, timing.graph_runs));
    if (times.size() > 100000 || (timing.slow_us > 0 && times.back() > timing.slow_us)) break;
  }
  return times;
}

KernelRun run_candidate(Workspace& ws, const std::vector<double>& reference, int a_tensor, int b_tensor,
                        const KernelSource& k, const std::vector<char>& cubin, const TimingOptions& timing,
                        std::int64_t size) {
  return run_candidate(ws, reference, a_tensor, b_tensor, plan_launch(k), cubin, timing, size);
}

KernelRun run_candidate(Workspace& ws, const std::vector<double>& reference, int a_tensor, int b_tensor,
                        const LaunchPlan& launch, const std::vector<char>& cubin, const TimingOptions& timing,
                        std::int64_t size) {
  KernelRun run;
  const tmap_launch_plan& plan = launch.plan;
  PhaseClock clock;
  try {
    LoadedModule module(cubin, launch.kernels);
    check(tmap_plan_prepare(&plan, module.kernels()), "cudaFuncSetAttribute", FailureKind::kLoad);
    void* workspace = nullptr;
    if (plan.workspace_bytes > 0)
      check(cudaMalloc(&workspace, static_cast<std::size_t>(plan.workspace_bytes)), "cudaMalloc", FailureKind::kLoad);
    std::unique_ptr<void, decltype(&cudaFree)> workspace_owner(workspace, &cudaFree);
    if (plan.zeroed_bytes > 0)  // once: the kernels leave their tile counters zero
      check(cudaMemset(static_cast<unsigned char*>(workspace) + plan.zeroed_offset, 0,
                       static_cast<std::size_t>(plan.zeroed_bytes)),
            "cudaMemset", FailureKind::kLoad);
    void* slots[TMAP_PLAN_MAX_SLOTS] = {};
    slots[kSlotA] = ws.device(a_tensor);
    slots[kSlotB] = ws.device(b_tensor);
    slots[kSlotOut] = ws.device(ws.compute().output.tensor);
    slots[plan.workspace_slot] = workspace;
    const std::vector<Access>& epilogue = ws.compute().epilogue.operands;
    for (std::size_t i = 0; i < epilogue.size(); ++i) slots[kSlotEpilogue + i] = ws.device(epilogue[i].tensor);
    tmap_tensor_map maps[TMAP_PLAN_MAX_MAPS];
    encode_maps(plan, slots, size, maps);
    tmap_launch_cache cache{-1, 0};
    cudaStream_t stream = nullptr;
    check(cudaStreamCreate(&stream), "cudaStreamCreate");
    std::unique_ptr<std::remove_pointer_t<cudaStream_t>, decltype(&cudaStreamDestroy)> stream_owner(stream, &cudaStreamDestroy);
    // One run of the candidate: every launch of its plan.
    auto enqueue = [&](void* s) {
      return static_cast<int>(
          tmap_plan_enqueue(&plan, module.kernels(), slots, maps, size, &cache, static_cast<cudaStream_t>(s)));
    };
    run.phases.load = clock.lap();
    ws.poison_output();
    Event first_start, first_stop;
    check(cudaEventRecord(first_start.get(), stream), "cudaEventRecord");
    check(static_cast<cudaError_t>(enqueue(stream)), "launch", FailureKind::kLaunch);
    check(cudaEventRecord(first_stop.get(), stream), "cudaEventRecord");
    check(cudaStreamSynchronize(stream), "kernel");
    if (!reference.empty()) run.rel_l2 = ws.output_error(reference);
    run.phases.check = clock.lap();
    float first_ms = 0;
    check(cudaEventElapsedTime(&first_ms, first_start.get(), first_stop.get()), "cudaEventElapsedTime");
    TimingOptions effective = timing;
    if (timing.long_run_ms > 0 && first_ms > timing.long_run_ms) {
      effective.graph_runs = 0;
      effective.warmup = std::min(timing.warmup, 1);
      effective.min_repeats = std::min(timing.min_repeats, 3);
      effective.min_total_ms = 0;
    }

    run.times_us = time_launches(enqueue, effective);
    run.phases.time = clock.lap();
    // A plan whose kernels keep state in the workspace between launches (the tile counters of a
    // last-block split-K sum) must still be right after the timed runs: run it once more on a
    // poisoned output, and report the worse error.
    if (!reference.empty() && plan.zeroed_bytes > 0) {
      ws.poison_output();
      check(static_cast<cudaError_t>(enqueue(stream)), "launch", FailureKind::kLaunch);
      check(cudaStreamSynchronize(stream), "kernel");
      const double again = ws.output_error(reference);
      if (!(again <= run.rel_l2)) run.rel_l2 = again;  // NaN included
      run.phases.check += clock.lap();
    }
  } catch (const CudaFailure& e) {
    run.error = e.what();
    run.failure = e.kind;
    return run;
  }
  run.median_us = median_of(run.times_us);
  run.ok = true;
  return run;
}

}  // namespace tmap
