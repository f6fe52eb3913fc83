// Run-time compilation of generated kernels with NVRTC, for the detected GPU or a named
// architecture. Needs no GPU: CPU tests compile every generated kernel this way.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace tmap {

struct CompileResult {
  bool ok = false;
  std::string log;          ///< NVRTC's log (errors and warnings), kept on failure.
  std::vector<char> cubin;  ///< The compiled binary, when ok.
  double seconds = 0;       ///< Compile time (0 for a cache hit).
  bool cached = false;
  bool cancelled = false;  ///< Not compiled: the caller no longer wanted it (not ok, not a failure).
};

/// Polled while a compile waits to start: true when its result is no longer wanted.
using CompileCancelled = std::function<bool()>;

/// "sm_90" -> 90; a UserError naming the supported architectures for anything else, including an
/// architecture this NVRTC cannot compile for.
int parse_arch(const std::string& arch);
/// The compute capabilities this NVRTC compiles for (75, 80, ..., 120).
std::vector<int> supported_archs();

/// The CUDA include directory NVRTC needs for <mma.h>: $CUDA_HOME/include, else the toolkit's
/// directory found when tmap was built.
std::string cuda_include_dir();

/// Compiles CUDA source to a cubin for one architecture; results are cached in memory by
/// source and options. Thread-safe: compile from a pool of threads.
class NvrtcCompiler {
 public:
  /// With a `cache_dir`, binaries are also kept on disk (one file per source and options hash)
  /// and reused across runs.
  explicit NvrtcCompiler(int compute_capability, std::string cache_dir = {});
  /// Once `cancelled` says so, a compile that has not started (e.g. one waiting for a compile
  /// worker) returns at once, marked cancelled.
  CompileResult compile(const std::string& source, const std::string& name, const CompileCancelled& cancelled = {});
  int compute_capability() const { return cc_; }

 private:
  int cc_;
  std::string cache_dir_;
  std::vector<std::string> options_;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const CompileResult>> cache_;
};

/// NVRTC compiles of one process do not overlap on every machine (on the H100 machine 16
/// threads compiled no faster than one, 16 processes about 4x faster), so NvrtcCompiler can hand
/// its compiles to `count` persistent `binary compile-worker` processes (0: one per core; the
/// environment's TMAP_COMPILE_WORKERS overrides the count, 0 turning them off). An empty
/// `binary` turns them off. A worker that dies or hangs costs nothing but time: its job is
/// compiled in-process. Returns the number of workers.
unsigned use_compile_workers(const std::string& binary, unsigned count = 0);

/// The compile worker's loop (`tmap compile-worker`): requests from `in`, replies to `out`,
/// until end of input.
int run_compile_worker(std::FILE* in, std::FILE* out);

/// A source to compile and the name NVRTC reports it under.
struct CompileJob {
  std::string name;
  std::string source;
};

/// Compiles every job on `threads` threads (0: all cores); results in job order, each with its
/// own compile time. Once `cancelled` says so, the jobs not yet started return cancelled.
/// `done`, when given, is called with each job's index and result as soon as it is compiled
/// (on the compiling thread), so that a caller can use the first results before the last.
std::vector<CompileResult> compile_parallel(NvrtcCompiler& compiler, const std::vector<CompileJob>& jobs,
                                            unsigned threads = 0, const CompileCancelled& cancelled = {},
                                            const std::function<void(std::size_t, const CompileResult&)>& done = nullptr);

}  // namespace tmap
