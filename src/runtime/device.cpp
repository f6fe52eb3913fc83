#include "tmap/runtime/device.h"

#include <cuda_runtime_api.h>
#include <nvrtc.h>

#include <cstdio>

#include "tmap/support/diagnostic.h"

namespace tmap {

std::string cuda_version_text(int version) {
  if (version <= 0) return "none";
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

namespace {

/// The 16 bytes of a device's UUID in nvidia-smi's spelling.
std::string uuid_text(const cudaUUID_t& u) {
  std::string s = "GPU-";
  for (int i = 0; i < 16; ++i) {
    char hex[3];
    std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned char>(u.bytes[i]));
    s += hex;
    if (i == 3 || i == 5 || i == 7 || i == 9) s += '-';
  }
  return s;
}

}  // namespace

void select_device(int index) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || index < 0 || index >= count) {
    cudaGetLastError();
    throw UserError("device " + std::to_string(index) + " is not one of the " + std::to_string(count) +
                    " visible CUDA devices; give an index below that (CUDA_VISIBLE_DEVICES renumbers them from 0)");
  }
  if (cudaError_t err = cudaSetDevice(index); err != cudaSuccess)
    throw UserError("cannot use CUDA device " + std::to_string(index) + ": " + cudaGetErrorString(err));
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
    info.devices.push_back({i, prop.name, prop.major * 10 + prop.minor, prop.multiProcessorCount, prop.totalGlobalMem,
                            uuid_text(prop.uuid)});
  }
  if (info.devices.empty()) info.status = "the CUDA driver reports no device";
  return info;
}

}  // namespace tmap
