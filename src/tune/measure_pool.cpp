#include "tmap/tune/measure_pool.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include "tmap/support/diagnostic.h"

namespace tmap {

MeasurePool::MeasurePool(std::vector<Measurer*> gpus)
    : gpus_(std::move(gpus)), usage_(gpus_.size()), taken_(gpus_.size(), false), lanes_(gpus_.size()) {
  if (gpus_.empty()) throw InternalError("a measure pool needs a GPU");
  for (std::size_t g = 0; g < gpus_.size(); ++g) threads_.emplace_back([this, g] { serve(g); });
}

MeasurePool::~MeasurePool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
  }
  work_.notify_all();
  for (std::thread& t : threads_) t.join();
}

/// A GPU's thread: runs the jobs given to its lane, one at a time, until the pool closes.
void MeasurePool::serve(std::size_t gpu) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_.wait(lock, [&] { return closing_ || lanes_[gpu].job.has_value(); });
    if (!lanes_[gpu].job) return;  // closing, with nothing left to run
    Job job = std::move(*lanes_[gpu].job);
    Done d{lanes_[gpu].tag, lanes_[gpu].client, gpu, {}, 0};
    lock.unlock();
    const auto t0 = std::chrono::steady_clock::now();
    try {
      d.result = job(*gpus_[gpu]);
    } catch (const std::exception& e) {
      d.result.status = MeasureStatus::kWorkerError;
      d.result.message = exception_text(e);
    }
    d.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    lock.lock();
    lanes_[gpu].job.reset();
    done_.push_back(std::move(d));
    finished_.notify_all();
  }
}

std::size_t MeasurePool::submit(std::uint64_t tag, Job job, MeasureClient* client) {
  std::size_t gpu = 0;
  while (gpu < size() && taken_[gpu]) ++gpu;
  if (gpu == size()) throw InternalError("MeasurePool::submit with every GPU busy");
  start(gpu, tag, std::move(job), client);
  return gpu;
}

std::size_t MeasurePool::in_flight() const {
  return static_cast<std::size_t>(std::count(taken_.begin(), taken_.end(), true));
}

void MeasurePool::start(std::size_t gpu, std::uint64_t tag, Job job, MeasureClient* client) {
  taken_[gpu] = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    lanes_[gpu].job = std::move(job);
    lanes_[gpu].tag = tag;
    lanes_[gpu].client = client;
  }
  work_.notify_all();
}

std::optional<MeasurePool::Done> MeasurePool::collect(double timeout_s) {
  if (in_flight() == 0) return std::nullopt;
  std::unique_lock<std::mutex> lock(mu_);
  auto any = [&] { return !done_.empty(); };
  if (timeout_s < 0) finished_.wait(lock, any);
  else if (!finished_.wait_for(lock, std::chrono::duration<double>(timeout_s), any)) return std::nullopt;
  Done d = std::move(done_.front());
  done_.erase(done_.begin());
  lock.unlock();
  taken_[d.gpu] = false;
  ++usage_[d.gpu].measured;
  usage_[d.gpu].busy_s += d.seconds;
  return d;
}

void MeasurePool::deliver(Done d) {
  if (!d.client) throw InternalError("MeasurePool::deliver: the job has no client");
  MeasureClient* client = d.client;
  client->measured(std::move(d), *this);
}

void MeasurePool::deliver_all() {
  while (std::optional<Done> d = collect(-1)) deliver(std::move(*d));
}

void MeasurePool::abandon_all() {
  while (collect(-1)) {
  }
}

MeasurePool::Done MeasurePool::run_on(std::size_t gpu, Job job) {
  if (in_flight() != 0 || gpu >= size()) throw InternalError("MeasurePool::run_on while measuring, or no such GPU");
  start(gpu, 0, std::move(job), nullptr);
  return *collect(-1);
}

void MeasurePool::prepare(const Compute& c) {
  for (Measurer* m : gpus_) m->prepare(c);
}

void MeasurePool::label(std::size_t gpu, std::string workload, double best_us) {
  usage_[gpu].workload = std::move(workload);
  usage_[gpu].best_us = best_us;
}

std::vector<DeviceInfo> choose_gpus(const std::string& spec, const std::vector<DeviceInfo>& visible) {
  std::vector<DeviceInfo> out;
  if (spec.empty() || spec == "all") {
    out = visible;
  } else {
    std::size_t at = 0;
    for (;;) {
      const std::size_t comma = spec.find(',', at);
      const std::string item = spec.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
      const bool digits = !item.empty() && item.size() <= 4 && item.find_first_not_of("0123456789") == std::string::npos;
      if (!digits)
        throw UserError("--gpus: '" + item + "' is not a GPU index; give 'all' or indices such as 0,2");
      const int index = std::stoi(item);
      auto it = std::find_if(visible.begin(), visible.end(), [&](const DeviceInfo& d) { return d.index == index; });
      if (it == visible.end())
        throw UserError("--gpus: there is no GPU " + item + " (" + std::to_string(visible.size()) +
                        " visible; CUDA_VISIBLE_DEVICES renumbers them from 0); `tmap version` lists them");
      for (const DeviceInfo& d : out)
        if (d.index == index) throw UserError("--gpus: GPU " + item + " is named twice; name each GPU once");
      out.push_back(*it);
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
  }
  for (const DeviceInfo& d : out)
    if (d.name != out.front().name || d.compute_capability != out.front().compute_capability)
      throw UserError("--gpus: GPU " + std::to_string(out.front().index) + " (" + out.front().name + ") and GPU " +
                      std::to_string(d.index) + " (" + d.name + ") are different models, and a record is comparable "
                      "only on its own; tune on GPUs of one model, e.g. --gpus " + std::to_string(d.index) +
                      ", and the others in a second run");
  return out;
}

std::string bound_by(const MeasurePool& gpus, double wall_s, double compile_wait_gpu_s) {
  const double capacity = static_cast<double>(gpus.size()) * std::max(wall_s, 1e-9);
  double busy = 0;
  for (const MeasurePool::Usage& u : gpus.usage()) busy += u.busy_s;
  if (compile_wait_gpu_s > 0.1 * capacity) return "compilation";
  return busy >= 0.8 * capacity ? "measurement" : "the search";
}

}  // namespace tmap
