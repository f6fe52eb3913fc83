// What the CUDA runtime sees: driver, devices and the NVRTC version. tmap links the static
// CUDA runtime and never libcuda, so this works, and says so, on a machine without a driver.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace tmap {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int compute_capability = 0;  ///< e.g. 90 for sm_90.
  int sm_count = 0;
  std::size_t global_memory_bytes = 0;
  std::string uuid;  ///< "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi prints it.
};

struct RuntimeInfo {
  int runtime_version = 0;  ///< CUDART_VERSION style: 13000 for 13.0.
  int driver_version = 0;   ///< 0 when no driver is installed.
  int nvrtc_major = 0, nvrtc_minor = 0;
  std::vector<DeviceInfo> devices;
  std::string status;  ///< Why no device is usable, empty when there is one.
};

/// Queries the runtime once; never fails (problems land in `status`).
RuntimeInfo query_runtime();

/// Makes `index` (of the visible devices) the calling thread's device; a UserError naming it
/// when there is no such device.
void select_device(int index);

/// "13.0" from 13000.
std::string cuda_version_text(int version);

}  // namespace tmap
