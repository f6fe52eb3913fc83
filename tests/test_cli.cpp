// The built binary: exit codes, the JSON document of `tmap map`, and errors on stderr.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <map>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "test_util.h"
#include "tmap/runtime/nvrtc_compiler.h"
#include "tmap/tune/tune_log.h"

namespace {

using tmap::testing::CliRun;
using tmap::testing::ScratchDir;
using tmap::supported_archs;
using tmap::testing::shipped;
using tmap::testing::tmap;

const std::string kData = std::string(TMAP_SOURCE_DIR) + "/tests/data";

TEST(Cli, MapJsonIsOneDocumentWithTheDocumentedSchema) {
  CliRun r = tmap("map --op conv2d --hw wmma_fp16_fp32 --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json doc = nlohmann::json::parse(r.out);  // throws unless stdout is exactly one document
  ASSERT_EQ(doc["matches"].size(), 12u);
  EXPECT_EQ(doc["workload"]["name"], "conv2d");
  for (const auto& m : doc["matches"]) {
    EXPECT_EQ(m["hw_abs"], "wmma_fp16_fp32");
    EXPECT_TRUE(m["layout"].is_string());
    EXPECT_EQ(m["shape"].size(), 3u);
    EXPECT_EQ(m["operands"], (nlohmann::json{{"A", "I"}, {"B", "Wt"}, {"D", "Out"}}));
    ASSERT_EQ(m["mappings"].size(), 35u);
    for (const auto& map : m["mappings"]) {
      EXPECT_TRUE(map["id"].is_number_integer());
      EXPECT_TRUE(map["axes"]["i"].is_array());
      EXPECT_TRUE(map["axes"]["j"].is_array());
      EXPECT_TRUE(map["axes"]["k"].is_array());
      EXPECT_TRUE(map["fits"].is_boolean());
      EXPECT_TRUE(map["padding"].is_string());
      EXPECT_TRUE(map["padding_waste"].is_number());
    }
  }
  EXPECT_TRUE(doc["rejected"].empty());
  // Without --hw the other abstractions are rejected, each with a reason.
  CliRun all = tmap("map --op conv2d --format json --enumerate all");
  ASSERT_EQ(all.code, 0) << all.err;
  nlohmann::json d = nlohmann::json::parse(all.out);
  EXPECT_EQ(d["matches"][0]["mappings"].size(), 49u);
  EXPECT_EQ(d["rejected"].size(), shipped().size() - 4);  // fp16 -> fp32: wmma, mma_sync, wgmma and simt match
  for (const auto& rej : d["rejected"]) EXPECT_FALSE(rej["reason"].get<std::string>().empty());
}

TEST(Cli, MapReadsFilesAndOverrides) {
  CliRun r = tmap("map " + kData + "/conv1d_stride2.json --set K=64 --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["workload"]["name"], "conv1d_stride2");
  EXPECT_EQ(doc["workload"]["params"]["K"], 64);
  EXPECT_EQ(doc["matches"][0]["mappings"].size(), 6u);
  // `ops show` prints a file that `map` reads back to the same result as --op.
  std::string file = std::filesystem::temp_directory_path() / ("tmap_cli_op_" + std::to_string(::getpid()) + ".json");
  std::ofstream(file) << tmap("ops show conv3d").out;
  CliRun from_file = tmap("map " + file + " --format json");
  CliRun from_op = tmap("map --op conv3d --format json");
  std::filesystem::remove(file);
  ASSERT_EQ(from_file.code, 0) << from_file.err;
  EXPECT_EQ(nlohmann::json::parse(from_file.out)["matches"], nlohmann::json::parse(from_op.out)["matches"]);
}

TEST(Cli, TextOutputIsForPeople) {
  CliRun r = tmap("map --op conv2d --hw wmma_fp16_fp32");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("12 match(es), mappings enumerated by 'amos'"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("wmma_fp16_fp32     nnn     8x32x16   I, Wt -> Out     20 of 35"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("padded: axis i fuses {n} of extent 1, padded to the intrinsic's m = 16"), std::string::npos);
  CliRun rej = tmap("map --op gemm --set K=64");
  EXPECT_NE(rej.out.find("rejected:\n  mma_sync_bf16_fp32"), std::string::npos) << rej.out;
}

struct BadCase {
  std::string args;
  std::string message;
};

/// Runs a bad command line: exit 2, the message on stderr; returns the run for more checks.
CliRun expect_refused(const BadCase& c) {
  SCOPED_TRACE(c.args);
  CliRun r = tmap(c.args);
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
  return r;
}

TEST(Cli, BadInputExitsTwoWithTheMessageOnStderr) {
  const BadCase cases[] = {
      {"map", "no compute given"},
      {"map --op gemm " + kData + "/conv1d_stride2.json", "give either a compute file or --op, not both"},
      {"map --op gemm3", "unknown op 'gemm3'"},
      {"map /nonexistent.json", "compute file '/nonexistent.json' does not exist"},
      {"map --op gemm --set M=x", "the value of parameter 'M' must be an integer"},
      {"map --op gemm --set Q=1", "unknown parameter 'Q' of compute 'gemm'"},
      {"map --op gemm --hw wmma_fp8", "unknown hardware abstraction 'wmma_fp8'"},
      {"map --op gemm --enumerate some", "--enumerate"},
      {"map --op gemm --format yaml", "--format"},
      {"map --op gemm --hw-dir /nonexistent", "hardware-abstraction directory '/nonexistent' does not exist"},
      {"hw show wmma_fp8", "unknown hardware abstraction"},
      {"frobnicate", "unknown command 'frobnicate'\n  hint: commands are: map, hw, ops, knobs, run, import, tune, replay, logs, export, version"},
  };
  for (const auto& c : cases) {
    const CliRun r = expect_refused(c);
    if (c.args.rfind("map --op gemm --", 0) != 0 && c.args.rfind("frob", 0) != 0) EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

/// The options a hint names (`--name`), each with the command it belongs to: the one that printed
/// it, or the one a quoted 'tmap COMMAND ...' in the hint names.
std::vector<std::pair<std::string, std::string>> hinted_options(const std::string& hint, const std::string& command) {
  static const std::set<std::string> groups = {"hw", "ops", "logs"};
  std::vector<std::pair<std::string, std::string>> out;
  auto scan = [&](const std::string& text, const std::string& cmd) {
    for (std::size_t i = text.find("--"); i != std::string::npos; i = text.find("--", i + 2)) {
      std::size_t e = i + 2;
      while (e < text.size() && (std::islower(static_cast<unsigned char>(text[e])) || std::isdigit(static_cast<unsigned char>(text[e])) || text[e] == '-')) ++e;
      if (e > i + 2) out.emplace_back(cmd, text.substr(i, e - i));
    }
  };
  std::string rest;
  for (std::size_t i = 0; i < hint.size();) {
    if (hint.compare(i, 6, "'tmap ") == 0) {
      const std::size_t end = hint.find('\'', i + 1);
      std::istringstream words(hint.substr(i + 6, end - i - 6));
      std::string cmd, sub;
      words >> cmd;
      if (groups.count(cmd) && words >> sub && sub.rfind("--", 0) != 0) cmd += " " + sub;
      scan(hint.substr(i, end - i), cmd.rfind("--", 0) == 0 ? "" : cmd);
      i = end == std::string::npos ? hint.size() : end + 1;
    } else {
      rest += hint[i++];
    }
  }
  scan(rest, command);
  return out;
}

// Every user error we know of ends with status 2 and a message for a person: never "a bug in
// tmap", a parser's internals or a raw exception; and every option a hint names exists in the
// command it names it for.
TEST(Cli, UserErrorsAreNotBugsAndTheirHintsNameRealOptions) {
  ScratchDir dir("tmap_user_errors");
  auto write = [&](const std::string& name, const std::string& text) { std::ofstream(dir / name) << text; };
  write("bad.json", R"({"name": "x"})");
  write("nj.json", "not json");
  write("dup.json", R"({"name": "g", "name": "h", "compute": "C[m, n] += A[m, k] * B[k, n]"})");
  write("empty.jsonl", "");
  write("junk.jsonl", "{\"x\": 1}\n");
  write("table.json", R"({"format": "tmap-workloads", "workloads": []})");
  std::filesystem::create_directories(dir.path() / "evil");
  {
    std::ifstream in(std::string(TMAP_SOURCE_DIR) + "/hw_abstractions/wmma_fp16_fp32.json");
    std::stringstream text;
    text << in.rdbuf();
    std::string j = text.str();
    j.replace(j.find("\"wmma_fp16_fp32\""), 16, "\"evil name\"");
    std::ofstream(dir.path() / "evil" / "evil.json") << j;
  }
  const std::string c = " --arch sm_90 --compile-only";
  std::vector<std::string> cases = {
      "run --op gemm" + c + " --log x.jsonl", "run --op gemm" + c + " --match 99", "run --op gemm" + c + " --match 1",
      "run --op gemm" + c + " --match 0 --layout nnn", "run --op gemm" + c + " --mapping 999",
      "run --op gemm" + c + " --layout zzz", "run --op gemm" + c + " --params '{\"block_m\": 7}'",
      "run --op gemm" + c + " --params '{\"block_m\": 64, \"block_m\": 128}'", "run --op gemm" + c + " --params nope",
      "run --op gemm" + c + " --params '{\"frob\": 1}'", "run --op gemm --arch sm_99 --compile-only",
      "run --op gemm --arch sm_1000 --compile-only", "run --op gemm --arch gpu --compile-only",
      "run --op gemm --arch sm_75 --compile-only --hw wgmma_fp16_fp32", "run --op gemm" + c + " --set M=0",
      "run --op gemm" + c + " --set M=1 --set M=2", "run --op gemm" + c + " --set M=99999999999999999999",
      "run --op gemm" + c + " --emit-cuda /dev/null", "run --op gemm" + c + " --sweep frob=1",
      "run --op gemm" + c + " --sweep block_m", "run --op gemm" + c + " --sweep block_m=48",
      "run --op gemm" + c + " --sweep block_m=64 --emit-cuda x.cu", "run bad.json" + c, "run nj.json" + c, "run dup.json" + c,
      "map", "map --op gemm bad.json", "map --op nope", "map /nonexistent.json", "map --op gemm --set M=x",
      "map --op gemm --set Q=1", "map --op gemm --set M", "map --op gemm --hw nope", "map --op gemm --enumerate some",
      "map --op gemm --format yaml", "map --op gemm --hw-dir /nonexistent", "map --op gemm --hw-dir bad.json",
      "map --op gemm --hw-dir evil", "map /dev/zero", "hw show nope", "hw list --hw-dir /nonexistent", "ops show nope",
      "tune --op gemm --trials 0", "tune --op gemm --time-budget -1", "tune --op gemm --measure-ms -3",
      "tune --op gemm --trials-per-batch 2000", "tune --op gemm --trials x", "tune --op gemm --measure model --batch 4000",
      "tune --table table.json --batch 4", "tune --op gemm --measure nope", "tune --table /nonexistent.json",
      "tune --table bad.json --measure model", "tune --op gemm --table bad.json", "tune --model /nonexistent.onnx",
      "tune --op gemm --measure model --log /dev/null", "tune --op gemm --measure model --log evil",
      "replay /nonexistent.jsonl", "replay empty.jsonl", "replay junk.jsonl", "replay evil",
      "logs list /nonexistent.jsonl", "logs prune junk.jsonl", "logs prune junk.jsonl --out /dev/null",
      "export /nonexistent.jsonl --out exp", "export junk.jsonl --out exp", "export empty.jsonl",
      "import /nonexistent.onnx", "import bad.json", "import bad.json --batch 0", "knobs --format nope",
      "knobs nope", "frobnicate", "version --bogus"};
  if (!tmap::testing::have_gpu())
    for (const char* gpu_only : {"run --op gemm", "run --op gemm --compile-only", "tune --op gemm", "tune --op gemm --arch sm_90"})
      cases.push_back(gpu_only);
  static const std::set<std::string> commands = {"map", "hw", "ops", "knobs", "run", "import", "tune", "replay", "logs", "export", "version"};
  std::map<std::string, std::string> helps;  // command -> its --help
  auto has_option = [&](const std::string& command, const std::string& option) {
    auto [it, fresh] = helps.try_emplace(command);
    if (fresh) it->second = tmap(command + (command.empty() ? "" : " ") + "--help").out;
    for (std::size_t at = it->second.find(option); at != std::string::npos; at = it->second.find(option, at + 1)) {
      const char after = at + option.size() < it->second.size() ? it->second[at + option.size()] : ' ';
      if (!std::islower(static_cast<unsigned char>(after)) && after != '-') return true;
    }
    return false;
  };
  int hinted = 0;  // options named by hints, all checked
  for (const std::string& args : cases) {
    SCOPED_TRACE(args);
    const CliRun r = tmap(args, dir.str());
    EXPECT_EQ(r.code, 2) << r.err;
    for (const char* internal : {"bug in tmap", "not in range", "terminate called", "what()", "json.exception", "std::"})
      EXPECT_EQ(r.err.find(internal), std::string::npos) << internal << " in:\n" << r.err;
    std::istringstream words(args);
    std::string command, sub;
    words >> command;
    if (!commands.count(command)) command.clear();
    else if ((command == "hw" || command == "ops" || command == "logs") && words >> sub) command += " " + sub;
    std::istringstream lines(r.err);
    for (std::string line; std::getline(lines, line);)
      if (const std::size_t h = line.find("hint: "); h != std::string::npos)
        for (const auto& [cmd, option] : hinted_options(line.substr(h + 6), command)) {
          EXPECT_TRUE(has_option(cmd, option)) << "'tmap " << cmd << "' has no " << option << "; hint: " << line;
          ++hinted;
        }
  }
  EXPECT_GE(hinted, 20);
  EXPECT_TRUE(has_option("run", "--compile-only"));
  EXPECT_FALSE(has_option("run", "--compile")) << "an option's prefix is not the option";
  EXPECT_FALSE(has_option("map", "--compile-only"));
}

// Number options say their range as a person reads it, not the parser's internals; the tuner's
// trials per batch has its own name, and its old spelling still works, with a warning.
TEST(Cli, NumberOptionsSayTheirRangeAndTheBatchHasOneMeaning) {
  const BadCase cases[] = {
      {"tune --op gemm --trials 0", "--trials: must be at least 1 (got 0)"},
      {"tune --op gemm --time-budget -1", "--time-budget: must be at least 0 (got -1)"},
      {"tune --op gemm --measure-ms -3", "--measure-ms: must be at least 1 (got -3)"},
      {"tune --op gemm --trials-per-batch 2000", "--trials-per-batch: must be 1 to 1024 (got 2000)"},
      {"tune --op gemm --trials x", "--trials: must be a number (got x)"},
      {"tune --op gemm --batch 4000 --measure model", "--batch: error: must be at most 1024 trials per batch (got 4000)"},
      {"tune --table t.json --batch 4", "--batch: error: only applies to --model"},
      {"tune --op gemm --objective geomean", "--objective: error: only applies to --model or --table"},
      {"tune --table t.json --objective mean", "--objective: mean not in {total,geomean}"},
  };
  for (const auto& c : cases) EXPECT_EQ(expect_refused(c).err.find("not in range"), std::string::npos) << c.args;
  ScratchDir dir("tmap_batch_spelling");
  CliRun old = tmap("tune --op gemm --measure model --trials 2 --batch 2 --log " + (dir / "g.jsonl"));
  EXPECT_EQ(old.code, 0) << old.err;
  EXPECT_NE(old.err.find("deprecated spelling: use --trials-per-batch"), std::string::npos) << old.err;
  CliRun now = tmap("tune --op gemm --measure model --trials 2 --trials-per-batch 2 --log " + (dir / "g.jsonl"));
  EXPECT_EQ(now.code, 0) << now.err;
  EXPECT_EQ(now.err.find("deprecated"), std::string::npos) << now.err;
}

// --dtype chooses the inputs' dtype on every command: the abstractions that match follow it,
// and the kernels tuned for it compile.
// A range of sizes on the command line: what map says, a kernel of the range compiled, what needs a
// GPU refused without one, and the shipped decode log listed and replayed (compiled) by size.
TEST(Cli, ARangeOfSizesIsMappedCompiledListedAndDispatched) {
  CliRun map = tmap("map --op gemm_nt --set M=1..256 --set N=512 --set K=512");
  ASSERT_EQ(map.code, 0) << map.err;
  EXPECT_NE(map.out.find("spatial: m=1..256 n=512"), std::string::npos) << map.out.substr(0, 500);
  EXPECT_NE(map.out.find("'m' takes its size at run time (M)"), std::string::npos) << map.out.substr(0, 500);
  CliRun run = tmap("run --op gemm_nt --set M=1..256 --set N=512 --set K=512 --size 57 --arch sm_90 --compile-only");
  EXPECT_EQ(run.code, 0) << run.err;
  CliRun outside = tmap("run --op gemm_nt --set M=1..256 --size 300 --arch sm_90 --compile-only");
  EXPECT_EQ(outside.code, 2);
  EXPECT_NE(outside.err.find("300 is outside the range M=1..256"), std::string::npos) << outside.err;
  CliRun fixed = tmap("run --op gemm_nt --size 3 --arch sm_90 --compile-only");
  EXPECT_EQ(fixed.code, 2);
  EXPECT_NE(fixed.err.find("only a range of sizes"), std::string::npos) << fixed.err;
  CliRun model = tmap("tune --op gemm_nt --set M=1..64 --measure model");
  EXPECT_EQ(model.code, 2);
  EXPECT_NE(model.err.find("a range of sizes is tuned by measuring its kernels"), std::string::npos) << model.err;
  for (const char* option : {"--max-buckets 3", "--loss 0.1", "--sizes 8,16"}) {
    CliRun one_shape = tmap(std::string("tune --op gemm_nt --measure model ") + option);
    EXPECT_EQ(one_shape.code, 2) << option;
    EXPECT_NE(one_shape.err.find(": error: applies to a range of sizes, and gemm_nt has one shape"), std::string::npos)
        << one_shape.err;
  }
  const std::string log = std::string(TMAP_SOURCE_DIR) + "/logs/h200_decode_gemm.jsonl";
  CliRun list = tmap("logs list " + log);
  ASSERT_EQ(list.code, 0) << list.err;
  EXPECT_NE(list.out.find("qkv                         4        4          -         -  range M=1..256, 4 kernel(s) by size:"),
            std::string::npos) << list.out;
  EXPECT_NE(list.out.find("-  its own tuning's best at 57: wgmma_bf16_fp32"), std::string::npos) << list.out;
  EXPECT_EQ(list.out.find("(no correct measurement)"), std::string::npos) << list.out;  // the samples are the ranges
  const std::string qkv = " --op gemm_nt --set N=6144 --set K=4096 --dtype bfloat16 --out-dtype bfloat16 --arch sm_90";
  CliRun between = tmap("replay " + log + qkv + " --set M=50");
  EXPECT_EQ(between.code, 0) << between.err;
  EXPECT_NE(between.out.find("qkv@M=50"), std::string::npos) << "the bucket of 33..128 serves it:\n" << between.out;
  CliRun beyond = tmap("replay " + log + qkv + " --set M=300");
  EXPECT_EQ(beyond.code, 2);
  EXPECT_NE(beyond.err.find("the log's range M=1..256 of this computation does not take its size"), std::string::npos)
      << beyond.err;
}

// A workload table may hold ranges of sizes: ranked without a GPU, its workloads of one shape are
// tuned and its ranges left out (they are tuned by measuring). (tmap_bench's rows of a range
// table, one per size through its bucket: tests/bench_check.sh on the decode table.)
TEST(Cli, ATableWithARangeOfSizesIsRankedWithoutIt) {
  ScratchDir dir("tmap_table_ranges");
  std::ofstream(dir / "t.json") << R"({"format": "tmap-workloads/1", "workloads": [
      {"name": "qkv", "op": "gemm_nt", "params": {"M": "1..64", "N": 256, "K": 128}, "sizes": [1, 7, 64]},
      {"name": "o", "op": "gemm_nt", "params": {"M": 16, "N": 256, "K": 256}}]})";
  CliRun tune = tmap("tune --table " + (dir / "t.json") + " --measure model --trials 8 --format json --log " +
                     (dir / "t.jsonl"));
  ASSERT_EQ(tune.code, 0) << tune.err;
  EXPECT_NE(tune.err.find("workload 'qkv' is a range of sizes, tuned by measuring its kernels"), std::string::npos)
      << tune.err;
  const nlohmann::json summary = nlohmann::json::parse(tune.out);
  ASSERT_EQ(summary["workloads"].size(), 1u) << tune.out.substr(0, 2000);
  EXPECT_EQ(summary["workloads"][0]["name"], "o");
  EXPECT_TRUE(summary["ranges"].empty());
}

TEST(Cli, TheInputDtypeIsAnOption) {
  CliRun map = tmap("map --op gemm --set M=256 --set N=256 --set K=256 --dtype bfloat16 --format json");
  ASSERT_EQ(map.code, 0) << map.err;
  std::set<std::string> matched;
  const nlohmann::json mapped = nlohmann::json::parse(map.out);
  for (const auto& m : mapped["matches"]) matched.insert(m["hw_abs"].get<std::string>());
  EXPECT_TRUE(matched.count("wgmma_bf16_fp32")) << map.out.substr(0, 2000);
  EXPECT_FALSE(matched.count("wgmma_fp16_fp32")) << "float16 abstractions do not take bfloat16 data";
  EXPECT_NE(map.out.find("inputs A (bfloat16) and B (bfloat16); operands A (float16)"), std::string::npos)
      << "the rejection says why";
  ScratchDir dir("tmap_input_dtype");
  CliRun tune = tmap("tune --op gemm --set M=256 --set N=256 --set K=256 --dtype int8 --measure model --trials 4 "
                     "--log " + (dir / "i8.jsonl"));
  ASSERT_EQ(tune.code, 0) << tune.err;
  const tmap::LogContents log = tmap::read_log(dir / "i8.jsonl");
  ASSERT_FALSE(log.records.empty());
  for (const tmap::TuneRecord& r : log.records) {
    EXPECT_EQ(r.result.status, "unmeasured") << r.result.error;
    EXPECT_NE(r.candidate.hw_abs.find("int8_int32"), std::string::npos) << r.candidate.hw_abs;
  }
  CliRun bad = tmap("run --op gemm --dtype tf32 --compile-only");
  EXPECT_EQ(bad.code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--dtype:1:1: error: tfloat32 is a precision of the Tensor Cores"), std::string::npos) << bad.err;
  // 8-bit floats run on Hopper's wgmma alone, K-major (gemm_nt), and are never stored.
  CliRun fp8 = tmap("tune --op gemm_nt --set M=256 --set N=256 --set K=256 --dtype e4m3 --out-dtype float16 "
                    "--epilogue 'Y[m, n] = C[m, n] * scale[0]' --measure model --trials 4 --log " + (dir / "f8.jsonl"));
  ASSERT_EQ(fp8.code, 0) << fp8.err;
  const tmap::LogContents f8 = tmap::read_log(dir / "f8.jsonl");
  ASSERT_FALSE(f8.records.empty());
  for (const tmap::TuneRecord& r : f8.records) EXPECT_EQ(r.candidate.hw_abs, "wgmma_e4m3_fp32");
  CliRun stored = tmap("run --op gemm_nt --dtype e5m2 --out-dtype float8_e5m2 --compile-only");
  EXPECT_EQ(stored.code, 2) << stored.err;
  EXPECT_NE(stored.err.find("--out-dtype:1:1: error: output 'C' of dtype float8_e5m2: tmap's kernels read 8-bit floats"),
            std::string::npos)
      << stored.err;
}

// --time-budget bounds a run ranked by the analytic model as it bounds a measured one: conv2d's
// 1477 mappings and 200 trials take far longer than the budget, which ends the run.
TEST(Cli, TimeBudgetEndsARunRankedByTheModel) {
  ScratchDir dir("tmap_model_budget");
  CliRun r = tmap("tune --op conv2d --measure model --trials 200 --time-budget 1 --log " + (dir / "c.jsonl"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("stopped: time budget reached"), std::string::npos) << r.out;
  std::ifstream log(dir / "c.jsonl");
  int records = 0;
  for (std::string line; std::getline(log, line);) ++records;
  EXPECT_GT(records, 0);
  EXPECT_LT(records, 200) << "the budget ended the compiling";
}

// A subcommand's options may come before it, as the README says.
TEST(Cli, OptionsGoBeforeOrAfterTheSubcommand) {
  for (const auto& [before, after] : std::vector<std::pair<std::string, std::string>>{
           {"--format json hw list", "hw list --format json"},
           {"--op gemm --set M=32 map", "map --op gemm --set M=32"},
           {"-q --format json ops list", "ops list -q --format json"},
           {"--enumerate all --op gemm map", "map --op gemm --enumerate all"}}) {
    SCOPED_TRACE(before);
    CliRun a = tmap(before), b = tmap(after);
    EXPECT_EQ(a.code, b.code) << a.err;
    EXPECT_EQ(a.out, b.out);
    EXPECT_EQ(a.code, 0) << a.err;
  }
}

// Without --hw, tmap run picks among the abstractions the target architecture has; an
// architecture NVRTC cannot compile for is named, with those it can, and never blamed on tmap.
TEST(Cli, TheTargetArchitectureChoosesTheAbstraction) {
  const std::vector<int> archs = supported_archs();
  if (std::find(archs.begin(), archs.end(), 75) != archs.end()) {
    CliRun r = tmap("run --op gemm --arch sm_75 --compile-only");
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.err.find("--params"), std::string::npos) << r.err;
  }
  for (const char* arch : {"sm_99", "sm_1000", "sm_00"}) {
    CliRun r = tmap(std::string("run --op gemm --compile-only --arch ") + arch);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("is not one NVRTC compiles for"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("bug in tmap"), std::string::npos) << r.err;
  }
}

TEST(Cli, RunCompilesWithoutAGpu) {
  std::string cu = std::filesystem::temp_directory_path() / ("tmap_cli_" + std::to_string(::getpid()) + ".cu");
  CliRun r = tmap("run --op conv2d_nhwc --set N=2 --arch sm_80 --compile-only --layout ntn --shape 32x8x16 --mapping 40 "
                  "--params '{\"stages\": 1}' --emit-cuda " + cu + " --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["mapping"], 40);
  EXPECT_EQ(j["layout"], "ntn");
  EXPECT_EQ(j["arch"], "sm_80");
  EXPECT_EQ(j["params"]["stages"], 1);
  EXPECT_FALSE(j.contains("median_us"));
  std::ifstream in(cu);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_NE(ss.str().find("extern \"C\" __global__"), std::string::npos);
  EXPECT_NE(ss.str().find("wmma::mma_sync"), std::string::npos);
  std::filesystem::remove(cu);

  // --match reaches the transposed product (filters as A, the image as B), which --layout alone
  // cannot tell from the written order of the same layout.
  CliRun swapped = tmap("run --op conv2d_nhwc --set N=2 --set C=64 --hw wgmma_fp16_fp32 --arch sm_90 --compile-only "
                        "--match 5 --params '{\"producer\": 1}' --format json");
  ASSERT_EQ(swapped.code, 0) << swapped.err;
  nlohmann::json s = nlohmann::json::parse(swapped.out);
  EXPECT_EQ(s["layout"], "ntn");
  EXPECT_EQ(s["operands"]["A"], "Wt");
  EXPECT_EQ(s["operands"]["B"], "I");
  EXPECT_EQ(s["params"]["producer"], 1);

  const BadCase cases[] = {
      {"run --op gemm --arch sm_90 --compile-only --hw wmma_fp16_fp32 --match 99", "no match 99 of 'gemm'"},
      {"run --op gemm --arch sm_90 --compile-only --hw wmma_fp16_fp32 --match 0 --layout nnn",
       "--match picks the layout and shape itself"},
      {"run --op gemm --arch sm_90 --compile-only --match 1", "--match 1 numbers the matches of one abstraction"},
      {"run --op gemm --arch sm_90 --compile-only --log x.jsonl", "a compile-only run measures nothing to log"},
      {"run --op gemm --arch sm_90 --compile-only --params '{\"block_m\": 48}'", "the block tile is not a multiple of the warp tile"},
      {"run --op gemm --arch sm_90 --compile-only --params '{\"tile\": 4}'", "unknown schedule parameter \"tile\""},
      {"run --op gemm --arch sm_90 --compile-only --params '{oops'", "invalid JSON"},
      {"run --op gemm --arch hopper --compile-only", "architecture 'hopper' is not of the form sm_XY"},
      {"run --op gemm --arch sm_90 --compile-only --mapping 7", "no mapping 7 for this match"},
      {"run --op gemm --arch sm_90 --compile-only --layout xyz", "has no layout 'xyz'"},
      {"run --op gemm --set K=64 --hw wmma_int8_int32 --arch sm_90 --compile-only", "matches no abstraction 'wmma_int8_int32'"},
  };
  for (const auto& c : cases) expect_refused(c);
}

TEST(Cli, HwOpsAndVersion) {
  CliRun list = tmap("hw list");
  ASSERT_EQ(list.code, 0) << list.err;
  for (const char* name : {"wmma_fp16_fp32", "wmma_fp16_fp16", "wmma_bf16_fp32", "wmma_tf32_fp32", "wmma_int8_int32",
                           "wmma_fp64_fp64", "wmma_int4_int32", "mma_sync_fp16_fp32", "mma_sync_bf16_fp32",
                           "mma_sync_tf32_fp32", "mma_sync_int8_int32"})
    EXPECT_NE(list.out.find(name), std::string::npos) << name;
  CliRun json = tmap("hw list --format json");
  ASSERT_EQ(json.code, 0);
  EXPECT_EQ(nlohmann::json::parse(json.out).size(), shipped().size());
  CliRun show = tmap("hw show wmma_tf32_fp32");
  ASSERT_EQ(show.code, 0);
  nlohmann::json hw = nlohmann::json::parse(show.out);
  EXPECT_EQ(hw["compute"]["shapes"], nlohmann::json::parse("[[16, 16, 8]]"));
  EXPECT_EQ(hw["compute"]["dtypes"]["A"], "tfloat32");
  CliRun ops = tmap("ops list");
  ASSERT_EQ(ops.code, 0);
  EXPECT_NE(ops.out.find("conv2d_nhwc"), std::string::npos);
  CliRun version = tmap("version");
  ASSERT_EQ(version.code, 0) << version.err;  // starts without a GPU driver too
  EXPECT_NE(version.out.find("NVRTC"), std::string::npos);
}

TEST(Cli, EveryShapeTunesAndNothingToTuneSaysWhyPerAbstraction) {
  const std::string dir = std::filesystem::temp_directory_path() / ("tmap_cli_shapes_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  // Issue #13's cases: an axis below the intrinsic (m = 1), a GEMM below one tile, depthwise
  // convolution and a classifier as a 1x1 convolution all get ranked kernels that compile.
  for (const std::string args : {"--op gemm --set M=1 --set N=4096 --set K=4096", "--op gemm --set M=3 --set N=5 --set K=7",
                                 "--op depthwise_conv2d",
                                 "--op conv2d_nhwc --set N=1 --set C=1000 --set H=1 --set W=1 --set K=1000 --set R=1 "
                                 "--set S=1 --set pad=0"}) {
    CliRun r = tmap("tune " + args + " --measure model --trials 2 --log " + dir + "/t.jsonl");
    EXPECT_EQ(r.code, 0) << args << "\n" << r.err;
    EXPECT_NE(r.out.find("best: "), std::string::npos) << args << "\n" << r.out;
  }
  // A product of three inputs matches nothing: every abstraction is listed with its reason, one
  // per line, the ones too new for the target among them.
  const std::string three = dir + "/three.json";
  std::ofstream(three) << R"({"name": "triple", "compute": "C[m, n] += A[m, k] * B[k, n] * S[k]",
    "params": {"M": 64, "N": 64, "K": 64},
    "tensors": {"A": {"shape": ["M", "K"], "dtype": "float16"}, "B": {"shape": ["K", "N"], "dtype": "float16"},
                "S": {"shape": ["K"], "dtype": "float16"}, "C": {"shape": ["M", "N"], "dtype": "float32"}}})";
  CliRun none = tmap("tune " + three + " --measure model --arch sm_80 --log " + dir + "/t.jsonl");
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("'triple' has nothing to tune on sm_80:"), std::string::npos) << none.err;
  for (const auto& hw : shipped()) {
    const std::string line = "\n  - " + hw.name + ": ";
    EXPECT_NE(none.err.find(line), std::string::npos) << hw.name << "\n" << none.err;
  }
  EXPECT_NE(none.err.find("wgmma_fp16_fp32: needs sm_90 or newer, the target is sm_80"), std::string::npos) << none.err;
  EXPECT_NE(none.err.find("simt_fp16_fp32: the compute is not a product of exactly two inputs"), std::string::npos)
      << none.err;
  std::filesystem::remove_all(dir);
}

// `tmap run --log` (GPU): the verified run is appended as a tuner trial of the mapping asked for,
// which `tmap logs best` and `tmap replay` read back as the workload's best.
TEST(Cli, RunLogAppendsATrialThatReplayReads) {
  if (!tmap::testing::have_gpu()) GTEST_SKIP() << "tmap run --log measures on a GPU";
  const std::string dir = std::filesystem::temp_directory_path() / ("tmap_cli_runlog_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string log = dir + "/run.jsonl", op = "--op gemm --set M=192 --set N=128 --set K=256";
  CliRun run = tmap("run " + op + " --hw mma_sync_fp16_fp32 --mapping 0 --params '{\"block_m\": 64}' --log " + log +
                    " --format json");
  ASSERT_EQ(run.code, 0) << run.err;
  const nlohmann::json result = nlohmann::json::parse(run.out);
  EXPECT_EQ(result["status"], "ok");
  EXPECT_EQ(result["log"], log);
  std::ifstream in(log);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  const nlohmann::json rec = nlohmann::json::parse(line);
  EXPECT_FALSE(std::getline(in, line)) << "one record";
  EXPECT_EQ(rec["result"]["status"], "ok");
  EXPECT_NEAR(rec["result"]["median_us"].get<double>(), result["median_us"].get<double>(), 1e-9);
  EXPECT_LT(rec["result"]["rel_l2"].get<double>(), 1e-2);
  EXPECT_EQ(rec["candidate"]["hw_abs"], "mma_sync_fp16_fp32");
  EXPECT_EQ(rec["candidate"]["mapping"]["id"], 0);
  EXPECT_EQ(rec["candidate"]["params"]["block_m"], 64);
  EXPECT_DOUBLE_EQ(rec["workload"]["flops"].get<double>(), 2.0 * 192 * 128 * 256);
  CliRun replay = tmap("replay " + log + " --verify");
  EXPECT_EQ(replay.code, 0) << replay.err;
  EXPECT_NE(replay.out.find("mma_sync_fp16_fp32"), std::string::npos) << replay.out;
  std::filesystem::remove_all(dir);
}

// A sweep runs every combination of the swept knobs' values on the requested schedule: the ones
// the family refuses are listed with their first reason, the others compiled (and run on a GPU).
TEST(Cli, RunSweepsEveryCombinationOfKnobValues) {
  CliRun sweep = tmap("run --op gemm --set M=192 --set N=128 --set K=256 --hw mma_sync_fp16_fp32 --mapping 0 "
                      "--arch sm_90 --compile-only --params '{\"warp_n\": 32}' --sweep block_m=64,128 "
                      "--sweep stages=2,3,9 --format json");
  ASSERT_EQ(sweep.code, 0) << sweep.err;
  const nlohmann::json j = nlohmann::json::parse(sweep.out);
  ASSERT_EQ(j["runs"].size(), 4u);
  ASSERT_EQ(j["refused"].size(), 2u);
  const int expected[4][2] = {{64, 2}, {64, 3}, {128, 2}, {128, 3}};  // the first axis slowest
  for (int i = 0; i < 4; ++i) {
    const nlohmann::json& r = j["runs"][i];
    EXPECT_EQ(r["sweep"]["block_m"], expected[i][0]);
    EXPECT_EQ(r["sweep"]["stages"], expected[i][1]);
    EXPECT_EQ(r["params"]["block_m"], expected[i][0]);
    EXPECT_EQ(r["params"]["stages"], expected[i][1]);
    EXPECT_EQ(r["params"]["warp_n"], 32) << "--params is the schedule the sweep changes";
    EXPECT_GT(r["shared_bytes"].get<int>(), 0);
    EXPECT_FALSE(r.contains("median_us"));
  }
  for (const nlohmann::json& r : j["refused"]) {
    EXPECT_EQ(r["sweep"]["stages"], 9);
    EXPECT_NE(r["reason"].get<std::string>().find("stages = 9"), std::string::npos) << r.dump();
  }
  CliRun text = tmap("run --op gemm --hw mma_sync_fp16_fp32 --arch sm_90 --compile-only --sweep block_m=64,128 "
                     "--sweep stages=2,9");
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("sweep of 4 combination(s): 2 refused, 2 compiled"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("refused block_m=64 stages=9: "), std::string::npos) << text.out;

  // Knobs joined by '+' take each value together: a warp tile and the block of one warp.
  CliRun tied = tmap("run --op gemm --hw mma_sync_fp16_fp32 --arch sm_90 --compile-only "
                     "--sweep warp_n+block_n=32,64 --format json");
  ASSERT_EQ(tied.code, 0) << tied.err;
  const nlohmann::json t = nlohmann::json::parse(tied.out);
  ASSERT_EQ(t["runs"].size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(t["runs"][i]["sweep"]["warp_n+block_n"], 32 << i);
    EXPECT_EQ(t["runs"][i]["params"]["warp_n"], 32 << i);
    EXPECT_EQ(t["runs"][i]["params"]["block_n"], 32 << i);
  }

  const BadCase cases[] = {
      {"--sweep frob=1", "'frob' is not a knob"},
      {"--sweep warp_n+=64", "'warp_n+' names no knob"},
      {"--sweep warp_n+block_n=64 --sweep block_n=64", "knob block_n is swept twice"},
      {"--sweep block_m", "'block_m' is not KNOB=V1,V2,..."},
      {"--sweep block_m=64,x", "'x' in 'block_m=64,x' is not an integer"},
      {"--sweep block_m=64 --sweep block_m=128", "knob block_m is swept twice"},
      {"--sweep stages=99", "stages = 99 is outside the knob's range 1-16"},
      {"--sweep block_m=48", "none of the 1 combination(s) is a valid schedule"},
      {"--sweep block_m=64 --emit-cuda sweep.cu", "a sweep runs many kernels"},
      {"--sweep raster=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32 "
       "--sweep split_k=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16 --sweep stages=1,2,3,4,5,6,7,8,9",
       "more than 4096 combinations"},
  };
  for (const BadCase& c : cases) {
    CliRun r = tmap("run --op gemm --hw mma_sync_fp16_fp32 --arch sm_90 --compile-only " + c.args);
    EXPECT_EQ(r.code, 2) << c.args;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\n" << r.err;
  }
}

TEST(Cli, RunSweepMeasuresEachCombinationFastestFirst) {
  if (!tmap::testing::have_gpu()) GTEST_SKIP() << "a sweep measures on a GPU";
  CliRun sweep = tmap("run --op gemm --set M=192 --set N=128 --set K=256 --hw mma_sync_fp16_fp32 --mapping 0 "
                      "--sweep block_m=64,128 --sweep stages=2,3 --verify --format json");
  ASSERT_EQ(sweep.code, 0) << sweep.err;
  const nlohmann::json runs = nlohmann::json::parse(sweep.out)["runs"];
  ASSERT_EQ(runs.size(), 4u);
  for (std::size_t i = 0; i < runs.size(); ++i) {
    EXPECT_EQ(runs[i]["status"], "ok") << runs[i].dump();
    EXPECT_LT(runs[i]["rel_l2"].get<double>(), 1e-2);
    if (i > 0) EXPECT_LE(runs[i - 1]["median_us"].get<double>(), runs[i]["median_us"].get<double>());
  }
}

TEST(Cli, TuneReplayAndLogsWithoutMeasuring) {
  const std::string dir = std::filesystem::temp_directory_path() / ("tmap_cli_tune_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const std::string log = dir + "/gemm.jsonl";
  if (!tmap::testing::have_gpu()) {  // without a GPU: said plainly, with the way out
    CliRun no_gpu = tmap("tune --op gemm --set M=64 --set N=64 --set K=64");
    EXPECT_EQ(no_gpu.code, 2);
    EXPECT_NE(no_gpu.err.find("no GPU to measure on"), std::string::npos) << no_gpu.err;
    EXPECT_NE(no_gpu.err.find("--measure model"), std::string::npos) << no_gpu.err;
  }
  // Ranked for sm_80, so every record replays there (a random sm_90 pick could need more shared
  // memory than sm_80 has, which replay rightly refuses).
  CliRun model = tmap("tune --op gemm --set M=64 --set N=64 --set K=64 --measure model --trials 3 --arch sm_80 --log " +
                      log);
  ASSERT_EQ(model.code, 0) << model.err;
  EXPECT_NE(model.out.find("3 trials ranked and compiled"), std::string::npos) << model.out;
  EXPECT_NE(model.out.find("estimated"), std::string::npos) << model.out;
  std::vector<std::string> lines;
  {
    std::ifstream in(log);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  ASSERT_EQ(lines.size(), 3u);
  CliRun refused = tmap("replay " + log);
  EXPECT_EQ(refused.code, 2);
  EXPECT_NE(refused.err.find("--allow-unmeasured"), std::string::npos) << refused.err;
  CliRun allowed = tmap("replay " + log + " --allow-unmeasured --arch sm_80 --emit-cuda " + dir + "/cuda");
  EXPECT_EQ(allowed.code, 0) << allowed.err;
  EXPECT_FALSE(std::filesystem::is_empty(dir + "/cuda"));
  // Two GEMM shapes: their kernels may share a name, and one source must not overwrite the other.
  const std::string two = dir + "/two.jsonl";
  for (const char* m : {"64", "128"})
    ASSERT_EQ(tmap(std::string("tune --op gemm --set M=") + m +
                   " --set N=64 --set K=64 --measure model --trials 2 --arch sm_80 --log " + two)
                  .code,
              0);
  ASSERT_EQ(tmap("replay " + two + " --allow-unmeasured --arch sm_80 --emit-cuda " + dir + "/two").code, 0);
  std::set<std::string> keys;
  for (const auto& f : std::filesystem::directory_iterator(dir + "/two")) {
    const std::string name = f.path().filename().string();  // KERNEL.WORKLOAD.cu
    const auto dot = name.find('.');
    ASSERT_NE(dot, std::string::npos) << name;
    keys.insert(name.substr(dot + 1, name.size() - dot - 4));
  }
  EXPECT_EQ(keys.size(), 2u) << "one source per workload";

  // A measured record (as a GPU run writes it) and a broken line: list, best and prune.
  nlohmann::json measured = nlohmann::json::parse(lines[1]);
  measured["result"] = {{"status", "ok"}, {"measured", true}, {"median_us", 8.0}, {"times_us", {8.0}}, {"rel_l2", 1e-7}};
  {
    std::ofstream out(log, std::ios::app);
    out << measured.dump() << "\n{\"schema\": 1, \"trunc";
  }
  CliRun list = tmap("logs list " + log);
  ASSERT_EQ(list.code, 0) << list.err;
  EXPECT_NE(list.out.find("8.00"), std::string::npos) << list.out;
  EXPECT_NE(list.err.find(":5: truncated last line"), std::string::npos) << list.err;
  CliRun rank = tmap("logs rank " + log);
  ASSERT_EQ(rank.code, 0) << rank.err;
  EXPECT_NE(rank.out.find("analytic"), std::string::npos) << rank.out;
  EXPECT_NE(rank.out.find(measured["workload"]["key"].get<std::string>()), std::string::npos) << rank.out;
  CliRun best = tmap("logs best " + log);
  ASSERT_EQ(best.code, 0);
  EXPECT_EQ(nlohmann::json::parse(best.out)["result"]["median_us"], 8.0);
  CliRun prune = tmap("logs prune " + log + " --out " + dir + "/best.jsonl");
  ASSERT_EQ(prune.code, 0) << prune.err;
  EXPECT_NE(prune.out.find("kept 1 of 4"), std::string::npos) << prune.out;
  EXPECT_EQ(tmap("logs prune " + log + " --out " + log).code, 2);
  EXPECT_EQ(tmap("replay " + dir + "/none.jsonl").code, 2);
  EXPECT_EQ(tmap("tune --op gemm --trials 0").code, 2);
  std::filesystem::remove_all(dir);
}

}  // namespace
