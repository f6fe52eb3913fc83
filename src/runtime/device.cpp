#include "tmap/runtime/device.h"

#include <cuda_runtime_api.h>
#include <nvrtc.h>

namespace tmap {

std::string cuda_version_text(int version) {
  if (version <= 0) return "none";
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

RuntimeInfo query_runtime() {
  RuntimeInfo info;
  cudaRuntimeGetVersion(&info.runtime_version);
  nvrtcVersion(&info.nvrtc_major, &info.nvrtc_minor);
  if (cudaDriverGetVersion(&info.driver_version) != cudaSuccess || info.driver_version == 0) {
    info.driver_version = 0;
    info.status = "no CUDA driver is installed: tmap can match, generate and compile, but not run kernels";
    return info;
  }
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    info.status = std::string("no usable CUDA device: ") + cudaGetErrorString(err);
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return info;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    info.devices.push_back({i, prop.name, prop.major * 10 + prop.minor, prop.multiProcessorCount, prop.totalGlobalMem});
  }
  if (info.devices.empty()) info.status = "the CUDA driver reports no device";
  return info;
}

}  // namespace tmap
