// `tmap run`: one candidate (abstraction, layout, shape, mapping, schedule) turned into a CUDA
// kernel, compiled with NVRTC, and unless --compile-only run on the GPU, verified and timed.
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "commands.h"
#include "tmap/frontend/json_locations.h"
#include "tmap/codegen/device_library.h"
#include "tmap/codegen/emitter.h"
#include "tmap/runtime/device.h"
#include "tmap/runtime/kernel_runner.h"
#include "tmap/runtime/measure_worker.h"
#include "tmap/runtime/nvrtc_compiler.h"
#include "tmap/support/files.h"
#include "tmap/tune/tune_log.h"
#include "tmap/tune/tuner.h"

namespace tmap::cli {
namespace {

struct RunArgs {
  ComputeArgs compute;
  HwSelection hw_dirs;  ///< --hw-dir only: --hw names one abstraction here
  std::string hw, layout, shape, params, arch, emit_cuda, log, format = "text";
  int mapping = -1, match = -1;
  int group_pack = 1;
  double timeout = 60;
  int graph_runs = 0;
  bool flush_l2 = false;
  bool verify = false, compile_only = false;
  std::int64_t size = 0;  ///< --size: a range's size to run at (0: its largest).
  std::vector<std::string> sweep;  ///< --sweep KNOB=V1,V2,...: run every combination.
};

/// The match --match, or --layout and --shape, name (without --hw, of the first abstraction
/// that has one). A match number counts the matches of one abstraction, those 'tmap map --hw'
/// lists: without --hw it would count over every abstraction runnable on the target, which
/// 'tmap map' does not list in the same order, and silently name another family's kernel.
const Match& pick_match(const RunArgs& args, const MatchReport& report, const Compute& c,
                        const std::vector<HwAbstraction>& all) {
  if (args.match >= 0 && args.hw.empty())
    bad("--match", "--match " + std::to_string(args.match) + " numbers the matches of one abstraction, and --hw names none",
        "give --hw with it, e.g. --hw " + (report.matches.empty() ? std::string("NAME") : report.matches.front().hw_abs) +
            " (its matches: 'tmap map --hw NAME')");
  if (report.matches.empty())
    bad("--hw", "'" + c.name + "' matches no abstraction" + (args.hw.empty() ? "" : " '" + args.hw + "'"),
        report.rejected.empty() ? "see 'tmap hw list'" : report.rejected.front().hw_abs + ": " + report.rejected.front().reason);
  if (args.match >= 0) {
    if (args.match >= static_cast<int>(report.matches.size()))
      bad("--match", "no match " + std::to_string(args.match) + " of '" + c.name + "'",
          "numbers run from 0 to " + std::to_string(report.matches.size() - 1) + " (see 'tmap map' with the same --hw)");
    if (!args.layout.empty() || !args.shape.empty())
      bad("--match", "--match picks the layout and shape itself", "drop --layout and --shape");
    return report.matches[args.match];
  }
  for (const Match& m : report.matches)
    if ((args.layout.empty() || m.layout == args.layout) && (args.shape.empty() || m.shape.str() == args.shape)) return m;
  const std::string hw_name = report.matches.front().hw_abs;
  bad("--layout/--shape", "'" + hw_name + "' has no layout '" + args.layout + "' with shape '" + args.shape + "'",
      "layouts: " + join(find_hw(all, hw_name).layouts) + "; shapes: see 'tmap hw show " + hw_name + "'");
}

/// The mapping --mapping names, or the one that fuses every candidate.
const Mapping& pick_mapping(const RunArgs& args, const Match& match) {
  if (args.mapping < 0) return match.mappings.back();
  for (const auto& m : match.mappings)
    if (m.id == args.mapping) return m;
  bad("--mapping", "no mapping " + std::to_string(args.mapping) + " for this match",
      "ids run from 0 to " + std::to_string(match.mappings.size() - 1) + " (see 'tmap map --enumerate all')");
}

/// The architecture to compile for, after checking the options that depend on a GPU.
int target_arch(RunArgs& args, const RuntimeInfo& rt) {
  int cc = 0;
  if (!args.arch.empty()) cc = parse_arch(args.arch);
  else if (!rt.devices.empty()) cc = rt.devices.front().compute_capability;
  else bad("--arch", "no GPU to compile for (" + rt.status + ")", "give --arch sm_90 with --compile-only");
  if (!args.compile_only && rt.devices.empty())
    bad("tmap run", "cannot run without a GPU: " + rt.status, "add --compile-only to stop after compiling");
  if (!args.log.empty() && args.compile_only)
    bad("--log", "a compile-only run measures nothing to log", "drop --compile-only, or --log");
  if (!args.log.empty() && (args.graph_runs > 0 || args.flush_l2))
    bad("--log", "log records are timed as the tuner times them (warm, graphs of 10 runs)",
        "drop --graph and --flush-l2, or --log");
  if (!args.log.empty()) args.verify = true;  // a log holds verified measurements only
  if (!args.compile_only && !rt.devices.empty() && cc != rt.devices.front().compute_capability)
    bad("--arch", "sm_" + std::to_string(cc) + " is not the GPU's architecture (sm_" +
                      std::to_string(rt.devices.front().compute_capability) + ")",
        "drop --arch, or add --compile-only");
  return cc;
}

/// The abstractions whose instructions sm_`cc` has; an error saying what each needs if none.
std::vector<HwAbstraction> runnable_on(const std::vector<HwAbstraction>& all, int cc) {
  std::vector<HwAbstraction> out;
  std::map<std::string, int> needs;  // family -> the lowest architecture of its abstractions
  for (const HwAbstraction& h : all) {
    if (h.min_compute_capability <= cc) out.push_back(h);
    auto [it, fresh] = needs.emplace(h.family, h.min_compute_capability);
    if (!fresh) it->second = std::min(it->second, h.min_compute_capability);
  }
  if (out.empty()) {
    std::string list;
    for (const auto& [family, min_cc] : needs) list += (list.empty() ? "" : ", ") + family + " sm_" + std::to_string(min_cc);
    bad("--arch", "no hardware abstraction runs on sm_" + std::to_string(cc), "the families need: " + list);
  }
  return out;
}

/// The default schedule changed by --params (unchecked: a sweep changes it further).
ScheduleParams requested_schedule(const RunArgs& args, const ImplicitGemm& g, const DeviceLimits& limits) {
  ScheduleParams params = default_schedule(g, limits);
  if (!args.params.empty()) {
    const SourceText text("--params", args.params);
    nlohmann::json j = parse_json_text(text, "for example --params '{\"block_m\": 64}'");
    params = schedule_from_json(j, params);
  }
  return params;
}

/// The requested schedule; every reason against it is an error.
ScheduleParams schedule_of(const RunArgs& args, const ImplicitGemm& g, const DeviceLimits& limits) {
  const ScheduleParams params = requested_schedule(args, g, limits);
  auto issues = validate(g, params, limits);
  if (!issues.empty()) {
    std::string all_reasons;
    for (const auto& i : issues) all_reasons += std::string("\n  - ") + std::string(message(i.error)) + ": " + i.detail;
    if (args.params.empty())
      bad("--arch", "the default schedule of " + g.hw->name + " is invalid for sm_" + std::to_string(limits.compute_capability) + ":" + all_reasons,
          "choose another abstraction with --hw (tmap hw list shows which run on a GPU)");
    bad("--params", "the schedule " + to_json(params).dump() + " is invalid:" + all_reasons,
        "change the parameters, or omit --params for the default schedule");
  }
  return params;
}

/// One candidate, as the run got it.
struct RunCandidate {
  const Compute& c;
  const HwAbstraction& hw;
  const Match& match;
  const Mapping& mapping;
  const ImplicitGemm& g;
  const ScheduleParams& params;
  int cc;
};

/// Measures the compiled kernel in the isolated `worker` (a kernel that faults or hangs cannot
/// take tmap down), appending to --log when given; adds the outcome to `result`, true when it failed.
bool measure(const RunArgs& args, const RunCandidate& x, const KernelSource& kernel, const CompileResult& compiled,
             const RuntimeInfo& rt, MeasureWorker& worker, nlohmann::json& result) {
  const Compute& c = x.c;
  std::filesystem::path cubin = std::filesystem::temp_directory_path() /
                                ("tmap_" + std::to_string(::getpid()) + "_" + kernel.name + ".cubin");
  std::ofstream(cubin, std::ios::binary).write(compiled.cubin.data(), static_cast<std::streamsize>(compiled.cubin.size()));
  const std::int64_t size = c.dynamic.active() ? (args.size ? args.size : c.dynamic.hi) : 0;
  MeasureRequest req = MeasureRequest::for_kernel(c, kernel, cubin.string(), c.inputs[x.g.a_input].tensor,
                                                  c.inputs[x.g.b_input].tensor, size);
  req.verify = args.verify;
  if (!args.log.empty()) req.timing = tuning_timing();
  req.timing.graph_runs = args.log.empty() ? args.graph_runs : req.timing.graph_runs;
  req.timing.flush_l2 = args.flush_l2;
  req.tolerance = verification_tolerance(x.hw);
  req.seed = std::random_device{}();
  MeasureResult m = worker.measure(req);
  std::filesystem::remove(cubin);
  if (!args.log.empty()) {
    TuneResult measured;
    measured.status = status_name(m.status);
    measured.median_us = m.median_us;
    measured.times_us = m.times_us;
    measured.rel_l2 = m.rel_l2;
    measured.compile_seconds = compiled.seconds;
    measured.error = m.message;
    measured.size = size;
    const Target target{"sm_" + std::to_string(x.cc), rt.devices.front().name, cuda_version_text(rt.driver_version),
                        cuda_version_text(rt.runtime_version), TMAP_VERSION};
    LogWriter(args.log).append(make_record(make_workload(c), target,
                                           candidate_ref(*x.g.compute, x.hw.name, x.match, x.mapping, x.params), std::move(measured)));
    result["log"] = args.log;
  }
  result["status"] = status_name(m.status);
  if (m.status != MeasureStatus::kOk && m.status != MeasureStatus::kWrongResult) {
    result["error"] = m.message;
    return true;
  }
  result["median_us"] = m.median_us;
  const double flops = size ? 2.0 * compute_at(c, size).iteration_points() : x.g.flops();
  result["tflops"] = flops / (m.median_us * 1e-6) / 1e12;
  if (size) result["size"] = size;
  if (!args.verify) return false;
  result["rel_l2"] = m.rel_l2;
  result["tolerance"] = req.tolerance;
  return m.status == MeasureStatus::kWrongResult;
}

/// What a run reports of its candidate before it runs: what it is, its launch and its compile.
nlohmann::json candidate_json(const RunCandidate& x, const KernelSource& kernel, const CompileResult& compiled) {
  const Compute& c = x.c;
  return {{"kernel", kernel.name},
          {"hw_abs", x.hw.name},
          {"layout", x.match.layout},
          {"shape", x.match.shape.extent},
          {"mapping", x.mapping.id},
          {"operands", {{"A", c.tensor_of(c.inputs[x.g.a_input]).name}, {"B", c.tensor_of(c.inputs[x.g.b_input]).name}}},
          {"params", to_json(x.params)},
          {"arch", "sm_" + std::to_string(x.cc)},
          {"grid", kernel.grid},
          {"threads", kernel.threads},
          {"shared_bytes", kernel.shared_bytes},
          {"compile_seconds", compiled.seconds}};
}

void print_text(const nlohmann::json& result, const KernelSource& kernel, bool failed) {
  std::printf("kernel %s: grid %lldx%lldx%lld, %d threads, %lld bytes of shared memory\n", kernel.name.c_str(),
              (long long)kernel.grid[0], (long long)kernel.grid[1], (long long)kernel.grid[2], kernel.threads,
              (long long)kernel.shared_bytes);
  std::printf("schedule %s\ncompiled for %s in %.2f s\n", result["params"].dump().c_str(),
              result["arch"].get<std::string>().c_str(), result["compile_seconds"].get<double>());
  if (result.contains("error"))
    std::printf("run failed (%s): %s\n", result["status"].get<std::string>().c_str(), result["error"].get<std::string>().c_str());
  if (result.contains("median_us"))
    std::printf("time %.2f us (median), %.2f TFLOP/s\n", result["median_us"].get<double>(), result["tflops"].get<double>());
  if (result.contains("rel_l2"))
    std::printf("relative L2 error %.3e (tolerance %.0e): %s\n", result["rel_l2"].get<double>(),
                result["tolerance"].get<double>(), failed ? "WRONG" : "correct");
}

/// --sweep KNOB=V1,V2,...: one knob's values, or with KNOB+KNOB... several knobs' that take the
/// same value (a warpgroup tile and the block tile of one warpgroup); a sweep runs every
/// combination of its axes.
struct SweepAxis {
  std::string name;  ///< As written: the knobs joined by '+'.
  std::vector<const Knob*> knobs;
  std::vector<int> values;
};

/// The most combinations one sweep runs.
constexpr std::size_t kMaxSweepRuns = 4096;

/// The knobs of an axis's name (KNOB or KNOB+KNOB...), none of them swept before (in `taken`).
std::vector<const Knob*> sweep_knobs(const std::string& name, const std::vector<SweepAxis>& taken) {
  std::vector<const Knob*> knobs;
  std::stringstream list(name);
  for (std::string one; std::getline(list, one, '+');) {
    const Knob* knob = find_knob(one);
    if (!knob) bad("--sweep", "'" + one + "' is not a knob", "knobs: " + join(knob_names()));
    bool twice = std::find(knobs.begin(), knobs.end(), knob) != knobs.end();
    for (const SweepAxis& other : taken)
      twice = twice || std::find(other.knobs.begin(), other.knobs.end(), knob) != other.knobs.end();
    if (twice) bad("--sweep", "knob " + one + " is swept twice", "give its values in one --sweep " + one + "=V1,V2,...");
    knobs.push_back(knob);
  }
  if (knobs.empty() || name.back() == '+') bad("--sweep", "'" + name + "' names no knob", "for example --sweep warp_n+block_n=64,128");
  return knobs;
}

/// One --sweep argument: knobs of 'tmap knobs' and their distinct integer values, within every
/// one's range. `taken` holds the axes before it.
SweepAxis parse_sweep_axis(const std::string& arg, const std::vector<SweepAxis>& taken) {
  const std::size_t eq = arg.find('=');
  if (eq == std::string::npos || eq + 1 == arg.size())
    bad("--sweep", "'" + arg + "' is not KNOB=V1,V2,...", "for example --sweep block_n=64,128 (knobs: 'tmap knobs')");
  SweepAxis axis{arg.substr(0, eq), sweep_knobs(arg.substr(0, eq), taken), {}};
  std::stringstream list(arg.substr(eq + 1));
  for (std::string v; std::getline(list, v, ',');) {
    int value = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), value);
    if (v.empty() || ec != std::errc() || end != v.data() + v.size())
      bad("--sweep", "'" + v + "' in '" + arg + "' is not an integer", "give integers separated by commas");
    for (const Knob* knob : axis.knobs)
      if (value < knob->min || value > knob->max)
        bad("--sweep", std::string(knob->name) + " = " + v + " is outside the knob's range " + std::to_string(knob->min) +
                           "-" + std::to_string(knob->max),
            "see 'tmap knobs'");
    if (std::find(axis.values.begin(), axis.values.end(), value) == axis.values.end()) axis.values.push_back(value);
  }
  return axis;
}

std::vector<SweepAxis> parse_sweep(const std::vector<std::string>& args) {
  std::vector<SweepAxis> axes;
  std::size_t runs = 1;
  for (const std::string& arg : args) {
    axes.push_back(parse_sweep_axis(arg, axes));
    runs *= axes.back().values.size();
    if (runs > kMaxSweepRuns)
      bad("--sweep", "more than " + std::to_string(kMaxSweepRuns) + " combinations", "sweep fewer knobs or values at once");
  }
  return axes;
}

/// Every combination of the axes' values on `base`, the first axis slowest.
std::vector<ScheduleParams> sweep_schedules(const std::vector<SweepAxis>& axes, const ScheduleParams& base) {
  std::vector<ScheduleParams> out = {base};
  for (const SweepAxis& axis : axes) {
    std::vector<ScheduleParams> next;
    for (const ScheduleParams& p : out)
      for (int v : axis.values) {
        ScheduleParams q = p;
        for (const Knob* knob : axis.knobs) knob->set(q, v);
        next.push_back(q);
      }
    out = std::move(next);
  }
  return out;
}

/// The swept knobs' values of `p`, as a JSON object keyed by the axes' names.
nlohmann::ordered_json sweep_values(const std::vector<SweepAxis>& axes, const ScheduleParams& p) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const SweepAxis& axis : axes) out[axis.name] = axis.knobs.front()->get(p);
  return out;
}

/// The width of an axis's column in a sweep's text: its name's and a space, at least 12.
int column_width(const SweepAxis& axis) { return std::max(12, static_cast<int>(axis.name.size()) + 1); }

/// The refused combinations a sweep's text names (its JSON names all).
constexpr std::size_t kRefusalsShown = 12;

/// A sweep as text: one line per run, fastest first (in sweep order when nothing ran), then the
/// refused combinations with their first reason.
void print_sweep_text(const std::vector<SweepAxis>& axes, const nlohmann::json& runs, const nlohmann::json& refused) {
  std::printf("sweep of %zu combination(s): %zu refused, %zu compiled%s\n", runs.size() + refused.size(),
              refused.size(), runs.size(), runs.empty() || !runs[0].contains("status") ? "" : ", run fastest first");
  for (const SweepAxis& axis : axes) std::printf("%*s", column_width(axis), axis.name.c_str());
  std::printf("%12s%10s%11s  %s\n", "us", "TFLOP/s", "rel. L2", "status");
  for (const nlohmann::json& r : runs) {
    for (const SweepAxis& axis : axes) std::printf("%*d", column_width(axis), r["sweep"][axis.name].get<int>());
    if (r.contains("median_us"))
      std::printf("%12.2f%10.1f", r["median_us"].get<double>(), r["tflops"].get<double>());
    else
      std::printf("%12s%10s", "-", "-");
    if (r.contains("rel_l2")) std::printf("%11.1e", r["rel_l2"].get<double>());
    else std::printf("%11s", "-");
    const std::string status = !r.contains("status") ? "compiled"
                               : r.contains("error")  ? r["status"].get<std::string>() + ": " + r["error"].get<std::string>()
                                                      : r["status"].get<std::string>();
    std::printf("  %s\n", status.c_str());
  }
  for (std::size_t i = 0; i < refused.size() && i < kRefusalsShown; ++i) {
    std::string values;
    for (const SweepAxis& axis : axes)
      values += (values.empty() ? "" : " ") + axis.name + "=" + std::to_string(refused[i]["sweep"][axis.name].get<int>());
    std::printf("refused %s: %s\n", values.c_str(), refused[i]["reason"].get<std::string>().c_str());
  }
  if (refused.size() > kRefusalsShown)
    std::printf("... and %zu more refused (--format json lists them all)\n", refused.size() - kRefusalsShown);
}

/// --sweep: every combination of the swept knobs' values on the requested schedule `base.params`;
/// those the family refuses are listed with their first reason, the others compiled in parallel
/// and, unless --compile-only, run one after another in one worker, fastest first.
void run_sweep(const RunArgs& args, const RunCandidate& base, const DeviceLimits& limits, const RuntimeInfo& rt) {
  if (!args.emit_cuda.empty()) bad("--emit-cuda", "a sweep runs many kernels", "drop --emit-cuda, or --sweep");
  const std::vector<SweepAxis> axes = parse_sweep(args.sweep);
  std::vector<ScheduleParams> valid;
  nlohmann::json refused = nlohmann::json::array();
  for (const ScheduleParams& p : sweep_schedules(axes, base.params)) {
    const auto issues = validate(base.g, p, limits);
    if (issues.empty()) valid.push_back(p);
    else refused.push_back({{"sweep", sweep_values(axes, p)},
                            {"reason", std::string(message(issues.front().error)) + ": " + issues.front().detail}});
  }
  if (valid.empty())
    bad("--sweep", "none of the " + std::to_string(refused.size()) + " combination(s) is a valid schedule; the first: " +
                       refused[0]["reason"].get<std::string>(),
        "change the values, or --params (the schedule they change)");
  std::vector<KernelSource> kernels;
  std::vector<CompileJob> jobs;
  for (const ScheduleParams& p : valid) {
    kernels.push_back(emit_kernel(base.g, p));
    jobs.push_back({kernels.back().name, kernels.back().code});
  }
  NvrtcCompiler compiler(base.cc);
  const std::vector<CompileResult> compiled = compile_parallel(compiler, jobs);
  std::optional<MeasureWorker> worker;
  if (!args.compile_only) worker.emplace("/proc/self/exe", args.timeout);
  nlohmann::json runs = nlohmann::json::array();
  int failures = 0;
  for (std::size_t i = 0; i < valid.size(); ++i) {
    if (!compiled[i].ok)
      throw InternalError("generated kernel " + kernels[i].name + " does not compile (a bug in tmap):\n" + compiled[i].log);
    const RunCandidate x{base.c, base.hw, base.match, base.mapping, base.g, valid[i], base.cc};
    nlohmann::json r = candidate_json(x, kernels[i], compiled[i]);
    r["sweep"] = sweep_values(axes, valid[i]);
    if (worker && measure(args, x, kernels[i], compiled[i], rt, *worker, r)) ++failures;
    if (worker) spdlog::info("sweep: {} of {} run", i + 1, valid.size());
    runs.push_back(std::move(r));
  }
  auto time_of = [](const nlohmann::json& r) { return r.contains("median_us") ? r["median_us"].get<double>() : 1e300; };
  std::stable_sort(runs.begin(), runs.end(), [&](const nlohmann::json& a, const nlohmann::json& b) { return time_of(a) < time_of(b); });
  if (args.format == "json") std::cout << nlohmann::json{{"runs", runs}, {"refused", refused}}.dump(2) << "\n";
  else print_sweep_text(axes, runs, refused);
  if (failures) throw std::runtime_error(std::to_string(failures) + " of the sweep's kernels failed or are wrong");
}

void run_command(RunArgs& args) {
  Compute c = args.compute.build();
  if (args.size && !(c.dynamic.active() && c.dynamic.lo <= args.size && args.size <= c.dynamic.hi))
    bad("--size", c.dynamic.active() ? std::to_string(args.size) + " is outside the range " + c.dynamic.param + "=" +
                                           std::to_string(c.dynamic.lo) + ".." + std::to_string(c.dynamic.hi)
                                     : "only a range of sizes (--set NAME=LO..HI) takes a size at run time",
        c.dynamic.active() ? "give a size within the range" : "drop --size, or give a range");
  RuntimeInfo rt = query_runtime();
  const int cc = target_arch(args, rt);
  auto all = args.hw_dirs.all();
  const std::vector<HwAbstraction> chosen = args.hw.empty() ? runnable_on(all, cc) : std::vector{find_hw(all, args.hw)};
  // The compute matched: `c`, or its groups packed (the workload, reference and log stay `c`).
  const Compute matched = packed_compute(c, args.group_pack);
  MatchReport report = match_compute(matched, chosen, Enumeration::kAll);
  const Match& match = pick_match(args, report, matched, all);
  const HwAbstraction& hw = find_hw(all, match.hw_abs);
  const Mapping& mapping = pick_mapping(args, match);
  ImplicitGemm g = make_implicit_gemm(matched, hw, match, mapping);
  DeviceLimits limits = DeviceLimits::for_arch(cc);
  if (!rt.devices.empty() && rt.devices.front().compute_capability == cc) limits.sm_count = rt.devices.front().sm_count;
  if (!args.sweep.empty()) {
    const ScheduleParams base = requested_schedule(args, g, limits);
    return run_sweep(args, {c, hw, match, mapping, g, base, cc}, limits, rt);
  }
  const ScheduleParams params = schedule_of(args, g, limits);
  const RunCandidate x{c, hw, match, mapping, g, params, cc};

  KernelSource kernel = emit_kernel(g, params);
  if (!args.emit_cuda.empty()) write_file(args.emit_cuda, self_contained(kernel.code), "--emit-cuda");
  NvrtcCompiler compiler(cc);
  CompileResult compiled = compiler.compile(kernel.code, kernel.name);
  if (!compiled.ok)
    throw InternalError("generated kernel " + kernel.name + " does not compile (a bug in tmap):\n" + compiled.log);
  nlohmann::json result = candidate_json(x, kernel, compiled);
  bool failed = false;
  if (!args.compile_only) {
    MeasureWorker worker("/proc/self/exe", args.timeout);
    failed = measure(args, x, kernel, compiled, rt, worker, result);
  }
  if (args.format == "json") std::cout << result.dump(2) << "\n";
  else print_text(result, kernel, failed);
  if (failed) throw std::runtime_error("the kernel failed or is wrong");
}

}  // namespace

void register_run(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  auto* cmd = app.add_subcommand("run", "Generate, compile and run one candidate kernel on the GPU");
  args->compute.add_to(*cmd);
  cmd->add_option("--hw", args->hw, "Abstraction (default: the first that matches)");
  args->hw_dirs.add_to(*cmd);
  cmd->add_option("--layout", args->layout, "Layout key, e.g. nnn (default: the abstraction's first)");
  cmd->add_option("--shape", args->shape, "Intrinsic shape MxNxK, e.g. 16x16x16 (default: the first)");
  cmd->add_option("--match", args->match,
                  "Match number (#) from 'tmap map' with the same --hw, which it needs, e.g. a transposed product "
                  "(default: the first of --layout and --shape)");
  cmd->add_option("--mapping", args->mapping, "Mapping id from 'tmap map' (default: every candidate fused)");
  add_group_pack_option(*cmd, args->group_pack);
  cmd->add_option("--params", args->params,
                  "Schedule parameters as JSON, keys from 'tmap knobs': " + join(knob_names()) +
                      " (default: a sensible schedule)");
  cmd->add_flag("--verify", args->verify, "Check the output against the reference kernel");
  cmd->add_option("--arch", args->arch, "Compile for sm_XX instead of the detected GPU");
  cmd->add_flag("--compile-only", args->compile_only, "Stop after compiling (no GPU needed)");
  cmd->add_option("--emit-cuda", args->emit_cuda, "Write the generated CUDA source to this file");
  cmd->add_option("--log", args->log,
                  "Append the measurement to this tuning log as the tuner records it (verified, timed as the tuner "
                  "times), so that replay, export and a later 'tmap tune --confirm' see the candidate");
  cmd->add_option("--format", args->format, "text or json")->check(CLI::IsMember({"text", "json"}));
  cmd->add_option("--timeout", args->timeout, "Seconds before a hanging kernel is stopped (default 60)");
  cmd->add_option("--size", args->size,
                  "With a range of sizes (--set M=1..256): run the kernel, which takes the size at run time, at this "
                  "one (default: the largest)")
      ->check(at_least(1));
  cmd->add_option("--sweep", args->sweep,
                  "Run every combination of these knobs' values on the schedule of --params (or the default), e.g. "
                  "--sweep block_n=96,128 --sweep stages=4,8 (repeatable, at most 4096 combinations; "
                  "KNOB+KNOB=... gives knobs one value, as warp_n+block_n=96,128): the ones the family refuses are "
                  "listed with a reason, the others compiled and run in one worker, fastest first");
  cmd->add_option("--graph", args->graph_runs, "Time replays of a CUDA graph of this many runs (for short kernels)");
  cmd->add_flag("--flush-l2", args->flush_l2,
               "Flush the L2 cache before each run (cold cache); with --graph the flushes' own time is subtracted");
  cmd->callback([args] { run_command(*args); });
}

}  // namespace tmap::cli
