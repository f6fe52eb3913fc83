#include "tmap/runtime/measure_worker.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <list>
#include <map>
#include <memory>

#include "tmap/codegen/reference_emitter.h"
#include "tmap/runtime/device.h"
#include "tmap/runtime/nvrtc_compiler.h"

namespace tmap {
namespace {

/// The compute a request's kernel runs on: its own, or a range's at the request's size, which
/// the plan must take (a plan of another range would index past the tensors).
Compute sized_compute(const MeasureRequest& req) {
  Compute c = compute_from_json(req.compute, "measure request");
  const tmap_launch_plan& plan = req.launch.plan;
  if (req.size == 0 && !c.dynamic.active() && plan.size_lo == 0) return c;
  if (!c.dynamic.active() || plan.size_lo != c.dynamic.lo || plan.size_hi != c.dynamic.hi || req.size < c.dynamic.lo ||
      req.size > c.dynamic.hi)
    throw std::runtime_error("measure request: size " + std::to_string(req.size) +
                             " is not one both the compute's range and the kernel's plan take");
  return compute_at(c, req.size);
}

/// A binary the parent wrote (empty when it cannot be read: loading it then fails and says so).
std::vector<char> read_binary(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

const char* status_name(MeasureStatus s) {
  switch (s) {
    case MeasureStatus::kOk: return "ok";
    case MeasureStatus::kWrongResult: return "wrong_result";
    case MeasureStatus::kLoadError: return "load_error";
    case MeasureStatus::kLaunchError: return "launch_error";
    case MeasureStatus::kRuntimeError: return "runtime_error";
    case MeasureStatus::kTimeout: return "timeout";
    case MeasureStatus::kWorkerError: return "worker_error";
  }
  return "unknown";
}

MeasureRequest MeasureRequest::for_kernel(const Compute& c, const KernelSource& k, const std::string& cubin_path,
                                          int a_tensor, int b_tensor, std::int64_t size) {
  MeasureRequest r;
  r.compute = to_json(c);
  r.size = size;
  r.launch = plan_launch(k);
  r.cubin_path = cubin_path;
  r.a_tensor = a_tensor;
  r.b_tensor = b_tensor;
  return r;
}

nlohmann::json to_json(const MeasureRequest& r) {
  return {{"compute", r.compute},         {"launch", to_json(r.launch)}, {"cubin", r.cubin_path},
          {"reference_cubin", r.reference_cubin_path},
          {"a_tensor", r.a_tensor},       {"b_tensor", r.b_tensor},      {"verify", r.verify},
          {"tolerance", r.tolerance},     {"warmup", r.timing.warmup},   {"min_repeats", r.timing.min_repeats},
          {"min_total_ms", r.timing.min_total_ms}, {"graph_runs", r.timing.graph_runs},
          {"flush_l2", r.timing.flush_l2}, {"long_run_ms", r.timing.long_run_ms},
          {"slow_factor", r.timing.slow_factor}, {"seed", r.seed},
          {"size", r.size}};
}

MeasureRequest request_from_json(const nlohmann::json& j) {
  MeasureRequest r;
  r.compute = j.at("compute");
  r.launch = launch_plan_from_json(j.at("launch"));
  r.cubin_path = j.at("cubin");
  r.reference_cubin_path = j.value("reference_cubin", std::string());
  r.a_tensor = j.at("a_tensor");
  r.b_tensor = j.at("b_tensor");
  r.verify = j.at("verify");
  r.tolerance = j.at("tolerance");
  r.timing = {j.at("warmup"),     j.at("min_repeats"), j.at("min_total_ms"),
              j.at("graph_runs"), j.at("flush_l2"),    j.value("long_run_ms", 0.0), 0.0,
              j.value("slow_factor", 0.0)};
  r.seed = j.at("seed");
  r.size = j.value("size", std::int64_t{0});
  return r;
}

nlohmann::json to_json(const MeasureResult& r) {
  const MeasurePhases& p = r.phases;
  return {{"status", status_name(r.status)},
          {"message", r.message},
          {"rel_l2", r.rel_l2},
          {"median_us", r.median_us},
          {"times_us", r.times_us},
          {"phases", {p.inputs, p.reference, p.load, p.check, p.time, p.other}}};
}

MeasureResult result_from_json(const nlohmann::json& j) {
  MeasureResult r;
  const std::string s = j.at("status");
  for (auto st : {MeasureStatus::kOk, MeasureStatus::kWrongResult, MeasureStatus::kLoadError, MeasureStatus::kLaunchError,
                  MeasureStatus::kRuntimeError, MeasureStatus::kTimeout, MeasureStatus::kWorkerError})
    if (s == status_name(st)) r.status = st;
  r.message = j.at("message");
  r.rel_l2 = j.at("rel_l2").is_number() ? j.at("rel_l2").get<double>() : INFINITY;
  r.median_us = j.at("median_us");
  r.times_us = j.at("times_us").get<std::vector<double>>();
  const std::vector<double> p = j.value("phases", std::vector<double>{});
  if (p.size() >= 5) r.phases = {p[0], p[1], p[2], p[3], p[4], p.size() > 5 ? p[5] : 0.0};
  return r;
}

// ---- Reference binaries --------------------------------------------------------------------

ReferenceBinaries::ReferenceBinaries(int compute_capability)
    : compiler_(compute_capability), dir_("tmap_reference", "reference kernels") {}

ReferenceBinaries::~ReferenceBinaries() {
  for (auto& [key, path] : paths_) path.wait();  // before dir_ goes
}

std::shared_future<std::string> ReferenceBinaries::start(const nlohmann::json& compute) {
  std::string key = compute.dump();
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = paths_.find(key); it != paths_.end()) return it->second;
  const std::string file = dir_.path() + "/reference" + std::to_string(paths_.size()) + ".cubin";
  std::shared_future<std::string> f =
      std::async(std::launch::async, [this, compute, file] {
        const KernelSource k = emit_reference_kernel(compute_from_json(compute, "reference"));
        const CompileResult r = compiler_.compile(k.code, k.name);
        if (!r.ok) return std::string();
        std::ofstream(file, std::ios::binary).write(r.cubin.data(), static_cast<std::streamsize>(r.cubin.size()));
        return file;
      }).share();
  paths_.emplace(std::move(key), f);
  return f;
}

void ReferenceBinaries::prepare(const nlohmann::json& compute) { start(compute); }

std::string ReferenceBinaries::path(const nlohmann::json& compute) {
  try {
    return start(compute).get();
  } catch (const std::exception&) {
    return {};  // the worker compiles it and says why it fails
  }
}

// ---- The worker process ------------------------------------------------------------------

namespace {

std::string key_of(const Compute& sized, std::uint64_t seed) { return to_json(sized).dump() + "#" + std::to_string(seed); }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// One shape's tensors and reference output, as a worker keeps them.
struct Prepared {
  std::unique_ptr<Compute> compute;  ///< Outlives the workspace, which refers to it.
  std::unique_ptr<Workspace> workspace;
  std::vector<double> reference;
  double fastest_us = 0;  ///< Of the correct candidates timed so far (TimingOptions::slow_factor).

  std::size_t bytes() const { return workspace->device_bytes() + reference.size() * sizeof(double); }
};

/// The shapes a worker has prepared, by sized compute and seed: the candidates of one shape share
/// its inputs, and its reference runs once, whether a request names the shape itself or a
/// range's kernel at that size. The least recently used go while those kept take more than the
/// budget (device tensors and host references), so that a run over many large shapes holds a
/// bounded share of the GPU's and the host's memory.
class PreparedShapes {
 public:
  explicit PreparedShapes(std::size_t budget_bytes) : budget_(budget_bytes) {}

  /// The shape of `req`, prepared now if it is not kept (its seconds added to `phases`).
  Prepared& get(const MeasureRequest& req, int cc_of_device, MeasurePhases& phases) {
    Compute sized = sized_compute(req);
    const std::string key = key_of(sized, req.seed);
    for (auto it = kept_.begin(); it != kept_.end(); ++it)
      if (it->first == key) {
        kept_.splice(kept_.begin(), kept_, it);
        return kept_.front().second;
      }
    kept_.emplace_front(key, prepare(std::move(sized), req, cc_of_device, phases));
    std::size_t total = 0;
    for (auto it = kept_.begin(); it != kept_.end();) {
      const std::size_t bytes = it->second.bytes();
      if (it != kept_.begin() && total + bytes > budget_) {
        it = kept_.erase(it);
      } else {
        total += bytes;
        ++it;
      }
    }
    return kept_.front().second;
  }

 private:
  Prepared prepare(Compute sized, const MeasureRequest& req, int cc_of_device, MeasurePhases& phases) {
    const auto t0 = std::chrono::steady_clock::now();
    Prepared p;
    p.compute = std::make_unique<Compute>(std::move(sized));
    p.workspace = std::make_unique<Workspace>(*p.compute, req.seed, HostValues::kDrop);
    phases.inputs += seconds_since(t0);
    const auto t1 = std::chrono::steady_clock::now();
    if (req.verify && !req.reference_cubin_path.empty()) {
      p.reference = gpu_reference(*p.workspace, read_binary(req.reference_cubin_path));
    } else if (req.verify) {
      if (!compiler_) compiler_ = std::make_unique<NvrtcCompiler>(cc_of_device);
      p.reference = gpu_reference(*p.workspace, *compiler_);
    }
    if (!p.reference.empty()) p.workspace->keep_reference(p.reference);  // each candidate's check sums on the GPU
    phases.reference += seconds_since(t1);
    return p;
  }

  const std::size_t budget_;
  std::list<std::pair<std::string, Prepared>> kept_;  ///< Most recently used first.
  std::unique_ptr<NvrtcCompiler> compiler_;
};

/// The result of running one request's kernel on its prepared shape.
MeasureResult measure_request(MeasureRequest& req, Prepared& p) {
  MeasureResult result;
  if (req.timing.slow_factor > 0) req.timing.slow_us = req.timing.slow_factor * p.fastest_us;
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<char> cubin = read_binary(req.cubin_path);
  const double read_s = seconds_since(t0);
  // Both arms lvalues: a temporary in one arm would copy the reference (46 MB at a decode
  // gate_up's M = 200) on every candidate.
  static const std::vector<double> kUnchecked;
  const std::vector<double>& reference = req.verify ? p.reference : kUnchecked;
  KernelRun run = run_candidate(*p.workspace, reference, req.a_tensor, req.b_tensor, req.launch, cubin, req.timing,
                                req.size);
  run.phases.load += read_s;
  result.rel_l2 = run.rel_l2;
  result.median_us = run.median_us;
  result.times_us = run.times_us;
  result.phases = run.phases;
  result.message = run.error;
  switch (run.failure) {
    case FailureKind::kNone:
      result.status = req.verify && !(run.rel_l2 <= req.tolerance) ? MeasureStatus::kWrongResult : MeasureStatus::kOk;
      if (result.status == MeasureStatus::kWrongResult)
        result.message = "relative L2 error " + std::to_string(run.rel_l2) + " over tolerance " + std::to_string(req.tolerance);
      break;
    case FailureKind::kLoad: result.status = MeasureStatus::kLoadError; break;
    case FailureKind::kLaunch: result.status = MeasureStatus::kLaunchError; break;
    case FailureKind::kRuntime: result.status = MeasureStatus::kRuntimeError; break;
  }
  if (result.status == MeasureStatus::kOk && (p.fastest_us == 0 || run.median_us < p.fastest_us))
    p.fastest_us = run.median_us;
  return result;
}

}  // namespace

std::string shape_key(const MeasureRequest& req) { return key_of(sized_compute(req), req.seed); }

int run_measure_worker(std::FILE* in, std::FILE* out, int device) {
  std::string device_error;  // answers every request: the parent reports it per candidate
  int cc_of_device = 0;
  std::size_t memory = 0;
  try {
    if (device >= 0) select_device(device);
    for (const DeviceInfo& d : query_runtime().devices)
      if (d.index == std::max(0, device)) cc_of_device = d.compute_capability, memory = d.global_memory_bytes;
  } catch (const std::exception& e) {
    device_error = exception_text(e);
  }
  PreparedShapes shapes(memory / 4);
  std::string line;
  for (int ch; (ch = std::fgetc(in)) != EOF;) {
    if (ch != '\n') {
      line += static_cast<char>(ch);
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    MeasureResult result;
    bool fatal = false;
    try {
      if (!device_error.empty()) throw UserError(device_error);
      MeasureRequest req = request_from_json(nlohmann::json::parse(line));
      MeasurePhases preparing;
      Prepared& shape = shapes.get(req, cc_of_device, preparing);
      result = measure_request(req, shape);
      result.phases.inputs = preparing.inputs;
      result.phases.reference = preparing.reference;
      fatal = result.status != MeasureStatus::kOk && result.status != MeasureStatus::kWrongResult;
    } catch (const std::exception& e) {
      result.status = MeasureStatus::kWorkerError;
      result.message = exception_text(e);
      fatal = true;
    }
    result.phases.other = std::max(0.0, seconds_since(t0) - result.phases.in_worker());
    std::string text = to_json(result).dump() + "\n";
    std::fwrite(text.data(), 1, text.size(), out);
    std::fflush(out);
    line.clear();
    if (fatal) return 3;  // the CUDA context may be corrupt: let the parent start a fresh worker
  }
  return 0;
}

// ---- The parent's side -------------------------------------------------------------------

MeasureWorker::MeasureWorker(std::string binary, double timeout_seconds, int device)
    : binary_(std::move(binary)), timeout_(timeout_seconds), device_(device) {}

MeasureWorker::~MeasureWorker() { stop(false); }

void MeasureWorker::start() {
  int to[2], from[2];
  if (pipe2(to, O_CLOEXEC) != 0 || pipe2(from, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("pipe2: ") + std::strerror(errno));
  const std::string device = std::to_string(device_);  // before fork: the child only execs
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    dup2(to[0], STDIN_FILENO);
    dup2(from[1], STDOUT_FILENO);
    // Ctrl-C in the terminal (or a SIGTERM to the process group) is for the parent, which
    // finishes the measurement in flight; the worker must not die of it in the middle of one (an
    // ignored signal stays ignored across exec). It exits when the parent closes its input.
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    if (device_ >= 0) execl(binary_.c_str(), binary_.c_str(), "worker", "--device", device.c_str(), static_cast<char*>(nullptr));
    else execl(binary_.c_str(), binary_.c_str(), "worker", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(to[0]);
  close(from[1]);
  pid_ = pid;
  to_child_ = to[1];
  from_child_ = from[0];
  pending_.clear();
  ++starts_;
}

void MeasureWorker::stop(bool kill_now) {
  if (pid_ < 0) return;
  if (to_child_ >= 0) close(to_child_);  // end of input: a healthy worker exits
  if (kill_now) kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  if (from_child_ >= 0) close(from_child_);
  pid_ = -1;
  to_child_ = from_child_ = -1;
}

MeasureResult MeasureWorker::measure(const MeasureRequest& request) {
  if (pid_ < 0) start();
  MeasureResult failure;
  std::string line = to_json(request).dump() + "\n";
  signal(SIGPIPE, SIG_IGN);
  if (write(to_child_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    stop(true);
    failure.status = MeasureStatus::kWorkerError;
    failure.message = "the worker did not take the request (it exited)";
    return failure;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_);
  for (;;) {
    if (auto nl = pending_.find('\n'); nl != std::string::npos) {
      std::string reply = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      MeasureResult r = result_from_json(nlohmann::json::parse(reply));
      if (r.status != MeasureStatus::kOk && r.status != MeasureStatus::kWrongResult) stop(false);
      return r;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      stop(true);
      failure.status = MeasureStatus::kTimeout;
      failure.message = "no result within " + std::to_string(timeout_) + " s; the worker was killed";
      return failure;
    }
    pollfd fd{from_child_, POLLIN, 0};
    int ready = poll(&fd, 1, static_cast<int>(left));
    if (ready <= 0) continue;
    char buf[4096];
    ssize_t n = read(from_child_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;  // a signal to the tuner is not the worker's death
    if (n <= 0) {
      int status = 0;
      close(to_child_);
      to_child_ = -1;
      waitpid(pid_, &status, 0);
      close(from_child_);
      from_child_ = -1;
      pid_ = -1;
      failure.status = MeasureStatus::kWorkerError;
      failure.message = WIFSIGNALED(status) ? "the worker was killed by signal " + std::to_string(WTERMSIG(status))
                                            : "the worker exited with status " + std::to_string(WEXITSTATUS(status));
      return failure;
    }
    pending_.append(buf, static_cast<std::size_t>(n));
  }
}

}  // namespace tmap
