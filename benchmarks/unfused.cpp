// The unfused sequence, compiled and run (unfused.h).
#include "unfused.h"

#include <stdexcept>

namespace bench {

UnfusedPasses::UnfusedPasses(const Compute& c, const EpilogueView& v, tmap::Workspace& ws,
                             tmap::NvrtcCompiler& compiler) {
  const tmap::Tensor& out = c.tensor_of(c.output);
  if (out.dtype != tmap::DType::kFloat16 && out.dtype != tmap::DType::kFloat32)
    throw std::runtime_error("the unfused sequence stores float16 or float32 only");
  out_dtype_ = out.dtype;
  elems_ = static_cast<std::size_t>(out.num_elements());
  std::vector<std::vector<int>> inputs;
  const std::string source = unfused_source(c, v, inputs);
  const tmap::CompileResult bin = compiler.compile(source, "unfused_passes");
  if (!bin.ok) throw std::runtime_error("the unfused sequence's kernels do not compile:\n" + bin.log + "\n" + source);
  cuda_ok(cudaLibraryLoadData(&lib_, bin.cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0), "cudaLibraryLoadData");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    Pass p;
    p.inputs = inputs[i];
    cuda_ok(cudaLibraryGetKernel(&p.kernel, lib_, ("pass" + std::to_string(i)).c_str()), "cudaLibraryGetKernel");
    passes_.push_back(p);
    results_.push_back(std::make_unique<Buffer>(bytes_of(out_dtype_, elems_)));
  }
  for (const tmap::Access& a : c.epilogue.operands) operands_.push_back(ws.device(a.tensor));
  post_.run = [this](void* stream, const void* contraction_out) { return run(stream, contraction_out); };
  post_.read = [this] { return read_output(results_.back()->p, elems_, out_dtype_); };
  post_.poison = [this] { cuda_ok(cudaMemset(results_.back()->p, 0xFF, bytes_of(out_dtype_, elems_)), "poison"); };
}

UnfusedPasses::~UnfusedPasses() {
  if (lib_) cudaLibraryUnload(lib_);
}

int UnfusedPasses::run(void* stream, const void* contraction_out) const {
  const unsigned blocks = static_cast<unsigned>((elems_ + 255) / 256);
  for (std::size_t i = 0; i < passes_.size(); ++i) {
    std::vector<const void*> ptrs = {results_[i]->p};
    for (std::size_t k = 0; k < 4; ++k) {
      const int src = k < passes_[i].inputs.size() ? passes_[i].inputs[k] : -1;
      ptrs.push_back(src == -1 ? contraction_out : results_[src]->p);
    }
    ptrs.insert(ptrs.end(), operands_.begin(), operands_.end());
    std::vector<void*> args;
    for (const void*& p : ptrs) args.push_back(&p);
    const cudaError_t e = cudaLaunchKernel(reinterpret_cast<const void*>(passes_[i].kernel), dim3(blocks), dim3(256),
                                           args.data(), 0, static_cast<cudaStream_t>(stream));
    if (e != cudaSuccess) return static_cast<int>(e);
  }
  return 0;
}

}  // namespace bench
