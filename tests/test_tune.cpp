// The tuner without a GPU: logs (round trip, malformed lines, concurrent appends), workload
// keys, the search space's validity, the XGBoost model, and the search itself against a
// synthetic measurer (resume, failures, budgets). GPU tuning is in test_gpu_tune.cpp.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <thread>

#include "corner_check.h"
#include "record_mutations.h"
#include "test_util.h"
#include "tmap/frontend/compute_loader.h"
#include "tmap/frontend/op_library.h"
#include "tmap/tune/cost_model.h"
#include "tmap/tune/model_tuner.h"
#include "tmap/tune/range_looks.h"
#include "tmap/tune/range_tuner.h"
#include "tmap/tune/shards.h"
#include "tmap/tune/tuner.h"

namespace tmap {
namespace {

using testing::shipped;

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("tmap_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

TuneRecord sample_record(const Compute& c, const std::string& status, double us) {
  SearchSpace space(c, shipped(), Enumeration::kAmos, DeviceLimits::for_arch(90), 90);
  TuneRecord r;
  r.workload = make_workload(c);
  r.target = {"sm_90", "NVIDIA H100 80GB HBM3", "13.0", "13.0", "0.1.0"};
  r.candidate = space.ref(0, default_schedule(space.entries()[0].gemm, DeviceLimits::for_arch(90)));
  r.result.status = status;
  r.result.median_us = us;
  r.result.times_us = {us, us * 1.01, us * 0.99};
  r.result.rel_l2 = 1e-7;
  r.result.estimated_us = 12.5;
  r.result.compile_seconds = 0.3;
  if (status != "ok") r.result.error = "cudaErrorIllegalAddress";
  r.recorded_at = utc_now();
  r.flops = 2.0 * c.iteration_points();
  return r;
}

TEST(TuneLog, TheBestIsTheFastestConfirmedCandidateByItsLatestRecord) {
  Compute c = build_compute(builtin_op("gemm"), parse_param_overrides({"M=256", "N=256", "K=256"}));
  auto record = [&](int block_m, const std::string& status, double us, int rounds) {
    TuneRecord r = sample_record(c, status, us);
    r.candidate.params.block_m = block_m;
    r.result.confirm_rounds = rounds;
    return r;
  };
  // Measured once each: the fastest median wins.
  std::vector<TuneRecord> log = {record(32, "ok", 1.5, 0), record(64, "ok", 1.0, 0), record(128, "ok", 1.2, 0)};
  ASSERT_EQ(best_records(log).size(), 1u);
  EXPECT_EQ(best_records(log)[0]->candidate.params.block_m, 64);
  // Confirmed: 64 ran 1.7 us (its 1.0 was luck), 128 failed its confirmation, 32 ran 1.6 us.
  log.push_back(record(64, "ok", 1.7, 3));
  log.push_back(record(128, "wrong_result", 0, 3));
  log.push_back(record(32, "ok", 1.6, 3));
  const auto best = best_records(log);
  ASSERT_EQ(best.size(), 1u);
  EXPECT_EQ(best[0]->candidate.params.block_m, 32);
  EXPECT_DOUBLE_EQ(best[0]->result.median_us, 1.6);
  EXPECT_EQ(best[0]->result.confirm_rounds, 3);
  // A faster single measurement of another candidate does not displace a confirmed one...
  log.push_back(record(16, "ok", 0.9, 0));
  EXPECT_EQ(best_records(log)[0]->candidate.params.block_m, 32);
  // ...until it is confirmed itself; and the field survives the log.
  log.push_back(record(16, "ok", 0.95, 3));
  EXPECT_EQ(best_records(log)[0]->candidate.params.block_m, 16);
  EXPECT_EQ(record_from_json(to_json(log.back())).result.confirm_rounds, 3);
  EXPECT_EQ(record_from_json(to_json(log[0])).result.confirm_rounds, 0);
  EXPECT_FALSE(to_json(log[0])["result"].contains("confirm_rounds"));
}

TEST(TuneLog, RecordRoundTripsAndRegeneratesItsKernel) {
  Compute c = build_compute(builtin_op("conv2d"));
  TuneRecord r = sample_record(c, "ok", 21.5);
  r.result.gpu = 1;
  r.result.gpu_uuid = "GPU-5a1b0c2d-0000-4e5f-8a9b-0c1d2e3f4a5b";
  const std::string path = temp_path("roundtrip.jsonl");
  std::filesystem::remove(path);
  {
    LogWriter w(path);
    w.append(r);
    w.append(sample_record(c, "runtime_error", 0));
  }
  LogContents back = read_log(path);
  ASSERT_TRUE(back.warnings.empty()) << back.warnings[0];
  ASSERT_EQ(back.records.size(), 2u);
  const TuneRecord& x = back.records[0];
  EXPECT_EQ(to_json(x), to_json(r));
  EXPECT_EQ(x.candidate.params, r.candidate.params);
  EXPECT_EQ(x.result.times_us, r.result.times_us);
  EXPECT_EQ(x.result.gpu, 1);
  EXPECT_EQ(x.result.gpu_uuid, r.result.gpu_uuid);
  EXPECT_EQ(back.records[1].result.gpu, -1) << "no GPU recorded, none read back";
  EXPECT_EQ(back.records[1].result.error, "cudaErrorIllegalAddress");
  EXPECT_FALSE(back.records[1].result.ok());
  {  // A message's lines survive; a control character of another's log reaches no terminal.
    TuneRecord hostile = sample_record(c, "compile_error", 0);
    hostile.result.error = "line 1\n\x1b]0;title\x07";
    hostile.candidate.hw_abs = std::string(300, 'w');  // an identifier of any length is kept whole
    LogWriter(path).append(hostile);
  }
  EXPECT_EQ(read_log(path).records.back().result.error, "line 1\n\\x1B]0;title\\x07");
  EXPECT_EQ(read_log(path).records.back().candidate.hw_abs, std::string(300, 'w'));
  // The record alone regenerates the kernel: the same source as from the original compute.
  Regenerated g = regenerate(x, shipped(), 90);
  SearchSpace space(c, shipped(), Enumeration::kAmos, DeviceLimits::for_arch(90), 90);
  EXPECT_EQ(g.kernel.code, emit_kernel(space.entries()[0].gemm, r.candidate.params).code);
  std::filesystem::remove(path);
}

TEST(TuneLog, MalformedLinesAreSkippedWithTheirLineNumber) {
  Compute c = build_compute(builtin_op("gemm"));
  const std::string good = to_json(sample_record(c, "ok", 10)).dump();
  nlohmann::json other_schema = nlohmann::json::parse(good);
  other_schema["schema"] = 99;
  nlohmann::json missing = nlohmann::json::parse(good);
  missing.erase("candidate");
  nlohmann::json no_time = nlohmann::json::parse(good);
  no_time["result"].erase("median_us");
  nlohmann::json bad_params = nlohmann::json::parse(good);
  bad_params["candidate"]["params"]["tile"] = 3;
  // Numbers that do not fit the fields' integers (a float converted to int was undefined
  // behaviour, found by fuzz_log): a mapping id of 8e23, a shape of 2.5, a block_m of 2^40.
  nlohmann::json huge_id = nlohmann::json::parse(good);
  huge_id["candidate"]["mapping"]["id"] = 8e23;
  nlohmann::json float_shape = nlohmann::json::parse(good);
  float_shape["candidate"]["shape"][0] = 2.5;
  nlohmann::json wide_param = nlohmann::json::parse(good);
  wide_param["candidate"]["params"]["block_m"] = std::int64_t{1} << 40;
  nlohmann::json string_time = nlohmann::json::parse(good);
  string_time["result"]["median_us"] = "fast";
  // The GPU a record was measured on is checked as strictly as the rest.
  nlohmann::json bad_gpu = nlohmann::json::parse(good);
  bad_gpu["result"]["gpu"] = {{"index", -1}, {"uuid", ""}};
  nlohmann::json bad_uuid = nlohmann::json::parse(good);
  bad_uuid["result"]["gpu"] = {{"index", 0}, {"uuid", "GPU-1234\"; rm -rf /"}};
  const std::string path = temp_path("malformed.jsonl");
  {
    std::ofstream out(path);
    out << good << "\n"                         // 1 fine
        << "not json at all\n"                  // 2
        << "\n"                                 // 3 blank: ignored silently
        << "[1, 2, 3]\n"                        // 4 not an object
        << other_schema.dump() << "\n"          // 5
        << missing.dump() << "\n"               // 6
        << no_time.dump() << "\n"               // 7
        << bad_params.dump() << "\n"            // 8
        << good << "\n"                         // 9 fine
        << huge_id.dump() << "\n"              // 10
        << float_shape.dump() << "\n"          // 11
        << wide_param.dump() << "\n"           // 12
        << string_time.dump() << "\n"          // 13
        << bad_gpu.dump() << "\n"              // 14
        << bad_uuid.dump() << "\n"             // 15
        << good.substr(0, good.size() / 2);     // 16 truncated by a crash
  }
  LogContents log = read_log(path);
  EXPECT_EQ(log.records.size(), 2u);
  const std::vector<std::pair<int, std::string>> expected = {
      {2, "not valid JSON"},         {4, "not a JSON object"}, {5, "schema version 99"},
      {6, "missing field \"candidate\""}, {7, "without a median time"}, {8, "unknown schedule parameter"},
      {10, "field \"id\" is not an integer"}, {11, "field \"shape\" is not an integer"},
      {12, "\"block_m\" is out of range"},  {13, "field \"median_us\" has the wrong type"},
      {14, "\"gpu.index\" is not a GPU index"}, {15, "\"gpu.uuid\" is not a GPU UUID"},
      {16, "truncated last line"}};
  ASSERT_EQ(log.warnings.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NE(log.warnings[i].find(path + ":" + std::to_string(expected[i].first) + ":"), std::string::npos)
        << log.warnings[i];
    EXPECT_NE(log.warnings[i].find(expected[i].second), std::string::npos) << log.warnings[i];
  }
  EXPECT_TRUE(read_log(temp_path("missing.jsonl")).records.empty());
  std::filesystem::remove(path);
}

// A record's compute is trusted no further than a compute file: it is rebuilt from its
// statement, tensors and extents, must equal what was recorded and hash to the record's key.
// Each altered record below is refused when the log is read, with its line, before any kernel.
TEST(TuneLog, RecordsWhoseComputeTmapWouldNotBuildAreRefused) {
  const Compute c = build_compute(builtin_op("gemm"), parse_param_overrides({"M=16", "N=64", "K=32"}));
  const nlohmann::json good = to_json(sample_record(c, "ok", 10));
  using Change = std::function<void(nlohmann::json&)>;
  auto compute = [](nlohmann::json& j) -> nlohmann::json& { return j["workload"]["compute"]; };
  const std::vector<std::pair<Change, std::string>> altered = {
      {[&](nlohmann::json& j) { compute(j)["output"]["indices"][0]["constant"] = 5; },
       "index 0 of output 'C' ranges over [5, 20], outside its dimension [0, 15]"},
      {[&](nlohmann::json& j) { compute(j)["tensors"][2]["shape"][0] = 8; }, "extent conflict for iterator 'm'"},
      {[&](nlohmann::json& j) { compute(j)["iterators"][0]["extent"] = -16; }, "extent"},
      {[&](nlohmann::json& j) { compute(j)["iterators"][1]["extent"] = 0; }, "extent"},
      {[&](nlohmann::json& j) { compute(j)["iterators"][2]["kind"] = "spatial"; },
       "differs from the one its statement, tensors and extents build"},
      {[&](nlohmann::json& j) { compute(j)["inputs"][0]["indices"][1]["terms"][0][1] = std::int64_t{1} << 62; },
       "more than 32-bit indexing allows"},
      {[&](nlohmann::json& j) { compute(j)["inputs"][0]["indices"][1]["terms"][0][1] = 1 << 28; },
       "more than 32-bit indexing allows"},
      {[&](nlohmann::json& j) { compute(j)["tensors"][0]["name"] = "A[0]; asm(\"trap;\"); //"; }, "not one tmap builds"},
      {[&](nlohmann::json& j) { compute(j)["iterators"][0]["name"] = "m\n#error injected"; }, "not one tmap builds"},
      {[&](nlohmann::json& j) { compute(j)["update"] = "="; }, "not one tmap builds"},
      {[&](nlohmann::json& j) { j["workload"]["key"] = "0123456789abcdef"; }, "is not its compute's"},
      // A label printed to the terminal by 'tmap logs list' and replay: no escape sequences.
      {[&](nlohmann::json& j) { j["workload"]["name"] = "gemm\x1b]0;owned\x07"; }, "a control character (0x1b at byte 4)"},
  };
  const std::string path = temp_path("altered.jsonl");
  {
    std::ofstream out(path);
    out << good.dump() << "\n";
    for (const auto& [change, why] : altered) {
      nlohmann::json j = good;
      change(j);
      out << j.dump() << "\n";
    }
  }
  const LogContents log = read_log(path);
  EXPECT_EQ(log.records.size(), 1u);
  ASSERT_EQ(log.warnings.size(), altered.size());
  for (std::size_t i = 0; i < altered.size(); ++i) {
    EXPECT_NE(log.warnings[i].find(path + ":" + std::to_string(i + 2) + ": "), std::string::npos) << log.warnings[i];
    EXPECT_NE(log.warnings[i].find(altered[i].second), std::string::npos) << log.warnings[i];
    EXPECT_NE(log.warnings[i].find("skipped"), std::string::npos) << log.warnings[i];
  }
  // The same checks stand before any kernel is regenerated from a record held in memory.
  TuneRecord r = log.records[0];
  r.workload.compute["output"]["indices"][0]["constant"] = 5;
  EXPECT_NE(testing::user_error_of([&] { regenerate(r, shipped(), 90); }).find("outside its dimension"), std::string::npos);
  std::filesystem::remove(path);
}

// What validation accepts of altered records (record_mutations.h) stays in bounds by an
// independent check (corner_check.h), and regenerates a kernel or is refused with a UserError.
TEST(TuneLog, AlteredRecordsThatValidationAcceptsStayInBounds) {
  const LogContents log = parse_log_text(testing::altered_shipped_records(TMAP_SOURCE_DIR), "altered.jsonl");
  int regenerated = 0, refused_later = 0;
  for (const TuneRecord& r : log.records) {
    EXPECT_EQ(testing::corner_fault(compute_from_json(r.workload.compute, "accepted")), "") << r.workload.compute.dump();
    try {
      regenerated += !regenerate(r, shipped(), 90).kernel.code.empty();
    } catch (const UserError&) {
      ++refused_later;  // a schedule or mapping that does not fit the compute
    }
  }
  std::printf("%zu altered records: %zu refused on reading, %zu accepted; %d regenerated, %d refused then\n",
              log.records.size() + log.warnings.size(), log.warnings.size(), log.records.size(), regenerated, refused_later);
  EXPECT_GT(log.warnings.size(), 0u);
  EXPECT_GT(regenerated, 10);
}

TEST(TuneLog, TwoProcessesAppendingNeverInterleaveLines) {
  Compute c = build_compute(builtin_op("gemm"));
  TuneRecord r = sample_record(c, "runtime_error", 0);
  r.result.error = std::string(20000, 'x');  // lines far longer than a pipe buffer
  const std::string path = temp_path("concurrent.jsonl");
  std::filesystem::remove(path);
  constexpr int kPerProcess = 100;
  std::vector<pid_t> children;
  for (int p = 0; p < 2; ++p) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      LogWriter w(path);
      TuneRecord mine = r;
      mine.result.error[0] = static_cast<char>('a' + p);
      for (int i = 0; i < kPerProcess; ++i) w.append(mine);
      ::_exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  LogContents log = read_log(path);
  EXPECT_TRUE(log.warnings.empty()) << log.warnings.size() << " broken lines, first: " << log.warnings[0];
  ASSERT_EQ(log.records.size(), 2u * kPerProcess);
  std::map<char, int> per_writer;
  for (const auto& x : log.records) ++per_writer[x.result.error[0]];
  EXPECT_EQ(per_writer['a'], kPerProcess);
  EXPECT_EQ(per_writer['b'], kPerProcess);
  std::filesystem::remove(path);
}

TEST(TuneLog, WorkloadKeysAreStableAndDistinct) {
  // The key of the default conv2d, as every tmap version and run computes it: logs written
  // today must resume tomorrow.
  const Workload conv = make_workload(build_compute(builtin_op("conv2d")));
  EXPECT_EQ(conv.key, "5e93a2a06fc1c9d2");
  EXPECT_EQ(conv.description["flops"].get<double>(), 2.0 * 128 * 28 * 28 * 128 * 9);
  // Same computation written as a file with other parameter names: same key.
  Compute from_file = testing::build_json(R"({
    "name": "my_conv",
    "compute": "Out[n, g*(KK/G) + k, p, q] += I[n, g*(CC/G) + c, p + r - 1, q + s - 1] * Wt[g*(KK/G) + k, c, r, s]",
    "params": {"G": 1, "KK": 128, "CC": 128},
    "tensors": {"I": {"shape": [1, "CC", 28, 28], "dtype": "float16"},
                "Wt": {"shape": ["KK", "CC/G", 3, 3], "dtype": "float16"},
                "Out": {"shape": [1, "KK", 28, 28], "dtype": "float32"}},
    "iterators": {"g": "G", "k": "KK/G"}})");
  EXPECT_EQ(make_workload(from_file).key, conv.key);
  std::set<std::string> keys = {conv.key};
  for (const auto& sets : std::vector<std::vector<std::string>>{{"N=2"}, {"stride=2"}, {"K=64"}, {"pad=0"}})
    EXPECT_TRUE(keys.insert(make_workload(build_compute(builtin_op("conv2d"), parse_param_overrides(sets))).key).second)
        << sets[0];
  EXPECT_TRUE(keys.insert(make_workload(build_compute(builtin_op("conv2d_nhwc"))).key).second);
  EXPECT_TRUE(keys.insert(make_workload(build_compute(builtin_op("gemm"))).key).second);
}

TEST(SearchSpace, EverySampledMutatedAndCrossedCandidateIsValid) {
  std::mt19937_64 rng(3);
  for (const auto& [op, sets] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"conv2d", {}}, {"conv2d_nhwc", {"C=64", "stride=2"}}, {"gemm", {"M=17", "N=33", "K=65"}}, {"gemv", {}}}) {
    Compute c = build_compute(builtin_op(op), parse_param_overrides(sets));
    SearchSpace space(c, shipped(), Enumeration::kAmos, DeviceLimits::for_arch(90), 90);
    ASSERT_FALSE(space.entries().empty()) << op;
    int checked = 0;
    std::set<std::string> distinct;
    for (int e = 0; e < static_cast<int>(space.entries().size()); e += std::max<int>(1, space.entries().size() / 8)) {
      const ImplicitGemm& g = space.entries()[e].gemm;
      ScheduleParams a = space.sample(e, rng), b = space.sample(e, rng);
      for (int i = 0; i < 60; ++i) {
        ScheduleParams p = i % 3 == 0 ? space.sample(e, rng) : i % 3 == 1 ? space.mutate(e, a, rng) : space.crossover(e, a, b, rng);
        auto issues = validate(g, p, DeviceLimits::for_arch(90));
        ASSERT_TRUE(issues.empty()) << op << " " << space.entries()[e].label << " " << to_json(p).dump() << ": "
                                    << issues[0].detail;
        distinct.insert(SearchSpace::key(e, p));
        ++checked;
        if (i % 7 == 0) a = p;
      }
      EXPECT_EQ(space.find(space.ref(e, a)), e);
    }
    EXPECT_GT(distinct.size(), checked / 2u) << op << ": the space is explored, not stuck on one schedule";
  }
}

/// A synthetic cost with the structure of a real one: tile efficiency, waves, vector loads,
/// split-K overhead and a few interactions, in microseconds.
double synthetic_us(const ImplicitGemm& g, const ScheduleParams& p) {
  const double tiles = std::ceil(double(g.M) / p.block_m) * std::ceil(double(g.N) / p.block_n) * g.batch * p.split_k;
  const double waves = std::ceil(tiles / 264.0);
  const double per_tile = p.block_m * p.block_n * (double(g.K) * g.serial / p.split_k) / 4e6;
  const double tile_eff = 1.0 / std::min(1.0, std::sqrt((p.warp_m / 16.0) * (p.warp_n / 16.0)) / 2 + 0.3);
  const double loads = (p.vec_a == 1 ? 1.6 : 1.0) * (p.vec_b == 1 ? 1.4 : 1.0) * (p.stages == 1 ? 1.3 : 1.0);
  return 3 + waves * per_tile * tile_eff * loads + (p.split_k > 1 ? 2 + 0.5 * p.split_k : 0) + (p.unroll ? 0 : 1.5);
}

TEST(CostModel, LearnsASyntheticCostFunction) {
  Compute c = build_compute(builtin_op("conv2d_nhwc"), parse_param_overrides({"N=8"}));
  SearchSpace space(c, shipped(), Enumeration::kAmos, DeviceLimits::for_arch(90), 90);
  DeviceModel d = DeviceModel::for_arch(90);
  std::mt19937_64 rng(11);
  CostModel model;
  std::vector<Features> test_f;
  std::vector<double> test_t;
  for (int i = 0; i < 700; ++i) {
    const int e = static_cast<int>(rng() % space.entries().size());
    ScheduleParams p = space.sample(e, rng);
    const ImplicitGemm& g = space.entries()[e].gemm;
    const Features f = candidate_features(g, p, d);
    for (float x : f) ASSERT_TRUE(std::isfinite(x));
    if (i < 400) model.add(f, synthetic_us(g, p));
    else {
      test_f.push_back(f);
      test_t.push_back(synthetic_us(g, p));
    }
  }
  EXPECT_FALSE(model.trained());
  model.fit();
  ASSERT_TRUE(model.trained());
  const double rho = spearman(model.predict(test_f), test_t);
  std::printf("held-out rank correlation %.3f on %zu candidates\n", rho, test_t.size());
  EXPECT_GT(rho, 0.8);
  EXPECT_NEAR(spearman({1, 2, 3, 4}, {10, 20, 30, 40}), 1.0, 1e-12);
  EXPECT_NEAR(spearman({1, 2, 3, 4}, {4, 3, 2, 1}), -1.0, 1e-12);
}

// How often the search draws the wgmma options measured no faster on the H100: pairs of blocks
// (cluster 2, 3) in about a third of the draws that could pair (no splits, a TMA producer that is
// not ping-pong), A from registers in about an eighth; the narrower swizzles never on a GEMM whose
// reduction fills 128-byte lines.
TEST(SearchSpace, DrawsSlowerWgmmaOptionsRarely) {
  Compute c = build_compute(builtin_op("gemm"), parse_param_overrides({"M=2048", "N=2048", "K=2048"}));
  const std::vector<HwAbstraction> hws = {find_hw(shipped(), "wgmma_fp16_fp32")};
  SearchSpace space(c, hws, Enumeration::kAmos, DeviceLimits::for_arch(90), 90);
  int arm = -1;
  for (int e = 0; e < static_cast<int>(space.entries().size()); ++e)
    if (space.entries()[e].defaults.producer == 1) arm = e;
  ASSERT_GE(arm, 0) << "an arm whose operands both have TMA boxes";
  std::mt19937_64 rng(5);
  int unsplit = 0, pairs = 0, regs = 0, narrow = 0;
  const int draws = 2000;
  for (int i = 0; i < draws; ++i) {
    const ScheduleParams p = space.sample(arm, rng);
    if (p.split_k == 1 && (p.producer == 1 || p.producer == 2)) {  // pairs need a TMA producer, not ping-pong
      ++unsplit;
      pairs += p.cluster >= 2;
    }
    regs += p.a_regs;
    narrow += p.swizzle != 1;
  }
  ASSERT_GT(unsplit, 200);
  EXPECT_NEAR(static_cast<double>(pairs) / unsplit, 1.0 / 3, 0.1) << pairs << " of " << unsplit;
  EXPECT_NEAR(static_cast<double>(regs) / draws, 1.0 / 8, 0.06) << regs << " of " << draws;
  EXPECT_EQ(narrow, 0);
}

// A drawn ring deeper than shared memory holds for its tiles becomes the deepest that fits
// rather than a refused draw, so that large tiles get deep rings as often as small ones (decode
// GEMMs' 128 x 96 tiles want 8 buffers: docs/design-notes.md, "Rings as deep as fit").
TEST(SearchSpace, ARingTooDeepForItsTilesBecomesTheDeepestThatFits) {
  Compute c = build_compute(builtin_op("gemm"), parse_param_overrides({"M=256", "N=6144", "K=4096"}));
  const std::vector<HwAbstraction> hws = {find_hw(shipped(), "wgmma_fp16_fp32")};
  const DeviceLimits limits = DeviceLimits::for_arch(90);
  SearchSpace space(c, hws, Enumeration::kAmos, limits, 90);
  int arm = -1;
  for (int e = 0; e < static_cast<int>(space.entries().size()); ++e)
    if (space.entries()[e].defaults.producer == 1) arm = e;
  ASSERT_GE(arm, 0) << "an arm whose operands both have TMA boxes";
  const ImplicitGemm& g = space.entries()[arm].gemm;

  ScheduleParams p = space.entries()[arm].defaults;
  p.block_m = 128, p.warp_m = 64, p.block_n = p.warp_n = 96, p.block_k = 64, p.split_k = 1, p.cluster = 0;
  p.stages = 12;
  ASSERT_FALSE(validate(g, p, limits).empty()) << "12 buffers of 128 x 64 and 96 x 64 exceed 227 KB";
  fit_stages(g, p, limits);
  EXPECT_EQ(p.stages, 8);
  EXPECT_TRUE(validate(g, p, limits).empty());
  ScheduleParams deeper = p;
  ++deeper.stages;
  const std::vector<ScheduleIssue> issues = validate(g, deeper, limits);
  ASSERT_FALSE(issues.empty());
  EXPECT_EQ(issues.front().error, ScheduleError::kSharedMemoryExceeded);
  fit_stages(g, p, limits);
  EXPECT_EQ(p.stages, 8) << "a ring that fits is left alone";

  // Of the draws whose tiles hold fewer than the deepest listed ring (12), about the share of the
  // draws of that depth or deeper sits at the deepest that fits: 3 of 8 where 8 fits.
  std::mt19937_64 rng(7);
  int large = 0, deepest = 0;
  for (int i = 0; i < 3000; ++i) {
    const ScheduleParams d = space.sample(arm, rng);
    if (d.producer == 0) continue;  // rings beyond 6 need a TMA producer
    ScheduleParams most = d;
    most.stages = 12;
    fit_stages(g, most, limits);
    if (most.stages >= 12 || most.stages < 6) continue;
    ++large;
    deepest += d.stages == most.stages;
  }
  ASSERT_GT(large, 100);
  EXPECT_GT(static_cast<double>(deepest) / large, 0.3) << deepest << " of " << large;
}

// A background refit ends in the model a synchronous fit on the same samples gives, the old
// model predicting meanwhile; the first fit is synchronous.
TEST(CostModel, RefitsInTheBackground) {
  Compute c = build_compute(builtin_op("conv2d_nhwc"), parse_param_overrides({"N=8"}));
  SearchSpace space(c, shipped(), Enumeration::kAmos, DeviceLimits::for_arch(90), 90);
  DeviceModel d = DeviceModel::for_arch(90);
  std::mt19937_64 rng(3);
  CostModel background, foreground;
  std::vector<Features> probe;
  auto add = [&](int n) {
    for (int i = 0; i < n; ++i) {
      const int e = static_cast<int>(rng() % space.entries().size());
      const ScheduleParams p = space.sample(e, rng);
      const Features f = candidate_features(space.entries()[e].gemm, p, d);
      background.add(f, synthetic_us(space.entries()[e].gemm, p));
      foreground.add(f, synthetic_us(space.entries()[e].gemm, p));
      if (probe.size() < 50) probe.push_back(f);
    }
  };
  add(10);
  EXPECT_TRUE(background.fit_in_background());  // below min_samples: nothing to fit
  EXPECT_FALSE(background.trained());
  add(30);
  EXPECT_TRUE(background.fit_in_background());
  EXPECT_TRUE(background.trained());  // the first fit is there at once
  EXPECT_EQ(background.unfitted(), 0);
  const std::vector<double> first = background.predict(probe);
  add(300);
  ASSERT_TRUE(background.fit_in_background());
  EXPECT_EQ(background.unfitted(), 0);
  while (background.fitting()) {
    EXPECT_FALSE(background.fit_in_background());  // one at a time
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  foreground.fit();
  const std::vector<double> refit = background.predict(probe), expected = foreground.predict(probe);
  EXPECT_EQ(refit, expected);
  EXPECT_NE(refit, first);
}

// 120 real measurements from the H100 (40 each of ResNet-18 layer 5 in NHWC and NCHW at batch 1
// and of GEMM 1024^3, tuned on 2026-11-22): the analytic model and a model
// trained on the other workloads must rank each workload's candidates.
TEST(CostModel, RanksRealH100Measurements) {
  LogContents sample = read_log(std::string(TMAP_SOURCE_DIR) + "/tests/data/h100_measured_sample.jsonl");
  ASSERT_TRUE(sample.warnings.empty());
  const auto sets = measured_sets(sample.records, shipped(), "sm_90", DeviceLimits::for_arch(90), DeviceModel::for_arch(90));
  ASSERT_EQ(sets.size(), 3u);
  for (const auto& [key, set] : sets) {
    ASSERT_EQ(set.times_us.size(), 40u) << key;
    const double analytic = spearman(set.analytic_us, set.times_us);
    CostModel others(1);
    for (const auto& [other, x] : sets)
      if (other != key)
        for (std::size_t i = 0; i < x.features.size(); ++i) others.add(x.features[i], x.times_us[i]);
    others.fit();
    const double transfer = spearman(others.predict(set.features), set.times_us);
    std::printf("%s: analytic %.2f, trained on the other workloads %.2f\n", key.c_str(), analytic, transfer);
    EXPECT_GT(analytic, 0.6) << key;
    EXPECT_GT(transfer, 0.6) << key;
  }
}

/// Measures nothing: times candidates with the synthetic cost, and fails a few on purpose.
class SyntheticMeasurer : public Measurer {
 public:
  MeasureResult measure(const Compute& c, const ImplicitGemm& g, const ScheduleParams& p, const KernelSource& k,
                        const CompileResult& bin) override {
    EXPECT_TRUE(bin.ok) << bin.log;
    EXPECT_FALSE(bin.cubin.empty());
    ++calls;
    keys.insert(make_workload(c).key + " " + k.name + ":" + to_json(p).dump());  // kernel names omit the shape
    MeasureResult r;
    if (p.raster == 8) {  // a "faulting" family
      r.status = MeasureStatus::kRuntimeError;
      r.message = "cudaErrorIllegalAddress (synthetic)";
      return r;
    }
    r.status = MeasureStatus::kOk;
    r.median_us = synthetic_us(c.dynamic.at > 0 ? gemm_at_size(g, c.dynamic.at) : g, p);  // a range's sample at its size
    r.times_us = {r.median_us};
    return r;
  }
  int calls = 0;
  std::set<std::string> keys;
};

TuneOptions synthetic_options(const std::string& log, int trials) {
  TuneOptions o;
  o.trials = trials;
  o.batch = 8;
  o.seed = 5;
  o.log_path = log;
  o.target = {"sm_90", "synthetic", "13.0", "13.0", "test"};
  o.compute_capability = 90;
  o.limits = DeviceLimits::for_arch(90);
  o.limits.sm_count = 132;
  o.device = DeviceModel::for_arch(90);
  o.confirm_top = 0;  // these tests count measurements; Tuner.TheFastestAreMeasuredAgainAtTheEnd turns it on
  o.compile_cache_dir = testing::test_compile_cache();
  return o;
}

TEST(Tuner, ArmSharesExploitMeasuredArmsAndCapExploration) {
  const double inf = std::numeric_limits<double>::infinity();
  // A conv3d-sized search: three measured arms (10 us, 20 us, failures only) among 5000 unmeasured
  // ones that the model rates from 10 us (as fast as the best) to 80 us.
  std::vector<ArmStanding> arms = {{10, 12, false}, {20, 15, false}, {inf, 9, true}};
  for (int i = 0; i < 5000; ++i) arms.push_back({inf, 10.0 * (1 << (i % 4)), false});
  const std::vector<double> share = arm_shares(arms);
  ASSERT_EQ(share.size(), arms.size());
  double total = 0, unmeasured = 0;
  for (std::size_t e = 0; e < share.size(); ++e) {
    EXPECT_GT(share[e], 0) << "arm " << e << " is never picked";
    total += share[e];
    if (e >= 3) unmeasured += share[e];
  }
  EXPECT_NEAR(total, 1.0, 1e-9);
  EXPECT_LE(unmeasured, 0.2 + 1e-9) << "unmeasured arms outweigh the measured ones";
  EXPECT_GE(share[0], 0.25 - 1e-9) << "the best arm gets at least a quarter";
  EXPECT_GT(share[0], share[1]);
  EXPECT_GT(share[1], share[2]) << "an arm 2x slower keeps more than one that only failed";
  EXPECT_NEAR(share[3] / share[4], std::exp(2.0), 1e-6) << "by the model: 2x slower, e^-2 of the share";
  EXPECT_GT(share[4], share[6]);

  // Nothing measured yet: the model's order alone, arms without an estimate last.
  const std::vector<double> first = arm_shares({{inf, 5, false}, {inf, 10, false}, {inf, inf, false}});
  EXPECT_NEAR(first[0] + first[1] + first[2], 1.0, 1e-9);
  EXPECT_GT(first[0], first[1]);
  EXPECT_GT(first[1], first[2]);
  EXPECT_TRUE(arm_shares({}).empty());
}

TEST(Tuner, FirstLooksTakeAQuarterOfTheTrialsTheBudgetAllows) {
  // A trial budget: every arm when as many trials remain, else a quarter (at least a batch).
  EXPECT_EQ(first_look_limit(32, 8, 64, 0, 0, 0), 32u);
  EXPECT_EQ(first_look_limit(1000, 16, 1000, 0, 0, 0), 250u);
  EXPECT_EQ(first_look_limit(1000, 16, 40, 0, 0, 0), 16u);
  EXPECT_EQ(first_look_limit(1000, 16, 8, 0, 0, 0), 8u);
  // A time budget with a cap of 100000 trials: two batches' worth until a batch is measured,
  // then by the rate so far (700 trials in 20 s: 175 looks), never more than the cap allows.
  EXPECT_EQ(first_look_limit(1000, 16, 100000, 20, 1, 10), 16u);
  EXPECT_EQ(first_look_limit(1000, 16, 100000, 20, 10, 350), 175u);
  EXPECT_EQ(first_look_limit(1000, 16, 100000, 20, 0, 350), 16u);
  EXPECT_EQ(first_look_limit(100, 16, 100000, 20, 10, 350), 100u);  // 700 trials: every arm
  EXPECT_EQ(first_look_limit(1000, 16, 400, 20, 10, 350), 100u);     // the cap: 400 trials
  // A time budget that leaves as many trials for every arm as --trials: the trial rule.
  EXPECT_EQ(first_look_limit(32, 8, 64, 20, 10, 8), 32u);
}

TEST(Tuner, SearchesRecordsAndResumesWithoutMeasuringAgain) {
  Compute c = build_compute(builtin_op("gemm"), parse_param_overrides({"M=512", "N=256", "K=512"}));
  const std::string log = temp_path("tune.jsonl");
  std::filesystem::remove(log);
  SyntheticMeasurer first;
  // Twice the arms (32: 4 families, mma_sync and wgmma also with A and B swapped): every arm gets a first look.
  TuneSummary a = tune(c, shipped(), synthetic_options(log, 64), first);
  EXPECT_EQ(a.measured, 64);
  EXPECT_EQ(first.calls, 64);
  EXPECT_EQ(a.first_looks, a.arms) << "every mapping gets a first look";
  ASSERT_TRUE(a.best.has_value());
  LogContents after_first = read_log(log);
  EXPECT_TRUE(after_first.warnings.empty());
  EXPECT_EQ(after_first.records.size(), 64u) << "every trial is in the log, failures included";
  int failures = 0;
  for (const auto& r : after_first.records) failures += !r.result.ok();
  EXPECT_EQ(failures, a.failed);
  // The search beats the default schedule of the same mapping.
  SearchSpace space(c, shipped(), Enumeration::kAmos, DeviceLimits::for_arch(90), 90);
  const int e = space.find(a.best->candidate);
  ASSERT_GE(e, 0);
  DeviceLimits h100 = DeviceLimits::for_arch(90);
  h100.sm_count = 132;
  EXPECT_LE(a.best->result.median_us, synthetic_us(space.entries()[e].gemm, default_schedule(space.entries()[e].gemm, h100)));

  // Resume: nothing measured twice, the best carries over.
  SyntheticMeasurer second;
  TuneSummary b = tune(c, shipped(), synthetic_options(log, 24), second);
  EXPECT_EQ(b.resumed, 64);
  EXPECT_EQ(second.calls, 24);
  for (const auto& k : second.keys) EXPECT_EQ(first.keys.count(k), 0u) << "measured again: " << k;
  ASSERT_TRUE(b.best.has_value());
  EXPECT_LE(b.best->result.median_us, a.best->result.median_us);
  EXPECT_EQ(read_log(log).records.size(), 88u);
  std::filesystem::remove(log);
}

TEST(Tuner, OtherWorkloadsInTheLogWarmStartTheModel) {
  const std::string log = temp_path("transfer.jsonl");
  std::filesystem::remove(log);
  Compute a = build_compute(builtin_op("gemm"), parse_param_overrides({"M=512", "N=256", "K=512"}));
  Compute b = build_compute(builtin_op("gemm"), parse_param_overrides({"M=256", "N=512", "K=256"}));
  SyntheticMeasurer first;
  // Enough trials that the model can be fitted from the correct ones (16), whatever share of the
  // random draws lands on the synthetic measurer's failing raster.
  TuneSummary sa = tune(a, shipped(), synthetic_options(log, 40), first);
  EXPECT_EQ(sa.transferred, 0);
  ASSERT_GE(sa.measured - sa.failed, 16) << "too few correct measurements to fit the model from";
  SyntheticMeasurer second;
  TuneOptions o = synthetic_options(log, 16);
  std::vector<std::string> notes;
  o.on_note = [&](const std::string& s) { notes.push_back(s); };
  TuneSummary sb = tune(b, shipped(), o, second);
  EXPECT_EQ(sb.resumed, 0) << "another workload is not resumed";
  EXPECT_EQ(sb.transferred, sa.measured - sa.failed) << "every correct measurement of the other workload";
  EXPECT_FALSE(sb.rank_correlations.empty()) << "the model ranked the very first batch";
  bool said = false;
  for (const auto& n : notes) said = said || n.find("warm-started from") != std::string::npos;
  EXPECT_TRUE(said);
  std::filesystem::remove(log);
}

TEST(Tuner, OtherWorkloadsBestSchedulesAreTriedAsSeeds) {
  const std::string log = temp_path("seeds.jsonl");
  std::filesystem::remove(log);
  Compute a = build_compute(builtin_op("gemm"), parse_param_overrides({"M=512", "N=256", "K=512"}));
  Compute b = build_compute(builtin_op("gemm"), parse_param_overrides({"M=512", "N=256", "K=1024"}));
  SyntheticMeasurer first;
  TuneSummary sa = tune(a, shipped(), synthetic_options(log, 24), first);
  ASSERT_TRUE(sa.best.has_value());
  EXPECT_EQ(sa.offered, 0) << "nothing else in the log";

  // b's first batch tries a's fastest schedules (the same mappings by iterator name, valid
  // here); measured by the fourth batch whatever order the kernels compile in.
  SyntheticMeasurer second;
  TuneSummary sb = tune(b, shipped(), synthetic_options(log, 32), second);
  EXPECT_GE(sb.offered, 1);
  EXPECT_GE(sb.seeded, 1);
  EXPECT_LE(sb.seeded, sb.offered);
  bool tried = false;
  for (const auto& r : read_log(log).records)
    tried = tried || (r.workload.key == make_workload(b).key &&
                      candidate_label(r.candidate) == candidate_label(sa.best->candidate) &&
                      r.candidate.params == sa.best->candidate.params);
  EXPECT_TRUE(tried) << "a's best schedule was not measured on b";

  // offer() takes only what fits: the same mapping and a valid schedule, once, untried.
  CostModel model;
  TuneTask task(b, shipped(), synthetic_options("", 8), model, {}, nullptr);
  EXPECT_TRUE(task.offer(sa.best->candidate));
  EXPECT_FALSE(task.offer(sa.best->candidate)) << "offered twice";
  CandidateRef foreign = sa.best->candidate;
  foreign.axes[0] = {"p", "q"};  // iterators a GEMM lacks
  EXPECT_FALSE(task.offer(foreign));
  CandidateRef invalid = sa.best->candidate;
  invalid.params.block_m = 0;  // no family takes an empty block tile
  EXPECT_FALSE(task.offer(invalid));
  EXPECT_EQ(task.summary().offered, 1);
  std::filesystem::remove(log);
}

// A fused workload's first seeds are its contraction's fastest schedules, from the run's log
// or a prior one (RunKeys): tuning a GEMM and then its fused forms starts each fused form where
// the GEMM's tuning ended. Other workloads' schedules stay ordinary seeds, which take at most a
// quarter of a batch.
TEST(Tuner, AFusedWorkloadFirstMeasuresItsContractionsFastestSchedules) {
  const std::vector<std::string> sets = {"M=512", "N=256", "K=512"};
  const Compute bare = testing::narrowed_op("gemm", "float16", sets);
  const Compute fused = testing::fused_op("gemm", "float16", "Y[m, n] = relu(C[m, n] + bias[n])", sets);
  const Compute other = testing::narrowed_op("gemm", "float16", {"M=512", "N=256", "K=1024"});
  TuneOptions o = synthetic_options(temp_path("fused_seeds.jsonl"), 8);
  std::filesystem::remove(o.log_path);
  const SearchSpace space(bare, shipped(), Enumeration::kAmos, o.limits, 90);
  ASSERT_GE(space.entries().size(), 4u);
  std::vector<CandidateRef> fastest;  // the bare GEMM's schedules, fastest first
  for (int i = 0; i < 4; ++i) {
    for (const Compute* c : {&bare, &other}) {
      TuneRecord r;
      r.workload = make_workload(*c);
      r.target = o.target;
      r.candidate = space.ref(i, space.entries()[i].defaults);
      r.result.status = "ok";
      r.result.rel_l2 = 1e-7;
      r.result.median_us = 100 + 10 * i;
      r.result.times_us = {r.result.median_us};
      LogWriter(o.log_path).append(r);
    }
    fastest.push_back(space.ref(i, space.entries()[i].defaults));
  }
  auto label = [](const CandidateRef& r) { return candidate_label(r) + to_json(r.params).dump(); };
  RunKeys keys;
  keys.add(make_workload(fused).key, fused);
  ASSERT_EQ(keys.contraction.size(), 1u);
  EXPECT_EQ(keys.contraction.begin()->first, make_workload(bare).key);
  // Another epilogue on the same contraction starts from the same schedules.
  const Compute gelu = testing::fused_op("gemm", "float16", "Y[m, n] = gelu(C[m, n])", sets);
  keys.add(make_workload(gelu).key, gelu);
  EXPECT_EQ(keys.first_seeds_of(make_workload(bare).key),
            (std::vector<std::string>{make_workload(fused).key, make_workload(gelu).key}));
  CostModel model;
  const LogHistory h = read_history(model, keys, shipped(), o);
  const std::string key = make_workload(fused).key;
  ASSERT_EQ(h.first_seeds.count(key), 1u);
  ASSERT_EQ(h.first_seeds.at(key).size(), 3u) << "the fastest three, as for a prior log's own records";
  for (int i = 0; i < 3; ++i) EXPECT_EQ(label(h.first_seeds.at(key)[i]), label(fastest[i]));
  EXPECT_EQ(h.first_seeds.count(make_workload(gelu).key), 1u);
  EXPECT_EQ(h.seeds.size(), 3u) << "the other GEMM's fastest, ordinary seeds";
  EXPECT_TRUE(h.own.empty()) << "the contraction's records are not the fused workload's";
  EXPECT_EQ(h.transferred, 8) << "and all of them train the model";

  // And a tune measures them (its batches' kernels are measured as they compile, and the model
  // ranks what is ready: by the third batch).
  o.trials = 24;
  SyntheticMeasurer gpu;
  const TuneSummary s = tune(fused, shipped(), o, gpu);
  std::set<std::string> measured;
  for (const TuneRecord& r : read_log(o.log_path).records)
    if (r.workload.key == key) measured.insert(label(r.candidate));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(measured.count(label(fastest[i]))) << "schedule #" << i;
  EXPECT_GE(s.seeded, 3);
  std::filesystem::remove(o.log_path);
}

// A first layer's best from a prior log (channels padded to 16-byte rows) is measured in the
// first batch on the mapping's 8-byte twin too, its vectors narrowed (SearchSpace::twins); the
// twins of other seeds wait their turn with the seeds.
TEST(Tuner, APriorBestIsTriedOnItsRelayoutTwins) {
  const Compute first = build_compute(
      builtin_op("conv2d_nhwc"),
      parse_param_overrides({"N=2", "C=3", "H=32", "W=30", "K=64", "R=7", "S=7", "stride=2", "pad=3"}));
  const std::vector<HwAbstraction> hws = {find_hw(shipped(), "mma_sync_fp16_fp32")};
  TuneOptions o = synthetic_options(temp_path("twins.jsonl"), 8);
  std::filesystem::remove(o.log_path);
  SearchSpace space(first, hws, Enumeration::kAmos, o.limits, 90);
  int wide = -1;
  ScheduleParams p;
  for (int i = 0; i < static_cast<int>(space.entries().size()) && wide < 0; ++i) {
    p = space.entries()[i].defaults;
    p.vec_a = 8;
    if (space.entries()[i].gemm.relayout_knob == 1 && space.valid(i, p)) wide = i;
  }
  ASSERT_GE(wide, 0) << "no arm of 16-byte rows loads 8 halves at a time";
  std::set<int> values;  // the twins: the same mapping, the same tiles, the widest vectors valid there
  for (const auto& [i, q] : space.twins(wide, p)) {
    EXPECT_EQ(space.entries()[i].mapping, space.entries()[wide].mapping);
    EXPECT_EQ(q.relayout, space.entries()[i].gemm.relayout_knob);
    EXPECT_TRUE(space.valid(i, q));
    EXPECT_EQ(q.block_m, p.block_m);
    EXPECT_EQ(q.stages, p.stages);
    if (q.relayout == 2) EXPECT_EQ(q.vec_a, 4) << "an 8-byte row holds 4 halves";
    values.insert(q.relayout);
  }
  EXPECT_TRUE(values.count(2)) << "no 8-byte twin";
  EXPECT_FALSE(values.count(1)) << "an arm is not its own twin";
  const std::string prior = temp_path("twins_prior.jsonl");
  std::filesystem::remove(prior);
  {
    TuneRecord r;
    r.workload = make_workload(first);
    r.target = o.target;
    r.candidate = space.ref(wide, p);
    r.result.status = "ok";
    r.result.rel_l2 = 1e-7;
    r.result.median_us = 100;
    r.result.times_us = {100};
    LogWriter(prior).append(r);
  }
  o.prior_logs = {prior};
  SyntheticMeasurer gpu;
  const TuneSummary s = tune(first, hws, o, gpu);
  EXPECT_GE(s.seeded, 2) << "the prior best and its twin";
  bool twin = false;
  for (const TuneRecord& r : read_log(o.log_path).records)
    twin = twin || (r.candidate.params.relayout == 2 && r.candidate.params.vec_a == 4 &&
                    r.candidate.params.block_m == p.block_m && r.candidate.params.block_n == p.block_n &&
                    r.candidate.params.stages == p.stages && r.candidate.axes == space.ref(wide, p).axes);
  EXPECT_TRUE(twin) << "the prior best on 8-byte rows was not measured";
  std::filesystem::remove(prior);
  std::filesystem::remove(o.log_path);
}

/// The synthetic cost, except that every candidate's first measurement is lucky (0.5-0.995x, by
/// its name) and the first candidate measured a second time gives wrong results from then on.
class LuckyMeasurer : public Measurer {
 public:
  /// A kernel's name in `calls`: its workload, intrinsic, layout, shape, mapping and schedule (mapping
  /// ids repeat across intrinsic shapes and layouts, and two mappings may draw one schedule).
  static std::string key_of(const std::string& workload, const std::string& hw, const std::string& layout,
                            const IntrinsicShape& shape, int mapping_id, const ScheduleParams& p) {
    return workload + " " + hw + " " + layout + " " + shape.str() + " map " + std::to_string(mapping_id) + ":" +
           to_json(p).dump();
  }
  MeasureResult measure(const Compute& c, const ImplicitGemm& g, const ScheduleParams& p, const KernelSource&,
                        const CompileResult&) override {
    const std::string key = key_of(make_workload(c).key, g.hw->name, g.layout, g.shape, g.mapping_id, p);
    const int n = ++calls[key];
    const std::size_t h = std::hash<std::string>{}(key);
    MeasureResult r;
    r.status = MeasureStatus::kOk;
    r.median_us = synthetic_us(g, p) * (n == 1 ? 0.5 + static_cast<double>(h % 100) / 200 : 1.0);
    r.times_us = {r.median_us};
    if (n > 1 && flaky.empty()) flaky = key;
    if (key == flaky) r.status = MeasureStatus::kWrongResult;
    return r;
  }
  std::map<std::string, int> calls;
  std::string flaky;
};

/// The synthetic measurer whose first measurement takes `first_s` (as a worker's start does).
class SlowFirstMeasurer : public SyntheticMeasurer {
 public:
  explicit SlowFirstMeasurer(double first_s) : first_s_(first_s) {}
  MeasureResult measure(const Compute& c, const ImplicitGemm& g, const ScheduleParams& p, const KernelSource& k,
                        const CompileResult& bin) override {
    if (calls == 0) std::this_thread::sleep_for(std::chrono::duration<double>(first_s_));
    return SyntheticMeasurer::measure(c, g, p, k, bin);
  }

 private:
  double first_s_;
};

// A slow first measurement (the worker's start, its CUDA context, the reference) does not count
// as the typical one when the time budget reserves room for the confirmations. Resuming a log
// puts four candidates on the podium from the start: 4 x 3 confirmations of 2 s would have
// left none of a 12 s budget after the first trial. (The budget leaves room for compiling the
// first batches on a loaded machine: a sanitizer build beside a test that compiles on every
// core measured only two trials in 6 s.)
TEST(Tuner, ASlowFirstMeasurementDoesNotEndATimeBudget) {
  Compute c = build_compute(builtin_op("gemm"), parse_param_overrides({"M=512", "N=256", "K=512"}));
  const std::string log = temp_path("slow_first.jsonl");
  std::filesystem::remove(log);
  {
    SyntheticMeasurer earlier;
    ASSERT_EQ(tune(c, shipped(), synthetic_options(log, 4), earlier).measured, 4);
  }
  TuneOptions o = synthetic_options(log, 100000);
  o.time_budget_s = 12;
  o.confirm_top = 4;
  o.confirm_rounds = 3;
  SlowFirstMeasurer m(2.0);
  const TuneSummary s = tune(c, shipped(), o, m);
  EXPECT_EQ(s.resumed, 4);
  EXPECT_EQ(s.stop_reason, "time budget reached");
  EXPECT_GE(s.measured, 4) << "the budget ended after the first trial";
  EXPECT_EQ(s.confirmed, 4);
  std::filesystem::remove(log);
}

TEST(Tuner, TheFastestAreMeasuredAgainAtTheEnd) {
  Compute c = build_compute(builtin_op("gemm"), parse_param_overrides({"M=512", "N=256", "K=512"}));
  const std::string log = temp_path("confirm.jsonl");
  std::filesystem::remove(log);
  TuneOptions o = synthetic_options(log, 32);
  o.confirm_top = 4;
  o.confirm_rounds = 3;
  LuckyMeasurer m;
  const TuneSummary s = tune(c, shipped(), o, m);
  EXPECT_EQ(s.measured, 32);
  EXPECT_EQ(s.confirmed, 4);
  ASSERT_TRUE(s.best);
  LogContents l = read_log(log);
  ASSERT_EQ(l.records.size(), 32u + 4u);
  // The four confirmations: the four fastest single measurements, each measured up to 3 more
  // times in turn (a flaky one stops at its first failure), at their true time.
  std::vector<const TuneRecord*> confirms;
  std::vector<double> once;
  for (const auto& r : l.records) {
    if (r.result.confirm_rounds) confirms.push_back(&r);
    else if (r.result.ok()) once.push_back(r.result.median_us);
  }
  ASSERT_EQ(confirms.size(), 4u);
  std::sort(once.begin(), once.end());
  EXPECT_DOUBLE_EQ(s.unconfirmed_best_us, once[0]);
  int flaky = 0, lucky = 0;
  const TuneRecord* fastest = nullptr;
  for (const TuneRecord* r : confirms) {
    EXPECT_EQ(r->result.confirm_rounds, 3);
    const auto& ref = r->candidate;
    const std::string key = LuckyMeasurer::key_of(r->workload.key, ref.hw_abs, ref.layout, IntrinsicShape{ref.shape},
                                                  ref.mapping_id, ref.params);
    ASSERT_TRUE(m.calls.count(key)) << key << " was not measured";
    const int calls = m.calls.at(key);
    if (!r->result.ok()) {
      ++flaky;
      EXPECT_EQ(r->result.status, "wrong_result");
      EXPECT_EQ(calls, 2) << "a failed confirmation is not measured again";
      continue;
    }
    EXPECT_EQ(calls, 4);
    EXPECT_EQ(r->result.times_us.size(), 3u);
    for (const TuneRecord& first : l.records)
      if (!first.result.confirm_rounds && candidate_signature(first.candidate) == candidate_signature(r->candidate)) {
        EXPECT_LE(first.result.median_us, once[3]) << "one of the four fastest";
        lucky += first.result.median_us < r->result.median_us;
      }
    if (!fastest || r->result.median_us < fastest->result.median_us) fastest = r;
  }
  EXPECT_GT(lucky, 0) << "the test means to catch lucky measurements";
  EXPECT_EQ(flaky, 1) << "the fastest single measurement, confirmed first, is the flaky kernel";
  ASSERT_TRUE(fastest);
  EXPECT_EQ(candidate_signature(s.best->candidate), candidate_signature(fastest->candidate));
  EXPECT_EQ(s.best->result.confirm_rounds, 3);
  EXPECT_GT(s.best->result.median_us, s.unconfirmed_best_us) << "the luckiest single measurement was not the best";
  // The log agrees with the tuner, and so does a resumed run before it confirms again.
  ASSERT_EQ(best_records(l.records).size(), 1u);
  EXPECT_EQ(to_json(*best_records(l.records)[0]), to_json(*s.best));
  TuneOptions again = o;
  again.trials = 8;
  again.confirm_top = 0;
  LuckyMeasurer m2;
  const TuneSummary r = tune(c, shipped(), again, m2);
  ASSERT_TRUE(r.best);
  EXPECT_EQ(r.best->result.confirm_rounds, 3) << "the confirmed best outranks later single measurements";
  // Resumed again with confirmation and no new trials: the fastest are all resumed records,
  // compiled again to be measured.
  TuneOptions third = o;
  third.trials = 0;
  LuckyMeasurer m4;
  const TuneSummary t = tune(c, shipped(), third, m4);
  EXPECT_EQ(t.confirmed, 4);
  const LogContents l3 = read_log(log);
  int compiled_again = 0;
  for (std::size_t i = l3.records.size() - 4; i < l3.records.size(); ++i) {
    const TuneResult& res = l3.records[i].result;
    EXPECT_EQ(res.confirm_rounds, 3);
    EXPECT_NE(res.status, "compile_error") << res.error;
    for (std::size_t j = 0; j + 4 < l3.records.size(); ++j)
      if (candidate_signature(l3.records[j].candidate) == candidate_signature(l3.records[i].candidate)) {
        ++compiled_again;
        break;
      }
  }
  EXPECT_EQ(compiled_again, 4) << "each of them is a resumed record";
  EXPECT_EQ(t.measured, 0);
  ASSERT_TRUE(t.best);
  EXPECT_EQ(to_json(*best_records(l3.records)[0]), to_json(*t.best));
  // A confirmed record that 8 faster single measurements push out of the candidates held for
  // confirmation, and those 8 confirm slower than it: the tuner's best is that earlier record,
  // as in the log.
  {
    const std::string log4 = temp_path("confirm_earlier.jsonl");
    std::filesystem::remove(log4);
    const TuneRecord held = *best_records(l3.records)[0];
    {
      LogWriter w(log4);
      w.append(held);
      int singles = 0;
      for (const TuneRecord& r : l.records) {
        if (r.result.confirm_rounds || !r.result.ok() || singles == 8 ||
            candidate_signature(r.candidate) == candidate_signature(held.candidate))
          continue;
        TuneRecord fast = r;
        fast.result.median_us = held.result.median_us * (0.5 + 0.01 * singles++);
        fast.result.times_us = {fast.result.median_us};
        w.append(fast);
      }
      ASSERT_EQ(singles, 8);
    }
    struct SlowMeasurer : LuckyMeasurer {
      double floor_us = 0;
      MeasureResult measure(const Compute& c, const ImplicitGemm& g, const ScheduleParams& p, const KernelSource& k,
                            const CompileResult& b) override {
        MeasureResult r = LuckyMeasurer::measure(c, g, p, k, b);
        r.median_us += floor_us;
        r.times_us = {r.median_us};
        return r;
      }
    } slow;
    slow.flaky = "none";
    slow.floor_us = held.result.median_us;
    TuneOptions fourth = third;
    fourth.log_path = log4;
    const TuneSummary u = tune(c, shipped(), fourth, slow);
    EXPECT_EQ(u.confirmed, 4);
    const LogContents l4 = read_log(log4);
    ASSERT_EQ(l4.records.size(), 9u + 4u);
    ASSERT_TRUE(u.best);
    EXPECT_EQ(to_json(*u.best), to_json(held)) << "the best is the record confirmed in an earlier run";
    EXPECT_EQ(to_json(*best_records(l4.records)[0]), to_json(*u.best));
    std::filesystem::remove(log4);
  }
  // No confirmation after a stop.
  std::atomic<bool> stop{true};
  TuneOptions stopped = o;
  stopped.log_path.clear();
  stopped.stop = &stop;
  LuckyMeasurer m3;
  EXPECT_EQ(tune(c, shipped(), stopped, m3).confirmed, 0);
  std::filesystem::remove(log);
}

TEST(Tuner, BudgetsAndTheStopFlagEndTheSearch) {
  Compute c = build_compute(builtin_op("gemm"), parse_param_overrides({"M=256", "N=256", "K=256"}));
  {
    // Ctrl-C during the third measurement of the second batch: that measurement finishes and is
    // recorded, the rest of the batch is not measured, and the log holds exactly what was measured.
    struct StopDuring : SyntheticMeasurer {
      std::atomic<bool> stop{false};
      MeasureResult measure(const Compute& c, const ImplicitGemm& g, const ScheduleParams& p, const KernelSource& k,
                            const CompileResult& bin) override {
        MeasureResult r = SyntheticMeasurer::measure(c, g, p, k, bin);
        if (calls == 11) stop = true;
        return r;
      }
    } m;
    const std::string log = (std::filesystem::temp_directory_path() / "tmap_stop_flag.jsonl").string();
    std::filesystem::remove(log);
    TuneOptions o = synthetic_options(log, 200);
    o.stop = &m.stop;
    TuneSummary s = tune(c, shipped(), o, m);
    EXPECT_TRUE(s.stopped);
    EXPECT_EQ(s.stop_reason, "stopped by the user");
    EXPECT_EQ(m.calls, 11);
    EXPECT_EQ(s.measured, 11);
    EXPECT_EQ(read_log(log).records.size(), 11u);
    std::filesystem::remove(log);
  }
  {
    SyntheticMeasurer m;
    TuneOptions o = synthetic_options("", 200);
    o.early_stop = 8;
    TuneSummary s = tune(c, shipped(), o, m);
    EXPECT_LT(s.measured, 200);
    EXPECT_NE(s.stop_reason.find("no improvement"), std::string::npos) << s.stop_reason;
  }
  {
    // No trial count: the time budget alone ends the run, and progress shows no total.
    SyntheticMeasurer m;
    TuneOptions o = synthetic_options("", 0);
    o.time_budget_s = 4;
    std::vector<TuneProgress> seen;
    o.on_progress = [&](const TuneProgress& p) { seen.push_back(p); };
    TuneSummary s = tune(c, shipped(), o, m);
    EXPECT_EQ(s.stop_reason, "time budget reached");
    EXPECT_GE(s.measured, 1);
    ASSERT_FALSE(seen.empty());
    for (const TuneProgress& p : seen) {
      EXPECT_EQ(p.total, 0);
      EXPECT_LE(p.eta_s, o.time_budget_s) << "the ETA is the budget's rest";
    }
    o.time_budget_s = 0;  // neither bound: no trial (a resumed run's confirmation alone)
    EXPECT_EQ(tune(c, shipped(), o, m).measured, 0);
  }
}

TEST(Tuner, ModelRankingWithoutAGpuRecordsUnmeasuredKernelsThatCompile) {
  Compute c = build_compute(builtin_op("conv2d"), parse_param_overrides({"C=64", "K=64", "H=14", "W=14"}));
  const std::string log = temp_path("model.jsonl");
  std::filesystem::remove(log);
  TuneOptions o = synthetic_options(log, 6);
  TuneSummary s = rank_with_model(c, shipped(), o);
  EXPECT_EQ(s.measured, 6);
  EXPECT_EQ(s.failed, 0);
  ASSERT_TRUE(s.best.has_value());
  LogContents l = read_log(log);
  ASSERT_EQ(l.records.size(), 6u);
  double previous = 0;
  for (const auto& r : l.records) {
    EXPECT_EQ(r.result.status, "unmeasured");
    EXPECT_FALSE(r.result.measured());
    EXPECT_GE(r.result.estimated_us, previous) << "ranked best first";
    previous = r.result.estimated_us;
  }
  EXPECT_TRUE(best_records(l.records).empty()) << "unmeasured records are never 'best'";
  std::filesystem::remove(log);
}

}  // namespace
}  // namespace tmap

namespace tmap {
namespace {

// A table of separate problems (TuneObjective::kGeomean): a short row gets batches beside a long
// one after the warm-up, where the model's total gives them all to the long one.
TEST(ModelTuner, AGeometricMeanObjectiveGivesShortRowsTrials) {
  Compute big = build_compute(builtin_op("gemm"), parse_param_overrides({"M=4096", "N=4096", "K=4096"}));
  Compute small = build_compute(builtin_op("gemm"), parse_param_overrides({"M=128", "N=128", "K=64"}));
  std::map<TuneObjective, std::pair<int, int>> measured;  // big's, small's
  for (const TuneObjective objective : {TuneObjective::kTotal, TuneObjective::kGeomean}) {
    const std::string log = temp_path("model_objective.jsonl");
    std::filesystem::remove(log);
    ModelTuneOptions o;
    o.tune = synthetic_options(log, 0);
    o.tune.batch = 4;  // a warm-up of 3 x 4 trials each, then 4 batches
    o.trials = 40;
    o.objective = objective;
    SyntheticMeasurer m;
    const ModelTuneSummary s = tune_model({{"big", &big, 1}, {"small", &small, 1}}, shipped(), o, m);
    ASSERT_EQ(s.tasks.size(), 2u);
    EXPECT_EQ(s.measured, 40);
    ASSERT_TRUE(s.tasks[0].summary.best && s.tasks[1].summary.best);
    EXPECT_GT(s.tasks[0].summary.best->result.median_us, 10 * s.tasks[1].summary.best->result.median_us);
    measured[objective] = {s.tasks[0].summary.measured, s.tasks[1].summary.measured};
    std::filesystem::remove(log);
  }
  EXPECT_EQ(measured[TuneObjective::kTotal].second, 3 * 4) << "the warm-up alone: the rest goes where the time is";
  EXPECT_GT(measured[TuneObjective::kGeomean].second, 3 * 4) << "batches beyond the warm-up";
  EXPECT_LT(measured[TuneObjective::kGeomean].first, measured[TuneObjective::kTotal].first);
}

TEST(ModelTuner, OneBudgetGoesWhereTheModelTimeIsAndResumes) {
  Compute heavy = build_compute(builtin_op("gemm"), parse_param_overrides({"M=512", "N=512", "K=512"}));
  Compute light = build_compute(builtin_op("gemm"), parse_param_overrides({"M=512", "N=512", "K=256"}));
  Compute same_as_heavy = build_compute(builtin_op("gemm"), parse_param_overrides({"M=512", "N=512", "K=512"}));
  const std::string log = temp_path("model_tune.jsonl");
  std::filesystem::remove(log);
  ModelTuneOptions o;
  o.tune = synthetic_options(log, 0);
  o.trials = 64;
  int progress_calls = 0, last_trials = 0;
  o.on_progress = [&](const ModelProgress& p) {
    ++progress_calls;
    EXPECT_GE(p.trials, last_trials);
    last_trials = p.trials;
    EXPECT_EQ(p.tasks, 2);
    EXPECT_EQ(p.total_trials, 64);
  };
  // The heavy workload runs 50 times per inference (twice listed: merged by key), the light once.
  std::vector<ModelTask> tasks = {{"heavy", &heavy, 30}, {"light", &light, 1}, {"heavy_again", &same_as_heavy, 20}};
  SyntheticMeasurer first;
  ModelTuneSummary s = tune_model(tasks, shipped(), o, first);
  ASSERT_EQ(s.tasks.size(), 2u);
  EXPECT_EQ(s.measured, 64);
  EXPECT_EQ(first.calls, 64);
  EXPECT_EQ(s.stop_reason, "trial budget reached");
  const ModelTaskResult& h = s.tasks[0];
  const ModelTaskResult& l = s.tasks[1];
  EXPECT_EQ(h.count, 50);
  EXPECT_EQ(h.summary.measured + l.summary.measured, 64);
  EXPECT_EQ(l.summary.measured, 3 * 8) << "every workload gets the warm-up (3 batches), the light one no more";
  EXPECT_EQ(h.summary.measured, 64 - 3 * 8) << "the batches after the warm-up go where the model's time is";
  ASSERT_TRUE(h.summary.best && l.summary.best);
  EXPECT_DOUBLE_EQ(s.weighted_us(), 50 * h.summary.best->result.median_us + l.summary.best->result.median_us);
  EXPECT_GT(progress_calls, 0);
  EXPECT_EQ(read_log(log).records.size(), 64u);

  // Resume: both workloads start from their records, nothing is measured twice.
  SyntheticMeasurer second;
  o.trials = 16;
  o.on_progress = nullptr;
  ModelTuneSummary r = tune_model(tasks, shipped(), o, second);
  EXPECT_EQ(r.tasks[0].summary.resumed, h.summary.measured);
  EXPECT_EQ(r.tasks[1].summary.resumed, l.summary.measured);
  EXPECT_EQ(r.measured, 16);
  for (const auto& k : second.keys) EXPECT_FALSE(first.keys.count(k)) << "measured again: " << k;
  EXPECT_LE(r.weighted_us(), s.weighted_us());

  // A new workload of the same op: the log's fastest schedules of the two others are its seeds.
  Compute medium = build_compute(builtin_op("gemm"), parse_param_overrides({"M=512", "N=512", "K=384"}));
  const std::string fresh = temp_path("model_tune_seeded.jsonl");
  std::filesystem::remove(fresh);
  ModelTuneOptions seeded = o;
  seeded.tune.log_path = fresh;
  seeded.tune.prior_logs = {log};
  seeded.trials = 8;
  SyntheticMeasurer fifth;
  ModelTuneSummary v = tune_model({{"medium", &medium, 1}}, shipped(), seeded, fifth);
  EXPECT_GE(v.tasks[0].summary.offered, 1) << "no schedule of the prior log was offered as a seed";
  std::filesystem::remove(fresh);

  // The same workloads again into a new log (another GPU's tuning from this one's): each first
  // measures its own fastest schedules of the prior log, so that a short run keeps their bests.
  ModelTuneOptions again = seeded;
  again.trials = 16;
  SyntheticMeasurer sixth;
  ModelTuneSummary w = tune_model(tasks, shipped(), again, sixth);
  ASSERT_EQ(w.tasks.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const ModelTaskResult& before = i == 0 ? h : l;
    ASSERT_TRUE(w.tasks[i].summary.best) << before.name;
    EXPECT_EQ(w.tasks[i].summary.resumed, 0) << "a prior log is not resumed";
    EXPECT_LE(w.tasks[i].summary.best->result.median_us, before.summary.best->result.median_us) << before.name;
  }
  std::filesystem::remove(fresh);

  // A time budget alone, and the stop flag.
  o.trials = 0;
  o.time_budget_s = 1e-3;
  SyntheticMeasurer third;
  ModelTuneSummary t = tune_model(tasks, shipped(), o, third);
  EXPECT_EQ(t.stop_reason, "time budget reached");
  // The first candidate always runs; the GPU starts the next compiled one before the first's
  // result is read (and the budget looked at), and no more.
  EXPECT_LE(third.calls, 2);
  std::atomic<bool> stop{true};
  o.tune.stop = &stop;
  o.time_budget_s = 60;
  SyntheticMeasurer fourth;
  ModelTuneSummary u = tune_model(tasks, shipped(), o, fourth);
  EXPECT_TRUE(u.stopped);
  EXPECT_EQ(fourth.calls, 0);
  std::filesystem::remove(log);
}

}  // namespace
}  // namespace tmap

namespace tmap {
namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(Shards, NamedByNumberOrByTheScheduler) {
  const EnvLookup none = env_of({});
  EXPECT_EQ(parse_shard("2/5", none).index, 2);
  EXPECT_EQ(parse_shard("2/5", none).count, 5);
  // A Slurm array --array=4-6: task 5 is shard 1 of 3.
  const Shard slurm = parse_shard("auto", env_of({{"SLURM_ARRAY_TASK_ID", "5"}, {"SLURM_ARRAY_TASK_MIN", "4"},
                                                  {"SLURM_ARRAY_TASK_COUNT", "3"}}));
  EXPECT_EQ(slurm.index, 1);
  EXPECT_EQ(slurm.count, 3);
  const Shard k8s = parse_shard("auto/4", env_of({{"JOB_COMPLETION_INDEX", "3"}}));
  EXPECT_EQ(k8s.index, 3);
  EXPECT_EQ(k8s.count, 4);
  struct Bad {
    std::string text;
    std::map<std::string, std::string> env;
    std::string says;
  };
  for (const Bad& b : std::vector<Bad>{
           {"5/5", {}, "does not exist"},
           {"-1/2", {}, "is no shard"},
           {"1/0", {}, "does not exist"},
           {"two/3", {}, "is no shard"},
           {"3", {}, "is no shard"},
           {"auto", {}, "SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT"},
           {"auto", {{"JOB_COMPLETION_INDEX", "1"}}, "--shard auto/N"},
           {"auto/2", {}, "JOB_COMPLETION_INDEX"},
           {"auto/2", {{"JOB_COMPLETION_INDEX", "2"}}, "does not exist"},
           {"auto/2", {{"JOB_COMPLETION_INDEX", "x1"}}, "not a number"},
       }) {
    try {
      parse_shard(b.text, env_of(b.env));
      ADD_FAILURE() << b.text << " was accepted";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(b.says), std::string::npos) << b.text << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("--shard"), std::string::npos) << e.what();
    }
  }
}

TEST(Shards, SplitEveryWorkloadOnceBalancedByCost) {
  std::vector<double> costs;
  for (int i = 0; i < 23; ++i) costs.push_back(tuning_cost_estimate(1e9 * ((i * 7919) % 97 + 1) * (i % 5 == 0 ? 1000 : 1)));
  for (int n : {1, 2, 3, 7, 30}) {
    std::vector<int> owner(costs.size(), -1);
    std::vector<double> load(static_cast<std::size_t>(n), 0);
    for (int s = 0; s < n; ++s)
      for (std::size_t w : shard_workloads(costs, {s, n})) {
        EXPECT_EQ(owner[w], -1) << "workload " << w << " in two shards of " << n;
        owner[w] = s;
        load[static_cast<std::size_t>(s)] += costs[w];
      }
    for (std::size_t w = 0; w < costs.size(); ++w) EXPECT_NE(owner[w], -1) << "workload " << w << " in no shard of " << n;
    // Greedy largest-first: no shard exceeds another by more than its largest workload.
    const double most = *std::max_element(costs.begin(), costs.end());
    EXPECT_LE(*std::max_element(load.begin(), load.end()) - *std::min_element(load.begin(), load.end()), most + 1e-9);
    EXPECT_EQ(shard_workloads(costs, {0, n}), shard_workloads(costs, {0, n})) << "the split is deterministic";
  }
  EXPECT_GT(tuning_cost_estimate(1e13), tuning_cost_estimate(1e9)) << "a long kernel costs more to measure";
}

TEST(TuneLog, MergeKeepsEachRecordOnceAndRefusesOtherSchemas) {
  const Compute a = build_compute(builtin_op("gemm"), parse_param_overrides({"M=128", "N=128", "K=64"}));
  const Compute b = build_compute(builtin_op("gemm"), parse_param_overrides({"M=256", "N=128", "K=64"}));
  const std::string p1 = temp_path("merge1.jsonl"), p2 = temp_path("merge2.jsonl"), p3 = temp_path("merge3.jsonl");
  const TuneRecord slow = sample_record(a, "ok", 20), fast = sample_record(a, "ok", 10), other = sample_record(b, "ok", 5);
  std::ofstream(p1) << to_json(slow).dump() << "\n" << to_json(fast).dump() << "\n";
  std::ofstream(p2) << to_json(fast).dump() << "\n" << to_json(other).dump() << "\n";  // `fast` again
  const MergedLogs all = merge_logs({p1, p2}, false);
  EXPECT_EQ(all.read, 4u);
  EXPECT_EQ(all.duplicates, 1u);
  ASSERT_EQ(all.records.size(), 3u);
  EXPECT_EQ(to_json(all.records[2]).dump(), to_json(other).dump()) << "first-seen order";
  const MergedLogs best = merge_logs({p1, p2}, true);
  ASSERT_EQ(best.records.size(), 2u);
  EXPECT_DOUBLE_EQ(best.records[0].result.median_us, 10);
  nlohmann::json future = to_json(other);
  future["schema"] = kLogSchemaVersion + 1;
  std::ofstream(p3) << to_json(slow).dump() << "\n" << future.dump() << "\n";
  try {
    merge_logs({p1, p3}, false);
    ADD_FAILURE() << "a record of another schema version was merged";
  } catch (const UserError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(p3 + ":2"), std::string::npos) << m;
    EXPECT_NE(m.find("schema version " + std::to_string(kLogSchemaVersion + 1)), std::string::npos) << m;
    EXPECT_NE(m.find("hint:"), std::string::npos) << m;
  }
  for (const auto& p : {p1, p2, p3}) std::filesystem::remove(p);
}

}  // namespace
}  // namespace tmap

namespace tmap {
namespace {

/// The synthetic measurer as GPU `index` of a host. With `wait_for`, its first measurement waits
/// (up to 20 s) until that GPU has measured, so that a test sees both at work.
class HostGpu : public Measurer {
 public:
  explicit HostGpu(int index, const HostGpu* wait_for = nullptr) : index_(index), wait_for_(wait_for) {}
  MeasureResult measure(const Compute& c, const ImplicitGemm& g, const ScheduleParams& p, const KernelSource& k,
                        const CompileResult& bin) override {
    const auto t0 = std::chrono::steady_clock::now();
    while (wait_for_ && calls == 0 && wait_for_->calls == 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20))
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    MeasureResult r = synthetic_.measure(c, g, p, k, bin);
    ++calls;
    return r;
  }
  MeasureGpu gpu() const override { return {index_, uuid(index_), "synthetic"}; }
  static std::string uuid(int index) { return "GPU-0000000" + std::to_string(index) + "-0000-4000-8000-000000000000"; }
  std::atomic<int> calls{0};

 private:
  int index_;
  const HostGpu* wait_for_;
  SyntheticMeasurer synthetic_;
};

/// Model-level tuning of `trials` on the synthetic GPUs of a pool, one warm-up batch each.
ModelTuneOptions pool_model_options(const std::string& log, int trials) {
  ModelTuneOptions mo;
  mo.tune = synthetic_options(log, 0);
  mo.trials = trials;
  mo.warmup_batches = 1;
  return mo;
}

TEST(MeasurePool, EachGpuRunsOneJobAndAllRunAtOnce) {
  HostGpu g0(0), g1(1), g2(2);
  MeasurePool pool({&g0, &g1, &g2});
  std::atomic<int> running{0}, peak{0};
  auto job = [&](Measurer& m) {
    const int now = ++running;
    for (int seen = peak; now > seen && !peak.compare_exchange_weak(seen, now);) {}
    const auto t0 = std::chrono::steady_clock::now();  // all three must be running to go on
    while (peak < 3 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20))
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    --running;
    MeasureResult r;
    r.status = MeasureStatus::kOk;
    r.median_us = m.gpu().index + 1;
    return r;
  };
  std::set<std::size_t> used;
  for (std::uint64_t tag = 0; tag < 3; ++tag) used.insert(pool.submit(tag, job));
  EXPECT_EQ(used.size(), 3u);
  EXPECT_EQ(pool.idle(), 0u);
  std::set<std::uint64_t> tags;
  for (int i = 0; i < 3; ++i) {
    std::optional<MeasurePool::Done> d = pool.collect(-1);
    ASSERT_TRUE(d);
    tags.insert(d->tag);
    EXPECT_EQ(d->result.median_us, d->gpu + 1) << "a job ran on the GPU it was given";
    EXPECT_GE(d->seconds, 0.019);
  }
  EXPECT_EQ(tags.size(), 3u);
  EXPECT_EQ(peak, 3) << "the GPUs did not measure at once";
  EXPECT_FALSE(pool.collect(0)) << "nothing is in flight";
  // A job that throws (the worker could not be started) is a worker error, not the tuner's death.
  pool.submit(9, [](Measurer&) -> MeasureResult { throw std::runtime_error("fork: Resource temporarily unavailable"); });
  std::optional<MeasurePool::Done> failed = pool.collect(-1);
  ASSERT_TRUE(failed);
  EXPECT_EQ(failed->result.status, MeasureStatus::kWorkerError);
  EXPECT_NE(failed->result.message.find("fork"), std::string::npos) << failed->result.message;
  // What bounded the rate, from the GPUs' busy time.
  double busy = 0;
  int measured = 0;
  for (const MeasurePool::Usage& u : pool.usage()) busy += u.busy_s, measured += u.measured;
  EXPECT_EQ(measured, 4);
  EXPECT_EQ(bound_by(pool, busy / 3, 0), "measurement");
  EXPECT_EQ(bound_by(pool, busy * 10, 0), "the search");
  EXPECT_EQ(bound_by(pool, busy * 10, busy * 10 * 3 * 0.5), "compilation");
}

TEST(MeasurePool, EachResultGoesBackToTheTaskThatSubmittedIt) {
  struct Client : MeasureClient {
    std::vector<std::uint64_t> tags;
    void measured(MeasurePool::Done d, MeasurePool&) override { tags.push_back(d.tag); }
  };
  HostGpu g0(0), g1(1);
  MeasurePool pool({&g0, &g1});
  Client a, b;
  auto job = [](Measurer&) {
    MeasureResult r;
    r.status = MeasureStatus::kOk;
    r.median_us = 1;
    return r;
  };
  pool.submit(7, job, &a);
  pool.submit(7, job, &b);  // tags are each client's own
  std::optional<MeasurePool::Done> first = pool.collect(-1);
  ASSERT_TRUE(first);
  pool.deliver(std::move(*first));
  pool.deliver_all();
  EXPECT_EQ(a.tags, std::vector<std::uint64_t>{7});
  EXPECT_EQ(b.tags, std::vector<std::uint64_t>{7});
  EXPECT_EQ(pool.in_flight(), 0u);
  // While unwinding, results are waited for and dropped: their tasks may be gone.
  pool.submit(8, job, &a);
  pool.abandon_all();
  EXPECT_EQ(pool.in_flight(), 0u);
  EXPECT_EQ(a.tags.size(), 1u);
  pool.submit(9, job);
  std::optional<MeasurePool::Done> orphan = pool.collect(-1);
  ASSERT_TRUE(orphan);
  EXPECT_THROW(pool.deliver(std::move(*orphan)), InternalError) << "a job without a client has nobody to go to";
}

TEST(MeasurePool, GpusAreChosenByIndexAndOfOneModel) {
  const std::vector<DeviceInfo> host = {{0, "NVIDIA H100 80GB HBM3", 90, 132, 0, "GPU-a"},
                                        {1, "NVIDIA H100 80GB HBM3", 90, 132, 0, "GPU-b"},
                                        {2, "NVIDIA H100 80GB HBM3", 90, 132, 0, "GPU-c"}};
  EXPECT_EQ(choose_gpus("all", host).size(), 3u);
  EXPECT_EQ(choose_gpus("", host).size(), 3u);
  const std::vector<DeviceInfo> two = choose_gpus("2,0", host);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].uuid, "GPU-c");
  EXPECT_EQ(two[1].uuid, "GPU-a");
  auto refusal = [&](const std::string& spec, const std::vector<DeviceInfo>& devices) {
    try {
      choose_gpus(spec, devices);
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(refusal("3", host).find("there is no GPU 3 (3 visible"), std::string::npos) << refusal("3", host);
  EXPECT_NE(refusal("0,0", host).find("named twice"), std::string::npos);
  EXPECT_NE(refusal("0,,1", host).find("'' is not a GPU index"), std::string::npos);
  EXPECT_NE(refusal("-1", host).find("'-1' is not a GPU index"), std::string::npos);
  EXPECT_NE(refusal("99999999999", host).find("is not a GPU index"), std::string::npos);
  std::vector<DeviceInfo> mixed = host;
  mixed[1] = {1, "NVIDIA A100-SXM4-80GB", 80, 108, 0, "GPU-d"};
  EXPECT_NE(refusal("all", mixed).find("are different models"), std::string::npos) << refusal("all", mixed);
  EXPECT_NE(refusal("all", mixed).find("--gpus 1"), std::string::npos) << "the fix names a GPU";
  EXPECT_EQ(choose_gpus("0,2", mixed).size(), 2u) << "GPUs of one model on a mixed host";
}

// Tuning on two GPUs: both measure, every record names its GPU, and the confirmation of the
// fastest candidates runs on the first alone, so that the winner is ranked on one device.
TEST(Tuner, SeveralGpusMeasureAtOnceAndTheFirstConfirms) {
  Compute c = build_compute(builtin_op("gemm"), parse_param_overrides({"M=512", "N=256", "K=512"}));
  const std::string log = temp_path("two_gpus.jsonl");
  std::filesystem::remove(log);
  HostGpu g1(1);
  HostGpu g0(0, &g1);  // GPU 0 waits for GPU 1's first measurement
  MeasurePool pool({&g0, &g1});
  TuneOptions o = synthetic_options(log, 24);
  o.confirm_top = 2;
  int progress = 0;
  o.on_progress = [&](const TuneProgress& p) {
    ++progress;
    ASSERT_EQ(p.gpus, &pool);
  };
  TuneSummary s = tune(c, shipped(), o, pool);
  EXPECT_EQ(s.measured, 24);
  EXPECT_EQ(s.confirmed, 2);
  EXPECT_EQ(progress, 24);
  EXPECT_GT(g1.calls, 0);
  EXPECT_GT(g0.calls, 0);
  LogContents l = read_log(log);
  ASSERT_EQ(l.records.size(), 24u + 2u);
  std::map<int, int> trials_on;
  for (const TuneRecord& r : l.records) {
    ASSERT_TRUE(r.result.gpu == 0 || r.result.gpu == 1) << r.result.gpu;
    EXPECT_EQ(r.result.gpu_uuid, HostGpu::uuid(r.result.gpu));
    if (r.result.confirm_rounds) EXPECT_EQ(r.result.gpu, 0) << "a confirmation ran on another GPU";
    else ++trials_on[r.result.gpu];
  }
  EXPECT_EQ(trials_on[0] + trials_on[1], 24);
  EXPECT_EQ(pool.usage()[0].measured + pool.usage()[1].measured, 24 + 2 * o.confirm_rounds);
  EXPECT_EQ(pool.usage()[1].workload, c.name);

  // A model's workloads on the same two GPUs: the total's history is kept for the scale-out goals.
  // (A fresh log: a confirmed record resumed from it would outrank this run's faster single ones.)
  Compute other = build_compute(builtin_op("gemm"), parse_param_overrides({"M=256", "N=256", "K=512"}));
  std::filesystem::remove(log);
  ModelTuneSummary m = tune_model({{"a", &c, 1}, {"b", &other, 2}}, shipped(), pool_model_options(log, 16), pool);
  EXPECT_EQ(m.measured, 16);
  ASSERT_FALSE(m.history.empty());
  EXPECT_DOUBLE_EQ(m.history.back().second, m.weighted_us());
  for (std::size_t i = 1; i < m.history.size(); ++i) EXPECT_LT(m.history[i].second, m.history[i - 1].second);
  std::filesystem::remove(log);
}

// Model-level tuning starts the next workload's candidates while the last ones of a batch are
// measured: GPU 1's first measurement of the first workload waits until GPU 0 measures the
// second, which can only happen when the first one's round has returned with it in flight.
TEST(ModelTuner, TheNextWorkloadStartsWhileABatchIsFinishing) {
  Compute big = build_compute(builtin_op("gemm"), parse_param_overrides({"M=512", "N=256", "K=512"}));
  Compute small = build_compute(builtin_op("gemm"), parse_param_overrides({"M=256", "N=256", "K=256"}));
  std::atomic<bool> small_started{false};
  class HeldGpu : public HostGpu {
   public:
    HeldGpu(int index, const Compute& big, const Compute& small, std::atomic<bool>& small_started)
        : HostGpu(index), big_(big), small_(small), small_started_(small_started) {}
    MeasureResult measure(const Compute& c, const ImplicitGemm& g, const ScheduleParams& p, const KernelSource& k,
                          const CompileResult& bin) override {
      if (&c == &small_) small_started_ = true;
      if (gpu().index == 1 && &c == &big_ && !held) {
        held = true;
        const auto t0 = std::chrono::steady_clock::now();
        while (!small_started_ && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10))
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        overlapped = small_started_.load();
      }
      return HostGpu::measure(c, g, p, k, bin);
    }
    bool held = false, overlapped = false;

   private:
    const Compute &big_, &small_;
    std::atomic<bool>& small_started_;
  };
  HeldGpu g0(0, big, small, small_started), g1(1, big, small, small_started);
  MeasurePool pool({&g0, &g1});
  const std::string log = temp_path("overlap.jsonl");
  std::filesystem::remove(log);
  ModelTuneSummary m = tune_model({{"big", &big, 1}, {"small", &small, 1}}, shipped(), pool_model_options(log, 32), pool);
  EXPECT_TRUE(g1.held);
  EXPECT_TRUE(g1.overlapped) << "the second workload waited for the first one's batch to end";
  EXPECT_EQ(m.measured, 32);
  EXPECT_EQ(pool.in_flight(), 0u);
  EXPECT_EQ(read_log(log).records.size(), 32u) << "every measurement is recorded, by whichever run collected it";
  std::filesystem::remove(log);
}

/// A range's kernel `g` measured at `size`: its synthetic time there.
MeasureResult synthetic_at(const ImplicitGemm& g, std::int64_t size, const ScheduleParams& p) {
  MeasureResult r;
  r.status = MeasureStatus::kOk;
  r.median_us = synthetic_us(gemm_at_size(g, size), p);
  r.times_us = {r.median_us};
  return r;
}

TEST(RangeTuner, SamplesAreTheEndsPowersOfTwoAndMidpoints) {
  EXPECT_EQ(range_sample_sizes(1, 256),
            (std::vector<std::int64_t>{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256}));
  EXPECT_EQ(range_sample_sizes(5, 100), (std::vector<std::int64_t>{5, 6, 8, 12, 16, 24, 32, 48, 64, 96, 100}));
  EXPECT_EQ(range_sample_sizes(7, 8), (std::vector<std::int64_t>{7, 8}));
}

// The samples' first batches start at the range's ends and then fill the largest gaps (in log
// of size), so that a budget ending within the first round leaves out only samples near others.
TEST(RangeTuner, SamplesTakeTheirFirstLooksFromTheEndsInwards) {
  const std::vector<std::int64_t> decode = {1, 2, 3, 4, 8, 13, 16, 32, 57, 64, 100, 128, 200, 256};
  const std::vector<std::size_t> order = range_look_order(decode);
  ASSERT_EQ(order.size(), decode.size());
  EXPECT_EQ(std::set<std::size_t>(order.begin(), order.end()).size(), decode.size()) << "each sample once";
  std::vector<std::int64_t> sizes;
  for (std::size_t i : order) sizes.push_back(decode[i]);
  EXPECT_EQ(std::vector<std::int64_t>(sizes.begin(), sizes.begin() + 5), (std::vector<std::int64_t>{256, 1, 16, 4, 64}));
  // The first half already has a sample within a factor of 2 of every size of the range.
  for (std::int64_t m : decode) {
    const bool near = std::any_of(sizes.begin(), sizes.begin() + 7, [&](std::int64_t s) { return s <= 2 * m && m <= 2 * s; });
    EXPECT_TRUE(near) << m;
  }
  EXPECT_EQ(range_look_order({5}), (std::vector<std::size_t>{0}));
  EXPECT_EQ(range_look_order({7, 8}), (std::vector<std::size_t>{1, 0}));
  EXPECT_TRUE(range_look_order({}).empty());
  EXPECT_EQ(range_look_order({0, 1, 8}), (std::vector<std::size_t>{2, 0, 1})) << "a size of 0 counts as 1";
}

TEST(RangeTuner, BucketsAreTheFewestWithinTheLoss) {
  const double inf = std::numeric_limits<double>::infinity();
  // Candidate 0 is best at the small sizes, 1 at the large ones, 2 is close everywhere but the last.
  const std::vector<std::vector<double>> us = {{10, 20, 40, 90, 200}, {12, 24, 41, 80, 160}, {10.4, 20.8, 41.6, 83, inf}};
  const std::vector<double> best = {10, 20, 40, 80, 160};
  std::vector<BucketChoice> b = choose_buckets(us, best, 0.05);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].first, 0u);
  EXPECT_EQ(b[1].last, 4u);
  EXPECT_EQ(b[0].last + 1, b[1].first);
  EXPECT_EQ(b[1].candidate, 1);  // the only one within 5% at 160
  // With a 50% loss one kernel serves all that it runs at; at none of them the fastest alone.
  EXPECT_EQ(choose_buckets({us[1]}, best, 0.5).size(), 1u);
  b = choose_buckets({{10, 50, 40}}, {10, 20, 40}, 0.05);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[1].candidate, 0);  // no candidate within the loss at 20: the fastest, alone
  b = choose_buckets({{10, inf, 40}}, {10, 20, 40}, 0.05);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[1].candidate, -1);  // every candidate failed there: reported, not served

  // At most one bucket: the kernel whose worst ratio is lowest, beyond the loss.
  b = choose_buckets(us, best, 0.05, 1);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].first, 0u);
  EXPECT_EQ(b[0].last, 4u);
  EXPECT_EQ(b[0].candidate, 1);  // at worst 1.2x, where candidate 0 is at 1.25x
  EXPECT_EQ(choose_buckets(us, best, 0.05, 2).size(), 2u);  // what the loss needs, within the limit
  // Three kernels each best on a third; the second is 1.1x on the last third: two buckets.
  const std::vector<std::vector<double>> thirds = {
      {10, 10, 13, 13, 13, 13}, {12, 12, 10, 10, 11, 11}, {13, 13, 13, 13, 10, 10}};
  ASSERT_EQ(choose_buckets(thirds, {10, 10, 10, 10, 10, 10}, 0.05).size(), 3u);
  b = choose_buckets(thirds, {10, 10, 10, 10, 10, 10}, 0.05, 2);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].last, 1u);
  EXPECT_EQ(b[0].candidate, 0);
  EXPECT_EQ(b[1].candidate, 1);
  // A sample where every candidate failed stays out of every kernel's bucket, whatever the limit.
  EXPECT_EQ(choose_buckets({{10, inf, 40}}, {10, 20, 40}, 0.05, 2).size(), 3u);
}

TEST(RangeTuner, TunesSamplesMeasuresKernelsOfTheRangeAndDispatchesBySize) {
  const Compute range = build_compute(builtin_op("gemm_nt"), parse_param_overrides({"M=1..100", "N=256", "K=128"}));
  const std::vector<HwAbstraction> hws = {find_hw(shipped(), "mma_sync_fp16_fp32")};
  const std::string log = temp_path("range.jsonl");
  std::filesystem::remove(log);
  SyntheticMeasurer m;
  MeasurePool pool({&m});
  RangeTuneOptions o;
  o.tune = synthetic_options(log, 40);  // the samples get 80%: a batch of 8 each
  o.sizes = {8, 64};  // the range's ends, 1 and 100, are added
  o.per_size = 2;
  int cross = 0;
  std::set<std::int64_t> measured_at;
  const RangeTuneSummary s = tune_range(range, hws, o, pool, [&](const Compute& c, std::int64_t size, int, const ImplicitGemm& g,
                                                                const ScheduleParams& p, const KernelSource& k,
                                                                const CompileResult& b) {
    EXPECT_TRUE(c.dynamic.active());
    EXPECT_TRUE(g.dynamic());
    EXPECT_EQ(k.size_hi, 100);
    EXPECT_TRUE(b.ok) << b.log;
    ++cross;
    measured_at.insert(size);
    MeasureResult r = synthetic_at(g, size, p);
    r.phases = {0.25, 0.5, 0, 0, 1};
    return r;
  });
  EXPECT_EQ(m.calls, 4 * 8);  // every sample tuned, a batch each
  EXPECT_EQ(s.sample_trials, m.calls);  // the summary says what the samples' tuning measured
  EXPECT_GE(s.sample_times.measure_s, 0);
  EXPECT_GT(s.sample_times.measure_s + s.sample_times.propose_s + s.sample_times.record_s, 0);
  EXPECT_GT(s.sample_setup_s, 0);  // its setting up and ending are parts of its time
  EXPECT_GE(s.sample_finish_s, 0);
  EXPECT_LE(s.sample_setup_s + s.sample_finish_s, s.tune_s);
  EXPECT_LE(s.sample_finish_compile_s, s.sample_finish_s);
  // The samples searched the range's kernels, each under a workload of its own.
  EXPECT_EQ(m.keys.size(), 4u * 8);
  std::set<std::string> sample_keys;
  for (const std::string& k : m.keys) sample_keys.insert(k.substr(0, k.find(' ')));
  EXPECT_EQ(sample_keys.size(), 4u);
  for (std::int64_t size : {1, 8, 64, 100}) EXPECT_TRUE(sample_keys.count(make_workload(range_sample(range, size)).key));
  EXPECT_GE(s.candidates, 2);
  EXPECT_EQ(cross, s.measurements);
  EXPECT_DOUBLE_EQ(s.cross_phases.inputs, 0.25 * cross);  // where the workers' time went, summed
  EXPECT_DOUBLE_EQ(s.cross_phases.reference, 0.5 * cross);
  EXPECT_DOUBLE_EQ(s.cross_phases.time, cross);
  for (std::int64_t size : {1, 8, 64, 100}) EXPECT_TRUE(measured_at.count(size)) << size;
  ASSERT_FALSE(s.buckets.empty());
  EXPECT_TRUE(s.unserved.empty());
  // The buckets cover the range in order, without gaps.
  EXPECT_EQ(s.buckets.front().lo, 1);
  EXPECT_EQ(s.buckets.back().hi, 100);
  for (std::size_t i = 1; i < s.buckets.size(); ++i) EXPECT_EQ(s.buckets[i].lo, s.buckets[i - 1].hi + 1);
  EXPECT_EQ(s.points.size(), 4u);
  for (const RangePoint& p : s.points) EXPECT_GT(p.tuned_us, 0) << p.size;

  // The log holds the buckets in force; each serves the sizes within it, and no other.
  const std::vector<TuneRecord> records = read_log(log).records;
  const std::vector<const TuneRecord*> buckets = range_buckets(records);
  ASSERT_EQ(buckets.size(), s.buckets.size());
  for (const TuneRecord* r : buckets) {
    EXPECT_EQ(r->workload.key, make_workload(range).key);
    const Regenerated g = regenerate(*r, hws, 90);
    EXPECT_EQ(g.kernel.size_hi, 100);
  }
  for (std::int64_t size : {1, 2, 57, 64, 65, 100}) {
    const Compute at = build_compute(builtin_op("gemm_nt"), parse_param_overrides({"M=" + std::to_string(size), "N=256", "K=128"}));
    const Dispatch d = dispatch(records, at, "sm_90");
    ASSERT_NE(d.bucket, nullptr) << size;
    EXPECT_EQ(d.size, size);
    EXPECT_LE(d.bucket->result.bucket_lo, size);
    EXPECT_GE(d.bucket->result.bucket_hi, size);
  }
  // The models learn each of the range's records at the size its kernel ran at.
  const DeviceModel h100 = DeviceModel::for_arch(90);
  const MeasuredSet across = measured_sets(records, hws, "sm_90", DeviceLimits::for_arch(90), h100).at(make_workload(range).key);
  std::vector<double> at_sizes;
  for (const TuneRecord& r : records)
    if (r.workload.key == make_workload(range).key && r.result.ok()) {
      ASSERT_GT(r.result.size, 0);
      const Regenerated g = regenerate(r, hws, 90);
      at_sizes.push_back(analytic_time_us(gemm_at_size(g.gemm(), r.result.size), g.params, h100));
    }
  EXPECT_EQ(across.analytic_us, at_sizes);
  EXPECT_LT(*std::min_element(at_sizes.begin(), at_sizes.end()), *std::max_element(at_sizes.begin(), at_sizes.end()));
  const Compute beyond = build_compute(builtin_op("gemm_nt"), parse_param_overrides({"M=101", "N=256", "K=128"}));
  const Dispatch none = dispatch(records, beyond, "sm_90");
  EXPECT_EQ(none.bucket, nullptr);
  EXPECT_EQ(none.outside, "M=1..100");
  const Compute other = build_compute(builtin_op("gemm_nt"), parse_param_overrides({"M=8", "N=128", "K=128"}));
  EXPECT_EQ(dispatch(records, other, "sm_90").bucket, nullptr);
  EXPECT_EQ(dispatch(records, other, "sm_90").outside, "");
  // Records of a range are not ranked with the shapes' records, nor are its samples' unless
  // asked; pruning keeps the buckets and each sample's best.
  EXPECT_TRUE(best_records(records).empty());
  const auto samples = best_records(records, true);
  EXPECT_EQ(samples.size(), 4u);
  for (const TuneRecord* r : samples) {
    EXPECT_TRUE(is_range_sample(r->workload));
    EXPECT_EQ(r->result.size, 0);
    EXPECT_EQ(regenerate(*r, hws, 90).kernel.size_hi, 100);  // a kernel of the range
  }
  std::size_t kept_buckets = 0, kept_samples = 0;
  for (const TuneRecord* r : kept_records(records)) {
    kept_buckets += r->result.bucket();
    kept_samples += std::count(samples.begin(), samples.end(), r);
  }
  EXPECT_EQ(kept_buckets, buckets.size());
  EXPECT_EQ(kept_samples, samples.size());
  EXPECT_EQ(kept_records(records).size(), buckets.size() + samples.size());

  std::filesystem::remove(log);
}

/// Writes to `log` a record of each (size, schedule) of the range's first mapping as the fastest
/// of that sample's own tuning (1 ns), for tests that skip the samples' tuning.
void log_sample_records(const std::string& log, const Compute& range, const SearchSpace& space, const Target& target,
                        const std::vector<std::pair<std::int64_t, ScheduleParams>>& samples) {
  LogWriter w(log);
  for (const auto& [size, p] : samples) {
    TuneRecord r = sample_record(range_sample(range, size), "ok", 1e-3);
    r.target = target;
    r.candidate = space.ref(0, p);
    w.append(r);
  }
}

/// A range M = 1..100 whose time budget is spent before the measuring across it begins, each end
/// resumed from the log with a different fastest kernel (`fast_small`, `fast_large`; their
/// rasters); at most `max_buckets`. Each size's measured rasters in `rasters`.
RangeTuneSummary tune_spent_range(int max_buckets, int& fast_small, int& fast_large,
                                  std::map<std::int64_t, std::vector<int>>& rasters) {
  const Compute range = build_compute(builtin_op("gemm_nt"), parse_param_overrides({"M=1..100", "N=256", "K=128"}));
  const std::vector<HwAbstraction> hws = {find_hw(shipped(), "mma_sync_fp16_fp32")};
  const std::string log = temp_path("range_budget.jsonl");
  std::filesystem::remove(log);
  RangeTuneOptions o;
  o.tune = synthetic_options(log, 0);
  o.tune.time_budget_s = 1e-3;  // spent before the measuring across begins
  o.sizes = {100};              // and 1, the range's other end
  o.per_size = 1;
  o.max_buckets = max_buckets;
  const SearchSpace space(range, hws, Enumeration::kAll, o.tune.limits, 90);
  ScheduleParams small = default_schedule(space.entries()[0].gemm, o.tune.limits), large = small;
  large.raster = small.raster == 2 ? 4 : 2;
  EXPECT_TRUE(validate(space.entries()[0].gemm, large, o.tune.limits).empty());
  log_sample_records(log, range, space, o.tune.target, {{1, small}, {100, large}});
  fast_small = small.raster;
  fast_large = large.raster;
  SyntheticMeasurer m;
  MeasurePool pool({&m});
  const RangeTuneSummary s = tune_range(range, hws, o, pool, [&](const Compute&, std::int64_t size, int, const ImplicitGemm& g,
                                                                const ScheduleParams& p, const KernelSource&,
                                                                const CompileResult&) {
    rasters[size].push_back(p.raster);
    return synthetic_at(g, size, p);
  });
  std::filesystem::remove(log);
  return s;
}

TEST(RangeTuner, EachSampleDrawsCandidatesOfItsOwn) {
  // A range's samples search the same kernels. Drawn from one random stream, their pools, first
  // looks and picks were the same at every sample, and most of a short run measured the same
  // kernels again at each sample instead of looking further.
  const Compute range = build_compute(builtin_op("gemm_nt"), parse_param_overrides({"M=1..100", "N=256", "K=128"}));
  const std::vector<HwAbstraction> hws = {find_hw(shipped(), "mma_sync_fp16_fp32")};
  const std::string log = temp_path("range_streams.jsonl");
  std::filesystem::remove(log);
  SyntheticMeasurer m;
  MeasurePool pool({&m});
  RangeTuneOptions o;
  o.tune = synthetic_options(log, 80);  // the samples get 64: two batches of 8 each
  o.sizes = {8, 64};
  tune_range(range, hws, o, pool,
             [&](const Compute&, std::int64_t size, int, const ImplicitGemm& g, const ScheduleParams& p,
                 const KernelSource&, const CompileResult&) { return synthetic_at(g, size, p); });
  std::set<std::string> kernels;  // "name:params" of each kernel measured, at whichever sample
  for (const std::string& k : m.keys) kernels.insert(k.substr(k.find(' ') + 1));
  ASSERT_EQ(m.calls, 64);
  EXPECT_GE(kernels.size(), 48u);  // 20 of 64 from one stream
}

TEST(RangeTuner, AnArmsFirstLookIsTakenOnceWithinAFactorOfTwo) {
  // The decode table's samples in the order the warm-up takes them, largest first.
  RangeLooks looks;
  std::vector<std::int64_t> taken;
  for (std::int64_t size : {256, 200, 128, 100, 64, 57, 32, 16, 13, 8, 4, 3, 2, 1})
    if (!looks.taken_near("wgmma ntn", size)) taken.push_back(size);
  EXPECT_EQ(taken, (std::vector<std::int64_t>{256, 100, 32, 13, 4, 1}));
  EXPECT_FALSE(looks.taken_near("mma_sync ntn", 200));  // each arm on its own
  EXPECT_TRUE(looks.taken_near("wgmma ntn", 50));
}

TEST(RangeTuner, ATimeBudgetSpentLeavesOutTheNeighbouringSamples) {
  int small = 0, large = 0;
  std::map<std::int64_t, std::vector<int>> rasters;
  const RangeTuneSummary s = tune_spent_range(0, small, large, rasters);
  // Each kernel at the end it came from (and again there, as its bucket's kernel), not at the other.
  EXPECT_EQ(rasters[1], (std::vector<int>{small, small}));
  EXPECT_EQ(rasters[100], (std::vector<int>{large, large}));
  EXPECT_EQ(s.skipped, 2);
  EXPECT_EQ(s.beyond_budget, 0);
  ASSERT_EQ(s.buckets.size(), 2u);
  EXPECT_EQ(s.buckets[0].candidate.params.raster, small);
}

TEST(RangeTuner, AtMostMaxBucketsTheLeftOutNeighboursAreMeasuredAfterAll) {
  int small = 0, large = 0;
  std::map<std::int64_t, std::vector<int>> rasters;
  const RangeTuneSummary s = tune_spent_range(1, small, large, rasters);
  // Two buckets need no measurement across; one does: each kernel is measured at the other end.
  EXPECT_EQ(s.skipped, 0);
  EXPECT_EQ(s.beyond_budget, 2);
  EXPECT_FALSE(s.over_cap);
  ASSERT_EQ(s.buckets.size(), 1u);
  EXPECT_EQ(s.buckets[0].lo, 1);
  EXPECT_EQ(s.buckets[0].hi, 100);
  EXPECT_NE(std::count(rasters[1].begin(), rasters[1].end(), large), 0);
  EXPECT_NE(std::count(rasters[100].begin(), rasters[100].end(), small), 0);
}

/// Per (raster, size) of a range's kernel: how many times it was measured.
using MeasureCounts = std::map<std::pair<int, std::int64_t>, int>;

/// Tunes the range M = 1..100 (N = 256, K = 128) without tuning its samples (1 and 100): the log
/// holds their fastest, a kernel of each raster in `rasters` at both. At most `max_buckets`; the
/// n-th measurement of a raster at a size across the range, on workspace w, runs in
/// us(raster, size, n, w).
RangeTuneSummary tune_logged_range(const std::vector<int>& rasters, int max_buckets,
                                   const std::function<double(int, std::int64_t, int, int)>& us, MeasureCounts& calls) {
  const Compute range = build_compute(builtin_op("gemm_nt"), parse_param_overrides({"M=1..100", "N=256", "K=128"}));
  const std::vector<HwAbstraction> hws = {find_hw(shipped(), "mma_sync_fp16_fp32")};
  const std::string log = temp_path("range_logged.jsonl");
  std::filesystem::remove(log);
  RangeTuneOptions o;
  o.tune = synthetic_options(log, 0);
  o.tune.time_budget_s = 1e-3;  // no tuning: the log's records are the samples' fastest
  o.sizes = {100};
  o.per_size = static_cast<int>(rasters.size());
  o.max_buckets = max_buckets;
  const SearchSpace space(range, hws, Enumeration::kAll, o.tune.limits, 90);
  std::vector<std::pair<std::int64_t, ScheduleParams>> samples;
  for (int raster : rasters)
    for (std::int64_t size : {1, 100}) {
      ScheduleParams p = default_schedule(space.entries()[0].gemm, o.tune.limits);
      p.raster = raster;
      EXPECT_TRUE(validate(space.entries()[0].gemm, p, o.tune.limits).empty());
      samples.push_back({size, p});
    }
  log_sample_records(log, range, space, o.tune.target, samples);
  SyntheticMeasurer m;
  MeasurePool pool({&m});
  const RangeTuneSummary s = tune_range(range, hws, o, pool, [&](const Compute&, std::int64_t size, int workspace, const ImplicitGemm&,
                                                                const ScheduleParams& p, const KernelSource&,
                                                                const CompileResult&) {
    MeasureResult r;
    r.status = MeasureStatus::kOk;
    r.median_us = us(p.raster, size, ++calls[{p.raster, size}], workspace);
    r.times_us = {r.median_us};
    return r;
  });
  std::filesystem::remove(log);
  return s;
}

// A kernel measured once faster than it runs (a lucky measurement) is not chosen on that
// measurement: each chosen kernel is measured again in its bucket, keeps the slower time, and
// the buckets are chosen again.
TEST(RangeTuner, AKernelIsChosenOnItsSecondMeasurementToo) {
  // Raster 2 ("lucky") runs at 20 us at size 1 but was measured once at 5; raster 1 ("steady")
  // runs at 10. At 100, raster 2 is the faster.
  MeasureCounts calls;
  const RangeTuneSummary s = tune_logged_range({1, 2}, 0, [](int raster, std::int64_t size, int n, int) -> double {
    if (raster == 2) return size == 1 ? (n == 1 ? 5 : 20) : 40;
    return size == 1 ? 10 : 50;
  }, calls);
  ASSERT_EQ(s.buckets.size(), 2u);  // on its first measurement, raster 2 alone would serve the range
  EXPECT_EQ(s.buckets[0].hi, 1);
  EXPECT_EQ(s.buckets[0].candidate.params.raster, 1);
  EXPECT_EQ(s.buckets[1].candidate.params.raster, 2);
  EXPECT_EQ((calls[{2, 1}]), 2);
  EXPECT_EQ((calls[{1, 1}]), 2);
  EXPECT_EQ((calls[{2, 100}]), 2);
  // Never chosen at 100, but its sample's own fastest there (logged first): measured twice for
  // the ratio of the dispatched kernel to it.
  EXPECT_EQ((calls[{1, 100}]), 2);
  ASSERT_EQ(s.points.size(), 2u);
  EXPECT_EQ(s.points[0].dispatched_us, 10);
  EXPECT_EQ(s.points[1].dispatched_us, 40);
  EXPECT_EQ(s.points[0].tuned_us, 10);  // raster 1, the first logged at each size
  EXPECT_EQ(s.points[1].tuned_us, 50);
}

// A kernel whose time depends on where its tensors lie (fast on the workspace its sample was
// tuned on, slow on another) is held to its slower placement: the second measurement of a
// chosen kernel, and of each sample's fastest, is on another workspace.
TEST(RangeTuner, AKernelFastOnlyOnItsSamplesWorkspaceIsNotChosenThere) {
  // Raster 2 runs at 5 us at size 1 on the sample's workspace and at 20 on any other; raster 1
  // runs at 10 on both. At 100, raster 2 is the faster on both.
  MeasureCounts calls;
  std::map<std::pair<int, int>, int> on;  // (n-th measurement, workspace): how many
  const RangeTuneSummary s = tune_logged_range({1, 2}, 0, [&](int raster, std::int64_t size, int n, int workspace) {
    ++on[{n, workspace}];
    if (raster == 2) return size == 1 ? (workspace == 0 ? 5.0 : 20.0) : 40.0;
    return size == 1 ? 10.0 : 50.0;
  }, calls);
  ASSERT_EQ(s.buckets.size(), 2u);
  EXPECT_EQ(s.buckets[0].hi, 1);
  EXPECT_EQ(s.buckets[0].candidate.params.raster, 1);
  EXPECT_EQ(s.buckets[1].candidate.params.raster, 2);
  // Every first measurement on the sample's workspace, every second on another.
  EXPECT_GT((on[{1, 0}]), 0);
  EXPECT_EQ((on[{1, 1}]), 0);
  EXPECT_GT((on[{2, 1}]), 0);
  EXPECT_EQ((on[{2, 0}]), 0);
}

// A candidate measured once luckier than it runs sets the bar at its sample even when no bucket
// takes it: the fastest kernel at each sample is measured again too.
TEST(RangeTuner, ALuckyBestThatNoBucketTakesDoesNotDecideTheBuckets) {
  // Raster 1 runs at 10 and 50 us, raster 2 at 11 and 48; raster 4 at 30 and 60, but was
  // measured at 40 once at size 100. Against 40, raster 2's worst ratio (1.2) beats raster 1's
  // (1.25); against 48 raster 1's (1.04) beats raster 2's (1.1).
  MeasureCounts calls;
  const RangeTuneSummary s = tune_logged_range({1, 2, 4}, 1, [](int raster, std::int64_t size, int n, int) -> double {
    if (raster == 1) return size == 1 ? 10 : 50;
    if (raster == 2) return size == 1 ? 11 : 48;
    return size == 1 ? 30 : n == 1 ? 40 : 60;
  }, calls);
  ASSERT_EQ(s.buckets.size(), 1u);
  EXPECT_EQ(s.buckets[0].candidate.params.raster, 1);
  EXPECT_EQ((calls[{4, 100}]), 2);
}

// The sizes between two buckets' samples go to the later kernel from where it becomes no
// slower than the earlier one: bisected when the later one is slower just after the earlier sample.
TEST(RangeTuner, ABucketStartsWhereItsKernelOvertakesThePreviousOne) {
  // Raster 1 takes 10 + s / 2 us at size s, raster 2 a flat 40: raster 1 serves 1 and raster 2
  // 100; they cross at 60.
  MeasureCounts calls;
  std::set<std::int64_t> between;
  const RangeTuneSummary s = tune_logged_range({1, 2}, 0, [&](int raster, std::int64_t size, int, int) {
    if (size != 1 && size != 100) between.insert(size);
    return raster == 1 ? 10 + size / 2.0 : 40.0;
  }, calls);
  ASSERT_EQ(s.buckets.size(), 2u);
  EXPECT_EQ(s.buckets[0].candidate.params.raster, 1);
  EXPECT_EQ(s.buckets[0].lo, 1);
  EXPECT_EQ(s.buckets[0].hi, 59);
  EXPECT_EQ(s.buckets[1].lo, 60);
  EXPECT_EQ(s.buckets[1].hi, 100);
  EXPECT_TRUE(between.count(2));  // the size after the earlier sample first, then a bisection
  EXPECT_TRUE(between.count(59) && between.count(60));
  EXPECT_LE(between.size(), 8u);
  for (std::int64_t size : between) EXPECT_EQ((calls[{1, size}]), 1) << size;
}

// Where the later kernel is no slower just after the earlier sample, that size alone is measured.
TEST(RangeTuner, ABucketStartsAfterThePreviousSampleWhenItsKernelIsNoSlowerThere) {
  MeasureCounts calls;
  std::set<std::int64_t> between;
  const RangeTuneSummary s = tune_logged_range({1, 2}, 0, [&](int raster, std::int64_t size, int, int) {
    if (size != 1 && size != 100) between.insert(size);
    return raster == 1 ? (size == 1 ? 10.0 : 50.0) : (size == 1 ? 20.0 : 40.0);
  }, calls);
  ASSERT_EQ(s.buckets.size(), 2u);
  EXPECT_EQ(s.buckets[0].hi, 1);
  EXPECT_EQ(s.buckets[1].lo, 2);
  EXPECT_EQ(between, std::set<std::int64_t>{2});
  EXPECT_EQ((calls[{1, 2}]), 1);
  EXPECT_EQ((calls[{2, 2}]), 1);
}

TEST(RangeTuner, RecordsOfARangeNameASizeWithinIt) {
  const Compute range = build_compute(builtin_op("gemm_nt"), parse_param_overrides({"M=1..100", "N=64", "K=64"}));
  TuneRecord r = sample_record(range, "ok", 5);
  r.result.size = 50;
  EXPECT_EQ(record_from_json(to_json(r)).result.size, 50);
  r.result.bucket_lo = 40;
  r.result.bucket_hi = 60;
  const TuneRecord back = record_from_json(to_json(r));
  EXPECT_TRUE(back.result.bucket());
  EXPECT_EQ(back.result.bucket_hi, 60);
  auto refused = [](TuneRecord x) {
    try {
      record_from_json(to_json(x));
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  TuneRecord bad = r;
  bad.result.size = 0;
  EXPECT_NE(refused(bad).find("without its \"size\""), std::string::npos);
  bad = r;
  bad.result.bucket_hi = 101;
  EXPECT_NE(refused(bad).find("not within the compute's range"), std::string::npos);
  bad = r;
  bad.result.size = 70;
  EXPECT_NE(refused(bad).find("outside the record's bucket"), std::string::npos);
  const Compute fixed = build_compute(builtin_op("gemm_nt"), parse_param_overrides({"M=100", "N=64", "K=64"}));
  bad = sample_record(fixed, "ok", 5);
  bad.result.size = 3;
  EXPECT_NE(refused(bad).find("in a record of one shape"), std::string::npos);
  // A sample of the range was measured at its own size, and says no other.
  TuneRecord sample = sample_record(range_sample(range, 8), "ok", 5);
  EXPECT_EQ(record_from_json(to_json(sample)).result.size, 0);
  sample.result.size = 8;
  EXPECT_NE(refused(sample).find("in a record of a range's sample"), std::string::npos);
}

}  // namespace
}  // namespace tmap
