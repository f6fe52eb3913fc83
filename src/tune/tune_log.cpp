#include "tmap/tune/tune_log.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>
#include <type_traits>

#include "tmap/frontend/compute_loader.h"
#include "tmap/support/diagnostic.h"
#include "tmap/support/files.h"
#include "tmap/support/json_integer.h"

namespace tmap {
namespace {

/// `v` as an integer of type T: a JSON integer within T's range (a float such as 8e23 converted
/// unchecked was undefined behaviour, found by fuzz_log).
template <typename T>
T integer(const nlohmann::json& v, const std::string& what) {
  if (!v.is_number_integer()) throw std::runtime_error(what + " is not an integer");
  if (!is_integer_of<T>(v)) throw std::runtime_error(what + " is out of range");
  return static_cast<T>(v.get<std::int64_t>());
}

template <typename T>
T field(const nlohmann::json& j, const char* name) {
  if (!j.contains(name)) throw std::runtime_error(std::string("missing field \"") + name + "\"");
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    return integer<T>(j.at(name), std::string("field \"") + name + "\"");
  } else {
    try {
      return j.at(name).get<T>();
    } catch (const nlohmann::json::exception&) {
      throw std::runtime_error(std::string("field \"") + name + "\" has the wrong type");
    }
  }
}

/// Field `name` of `j` itself, to read in place or move from (field<nlohmann::json> copies it).
template <typename Json>
Json& member(Json& j, const char* name) {
  const auto it = j.find(name);
  if (it == j.end()) throw std::runtime_error(std::string("missing field \"") + name + "\"");
  return *it;
}

/// Field `name` of `j` as a T, or `fallback` when absent; an error naming the field when it has
/// another type.
template <typename T>
T optional_field(const nlohmann::json& j, const char* name, T fallback) {
  return j.contains(name) ? field<T>(j, name) : fallback;
}

}  // namespace

Workload make_workload(const Compute& c) {
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& t : c.tensors)
    tensors.push_back({{"name", t.name}, {"shape", t.shape}, {"dtype", std::string(dtype_name(t.dtype))}});
  nlohmann::json params = nlohmann::json::object();
  for (const auto& [name, value] : c.params) params[name] = value;
  Workload w;
  w.key = workload_key(c);
  w.description = {{"name", c.name},
                   {"statement", c.statement_text()},
                   {"params", params},
                   {"tensors", tensors},
                   {"flops", 2.0 * static_cast<double>(c.iteration_points())}};
  w.compute = to_json(c);
  return w;
}

std::string candidate_label(const CandidateRef& c) {
  std::string axes;
  for (int a = 0; a < 3; ++a) {
    std::string set;
    for (const auto& n : c.axes[a]) set += (set.empty() ? "" : ", ") + n;
    axes += (a ? "x" : "") + ("{" + set + "}");
  }
  return c.hw_abs + " " + c.layout + " " + std::to_string(c.shape[0]) + "x" + std::to_string(c.shape[1]) + "x" +
         std::to_string(c.shape[2]) + " map " + std::to_string(c.mapping_id) + " " + axes +
         (c.params.relayout ? " relayout" : "") + (c.params.relayout == 2 ? " (8-byte)" : "") +
         (c.params.group_pack > 1 ? " groups packed by " + std::to_string(c.params.group_pack) : "");
}

std::string candidate_signature(const CandidateRef& c) {
  return c.hw_abs + " " + c.layout + " " + std::to_string(c.shape[0]) + "x" + std::to_string(c.shape[1]) + "x" +
         std::to_string(c.shape[2]) + " " + std::to_string(c.mapping_id) + " " + to_json(c.params).dump();
}

nlohmann::json to_json(const TuneRecord& r) {
  nlohmann::json workload = r.workload.description;
  workload["key"] = r.workload.key;
  workload["compute"] = r.workload.compute;
  nlohmann::json result = {{"status", r.result.status}, {"measured", r.result.measured()}};
  if (r.result.measured() && r.result.ok()) {
    result["median_us"] = r.result.median_us;
    result["times_us"] = r.result.times_us;
    result["rel_l2"] = r.result.rel_l2;
  }
  if (r.result.estimated_us > 0) result["estimated_us"] = r.result.estimated_us;
  result["compile_seconds"] = r.result.compile_seconds;
  if (!r.result.error.empty()) result["error"] = r.result.error;
  if (r.result.confirm_rounds > 0) result["confirm_rounds"] = r.result.confirm_rounds;
  if (r.result.gpu >= 0) result["gpu"] = {{"index", r.result.gpu}, {"uuid", r.result.gpu_uuid}};
  if (r.result.size > 0) result["size"] = r.result.size;
  if (r.result.bucket()) result["bucket"] = {r.result.bucket_lo, r.result.bucket_hi};
  const CandidateRef& c = r.candidate;
  return {{"schema", kLogSchemaVersion},
          {"recorded_at", r.recorded_at},
          {"workload", workload},
          {"target",
           {{"arch", r.target.arch}, {"device", r.target.device}, {"driver", r.target.driver}, {"cuda", r.target.cuda},
            {"tmap", r.target.tmap}}},
          {"candidate",
           {{"hw_abs", c.hw_abs},
            {"layout", c.layout},
            {"shape", c.shape},
            {"mapping", {{"id", c.mapping_id}, {"i", c.axes[0]}, {"j", c.axes[1]}, {"k", c.axes[2]}}},
            {"params", to_json(c.params)}}},
          {"result", result}};
}

namespace {

/// A result's "gpu": {"index": 0..1023, "uuid": "GPU-" and hex digits in groups, or ""}.
void read_gpu(const nlohmann::json& g, TuneResult& r) {
  if (!g.is_object()) throw std::runtime_error("field \"gpu\" is not an object");
  r.gpu = field<int>(g, "index");
  if (r.gpu < 0 || r.gpu > 1023) throw std::runtime_error("field \"gpu.index\" is not a GPU index (0 to 1023)");
  r.gpu_uuid = field<std::string>(g, "uuid");
  const bool uuid_ok = r.gpu_uuid.empty() || (r.gpu_uuid.size() <= 64 && r.gpu_uuid.rfind("GPU-", 0) == 0 &&
                                              r.gpu_uuid.find_first_not_of("0123456789abcdef-", 4) == std::string::npos);
  if (!uuid_ok) throw std::runtime_error("field \"gpu.uuid\" is not a GPU UUID (GPU- and hex digits)");
}

/// A result's "size" and "bucket" against its compute's range ("dynamic": {"lo", "hi"}): a
/// record of a range is measured at one of its sizes, a bucket serves sizes within it; a
/// sample's (is_range_sample) at the sample's own size, which it does not repeat.
void read_range(const nlohmann::json& res, TuneRecord& r) {
  const nlohmann::json& compute = r.workload.compute;
  std::int64_t lo = 0, hi = 0;
  if (compute.is_object() && compute.contains("dynamic")) {
    const nlohmann::json& d = compute.at("dynamic");
    lo = integer<std::int64_t>(d.at("lo"), "field \"dynamic.lo\"");
    hi = integer<std::int64_t>(d.at("hi"), "field \"dynamic.hi\"");
  }
  TuneResult& x = r.result;
  if (is_range_sample(r.workload)) {
    if (res.contains("size") || res.contains("bucket"))
      throw std::runtime_error("field \"size\" or \"bucket\" in a record of a range's sample");
    return;
  }
  if (res.contains("size")) x.size = integer<std::int64_t>(res["size"], "field \"size\"");
  if (res.contains("bucket")) {
    const nlohmann::json& b = res["bucket"];
    if (!b.is_array() || b.size() != 2) throw std::runtime_error("field \"bucket\" is not [lo, hi]");
    x.bucket_lo = integer<std::int64_t>(b[0], "field \"bucket\"");
    x.bucket_hi = integer<std::int64_t>(b[1], "field \"bucket\"");
    if (!(lo <= x.bucket_lo && x.bucket_lo <= x.bucket_hi && x.bucket_hi <= hi && hi > 0))
      throw std::runtime_error("field \"bucket\" is not within the compute's range of sizes");
  }
  if (hi == 0 && x.size != 0) throw std::runtime_error("field \"size\" in a record of one shape");
  if (hi > 0 && x.measured() && !(lo <= x.size && x.size <= hi))
    throw std::runtime_error("a measured record of a range of sizes without its \"size\" within the range");
  if (x.bucket() && !(x.bucket_lo <= x.size && x.size <= x.bucket_hi))
    throw std::runtime_error("field \"size\" outside the record's bucket");
}

}  // namespace

namespace {

/// The record's workload: its key, checked name, compute (validated when used) and flops; the
/// compute and the description are moved out of `w`.
void read_workload(nlohmann::json& w, TuneRecord& r) {
  r.workload.key = field<std::string>(w, "key");
  if (r.workload.key.size() != 16 || r.workload.key.find_first_not_of("0123456789abcdef") != std::string::npos)
    throw std::runtime_error("field \"key\" is not 16 lowercase hex digits");
  if (const std::string why = name_problem(field<std::string>(w, "name")); !why.empty())
    throw std::runtime_error("field \"name\" is " + why);
  r.flops = field<double>(w, "flops");
  r.workload.compute = std::move(member(w, "compute"));
  w.erase("key");
  w.erase("compute");
  r.workload.description = std::move(w);
}

/// The record's candidate: abstraction, layout, intrinsic shape, mapping and schedule.
void read_candidate(const nlohmann::json& c, TuneRecord& r) {
  // Names (checked where used) and messages below are shown: printable() keeps a log's control
  // characters off the terminal of whoever reads it. A name is escaped but never cut: a valid one
  // of any length stays itself.
  constexpr std::size_t kWhole = std::string::npos;
  r.candidate.hw_abs = printable(field<std::string>(c, "hw_abs"), kWhole);
  r.candidate.layout = printable(field<std::string>(c, "layout"), kWhole);
  const nlohmann::json& shape = member(c, "shape");
  if (!shape.is_array() || shape.size() != 3) throw std::runtime_error("field \"shape\" is not 3 integers");
  for (std::size_t a = 0; a < 3; ++a) r.candidate.shape[a] = integer<std::int64_t>(shape[a], "field \"shape\"");
  const nlohmann::json& m = member(c, "mapping");
  r.candidate.mapping_id = field<int>(m, "id");
  r.candidate.axes = {field<std::vector<std::string>>(m, "i"), field<std::vector<std::string>>(m, "j"),
                      field<std::vector<std::string>>(m, "k")};
  for (auto& axis : r.candidate.axes)
    for (std::string& name : axis) name = printable(name, kWhole);
  try {
    r.candidate.params = schedule_from_json(member(c, "params"));
  } catch (const UserError& e) {
    throw std::runtime_error(std::string("bad schedule parameters: ") + e.what());
  }
}

/// The record's result: status, times, error, the GPU it ran on and its range fields.
void read_result(const nlohmann::json& res, TuneRecord& r) {
  r.result.status = printable(field<std::string>(res, "status"));
  r.result.median_us = optional_field(res, "median_us", 0.0);
  r.result.times_us = optional_field(res, "times_us", std::vector<double>{});
  r.result.rel_l2 = optional_field(res, "rel_l2", 0.0);
  r.result.estimated_us = optional_field(res, "estimated_us", 0.0);
  r.result.compile_seconds = optional_field(res, "compile_seconds", 0.0);
  r.result.error = printable(optional_field(res, "error", std::string()), 4000, true);
  if (res.contains("confirm_rounds")) r.result.confirm_rounds = integer<int>(res["confirm_rounds"], "field \"confirm_rounds\"");
  if (r.result.ok() && !(r.result.median_us > 0)) throw std::runtime_error("an \"ok\" result without a median time");
  if (res.contains("gpu")) read_gpu(member(res, "gpu"), r.result);
  read_range(res, r);
}

}  // namespace

TuneRecord record_from_json(nlohmann::json j) {
  if (!j.is_object()) throw std::runtime_error("not a JSON object");
  const int schema = field<int>(j, "schema");
  if (schema != kLogSchemaVersion)
    throw std::runtime_error("schema version " + std::to_string(schema) + " (this tmap reads version " +
                             std::to_string(kLogSchemaVersion) + ")");
  TuneRecord r;
  r.recorded_at = field<std::string>(j, "recorded_at");
  read_workload(member(j, "workload"), r);
  const nlohmann::json& t = member(j, "target");
  r.target = {field<std::string>(t, "arch"), field<std::string>(t, "device"), field<std::string>(t, "driver"),
              field<std::string>(t, "cuda"), field<std::string>(t, "tmap")};
  read_candidate(member(j, "candidate"), r);
  read_result(member(j, "result"), r);
  return r;
}

TuneRecord make_record(const Workload& w, const Target& t, CandidateRef candidate, TuneResult result) {
  TuneRecord r;
  r.workload = w;
  r.target = t;
  r.candidate = std::move(candidate);
  r.result = std::move(result);
  r.recorded_at = utc_now();
  r.flops = w.description["flops"].get<double>();
  return r;
}

std::string utc_now() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

LogWriter::LogWriter(const std::string& path) : path_(path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  check_writable_target(path, "--log");  // a FIFO would block the open, a device swallow the records
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw UserError(format_diagnostic(SourceLoc::whole("--log"),
                                      "cannot open log '" + path + "' for appending: " + std::strerror(errno),
                                      "check the path and its permissions"));
}

LogWriter::~LogWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void LogWriter::append(const TuneRecord& r) {
  const std::string line = to_json(r).dump() + "\n";
  // One write per line under an exclusive lock: concurrent writers append whole lines, and a
  // signal cannot split a line. A failed write (a full disk) is cut back off, so that the next
  // append does not glue a record onto half a line: what was logged before stays intact.
  while (::flock(fd_, LOCK_EX) != 0)
    if (errno != EINTR) throw std::runtime_error("cannot lock log '" + path_ + "': " + std::strerror(errno));
  const off_t start = ::lseek(fd_, 0, SEEK_END);
  std::size_t done = 0;
  std::string error;
  while (done < line.size()) {
    ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = n < 0 ? std::strerror(errno) : "nothing was written";
      break;
    }
    done += static_cast<std::size_t>(n);
  }
  if (!error.empty() && done > 0 && start >= 0 && ::ftruncate(fd_, start) != 0)
    error += "; half a record is left at its end (remove the last line)";
  ::flock(fd_, LOCK_UN);
  if (!error.empty())
    throw std::runtime_error(format_diagnostic(
        SourceLoc::whole(path_), "cannot append to log '" + path_ + "': " + error,
        "free space on its disk or give another --log; the records already in the log are intact, and "
        "rerunning the same command resumes from them"));
}

namespace {

/// The text of the log at `path`, read within the bounds that hold for any kind of file.
std::string log_text(const std::string& path) {
  std::string text, why;
  if (!read_bounded(path, kMaxLogBytes, text, why))
    throw UserError(format_diagnostic(SourceLoc::whole(path), "cannot read log '" + path + "': " + why,
                                      "give the path of a tuning log (JSON lines)"));
  return text;
}

/// A UserError when `j`, line `line_no` of log `path`, is a record of another schema version.
void refuse_other_schema(const nlohmann::json& j, const std::string& path, std::size_t line_no) {
  if (!j.is_object() || !j.contains("schema") || j["schema"] == kLogSchemaVersion) return;
  SourceLoc loc = SourceLoc::whole(path);
  loc.line = static_cast<int>(line_no);
  throw_user_error(loc, "a record of schema version " + j["schema"].dump() + "; this tmap reads and writes version " +
                            std::to_string(kLogSchemaVersion),
                   "merge logs of one schema version: tune again with this tmap, or merge with the tmap that "
                   "wrote the log");
}

}  // namespace

LogContents read_log(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return {};
  return parse_log_text(log_text(path), path);
}

LogContents parse_log_text(const std::string& text, const std::string& path, bool refuse_other_schemas) {
  LogContents out;
  // Each distinct (key, compute) is rebuilt once: a log holds many trials of few workloads.
  std::map<std::string, std::vector<nlohmann::json>> rebuilt;  // computes by key
  std::size_t line_no = 0, pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    const bool truncated = end == std::string::npos;
    const std::string line = text.substr(pos, truncated ? std::string::npos : end - pos);
    pos = truncated ? text.size() : end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(line_no) + ": ";
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {  // a syntax error, or a number beyond a double
      out.warnings.push_back(where + (truncated ? "truncated last line (no newline), skipped"
                                                : "not valid JSON, skipped"));
      continue;
    }
    if (refuse_other_schemas) refuse_other_schema(j, path, line_no);
    TuneRecord r;
    try {
      r = record_from_json(std::move(j));
    } catch (const std::exception& e) {
      out.warnings.push_back(where + "not a tuning record (" + exception_text(e) + "), skipped");
      continue;
    }
    std::vector<nlohmann::json>& computes = rebuilt[r.workload.key];
    if (std::find(computes.begin(), computes.end(), r.workload.compute) == computes.end()) {
      try {
        rebuild_recorded_compute(r.workload.compute, r.workload.key, path + ":" + std::to_string(line_no));
      } catch (const UserError& e) {
        out.warnings.push_back(where + diagnostic_message(e.what()) + "; skipped");
        continue;
      }
      computes.push_back(r.workload.compute);
    }
    out.records.push_back(std::move(r));
  }
  return out;
}

MergedLogs merge_logs(const std::vector<std::string>& paths, bool best_only) {
  MergedLogs m;
  std::set<std::string> seen;
  std::vector<TuneRecord> all;
  for (const std::string& path : paths) {
    LogContents log = parse_log_text(log_text(path), path, true);
    m.warnings.insert(m.warnings.end(), log.warnings.begin(), log.warnings.end());
    m.read += log.records.size();
    for (TuneRecord& r : log.records) {
      if (seen.insert(to_json(r).dump()).second) all.push_back(std::move(r));
      else ++m.duplicates;
    }
  }
  if (!best_only) {
    m.records = std::move(all);
    return m;
  }
  for (const TuneRecord* r : kept_records(all)) m.records.push_back(*r);
  return m;
}

bool ranks_before(const TuneRecord& a, const TuneRecord& b) {
  const bool ca = a.result.confirm_rounds > 0, cb = b.result.confirm_rounds > 0;
  return ca != cb ? ca : a.result.median_us < b.result.median_us;
}

bool is_range_sample(const Workload& w) {
  const auto d = w.compute.find("dynamic");
  return d != w.compute.end() && d->is_object() && d->contains("at");
}

std::vector<const TuneRecord*> best_records(const std::vector<TuneRecord>& records, bool samples) {
  // The latest measured record of each candidate of each workload.
  std::map<std::string, const TuneRecord*> latest;
  std::vector<std::string> order;  // workload keys, first seen first
  std::set<std::string> seen;
  for (const auto& r : records) {
    if (!r.result.measured() || r.result.size > 0 || (!samples && is_range_sample(r.workload))) continue;
    latest[r.workload.key + " " + candidate_signature(r.candidate)] = &r;
    if (seen.insert(r.workload.key).second) order.push_back(r.workload.key);
  }
  auto better = [](const TuneRecord* a, const TuneRecord* b) { return ranks_before(*a, *b); };
  std::map<std::string, const TuneRecord*> best_of;
  for (const auto& [key, r] : latest) {
    if (!r->result.ok()) continue;
    const TuneRecord*& b = best_of[r->workload.key];
    if (!b || better(r, b) || (!better(b, r) && r < b)) b = r;  // ties: the earlier record
  }
  std::vector<const TuneRecord*> best;
  for (const auto& key : order)
    if (auto it = best_of.find(key); it != best_of.end()) best.push_back(it->second);
  return best;
}

std::vector<const TuneRecord*> model_choices(const std::vector<TuneRecord>& records) {
  std::set<std::string> measured;
  for (const TuneRecord* r : best_records(records, true)) measured.insert(r->workload.key);
  std::map<std::string, const TuneRecord*> choice;
  std::vector<std::string> order;
  for (const auto& r : records) {
    if (r.result.measured() || measured.count(r.workload.key)) continue;
    auto [it, inserted] = choice.emplace(r.workload.key, &r);
    if (inserted) order.push_back(r.workload.key);
    else if (r.result.estimated_us < it->second->result.estimated_us) it->second = &r;
  }
  std::vector<const TuneRecord*> out;
  for (const auto& key : order) out.push_back(choice[key]);
  return out;
}

std::vector<const TuneRecord*> range_buckets(const std::vector<TuneRecord>& records) {
  std::vector<const TuneRecord*> out;
  for (const TuneRecord& r : records) {
    if (!r.result.bucket() || !r.result.ok()) continue;
    // Earlier buckets of the same range that this one overlaps are superseded.
    std::erase_if(out, [&](const TuneRecord* o) {
      return o->workload.key == r.workload.key && o->target.arch == r.target.arch &&
             o->result.bucket_lo <= r.result.bucket_hi && r.result.bucket_lo <= o->result.bucket_hi;
    });
    out.push_back(&r);
  }
  return out;
}

std::vector<const TuneRecord*> kept_records(const std::vector<TuneRecord>& records) {
  std::vector<const TuneRecord*> kept = best_records(records, true);
  for (const TuneRecord* r : model_choices(records)) kept.push_back(r);
  for (const TuneRecord* r : range_buckets(records)) kept.push_back(r);
  return kept;
}

}  // namespace tmap
