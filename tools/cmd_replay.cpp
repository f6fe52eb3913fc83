// `tmap replay`: the logged best kernels regenerated, compiled, run and verified, or written out.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "commands.h"
#include "tuning_cli.h"
#include "tmap/codegen/device_library.h"
#include "tmap/runtime/device.h"
#include "tmap/support/files.h"
#include "tmap/tune/range_tuner.h"
#include "tmap/tune/tuner.h"

namespace tmap::cli {
namespace {

struct ReplayArgs {
  std::string log, workload, emit_dir, arch;
  ComputeArgs compute;
  HwSelection hw_dirs;  ///< --hw-dir
  std::string format = "text";
  bool verify = false, allow_unmeasured = false;
  double timeout = 30;
};

/// The records `tmap replay` runs: each workload's best (or, with --allow-unmeasured, the model's
/// choice), each range's buckets at their worst sample, or for one size of a tuned range the bucket
/// that serves it; with the size each bucket runs at. A UserError when there is none.
struct ReplayChoice {
  std::vector<const TuneRecord*> chosen;
  std::map<const TuneRecord*, std::int64_t> sizes;
};
ReplayChoice choose_replays(const ReplayArgs& args, const LogContents& log, const std::string& arch) {
  std::string key = args.workload;
  std::optional<Compute> given;
  if (!args.compute.file.empty() || !args.compute.op.empty()) {
    given = args.compute.build();
    key = make_workload(*given).key;
  }
  ReplayChoice out;
  std::vector<const TuneRecord*>& chosen = out.chosen;
  std::vector<const TuneRecord*> unmeasured;  // the model's choices
  for (const TuneRecord* r : best_records(log.records))
    if (key.empty() || r->workload.key == key) chosen.push_back(r);
  for (const TuneRecord* r : model_choices(log.records))
    if (key.empty() || r->workload.key == key) unmeasured.push_back(r);
  for (const TuneRecord* r : range_buckets(log.records))
    if (key.empty() || r->workload.key == key) chosen.push_back(r), out.sizes[r] = r->result.size;
  if (chosen.empty() && given && !given->dynamic.active()) {  // one size of a tuned range
    const Dispatch d = dispatch(log.records, *given, arch);
    if (d.bucket) chosen.push_back(d.bucket), out.sizes[d.bucket] = d.size;
    else if (!d.outside.empty())
      bad("--set", "the log's range " + d.outside + " of this computation does not take its size",
          "give a size within the range, or tune this size");
  }
  if (!unmeasured.empty() && !args.allow_unmeasured) {
    const std::string what =
        std::to_string(unmeasured.size()) + " workload(s) have only unmeasured records (ranked by the model)";
    if (chosen.empty())
      bad("--allow-unmeasured", what, "tune them on a GPU, or add --allow-unmeasured to replay the model's choice");
    spdlog::warn("{}: skipped (add --allow-unmeasured to replay the model's choice)", what);
  } else {
    chosen.insert(chosen.end(), unmeasured.begin(), unmeasured.end());
  }
  if (chosen.empty())
    bad(args.log, key.empty() ? "the log holds no correct measured record" : "no record of workload " + key,
        "see 'tmap logs list " + args.log + "'");
  return out;
}

}  // namespace

void register_replay(CLI::App& app) {
  auto args = std::make_shared<ReplayArgs>();
  auto* cmd = app.add_subcommand("replay", "Regenerate, run and verify the best logged kernel of each workload");
  cmd->add_option("log", args->log, "The JSON-lines log")->required();
  args->compute.add_to(*cmd);
  cmd->add_option("--workload", args->workload, "Only this workload key (see 'tmap logs list')");
  cmd->add_flag("--verify", args->verify, "Check each kernel against the reference");
  cmd->add_option("--emit-cuda", args->emit_dir,
                  "Write each kernel's CUDA source into this directory, as KERNEL.WORKLOAD.cu");
  cmd->add_flag("--allow-unmeasured", args->allow_unmeasured, "Also replay records ranked by the model only");
  cmd->add_option("--format", args->format, "The results as a text table or json (one document on stdout)")
      ->check(CLI::IsMember({"text", "json"}));
  args->hw_dirs.add_to(*cmd);
  cmd->add_option("--arch", args->arch, "Compile for sm_XX (without a GPU: compile only)");
  cmd->add_option("--timeout", args->timeout, "Seconds before a hanging kernel is stopped (default 30)");
  cmd->callback([args] {
    LogContents log = load_log(args->log);
    Machine m = detect(args->arch);
    auto [chosen, sizes] = choose_replays(*args, log, m.target.arch);

    const bool run = m.has_gpu && m.cc == m.rt.devices.front().compute_capability;
    if (!run) spdlog::warn("no GPU for {} ({}): compiling only", m.target.arch, m.has_gpu ? "another GPU" : m.rt.status);
    const std::vector<HwAbstraction> hws = args->hw_dirs.all();
    NvrtcCompiler compiler(m.cc);
    std::unique_ptr<WorkerMeasurer> measurer;
    if (run) measurer = std::make_unique<WorkerMeasurer>("/proc/self/exe", args->timeout, tuning_timing(), args->verify,
                                                         std::random_device{}());
    bool failed = false;
    const bool text = args->format == "text";
    nlohmann::json rows = nlohmann::json::array();
    if (text)
      std::printf("%-16s %-20s %12s %12s %8s %10s  %s\n", "workload", "name", "logged us", "now us", "change", "rel L2",
                  "kernel");
    for (const TuneRecord* r : chosen) {
      if (r->target.arch != m.target.arch || (run && !r->target.device.empty() && r->target.device != m.target.device))
        spdlog::warn("workload {} was recorded on {} ({}), this is {} ({})", r->workload.key, r->target.arch,
                     r->target.device.empty() ? "no GPU" : r->target.device, m.target.arch,
                     m.target.device.empty() ? "no GPU" : m.target.device);
      Regenerated g = regenerate(*r, hws, m.cc);
      if (!args->emit_dir.empty()) {
        // Named by workload too: workloads of one op share kernel names (the shape is baked into the code).
        std::error_code ec;
        std::filesystem::create_directories(args->emit_dir, ec);
        if (ec) bad("--emit-cuda", "cannot create the directory '" + args->emit_dir + "': " + ec.message(), "check the path");
        write_file(args->emit_dir + "/" + g.kernel.name + "." + r->workload.key + ".cu", self_contained(g.kernel.code),
                   "--emit-cuda");
      }
      CompileResult bin = compiler.compile(g.kernel.code, g.kernel.name);
      if (!bin.ok) throw InternalError("regenerated kernel " + g.kernel.name + " does not compile:\n" + bin.log);
      const std::int64_t size = sizes.count(r) ? sizes[r] : 0;
      const std::string name = r->workload.description.value("name", "?") +
                               (size ? "@" + g.compute->dynamic.param + "=" + std::to_string(size) : "");
      // A range's kernel was measured at its bucket's worst size; at another, there is no logged time.
      const double logged = size && size != r->result.size ? std::nan("")
                            : r->result.ok()                ? r->result.median_us
                                                            : r->result.estimated_us;
      nlohmann::json row = {{"workload", r->workload.key}, {"name", name},          {"kernel", g.kernel.name},
                            {"logged_us", logged},          {"logged_measured", r->result.ok()},
                            {"compile_s", bin.seconds}};
      if (!run) {
        row["status"] = "compiled";
        rows.push_back(row);
        if (text)
          std::printf("%-16s %-20s %12.2f %12s %8s %10s  %s (compiled in %.2f s)\n", r->workload.key.c_str(),
                      name.c_str(), logged, "-", "-", "-", g.kernel.name.c_str(), bin.seconds);
        continue;
      }
      MeasureResult res = measurer->measure_at(*g.compute, size, g.gemm(), g.kernel, bin);
      row["status"] = status_name(res.status);
      if (res.status != MeasureStatus::kOk) {
        failed = true;
        row["error"] = res.message;
        rows.push_back(row);
        if (text)
          std::printf("%-16s %-20s %12.2f %12s: %s: %s\n", r->workload.key.c_str(), name.c_str(), logged, "FAILED",
                      status_name(res.status), res.message.c_str());
        continue;
      }
      row["now_us"] = res.median_us;
      row["change"] = res.median_us / logged - 1;
      row["rel_l2"] = args->verify ? nlohmann::json(res.rel_l2) : nlohmann::json();
      rows.push_back(row);
      char err[32] = "-";
      if (args->verify) std::snprintf(err, sizeof err, "%.1e", res.rel_l2);
      char logged_text[32] = "-", change[32] = "-";
      if (!std::isnan(logged)) {
        std::snprintf(logged_text, sizeof logged_text, "%.2f", logged);
        std::snprintf(change, sizeof change, "%+.1f%%", (res.median_us / logged - 1) * 100);
      }
      if (text)
        std::printf("%-16s %-20s %12s %12.2f %8s %10s  %s\n", r->workload.key.c_str(), name.c_str(), logged_text,
                    res.median_us, change, err, g.kernel.name.c_str());
    }
    if (!text) std::cout << nlohmann::json{{"log", args->log}, {"arch", m.target.arch}, {"ran", run}, {"results", rows}}.dump(2) << "\n";
    if (failed) throw std::runtime_error("a replayed kernel failed or is wrong");
  });
}

}  // namespace tmap::cli
