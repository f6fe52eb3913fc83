#include "tune_gpus.h"

#include <cstdio>

namespace tmap::cli {

TuneGpus open_gpus(const std::vector<DeviceInfo>& devices, double timeout_s, double measure_ms, std::uint64_t seed) {
  TuneGpus g;
  g.devices = devices;
  std::vector<Measurer*> raw;
  // Each workload's reference kernel is compiled once for every GPU.
  auto references = std::make_shared<ReferenceBinaries>(devices.empty() ? 0 : devices.front().compute_capability);
  TimingOptions timing = tuning_timing(measure_ms);
  timing.slow_factor = kTuneSlowFactor;
  for (const DeviceInfo& d : devices) {
    g.measurers.push_back(std::make_unique<WorkerMeasurer>("/proc/self/exe", timeout_s, timing, true, seed,
                                                           MeasureGpu{d.index, d.uuid, d.name}, references));
    raw.push_back(g.measurers.back().get());
  }
  g.pool = std::make_unique<MeasurePool>(std::move(raw));
  return g;
}

namespace {

double busy_percent(const MeasurePool::Usage& u, double wall_s) { return wall_s > 0 ? 100 * u.busy_s / wall_s : 0; }

}  // namespace

std::vector<std::string> gpu_lines(const MeasurePool& pool, double elapsed_s) {
  std::vector<std::string> lines;
  for (std::size_t i = 0; i < pool.size(); ++i) {
    const MeasurePool::Usage& u = pool.usage()[i];
    const MeasureGpu gpu = pool.measurer(i).gpu();
    char line[512];
    std::snprintf(line, sizeof line, "  GPU %d: %5d trials | %s | best %s | busy %.0f%%", gpu.index, u.measured,
                  u.workload.empty() ? "-" : u.workload.c_str(),
                  u.best_us > 0 ? (std::to_string(u.best_us).substr(0, 7) + " us").c_str() : "none yet",
                  busy_percent(u, elapsed_s));
    lines.push_back(line);
  }
  return lines;
}

void ProgressBlock::show(const std::vector<std::string>& lines) {
  if (!tty_) {
    for (const std::string& l : lines) std::fprintf(stderr, "%s\n", l.c_str());
    return;
  }
  if (lines.size() == 1 && drawn_ == 0) {  // one line: rewritten where it stands
    std::fprintf(stderr, "\r%s\033[K", lines[0].c_str());
    return;
  }
  if (drawn_ > 0) std::fprintf(stderr, "\033[%zuA", drawn_);  // back to the block's first line
  for (const std::string& l : lines) std::fprintf(stderr, "\r%s\033[K\n", l.c_str());
  drawn_ = lines.size();
}

void ProgressBlock::end() {
  if (tty_ && drawn_ == 0) std::fprintf(stderr, "\n");
}

void print_gpu_summary(const TuneGpus& g, double wall_s, double compile_wait_gpu_s) {
  const MeasurePool& pool = *g.pool;
  int trials = 0;
  for (std::size_t i = 0; i < pool.size(); ++i) {
    const MeasurePool::Usage& u = pool.usage()[i];
    trials += u.measured;
    std::printf("GPU %d (%s, %s): %d measurements, busy %.1f s of %.1f s (%.0f%%)\n", g.devices[i].index,
                g.devices[i].name.c_str(), g.devices[i].uuid.c_str(), u.measured, u.busy_s, wall_s,
                busy_percent(u, wall_s));
  }
  std::printf("%zu GPU(s): %.1f measurements/s, bound by %s (GPUs waited %.1f GPU-s for compiled candidates)\n",
              pool.size(), wall_s > 0 ? trials / wall_s : 0.0, bound_by(pool, wall_s, compile_wait_gpu_s).c_str(),
              compile_wait_gpu_s);
}

nlohmann::json gpu_summary_json(const TuneGpus& g, double wall_s, double compile_wait_gpu_s) {
  nlohmann::json j;
  j["devices"] = nlohmann::json::array();
  for (std::size_t i = 0; i < g.pool->size(); ++i) {
    const MeasurePool::Usage& u = g.pool->usage()[i];
    j["devices"].push_back({{"index", g.devices[i].index}, {"uuid", g.devices[i].uuid}, {"name", g.devices[i].name},
                            {"measurements", u.measured}, {"busy_s", u.busy_s}});
  }
  j["compile_wait_gpu_s"] = compile_wait_gpu_s;
  j["bound_by"] = bound_by(*g.pool, wall_s, compile_wait_gpu_s);
  return j;
}

}  // namespace tmap::cli
