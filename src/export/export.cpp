#include "tmap/export/export.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string_view>

#include "tmap/codegen/device_library.h"
#include "tmap/codegen/reference_emitter.h"
#include "tmap/runtime/launch.h"
#include "tmap/support/diagnostic.h"
#include "tmap/support/files.h"
#include "tmap/tune/tuner.h"

namespace tmap {
namespace embedded {
extern const char kLaunchPlanHeader[];  // include/tmap/runtime/launch_plan.h, embedded at build time
extern const char kLaunchPlanSource[];  // src/runtime/launch_plan.cpp
}  // namespace embedded
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

/// Text from a log (a device name) as it may appear in a generated comment: letters, digits and
/// plain punctuation, nothing that ends a line or a comment.
std::string comment_text(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, 80))
    out += std::isalnum(static_cast<unsigned char>(c)) || std::string_view(" _.,:()+-").find(c) != std::string_view::npos ? c : '?';
  return out;
}

/// The type a launch function takes tensor `t` as: a device pointer, const for inputs.
std::string pointer_type(const Compute& c, std::size_t t) {
  return std::string(static_cast<int>(t) == c.output.tensor ? "" : "const ") + storage_type(c.tensors[t].dtype) + "*";
}

/// A range's size parameter in launch functions: the parameter's name, as a C identifier (unless
/// a tensor has that name).
std::string size_name(const Compute& c) {
  const std::string name = identifier(c.dynamic.param);
  for (const Tensor& t : c.tensors)
    if (identifier(t.name) == name) return "size_" + name;
  return name;
}

/// The parameter list of a launch function: the compute's tensors, inputs const, and for a range
/// of sizes the size (after the tensors).
std::string signature(const Compute& c, const std::string& fn) {
  std::string s = "cudaError_t " + fn + "(";
  for (std::size_t t = 0; t < c.tensors.size(); ++t)
    s += (t ? ", " : "") + pointer_type(c, t) + " " + identifier(c.tensors[t].name);
  if (c.dynamic.active()) s += ", long long " + size_name(c);
  return s + ", cudaStream_t stream)";
}

/// The arguments that pass a launch function's parameters on (signature()'s names).
std::string forwarded(const Compute& c) {
  std::string s;
  for (std::size_t t = 0; t < c.tensors.size(); ++t) s += (t ? ", " : "") + identifier(c.tensors[t].name);
  if (c.dynamic.active()) s += ", " + size_name(c);
  return s + ", stream";
}

/// "[M, 4096] float16": a tensor's shape, its first dimension named by the size parameter where
/// it follows a range's size.
std::string shape_text(const Compute& c, const Tensor& t) {
  const Compute at = compute_at(c, c.dynamic.active() ? c.dynamic.hi - 1 : 0);
  const Tensor& smaller = at.tensors[&t - c.tensors.data()];
  std::string s = "[";
  for (std::size_t i = 0; i < t.shape.size(); ++i)
    s += (i ? ", " : "") + (smaller.shape[i] != t.shape[i] ? c.dynamic.param : std::to_string(t.shape[i]));
  return s + "] " + std::string(dtype_name(t.dtype));
}

/// The alignment the launch functions require of every tensor pointer (checked before launching).
constexpr int kPointerAlignment = 16;

/// One exported kernel: a workload's, or one bucket of a range's (whose launch function the
/// range's dispatcher calls).
struct Piece {
  std::string fn;
  Regenerated g;
  LaunchPlan plan;  ///< The kernel's launches, its kernels renamed as exported.
  const TuneRecord* record = nullptr;
  bool bucket() const { return record->result.bucket(); }
};

/// What the check program runs: a launch function on the shapes of `compute` (a range's at
/// `size`), against the reference kernel of those shapes.
struct CheckCase {
  std::string fn, reference;
  Compute compute;
  std::int64_t size = 0;     ///< > 0: passed after the tensors.
  std::int64_t outside = 0;  ///< With a size: one past the range, which the function refuses.
  double tolerance = 0, logged_us = 0;
  KernelSource ref;
};

/// A range's launch function, choosing among its buckets by the size.
struct RangeGroup {
  std::string fn;
  std::vector<const Piece*> buckets;  ///< In order of their sizes.
  const Compute& range() const { return *buckets.front()->g.compute; }
};

void write(const fs::path& p, const std::string& text) { write_file(p.string(), text, "--out"); }

/// The launch plan as a constant and the function that hands it, with the caller's pointers, to
/// tmap_plan_launch (launch_plan.cpp, copied beside the kernels): tmap's runner executes the same.
std::string launcher(const Piece& x) {
  const Compute& c = *x.g.compute;
  const ImplicitGemm& gm = x.g.gemm();
  std::ostringstream os;
  os << "static const tmap_launch_plan " << x.fn << "_plan = " << plan_initializer(x.plan.plan) << ";\n\n";
  os << "extern \"C\" " << signature(c, x.fn) << " {\n";
  os << "  // Device pointers aligned to " << kPointerAlignment
     << " bytes: the kernels move 16-byte vectors (and TMA needs them).\n  const void* const pointers[] = {";
  for (std::size_t t = 0; t < c.tensors.size(); ++t) os << (t ? ", " : "") << identifier(c.tensors[t].name);
  os << "};\n  for (const void* p : pointers)\n"
     << "    if (p == nullptr || reinterpret_cast<unsigned long long>(p) % " << kPointerAlignment
     << " != 0) return cudaErrorInvalidValue;\n";
  os << "  const void* const kernels[] = {";
  for (std::size_t i = 0; i < x.plan.kernels.size(); ++i)
    os << (i ? ", " : "") << "reinterpret_cast<const void*>(" << x.plan.kernels[i] << ")";
  const auto slot = [&](int tensor) { return "const_cast<void*>(static_cast<const void*>(" + identifier(c.tensors[tensor].name) + "))"; };
  os << "};\n  // Operand A, operand B, the output; the workspace goes in the fourth"
     << (c.epilogue.empty() ? "" : ", the epilogue's operands after it") << ".\n"
     << "  void* slots[TMAP_PLAN_MAX_SLOTS] = {" << slot(c.inputs[gm.a_input].tensor) << ", " << slot(c.inputs[gm.b_input].tensor)
     << ", " << identifier(c.tensors[c.output.tensor].name);
  if (!c.epilogue.empty()) {
    os << ", nullptr";
    for (const Access& a : c.epilogue.operands) os << ", " << slot(a.tensor);
  }
  os << "};\n"
     << "  return tmap_plan_launch(&" << x.fn << "_plan, kernels, slots, " << (c.dynamic.active() ? size_name(c) : "0")
     << ", stream);\n}\n";
  return os.str();
}

/// A range's launch function: the bucket of the size, or cudaErrorInvalidValue outside the range.
std::string dispatcher_file(const RangeGroup& r, const std::string& source) {
  const Compute& c = r.range();
  std::ostringstream os;
  os << "// Exported by tmap from " << source << ": the range " << c.dynamic.param << "=" << c.dynamic.lo << ".."
     << c.dynamic.hi << " of workload " << r.buckets.front()->record->workload.key << ", " << r.buckets.size()
     << " kernel(s) chosen by the size\n#include \"tmap_kernels.h\"\n\n"
     << "extern \"C\" " << signature(c, r.fn) << " {\n";
  for (const Piece* b : r.buckets)
    os << "  if (" << size_name(c) << " >= " << b->record->result.bucket_lo << " && " << size_name(c)
       << " <= " << b->record->result.bucket_hi << ") return " << b->fn << "(" << forwarded(c) << ");\n";
  os << "  return cudaErrorInvalidValue;  // outside the sizes tuned\n}\n";
  return os.str();
}

std::string host_value(DType t, const std::string& v) {
  switch (t) {
    case DType::kFloat16: return "__half2float(" + v + ")";
    case DType::kBFloat16: return "__bfloat162float(" + v + ")";
    case DType::kFloat8E4M3:
    case DType::kFloat8E5M2: return "static_cast<double>(static_cast<float>(" + v + "))";
    default: return "static_cast<double>(" + v + ")";
  }
}

std::string host_store(DType t, const std::string& v) {
  switch (t) {
    case DType::kFloat16: return "__float2half(" + v + ")";
    case DType::kBFloat16: return "__float2bfloat16(" + v + ")";
    case DType::kFloat8E4M3: return "__nv_fp8_e4m3(" + v + ")";
    case DType::kFloat8E5M2: return "__nv_fp8_e5m2(" + v + ")";
    case DType::kInt8: return "static_cast<signed char>(std::lround(" + v + " * 4))";
    case DType::kInt32: return "static_cast<int>(std::lround(" + v + " * 4))";
    default: return v;
  }
}

/// The check program's argument phase for one launch function: every pointer null, then every
/// pointer 2 bytes past an aligned address, must be refused (cudaErrorInvalidValue) before
/// anything reaches the GPU, so this runs on machines without one.
std::string arguments_function(const CheckCase& x, int index) {
  const Compute& c = x.compute;
  std::ostringstream os;
  os << "static bool arguments_" << index << "() {\n  bool ok = true;\n"
     << "  for (const unsigned long long address : {0ull, 0x10000ull + 2}) {\n"
     << "    const cudaError_t e = " << x.fn << "(";
  for (std::size_t t = 0; t < c.tensors.size(); ++t)
    os << (t ? ", " : "") << "reinterpret_cast<" << pointer_type(c, t) << ">(address)";
  os << (x.size ? ", " + std::to_string(x.size) + "ll" : "") << ", nullptr);\n"
     << "    if (e != cudaErrorInvalidValue) {\n"
     << "      std::printf(\"%-40s pointer %#llx: not refused (error %d)\\n\", \"" << x.fn << "\", address, static_cast<int>(e));\n"
     << "      ok = false;\n    }\n  }\n";
  if (x.outside) {  // aligned pointers, a size outside the range: refused before any launch
    os << "  if (" << x.fn << "(";
    for (std::size_t t = 0; t < c.tensors.size(); ++t)
      os << (t ? ", " : "") << "reinterpret_cast<" << pointer_type(c, t) << ">(0x10000ull)";
    os << ", " << x.outside << "ll, nullptr) != cudaErrorInvalidValue) {\n"
       << "    std::printf(\"%-40s size " << x.outside << ": not refused\\n\", \"" << x.fn << "\");\n    ok = false;\n  }\n";
  }
  os << "  return ok;\n}\n\n";
  return os.str();
}

/// The check's tensors: each allocated on the GPU, the inputs drawn on the host and copied over.
std::string check_tensors_text(const Compute& c) {
  std::ostringstream os;
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
  return os.str();
}

/// The check's timing of `call`: 3 warm-up runs, then 20 event-timed ones into `ms`, sorted.
std::string check_timing_text(const std::string& call) {
  std::ostringstream os;
  os << "  // Time: 3 warm-up runs, then the median of 20 event-timed ones.\n";
  os << "  for (int i = 0; i < 3; ++i) CHECK(" << call << ");\n";
  os << "  cudaEvent_t t0, t1;\n  CHECK(cudaEventCreate(&t0));\n  CHECK(cudaEventCreate(&t1));\n  std::vector<float> ms;\n";
  os << "  for (int i = 0; i < 20; ++i) {\n    CHECK(cudaEventRecord(t0, stream));\n    CHECK(" << call
     << ");\n    CHECK(cudaEventRecord(t1, stream));\n    CHECK(cudaEventSynchronize(t1));\n    float m = 0;\n"
        "    CHECK(cudaEventElapsedTime(&m, t0, t1));\n    ms.push_back(m);\n  }\n";
  os << "  std::sort(ms.begin(), ms.end());\n";
  return os.str();
}

/// The check program's correctness and timing phase for one launch function: the reference
/// kernel, then the tuned one on a poisoned output, its relative L2 error and median time.
std::string check_function(const CheckCase& x, int index) {
  const Compute& c = x.compute;
  const DType out_t = c.tensors[c.output.tensor].dtype;
  const double tol = x.tolerance;
  std::ostringstream os;
  os << "// " << x.fn << (x.size ? " at size " + std::to_string(x.size) : "") << ": " << c.statement_text() << "\n";
  if (!c.epilogue.empty()) os << "//   then " << c.epilogue_text() << "\n";
  os << "static bool check_" << index << "(unsigned seed) {\n" << check_tensors_text(c);
  const int o = c.output.tensor;
  const std::string oty = storage_type(out_t);
  os << "  // The reference kernel (from the IR alone), then the tuned kernel on a poisoned output.\n";
  os << "  {\n    void* slots[TMAP_PLAN_MAX_SLOTS] = {";
  for (std::size_t t = 0; t < c.tensors.size(); ++t) os << (t ? ", " : "") << "d" << t;
  os << "};\n    CHECK(" << x.reference << "_launch(slots));\n    CHECK(cudaDeviceSynchronize());\n  }\n";
  os << "  CHECK(cudaMemcpy(h" << o << ".data(), d" << o << ", n" << o << " * sizeof(" << oty << "), cudaMemcpyDeviceToHost));\n";
  os << "  std::vector<double> ref(n" << o << ");\n  for (size_t i = 0; i < n" << o << "; ++i) ref[i] = "
     << host_value(out_t, "h" + std::to_string(o) + "[i]") << ";\n";
  os << "  CHECK(cudaMemset(d" << o << ", 0xFF, n" << o << " * sizeof(" << oty << ")));\n";
  std::string call = x.fn + "(";
  for (std::size_t t = 0; t < c.tensors.size(); ++t) call += (t ? ", " : "") + std::string("d") + std::to_string(t);
  call += (x.size ? ", " + std::to_string(x.size) + "ll" : "") + ", stream)";
  os << "  cudaStream_t stream;\n  CHECK(cudaStreamCreate(&stream));\n";
  os << "  CHECK(" << call << ");\n  CHECK(cudaStreamSynchronize(stream));\n";
  os << "  CHECK(cudaMemcpy(h" << o << ".data(), d" << o << ", n" << o << " * sizeof(" << oty << "), cudaMemcpyDeviceToHost));\n";
  os << "  double num = 0, den = 0;\n  for (size_t i = 0; i < n" << o << "; ++i) {\n    const double v = "
     << host_value(out_t, "h" + std::to_string(o) + "[i]") << ";\n    num += (v - ref[i]) * (v - ref[i]);\n    den += ref[i] * ref[i];\n  }\n";
  os << "  const double err = std::isnan(num) ? INFINITY : std::sqrt(num / (den > 0 ? den : 1));\n";
  os << check_timing_text(call);
  os << "  const bool ok = err <= " << tol << ";\n";
  const std::string label = x.fn + (x.size ? "(" + std::to_string(x.size) + ")" : "");
  os << "  std::printf(\"%-40s rel L2 %.2e (tolerance " << tol << ") %s  %9.2f us (logged "
     << (x.logged_us > 0 ? std::to_string(x.logged_us) + " us" : std::string("at another size")) << ")\\n\", \"" << label
     << "\", err, ok ? \"ok   \" : \"WRONG\", ms[ms.size() / 2] * 1000.0);\n";
  os << "  cudaEventDestroy(t0);\n  cudaEventDestroy(t1);\n  cudaStreamDestroy(stream);\n";
  for (std::size_t t = 0; t < c.tensors.size(); ++t) os << "  cudaFree(d" << t << ");\n";
  os << "  return ok;\n}\n\n";
  return os.str();
}


/// A workload's part of exported names: its name and the start of its key.
std::string workload_base(const TuneRecord& r) {
  return identifier(r.workload.description.value("name", "kernel")) + "_" + r.workload.key.substr(0, 8);
}

/// The record's kernel regenerated, its kernels and launch function renamed after the workload.
Piece make_piece(const TuneRecord& r, const std::vector<HwAbstraction>& hws, int cc) {
  Piece x;
  x.record = &r;
  x.g = regenerate(r, hws, cc);
  const std::string base = workload_base(r) + (r.result.bucket() ? "_" + std::to_string(r.result.bucket_lo) + "_" +
                                                                      std::to_string(r.result.bucket_hi)
                                                                : "");
  x.fn = "tmap_" + base;
  KernelSource& k = x.g.kernel;
  const std::string kernel = "tmap_kernel_" + base;
  auto rename = [&k](std::string& name, const std::string& to) {
    if (name.empty()) return;
    k.code = replace_identifier(k.code, name, to);
    name = to;
  };
  rename(k.reduce_name, kernel + "_reduce");
  rename(k.relayout_name, kernel + "_prologue");
  rename(k.name, kernel);
  x.plan = plan_launch(k);
  return x;
}

/// The reference kernel of `c` (of one shape), named `name`.
KernelSource named_reference(const Compute& c, const std::string& name) {
  KernelSource ref = emit_reference_kernel(c);
  ref.code = replace_identifier(ref.code, ref.name, name);
  ref.name = name;
  return ref;
}

/// What the check program runs: each workload's kernel, and each range at both ends of each bucket.
std::vector<CheckCase> check_cases(const std::vector<Piece>& pieces, const std::vector<RangeGroup>& ranges) {
  std::vector<CheckCase> out;
  for (const Piece& x : pieces) {
    if (x.bucket()) continue;
    const std::string base = x.fn.substr(5);  // after "tmap_"
    out.push_back({x.fn, "tmap_reference_" + base, *x.g.compute, 0, 0, verification_tolerance(*x.g.gemm().hw),
                   x.record->result.ok() ? x.record->result.median_us : 0, {}});
  }
  for (const RangeGroup& r : ranges)
    for (const Piece* b : r.buckets) {
      const TuneResult& res = b->record->result;
      for (std::int64_t size : {res.bucket_lo, res.bucket_hi}) {
        const std::string reference = "tmap_reference_" + r.fn.substr(5) + "_" + std::to_string(size);
        out.push_back({r.fn, reference, compute_at(r.range(), size), size, r.range().dynamic.hi + 1,
                       verification_tolerance(*b->g.gemm().hw), size == res.size ? res.median_us : 0, {}});
        if (res.bucket_lo == res.bucket_hi) break;
      }
    }
  for (CheckCase& k : out) k.ref = named_reference(k.compute, k.reference);
  return out;
}

std::string header_text(const std::vector<Piece>& pieces, const std::vector<RangeGroup>& ranges,
                        const std::string& source, const std::string& arch) {
  std::ostringstream header;
  header << "// Kernels tuned by tmap, exported from " << source << " for sm_" << arch << ".\n"
         << "// Each launch function takes the compute's tensors as device pointers (dense, row-major, in the\n"
         << "// shapes below) and a stream; it returns the first CUDA error of its launches. Every pointer\n"
         << "// must be aligned to " << kPointerAlignment << " bytes (cudaMalloc's and PyTorch's allocations are; a view at an\n"
         << "// offset may not be): a null or misaligned one returns cudaErrorInvalidValue, launching nothing.\n"
         << "// Kernels with a split-K reduction or a relayout prologue (operands copied channels-last\n"
         << "// before the kernel) allocate their workspace with cudaMallocAsync on that stream.\n"
         << "#pragma once\n\n#include <cuda_bf16.h>\n#include <cuda_fp16.h>\n#include <cuda_fp8.h>\n"
         << "#include <cuda_runtime.h>\n\n"
         << "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n";
  for (const RangeGroup& g : ranges) {
    const Compute& c = g.range();
    const TuneRecord& r = *g.buckets.front()->record;
    header << "/// " << identifier(r.workload.description.value("name", "kernel")) << " (workload " << r.workload.key << "): "
           << c.statement_text() << ", for every " << c.dynamic.param << " from " << c.dynamic.lo << " to "
           << c.dynamic.hi << " (else cudaErrorInvalidValue)\n";
    for (const auto& t : c.tensors) header << "///   " << t.name << " " << shape_text(c, t) << "\n";
    header << "///   " << g.buckets.size() << " kernel(s), chosen by " << c.dynamic.param << ":\n";
    for (const Piece* b : g.buckets)
      header << "///     " << b->record->result.bucket_lo << ".." << b->record->result.bucket_hi << ": "
             << candidate_label(b->record->candidate) << "\n";
    header << signature(c, g.fn) << ";\n\n";
  }
  for (const Piece& x : pieces) {
    const Compute& c = *x.g.compute;
    const TuneRecord& r = *x.record;
    if (x.bucket()) {  // called by its range's function
      header << "/// The kernel of " << c.dynamic.param << " = " << r.result.bucket_lo << ".." << r.result.bucket_hi << " of tmap_"
             << workload_base(r) << ", which chooses it.\n" << signature(c, x.fn) << ";\n\n";
      continue;
    }
    header << "/// " << identifier(r.workload.description.value("name", "kernel")) << " (workload " << r.workload.key << "): "
           << c.statement_text() << "\n";
    for (const auto& t : c.tensors) header << "///   " << t.name << " " << shape_text(c, t) << "\n";
    header << "///   kernel " << candidate_label(r.candidate) << ", "
           << (r.result.ok() ? std::to_string(r.result.median_us) + " us on " +
                                   comment_text(r.target.device.empty() ? r.target.arch : r.target.device)
                             : std::string("unmeasured (ranked by the analytic model)"))
           << "\n" << signature(c, x.fn) << ";\n\n";
  }
  header << "#ifdef __cplusplus\n}\n#endif\n";
  return header.str();
}

std::string kernel_file(const Piece& x, const std::string& source) {
  const TuneRecord& r = *x.record;
  std::ostringstream cu;
  cu << "// Exported by tmap from " << source << ": workload " << r.workload.key << "\n// "
     << x.g.compute->statement_text() << "\n// kernel " << candidate_label(r.candidate) << ", params "
     << to_json(r.candidate.params).dump()
     << "\n#include <cuda.h>\n#include <cuda_runtime.h>\n\n#include \"tmap/runtime/launch_plan.h\"\n#include \"tmap_kernels.h\"\n\n"
     << x.g.kernel.code << "\n" << launcher(x);
  return cu.str();
}

/// A reference kernel in its own file (their helpers share names), launched through its plan.
std::string reference_file(const CheckCase& x) {
  const LaunchPlan plan = plan_plain_launch(x.ref, static_cast<int>(x.compute.tensors.size()));
  std::ostringstream ref;
  ref << "// The reference kernel of " << x.fn << (x.size ? " at size " + std::to_string(x.size) : "")
      << ", generated from the IR alone.\n#include <cuda_runtime.h>\n\n"
      << "#include \"tmap/runtime/launch_plan.h\"\n\n" << x.ref.code << "\nstatic const tmap_launch_plan " << x.reference
      << "_plan = " << plan_initializer(plan.plan) << ";\n\n"
      << "extern \"C\" cudaError_t " << x.reference << "_launch(void** slots) {\n"
      << "  const void* const kernels[] = {reinterpret_cast<const void*>(" << x.reference << ")};\n"
      << "  return tmap_plan_launch(&" << x.reference << "_plan, kernels, slots, 0, nullptr);\n}\n";
  return ref.str();
}

std::string check_program(const std::vector<CheckCase>& pieces) {
  std::ostringstream check;
  check << "// Runs every exported kernel on random inputs against the reference kernel generated from\n"
        << "// the IR alone (relative L2 error within the tolerance tmap verifies with), then times it.\n"
        << "// Exits 1 when one is wrong, 2 on a CUDA error. First, and alone with --arguments-only (no GPU\n"
        << "// needed), checks that every launch function refuses null and misaligned pointers.\n"
        << "#include <algorithm>\n#include <cmath>\n#include <cstdio>\n#include <cstdlib>\n#include <cstring>\n#include <vector>\n\n"
        << "#include \"tmap/runtime/launch_plan.h\"\n#include \"tmap_kernels.h\"\n\n"
        << "#define CHECK(x) do { const cudaError_t e_ = (x); if (e_ != cudaSuccess) { std::fprintf(stderr, \"%s:%d: %s: %s\\n\", "
           "__FILE__, __LINE__, #x, cudaGetErrorString(e_)); std::exit(2); } } while (0)\n\n"
        << "static float uniform(unsigned& s) {  // in [-1, 1)\n  s = s * 1664525u + 1013904223u;\n"
           "  return static_cast<float>(s >> 8) / 8388608.0f - 1.0f;\n}\n\n";
  for (const CheckCase& x : pieces) check << "extern \"C\" cudaError_t " << x.reference << "_launch(void** slots);\n";
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
  return check.str();
}

std::string cmake_text(const std::string& arch) {
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
  return cmake.str();
}

/// Whether dimension `d` of tensor `t` of a range follows its size.
bool follows_size(const Compute& c, std::size_t t, std::size_t d) {
  return c.dynamic.active() && d == 0 && compute_at(c, c.dynamic.hi - 1).tensors[t].shape[0] != c.tensors[t].shape[0];
}

/// The torch dtype of an output of dtype `t`.
const char* torch_dtype(DType t) {
  return t == DType::kFloat16 ? "torch::kHalf" : t == DType::kBFloat16 ? "torch::kBFloat16"
         : t == DType::kInt32 ? "torch::kInt" : t == DType::kFloat64 ? "torch::kDouble" : "torch::kFloat";
}

/// The extension's checks of its inputs `ins` (device, layout, size, alignment), after the line
/// that reads a range's `size` from the first input that follows it.
std::string torch_input_checks(const Compute& c, const std::vector<int>& ins, const std::string& size) {
  std::ostringstream ext;
  for (int t : ins)
    if (!size.empty() && follows_size(c, t, 0)) {
      ext << "  const long long " << size << " = " << identifier(c.tensors[t].name) << ".size(0);\n";
      break;
    }
  for (int t : ins) {
    const std::string n = identifier(c.tensors[t].name);
    const std::int64_t elements = c.tensors[t].num_elements();
    const std::string numel = follows_size(c, t, 0) ? std::to_string(elements / c.tensors[t].shape[0]) + " * " + size
                                                    : std::to_string(elements);
    ext << "  TORCH_CHECK(" << n << ".is_cuda() && " << n << ".is_contiguous(), \"" << n << " must be a contiguous CUDA tensor\");\n";
    ext << "  TORCH_CHECK(" << n << ".numel() == " << numel << ", \"" << n << " must have shape "
        << shape_text(c, c.tensors[t]) << "\");\n";
    ext << "  TORCH_CHECK(reinterpret_cast<uintptr_t>(" << n << ".data_ptr()) % " << kPointerAlignment << " == 0, \"" << n
        << " must start at a " << kPointerAlignment << "-byte aligned address (a view at an offset may not: pass "
        << n << ".clone())\");\n";
  }
  return ext.str();
}

/// The example extension's source: run() checks its inputs, allocates the output and calls `fn`.
std::string torch_extension_text(const Compute& c, const std::string& fn) {
  std::ostringstream ext;
  ext << "// A PyTorch C++ extension calling one exported kernel (" << fn << "):\n//   "
      << c.statement_text() << "\n" << (c.epilogue.empty() ? "" : "//   then " + c.epilogue_text() + "\n")
      << "// Build and run: see setup.py and test.py beside this file.\n"
      << "#include <ATen/cuda/CUDAContext.h>\n#include <torch/extension.h>\n\n#include \"tmap_kernels.h\"\n\n"
      << "torch::Tensor run(";
  std::vector<int> ins;
  for (std::size_t t = 0; t < c.tensors.size(); ++t)
    if (static_cast<int>(t) != c.output.tensor) ins.push_back(static_cast<int>(t));
  for (std::size_t i = 0; i < ins.size(); ++i) ext << (i ? ", " : "") << "torch::Tensor " << identifier(c.tensors[ins[i]].name);
  const Tensor& ot = c.tensors[c.output.tensor];
  const std::string size = c.dynamic.active() ? size_name(c) : "";
  ext << ") {\n" << torch_input_checks(c, ins, size) << "  auto out = torch::empty({";
  for (std::size_t i = 0; i < ot.shape.size(); ++i)
    ext << (i ? ", " : "") << (follows_size(c, c.output.tensor, i) ? size : std::to_string(ot.shape[i]));
  ext << "}, " << identifier(c.tensors[ins[0]].name) << ".options().dtype(" << torch_dtype(ot.dtype) << "));\n";
  ext << "  const cudaError_t e = " << fn << "(";
  for (std::size_t t = 0; t < c.tensors.size(); ++t)
    ext << (t ? ", " : "") << "reinterpret_cast<" << pointer_type(c, t) << ">("
        << (static_cast<int>(t) == c.output.tensor ? std::string("out") : identifier(c.tensors[t].name)) << ".data_ptr())";
  ext << (size.empty() ? "" : ", " + size) << ", at::cuda::getCurrentCUDAStream());\n  TORCH_CHECK(e == cudaSuccess, \"" << fn
      << ": \", cudaGetErrorString(e));\n  return out;\n}\n\n"
      << "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"run\", &run, \"" << c.statement_text() << "\"); }\n";
  return ext.str();
}

/// An example PyTorch extension around one launch function `fn` of compute `c` (a range's takes
/// the size from its inputs), and its setup.py.
void write_torch_example(const fs::path& dir, const Compute& c, const std::string& fn) {
  write(dir / "torch" / "tmap_ext.cpp", torch_extension_text(c, fn));
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
  write(dir / "torch" / "setup.py", setup.str());
}

/// One piece per workload (or range bucket) of `records`, the first record of each.
std::vector<Piece> make_pieces(const std::vector<const TuneRecord*>& records, const std::vector<HwAbstraction>& hws,
                               int cc) {
  std::vector<Piece> pieces;
  std::set<std::string> names;
  for (const TuneRecord* r : records) {
    Piece x = make_piece(*r, hws, cc);
    if (names.insert(x.fn).second) pieces.push_back(std::move(x));
  }
  return pieces;
}

/// Each range's buckets, in order of their sizes, behind one launch function.
std::vector<RangeGroup> group_ranges(const std::vector<Piece>& pieces) {
  std::vector<RangeGroup> ranges;
  for (const Piece& x : pieces) {
    if (!x.bucket()) continue;
    const std::string fn = "tmap_" + workload_base(*x.record);
    auto it = std::find_if(ranges.begin(), ranges.end(), [&](const RangeGroup& g) { return g.fn == fn; });
    if (it == ranges.end()) it = ranges.insert(ranges.end(), RangeGroup{fn, {}});
    it->buckets.push_back(&x);
  }
  for (RangeGroup& g : ranges)
    std::sort(g.buckets.begin(), g.buckets.end(), [](const Piece* a, const Piece* b) {
      return a->record->result.bucket_lo < b->record->result.bucket_lo;
    });
  return ranges;
}

/// kernels/FN.cu of each fixed-shape piece and each range's dispatcher (its buckets' kernels
/// included); what was written, as the export lists it.
std::vector<ExportedKernel> write_kernels(const fs::path& out_dir, const std::vector<Piece>& pieces,
                                          const std::vector<RangeGroup>& ranges, const std::string& source) {
  std::vector<ExportedKernel> out;
  for (const Piece& x : pieces) {
    const TuneRecord& r = *x.record;
    const std::string file = "kernels/" + x.fn + ".cu";
    write(out_dir / file, kernel_file(x, source));
    if (!x.bucket())
      out.push_back({x.fn, file, r.workload.key, candidate_label(r.candidate), r.result.ok() ? r.result.median_us : 0});
  }
  for (const RangeGroup& g : ranges) {
    const std::string file = "kernels/" + g.fn + ".cu";
    write(out_dir / file, dispatcher_file(g, source));
    const Compute& c = g.range();
    out.push_back({g.fn, file, g.buckets.front()->record->workload.key,
                   c.dynamic.param + "=" + std::to_string(c.dynamic.lo) + ".." + std::to_string(c.dynamic.hi) + ": " +
                       std::to_string(g.buckets.size()) + " kernel(s)",
                   0});
  }
  return out;
}

/// Everything around the kernels: the references and the program that checks against them, the
/// header, the launch-plan runtime and device library as tmap runs them, the CMake project and the
/// PyTorch example (of the first fixed-shape piece, else the first range).
void write_library(const fs::path& out_dir, const std::vector<Piece>& pieces, const std::vector<RangeGroup>& ranges,
                   const std::string& source, const std::string& arch) {
  const std::vector<CheckCase> checks = check_cases(pieces, ranges);
  for (const CheckCase& k : checks) write(out_dir / "reference" / (k.reference + ".cu"), reference_file(k));
  write(out_dir / "tmap_kernels.h", header_text(pieces, ranges, source, arch));
  write(out_dir / "tmap/runtime/launch_plan.h", embedded::kLaunchPlanHeader);
  write(out_dir / "tmap_runtime.cu", embedded::kLaunchPlanSource);
  for (const DeviceHeader& h : device_headers()) write(out_dir / std::string(h.file), std::string(h.text));
  write(out_dir / "check.cu", check_program(checks));
  write(out_dir / "CMakeLists.txt", cmake_text(arch));
  const auto plain = std::find_if(pieces.begin(), pieces.end(), [](const Piece& x) { return !x.bucket(); });
  if (plain != pieces.end()) write_torch_example(out_dir, *plain->g.compute, plain->fn);
  else write_torch_example(out_dir, ranges.front().range(), ranges.front().fn);
}

}  // namespace

std::vector<ExportedKernel> export_kernels(const std::vector<const TuneRecord*>& records,
                                           const std::vector<HwAbstraction>& hws, int cc, const std::string& dir,
                                           const std::string& source) {
  const std::vector<Piece> pieces = make_pieces(records, hws, cc);
  const std::vector<RangeGroup> ranges = group_ranges(pieces);
  const fs::path out_dir(dir);
  std::error_code ec;
  for (const char* sub : {"kernels", "torch", "reference", "tmap/runtime", "tmap/device"}) fs::create_directories(out_dir / sub, ec);
  if (ec) throw UserError(format_diagnostic(SourceLoc::whole(dir), "cannot create the directory: " + ec.message(), "check the --out path"));
  std::vector<ExportedKernel> out = write_kernels(out_dir, pieces, ranges, source);
  write_library(out_dir, pieces, ranges, source, std::to_string(cc) + (cc >= 90 ? "a" : ""));
  return out;
}

}  // namespace tmap
