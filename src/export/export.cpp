#include "tmap/export/export.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "tmap/codegen/reference_emitter.h"
#include "tmap/support/diagnostic.h"
#include "tmap/tune/tuner.h"

namespace tmap {
namespace {

namespace fs = std::filesystem;

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

/// Replaces every whole-identifier occurrence of `from` in `code`.
std::string replace_identifier(const std::string& code, const std::string& from, const std::string& to) {
  std::string out;
  std::size_t pos = 0;
  while (true) {
    const std::size_t at = code.find(from, pos);
    if (at == std::string::npos) break;
    const bool starts = at == 0 || !ident_char(code[at - 1]);
    const bool ends = at + from.size() >= code.size() || !ident_char(code[at + from.size()]);
    out += code.substr(pos, at - pos) + (starts && ends ? to : from);
    pos = at + from.size();
  }
  return out + code.substr(pos);
}

std::string identifier(const std::string& s) {
  std::string out;
  for (char c : s) out += ident_char(c) ? c : '_';
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "w" + out;
  return out.substr(0, 48);
}

const char* tensor_map_type(DType t) {
  switch (t) {
    case DType::kFloat16: return "CU_TENSOR_MAP_DATA_TYPE_FLOAT16";
    case DType::kBFloat16: return "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16";
    case DType::kFloat32:
    case DType::kTFloat32: return "CU_TENSOR_MAP_DATA_TYPE_FLOAT32";
    case DType::kInt32: return "CU_TENSOR_MAP_DATA_TYPE_INT32";
    case DType::kFloat64: return "CU_TENSOR_MAP_DATA_TYPE_FLOAT64";
    default: return "CU_TENSOR_MAP_DATA_TYPE_UINT8";
  }
}

template <typename T, std::size_t N>
std::string array_text(const std::array<T, N>& a, int n) {
  std::string s = "{";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(a[i]) + (sizeof(T) == 8 ? "ull" : "u");
  return s + "}";
}

/// The type a launch function takes tensor `t` as: a device pointer, const for inputs.
std::string pointer_type(const Compute& c, std::size_t t) {
  return std::string(static_cast<int>(t) == c.output.tensor ? "" : "const ") + storage_type(c.tensors[t].dtype) + "*";
}

/// The parameter list of a launch function: the compute's tensors, inputs const.
std::string signature(const Compute& c, const std::string& fn) {
  std::string s = "cudaError_t " + fn + "(";
  for (std::size_t t = 0; t < c.tensors.size(); ++t)
    s += (t ? ", " : "") + pointer_type(c, t) + " " + identifier(c.tensors[t].name);
  return s + ", cudaStream_t stream)";
}

std::string shape_text(const Tensor& t) {
  std::string s = "[";
  for (std::size_t i = 0; i < t.shape.size(); ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
  return s + "] " + std::string(dtype_name(t.dtype));
}

/// The alignment the launch functions require of every tensor pointer (checked before launching).
constexpr int kPointerAlignment = 16;

struct Piece {
  std::string fn, kernel, reduce, prologue, reference;
  Regenerated g;
  KernelSource ref;
  const TuneRecord* record = nullptr;
};

void write(const fs::path& p, const std::string& text) {
  std::ofstream out(p);
  if (!(out << text)) throw UserError(format_diagnostic(SourceLoc::whole(p.string()), "cannot write the file", "check the --out directory"));
}

std::string launcher(const Piece& x, int cc) {
  const Compute& c = *x.g.compute;
  const KernelSource& k = x.g.kernel;
  const ImplicitGemm& gm = x.g.gemm();
  std::ostringstream os;
  os << "extern \"C\" " << signature(c, x.fn) << " {\n";
  os << "  // Device pointers aligned to " << kPointerAlignment
     << " bytes: the kernels move 16-byte vectors (and TMA needs them).\n  const void* const pointers[] = {";
  for (std::size_t t = 0; t < c.tensors.size(); ++t) os << (t ? ", " : "") << identifier(c.tensors[t].name);
  os << "};\n  for (const void* p : pointers)\n"
     << "    if (p == nullptr || reinterpret_cast<unsigned long long>(p) % " << kPointerAlignment
     << " != 0) return cudaErrorInvalidValue;\n";
  os << "  const void* a = " << identifier(c.tensors[c.inputs[gm.a_input].tensor].name) << ";  // operand A\n";
  os << "  const void* b = " << identifier(c.tensors[c.inputs[gm.b_input].tensor].name) << ";  // operand B\n";
  os << "  void* out = " << identifier(c.tensors[c.output.tensor].name) << ";\n";
  os << "  void* workspace = nullptr;\n  cudaError_t e = cudaSuccess;\n";
  if (k.shared_bytes > 48 * 1024)
    os << "  e = cudaFuncSetAttribute(reinterpret_cast<const void*>(" << x.kernel
       << "), cudaFuncAttributeMaxDynamicSharedMemorySize, " << k.shared_bytes << ");\n  if (e != cudaSuccess) return e;\n";
  // The main kernel's grid; a persistent one takes its tiles with a grid stride, in as many
  // blocks as stay resident at once.
  const std::string grid = k.persistent ? "dim3(blocks)"
                                        : "dim3(" + std::to_string(k.grid[0]) + ", " + std::to_string(k.grid[1]) + ", " +
                                              std::to_string(k.grid[2]) + ")";
  if (k.persistent) {
    os << "  unsigned blocks = " << k.grid[0] << ";  // tiles of the persistent kernel\n  {\n"
       << "    int device = 0, sms = 0, per_sm = 0;\n"
       << "    e = cudaGetDevice(&device);\n"
       << "    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);\n";
    if (k.cluster_x > 1)  // clusters are placed whole, within one GPC: as many as fit at once
      os << "    (void)per_sm;\n"
         << "    cudaLaunchConfig_t config = {};\n"
         << "    config.gridDim = dim3(blocks);\n    config.blockDim = dim3(" << k.threads << ");\n"
         << "    config.dynamicSmemBytes = " << k.shared_bytes << ";\n"
         << "    int clusters = 0;\n"
         << "    if (e == cudaSuccess)\n"
         << "      e = cudaOccupancyMaxActiveClusters(&clusters, reinterpret_cast<const void*>(" << x.kernel
         << "), &config);\n"
         << "    if (e != cudaSuccess) return e;\n"
         << "    const unsigned long long resident = (unsigned long long)(clusters > 0 ? clusters : 1) * " << k.cluster_x
         << ";\n";
    else
      os << "    if (e == cudaSuccess)\n"
         << "      e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, reinterpret_cast<const void*>(" << x.kernel
         << "), " << k.threads << ", " << k.shared_bytes << ");\n"
         << "    if (e != cudaSuccess) return e;\n"
         << "    const unsigned long long resident = (unsigned long long)sms * (per_sm > 0 ? per_sm : 1);\n";
    os << "    if (resident < blocks) blocks = (unsigned)resident;\n  }\n";
  }
  if (k.workspace_bytes > 0)
    os << "  e = cudaMallocAsync(&workspace, " << k.workspace_bytes
       << ", stream);  // split-K partial sums, channels-last copies of operands\n"
       << "  if (e != cudaSuccess) return e;\n";
  if (!k.relayout_name.empty()) {
    os << "  {  // the relayout prologue: the operands copied channels-last into the workspace\n"
       << "    void* prologue_args[] = {&a, &b, &workspace};\n"
       << "    e = cudaLaunchKernel(reinterpret_cast<const void*>(" << x.prologue << "), dim3(" << k.relayout_blocks
       << "), dim3(" << k.relayout_threads << "), prologue_args, 0, stream);\n"
       << "    if (e != cudaSuccess) {\n      cudaFreeAsync(workspace, stream);\n      return e;\n    }\n  }\n";
    for (int which = 0; which < 2; ++which)
      if (k.relayout_offset[which] >= 0)
        os << "  " << (which == 0 ? "a" : "b") << " = static_cast<char*>(workspace) + " << k.relayout_offset[which]
           << ";  // the kernel reads the copy\n";
  }
  for (std::size_t i = 0; i < k.tensor_maps.size(); ++i) {
    const TensorMapSpec& m = k.tensor_maps[i];
    os << "  alignas(64) CUtensorMap map" << i << ";\n  {\n"
       << "    const unsigned long long dims[] = " << array_text(m.dims, m.rank) << ";\n"
       << "    const unsigned long long strides[] = " << (m.rank > 1 ? array_text(m.strides, m.rank - 1) : "{0ull}") << ";\n"
       << "    const unsigned box[] = " << array_text(m.box, m.rank) << ";\n";
    if (m.im2col) {
      auto ints = [&](const std::array<int, 3>& v) {
        std::string t = "{";
        for (int d = 0; d < m.rank - 2; ++d) t += (d ? ", " : "") + std::to_string(v[d]);
        return t + "}";
      };
      os << "    const int lower[] = " << ints(m.lower) << ", upper[] = " << ints(m.upper) << ";\n"
         << "    const unsigned traversal[] = " << array_text(m.traversal, m.rank) << ";\n"
         << "    e = tmap_encode_im2col_map(&map" << i << ", " << tensor_map_type(m.dtype) << ", " << m.rank << ", "
         << (m.operand == 0 ? "a" : "b") << ", dims, strides, lower, upper, box[0], box[1], traversal, "
         << m.swizzle_bytes << ");\n";
    } else {
      os << "    e = tmap_encode_tensor_map(&map" << i << ", " << tensor_map_type(m.dtype) << ", " << m.rank << ", "
         << (m.operand == 0 ? "a" : "b") << ", dims, strides, box, " << m.swizzle_bytes << ");\n";
    }
    os
       << "    if (e != cudaSuccess) {\n" << (k.workspace_bytes > 0 ? "      cudaFreeAsync(workspace, stream);\n" : "")
       << "      return e;\n    }\n  }\n";
  }
  os << "  void* args[] = {&a, &b, &out, &workspace";
  for (std::size_t i = 0; i < k.tensor_maps.size(); ++i) os << ", &map" << i;
  os << "};\n";
  if (!k.relayout_name.empty() && cc >= 90)
    os << "  {  // a programmatic dependent of the prologue: it waits (griddepcontrol.wait) for the copies\n"
       << "    cudaLaunchConfig_t config = {};\n"
       << "    config.gridDim = " << grid << ";\n"
       << "    config.blockDim = dim3(" << k.threads << ");\n    config.dynamicSmemBytes = " << k.shared_bytes << ";\n"
       << "    config.stream = stream;\n"
       << "    cudaLaunchAttribute attribute = {};\n"
       << "    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;\n"
       << "    attribute.val.programmaticStreamSerializationAllowed = 1;\n"
       << "    config.attrs = &attribute;\n    config.numAttrs = 1;\n"
       << "    e = cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(" << x.kernel << "), args);\n  }\n";
  else
    os << "  e = cudaLaunchKernel(reinterpret_cast<const void*>(" << x.kernel << "), " << grid << ", dim3(" << k.threads
       << "), args, " << k.shared_bytes << ", stream);\n";
  if (!k.reduce_name.empty()) {
    os << "  if (e == cudaSuccess) {  // the split-K sums into the output\n    void* reduce_args[] = {&workspace, &out};\n"
       << "    cudaLaunchConfig_t config = {};\n"
       << "    config.gridDim = dim3(" << k.reduce_blocks << ");\n    config.blockDim = dim3(" << k.reduce_threads << ");\n"
       << "    config.stream = stream;\n";
    if (cc >= 90)
      os << "    // A programmatic dependent launch: it starts as the main kernel's last blocks finish and\n"
         << "    // waits (griddepcontrol.wait) for its partial sums.\n"
         << "    cudaLaunchAttribute attribute = {};\n"
         << "    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;\n"
         << "    attribute.val.programmaticStreamSerializationAllowed = 1;\n"
         << "    config.attrs = &attribute;\n    config.numAttrs = 1;\n";
    os << "    e = cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(" << x.reduce << "), reduce_args);\n  }\n";
  }
  if (k.workspace_bytes > 0) os << "  const cudaError_t freed = cudaFreeAsync(workspace, stream);\n  if (e == cudaSuccess) e = freed;\n";
  os << "  return e;\n}\n";
  return os.str();
}

std::string host_value(DType t, const std::string& v) {
  switch (t) {
    case DType::kFloat16: return "__half2float(" + v + ")";
    case DType::kBFloat16: return "__bfloat162float(" + v + ")";
    default: return "static_cast<double>(" + v + ")";
  }
}

std::string host_store(DType t, const std::string& v) {
  switch (t) {
    case DType::kFloat16: return "__float2half(" + v + ")";
    case DType::kBFloat16: return "__float2bfloat16(" + v + ")";
    case DType::kInt8: return "static_cast<signed char>(std::lround(" + v + " * 4))";
    case DType::kInt32: return "static_cast<int>(std::lround(" + v + " * 4))";
    default: return v;
  }
}

/// The check program's argument phase for one launch function: every pointer null, then every
/// pointer 2 bytes past an aligned address, must be refused (cudaErrorInvalidValue) before
/// anything reaches the GPU, so this runs on machines without one.
std::string arguments_function(const Piece& x, int index) {
  const Compute& c = *x.g.compute;
  std::ostringstream os;
  os << "static bool arguments_" << index << "() {\n  bool ok = true;\n"
     << "  for (const unsigned long long address : {0ull, 0x10000ull + 2}) {\n"
     << "    const cudaError_t e = " << x.fn << "(";
  for (std::size_t t = 0; t < c.tensors.size(); ++t)
    os << (t ? ", " : "") << "reinterpret_cast<" << pointer_type(c, t) << ">(address)";
  os << ", nullptr);\n"
     << "    if (e != cudaErrorInvalidValue) {\n"
     << "      std::printf(\"%-40s pointer %#llx: not refused (error %d)\\n\", \"" << x.fn << "\", address, static_cast<int>(e));\n"
     << "      ok = false;\n    }\n  }\n  return ok;\n}\n\n";
  return os.str();
}

std::string check_function(const Piece& x, int index) {
  const Compute& c = *x.g.compute;
  const DType out_t = c.tensors[c.output.tensor].dtype;
  const double tol = verification_tolerance(*x.g.gemm().hw);
  std::ostringstream os;
  os << "// " << x.fn << ": " << c.statement_text() << "\n";
  os << "static bool check_" << index << "(unsigned seed) {\n";
  for (std::size_t t = 0; t < c.tensors.size(); ++t) {
    const std::string ty = storage_type(c.tensors[t].dtype);
    os << "  const size_t n" << t << " = " << c.tensors[t].num_elements() << ";\n";
    os << "  std::vector<" << ty << "> h" << t << "(n" << t << ");\n";
    if (static_cast<int>(t) != c.output.tensor)
      os << "  for (size_t i = 0; i < n" << t << "; ++i) h" << t << "[i] = " << host_store(c.tensors[t].dtype, "uniform(seed)")
         << ";\n";
    os << "  " << ty << "* d" << t << " = nullptr;\n  CHECK(cudaMalloc(&d" << t << ", n" << t << " * sizeof(" << ty << ")));\n";
    if (static_cast<int>(t) != c.output.tensor)
      os << "  CHECK(cudaMemcpy(d" << t << ", h" << t << ".data(), n" << t << " * sizeof(" << ty << "), cudaMemcpyHostToDevice));\n";
  }
  const int o = c.output.tensor;
  const std::string oty = storage_type(out_t);
  os << "  // The reference kernel (from the IR alone), then the tuned kernel on a poisoned output.\n";
  os << "  {\n    void* args[] = {";
  for (std::size_t t = 0; t < c.tensors.size(); ++t) os << (t ? ", " : "") << "&d" << t;
  os << "};\n    CHECK(" << x.reference << "_launch(args));\n    CHECK(cudaDeviceSynchronize());\n  }\n";
  os << "  CHECK(cudaMemcpy(h" << o << ".data(), d" << o << ", n" << o << " * sizeof(" << oty << "), cudaMemcpyDeviceToHost));\n";
  os << "  std::vector<double> ref(n" << o << ");\n  for (size_t i = 0; i < n" << o << "; ++i) ref[i] = "
     << host_value(out_t, "h" + std::to_string(o) + "[i]") << ";\n";
  os << "  CHECK(cudaMemset(d" << o << ", 0xFF, n" << o << " * sizeof(" << oty << ")));\n";
  std::string call = x.fn + "(";
  for (std::size_t t = 0; t < c.tensors.size(); ++t) call += (t ? ", " : "") + std::string("d") + std::to_string(t);
  call += ", stream)";
  os << "  cudaStream_t stream;\n  CHECK(cudaStreamCreate(&stream));\n";
  os << "  CHECK(" << call << ");\n  CHECK(cudaStreamSynchronize(stream));\n";
  os << "  CHECK(cudaMemcpy(h" << o << ".data(), d" << o << ", n" << o << " * sizeof(" << oty << "), cudaMemcpyDeviceToHost));\n";
  os << "  double num = 0, den = 0;\n  for (size_t i = 0; i < n" << o << "; ++i) {\n    const double v = "
     << host_value(out_t, "h" + std::to_string(o) + "[i]") << ";\n    num += (v - ref[i]) * (v - ref[i]);\n    den += ref[i] * ref[i];\n  }\n";
  os << "  const double err = std::isnan(num) ? INFINITY : std::sqrt(num / (den > 0 ? den : 1));\n";
  os << "  // Time: 3 warm-up runs, then the median of 20 event-timed ones.\n";
  os << "  for (int i = 0; i < 3; ++i) CHECK(" << call << ");\n";
  os << "  cudaEvent_t t0, t1;\n  CHECK(cudaEventCreate(&t0));\n  CHECK(cudaEventCreate(&t1));\n  std::vector<float> ms;\n";
  os << "  for (int i = 0; i < 20; ++i) {\n    CHECK(cudaEventRecord(t0, stream));\n    CHECK(" << call
     << ");\n    CHECK(cudaEventRecord(t1, stream));\n    CHECK(cudaEventSynchronize(t1));\n    float m = 0;\n"
        "    CHECK(cudaEventElapsedTime(&m, t0, t1));\n    ms.push_back(m);\n  }\n";
  os << "  std::sort(ms.begin(), ms.end());\n";
  os << "  const bool ok = err <= " << tol << ";\n";
  os << "  std::printf(\"%-40s rel L2 %.2e (tolerance " << tol << ") %s  %9.2f us (logged " << x.record->result.median_us
     << " us)\\n\", \"" << x.fn << "\", err, ok ? \"ok   \" : \"WRONG\", ms[ms.size() / 2] * 1000.0);\n";
  os << "  cudaEventDestroy(t0);\n  cudaEventDestroy(t1);\n  cudaStreamDestroy(stream);\n";
  for (std::size_t t = 0; t < c.tensors.size(); ++t) os << "  cudaFree(d" << t << ");\n";
  os << "  return ok;\n}\n\n";
  return os.str();
}

constexpr const char* kRuntime = R"(// TMA descriptors for the kernels that read operands with the Tensor Memory Accelerator.
// cuTensorMapEncodeTiled is a driver function: it is looked up through the runtime, so that
// the library never links libcuda.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include "tmap_kernels.h"

// The CUtensorMapSwizzle of lines of `bytes` (128, 64 or 32).
static CUtensorMapSwizzle tmap_swizzle(int bytes) {
  return bytes == 32 ? CU_TENSOR_MAP_SWIZZLE_32B : bytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B;
}

// A driver function looked up through the runtime; nullptr with a driver older than CUDA 12.
static void* tmap_driver_entry(const char* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  const cudaError_t e = cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found);
  return e == cudaSuccess && found == cudaDriverEntryPointSuccess ? p : nullptr;
}

extern "C" cudaError_t tmap_encode_tensor_map(void* map, int dtype, int rank, const void* base,
                                              const unsigned long long* dims, const unsigned long long* strides,
                                              const unsigned* box, int swizzle_bytes) {
  static const auto encode =
      reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(tmap_driver_entry("cuTensorMapEncodeTiled"));
  if (!encode) return cudaErrorNotSupported;  // a driver older than CUDA 12
  const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  const CUresult r = encode(static_cast<CUtensorMap*>(map), static_cast<CUtensorMapDataType>(dtype),
                            static_cast<cuuint32_t>(rank), const_cast<void*>(base), reinterpret_cast<const cuuint64_t*>(dims),
                            reinterpret_cast<const cuuint64_t*>(strides), box, element_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, tmap_swizzle(swizzle_bytes),
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

extern "C" cudaError_t tmap_encode_im2col_map(void* map, int dtype, int rank, const void* base,
                                              const unsigned long long* dims, const unsigned long long* strides,
                                              const int* lower, const int* upper, unsigned channels, unsigned pixels,
                                              const unsigned* traversal, int swizzle_bytes) {
  static const auto encode =
      reinterpret_cast<PFN_cuTensorMapEncodeIm2col_v12000>(tmap_driver_entry("cuTensorMapEncodeIm2col"));
  if (!encode) return cudaErrorNotSupported;  // a driver older than CUDA 12
  const CUresult r = encode(static_cast<CUtensorMap*>(map), static_cast<CUtensorMapDataType>(dtype),
                            static_cast<cuuint32_t>(rank), const_cast<void*>(base), reinterpret_cast<const cuuint64_t*>(dims),
                            reinterpret_cast<const cuuint64_t*>(strides), lower, upper, channels, pixels, traversal,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, tmap_swizzle(swizzle_bytes),
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}
)";

}  // namespace

std::vector<ExportedKernel> export_kernels(const std::vector<const TuneRecord*>& records,
                                           const std::vector<HwAbstraction>& hws, int cc, const std::string& dir,
                                           const std::string& source) {
  std::vector<Piece> pieces;
  std::set<std::string> names;
  for (const TuneRecord* r : records) {
    Piece x;
    x.record = r;
    x.g = regenerate(*r, hws, cc);
    const std::string base = identifier(r->workload.description.value("name", "kernel")) + "_" + r->workload.key.substr(0, 8);
    x.fn = "tmap_" + base;
    if (!names.insert(x.fn).second) continue;  // one kernel per workload
    x.kernel = "tmap_kernel_" + base;
    x.reduce = x.kernel + "_reduce";
    x.prologue = x.kernel + "_prologue";
    x.reference = "tmap_reference_" + base;
    std::string code = x.g.kernel.code;
    if (!x.g.kernel.reduce_name.empty()) code = replace_identifier(code, x.g.kernel.reduce_name, x.reduce);
    if (!x.g.kernel.relayout_name.empty()) code = replace_identifier(code, x.g.kernel.relayout_name, x.prologue);
    x.g.kernel.code = replace_identifier(code, x.g.kernel.name, x.kernel);
    x.ref = emit_reference_kernel(*x.g.compute);
    x.ref.code = replace_identifier(x.ref.code, x.ref.name, x.reference);
    pieces.push_back(std::move(x));
  }
  std::error_code ec;
  fs::create_directories(fs::path(dir) / "kernels", ec);
  fs::create_directories(fs::path(dir) / "torch", ec);
  if (ec) throw UserError(format_diagnostic(SourceLoc::whole(dir), "cannot create the directory: " + ec.message(), "check the --out path"));
  const std::string arch = std::to_string(cc) + (cc >= 90 ? "a" : "");

  std::vector<ExportedKernel> out;
  std::ostringstream header;
  header << "// Kernels tuned by tmap, exported from " << source << " for sm_" << arch << ".\n"
         << "// Each launch function takes the compute's tensors as device pointers (dense, row-major, in the\n"
         << "// shapes below) and a stream; it returns the first CUDA error of its launches. Every pointer\n"
         << "// must be aligned to " << kPointerAlignment << " bytes (cudaMalloc's and PyTorch's allocations are; a view at an\n"
         << "// offset may not be): a null or misaligned one returns cudaErrorInvalidValue, launching nothing.\n"
         << "// Kernels with a split-K reduction or a relayout prologue (operands copied channels-last\n"
         << "// before the kernel) allocate their workspace with cudaMallocAsync on that stream.\n"
         << "#pragma once\n\n#include <cuda_bf16.h>\n#include <cuda_fp16.h>\n#include <cuda_runtime.h>\n\n"
         << "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n"
         << "/// Encodes a CUtensorMap (swizzled in lines of swizzle_bytes: 128, 64 or 32) through the driver\n"
         << "/// entry point; see tmap_runtime.cu.\n"
         << "cudaError_t tmap_encode_tensor_map(void* map, int dtype, int rank, const void* base, const unsigned long long* dims,\n"
         << "                                   const unsigned long long* strides, const unsigned* box, int swizzle_bytes);\n"
         << "/// Encodes an im2col CUtensorMap of a channels-last convolution input, swizzled the same way.\n"
         << "cudaError_t tmap_encode_im2col_map(void* map, int dtype, int rank, const void* base, const unsigned long long* dims,\n"
         << "                                   const unsigned long long* strides, const int* lower, const int* upper,\n"
         << "                                   unsigned channels, unsigned pixels, const unsigned* traversal,\n"
         << "                                   int swizzle_bytes);\n\n";
  for (const Piece& x : pieces) {
    const Compute& c = *x.g.compute;
    const TuneRecord& r = *x.record;
    header << "/// " << r.workload.description.value("name", "?") << " (workload " << r.workload.key << "): "
           << c.statement_text() << "\n";
    for (const auto& t : c.tensors) header << "///   " << t.name << " " << shape_text(t) << "\n";
    header << "///   kernel " << candidate_label(r.candidate) << ", "
           << (r.result.ok() ? std::to_string(r.result.median_us) + " us on " + (r.target.device.empty() ? r.target.arch : r.target.device)
                             : std::string("unmeasured (ranked by the analytic model)"))
           << "\n" << signature(c, x.fn) << ";\n\n";
    std::ostringstream cu;
    cu << "// Exported by tmap from " << source << ": workload " << r.workload.key << "\n// "
       << c.statement_text() << "\n// kernel " << candidate_label(r.candidate) << ", params " << to_json(r.candidate.params).dump()
       << "\n#include <cuda.h>\n#include <cuda_runtime.h>\n\n#include \"tmap_kernels.h\"\n\n"
       << x.g.kernel.code << "\n" << launcher(x, cc);
    const std::string file = "kernels/" + x.fn + ".cu";
    write(fs::path(dir) / file, cu.str());
    out.push_back({x.fn, file, r.workload.key, candidate_label(r.candidate), r.result.ok() ? r.result.median_us : 0});
  }
  header << "#ifdef __cplusplus\n}\n#endif\n";
  write(fs::path(dir) / "tmap_kernels.h", header.str());
  write(fs::path(dir) / "tmap_runtime.cu", kRuntime);

  std::ostringstream check;
  check << "// Runs every exported kernel on random inputs against the reference kernel generated from\n"
        << "// the IR alone (relative L2 error within the tolerance tmap verifies with), then times it.\n"
        << "// Exits 1 when one is wrong, 2 on a CUDA error. First, and alone with --arguments-only (no GPU\n"
        << "// needed), checks that every launch function refuses null and misaligned pointers.\n"
        << "#include <algorithm>\n#include <cmath>\n#include <cstdio>\n#include <cstdlib>\n#include <cstring>\n#include <vector>\n\n"
        << "#include \"tmap_kernels.h\"\n\n"
        << "#define CHECK(x) do { const cudaError_t e_ = (x); if (e_ != cudaSuccess) { std::fprintf(stderr, \"%s:%d: %s: %s\\n\", "
           "__FILE__, __LINE__, #x, cudaGetErrorString(e_)); std::exit(2); } } while (0)\n\n"
        << "static float uniform(unsigned& s) {  // in [-1, 1)\n  s = s * 1664525u + 1013904223u;\n"
           "  return static_cast<float>(s >> 8) / 8388608.0f - 1.0f;\n}\n\n";
  // Each reference kernel in its own file (their helpers share names), launched through a function.
  fs::create_directories(fs::path(dir) / "reference", ec);
  for (const Piece& x : pieces) {
    std::ostringstream ref;
    ref << "// The reference kernel of " << x.fn << ", generated from the IR alone.\n#include <cuda_runtime.h>\n\n"
        << x.ref.code << "\nextern \"C\" cudaError_t " << x.reference << "_launch(void** args) {\n"
        << "  return cudaLaunchKernel(reinterpret_cast<const void*>(" << x.reference << "), dim3(" << x.ref.grid[0] << ", "
        << x.ref.grid[1] << ", " << x.ref.grid[2] << "), dim3(" << x.ref.threads << "), args, 0, nullptr);\n}\n";
    write(fs::path(dir) / "reference" / (x.reference + ".cu"), ref.str());
    check << "extern \"C\" cudaError_t " << x.reference << "_launch(void** args);\n";
  }
  check << "\n";
  for (std::size_t i = 0; i < pieces.size(); ++i)
    check << arguments_function(pieces[i], static_cast<int>(i)) << check_function(pieces[i], static_cast<int>(i));
  check << "int main(int argc, char** argv) {\n"
        << "  // Null and misaligned pointers are refused before anything is launched (no GPU needed).\n"
        << "  int refused = 0;\n";
  for (std::size_t i = 0; i < pieces.size(); ++i) check << "  refused += arguments_" << i << "();\n";
  check << "  std::printf(\"%d of " << pieces.size() << " launch functions refuse null and misaligned pointers\\n\", refused);\n"
        << "  if (refused != " << pieces.size() << ") return 1;\n"
        << "  if (argc > 1 && std::strcmp(argv[1], \"--arguments-only\") == 0) return 0;\n"
        << "  int wrong = 0;\n  unsigned seed = 12345u;\n";
  for (std::size_t i = 0; i < pieces.size(); ++i) check << "  wrong += !check_" << i << "(seed += 7919u);\n";
  check << "  std::printf(\"%d passed, %d failed\\n\", " << pieces.size() << " - wrong, wrong);\n  return wrong ? 1 : 0;\n}\n";
  write(fs::path(dir) / "check.cu", check.str());

  std::ostringstream cmake;
  cmake << "# Builds the kernels tmap exported into a static library, and the program that checks them.\n"
        << "#   cmake -S . -B build && cmake --build build && ./build/tmap_kernels_check\n"
        << "cmake_minimum_required(VERSION 3.24)\nproject(tmap_kernels LANGUAGES CXX CUDA)\n"
        << "find_package(CUDAToolkit REQUIRED)\n"
        << "set(TMAP_CUDA_ARCHITECTURES \"" << arch << "\" CACHE STRING \"The architecture the kernels were tuned for\")\n"
        << "file(GLOB TMAP_KERNEL_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/kernels/*.cu)\n"
        << "add_library(tmap_kernels STATIC tmap_runtime.cu ${TMAP_KERNEL_SOURCES})\n"
        << "set_target_properties(tmap_kernels PROPERTIES CUDA_ARCHITECTURES ${TMAP_CUDA_ARCHITECTURES} POSITION_INDEPENDENT_CODE ON)\n"
        << "target_include_directories(tmap_kernels PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})\n"
        << "target_link_libraries(tmap_kernels PUBLIC CUDA::cudart)\n"
        << "# Generated kernels declare some constants every variant of a family uses, not each one.\n"
        << "target_compile_options(tmap_kernels PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-diag-suppress=177>)\n"
        << "file(GLOB TMAP_REFERENCE_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/reference/*.cu)\n"
        << "add_executable(tmap_kernels_check check.cu ${TMAP_REFERENCE_SOURCES})\n"
        << "set_target_properties(tmap_kernels_check PROPERTIES CUDA_ARCHITECTURES ${TMAP_CUDA_ARCHITECTURES})\n"
        << "target_link_libraries(tmap_kernels_check PRIVATE tmap_kernels)\n"
        << "target_compile_options(tmap_kernels_check PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-diag-suppress=177>)\n";
  write(fs::path(dir) / "CMakeLists.txt", cmake.str());

  // An example PyTorch extension around the first kernel.
  const Piece& first = pieces.front();
  const Compute& c = *first.g.compute;
  std::ostringstream ext;
  ext << "// A PyTorch C++ extension calling one exported kernel (" << first.fn << "):\n//   "
      << c.statement_text() << "\n// Build and run: see setup.py and test.py beside this file.\n"
      << "#include <ATen/cuda/CUDAContext.h>\n#include <torch/extension.h>\n\n#include \"tmap_kernels.h\"\n\n"
      << "torch::Tensor run(";
  std::vector<int> ins;
  for (std::size_t t = 0; t < c.tensors.size(); ++t)
    if (static_cast<int>(t) != c.output.tensor) ins.push_back(static_cast<int>(t));
  for (std::size_t i = 0; i < ins.size(); ++i) ext << (i ? ", " : "") << "torch::Tensor " << identifier(c.tensors[ins[i]].name);
  const Tensor& ot = c.tensors[c.output.tensor];
  const char* torch_dtype = ot.dtype == DType::kFloat16 ? "torch::kHalf" : ot.dtype == DType::kBFloat16 ? "torch::kBFloat16"
                            : ot.dtype == DType::kInt32 ? "torch::kInt" : ot.dtype == DType::kFloat64 ? "torch::kDouble" : "torch::kFloat";
  ext << ") {\n";
  for (int t : ins) {
    const std::string n = identifier(c.tensors[t].name);
    ext << "  TORCH_CHECK(" << n << ".is_cuda() && " << n << ".is_contiguous(), \"" << n << " must be a contiguous CUDA tensor\");\n";
    ext << "  TORCH_CHECK(" << n << ".numel() == " << c.tensors[t].num_elements() << ", \"" << n << " must have shape "
        << shape_text(c.tensors[t]) << "\");\n";
    ext << "  TORCH_CHECK(reinterpret_cast<uintptr_t>(" << n << ".data_ptr()) % " << kPointerAlignment << " == 0, \"" << n
        << " must start at a " << kPointerAlignment << "-byte aligned address (a view at an offset may not: pass "
        << n << ".clone())\");\n";
  }
  ext << "  auto out = torch::empty({";
  for (std::size_t i = 0; i < ot.shape.size(); ++i) ext << (i ? ", " : "") << ot.shape[i];
  ext << "}, " << identifier(c.tensors[ins[0]].name) << ".options().dtype(" << torch_dtype << "));\n";
  ext << "  const cudaError_t e = " << first.fn << "(";
  for (std::size_t t = 0; t < c.tensors.size(); ++t)
    ext << (t ? ", " : "") << "reinterpret_cast<" << pointer_type(c, t) << ">("
        << (static_cast<int>(t) == c.output.tensor ? std::string("out") : identifier(c.tensors[t].name)) << ".data_ptr())";
  ext << ", at::cuda::getCurrentCUDAStream());\n  TORCH_CHECK(e == cudaSuccess, \"" << first.fn
      << ": \", cudaGetErrorString(e));\n  return out;\n}\n\n"
      << "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"run\", &run, \"" << c.statement_text() << "\"); }\n";
  write(fs::path(dir) / "torch" / "tmap_ext.cpp", ext.str());
  std::ostringstream setup;
  setup << "# Builds the example extension against the static library (build it first:\n"
        << "#   cmake -S .. -B ../build && cmake --build ../build), then: python3 test.py\n"
        << "# (CUDAExtension for CUDA's include and library paths; the kernels are already compiled.)\n"
        << "import os\nfrom setuptools import setup\nfrom torch.utils.cpp_extension import BuildExtension, CUDAExtension\n\n"
        << "here = os.path.dirname(os.path.abspath(__file__))\n"
        << "setup(name=\"tmap_ext\", ext_modules=[CUDAExtension(\"tmap_ext\", [os.path.join(here, \"tmap_ext.cpp\")],\n"
        << "      include_dirs=[os.path.join(here, \"..\")],\n"
        << "      extra_objects=[os.path.join(here, \"..\", \"build\", \"libtmap_kernels.a\")])],\n"
        << "      cmdclass={\"build_ext\": BuildExtension})\n";
  write(fs::path(dir) / "torch" / "setup.py", setup.str());
  return out;
}

}  // namespace tmap
