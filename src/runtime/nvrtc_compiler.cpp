#include "tmap/runtime/nvrtc_compiler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <iterator>
#include <thread>
#include <cstdlib>
#include <filesystem>

#include <nvrtc.h>

#include "tmap/support/diagnostic.h"

namespace tmap {

int parse_arch(const std::string& arch) {
  // sm_90a names sm_90 with its architecture-specific instructions (wgmma, setmaxnreg), which
  // tmap always compiles sm_90 kernels with: the two are one target here.
  const std::string digits = arch == "sm_90a" ? "sm_90" : arch;
  if (digits.size() >= 5 && digits.rfind("sm_", 0) == 0 && digits.find_first_not_of("0123456789", 3) == std::string::npos)
    return std::stoi(digits.substr(3));
  throw UserError(format_diagnostic(SourceLoc::whole("--arch"), "architecture '" + arch + "' is not of the form sm_XY",
                                    "for example --arch sm_90 (H100) or --arch sm_80 (A100)"));
}

std::string cuda_include_dir() {
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    if (const char* root = std::getenv(var); root && *root) {
      std::filesystem::path inc = std::filesystem::path(root) / "include";
      if (std::filesystem::exists(inc / "mma.h")) return inc.string();
    }
  }
  return TMAP_CUDA_INCLUDE_DIR;
}

NvrtcCompiler::NvrtcCompiler(int compute_capability, std::string cache_dir)
    : cc_(compute_capability), cache_dir_(std::move(cache_dir)) {
  // sm_90 kernels are compiled for sm_90a, whose cubins load on every sm_90 device and may use
  // Hopper's wgmma, setmaxnreg and TMA instructions (other architectures have no such suffix here).
  const std::string target = "sm_" + std::to_string(cc_) + (cc_ == 90 ? "a" : "");
  options_ = {"--gpu-architecture=" + target, "--std=c++17", "-I" + cuda_include_dir(),
              "-default-device"};
}

CompileResult NvrtcCompiler::compile(const std::string& source, const std::string& name) {
  std::string key;
  for (const auto& o : options_) key += o + "\n";
  key += source;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = cache_.find(key); it != cache_.end()) {
      CompileResult r = *it->second;
      r.cached = true;
      r.seconds = 0;
      return r;
    }
  }
  // The disk cache: a file named by the hash of options and source, holding the cubin.
  std::filesystem::path cached_file;
  if (!cache_dir_.empty()) {
    cached_file = std::filesystem::path(cache_dir_) /
                  (name + "_" + std::to_string(std::hash<std::string>{}(key)) + ".sm_" + std::to_string(cc_) + ".cubin");
    std::ifstream in(cached_file, std::ios::binary);
    if (in) {
      CompileResult r;
      r.cubin.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      r.ok = !r.cubin.empty();
      r.cached = true;
      if (r.ok) {
        std::lock_guard<std::mutex> lock(mutex_);
        cache_.emplace(key, std::make_shared<const CompileResult>(r));
        return r;
      }
    }
  }
  auto start = std::chrono::steady_clock::now();
  CompileResult r;
  nvrtcProgram prog = nullptr;
  nvrtcResult rc = nvrtcCreateProgram(&prog, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr);
  if (rc != NVRTC_SUCCESS) {
    r.log = std::string("nvrtcCreateProgram failed: ") + nvrtcGetErrorString(rc);
    return r;
  }
  std::vector<const char*> opts;
  for (const auto& o : options_) opts.push_back(o.c_str());
  rc = nvrtcCompileProgram(prog, static_cast<int>(opts.size()), opts.data());
  std::size_t log_size = 0;
  nvrtcGetProgramLogSize(prog, &log_size);
  if (log_size > 1) {
    r.log.resize(log_size);
    nvrtcGetProgramLog(prog, r.log.data());
    r.log.resize(log_size - 1);
  }
  if (rc == NVRTC_SUCCESS) {
    std::size_t size = 0;
    nvrtcGetCUBINSize(prog, &size);
    r.cubin.resize(size);
    nvrtcGetCUBIN(prog, r.cubin.data());
    r.ok = true;
  } else if (r.log.empty()) {
    r.log = nvrtcGetErrorString(rc);
  }
  nvrtcDestroyProgram(&prog);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (r.ok && !cached_file.empty()) {
    // Written to a temporary name and renamed, so a concurrent reader never sees half a file.
    std::error_code ec;
    std::filesystem::create_directories(cache_dir_, ec);
    std::filesystem::path tmp = cached_file.string() + ".tmp" + std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id()));
    std::ofstream(tmp, std::ios::binary).write(r.cubin.data(), static_cast<std::streamsize>(r.cubin.size()));
    std::filesystem::rename(tmp, cached_file, ec);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  cache_.emplace(key, std::make_shared<const CompileResult>(r));
  return r;
}

std::vector<CompileResult> compile_parallel(NvrtcCompiler& compiler, const std::vector<CompileJob>& jobs,
                                            unsigned threads, const std::atomic<bool>* cancel) {
  std::vector<CompileResult> results(jobs.size());
  std::atomic<std::size_t> next{0};
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = std::min<unsigned>(threads, static_cast<unsigned>(std::max<std::size_t>(1, jobs.size())));
  auto worker = [&] {
    for (std::size_t i; (i = next++) < jobs.size();) {
      if (cancel && cancel->load()) {
        results[i].log = "cancelled before it was compiled";
        continue;
      }
      results[i] = compiler.compile(jobs[i].source, jobs[i].name);
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  return results;
}

}  // namespace tmap
