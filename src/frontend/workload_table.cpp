#include "tmap/frontend/workload_table.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <set>

#include <nlohmann/json.hpp>

#include "tmap/frontend/compute_loader.h"
#include "tmap/frontend/json_locations.h"
#include "tmap/frontend/op_library.h"
#include "tmap/support/diagnostic.h"
#include "tmap/support/json_integer.h"

namespace tmap {
namespace {

using ordered_json = nlohmann::ordered_json;

constexpr const char* kFormat = "tmap-workloads/1";
constexpr const char* kHint = "a workload table is written by 'tmap import MODEL --format json'; see README";

}  // namespace

double WorkloadTable::total_flops() const {
  double sum = 0;
  for (const auto& w : workloads) sum += w.count * w.flops;
  return sum;
}

double WorkloadTable::share(const TableWorkload& w) const {
  const double total = total_flops();
  return total > 0 ? w.count * w.flops / total : 0;
}

Compute build_table_workload(const TableWorkload& w, const std::string& in_dtype, const std::string& out_dtype,
                             const std::string& where) {
  ComputeDef def = builtin_op(w.op);
  set_dtypes(def, in_dtype, out_dtype, where + ": dtype", where + ": out_dtype");
  SourceText epilogue(where + ": epilogue", w.epilogue);
  if (!w.epilogue.empty()) set_epilogue(def, w.epilogue, locator_for(epilogue), SourceLoc::whole(where));
  std::vector<ParamOverride> overrides;
  for (const auto& [name, value] : w.params) {
    overrides.push_back({name, value, SourceLoc::whole(where)});
    if (name == w.range_param) {
      overrides.back().lo = w.range_lo;
      overrides.back().range = true;
    }
  }
  Compute c = build_compute(def, overrides);
  c.name = w.name;  // logs and tables name the workload, not its op
  return c;
}

std::vector<TableWorkload> workloads_at_sizes(const TableWorkload& w, const std::vector<std::int64_t>& sizes) {
  if (!w.ranged()) return {w};
  std::string param = w.range_param;
  for (char& ch : param) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  std::vector<TableWorkload> out;
  for (std::int64_t size : sizes) {
    TableWorkload x = w;
    x.name = w.name + "_" + param + std::to_string(size);
    x.range_param.clear();
    x.range_lo = 0;
    x.sizes.clear();
    for (auto& [name, value] : x.params)
      if (name == w.range_param) value = size;
    out.push_back(std::move(x));
  }
  return out;
}

void compute_table_flops(WorkloadTable& t) {
  for (auto& w : t.workloads) w.flops = 2.0 * build_table_workload(w, "", "", "workload '" + w.name + "'").iteration_points();
}

std::string params_text(const TableWorkload& w) {
  std::string s;
  for (const auto& [name, value] : w.params)
    s += (s.empty() ? "" : " ") + name + "=" +
         (name == w.range_param ? std::to_string(w.range_lo) + ".." : "") + std::to_string(value);
  return s;
}

std::string workload_table_json(const WorkloadTable& t) {
  ordered_json j;
  j["format"] = kFormat;
  if (!t.title.empty()) j["title"] = t.title;
  if (!t.source.empty()) j["source"] = t.source;
  if (t.batch > 0) j["batch"] = t.batch;
  if (!t.dtype.empty()) j["dtype"] = t.dtype;
  j["out_dtype"] = t.out_dtype;
  j["total_gflop"] = t.total_flops() / 1e9;
  j["workloads"] = ordered_json::array();
  for (const auto& w : t.workloads) {
    ordered_json x;
    x["name"] = w.name;
    x["op"] = w.op;
    x["params"] = ordered_json::object();
    for (const auto& [name, value] : w.params) {
      if (name == w.range_param) x["params"][name] = std::to_string(w.range_lo) + ".." + std::to_string(value);
      else x["params"][name] = value;
    }
    if (!w.sizes.empty()) x["sizes"] = w.sizes;
    x["count"] = w.count;
    x["gflop"] = w.flops / 1e9;  // informational: recomputed when read
    x["share"] = t.share(w);
    if (!w.epilogue.empty()) x["epilogue"] = w.epilogue;
    if (!w.nodes.empty()) x["nodes"] = w.nodes;
    if (!w.absorbed.empty()) x["absorbed"] = w.absorbed;
    if (!w.notes.empty()) x["notes"] = w.notes;
    j["workloads"].push_back(x);
  }
  j["unsupported"] = ordered_json::array();
  for (const auto& u : t.unsupported) j["unsupported"].push_back({{"node", u.node}, {"op_type", u.op_type}, {"reason", u.reason}});
  j["other_ops"] = ordered_json::object();
  for (const auto& [op, n] : t.other_ops) j["other_ops"][op] = n;
  return j.dump(2) + "\n";
}

WorkloadTable load_workload_table(const std::string& path) {
  return parse_workload_table(read_source_file(path, "workload table", kHint));
}

namespace {

/// The table's own members: format, title, source, dtype, out_dtype and batch.
void read_table_header(const JsonReader& r, const ordered_json& doc, WorkloadTable& t) {
  if (!doc.is_object()) r.fail_value("", "a workload table must hold a JSON object, not " + std::string(doc.type_name()), kHint);
  r.check_keys(doc, "", {"format", "title", "source", "batch", "dtype", "out_dtype", "total_gflop", "workloads", "unsupported", "other_ops"},
               "a workload table");
  r.require_key(doc, "", "format", "a workload table", "add \"format\": \"" + std::string(kFormat) + "\"");
  if (doc["format"] != kFormat)
    r.fail_value("/format", "unknown table format " + doc["format"].dump(),
                 "this tmap reads \"" + std::string(kFormat) + "\"; re-run 'tmap import'");
  auto string_member = [&](const char* key, std::string& out) {
    if (!doc.contains(key)) return;
    const std::string ptr = std::string("/") + key;
    r.expect_type(doc[key], ptr, doc[key].is_string(), "\"" + std::string(key) + "\"", "a string");
    out = doc[key].get<std::string>();
  };
  string_member("title", t.title);
  string_member("source", t.source);
  // Shown to whoever runs the table: no control characters from another's file reach a terminal.
  t.title = printable(t.title, 1000);
  t.source = printable(t.source, 1000);
  string_member("dtype", t.dtype);
  string_member("out_dtype", t.out_dtype);
  if (!t.dtype.empty()) {
    const std::optional<DType> in = parse_dtype(t.dtype);
    if (!in) r.fail_value("/dtype", "unknown dtype '" + t.dtype + "'", "supported dtypes: " + supported_dtype_names());
    if (!dtype_is_storage(*in)) r.fail_value("/dtype", kNotStorage, kNotStorageFix);
  }
  if (!parse_dtype(t.out_dtype))
    r.fail_value("/out_dtype", "unknown dtype '" + t.out_dtype + "'", "supported dtypes: " + supported_dtype_names());
  if (doc.contains("batch")) {
    r.expect_type(doc["batch"], "/batch",
                  is_integer_of<std::int64_t>(doc["batch"]) && doc["batch"].get<std::int64_t>() > 0 &&
                      doc["batch"].get<std::int64_t>() <= INT32_MAX,
                  "\"batch\"", "a positive 32-bit integer");
    t.batch = doc["batch"].get<std::int64_t>();
  }
}

/// A workload's name (an identifier, unique in `names`) and its op (a built-in one).
void read_workload_identity(const JsonReader& r, const ordered_json& x, const std::string& ptr, TableWorkload& w,
                            std::set<std::string>& names) {
  r.require_key(x, ptr, "name", "a workload");
  r.expect_type(x["name"], ptr + "/name", x["name"].is_string() && !x["name"].get<std::string>().empty(), "\"name\"",
                "a non-empty string");
  w.name = x["name"].get<std::string>();
  if (const std::string why = name_problem(w.name); !why.empty()) r.fail_value(ptr + "/name", why);
  if (!names.insert(w.name).second)
    r.fail_value(ptr + "/name", "workload name '" + w.name + "' appears twice", "give every workload its own name");
  r.require_key(x, ptr, "op", "a workload", "add \"op\": one of 'tmap ops list'");
  r.expect_type(x["op"], ptr + "/op", x["op"].is_string(), "\"op\"", "a string");
  w.op = x["op"].get<std::string>();
  const std::vector<std::string> ops = builtin_op_names();
  if (std::find(ops.begin(), ops.end(), w.op) == ops.end()) {
    std::string known;
    for (const auto& o : ops) known += (known.empty() ? "" : ", ") + o;
    r.fail_value(ptr + "/op", "unknown op '" + w.op + "'", "built-in ops: " + known);
  }
}

/// A parameter given as a range of sizes, "LO..HI" (the rules of --set NAME=LO..HI).
void read_range_param(const JsonReader& r, const std::string& name, const std::string& text, const std::string& ptr,
                      TableWorkload& w) {
  if (w.ranged())
    r.fail_value(ptr, "parameter \"" + name + "\" is a second range of sizes (\"" + w.range_param + "\" is one)",
                 "give at most one parameter of a workload as a range");
  ParamOverride o;
  try {
    o = parse_param_overrides({name + "=" + text}).front();
  } catch (const UserError& e) {
    r.fail_value(ptr, e.what(), "give an integer, or a range such as \"1..256\"");
  }
  if (!o.range)
    r.fail_value(ptr, "parameter \"" + name + "\" is the string \"" + text + "\"",
                 "give an integer without quotes, or a range such as \"1..256\"");
  w.params.emplace_back(name, o.value);
  w.range_param = name;
  w.range_lo = o.lo;
}

/// A range's sizes to sample: integers within it, given in ascending order without repeats.
void read_range_sizes(const JsonReader& r, const ordered_json& v, const std::string& ptr, TableWorkload& w) {
  if (!w.ranged()) r.fail_value(ptr, "\"sizes\" without a range of sizes", "give a parameter as a range, e.g. \"M\": \"1..256\"");
  const std::int64_t hi = w.range_hi();
  r.expect_type(v, ptr, v.is_array() && !v.empty(), "\"sizes\"", "a non-empty array of sizes");
  for (std::size_t k = 0; k < v.size(); ++k) {
    const std::string p = ptr + "/" + std::to_string(k);
    const bool in_range = is_integer_of<std::int64_t>(v[k]) && v[k].get<std::int64_t>() >= w.range_lo &&
                          v[k].get<std::int64_t>() <= hi;
    r.expect_type(v[k], p, in_range, "a size",
                  "an integer of the range " + std::to_string(w.range_lo) + ".." + std::to_string(hi));
    if (!w.sizes.empty() && v[k].get<std::int64_t>() <= w.sizes.back())
      r.fail_value(p, "size " + v[k].dump() + " after " + std::to_string(w.sizes.back()), "list the sizes in ascending order, each once");
    w.sizes.push_back(v[k].get<std::int64_t>());
  }
}

/// A workload's params, count, epilogue and the import's lists (nodes, absorbed, notes).
void read_workload_members(const JsonReader& r, const ordered_json& x, const std::string& ptr, TableWorkload& w) {
  if (x.contains("params")) {
    r.expect_type(x["params"], ptr + "/params", x["params"].is_object(), "\"params\"", "an object of integers");
    for (const auto& [name, v] : x["params"].items()) {
      const std::string p = JsonLocations::child(ptr + "/params", name);
      if (v.is_string()) {
        read_range_param(r, name, v.get<std::string>(), p, w);
        continue;
      }
      r.expect_type(v, p, is_integer_of<std::int64_t>(v), "parameter \"" + name + "\"",
                    "an integer, or a range of sizes such as \"1..256\"");
      w.params.emplace_back(name, v.get<std::int64_t>());
    }
  }
  if (x.contains("sizes")) read_range_sizes(r, x["sizes"], ptr + "/sizes", w);
  if (x.contains("count")) {
    r.expect_type(x["count"], ptr + "/count",
                  is_integer_of<std::int64_t>(x["count"]) && x["count"].get<std::int64_t>() >= 1 &&
                      x["count"].get<std::int64_t>() <= 1000000,
                  "\"count\"", "an integer from 1 to 1000000");
    w.count = x["count"].get<int>();
  }
  if (x.contains("epilogue")) {
    r.expect_type(x["epilogue"], ptr + "/epilogue", x["epilogue"].is_string(), "\"epilogue\"",
                  "a string such as \"Y[m, n] = relu(C[m, n] + bias[n])\"");
    w.epilogue = x["epilogue"].get<std::string>();
  }
  for (auto [key, list] : {std::pair<const char*, std::vector<std::string>*>{"nodes", &w.nodes},
                           {"absorbed", &w.absorbed}, {"notes", &w.notes}}) {
    if (!x.contains(key)) continue;
    const std::string p = ptr + "/" + key;
    r.expect_type(x[key], p, x[key].is_array(), "\"" + std::string(key) + "\"", "an array of strings");
    for (std::size_t k = 0; k < x[key].size(); ++k) {
      r.expect_type(x[key][k], p + "/" + std::to_string(k), x[key][k].is_string(), "an entry", "a string");
      list->push_back(printable(x[key][k].get<std::string>(), 1000));
    }
  }
}

/// The workloads, each checked and built (a workload tmap cannot build is an error at its place).
void read_workloads(const JsonReader& r, const ordered_json& doc, const std::string& path, WorkloadTable& t) {
  r.require_key(doc, "", "workloads", "a workload table");
  const auto& ws = doc["workloads"];
  r.expect_type(ws, "/workloads", ws.is_array(), "\"workloads\"", "an array");
  if (ws.empty()) r.fail_value("/workloads", "the table has no workloads", "import a model with convolutions or matrix products");
  std::set<std::string> names;
  for (std::size_t i = 0; i < ws.size(); ++i) {
    const std::string ptr = "/workloads/" + std::to_string(i);
    const auto& x = ws[i];
    r.expect_type(x, ptr, x.is_object(), "a workload", "an object");
    r.check_keys(x, ptr, {"name", "op", "params", "sizes", "count", "gflop", "share", "epilogue", "nodes", "absorbed", "notes"},
                 "a workload");
    TableWorkload w;
    read_workload_identity(r, x, ptr, w, names);
    read_workload_members(r, x, ptr, w);
    try {
      w.flops = 2.0 * build_table_workload(w, t.dtype, t.out_dtype, path + ": workload '" + w.name + "'").iteration_points();
    } catch (const UserError& e) {
      r.fail_value(ptr, "workload '" + w.name + "' is not a valid " + w.op + ": " + e.what(),
                   "fix its parameters (see 'tmap ops show " + w.op + "')");
    }
    t.workloads.push_back(std::move(w));
  }
}

/// What the import left outside any kernel: unsupported nodes and counts of other ops.
void read_leftovers(const JsonReader& r, const ordered_json& doc, WorkloadTable& t) {
  if (doc.contains("unsupported")) {
    const auto& us = doc["unsupported"];
    r.expect_type(us, "/unsupported", us.is_array(), "\"unsupported\"", "an array");
    for (std::size_t i = 0; i < us.size(); ++i) {
      const std::string ptr = "/unsupported/" + std::to_string(i);
      r.expect_type(us[i], ptr, us[i].is_object(), "an entry", "an object with node, op_type and reason");
      r.check_keys(us[i], ptr, {"node", "op_type", "reason"}, "an unsupported node");
      UnsupportedNode u;
      for (auto [key, field] : {std::pair<const char*, std::string*>{"node", &u.node}, {"op_type", &u.op_type}, {"reason", &u.reason}}) {
        if (!us[i].contains(key)) continue;
        r.expect_type(us[i][key], ptr + "/" + key, us[i][key].is_string(), "\"" + std::string(key) + "\"", "a string");
        *field = printable(us[i][key].get<std::string>(), 1000);
      }
      t.unsupported.push_back(u);
    }
  }
  if (doc.contains("other_ops")) {
    r.expect_type(doc["other_ops"], "/other_ops", doc["other_ops"].is_object(), "\"other_ops\"", "an object of counts");
    for (const auto& [op, n] : doc["other_ops"].items()) {
      r.expect_type(n, JsonLocations::child("/other_ops", op),
                    is_integer_of<std::int64_t>(n) && n.get<std::int64_t>() >= 0 && n.get<std::int64_t>() <= 1000000000, "a count",
                    "an integer from 0 to 10^9");
      int& count = t.other_ops[printable(op)];  // names that print alike add up, within the bound
      count = static_cast<int>(std::min<std::int64_t>(std::int64_t{count} + n.get<std::int64_t>(), 1000000000));
    }
  }
}

}  // namespace

WorkloadTable parse_workload_table(const SourceText& source) {
  const ordered_json doc = parse_json_text(source, kHint);
  JsonLocations locs(source);
  JsonReader r(locs);
  WorkloadTable t;
  read_table_header(r, doc, t);
  read_workloads(r, doc, source.file(), t);
  read_leftovers(r, doc, t);
  return t;
}

}  // namespace tmap
