#include "tmap/hw/hw_abstraction.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "tmap/frontend/json_locations.h"
#include "tmap/frontend/parser.h"
#include "tmap/support/identifier.h"
#include "tmap/support/json_integer.h"

namespace tmap {
namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

const char* axis_name(Axis a) {
  switch (a) {
    case Axis::kI: return "i";
    case Axis::kJ: return "j";
    case Axis::kK: return "k";
  }
  return "?";
}

std::string IntrinsicShape::str() const {
  return std::to_string(extent[0]) + "x" + std::to_string(extent[1]) + "x" + std::to_string(extent[2]);
}

const char* memory_kind_name(MemoryKind k) {
  switch (k) {
    case MemoryKind::kFill: return "fill";
    case MemoryKind::kLoad: return "load";
    case MemoryKind::kStore: return "store";
  }
  return "?";
}

namespace {

const std::vector<std::string> kScopes = {"thread", "warp", "warpgroup", "block"};
const std::vector<std::string> kMemoryScopes = {"global", "shared", "fragment"};

std::string string_member(const JsonReader& r, const ordered_json& obj, const std::string& ptr,
                          const std::string& key, const std::string& what) {
  r.require_key(obj, ptr, key, what);
  std::string child = JsonLocations::child(ptr, key);
  r.expect_type(obj[key], child, obj[key].is_string() && !obj[key].get<std::string>().empty(),
                "\"" + key + "\" of " + what, "a non-empty string");
  return obj[key].get<std::string>();
}

std::string one_of(const JsonReader& r, const ordered_json& obj, const std::string& ptr, const std::string& key,
                   const std::string& what, const std::vector<std::string>& allowed) {
  std::string v = string_member(r, obj, ptr, key, what);
  if (std::find(allowed.begin(), allowed.end(), v) == allowed.end())
    r.fail_value(JsonLocations::child(ptr, key), "\"" + key + "\" of " + what + " is \"" + v + "\"",
                 "expected one of: " + join(allowed));
  return v;
}

DType dtype_member(const JsonReader& r, const ordered_json& dtypes, const std::string& ptr, const std::string& operand) {
  r.require_key(dtypes, ptr, operand, "\"dtypes\"", "give the dtype of every operand of the expression");
  std::string child = JsonLocations::child(ptr, operand);
  r.expect_type(dtypes[operand], child, dtypes[operand].is_string(), "the dtype of " + operand, "a string");
  auto t = parse_dtype(dtypes[operand].get<std::string>());
  if (!t)
    r.fail_value(child, "dtype \"" + dtypes[operand].get<std::string>() + "\" of operand " + operand + " is not supported",
                 "supported dtypes: " + supported_dtype_names());
  return *t;
}

/// Reads the compute expression: exactly D[i, j] += A[i, k] * B[k, j] up to names and the
/// order of indices, with every index a bare iterator.
void read_expression(const JsonReader& r, const std::string& ptr, const std::string& text, HwAbstraction& hw) {
  Locator loc = r.string_locator(ptr);
  StatementDecl s = parse_statement(text, loc);
  auto fail = [&](const std::string& msg) {
    r.fail_value(ptr, "compute expression of '" + hw.name + "': " + msg,
                 "a matrix intrinsic is written 'D[i, j] += A[i, k] * B[k, j]' (names and index order may vary)");
  };
  if (s.update != UpdateKind::kAccumulate) fail("it must accumulate with '+='");
  if (s.inputs.size() != 2) fail("it must multiply exactly two operands");
  auto names_of = [&](const AccessDecl& a) {
    std::vector<std::string> names;
    for (const auto& idx : a.indices) {
      if (idx->kind != ExprKind::kVar) fail("index '" + to_string(idx) + "' of " + a.tensor + " is not a bare iterator");
      names.push_back(idx->name);
    }
    if (names.size() != 2) fail("operand " + a.tensor + " must have 2 dimensions");
    if (names[0] == names[1]) fail("operand " + a.tensor + " repeats iterator '" + names[0] + "'");
    return names;
  };
  auto dn = names_of(s.output), an = names_of(s.inputs[0]), bn = names_of(s.inputs[1]);
  hw.d = s.output.tensor;
  hw.a = s.inputs[0].tensor;
  hw.b = s.inputs[1].tensor;
  if (hw.a == hw.b || hw.a == hw.d || hw.b == hw.d) fail("operands must have three distinct names");
  auto in = [](const std::vector<std::string>& v, const std::string& n) { return std::find(v.begin(), v.end(), n) != v.end(); };
  std::set<std::string> all(dn.begin(), dn.end());
  all.insert(an.begin(), an.end());
  all.insert(bn.begin(), bn.end());
  std::array<int, 3> found{0, 0, 0};
  for (const auto& n : all) {
    bool a = in(an, n), b = in(bn, n), d = in(dn, n);
    Axis axis = Axis::kI;  // fail() throws; the initial value only quiets -Wsometimes-uninitialized
    if (a && d && !b) axis = Axis::kI;
    else if (b && d && !a) axis = Axis::kJ;
    else if (a && b && !d) axis = Axis::kK;
    else fail("iterator '" + n + "' must index exactly two of the three operands");
    hw.axis_names[static_cast<int>(axis)] = n;
    ++found[static_cast<int>(axis)];
  }
  if (found != std::array<int, 3>{1, 1, 1}) fail("it must have one row, one column and one reduction iterator");
}

/// The compute intrinsic: its names, expression and dtypes (the shapes and layouts follow).
void read_compute(JsonReader& r, const ordered_json& doc, HwAbstraction& hw) {
  const std::string what = "the hardware abstraction";
  r.require_key(doc, "", "compute", what);
  const auto& comp = doc["compute"];
  r.expect_type(comp, "/compute", comp.is_object(), "\"compute\"", "an object");
  r.check_keys(comp, "/compute", {"name", "intrinsic", "expression", "dtypes", "shapes", "layouts"}, "\"compute\"");
  hw.compute_name = string_member(r, comp, "/compute", "name", "\"compute\"");
  hw.compute_intrinsic = string_member(r, comp, "/compute", "intrinsic", "\"compute\"");
  hw.expression = string_member(r, comp, "/compute", "expression", "\"compute\"");
  read_expression(r, "/compute/expression", hw.expression, hw);

  r.require_key(comp, "/compute", "dtypes", "\"compute\"");
  const auto& dtypes = comp["dtypes"];
  r.expect_type(dtypes, "/compute/dtypes", dtypes.is_object(), "\"dtypes\"", "an object from operand to dtype");
  r.check_keys(dtypes, "/compute/dtypes", {hw.a, hw.b, hw.d}, "\"dtypes\"");
  hw.a_dtype = dtype_member(r, dtypes, "/compute/dtypes", hw.a);
  hw.b_dtype = dtype_member(r, dtypes, "/compute/dtypes", hw.b);
  hw.d_dtype = dtype_member(r, dtypes, "/compute/dtypes", hw.d);
  if (!dtype_accumulates(hw.a_dtype, hw.d_dtype) || !dtype_accumulates(hw.b_dtype, hw.d_dtype))
    r.fail_value("/compute/dtypes/" + hw.d, "operand " + hw.d + " (" + std::string(dtype_name(hw.d_dtype)) +
                                                ") cannot accumulate products of the input operands");
}

/// The compute intrinsic must be the very instruction the family's kernels issue for the operand
/// dtypes: a file chooses the instruction, the emitter writes it (family_intrinsic()). A family
/// the grammar does not know has no emitter either and is refused where a kernel is asked for.
void check_intrinsic(const JsonReader& r, const HwAbstraction& hw) {
  if (!known_intrinsic_family(hw.family)) return;
  const std::string want = family_intrinsic(hw);
  const std::string types = std::string(dtype_name(hw.a_dtype)) + " x " + std::string(dtype_name(hw.b_dtype)) +
                            " into " + std::string(dtype_name(hw.d_dtype));
  if (want.empty())
    r.fail_value("/compute/dtypes", "family " + hw.family + " has no instruction that multiplies " + types,
                 "see the shipped " + hw.family + "_*.json files for the dtypes it takes");
  if (hw.compute_intrinsic != want)
    r.fail_value("/compute/intrinsic",
                 "intrinsic " + nlohmann::json(hw.compute_intrinsic).dump() + " is not the instruction family " +
                     hw.family + " issues for " + types,
                 "write \"intrinsic\": \"" + want + "\"");
}

void read_shapes(JsonReader& r, const ordered_json& comp, HwAbstraction& hw) {
  r.require_key(comp, "/compute", "shapes", "\"compute\"", "e.g. \"shapes\": [[16, 16, 16]]");
  const auto& shapes = comp["shapes"];
  r.expect_type(shapes, "/compute/shapes", shapes.is_array() && !shapes.empty(), "\"shapes\"",
                "a non-empty array of [m, n, k]");
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    std::string ptr = "/compute/shapes/" + std::to_string(i);
    const auto& s = shapes[i];
    bool ok = s.is_array() && s.size() == 3 &&
              std::all_of(s.begin(), s.end(), [](const auto& v) { return is_integer_of<std::int64_t>(v) && v.template get<std::int64_t>() > 0; });
    r.expect_type(s, ptr, ok, "a shape", "[m, n, k] with three positive integers");
    IntrinsicShape shape{{s[0].get<std::int64_t>(), s[1].get<std::int64_t>(), s[2].get<std::int64_t>()}};
    const std::vector<IntrinsicShape> issued = family_shapes(hw.family, hw.a_dtype);
    if (std::find(issued.begin(), issued.end(), shape) == issued.end()) {
      std::vector<std::string> names;
      for (const IntrinsicShape& x : issued) names.push_back("[" + std::to_string(x.extent[0]) + ", " +
                                                           std::to_string(x.extent[1]) + ", " + std::to_string(x.extent[2]) + "]");
      r.fail_value(ptr, "shape " + shape.str() + " is not one family " + hw.family + " issues for " +
                            std::string(dtype_name(hw.a_dtype)) + " operands",
                   "its shapes are: " + join(names));
    }
    if (std::find(hw.shapes.begin(), hw.shapes.end(), shape) != hw.shapes.end())
      r.fail_value(ptr, "shape " + shape.str() + " is listed twice");
    hw.shapes.push_back(shape);
  }

}

void read_layouts(JsonReader& r, const ordered_json& comp, HwAbstraction& hw) {
  r.require_key(comp, "/compute", "layouts", "\"compute\"", "e.g. \"layouts\": [\"nnn\", \"ntn\"]");
  const auto& layouts = comp["layouts"];
  r.expect_type(layouts, "/compute/layouts", layouts.is_array() && !layouts.empty(), "\"layouts\"",
                "a non-empty array of layout keys");
  for (std::size_t i = 0; i < layouts.size(); ++i) {
    std::string ptr = "/compute/layouts/" + std::to_string(i);
    const auto& l = layouts[i];
    bool ok = l.is_string() && l.get<std::string>().size() == 3 &&
              l.get<std::string>().find_first_not_of("nt") == std::string::npos;
    r.expect_type(l, ptr, ok, "a layout key", "three letters 'n' or 't' for " + hw.a + ", " + hw.b + " and " + hw.d);
    if (std::find(hw.layouts.begin(), hw.layouts.end(), l.get<std::string>()) != hw.layouts.end())
      r.fail_value(ptr, "layout \"" + l.get<std::string>() + "\" is listed twice");
    hw.layouts.push_back(l.get<std::string>());
  }

}

/// Memory intrinsics: each a fill, load or store of one operand between two scopes; the node
/// names (the compute's among them) are returned for the edges.
std::set<std::string> read_memory(JsonReader& r, const ordered_json& doc, HwAbstraction& hw) {
  const std::string what = "the hardware abstraction";
  r.require_key(doc, "", "memory", what);
  const auto& mem = doc["memory"];
  r.expect_type(mem, "/memory", mem.is_array(), "\"memory\"", "an array of memory intrinsics");
  std::set<std::string> nodes = {hw.compute_name};
  for (std::size_t i = 0; i < mem.size(); ++i) {
    std::string ptr = "/memory/" + std::to_string(i);
    const auto& m = mem[i];
    r.expect_type(m, ptr, m.is_object(), "a memory intrinsic", "an object");
    r.check_keys(m, ptr, {"name", "kind", "operand", "intrinsic", "from", "to"}, "a memory intrinsic");
    MemoryIntrinsic mi;
    mi.name = string_member(r, m, ptr, "name", "a memory intrinsic");
    std::string kind = one_of(r, m, ptr, "kind", "'" + mi.name + "'", {"fill", "load", "store"});
    mi.kind = kind == "fill" ? MemoryKind::kFill : kind == "load" ? MemoryKind::kLoad : MemoryKind::kStore;
    mi.operand = one_of(r, m, ptr, "operand", "'" + mi.name + "'", {hw.a, hw.b, hw.d});
    mi.intrinsic = string_member(r, m, ptr, "intrinsic", "'" + mi.name + "'");
    if (mi.kind != MemoryKind::kFill) mi.from = one_of(r, m, ptr, "from", "'" + mi.name + "'", kMemoryScopes);
    mi.to = one_of(r, m, ptr, "to", "'" + mi.name + "'", kMemoryScopes);
    bool is_output = mi.operand == hw.d;
    if ((mi.kind == MemoryKind::kLoad) == is_output)
      r.fail_value(ptr + "/operand", "'" + mi.name + "': " +
                                         std::string(mi.kind == MemoryKind::kLoad ? "a load must read an input operand ("
                                                                                  : "a fill or store must write the accumulator (") +
                                         (mi.kind == MemoryKind::kLoad ? hw.a + " or " + hw.b : hw.d) + ")");
    if (!nodes.insert(mi.name).second) r.fail_value(ptr + "/name", "node name '" + mi.name + "' is used twice");
    hw.memory.push_back(mi);
  }

  return nodes;
}

/// Edges between known nodes; returns each node's successors.
std::map<std::string, std::vector<std::string>> read_edges(JsonReader& r, const ordered_json& doc,
                                                           const std::set<std::string>& nodes, HwAbstraction& hw) {
  const std::string what = "the hardware abstraction";
  r.require_key(doc, "", "edges", what, "e.g. \"edges\": [[\"load_a\", \"mma\"], [\"mma\", \"store_d\"]]");
  const auto& edges = doc["edges"];
  r.expect_type(edges, "/edges", edges.is_array(), "\"edges\"", "an array of [from, to] node names");
  std::map<std::string, std::vector<std::string>> succ;
  for (std::size_t i = 0; i < edges.size(); ++i) {
    std::string ptr = "/edges/" + std::to_string(i);
    const auto& e = edges[i];
    r.expect_type(e, ptr, e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string(), "an edge",
                  "[from, to] with two node names");
    for (int k = 0; k < 2; ++k)
      if (!nodes.count(e[k].get<std::string>()))
        r.fail_value(ptr + "/" + std::to_string(k), "edge names unknown node '" + e[k].get<std::string>() + "'",
                     "nodes are: " + join(std::vector<std::string>(nodes.begin(), nodes.end())));
    hw.edges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    succ[hw.edges.back().first].push_back(hw.edges.back().second);
  }
  return succ;
}

/// The DAG is acyclic and its data path complete: a load of each input and the accumulator's
/// fill feed the compute, and a store reads from it.
void check_dag(JsonReader& r, const std::set<std::string>& nodes, std::map<std::string, std::vector<std::string>>& succ,
               const HwAbstraction& hw) {
  // Acyclic: depth-first search with colours.
  std::map<std::string, int> colour;
  std::function<bool(const std::string&)> cyclic = [&](const std::string& n) {
    colour[n] = 1;
    for (const auto& m : succ[n])
      if (colour[m] == 1 || (colour[m] == 0 && cyclic(m))) return true;
    colour[n] = 2;
    return false;
  };
  for (const auto& n : nodes)
    if (colour[n] == 0 && cyclic(n)) r.fail_value("/edges", "the edges of '" + hw.name + "' form a cycle through '" + n + "'");
  auto has_edge = [&](const std::string& from, const std::string& to) {
    return std::find(hw.edges.begin(), hw.edges.end(), std::make_pair(from, to)) != hw.edges.end();
  };
  for (const std::string& operand : {hw.a, hw.b, hw.d}) {
    MemoryKind need = operand == hw.d ? MemoryKind::kStore : MemoryKind::kLoad;
    bool ok = std::any_of(hw.memory.begin(), hw.memory.end(), [&](const MemoryIntrinsic& m) {
      return m.operand == operand && m.kind == need &&
             (need == MemoryKind::kLoad ? has_edge(m.name, hw.compute_name) : has_edge(hw.compute_name, m.name));
    });
    if (!ok)
      r.fail_value("/edges", "the DAG of '" + hw.name + "' has no " + memory_kind_name(need) + " of operand " + operand +
                                 (need == MemoryKind::kLoad ? " feeding '" : " fed by '") + hw.compute_name + "'",
                   "add the memory intrinsic and its edge");
  }
  for (const auto& m : hw.memory)
    if (m.kind == MemoryKind::kFill && !has_edge(m.name, hw.compute_name))
      r.fail_value("/edges", "fill '" + m.name + "' does not feed '" + hw.compute_name + "'");
}

}  // namespace

HwAbstraction parse_hw_abstraction(const SourceText& source) {
  ordered_json doc = parse_json_text(source, "a hardware abstraction is one JSON object; see hw_abstractions/");
  JsonLocations locs(source);
  JsonReader r(locs);
  HwAbstraction hw;
  hw.source_file = source.file();
  if (!doc.is_object()) r.fail_value("", "a hardware abstraction must be a JSON object, not " + std::string(doc.type_name()));
  r.check_keys(doc, "", {"name", "family", "description", "scope", "min_compute_capability", "compute", "memory", "edges"},
               "a hardware abstraction");
  const std::string what = "the hardware abstraction";
  hw.name = string_member(r, doc, "", "name", what);
  if (!is_identifier(hw.name))  // the name appears in generated source
    r.fail_value("/name", "name " + nlohmann::json(hw.name).dump() + " is not an identifier",
                 "use letters, digits and '_', not starting with a digit, e.g. \"mma_sync_fp16_fp32\"");
  hw.family = string_member(r, doc, "", "family", what);
  // Shown by `tmap hw`: another's control characters reach no terminal.
  if (doc.contains("description")) hw.description = printable(string_member(r, doc, "", "description", what), 2000, true);
  hw.scope = one_of(r, doc, "", "scope", what, kScopes);
  r.require_key(doc, "", "min_compute_capability", what, "e.g. 70 for sm_70");
  r.expect_type(doc["min_compute_capability"], "/min_compute_capability",
                is_integer_of<int>(doc["min_compute_capability"]) && doc["min_compute_capability"].get<int>() > 0,
                "\"min_compute_capability\"", "a positive integer such as 80");
  hw.min_compute_capability = doc["min_compute_capability"].get<int>();

  read_compute(r, doc, hw);
  check_intrinsic(r, hw);
  read_shapes(r, doc["compute"], hw);
  read_layouts(r, doc["compute"], hw);
  const std::set<std::string> nodes = read_memory(r, doc, hw);
  auto succ = read_edges(r, doc, nodes, hw);
  check_dag(r, nodes, succ, hw);
  return hw;
}

HwAbstraction load_hw_file(const std::string& path) {
  return parse_hw_abstraction(read_source_file(path, "hardware abstraction", "check the path given with --hw-dir"));
}

std::vector<HwAbstraction> load_hw_directory(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw UserError(format_diagnostic(
        SourceLoc::whole(dir),
        "hardware-abstraction directory '" + dir + (fs::exists(dir, ec) ? "' is not a directory" : "' does not exist"),
        "give a directory of *.json abstraction files"));
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_regular_file() && entry.path().extension() == ".json") files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  std::vector<HwAbstraction> out;
  for (const auto& f : files) out.push_back(load_hw_file(f));
  return out;
}

std::string builtin_hw_directory() {
  if (const char* env = std::getenv("TMAP_HW_DIR"); env && *env) return env;
  std::error_code ec;
  // Next to an installed binary: <prefix>/bin/tmap -> <prefix>/share/tmap/hw_abstractions.
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    fs::path candidate = exe.parent_path().parent_path() / "share" / "tmap" / "hw_abstractions";
    if (fs::is_directory(candidate, ec)) return candidate.string();
  }
  if (fs::is_directory(TMAP_INSTALL_HW_DIR, ec)) return TMAP_INSTALL_HW_DIR;
  return TMAP_SOURCE_HW_DIR;
}

std::vector<HwAbstraction> load_hw_abstractions(const std::vector<std::string>& extra_dirs) {
  std::vector<HwAbstraction> all = load_hw_directory(builtin_hw_directory());
  for (const auto& dir : extra_dirs) {
    for (auto& hw : load_hw_directory(dir)) {
      auto dup = std::find_if(all.begin(), all.end(), [&](const HwAbstraction& h) { return h.name == hw.name; });
      if (dup != all.end())
        throw UserError(format_diagnostic(SourceLoc::whole(hw.source_file),
                                          "hardware abstraction '" + hw.name + "' is also defined in " + dup->source_file,
                                          "give the new abstraction another \"name\""));
      all.push_back(std::move(hw));
    }
  }
  return all;
}

const HwAbstraction& find_hw(const std::vector<HwAbstraction>& all, const std::string& name) {
  for (const auto& hw : all)
    if (hw.name == name) return hw;
  std::vector<std::string> names;
  for (const auto& hw : all) names.push_back(hw.name);
  throw UserError(format_diagnostic(SourceLoc::whole("--hw"), "unknown hardware abstraction '" + name + "'",
                                    "available: " + join(names) + " (see 'tmap hw list')"));
}

nlohmann::ordered_json to_json(const HwAbstraction& hw) {
  // The schema of an abstraction file, member for member, so that `tmap hw show X > mine.json`
  // loads back (after a rename) with --hw-dir.
  nlohmann::ordered_json j;
  j["name"] = hw.name;
  j["family"] = hw.family;
  if (!hw.description.empty()) j["description"] = hw.description;
  j["scope"] = hw.scope;
  j["min_compute_capability"] = hw.min_compute_capability;
  nlohmann::ordered_json dtypes;
  dtypes[hw.a] = dtype_name(hw.a_dtype);
  dtypes[hw.b] = dtype_name(hw.b_dtype);
  dtypes[hw.d] = dtype_name(hw.d_dtype);
  nlohmann::ordered_json shapes = nlohmann::ordered_json::array();
  for (const auto& s : hw.shapes) shapes.push_back(s.extent);
  j["compute"] = {{"name", hw.compute_name},         {"intrinsic", hw.compute_intrinsic},
                  {"expression", hw.expression},     {"dtypes", dtypes},
                  {"shapes", shapes},                {"layouts", hw.layouts}};
  j["memory"] = nlohmann::ordered_json::array();
  for (const auto& m : hw.memory) {
    nlohmann::ordered_json mj;
    mj["name"] = m.name;
    mj["kind"] = memory_kind_name(m.kind);
    mj["operand"] = m.operand;
    mj["intrinsic"] = m.intrinsic;
    if (!m.from.empty()) mj["from"] = m.from;
    mj["to"] = m.to;
    j["memory"].push_back(mj);
  }
  j["edges"] = nlohmann::ordered_json::array();
  for (const auto& [from, to] : hw.edges) j["edges"].push_back({from, to});
  return j;
}

}  // namespace tmap
