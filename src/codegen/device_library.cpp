#include "tmap/codegen/device_library.h"

#include <functional>
#include <set>

#include "tmap/support/diagnostic.h"

namespace tmap {
namespace embedded {
// include/tmap/device/*.cuh, embedded at build time (CMakeLists.txt, tmap_embed).
extern const char kDevice_smem[], kDevice_cp_async[], kDevice_ldmatrix[], kDevice_mbarrier[], kDevice_tma[],
    kDevice_cluster[], kDevice_wgmma[], kDevice_shift[], kDevice_swizzle[], kDevice_relayout[],
    kDevice_epilogue[], kDevice_grid_flag[], kDevice_stream_k[];
}  // namespace embedded

const std::vector<DeviceHeader>& device_headers() {
  static const std::vector<DeviceHeader> all = {
      {"tmap/device/smem.cuh", embedded::kDevice_smem},         {"tmap/device/cp_async.cuh", embedded::kDevice_cp_async},
      {"tmap/device/ldmatrix.cuh", embedded::kDevice_ldmatrix}, {"tmap/device/mbarrier.cuh", embedded::kDevice_mbarrier},
      {"tmap/device/tma.cuh", embedded::kDevice_tma},           {"tmap/device/cluster.cuh", embedded::kDevice_cluster},
      {"tmap/device/wgmma.cuh", embedded::kDevice_wgmma},       {"tmap/device/shift.cuh", embedded::kDevice_shift},
      {"tmap/device/swizzle.cuh", embedded::kDevice_swizzle},   {"tmap/device/relayout.cuh", embedded::kDevice_relayout},
      {"tmap/device/epilogue.cuh", embedded::kDevice_epilogue}, {"tmap/device/grid_flag.cuh", embedded::kDevice_grid_flag},
      {"tmap/device/stream_k.cuh", embedded::kDevice_stream_k},
  };
  return all;
}

const std::string& device_library_fingerprint() {
  static const std::string fingerprint = [] {
    std::string all;
    for (const DeviceHeader& h : device_headers()) all.append(h.file).append(h.text);
    return "device library " + std::to_string(std::hash<std::string>{}(all));
  }();
  return fingerprint;
}

namespace {

const DeviceHeader* find_header(std::string_view file) {
  for (const DeviceHeader& h : device_headers())
    if (h.file == file) return &h;
  return nullptr;
}

/// The header a line includes, if it is `#include "tmap/device/..."`.
const DeviceHeader* included_header(std::string_view line) {
  constexpr std::string_view kPrefix = "#include \"";
  if (line.substr(0, kPrefix.size()) != kPrefix || line.size() < kPrefix.size() + 1) return nullptr;
  const std::size_t end = line.find('"', kPrefix.size());
  if (end == std::string_view::npos) return nullptr;
  return find_header(line.substr(kPrefix.size(), end - kPrefix.size()));
}

void expand(std::string_view text, std::set<std::string_view>& done, std::string& out) {
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t nl = text.find('\n', at);
    if (nl == std::string_view::npos) nl = text.size();
    const std::string_view line = text.substr(at, nl - at);
    if (const DeviceHeader* h = included_header(line)) {
      if (done.insert(h->file).second) expand(h->text, done, out);
    } else {
      out.append(line);
      if (nl < text.size()) out += '\n';
    }
    at = nl + 1;
  }
}

}  // namespace

void emit_device_include(std::ostringstream& os, std::string_view name) {
  const std::string file = "tmap/device/" + std::string(name) + ".cuh";
  TMAP_CHECK(find_header(file) != nullptr, "no device header " + file);
  os << "#include \"" << file << "\"\n";
}

void gather_device_includes(std::string& code) {
  std::string includes, rest;
  std::set<std::string_view> seen;
  std::size_t insert_at = std::string::npos, at = 0;
  while (at < code.size()) {
    std::size_t nl = code.find('\n', at);
    nl = nl == std::string::npos ? code.size() : nl + 1;
    const std::string_view line = std::string_view(code).substr(at, nl - at);
    at = nl;
    if (const DeviceHeader* h = included_header(line)) {
      if (seen.insert(h->file).second) includes.append(line);
      continue;
    }
    const bool preamble = line == "\n" || line.substr(0, 2) == "//" || line.substr(0, 8) == "#include";
    if (!preamble && insert_at == std::string::npos) insert_at = rest.size();
    rest.append(line);
  }
  if (includes.empty()) return;
  if (insert_at == std::string::npos) insert_at = rest.size();
  code = rest.insert(insert_at, includes + "using namespace tmap::device;\n\n");
}

std::string self_contained(const std::string& source) {
  std::set<std::string_view> done;
  std::string out;
  expand(source, done, out);
  return out;
}

}  // namespace tmap
