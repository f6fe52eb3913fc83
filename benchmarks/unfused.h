// The unfused sequence after a contraction (epilogue_forms.h's kernels), compiled and run.
#pragma once

#include <memory>
#include <vector>

#include "bench_common.h"
#include "epilogue_forms.h"
#include "tmap/runtime/nvrtc_compiler.h"

namespace bench {

/// The unfused sequence's kernels, compiled with NVRTC, on the workspace's operands.
class UnfusedPasses {
 public:
  UnfusedPasses(const Compute& c, const EpilogueView& v, tmap::Workspace& ws, tmap::NvrtcCompiler& compiler);
  ~UnfusedPasses();
  UnfusedPasses(const UnfusedPasses&) = delete;
  UnfusedPasses& operator=(const UnfusedPasses&) = delete;

  int count() const { return static_cast<int>(passes_.size()); }
  /// The passes after a contraction whose output (in the output's dtype and layout) is given.
  const PostOps& post() const { return post_; }

 private:
  struct Pass {
    cudaKernel_t kernel = nullptr;
    std::vector<int> inputs;  ///< -1: the contraction's output; else an earlier pass's result.
  };
  int run(void* stream, const void* contraction_out) const;

  std::vector<Pass> passes_;
  std::vector<std::unique_ptr<Buffer>> results_;  ///< One per pass; the last is the final output.
  std::vector<const void*> operands_;
  std::size_t elems_ = 0;
  tmap::DType out_dtype_ = tmap::DType::kFloat16;
  cudaLibrary_t lib_ = nullptr;
  PostOps post_;
};

}  // namespace bench
