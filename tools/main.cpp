// tmap: maps tensor computations onto hardware intrinsics.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "commands.h"
#include "tmap/runtime/device.h"
#include "tmap/runtime/measure_worker.h"
#include "tmap/runtime/nvrtc_compiler.h"
#include "tmap/support/diagnostic.h"

namespace {

void register_version(CLI::App& app) {
  auto format = std::make_shared<std::string>("text");
  auto* cmd = app.add_subcommand("version", "Print tmap's version, the CUDA runtime, NVRTC and the devices");
  cmd->add_option("--format", *format, "text or json (one document on stdout)")->check(CLI::IsMember({"text", "json"}));
  cmd->callback([format] {
    tmap::RuntimeInfo rt = tmap::query_runtime();
    if (*format == "json") {
      nlohmann::json devices = nlohmann::json::array();
      for (const auto& d : rt.devices)
        devices.push_back({{"index", d.index}, {"name", d.name}, {"arch", "sm_" + std::to_string(d.compute_capability)},
                           {"sms", d.sm_count}, {"memory_mib", d.global_memory_bytes >> 20}, {"uuid", d.uuid}});
      nlohmann::json j = {{"tmap", TMAP_VERSION},
                          {"cuda_runtime", tmap::cuda_version_text(rt.runtime_version)},
                          {"nvrtc", std::to_string(rt.nvrtc_major) + "." + std::to_string(rt.nvrtc_minor)},
                          {"driver", tmap::cuda_version_text(rt.driver_version)},
                          {"devices", devices},
                          {"status", rt.status.empty() ? nlohmann::json() : nlohmann::json(rt.status)}};
      std::cout << j.dump(2) << "\n";
      return;
    }
    std::cout << "tmap " << TMAP_VERSION << "\n"
              << "CUDA runtime " << tmap::cuda_version_text(rt.runtime_version) << " (static), NVRTC "
              << rt.nvrtc_major << "." << rt.nvrtc_minor << ", driver " << tmap::cuda_version_text(rt.driver_version)
              << "\n";
    for (const auto& d : rt.devices)
      std::cout << "device " << d.index << ": " << d.name << ", sm_" << d.compute_capability << ", " << d.sm_count
                << " SMs, " << (d.global_memory_bytes >> 20) << " MiB, " << d.uuid << "\n";
    if (!rt.status.empty()) std::cout << rt.status << "\n";
  });
}

}  // namespace

namespace tmap::cli {
int& exit_status() {
  static int status = 0;
  return status;
}
/// The arguments with a subcommand's options that precede it moved after it (after the deepest
/// subcommand named: `tmap --format json hw list` -> `tmap hw list --format json`), so that options
/// go before or after the command alike. The program's own flags stay where they are.
std::vector<std::string> subcommand_options_last(const CLI::App& app, int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc), out, leading;
  const auto is_sub = [](const CLI::App* parent, const std::string& name) {
    return !parent->get_subcommands([&](const CLI::App* c) { return c->get_name() == name; }).empty();
  };
  std::size_t at = 0;
  for (; at < args.size() && !is_sub(&app, args[at]); ++at) {
    const std::string& a = args[at];
    const bool own = a == "-v" || a == "--verbose" || a == "-q" || a == "--quiet" || a == "-h" || a == "--help";
    (own ? out : leading).push_back(a);
  }
  if (leading.empty() || at == args.size()) return args;
  const CLI::App* sub = app.get_subcommand(args[at]);
  out.push_back(args[at++]);
  for (; at < args.size() && is_sub(sub, args[at]); ++at) {
    sub = sub->get_subcommand(args[at]);
    out.push_back(args[at]);
  }
  out.insert(out.end(), leading.begin(), leading.end());
  out.insert(out.end(), args.begin() + static_cast<std::ptrdiff_t>(at), args.end());
  return out;
}
}  // namespace tmap::cli

namespace {

/// The workers tmap starts itself, which speak JSON lines on stdin and stdout: the measurement
/// worker (one a GPU) and the compile worker of tuning. -1 when the arguments name neither.
int run_internal_command(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "worker") return tmap::run_measure_worker(stdin, stdout);
  if (argc == 4 && std::string(argv[1]) == "worker" && std::string(argv[2]) == "--device")
    return tmap::run_measure_worker(stdin, stdout, std::atoi(argv[3]));
  if (argc == 2 && std::string(argv[1]) == "compile-worker") return tmap::run_compile_worker(stdin, stdout);
  return -1;
}

/// Whether `name` is one of `app`'s commands; if not, says so plainly with the list (CLI11 would
/// only say that a subcommand is required).
bool known_command(const CLI::App& app, const std::string& name) {
  std::string commands;
  bool known = false;
  for (const auto* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    known = known || sub->get_name() == name;
    commands += (commands.empty() ? "" : ", ") + sub->get_name();
  }
  if (!known) std::cerr << "error: unknown command '" << name << "'\n  hint: commands are: " << commands << " (tmap --help)\n";
  return known;
}

/// Parses `args` (the program's name first) and runs the command: the exit status, 2 for the
/// user's errors, 1 for tmap's and the system's.
int parse_and_run(CLI::App& app, std::vector<char*>& args) {
  try {
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  } catch (const tmap::UserError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  } catch (const tmap::InternalError& e) {
    std::cerr << e.what() << "\n";
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {
    std::cerr << "tmap: error: " << tmap::exception_text(e) << "\n";  // an I/O failure: disk, permissions
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "tmap: internal error (a bug in tmap): " << tmap::exception_text(e) << "\n";
    return 1;
  }
  return tmap::cli::exit_status();
}

}  // namespace

int main(int argc, char** argv) {
  if (const int status = run_internal_command(argc, argv); status >= 0) return status;
  CLI::App app{"tmap: maps tensor computations (GEMM, convolutions, ...) onto hardware intrinsics such as "
               "NVIDIA Tensor Cores"};
  app.require_subcommand(1);
  // The program's flags are accepted anywhere (`tmap tune -q ...`): subcommands inherit this
  // before they exist. A subcommand's options that precede it are moved after it (below).
  app.fallthrough();
  bool verbose = false, quiet = false;
  app.add_flag("-v,--verbose", verbose, "Log debugging detail to stderr");
  app.add_flag("-q,--quiet", quiet, "Log only errors");
  app.parse_complete_callback([&] {
    auto logger = spdlog::stderr_color_mt("tmap");
    spdlog::set_default_logger(logger);
    spdlog::set_pattern("[%^%l%$] %v");
    spdlog::set_level(verbose ? spdlog::level::debug : quiet ? spdlog::level::err : spdlog::level::info);
  });
  tmap::cli::register_map(app);
  tmap::cli::register_hw(app);
  tmap::cli::register_ops(app);
  tmap::cli::register_knobs(app);
  tmap::cli::register_run(app);
  tmap::cli::register_model(app);
  tmap::cli::register_tuning(app);
  register_version(app);
  if (argc > 1 && argv[1][0] != '-' && !known_command(app, argv[1])) return 2;
  const std::vector<std::string> args = tmap::cli::subcommand_options_last(app, argc, argv);
  std::vector<char*> reordered{argv[0]};
  for (const std::string& a : args) reordered.push_back(const_cast<char*>(a.c_str()));
  return parse_and_run(app, reordered);
}
