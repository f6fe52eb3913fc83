#include "tmap/runtime/kernel_runner.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

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
    case DType::kInt4: return std::round(v * 7);
    case DType::kFloat64: return v;
  }
  return v;
}

std::vector<unsigned char> to_bytes(const std::vector<double>& values, DType t) {
  std::vector<unsigned char> out;
  auto put = [&](const auto& x) {
    const auto* p = reinterpret_cast<const unsigned char*>(&x);
    out.insert(out.end(), p, p + sizeof x);
  };
  for (double v : values) {
    switch (t) {
      case DType::kFloat16: put(__float2half(static_cast<float>(v))); break;
      case DType::kBFloat16: put(__float2bfloat16(static_cast<float>(v))); break;
      case DType::kFloat32:
      case DType::kTFloat32: put(static_cast<float>(v)); break;
      case DType::kFloat64: put(v); break;
      case DType::kInt8: put(static_cast<signed char>(v)); break;
      case DType::kInt32: put(static_cast<int>(v)); break;
      case DType::kInt4: TMAP_CHECK(false, "int4 tensors are not supported by the runner yet");
    }
  }
  return out;
}

std::vector<double> from_bytes(const std::vector<unsigned char>& bytes, DType t, std::size_t n) {
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    switch (t) {
      case DType::kFloat16: { __half h; std::memcpy(&h, &bytes[i * 2], 2); out[i] = __half2float(h); break; }
      case DType::kBFloat16: { __nv_bfloat16 h; std::memcpy(&h, &bytes[i * 2], 2); out[i] = __bfloat162float(h); break; }
      case DType::kFloat32:
      case DType::kTFloat32: { float f; std::memcpy(&f, &bytes[i * 4], 4); out[i] = f; break; }
      case DType::kFloat64: std::memcpy(&out[i], &bytes[i * 8], 8); break;
      case DType::kInt8: out[i] = static_cast<signed char>(bytes[i]); break;
      case DType::kInt32: { int v; std::memcpy(&v, &bytes[i * 4], 4); out[i] = v; break; }
      case DType::kInt4: break;
    }
  }
  return out;
}

std::size_t element_bytes(DType t) { return t == DType::kInt4 ? 1 : static_cast<std::size_t>(dtype_bits(t) / 8); }

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

}  // namespace

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

KernelRun run_kernel(const ImplicitGemm& g, const KernelSource& k, const std::vector<char>& cubin, std::uint64_t seed,
                     int warmup, int repeats) {
  const Compute& c = *g.compute;
  KernelRun run;
  auto failed = [&](cudaError_t e, const char* what) {
    if (e == cudaSuccess) return false;
    run.error = std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
    return true;
  };
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<std::vector<double>> values(c.tensors.size());
  for (const auto& in : c.inputs) {
    const Tensor& t = c.tensor_of(in);
    values[in.tensor].resize(static_cast<std::size_t>(t.num_elements()));
    for (auto& v : values[in.tensor]) v = quantize(uniform(rng), t.dtype);
  }
  std::vector<double> ref = cpu_reference(c, values);

  std::vector<void*> dev(c.tensors.size(), nullptr);
  cudaLibrary_t lib = nullptr;
  auto cleanup = [&] {
    for (void* p : dev) cudaFree(p);
    if (lib) cudaLibraryUnload(lib);
  };
  for (std::size_t i = 0; i < c.tensors.size(); ++i) {
    const Tensor& t = c.tensors[i];
    std::size_t bytes = static_cast<std::size_t>(t.num_elements()) * element_bytes(t.dtype);
    if (failed(cudaMalloc(&dev[i], bytes), "cudaMalloc")) return cleanup(), run;
    if (static_cast<int>(i) == c.output.tensor) {
      // Poison: all bits set is NaN for floats and -1 for integers, so unwritten elements fail.
      if (failed(cudaMemset(dev[i], 0xFF, bytes), "cudaMemset")) return cleanup(), run;
    } else {
      auto host = to_bytes(values[i], t.dtype);
      if (failed(cudaMemcpy(dev[i], host.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy")) return cleanup(), run;
    }
  }
  if (failed(cudaLibraryLoadData(&lib, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0), "cudaLibraryLoadData"))
    return cleanup(), run;
  cudaKernel_t kernel = nullptr;
  if (failed(cudaLibraryGetKernel(&kernel, lib, k.name.c_str()), "cudaLibraryGetKernel")) return cleanup(), run;
  if (failed(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(k.shared_bytes)),
             "cudaFuncSetAttribute"))
    return cleanup(), run;
  void* a = dev[c.inputs[g.a_input].tensor];
  void* b = dev[c.inputs[g.b_input].tensor];
  void* out = dev[c.output.tensor];
  void* args[] = {&a, &b, &out};
  dim3 grid(static_cast<unsigned>(k.grid[0]), static_cast<unsigned>(k.grid[1]), static_cast<unsigned>(k.grid[2]));
  auto launch = [&] {
    return cudaLaunchKernel(reinterpret_cast<const void*>(kernel), grid, dim3(k.threads), args,
                            static_cast<std::size_t>(k.shared_bytes), nullptr);
  };
  if (failed(launch(), "launch") || failed(cudaDeviceSynchronize(), "kernel")) return cleanup(), run;

  const Tensor& out_t = c.tensor_of(c.output);
  std::vector<unsigned char> host(static_cast<std::size_t>(out_t.num_elements()) * element_bytes(out_t.dtype));
  if (failed(cudaMemcpy(host.data(), out, host.size(), cudaMemcpyDeviceToHost), "cudaMemcpy")) return cleanup(), run;
  std::vector<double> got = from_bytes(host, out_t.dtype, ref.size());
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    double d = got[i] - ref[i];
    num += std::isnan(d) ? INFINITY : d * d;
    den += ref[i] * ref[i];
  }
  run.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);

  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int i = 0; i < warmup; ++i) launch();
  for (int i = 0; i < repeats; ++i) {
    cudaEventRecord(start);
    launch();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    run.times_us.push_back(ms * 1000.0);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (failed(cudaGetLastError(), "timed launches")) return cleanup(), run;
  std::vector<double> sorted = run.times_us;
  std::sort(sorted.begin(), sorted.end());
  run.median_us = sorted.empty() ? 0 : sorted[sorted.size() / 2];
  run.ok = true;
  cleanup();
  return run;
}

}  // namespace tmap
