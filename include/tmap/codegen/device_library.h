#pragma once
// tmap's device library: the CUDA headers under include/tmap/device/, embedded in the binary at
// build time. Generated kernels include them by name; NVRTC is given their text (see
// NvrtcCompiler); a kernel source written for others has them expanded in place.

#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace tmap {

struct DeviceHeader {
  std::string_view file;  ///< As kernels include it: "tmap/device/cp_async.cuh".
  std::string_view text;
};

/// Every header of the library.
const std::vector<DeviceHeader>& device_headers();

/// A fingerprint of the whole library's text, part of compile-cache keys.
const std::string& device_library_fingerprint();

/// Writes the line by which a kernel includes header `name` ("cp_async" for
/// tmap/device/cp_async.cuh), where an emitter needs the header's functions; the finished kernel
/// has these lines gathered at its top by gather_device_includes().
void emit_device_include(std::ostringstream& os, std::string_view name);

/// Moves the device-library includes of a kernel source to the top, each once, before its first
/// line that is not a comment or an include, followed by `using namespace tmap::device;`.
void gather_device_includes(std::string& code);

/// `source` with each include of a library header replaced by the header's text (its first
/// include; later ones dropped): a kernel source that compiles without tmap's headers.
std::string self_contained(const std::string& source);

}  // namespace tmap
