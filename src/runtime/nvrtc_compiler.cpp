#include "tmap/runtime/nvrtc_compiler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <cstdlib>
#include <filesystem>

#include <fcntl.h>
#include <nvrtc.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <optional>

#include "tmap/codegen/device_library.h"
#include "tmap/support/diagnostic.h"
#include "tmap/support/files.h"

namespace tmap {

CompileResult compile_here(const std::string& source, const std::string& name, const std::vector<std::string>& options) {
  auto start = std::chrono::steady_clock::now();
  CompileResult r;
  nvrtcProgram prog = nullptr;
  // Every header of the device library, which kernels include by name (tmap/device/*.cuh); both
  // strings of each come from string literals, so they end in a NUL.
  std::vector<const char*> texts, files;
  for (const DeviceHeader& h : device_headers()) {
    texts.push_back(h.text.data());
    files.push_back(h.file.data());
  }
  nvrtcResult rc = nvrtcCreateProgram(&prog, source.c_str(), (name + ".cu").c_str(), static_cast<int>(texts.size()),
                                      texts.data(), files.data());
  if (rc != NVRTC_SUCCESS) {
    r.log = std::string("nvrtcCreateProgram failed: ") + nvrtcGetErrorString(rc);
    return r;
  }
  std::vector<const char*> opts;
  for (const auto& o : options) opts.push_back(o.c_str());
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
  return r;
}

namespace {

/// The largest cubin read back from a compile cache (tmap's largest kernels are well under 1 MiB).
constexpr std::uintmax_t kMaxCachedCubinBytes = 64u << 20;

// The compile workers' protocol: each message is a sequence of blobs, a blob being its length in
// decimal, a newline, and that many bytes. Request: name, options (one per line), source.
// Reply: "ok" or "fail", seconds, log, cubin.
void put_blob(std::string& out, const std::string& b) {
  out += std::to_string(b.size());
  out += '\n';
  out += b;
}

bool get_blob(std::FILE* in, std::string& out) {
  std::size_t n = 0;
  int c;
  bool digits = false;
  while ((c = std::fgetc(in)) != EOF && c != '\n') {
    if (c < '0' || c > '9') return false;
    n = n * 10 + static_cast<std::size_t>(c - '0');
    digits = true;
  }
  if (c == EOF || !digits) return false;
  out.resize(n);
  return std::fread(out.data(), 1, n, in) == n;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at < s.size()) {
    const std::size_t nl = s.find('\n', at);
    out.push_back(s.substr(at, nl == std::string::npos ? std::string::npos : nl - at));
    at = nl == std::string::npos ? s.size() : nl + 1;
  }
  return out;
}

CompileResult cancelled_result() {
  CompileResult r;
  r.cancelled = true;
  r.log = "cancelled before it was compiled";
  return r;
}

/// A kernel compiles in a second or two; a worker silent for this long is killed.
constexpr double kCompileTimeoutS = 300;

/// Persistent `tmap compile-worker` processes, started on demand up to `count`, each compiling
/// one request at a time. A worker that dies, garbles its reply or times out is killed and the
/// job is compiled in-process instead; if the very first worker cannot run at all (an exec
/// failure), the pool turns itself off.
class CompilePool {
 public:
  CompilePool(std::string binary, unsigned count) : binary_(std::move(binary)), count_(std::max(1u, count)) {}
  ~CompilePool() {
    for (Proc& p : idle_) stop(p, false);
  }
  unsigned count() const { return count_; }

  /// The result, or none when the job is the caller's to compile in-process.
  std::optional<CompileResult> compile(const std::string& source, const std::string& name,
                                       const std::vector<std::string>& options, const CompileCancelled& cancelled) {
    Proc p;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      const auto can_start = [&] { return broken_ || !idle_.empty() || started_ < count_; };
      while (!cv_.wait_for(lock, std::chrono::milliseconds(20), can_start))
        if (cancelled && cancelled()) return cancelled_result();
      if (broken_) return std::nullopt;
      if (!idle_.empty()) {
        p = idle_.back();
        idle_.pop_back();
      } else {
        ++started_;
      }
    }
    const bool fresh = p.pid < 0;
    if (fresh && !spawn(p)) return give_up(p, true);
    std::string request, opts;
    for (const auto& o : options) opts += o + "\n";
    put_blob(request, name);
    put_blob(request, opts);
    put_blob(request, source);
    CompileResult r;
    const Reply reply = write_all(p.to, request) ? read_reply(p, r, cancelled) : Reply::kBroken;
    if (reply == Reply::kCancelled) {  // the worker is killed mid-compile: a run's end waits for no compile
      retire(p, false);
      return cancelled_result();
    }
    if (reply == Reply::kBroken) return give_up(p, fresh && !p.answered);
    p.answered = true;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      idle_.push_back(p);
    }
    cv_.notify_one();
    return r;
  }

 private:
  struct Proc {
    pid_t pid = -1;
    int to = -1, from = -1;
    std::string pending;
    bool answered = false;  ///< Has replied at least once (it runs).
  };

  bool spawn(Proc& p) {
    int to[2], from[2];
    if (pipe2(to, O_CLOEXEC) != 0) return false;
    if (pipe2(from, O_CLOEXEC) != 0) {
      close(to[0]), close(to[1]);
      return false;
    }
    const pid_t pid = fork();
    if (pid < 0) {
      close(to[0]), close(to[1]), close(from[0]), close(from[1]);
      return false;
    }
    if (pid == 0) {
      dup2(to[0], STDIN_FILENO);
      dup2(from[1], STDOUT_FILENO);
      signal(SIGINT, SIG_IGN);  // Ctrl-C is for the parent, which ends the batch; workers exit at end of input
      signal(SIGTERM, SIG_IGN);
      execl(binary_.c_str(), binary_.c_str(), "compile-worker", static_cast<char*>(nullptr));
      _exit(127);
    }
    close(to[0]);
    close(from[1]);
    signal(SIGPIPE, SIG_IGN);
    p.pid = pid;
    p.to = to[1];
    p.from = from[0];
    return true;
  }

  static void stop(Proc& p, bool kill_now) {
    if (p.pid < 0) return;
    close(p.to);
    if (kill_now) kill(p.pid, SIGKILL);
    int status = 0;
    waitpid(p.pid, &status, 0);
    close(p.from);
    p = Proc{};
  }

  /// Kills the worker and frees its place; `broken` turns the pool off.
  void retire(Proc& p, bool broken) {
    stop(p, true);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --started_;
      broken_ = broken_ || broken;
    }
    cv_.notify_all();
  }

  /// The job goes back to the caller (compiled in-process); `broken` turns the pool off.
  std::optional<CompileResult> give_up(Proc& p, bool broken) {
    retire(p, broken);
    return std::nullopt;
  }

  enum class Reply { kOk, kBroken, kCancelled };

  /// Reads the next blob from `p`, waiting until `deadline` or the job is cancelled.
  static Reply read_blob(Proc& p, std::string& out, std::chrono::steady_clock::time_point deadline,
                         const CompileCancelled& cancelled) {
    for (;;) {
      if (const std::size_t nl = p.pending.find('\n'); nl != std::string::npos) {
        if (nl == 0 || p.pending.find_first_not_of("0123456789") != nl) return Reply::kBroken;
        const std::size_t n = std::stoull(p.pending.substr(0, nl));
        if (p.pending.size() - nl - 1 >= n) {
          out = p.pending.substr(nl + 1, n);
          p.pending.erase(0, nl + 1 + n);
          return Reply::kOk;
        }
      }
      if (cancelled && cancelled()) return Reply::kCancelled;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
      if (left <= 0) return Reply::kBroken;
      pollfd fd{p.from, POLLIN, 0};
      if (poll(&fd, 1, static_cast<int>(std::min<long long>(left, cancelled ? 20 : 1000))) <= 0) continue;
      char buf[65536];
      const ssize_t n = read(p.from, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Reply::kBroken;
      p.pending.append(buf, static_cast<std::size_t>(n));
    }
  }

  static Reply read_reply(Proc& p, CompileResult& r, const CompileCancelled& cancelled) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(static_cast<long>(kCompileTimeoutS));
    std::string status, seconds, cubin;
    for (std::string* blob : {&status, &seconds, &r.log, &cubin})
      if (const Reply got = read_blob(p, *blob, deadline, cancelled); got != Reply::kOk) return got;
    r.ok = status == "ok";
    r.seconds = std::strtod(seconds.c_str(), nullptr);
    r.cubin.assign(cubin.begin(), cubin.end());
    return status == "ok" || status == "fail" ? Reply::kOk : Reply::kBroken;
  }

  std::string binary_;
  unsigned count_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<Proc> idle_;
  unsigned started_ = 0;
  bool broken_ = false;
};

std::mutex g_pool_mutex;
std::shared_ptr<CompilePool> g_pool;

std::shared_ptr<CompilePool> current_pool() {
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  return g_pool;
}

CompileResult compile_in_pool(const std::string& source, const std::string& name, const std::vector<std::string>& options,
                              const CompileCancelled& cancelled) {
  if (std::shared_ptr<CompilePool> pool = current_pool())
    if (std::optional<CompileResult> r = pool->compile(source, name, options, cancelled)) return *r;
  return compile_here(source, name, options);
}

}  // namespace

unsigned use_compile_workers(const std::string& binary, unsigned count) {
  if (const char* env = std::getenv("TMAP_COMPILE_WORKERS"); env && *env) count = static_cast<unsigned>(std::atoi(env));
  else if (count == 0) count = std::max(1u, std::thread::hardware_concurrency());
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  g_pool = binary.empty() || count == 0 ? nullptr : std::make_shared<CompilePool>(binary, count);
  return g_pool ? g_pool->count() : 0;
}

int run_compile_worker(std::FILE* in, std::FILE* out) {
  std::string name, options, source;
  while (get_blob(in, name) && get_blob(in, options) && get_blob(in, source)) {
    const CompileResult r = compile_here(source, name, split_lines(options));
    std::string reply;
    put_blob(reply, r.ok ? "ok" : "fail");
    put_blob(reply, std::to_string(r.seconds));
    put_blob(reply, r.log);
    put_blob(reply, std::string(r.cubin.begin(), r.cubin.end()));
    if (std::fwrite(reply.data(), 1, reply.size(), out) != reply.size() || std::fflush(out) != 0) return 1;
  }
  return 0;
}

std::vector<int> supported_archs() {
  int n = 0;
  if (nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0) return {};
  std::vector<int> out(static_cast<std::size_t>(n));
  if (nvrtcGetSupportedArchs(out.data()) != NVRTC_SUCCESS) return {};
  return out;
}

int parse_arch(const std::string& arch) {
  // sm_90a names sm_90 with its architecture-specific instructions (wgmma, setmaxnreg), which
  // tmap always compiles sm_90 kernels with: the two are one target here.
  const std::string digits = arch == "sm_90a" ? "sm_90" : arch;
  const std::vector<int> known = supported_archs();
  std::string list;
  for (int cc : known) list += (list.empty() ? "" : ", ") + ("sm_" + std::to_string(cc));
  const std::string hint = "this NVRTC compiles for " + (list.empty() ? std::string("none it can name") : list) +
                           "; for example --arch sm_90 (H100) or --arch sm_80 (A100)";
  if (digits.size() < 5 || digits.size() > 7 || digits.rfind("sm_", 0) != 0 ||
      digits.find_first_not_of("0123456789", 3) != std::string::npos)
    throw UserError(format_diagnostic(SourceLoc::whole("--arch"), "architecture '" + arch + "' is not of the form sm_XY", hint));
  const int cc = std::stoi(digits.substr(3));
  if (!known.empty() && std::find(known.begin(), known.end(), cc) == known.end())
    throw UserError(format_diagnostic(SourceLoc::whole("--arch"), "architecture '" + arch + "' is not one NVRTC compiles for", hint));
  return cc;
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

CompileResult NvrtcCompiler::compile(const std::string& source, const std::string& name, const CompileCancelled& cancelled) {
  std::string key;
  for (const auto& o : options_) key += o + "\n";
  key += device_library_fingerprint() + "\n";
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
    std::string bytes, unread;  // an absent, empty or unreadable file (a FIFO too): compiled again
    if (read_bounded(cached_file.string(), kMaxCachedCubinBytes, bytes, unread, 1) && !bytes.empty()) {
      CompileResult r;
      r.cubin.assign(bytes.begin(), bytes.end());
      r.ok = true;
      r.cached = true;
      std::lock_guard<std::mutex> lock(mutex_);
      cache_.emplace(key, std::make_shared<const CompileResult>(r));
      return r;
    }
  }
  CompileResult r = compile_in_pool(source, name, options_, cancelled);
  if (r.cancelled) return r;  // not a result of this source: not cached
  if (r.ok && !cached_file.empty()) {
    // Whole (a temporary file renamed over it, so that a reader in this or another process never
    // sees half a cubin); a cache that cannot be written costs a compilation next time, nothing else.
    std::error_code ec;
    std::filesystem::create_directories(cache_dir_, ec);
    try {
      write_file(cached_file.string(), std::string(r.cubin.begin(), r.cubin.end()), "--cache-dir");
    } catch (const UserError&) {
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  cache_.emplace(key, std::make_shared<const CompileResult>(r));
  return r;
}

std::vector<CompileResult> compile_parallel(NvrtcCompiler& compiler, const std::vector<CompileJob>& jobs,
                                            unsigned threads, const CompileCancelled& cancelled,
                                            const std::function<void(std::size_t, const CompileResult&)>& done) {
  std::vector<CompileResult> results(jobs.size());
  std::atomic<std::size_t> next{0};
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = std::min<unsigned>(threads, static_cast<unsigned>(std::max<std::size_t>(1, jobs.size())));
  auto worker = [&] {
    for (std::size_t i; (i = next++) < jobs.size();) {
      results[i] = cancelled && cancelled() ? cancelled_result() : compiler.compile(jobs[i].source, jobs[i].name, cancelled);
      if (done) done(i, results[i]);
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  return results;
}

}  // namespace tmap
