// `tmap logs` (list, rank, prune, merge) and `tmap export`: what a log holds, and its best
// kernels written out as a library.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "commands.h"
#include "tuning_cli.h"
#include "tmap/export/export.h"
#include "tmap/support/files.h"
#include "tmap/tune/cost_model.h"
#include "tmap/tune/range_tuner.h"
#include "tmap/tune/tuner.h"

namespace tmap::cli {
namespace {

/// The records of `best` (best_records) that are samples of a range (is_range_sample), by the
/// key of their range.
std::map<std::string, std::vector<const TuneRecord*>> samples_by_range(const std::vector<const TuneRecord*>& best) {
  std::map<std::string, std::vector<const TuneRecord*>> out;
  for (const TuneRecord* r : best) {
    if (!is_range_sample(r->workload)) continue;
    try {
      Compute range = compute_from_json(r->workload.compute, "the record of workload " + r->workload.key);
      range.dynamic.at = 0;
      out[make_workload(range).key].push_back(r);
    } catch (const UserError&) {
      // an unreadable compute: listed as a workload of its own
    }
  }
  return out;
}

/// Per workload key: its records, and how many of them are correct.
using RecordCounts = std::map<std::string, std::pair<int, int>>;

/// The rows of the log's ranges of sizes, by key: the buckets in force, each with its kernel and
/// the sizes it serves, and the best of each sample's own tuning among `best` (marked `shown`).
std::map<std::string, nlohmann::json> range_rows(const LogContents& log, const std::vector<const TuneRecord*>& best,
                                                 RecordCounts& counts, std::map<std::string, bool>& shown) {
  const auto samples = samples_by_range(best);
  std::map<std::string, nlohmann::json> ranges;
  for (const TuneRecord* r : range_buckets(log.records)) {
    nlohmann::json& row = ranges[r->workload.key];
    if (row.is_null()) {
      const nlohmann::json& d = r->workload.compute.at("dynamic");
      row = {{"workload", r->workload.key}, {"name", r->workload.description.value("name", "?")},
             {"records", counts[r->workload.key].first}, {"correct", counts[r->workload.key].second},
             {"range", {{"param", d.at("param")}, {"lo", d.at("lo")}, {"hi", d.at("hi")}}},
             {"buckets", nlohmann::json::array()}, {"samples", nlohmann::json::array()}};
      if (auto it = samples.find(r->workload.key); it != samples.end())
        for (const TuneRecord* x : it->second) {
          row["samples"].push_back({{"size", x->workload.compute.at("dynamic").at("at")},
                                    {"best_us", x->result.median_us}, {"kernel", candidate_label(x->candidate)}});
          shown[x->workload.key] = true;
        }
    }
    row["buckets"].push_back({{"lo", r->result.bucket_lo}, {"hi", r->result.bucket_hi},
                              {"worst_us", r->result.median_us}, {"at", r->result.size},
                              {"kernel", candidate_label(r->candidate)}, {"params", to_json(r->candidate.params)}});
  }
  return ranges;
}

/// `tmap logs list`'s table of `rows`.
void print_list(const nlohmann::json& rows) {
  std::printf("%-16s %-20s %8s %8s %10s %9s  %s\n", "workload", "name", "records", "correct", "best us", "TFLOP/s",
              "best kernel");
  for (const auto& row : rows) {
    const std::string key = row["workload"], name = row["name"];
    if (row.contains("range")) {
      const nlohmann::json& range = row["range"];
      std::printf("%-16s %-20s %8d %8d %10s %9s  range %s=%lld..%lld, %zu kernel(s) by size:\n", key.c_str(), name.c_str(),
                  row["records"].get<int>(), row["correct"].get<int>(), "-", "-",
                  range["param"].get<std::string>().c_str(), range["lo"].get<long long>(), range["hi"].get<long long>(),
                  row["buckets"].size());
      for (const auto& b : row["buckets"])
        std::printf("%-16s %-20s %8s %8s %10.2f %9s  %lld..%lld: %s\n", "", "", "", "", b["worst_us"].get<double>(),
                    ("at " + std::to_string(b["at"].get<long long>())).c_str(), b["lo"].get<long long>(),
                    b["hi"].get<long long>(), b["kernel"].get<std::string>().c_str());
      for (const auto& x : row["samples"])
        std::printf("%-16s %-20s %8s %8s %10.2f %9s  its own tuning's best at %lld: %s\n", "", "", "", "",
                    x["best_us"].get<double>(), "-", x["size"].get<long long>(), x["kernel"].get<std::string>().c_str());
      continue;
    }
    if (row["best_us"].is_null())
      std::printf("%-16s %-20s %8d %8d %10s %9s  (no correct measurement)\n", key.c_str(), name.c_str(),
                  row["records"].get<int>(), 0, "-", "-");
    else
      std::printf("%-16s %-20s %8d %8d %10.2f %9.2f  %s\n", key.c_str(), name.c_str(), row["records"].get<int>(),
                  row["correct"].get<int>(), row["best_us"].get<double>(), row["tflops"].get<double>(),
                  row["best_kernel"].get<std::string>().c_str());
  }
}

/// `tmap logs list`: each workload of a log with its best record, then its ranges of sizes and
/// the workloads without one, in first-seen order. A range's samples are listed with it, or on
/// their own when it has no buckets.
void logs_list(const std::string& path, const std::string& format) {
  LogContents log = load_log(path);
  RecordCounts counts;
  for (const auto& r : log.records) {
    auto& c = counts[r.workload.key];
    ++c.first;
    c.second += r.result.ok();
  }
  nlohmann::json rows = nlohmann::json::array();
  std::map<std::string, bool> shown;
  const std::vector<const TuneRecord*> best = best_records(log.records, true);
  const std::map<std::string, nlohmann::json> ranges = range_rows(log, best, counts, shown);
  for (const TuneRecord* r : best) {
    if (shown[r->workload.key]) continue;
    shown[r->workload.key] = true;
    rows.push_back({{"workload", r->workload.key}, {"name", r->workload.description.value("name", "?")},
                    {"records", counts[r->workload.key].first}, {"correct", counts[r->workload.key].second},
                    {"best_us", r->result.median_us}, {"tflops", tflops(*r)},
                    {"best_kernel", candidate_label(r->candidate)}, {"params", to_json(r->candidate.params)}});
  }
  for (const auto& r : log.records)
    if (!shown[r.workload.key]) {
      shown[r.workload.key] = true;
      if (auto it = ranges.find(r.workload.key); it != ranges.end()) {
        rows.push_back(it->second);
        continue;
      }
      rows.push_back({{"workload", r.workload.key}, {"name", r.workload.description.value("name", "?")},
                      {"records", counts[r.workload.key].first}, {"correct", 0}, {"best_us", nullptr},
                      {"tflops", nullptr}, {"best_kernel", nullptr}, {"params", nullptr}});
    }
  if (format == "json")
    std::cout << nlohmann::json{{"log", path}, {"skipped_lines", log.warnings.size()}, {"workloads", rows}}.dump(2)
              << "\n";
  else
    print_list(rows);
}

/// `tmap logs rank`: the Spearman rank correlation of each cost model with a log's measured times.
void logs_rank(const std::string& path, const std::string& format) {
  const bool text = format == "text";
  LogContents log = load_log(path);
  if (log.records.empty()) bad(path, "the log holds no records", "tune something first");
  const std::string arch = log.records.front().target.arch;  // the first record's architecture
  const int cc = parse_arch(arch);
  DeviceLimits limits = DeviceLimits::for_arch(cc);
  const auto sets = measured_sets(log.records, load_hw_abstractions(), arch, limits, DeviceModel::for_arch(cc));
  std::map<std::string, std::string> names;
  for (const auto& r : log.records) names[r.workload.key] = r.workload.description.value("name", "?");
  if (text) {
    std::printf("records of %s; Spearman rank correlation with the measured times of each workload:\n", arch.c_str());
    std::printf("  analytic: the analytic model; xgboost: trained on every other record of the workload, ranking the\n"
                "  rest; transfer: trained on the other workloads only\n");
    std::printf("%-16s %-12s %8s %10s %10s %10s\n", "workload", "name", "records", "analytic", "xgboost", "transfer");
  }
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& [key, set] : sets) {
    CostModel own(1), others(1);
    std::vector<Features> held_f;
    std::vector<double> held_t;
    for (std::size_t i = 0; i < set.features.size(); ++i) {
      if (i % 2 == 0) own.add(set.features[i], set.times_us[i]);
      else {
        held_f.push_back(set.features[i]);
        held_t.push_back(set.times_us[i]);
      }
    }
    for (const auto& [other, x] : sets)
      if (other != key)
        for (std::size_t i = 0; i < x.features.size(); ++i) others.add(x.features[i], x.times_us[i]);
    own.fit();
    others.fit();
    const double xgb = own.trained() && held_t.size() >= 4 ? spearman(own.predict(held_f), held_t) : 0;
    const double transfer =
        others.trained() && set.times_us.size() >= 4 ? spearman(others.predict(set.features), set.times_us) : 0;
    const double analytic = spearman(set.analytic_us, set.times_us);
    rows.push_back({{"workload", key}, {"name", names[key]}, {"records", set.times_us.size()},
                    {"analytic", analytic}, {"xgboost", xgb}, {"transfer", transfer}});
    if (text)
      std::printf("%-16s %-12s %8zu %10.2f %10.2f %10.2f\n", key.c_str(), names[key].c_str(), set.times_us.size(),
                  analytic, xgb, transfer);
  }
  if (!text) std::cout << nlohmann::json{{"log", path}, {"arch", arch}, {"workloads", rows}}.dump(2) << "\n";
}

/// `tmap logs prune`: the best record of each workload, written into a new log.
void logs_prune(const std::string& path, const std::string& out) {
  if (std::filesystem::exists(out) && std::filesystem::equivalent(path, out))
    bad("--out", "the output is the log being pruned", "write the best records to another file");
  LogContents log = load_log(path);
  std::vector<const TuneRecord*> keep = kept_records(log.records);
  std::string text;
  for (const TuneRecord* r : keep) text += to_json(*r).dump() + "\n";
  write_file(out, text, "--out");
  std::printf("kept %zu of %zu records (the best of each workload) in %s\n", keep.size(), log.records.size(),
              out.c_str());
}

/// `tmap logs merge`: the records of several logs (shards of one table) in one.
void logs_merge(const std::vector<std::string>& paths, const std::string& out, bool best_only) {
  for (const std::string& p : paths)
    if (std::filesystem::exists(out) && std::filesystem::exists(p) && std::filesystem::equivalent(p, out))
      bad("--out", "the output is one of the logs being merged", "write the merged log to another file");
  const MergedLogs m = merge_logs(paths, best_only);
  for (const auto& w : m.warnings) spdlog::warn("{}", w);
  std::string text;
  for (const TuneRecord& r : m.records) text += to_json(r).dump() + "\n";
  write_file(out, text, "--out");
  std::printf("merged %zu of %zu records from %zu logs into %s (%zu duplicates dropped%s)\n", m.records.size(), m.read,
              paths.size(), out.c_str(), m.duplicates, best_only ? "; the best of each workload only" : "");
}

}  // namespace

/// Reads a log that must exist; its skipped lines are warned about.
LogContents load_log(const std::string& path) {
  if (!std::filesystem::exists(path)) bad(path, "no such log", "give the path of a log written by 'tmap tune'");
  if (std::filesystem::is_directory(path))
    bad(path, "'" + path + "' is a directory, not a log", "give the path of a log written by 'tmap tune'");
  LogContents log = read_log(path);
  for (const auto& w : log.warnings) spdlog::warn("{}", w);
  return log;
}

double tflops(const TuneRecord& r) { return r.flops / (r.result.median_us * 1e-6) / 1e12; }

void register_logs(CLI::App& app) {
  auto* logs = app.add_subcommand("logs", "Inspect and prune tuning logs");
  logs->require_subcommand(1);
  auto path = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto* list = logs->add_subcommand("list", "Workloads of a log with their best time and TFLOP/s");
  auto list_format = std::make_shared<std::string>("text");
  list->add_option("log", *path, "The log")->required();
  list->add_option("--format", *list_format, "A text table or json (one document on stdout)")
      ->check(CLI::IsMember({"text", "json"}));
  list->callback([path, list_format] { logs_list(*path, *list_format); });
  auto* best = logs->add_subcommand("best", "Print the best record of each workload (JSON lines; the model's choice "
                                            "where none was measured)");
  best->add_option("log", *path, "The log")->required();
  best->callback([path] {
    LogContents log = load_log(*path);
    for (const TuneRecord* r : kept_records(log.records)) std::cout << to_json(*r).dump() << "\n";
  });
  auto* rank = logs->add_subcommand("rank", "How well the cost models rank a log's measured candidates");
  auto rank_format = std::make_shared<std::string>("text");
  rank->add_option("log", *path, "The log")->required();
  rank->add_option("--format", *rank_format, "A text table or json (one document on stdout)")
      ->check(CLI::IsMember({"text", "json"}));
  rank->callback([path, rank_format] { logs_rank(*path, *rank_format); });
  auto* prune = logs->add_subcommand("prune", "Write the best record of each workload into a new log");
  prune->add_option("log", *path, "The log")->required();
  prune->add_option("--out", *out, "The new log")->required();
  prune->callback([path, out] { logs_prune(*path, *out); });
  auto* merge = logs->add_subcommand("merge", "Merge logs (e.g. of --shard runs) into one, each record once");
  auto paths = std::make_shared<std::vector<std::string>>();
  auto best_only = std::make_shared<bool>(false);
  merge->add_option("logs", *paths, "The logs")->required();
  merge->add_option("--out", *out, "The merged log")->required();
  merge->add_flag("--best", *best_only, "Keep only the best record of each workload");
  merge->callback([paths, out, best_only] { logs_merge(*paths, *out, *best_only); });
}

void register_export(CLI::App& app) {
  struct ExportArgs {
    std::string log, out, workload, arch;
    HwSelection hw_dirs;
    bool allow_unmeasured = false;
  };
  auto args = std::make_shared<ExportArgs>();
  auto* cmd = app.add_subcommand("export", "Write the best kernel of each workload of a log as CUDA sources with launch "
                                           "functions, a CMake library, a checking program and a PyTorch example");
  cmd->add_option("log", args->log, "The JSON-lines log")->required();
  cmd->add_option("--out", args->out, "The directory to write")->required();
  cmd->add_option("--workload", args->workload, "Only this workload key (see 'tmap logs list')");
  cmd->add_flag("--allow-unmeasured", args->allow_unmeasured,
                "Export the model's choice for workloads with only unmeasured records");
  cmd->add_option("--arch", args->arch, "sm_XX the records were tuned for (default: that of the first record)");
  args->hw_dirs.add_to(*cmd);
  cmd->callback([args] {
    LogContents log = load_log(args->log);
    std::vector<const TuneRecord*> chosen, unmeasured;  // unmeasured: the model's choices
    for (const TuneRecord* r : best_records(log.records))
      if (args->workload.empty() || r->workload.key == args->workload) chosen.push_back(r);
    for (const TuneRecord* r : model_choices(log.records))
      if (args->workload.empty() || r->workload.key == args->workload) unmeasured.push_back(r);
    for (const TuneRecord* r : range_buckets(log.records))  // each range's kernels, behind one function
      if (args->workload.empty() || r->workload.key == args->workload) chosen.push_back(r);
    if (!unmeasured.empty() && !args->allow_unmeasured)
      spdlog::warn("{} workload(s) have only unmeasured records: skipped (add --allow-unmeasured to export the model's choice)",
                   unmeasured.size());
    else
      chosen.insert(chosen.end(), unmeasured.begin(), unmeasured.end());
    if (chosen.empty())
      bad(args->log, args->workload.empty() ? "the log holds no correct measured record" : "no record of workload " + args->workload,
          "see 'tmap logs list " + args->log + "'");
    const std::string arch = args->arch.empty() ? chosen.front()->target.arch : args->arch;
    const int cc = parse_arch(arch);
    for (const TuneRecord* r : chosen)
      if (r->target.arch != arch)
        bad("--arch", "workload " + r->workload.key + " was tuned for " + r->target.arch + ", not " + arch,
            "export one architecture at a time (--workload)");
    const auto kernels = export_kernels(chosen, args->hw_dirs.all(), cc, args->out, args->log);
    std::printf("%-44s %-16s %10s  %s\n", "launch function", "workload", "logged us", "kernel");
    for (const auto& k : kernels)
      std::printf("%-44s %-16s %10s  %s\n", k.function.c_str(), k.workload_key.c_str(),
                  k.logged_us > 0 ? std::to_string(k.logged_us).substr(0, 8).c_str() : "-", k.label.c_str());
    std::printf("wrote %zu kernel(s) to %s: tmap_kernels.h, kernels/, CMakeLists.txt, check.cu, torch/\n"
                "build and check on the GPU: cmake -S %s -B %s/build && cmake --build %s/build && %s/build/tmap_kernels_check\n",
                kernels.size(), args->out.c_str(), args->out.c_str(), args->out.c_str(), args->out.c_str(), args->out.c_str());
  });
}

}  // namespace tmap::cli
