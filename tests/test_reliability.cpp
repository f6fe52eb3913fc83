// Hostile input, interruption and write faults, through the built binary: every case ends in a
// clear message and a documented exit status, never a crash, and never a damaged log.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "test_util.h"
#include "tmap/support/files.h"

namespace {

using tmap::testing::CliRun;
using tmap::testing::ScratchDir;
using tmap::testing::shell;
using tmap::testing::shipped;
using tmap::testing::tmap;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

/// The lines of a log; fails the test unless every one is a complete JSON object.
std::vector<nlohmann::json> log_lines(const std::string& path) {
  const std::string text = slurp(path);
  EXPECT_TRUE(text.empty() || text.back() == '\n') << path << " ends in half a line";
  std::vector<nlohmann::json> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << path << ": line " << out.size() + 1 << " is not JSON";
    out.push_back(j);
  }
  return out;
}

std::string gemm_file_with(const std::string& key, const std::string& value) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(tmap("ops show gemm").out);
  if (key == "compute") j["compute"] = value;
  else j["tensors"]["A"]["shape"][0] = value;
  return j.dump();
}

struct Hostile {
  std::string name;
  std::string file;     ///< written into the scratch directory as `name`.json ("" for none)
  std::string command;  ///< {f}: that file; {d}: the scratch directory
  std::string expect;   ///< in stderr
};

std::string expand(std::string s, const std::string& file, const std::string& dir) {
  s = std::regex_replace(s, std::regex("\\{f\\}"), file);
  return std::regex_replace(s, std::regex("\\{d\\}"), dir);
}

TEST(Hostile, DeepNestingLongTextAndWrongKindsOfPathGetAClearError) {
  ScratchDir dir("tmap_hostile");
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string parens = std::string(200, '(') + "m" + std::string(200, ')');
  std::string chain = "m";
  for (int i = 0; i < 5000; ++i) chain += "+m";
  const std::vector<Hostile> cases = {
      {"deep_compute", deep, "map {f}", "JSON nested more than 64 levels deep"},
      {"deep_object", std::string(5000, '{') + "\"a\":1" + std::string(5000, '}'), "map {f}", "nested more than 64"},
      {"deep_hw", deep, "hw list --hw-dir {d}/hw", "JSON nested more than 64 levels deep"},
      {"deep_params", "", "run --op gemm --compile-only --arch sm_90 --params '" + std::string(1000, '[') +
                              std::string(1000, ']') + "'", "--params:1:65: error: JSON nested more than 64"},
      {"bad_params", "", "run --op gemm --compile-only --arch sm_90 --params '{\"block_m\": }'",
       "--params:1:13: error: invalid JSON"},
      {"deep_parens", gemm_file_with("compute", "C[m, n] += A[" + parens + ", k] * B[k, n]"), "map {f}",
       "nested more than 64 levels deep"},
      {"deep_shape", gemm_file_with("shape", parens), "map {f}", "nested more than 64 levels deep"},
      {"long_index", gemm_file_with("compute", "C[m, n] += A[" + chain + ", k] * B[k, n]"), "map {f}",
       "more than 4096 tokens"},
      {"long_name", gemm_file_with("compute", "C[m, n] += A[" + std::string(300, 'x') + ", k] * B[k, n]"), "map {f}",
       "a name of 300 characters"},
      {"number_overflow", "{\"name\": 1e999}", "map {f}", "number_overflow.json:1:10: error: invalid JSON: number overflow"},
      {"empty", "", "map {d}/empty.json", "empty.json' is empty"},
      {"directory", "", "map {d}", "is a directory, not a compute file"},
      {"missing", "", "map {d}/nope.json", "does not exist"},
      {"hw_dir_is_file", "{}", "hw list --hw-dir {f}", "is not a directory"},
      {"log_is_dir", "", "logs list {d}", "is a directory, not a log"},
      {"huge_extent", "", "map --op gemm --set M=4611686018427387904", "more than 32-bit indexing allows"},
      // Inputs that never end are cut off at the cap, whatever kind of file they are.
      {"endless_device", "", "map /dev/zero", "goes on past 64 MiB, the most tmap reads"},
      {"endless_table", "", "tune --table /dev/zero --measure model", "goes on past 64 MiB"},
      {"endless_log", "", "logs list /dev/zero", "cannot read log '/dev/zero': it goes on past 256 MiB"},
  };
  std::filesystem::create_directories(dir / "hw");
  write(dir / "hw/deep.json", deep);
  write(dir / "empty.json", "");
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string file = dir / (c.name + ".json");
    if (!c.file.empty()) write(file, c.file);
    CliRun r = tmap(expand(c.command, file, dir.str()));
    EXPECT_EQ(r.code, 2) << r.err.substr(0, 2000);
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << r.err.substr(0, 2000);
    EXPECT_LT(r.err.size(), 2000u) << "the excerpt of a long line is a window, not the whole line";
  }
  // A pipe that never ends, and a FIFO without a writer, end too.
  CliRun piped = shell("yes | tmap map /dev/stdin");
  EXPECT_EQ(piped.code, 2);
  EXPECT_NE(piped.err.find("goes on past 64 MiB"), std::string::npos) << piped.err.substr(0, 2000);
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0644), 0);
  CliRun fifo = tmap("map " + (dir / "fifo"));
  EXPECT_EQ(fifo.code, 2);
  EXPECT_NE(fifo.err.find("is empty"), std::string::npos) << fifo.err;
  // A deep line in a log is one skipped line with a warning, not a crash.
  write(dir / "deep.jsonl", deep + "\n");
  CliRun r = tmap("logs list " + (dir / "deep.jsonl"));
  EXPECT_EQ(r.code, 0) << r.err.substr(0, 2000);
  EXPECT_NE(r.err.find("deep.jsonl:1: "), std::string::npos) << r.err.substr(0, 2000);
  // Unreadable files (root reads everything, so only as another user).
  if (::geteuid() != 0) {
    write(dir / "secret.json", "{}");
    std::filesystem::permissions(dir / "secret.json", std::filesystem::perms::none);
    CliRun u = tmap("map " + (dir / "secret.json"));
    EXPECT_EQ(u.code, 2);
    EXPECT_NE(u.err.find("cannot read compute file"), std::string::npos) << u.err;
  }
}

// The tuner's binaries, the references and a range's kernels live in temporary directories that
// go with everything in them.
TEST(Hostile, TemporaryDirectoriesAreFreshAndRemovedWithTheirFiles) {
  std::string path;
  {
    tmap::TemporaryDirectory a("tmap_test_dir", "a test"), b("tmap_test_dir", "a test");
    EXPECT_NE(a.path(), b.path());
    EXPECT_TRUE(std::filesystem::is_directory(a.path()));
    std::filesystem::create_directories(a.path() + "/sub");
    std::ofstream(a.path() + "/sub/k.cubin") << "binary";
    path = a.path();
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(Cli, ProgramAndGroupOptionsAreAcceptedAfterTheSubcommand) {
  ScratchDir dir("tmap_anywhere");
  std::filesystem::create_directories(dir / "mine");
  std::string show = tmap("hw show wmma_fp16_fp32").out;
  write(dir / "mine/my.json", std::regex_replace(show, std::regex("\"wmma_fp16_fp32\""), "\"my_wmma\""));
  for (const std::string& args :
       {"hw list --hw-dir " + (dir / "mine"), "hw --hw-dir " + (dir / "mine") + " list",
        "hw show --hw-dir " + (dir / "mine") + " my_wmma", "hw show my_wmma --hw-dir " + (dir / "mine")}) {
    CliRun r = tmap(args);
    EXPECT_EQ(r.code, 0) << args << "\n" << r.err;
    EXPECT_NE(r.out.find("my_wmma"), std::string::npos) << args;
  }
  // -q after the subcommand silences the info lines, as before it.
  for (const std::string& args : {"-q tune", "tune -q"}) {
    CliRun r = tmap(args + " --op gemm --set M=64 --set N=64 --set K=64 --measure model --trials 1 --log " +
                    (dir / "q.jsonl"));
    EXPECT_EQ(r.code, 0) << args << "\n" << r.err;
    EXPECT_EQ(r.err.find("[info]"), std::string::npos) << args << "\n" << r.err;
  }
  CliRun v = tmap("tune -v --op gemm --set M=64 --measure model --trials 1 --log " + (dir / "v.jsonl"));
  EXPECT_EQ(v.code, 0) << v.err;
  EXPECT_NE(v.err.find("[info]"), std::string::npos) << v.err;
  // A positional argument after a repeatable option is not taken as another value of it.
  CliRun m = tmap("map --set M=64 " + (dir / "nope.json"));
  EXPECT_NE(m.err.find("does not exist"), std::string::npos) << m.err;
}

TEST(Cli, HwShowLoadsBackUnchanged) {
  ScratchDir dir("tmap_hw_roundtrip");
  std::filesystem::create_directories(dir / "mine");
  for (const auto& hw : shipped()) {
    SCOPED_TRACE(hw.name);
    CliRun shown = tmap("hw show " + hw.name);
    ASSERT_EQ(shown.code, 0) << shown.err;
    const std::string renamed =
        std::regex_replace(shown.out, std::regex("\"name\": \"" + hw.name + "\""), "\"name\": \"my_" + hw.name + "\"");
    ASSERT_NE(renamed, shown.out);
    write(dir / ("mine/" + hw.name + ".json"), renamed);
  }
  for (const auto& hw : shipped()) {
    CliRun again = tmap("hw show my_" + hw.name + " --hw-dir " + (dir / "mine"));
    ASSERT_EQ(again.code, 0) << again.err;
    EXPECT_EQ(again.out, slurp(dir / ("mine/" + hw.name + ".json"))) << hw.name << " does not load back unchanged";
  }
}

TEST(Cli, FormatJsonPrintsOneDocumentForEveryListingAndResult) {
  ScratchDir dir("tmap_format_json");
  const std::string log = dir / "g.jsonl";
  const std::vector<std::string> commands = {
      "version --format json",
      "hw list --format json",
      "ops list --format json",
      "map --op gemm --format json",
      "tune --op gemm --set M=64 --set N=64 --set K=64 --measure model --trials 3 --log " + log + " --format json",
      "logs list " + log + " --format json",
      "logs rank " + std::string(TMAP_SOURCE_DIR) + "/tests/data/h100_measured_sample.jsonl --format json",
      "replay " + log + " --allow-unmeasured --arch sm_90 --format json",
  };
  for (const auto& c : commands) {
    SCOPED_TRACE(c);
    CliRun r = tmap(c);
    ASSERT_EQ(r.code, 0) << r.err;
    nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << "stdout is not one JSON document:\n" << r.out.substr(0, 500);
    if (c.rfind("tune", 0) == 0) {
      EXPECT_EQ(j["trials"], 3);
      EXPECT_EQ(j["stop_reason"], "ranked by the analytic model");
      EXPECT_EQ(j["best"]["result"]["status"], "unmeasured");
    } else if (c.rfind("logs rank", 0) == 0) {
      ASSERT_FALSE(j["workloads"].empty());
      EXPECT_TRUE(j["workloads"][0]["analytic"].is_number());
    } else if (c.rfind("logs", 0) == 0) {
      ASSERT_EQ(j["workloads"].size(), 1u);
      EXPECT_EQ(j["workloads"][0]["records"], 3);
    } else if (c.rfind("replay", 0) == 0) {
      ASSERT_EQ(j["results"].size(), 1u);
      // Compiled only without a GPU; run (and verified when asked) on one.
      EXPECT_EQ(j["results"][0]["status"], tmap::testing::have_gpu() ? "ok" : "compiled");
    } else if (c.rfind("version", 0) == 0) {
      EXPECT_TRUE(j["tmap"].is_string());
      EXPECT_TRUE(j["devices"].is_array());
    }
  }
}

/// Starts a long model-only tune in the background, sends `sig` once its log holds a record (or
/// after 60 s), and returns the run; the log is `log`. Waiting for the first record rather than a
/// fixed delay keeps the test meaningful on a loaded machine or under a sanitizer, where starting
/// the tuner can take longer than any delay chosen on an idle one.
CliRun tune_and_signal(const std::string& log, const char* sig) {
  // Enough candidates (every schedule of 32 mappings) that the run outlasts the first record.
  return shell("tmap tune --op gemm --measure model --trials 700 --trials-per-batch 8 --log " + log +
               " & pid=$!; for i in $(seq 600); do [ -s " + log +
               " ] && break; sleep 0.1; done; kill -" + sig + " $pid; wait $pid");
}

TEST(Reliability, SigintOrSigtermStopsTuneWithAValidLogAndTheConventionalStatus) {
  ScratchDir dir("tmap_signals");
  for (const auto& [sig, status] : {std::pair<const char*, int>{"INT", 130}, {"TERM", 143}}) {
    SCOPED_TRACE(sig);
    const std::string log = dir / (std::string(sig) + ".jsonl");
    CliRun r = tune_and_signal(log, sig);
    EXPECT_EQ(r.code, status) << r.err;
    EXPECT_NE(r.out.find("stopped: stopped by the user"), std::string::npos) << r.out;
    const auto lines = log_lines(log);
    // Everything the summary counts is in the log, and nothing else.
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.out, m, std::regex("(\\d+) trials ranked and compiled"))) << r.out;
    EXPECT_EQ(lines.size(), std::stoul(m[1])) << r.out;
    EXPECT_GT(lines.size(), 0u);
    EXPECT_LT(lines.size(), 700u);
    // The log resumes: a second run of the same command does not repeat its records.
    CliRun again = tmap("tune --op gemm --measure model --trials 2 --log " + log);
    EXPECT_EQ(again.code, 0) << again.err;
    EXPECT_EQ(log_lines(log).size(), lines.size() + 2);
  }
}

TEST(Reliability, AFailingLogWriteIsAClearErrorAndLosesNothing) {
  ScratchDir dir("tmap_write_faults");
  // A device is no log: refused before anything is tuned (the file-size limit below is the full disk).
  CliRun full = tmap("tune --op gemm --measure model --trials 2 --log /dev/full");
  EXPECT_EQ(full.code, 2);
  EXPECT_NE(full.err.find("'/dev/full' is a device, not a regular file"), std::string::npos) << full.err;

  // A file-size limit that a record crosses half way: the half record is cut off again.
  const std::string log = dir / "limited.jsonl";
  ASSERT_EQ(tmap("tune --op gemm --measure model --trials 3 --log " + log).code, 0);
  const std::string before = slurp(log);
  ASSERT_EQ(log_lines(log).size(), 3u);
  rlimit old{};
  ::getrlimit(RLIMIT_FSIZE, &old);
  rlimit limited = old;
  limited.rlim_cur = before.size() + before.size() / 2;  // room for about four more records and a half
  auto old_xfsz = ::signal(SIGXFSZ, SIG_IGN);  // the write fails with EFBIG instead of killing
  ::setrlimit(RLIMIT_FSIZE, &limited);
  CliRun r = tmap("tune --op gemm --set M=512 --measure model --trials 40 --log " + log);
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, old_xfsz);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("File too large"), std::string::npos) << r.err;
  const std::string after = slurp(log);
  EXPECT_EQ(after.substr(0, before.size()), before) << "records written before the fault changed";
  const auto lines = log_lines(log);
  EXPECT_GT(lines.size(), 3u);
  EXPECT_LT(lines.size(), 43u);

  // A read-only log (root writes anyway, so only as another user).
  if (::geteuid() != 0) {
    std::filesystem::permissions(log, std::filesystem::perms::owner_read);
    CliRun ro = tmap("tune --op gemm --measure model --trials 1 --log " + log);
    EXPECT_EQ(ro.code, 2);
    EXPECT_NE(ro.err.find("cannot open log"), std::string::npos) << ro.err;
    EXPECT_EQ(slurp(log), after);
  }
}

/// The tmap commands of the first code block of each of the README's "A five-minute tour" and
/// "The command line" sections, as written.
std::vector<std::string> readme_commands() {
  std::ifstream in(std::string(TMAP_SOURCE_DIR) + "/README.md");
  std::vector<std::string> out;
  bool section = false, block = false, done = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0) {
      section = line == "## The command line" || line == "## A five-minute tour";
      block = done = false;
    }
    if (!section || done) continue;
    if (line.rfind("```", 0) == 0) {
      done = block;  // the first block of the section
      block = !block;
      continue;
    }
    if (!block || line.rfind("tmap ", 0) != 0) continue;
    if (auto hash = line.find("  #"); hash != std::string::npos) line = line.substr(0, hash);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out.push_back(line);
  }
  return out;
}

/// Whether a README command needs a GPU: it runs or tunes on one.
bool needs_gpu(const std::string& c) {
  return (c.rfind("tmap run", 0) == 0 && c.find("--compile-only") == std::string::npos) ||
         (c.rfind("tmap tune", 0) == 0 && c.find("--measure model") == std::string::npos);
}

// tmap replaces regular files only, and whole: a device, FIFO, directory or dangling link named
// as an output is refused (a FIFO without a reader would block the open); a link to a regular
// file is written through and stays a link; a replaced file is never seen half written.
TEST(Reliability, WritesReplaceRegularFilesOnlyAndWhole) {
  ScratchDir dir("tmap_writes");
  const std::string fifo = dir / "fifo", sub = dir / "sub", dangling = dir / "dangling", file = dir / "file.txt",
                    link = dir / "link.txt";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  std::filesystem::create_directories(sub);
  std::filesystem::create_symlink(dir / "missing", dangling);
  write(file, "old");
  std::filesystem::create_symlink(file, link);
  for (const auto& refused : std::vector<std::pair<std::string, std::string>>{
           {"/dev/null", "is a device"}, {fifo, "is a FIFO"}, {sub, "is a directory"}, {dangling, "is a symbolic link to nothing"}}) {
    const std::string& target = refused.first;  // a plain name: lambdas cannot capture structured bindings in Clang's C++20
    const std::string& says = refused.second;
    SCOPED_TRACE(target);
    const std::string err = tmap::testing::user_error_of([&] { tmap::write_file(target, "x", "--out"); });
    EXPECT_NE(err.find(says), std::string::npos) << err;
    EXPECT_NE(err.find("--out"), std::string::npos) << err;
  }
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));
  tmap::write_file(link, "new", "--out");
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_EQ(slurp(file), "new");
  tmap::write_file(dir / "fresh.txt", "made", "--out");
  EXPECT_EQ(slurp(dir / "fresh.txt"), "made");
  for (const auto& e : std::filesystem::directory_iterator(dir.str()))
    EXPECT_EQ(e.path().filename().string().rfind(".", 0), std::string::npos) << "a temporary file was left: " << e.path();
  // The commands that write: logs prune, import --out, tune --log, run --emit-cuda.
  const std::string log = dir / "g.jsonl";
  {
    std::ifstream in(std::string(TMAP_SOURCE_DIR) + "/logs/h100_gemm.jsonl");
    std::string line;
    std::getline(in, line);
    write(log, line + "\n");
  }
  for (const std::string& cmd : {"logs prune " + log + " --out " + fifo, "tune --op gemm --measure model --trials 1 --log " + fifo,
                                 "run --op gemm --arch sm_90 --compile-only --emit-cuda " + sub}) {
    SCOPED_TRACE(cmd);
    CliRun r = tmap(cmd);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << r.err;
  }
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));
  CliRun pruned = tmap("logs prune " + log + " --out " + link);
  EXPECT_EQ(pruned.code, 0) << pruned.err;
  EXPECT_EQ(log_lines(file).size(), 1u);
}

TEST(Cli, EveryReadmeCommandRunsAsWritten) {
  const auto commands = readme_commands();
  ASSERT_GE(commands.size(), 28u) << "the README's tour and command-line blocks were not found";
  ScratchDir dir("tmap_readme");
  // The files the examples name: a compute of the user's, a directory of their abstractions (one
  // written the documented way, from `hw show`), and logs that hold measured records, as after
  // tuning on a GPU.
  write(dir / "my_compute.json", tmap("ops show gemm").out);
  std::filesystem::create_directories(dir / "my_intrinsics");
  write(dir / "my_intrinsics/mine.json",
        std::regex_replace(tmap("hw show wmma_fp16_fp32").out, std::regex("\"wmma_fp16_fp32\""), "\"my_wmma\""));
  std::filesystem::create_directories(dir / "logs");
  for (const auto& [log, from] : {std::pair<std::string, std::string>{"conv2d", "h100_resnet18_b1"}, {"gemm", "h100_gemm"}}) {
    std::ifstream in(std::string(TMAP_SOURCE_DIR) + "/logs/" + from + ".jsonl");
    std::ofstream out(dir / ("logs/" + log + ".jsonl"));
    std::string line;
    for (int i = 0; i < 2 && std::getline(in, line); ++i) out << line << "\n";
  }
  // A model, as a user's exported ONNX file (built by the test models' writer). A tmap built
  // without libonnx must refuse it and say why; what the import would write is then missing.
  const bool onnx = TMAP_TESTS_HAVE_ONNX;
  if (onnx) ASSERT_EQ(shell("tmap_make_model resnet_style model.onnx", dir.str()).code, 0);
  else write(dir / "model.onnx", "not read: this tmap has no ONNX support");
  const bool gpu = tmap::testing::have_gpu();
  for (const auto& c : commands) {
    SCOPED_TRACE(c);
    if (!onnx && c.find("model.json") != std::string::npos) continue;  // written by the import
    // The sanitizer build's run (a sampled sweep) leaves out the tunes ranked by the model, which
    // compile every candidate with NVRTC (five times slower there: minutes); the release build's
    // run of the suite runs them, and the model tuner's own tests run under the sanitizers.
    if (tmap::testing::sweep_sample() > 1 && c.find("--measure model") != std::string::npos) continue;
    CliRun r = shell(c, dir.str());
    if (!onnx && c.find("model.onnx") != std::string::npos) {
      EXPECT_EQ(r.code, 2) << r.err;
      EXPECT_NE(r.err.find("without ONNX support"), std::string::npos) << r.err;
    } else if (needs_gpu(c) && !gpu) {
      EXPECT_EQ(r.code, 2) << r.err;
      EXPECT_NE(r.err.find("GPU"), std::string::npos) << "without a GPU it must say so:\n" << r.err;
    } else {
      EXPECT_EQ(r.code, 0) << r.err.substr(0, 3000);
    }
  }
  // What the examples write is there.
  EXPECT_TRUE(std::filesystem::exists(dir / "my_conv.json"));
  EXPECT_TRUE(std::filesystem::exists(dir / "k.cu"));
  EXPECT_TRUE(std::filesystem::exists(dir / "best.jsonl"));
  EXPECT_FALSE(std::filesystem::is_empty(dir / "kernels"));
  EXPECT_EQ(std::filesystem::exists(dir / "model.json"), onnx);
  EXPECT_TRUE(std::filesystem::exists(dir / "exported/CMakeLists.txt"));
}

}  // namespace
