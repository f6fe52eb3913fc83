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

/// Regenerates, compiles and (with a GPU of the log's arch) runs records, one row each.
class Replayer {
 public:
  Replayer(const ReplayArgs& args, Machine m)
      : args_(args), m_(std::move(m)), run_(m_.has_gpu && m_.cc == m_.rt.devices.front().compute_capability),
        hws_(args.hw_dirs.all()), compiler_(m_.cc) {
    if (!run_) spdlog::warn("no GPU for {} ({}): compiling only", m_.target.arch, m_.has_gpu ? "another GPU" : m_.rt.status);
    if (run_)
      measurer_ = std::make_unique<WorkerMeasurer>("/proc/self/exe", args.timeout, tuning_timing(), args.verify,
                                                   std::random_device{}());
  }
  const Machine& machine() const { return m_; }
  bool runs() const { return run_; }

  /// Record `r` replayed (at `size` of its range, 0: its own shape): a row with its status.
  nlohmann::json replay(const TuneRecord& r, std::int64_t size) {
    warn_if_elsewhere(r);
    Regenerated g = regenerate(r, hws_, m_.cc);
    if (!args_.emit_dir.empty()) emit_cuda(g.kernel, r.workload.key);
    CompileResult bin = compiler_.compile(g.kernel.code, g.kernel.name);
    if (!bin.ok) throw InternalError("regenerated kernel " + g.kernel.name + " does not compile:\n" + bin.log);
    // A range's kernel was measured at its bucket's worst size; at another, there is no logged time.
    const double logged = size && size != r.result.size ? std::nan("")
                          : r.result.ok()              ? r.result.median_us
                                                       : r.result.estimated_us;
    nlohmann::json row = {{"workload", r.workload.key},
                          {"name", r.workload.description.value("name", "?") +
                                       (size ? "@" + g.compute->dynamic.param + "=" + std::to_string(size) : "")},
                          {"kernel", g.kernel.name},
                          {"logged_us", logged},
                          {"logged_measured", r.result.ok()},
                          {"compile_s", bin.seconds}};
    if (!run_) {
      row["status"] = "compiled";
      return row;
    }
    MeasureResult res = measurer_->measure_at(*g.compute, size, g.gemm(), g.kernel, bin);
    row["status"] = status_name(res.status);
    if (res.status != MeasureStatus::kOk) {
      row["error"] = res.message;
      return row;
    }
    row["now_us"] = res.median_us;
    row["change"] = res.median_us / logged - 1;
    row["rel_l2"] = args_.verify ? nlohmann::json(res.rel_l2) : nlohmann::json();
    return row;
  }

 private:
  void warn_if_elsewhere(const TuneRecord& r) const {
    if (r.target.arch != m_.target.arch || (run_ && !r.target.device.empty() && r.target.device != m_.target.device))
      spdlog::warn("workload {} was recorded on {} ({}), this is {} ({})", r.workload.key, r.target.arch,
                   r.target.device.empty() ? "no GPU" : r.target.device, m_.target.arch,
                   m_.target.device.empty() ? "no GPU" : m_.target.device);
  }
  /// Named by workload too: workloads of one op share kernel names (the shape is baked into the code).
  void emit_cuda(const KernelSource& k, const std::string& key) const {
    std::error_code ec;
    std::filesystem::create_directories(args_.emit_dir, ec);
    if (ec) bad("--emit-cuda", "cannot create the directory '" + args_.emit_dir + "': " + ec.message(), "check the path");
    write_file(args_.emit_dir + "/" + k.name + "." + key + ".cu", self_contained(k.code), "--emit-cuda");
  }

  const ReplayArgs& args_;
  Machine m_;
  bool run_;
  std::vector<HwAbstraction> hws_;
  NvrtcCompiler compiler_;
  std::unique_ptr<WorkerMeasurer> measurer_;
};

/// One row of the text table.
void print_row(const nlohmann::json& row) {
  const std::string key = row["workload"], name = row["name"], kernel = row["kernel"], status = row["status"];
  const double logged = row["logged_us"].is_number() ? row["logged_us"].get<double>() : std::nan("");
  if (status == "compiled") {
    std::printf("%-16s %-20s %12.2f %12s %8s %10s  %s (compiled in %.2f s)\n", key.c_str(), name.c_str(), logged, "-",
                "-", "-", kernel.c_str(), row["compile_s"].get<double>());
  } else if (row.contains("error")) {
    std::printf("%-16s %-20s %12.2f %12s: %s: %s\n", key.c_str(), name.c_str(), logged, "FAILED", status.c_str(),
                row["error"].get<std::string>().c_str());
  } else {
    const double now = row["now_us"];
    char err[32] = "-", logged_text[32] = "-", change[32] = "-";
    if (row["rel_l2"].is_number()) std::snprintf(err, sizeof err, "%.1e", row["rel_l2"].get<double>());
    if (!std::isnan(logged)) {
      std::snprintf(logged_text, sizeof logged_text, "%.2f", logged);
      std::snprintf(change, sizeof change, "%+.1f%%", (now / logged - 1) * 100);
    }
    std::printf("%-16s %-20s %12s %12.2f %8s %10s  %s\n", key.c_str(), name.c_str(), logged_text, now, change, err,
                kernel.c_str());
  }
}

void replay_command(const ReplayArgs& args) {
  LogContents log = load_log(args.log);
  Machine m = detect(args.arch);
  auto [chosen, sizes] = choose_replays(args, log, m.target.arch);
  Replayer replayer(args, std::move(m));
  const bool text = args.format == "text";
  if (text)
    std::printf("%-16s %-20s %12s %12s %8s %10s  %s\n", "workload", "name", "logged us", "now us", "change", "rel L2",
                "kernel");
  bool failed = false;
  nlohmann::json rows = nlohmann::json::array();
  for (const TuneRecord* r : chosen) {
    rows.push_back(replayer.replay(*r, sizes.count(r) ? sizes[r] : 0));
    failed |= rows.back().contains("error");
    if (text) print_row(rows.back());
  }
  if (!text)
    std::cout << nlohmann::json{{"log", args.log}, {"arch", replayer.machine().target.arch}, {"ran", replayer.runs()},
                                {"results", rows}}
                     .dump(2)
              << "\n";
  if (failed) throw std::runtime_error("a replayed kernel failed or is wrong");
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
  cmd->callback([args] { replay_command(*args); });
}

}  // namespace tmap::cli
