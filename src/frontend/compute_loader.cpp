#include "tmap/frontend/compute_loader.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tmap/frontend/json_locations.h"
#include "tmap/support/json_integer.h"

namespace tmap {
namespace {

using ordered_json = nlohmann::ordered_json;

constexpr std::int64_t kMaxElements32 = INT32_MAX;

}  // namespace

namespace {

/// "params": integer defaults of the parameters.
void read_params(const ordered_json& params, JsonReader& r, ComputeDef& def) {
  r.expect_type(params, "/params", params.is_object(), "\"params\"", "an object of integer defaults");
  for (const auto& [name, v] : params.items()) {
    std::string ptr = JsonLocations::child("/params", name);
    if (!is_integer_of<std::int64_t>(v))
      r.fail_value(ptr, "parameter \"" + name + "\" must have an integer default, not " +
                            (v.is_number_integer() ? std::string("one beyond 64 bits") : std::string(v.type_name())));
    def.params.push_back({name, v.get<std::int64_t>(), r.key_loc(ptr)});
  }
}

/// Tensor `name` of "tensors": its shape and dtype.
TensorDecl read_tensor(const std::string& name, const ordered_json& t, JsonReader& r) {
  std::string ptr = JsonLocations::child("/tensors", name);
  r.expect_type(t, ptr, t.is_object(), "tensor \"" + name + "\"", "an object with \"shape\" and \"dtype\"");
  r.check_keys(t, ptr, {"shape", "dtype"}, "tensor \"" + name + "\"");
  TensorDecl decl;
  decl.name = name;
  decl.loc = r.key_loc(ptr);
  if (!t.contains("shape")) r.fail_key(ptr, "tensor \"" + name + "\" has no \"shape\"");
  if (!t.contains("dtype")) r.fail_key(ptr, "tensor \"" + name + "\" has no \"dtype\"",
                                       "supported dtypes: " + supported_dtype_names());
  const auto& shape = t["shape"];
  r.expect_type(shape, ptr + "/shape", shape.is_array() && !shape.empty(), "the shape of \"" + name + "\"",
                "a non-empty array of integers or expressions");
  for (std::size_t d = 0; d < shape.size(); ++d)
    decl.shape.push_back(r.expression(shape[d], ptr + "/shape/" + std::to_string(d),
                                      "dimension " + std::to_string(d) + " of \"" + name + "\""));
  const auto& dt = t["dtype"];
  r.expect_type(dt, ptr + "/dtype", dt.is_string(), "the dtype of \"" + name + "\"", "a string");
  auto parsed = parse_dtype(dt.get<std::string>());
  if (!parsed)
    r.fail_value(ptr + "/dtype", "dtype \"" + dt.get<std::string>() + "\" of tensor \"" + name + "\" is not supported",
                 "supported dtypes: " + supported_dtype_names());
  decl.dtype = *parsed;
  decl.dtype_loc = r.value_loc(ptr + "/dtype");
  return decl;
}

/// "iterators", "requires" and "accumulate", each where given.
void read_loops(const ordered_json& doc, JsonReader& r, ComputeDef& def) {
  if (doc.contains("iterators")) {
    const auto& its = doc["iterators"];
    r.expect_type(its, "/iterators", its.is_object(), "\"iterators\"", "an object of iterator extents");
    for (const auto& [name, v] : its.items()) {
      std::string ptr = JsonLocations::child("/iterators", name);
      def.extents.push_back({name, r.expression(v, ptr, "the extent of iterator \"" + name + "\""), r.key_loc(ptr)});
    }
  }
  if (doc.contains("requires")) {
    const auto& reqs = doc["requires"];
    r.expect_type(reqs, "/requires", reqs.is_array(), "\"requires\"", "an array of conditions");
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      std::string ptr = "/requires/" + std::to_string(i);
      r.expect_type(reqs[i], ptr, reqs[i].is_string(), "a requirement", "a string such as \"K % groups == 0\"");
      def.requirements.push_back({r.expression(reqs[i], ptr, "a requirement", true), r.value_loc(ptr)});
    }
  }
  if (doc.contains("accumulate")) {
    const auto& acc = doc["accumulate"];
    r.expect_type(acc, "/accumulate", acc.is_string(), "\"accumulate\"", "a dtype such as \"float32\"");
    auto parsed = parse_dtype(acc.get<std::string>());
    if (!parsed)
      r.fail_value("/accumulate", "accumulation dtype \"" + acc.get<std::string>() + "\" is not supported",
                   "supported dtypes: " + supported_dtype_names());
    def.accumulate = *parsed;
    def.accumulate_loc = r.value_loc("/accumulate");
  }
}

}  // namespace

ComputeDef parse_compute_json(const SourceText& source, const std::string& default_name) {
  ordered_json doc = parse_json_text(source, "a compute file is one JSON object; see 'tmap ops show gemm'");
  JsonLocations locs(source);
  JsonReader r(locs);
  if (!doc.is_object()) r.fail_value("", "a compute file must hold a JSON object, not " + std::string(doc.type_name()));
  r.check_keys(doc, "", {"name", "description", "compute", "params", "tensors", "iterators", "requires", "accumulate",
                                "epilogue"},
               "a compute definition");

  ComputeDef def;
  def.loc = SourceLoc::whole(source.file());
  def.name = default_name;
  if (doc.contains("name")) {
    r.expect_type(doc["name"], "/name", doc["name"].is_string(), "\"name\"", "a string");
    def.name = doc["name"].get<std::string>();
    if (const std::string why = name_problem(def.name); !why.empty()) r.fail_value("/name", why);
  }
  if (doc.contains("description")) {
    r.expect_type(doc["description"], "/description", doc["description"].is_string(), "\"description\"", "a string");
    def.description = printable(doc["description"].get<std::string>(), 2000, true);  // shown by tmap ops
  }
  if (!doc.contains("compute"))
    throw_user_error(r.value_loc(""), "missing \"compute\": the statement to compute",
                     "add e.g. \"compute\": \"C[m, n] += A[m, k] * B[k, n]\"");
  r.expect_type(doc["compute"], "/compute", doc["compute"].is_string(), "\"compute\"", "a string");
  def.statement_text = doc["compute"].get<std::string>();
  def.statement = parse_statement(def.statement_text, r.string_locator("/compute"));
  if (doc.contains("params")) read_params(doc["params"], r, def);
  if (!doc.contains("tensors"))
    throw_user_error(r.value_loc(""), "missing \"tensors\": the shape and dtype of each tensor",
                     "add e.g. \"tensors\": {\"A\": {\"shape\": [\"M\", \"K\"], \"dtype\": \"float16\"}, ...}");
  const auto& tensors = doc["tensors"];
  r.expect_type(tensors, "/tensors", tensors.is_object(), "\"tensors\"", "an object");
  for (const auto& [name, t] : tensors.items()) def.tensors.push_back(read_tensor(name, t, r));
  read_loops(doc, r, def);
  if (doc.contains("epilogue")) {
    r.expect_type(doc["epilogue"], "/epilogue", doc["epilogue"].is_string(), "\"epilogue\"",
                  "a string such as \"Y[m, n] = relu(C[m, n] + bias[n])\"");
    def.epilogue = parse_epilogue(doc["epilogue"].get<std::string>(), r.string_locator("/epilogue"));
  }
  return def;
}

void set_epilogue(ComputeDef& def, std::string_view text, const Locator& locate, const SourceLoc& loc) {
  if (def.epilogue)
    throw_user_error(loc, "compute '" + def.name + "' has an epilogue already", "give one epilogue");
  def.epilogue = parse_epilogue(text, locate);
}

namespace {

/// The declaration of tensor `name` (the statement's `role`: "tensor", "output tensor"); a
/// UserError at `loc` when the definition declares none.
TensorDecl& declared(ComputeDef& def, const std::string& name, const char* role, const SourceLoc& loc) {
  auto it = std::find_if(def.tensors.begin(), def.tensors.end(), [&](const TensorDecl& t) { return t.name == name; });
  if (it == def.tensors.end())
    throw_user_error(loc, "compute '" + def.name + "' declares no " + role + " '" + name + "'",
                     "declare it under \"tensors\"");
  return *it;
}

}  // namespace

void set_output_dtype(ComputeDef& def, DType dtype, const SourceLoc& loc) {
  TensorDecl& out = declared(def, def.statement.output.tensor, "output tensor", loc);
  if (!def.accumulate) {  // the sums stay in the dtype the definition stored them in
    def.accumulate = out.dtype;
    def.accumulate_loc = out.dtype_loc;
  }
  out.dtype = dtype;
  out.dtype_loc = loc;
}

void set_input_dtype(ComputeDef& def, DType dtype, const SourceLoc& loc) {
  if (!dtype_is_storage(dtype)) throw_user_error(loc, kNotStorage, kNotStorageFix);
  for (const AccessDecl& in : def.statement.inputs) {
    TensorDecl& t = declared(def, in.tensor, "tensor", loc);
    t.dtype = dtype;
    t.dtype_loc = loc;
  }
  TensorDecl& out = declared(def, def.statement.output.tensor, "tensor", loc);
  const DType sums = def.accumulate ? *def.accumulate : out.dtype;
  if (dtype_accumulates(dtype, sums)) return;
  const DType natural = !dtype_is_float(dtype) ? DType::kInt32 : dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  if (def.accumulate) {
    def.accumulate = natural;
    def.accumulate_loc = loc;
  }
  out.dtype = natural;
  out.dtype_loc = loc;
}

void set_dtypes(ComputeDef& def, const std::string& inputs, const std::string& output, const std::string& inputs_name,
                const std::string& output_name) {
  auto parsed = [](const std::string& text, const std::string& name, SourceLoc& loc) {
    SourceText src(name, text);
    loc = src.at(0, text.size());
    const auto dtype = parse_dtype(text);
    if (!dtype) throw_user_error(loc, "unknown dtype '" + text + "'", "supported dtypes: " + supported_dtype_names());
    return *dtype;
  };
  SourceLoc loc;
  if (!inputs.empty()) set_input_dtype(def, parsed(inputs, inputs_name, loc), loc);
  if (!output.empty()) set_output_dtype(def, parsed(output, output_name, loc), loc);
}

ComputeDef load_compute_file(const std::string& path) {
  SourceText src = read_source_file(path, "compute file",
                                     "give the path of a JSON compute definition, or a built-in op with --op "
                                     "(see 'tmap ops list')");
  // The file's stem names a compute without "name": its control characters, if any, become '_'.
  std::string stem = std::filesystem::path(path).stem().string();
  for (char& ch : stem)
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '_';
  return parse_compute_json(src, stem.substr(0, kMaxNameLength));
}

std::vector<ParamOverride> parse_param_overrides(const std::vector<std::string>& args) {
  std::vector<ParamOverride> out;
  for (const auto& arg : args) {
    SourceText src("--set", arg);
    auto eq = arg.find('=');
    if (eq == std::string::npos || eq == 0)
      throw_user_error(src.at(0, arg.size()), "--set expects NAME=VALUE, got '" + arg + "'",
                       "for example --set N=16");
    std::string name = arg.substr(0, eq);
    // One integer of the value, from `at` for `n` characters.
    auto integer = [&](std::size_t at, std::size_t n) {
      const std::string text = arg.substr(at, n);
      std::int64_t v = 0;
      auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (text.empty() || ec != std::errc() || p != text.data() + text.size())
        throw_user_error(src.at(at, std::max<std::size_t>(1, text.size())),
                         "the value of parameter '" + name + "' must be an integer or a range LO..HI, got '" +
                             arg.substr(eq + 1) + "'",
                         "for example --set " + name + "=16 or --set " + name + "=1..256");
      return v;
    };
    ParamOverride o{name, 0, src.at(0, eq)};
    const std::size_t dots = arg.find("..", eq + 1);
    if (dots == std::string::npos) {
      o.value = integer(eq + 1, std::string::npos);
    } else {
      o.range = true;
      o.lo = integer(eq + 1, dots - eq - 1);
      o.value = integer(dots + 2, std::string::npos);
      if (o.lo < 1 || o.lo >= o.value || o.value - o.lo >= kMaxRangeSizes)
        throw_user_error(src.at(eq + 1, arg.size() - eq - 1),
                         "the range " + arg.substr(eq + 1) + " of parameter '" + name + "' is not 1 <= LO < HI with at most " +
                             std::to_string(kMaxRangeSizes) + " sizes",
                         "for example --set " + name + "=1..256");
    }
    for (const ParamOverride& earlier : out)
      if (earlier.name == name)
        throw_user_error(src.at(0, eq), "parameter '" + name + "' is set twice (" + name + "=" +
                                            std::to_string(earlier.value) + ", then " + arg + ")",
                         "give each parameter once");
    out.push_back(std::move(o));
  }
  return out;
}

namespace {

struct ExtentSource {
  std::int64_t extent;
  std::string what;  // "dimension 1 of B"
  SourceLoc loc;
};

std::int64_t checked_mul(std::int64_t a, std::int64_t b, bool& overflow) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) overflow = true;
  return r;
}

std::int64_t checked_add(std::int64_t a, std::int64_t b, bool& overflow) {
  std::int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) overflow = true;
  return r;
}

/// What the stages of build_compute share: the definition, the parameters' values, names
/// resolved so far, and the compute being built.
struct ComputeBuilder {
  const ComputeDef& def;
  std::string in_compute;  ///< " of compute 'NAME'", for messages.
  ParamValues params;
  std::map<std::string, int> tensor_ids, iter_ids;
  std::vector<std::string> tensor_names;
  std::map<std::string, SourceLoc> first_seen;  ///< Where each iterator first appears.
  std::vector<const AccessDecl*> accesses;      ///< The output's, then the inputs'.
  /// The tensors to build: the definition's, with an epilogue's result in place of the
  /// statement's output (declared, or shaped as it), which is then a name of that tensor.
  std::vector<TensorDecl> decls;
  const TensorDecl* out_decl = nullptr;  ///< The statement's output as declared.
  std::set<std::string> epilogue_tensors;  ///< Names the epilogue reads or writes.
  Compute c;
};

/// "M=64, K=16": the parameters `e` reads, with their values.
std::string values_of(const Expr& e, const ParamValues& params) {
  std::string values;
  std::set<std::string> seen;
  visit_vars(e, [&](const std::string& n, const SourceLoc&) {
    const auto it = params.find(n);
    if (seen.insert(n).second)
      values += (values.empty() ? "" : ", ") + n + "=" + (it == params.end() ? "?" : std::to_string(it->second));
  });
  return values;
}

/// Parameters: defaults, then overrides; then the requirements must hold.
void bind_params(ComputeBuilder& b, const std::vector<ParamOverride>& overrides) {
  Compute& c = b.c;
  std::vector<std::string> param_names;
  for (const auto& p : b.def.params) {
    b.params[p.name] = p.value;
    param_names.push_back(p.name);
    c.params.emplace_back(p.name, p.value);
  }
  for (const auto& o : overrides) {
    auto it = std::find_if(c.params.begin(), c.params.end(), [&](const auto& p) { return p.first == o.name; });
    if (it == c.params.end())
      throw_user_error(o.loc, "unknown parameter '" + o.name + "'" + b.in_compute,
                       param_names.empty() ? "this compute has no parameters"
                                           : "its parameters are: " + join(param_names));
    it->second = o.value;
    b.params[o.name] = o.value;
  }
  for (const auto& req : b.def.requirements) {
    if (evaluate(req.condition, b.params, "a requirement") != 0) continue;
    const std::string values = values_of(req.condition, b.params);
    throw_user_error(req.loc, "requirement '" + to_string(req.condition) + "'" + b.in_compute + " does not hold" +
                                  (values.empty() ? "" : " for " + values),
                     "choose parameters that satisfy it (--set NAME=VALUE)");
  }
}

/// Calls f(access) for every tensor access of an epilogue expression.
template <typename F>
void visit_epilogue_accesses(const EpiExprDecl& e, F&& f) {
  if (e.op == EpiOp::kOperand) f(e.access);
  for (const auto& a : e.args) visit_epilogue_accesses(*a, f);
}

/// The tensor declarations to build (ComputeBuilder::decls).
void prepare_decls(ComputeBuilder& b) {
  const ComputeDef& def = b.def;
  const std::string& out = def.statement.output.tensor;
  b.decls = def.tensors;
  auto find = [&](const std::string& name) {
    return std::find_if(b.decls.begin(), b.decls.end(), [&](const TensorDecl& t) { return t.name == name; });
  };
  const auto out_at = std::find_if(def.tensors.begin(), def.tensors.end(), [&](const TensorDecl& t) { return t.name == out; });
  if (out_at == def.tensors.end()) return;  // check_accesses names the missing tensor
  b.out_decl = &*out_at;
  if (!def.epilogue) return;
  const AccessDecl& result = def.epilogue->output;
  b.epilogue_tensors.insert(result.tensor);
  visit_epilogue_accesses(*def.epilogue->expr, [&](const AccessDecl& a) {
    if (a.tensor != out) b.epilogue_tensors.insert(a.tensor);
  });
  if (result.tensor == out)
    throw_user_error(result.loc, "the epilogue writes '" + out + "', the contraction's own output",
                     "name its result differently, e.g. 'Y[...] = relu(" + out + "[...])'");
  TensorDecl y = *b.out_decl;  // an undeclared result: the output's shape and dtype
  y.name = result.tensor;
  y.loc = result.loc;
  if (const auto declared = find(result.tensor); declared != b.decls.end()) {
    y = *declared;
    b.decls.erase(declared);
  }
  *find(out) = y;
}

/// Each declared tensor's shape, evaluated: positive dimensions, 32-bit indexable.
void build_tensors(ComputeBuilder& b) {
  for (const auto& t : b.decls) {
    Tensor tensor;
    tensor.name = t.name;
    tensor.dtype = t.dtype;
    if (!dtype_is_storage(t.dtype))
      throw_user_error(t.dtype_loc, std::string(kNotStorage) + " (tensor '" + t.name + "')", kNotStorageFix);
    bool overflow = false;
    std::int64_t elements = 1;
    for (std::size_t d = 0; d < t.shape.size(); ++d) {
      std::string what = "dimension " + std::to_string(d) + " of tensor '" + t.name + "'";
      std::int64_t extent = evaluate(t.shape[d], b.params, what);
      if (extent <= 0) {
        const std::string values = values_of(t.shape[d], b.params);
        throw_user_error(t.shape[d]->loc, what + " is " + std::to_string(extent) + " (from '" +
                                              to_string(t.shape[d]) + "'" + (values.empty() ? "" : " with " + values) + ")",
                         "every dimension must be positive; check the parameters");
      }
      tensor.shape.push_back(extent);
      elements = checked_mul(elements, extent, overflow);
    }
    if (overflow || elements > kMaxElements32)
      throw_user_error(t.loc, "tensor '" + t.name + "' has " + (overflow ? std::string("more than 2^63") : std::to_string(elements)) +
                                  " elements, more than 32-bit indexing allows (2147483647)",
                       "tmap's kernels index with 32-bit integers; split the computation or use smaller parameters");
    b.tensor_ids[t.name] = static_cast<int>(b.c.tensors.size());
    b.tensor_names.push_back(t.name);
    b.c.tensors.push_back(std::move(tensor));
  }
  if (b.def.epilogue && b.out_decl) b.tensor_ids[b.def.statement.output.tensor] = b.tensor_ids.at(b.def.epilogue->output.tensor);
}

/// A declared epilogue result has the shape of the statement's output, whose place it takes.
void check_result_shape(const ComputeBuilder& b) {
  if (!b.def.epilogue || !b.out_decl) return;
  const Tensor& y = b.c.tensors[b.tensor_ids.at(b.def.epilogue->output.tensor)];
  std::vector<std::int64_t> out;
  for (std::size_t d = 0; d < b.out_decl->shape.size(); ++d)
    out.push_back(evaluate(b.out_decl->shape[d], b.params, "dimension " + std::to_string(d) + " of tensor '" + b.out_decl->name + "'"));
  if (y.shape != out) {
    auto text = [](const std::vector<std::int64_t>& s) {
      std::vector<std::string> v;
      for (auto d : s) v.push_back(std::to_string(d));
      return "[" + join(v) + "]";
    };
    throw_user_error(b.def.epilogue->output.loc, "the epilogue's result '" + y.name + "' is declared " + text(y.shape) +
                                                     ", but the contraction's output '" + b.out_decl->name + "' is " + text(out),
                     "declare it with the output's shape, or leave it undeclared");
  }
}

/// The statement's accesses: at most kMaxTensors, tensors exist, ranks agree, each tensor used once.
void check_accesses(ComputeBuilder& b) {
  const ComputeDef& def = b.def;
  b.accesses = {&def.statement.output};
  for (const auto& in : def.statement.inputs) b.accesses.push_back(&in);
  if (b.accesses.size() > static_cast<std::size_t>(Compute::kMaxTensors))
    throw_user_error(b.accesses[Compute::kMaxTensors]->loc,
                     "the statement takes " + std::to_string(b.accesses.size()) + " tensors; at most " +
                         std::to_string(Compute::kMaxTensors) + " (the output and " +
                         std::to_string(Compute::kMaxTensors - 1) + " inputs) are supported",
                     "split the product into several computes");
  std::map<std::string, SourceLoc> used;
  for (const AccessDecl* a : b.accesses) {
    auto it = b.tensor_ids.find(a->tensor);
    if (it == b.tensor_ids.end())
      throw_user_error(a->loc, "unknown tensor '" + a->tensor + "'" + b.in_compute,
                       b.tensor_names.empty() ? "declare it in \"tensors\""
                                              : "declared tensors are: " + join(b.tensor_names) + "; declare it in \"tensors\"");
    if (used.count(a->tensor))
      throw_user_error(a->loc, "tensor '" + a->tensor + "' is used twice in the statement",
                       "each tensor may appear once: the output is not an input, and a product X*X needs two names");
    used[a->tensor] = a->loc;
    const Tensor& t = b.c.tensors[it->second];
    if (a->indices.size() != t.shape.size())
      throw_user_error(a->loc, "tensor '" + a->tensor + "' has " + std::to_string(t.shape.size()) +
                                   " dimensions but is indexed with " + std::to_string(a->indices.size()),
                       "write one index per dimension");
  }
  for (const auto& t : def.tensors)
    if (!used.count(t.name) && !b.epilogue_tensors.count(t.name))
      throw_user_error(t.loc, "tensor '" + t.name + "' is declared but not used in the statement",
                       "remove it, or check the statement for a misspelt name");
}

/// Iterators: every name in an index that is not a parameter, spatial ones (in the output)
/// first, each group in order of first appearance; then the accesses as affine indices.
void build_iterators_and_accesses(ComputeBuilder& b) {
  const ComputeDef& def = b.def;
  Compute& c = b.c;
  std::vector<std::string> spatial, reduction;
  auto collect = [&](const AccessDecl& a, std::vector<std::string>& into) {
    for (const auto& idx : a.indices)
      visit_vars(idx, [&](const std::string& n, const SourceLoc& loc) {
        if (b.params.count(n) || b.first_seen.count(n)) return;
        b.first_seen[n] = loc;
        into.push_back(n);
      });
  };
  collect(def.statement.output, spatial);
  for (const auto& in : def.statement.inputs) collect(in, reduction);
  for (const auto& [names, kind] : {std::pair{&spatial, IterKind::kSpatial}, std::pair{&reduction, IterKind::kReduction}})
    for (const auto& n : *names) {
      b.iter_ids[n] = static_cast<int>(c.iters.size());
      c.iters.push_back({n, 0, kind});
    }
  if (c.update == UpdateKind::kAssign && !reduction.empty())
    throw_user_error(b.first_seen[reduction.front()],
                     "iterator '" + reduction.front() + "' does not index the output, so it is a reduction, but the "
                     "statement assigns with '='",
                     "write '+=' to accumulate over it, or index the output with it");
  auto build_access = [&](const AccessDecl& a) {
    Access out;
    out.tensor = b.tensor_ids.at(a.tensor);
    for (std::size_t d = 0; d < a.indices.size(); ++d)
      out.indices.push_back(to_affine(a.indices[d], b.params, b.iter_ids,
                                      "index " + std::to_string(d) + " of '" + a.tensor + "'"));
    return out;
  };
  c.output = build_access(def.statement.output);
  for (const auto& in : def.statement.inputs) c.inputs.push_back(build_access(in));
}

/// Where each iterator's extent comes from: each dimension it indexes directly, and declarations.
std::vector<std::vector<ExtentSource>> extent_sources(ComputeBuilder& b) {
  const Compute& c = b.c;
  std::vector<std::vector<ExtentSource>> sources(c.iters.size());
  for (std::size_t ai = 0; ai < b.accesses.size(); ++ai) {
    const Access& a = ai == 0 ? c.output : c.inputs[ai - 1];
    const Tensor& t = c.tensor_of(a);
    for (std::size_t d = 0; d < a.indices.size(); ++d) {
      int it = a.indices[d].direct_iterator();
      if (it >= 0)
        sources[it].push_back({t.shape[d], "dimension " + std::to_string(d) + " of '" + t.name + "'",
                               b.accesses[ai]->indices[d]->loc});
    }
  }
  for (const auto& e : b.def.extents) {
    auto it = b.iter_ids.find(e.iterator);
    if (it == b.iter_ids.end()) {
      if (b.params.count(e.iterator))
        throw_user_error(e.loc, "'" + e.iterator + "' is a parameter, not an iterator, and has no extent to declare");
      throw_user_error(e.loc, "declared iterator '" + e.iterator + "' does not appear in the statement",
                       "iterators of this compute are: " + join(c.iterator_names()));
    }
    std::int64_t v = evaluate(e.extent, b.params, "the extent of iterator '" + e.iterator + "'");
    sources[it->second].push_back({v, "its declared extent '" + to_string(e.extent) + "'", e.loc});
  }
  return sources;
}

/// Each iterator's extent: all its sources must agree.
void infer_extents(ComputeBuilder& b) {
  const std::vector<std::vector<ExtentSource>> sources = extent_sources(b);
  for (std::size_t i = 0; i < b.c.iters.size(); ++i) {
    const std::string& name = b.c.iters[i].name;
    if (sources[i].empty())
      throw_user_error(b.first_seen[name], "iterator '" + name + "' has no extent: it indexes no dimension directly",
                       "declare it, e.g. \"iterators\": {\"" + name + "\": \"EXTENT\"}");
    const ExtentSource& first = sources[i].front();
    for (const auto& s : sources[i]) {
      if (s.extent <= 0)
        throw_user_error(s.loc, "iterator '" + name + "' gets extent " + std::to_string(s.extent) + " from " + s.what,
                         "extents must be positive; check the parameters");
      if (s.extent != first.extent)
        throw_user_error(s.loc, "extent conflict for iterator '" + name + "': " + first.what + " gives " +
                                    std::to_string(first.extent) + " but " + s.what + " gives " + std::to_string(s.extent),
                         "tensors indexed directly by the same iterator must have equal dimensions");
    }
    b.c.iters[i].extent = first.extent;
  }
}

/// The output is written exactly once per element: each output index stays in bounds, is
/// injective (mixed-radix coefficients), uses disjoint iterators, and the spatial iteration
/// space has as many points as the output has elements.
void check_output_written_once(const ComputeBuilder& b) {
  const Compute& c = b.c;
  const Tensor& out = c.tensor_of(c.output);
  const AccessDecl& out_decl = b.def.statement.output;
  std::set<int> seen_spatial;
  for (std::size_t d = 0; d < c.output.indices.size(); ++d) {
    const AffineExpr& idx = c.output.indices[d];
    const SourceLoc& loc = out_decl.indices[d]->loc;
    std::vector<std::pair<std::int64_t, std::int64_t>> radix;  // (|coef|, extent)
    for (const auto& [id, coef] : idx.terms) {
      if (!seen_spatial.insert(id).second)
        throw_user_error(loc, "iterator '" + c.iters[id].name + "' indexes two dimensions of output '" + out.name + "'",
                         "each output element must be written once; use a separate iterator per dimension");
      radix.emplace_back(coef < 0 ? -coef : coef, c.iters[id].extent);
    }
    const auto [lo, hi] = c.index_range(idx);
    if (lo < 0 || hi > out.shape[d] - 1)
      throw_user_error(loc, "index " + std::to_string(d) + " of output '" + out.name + "' ranges over [" +
                                std::to_string(lo) + ", " + std::to_string(hi) + "], outside its dimension [0, " +
                                std::to_string(out.shape[d] - 1) + "]",
                       "the output may not be indexed out of bounds; check its shape and the iterators' extents");
    std::sort(radix.begin(), radix.end());
    std::int64_t reach = 0;  // largest offset reachable by the smaller terms
    for (const auto& [coef, extent] : radix) {
      if (coef <= reach)
        throw_user_error(loc, "index " + std::to_string(d) + " of output '" + out.name +
                                  "' writes some elements more than once",
                         "compound output indices must be mixed-radix, e.g. 'g*(K/groups) + k'");
      reach += coef * (extent - 1);
    }
  }
  std::int64_t spatial_points = 1;
  bool too_many = false;
  for (const auto& it : c.iters)
    if (it.kind == IterKind::kSpatial) spatial_points = checked_mul(spatial_points, it.extent, too_many);
  if (too_many || spatial_points != out.num_elements())
    throw_user_error(out_decl.loc, "output '" + out.name + "' has " + std::to_string(out.num_elements()) +
                                       " elements but its indices reach only " + std::to_string(spatial_points),
                     "every output element must be written; check the output's shape against the iterators' extents");

}

/// The most tensors an epilogue reads (each is one more kernel argument).
constexpr std::size_t kMaxEpilogueOperands = 8;

/// An epilogue's index: affine in the output's iterators and the parameters.
AffineExpr epilogue_index(const ComputeBuilder& b, const AccessDecl& a, std::size_t d) {
  const Expr& e = a.indices[d];
  const std::string what = "index " + std::to_string(d) + " of '" + a.tensor + "'";
  visit_vars(e, [&](const std::string& n, const SourceLoc& loc) {
    if (b.params.count(n)) return;
    const auto it = b.iter_ids.find(n);
    if (it == b.iter_ids.end() || b.c.iters[it->second].kind != IterKind::kSpatial)
      throw_user_error(loc, "'" + n + "' in " + what + " is " + (it == b.iter_ids.end() ? "not an iterator" : "a reduction iterator") +
                                ": an epilogue is indexed by the output's iterators",
                       "use the iterators that index the output: " + join([&] {
                         std::vector<std::string> names;
                         for (const auto& i : b.c.iters)
                           if (i.kind == IterKind::kSpatial) names.push_back(i.name);
                         return names;
                       }()));
  });
  return to_affine(e, b.params, b.iter_ids, what);
}

/// Whether two indices take the same values over the iteration space (terms of iterators of
/// extent 1 are zero: a convolution's group iterator when groups is 1).
bool same_index(const Compute& c, const AffineExpr& x, const AffineExpr& y) {
  auto live = [&](AffineExpr e) {
    std::erase_if(e.terms, [&](const auto& t) { return c.iters[t.first].extent == 1; });
    return e;
  };
  return live(x) == live(y);
}

/// Whether an epilogue access is indexed as the contraction writes its output.
bool indexed_as_output(const ComputeBuilder& b, const AccessDecl& a) {
  if (a.indices.size() != b.c.output.indices.size()) return false;
  for (std::size_t d = 0; d < a.indices.size(); ++d)
    if (!same_index(b.c, epilogue_index(b, a, d), b.c.output.indices[d])) return false;
  return true;
}

/// The operand an epilogue access reads (its index in c.epilogue.operands): a declared tensor,
/// or one shaped by the reach of its indices; in bounds; equal accesses share an operand.
int epilogue_operand(ComputeBuilder& b, const AccessDecl& a) {
  Compute& c = b.c;
  const std::string& out = b.def.statement.output.tensor;
  if (a.tensor == b.def.epilogue->output.tensor)
    throw_user_error(a.loc, "the epilogue reads its own result '" + a.tensor + "'", "read '" + out + "' instead");
  for (const auto& in : b.def.statement.inputs)
    if (in.tensor == a.tensor)
      throw_user_error(a.loc, "'" + a.tensor + "' is an input of the contraction; an epilogue reads other tensors",
                       "give the epilogue's operand its own name");
  Access acc;
  for (std::size_t d = 0; d < a.indices.size(); ++d) acc.indices.push_back(epilogue_index(b, a, d));
  auto id = b.tensor_ids.find(a.tensor);
  if (id == b.tensor_ids.end()) {  // undeclared: the smallest shape the indices fit in
    Tensor t{a.tensor, {}, c.tensor_of(c.output).dtype};
    for (const auto& e : acc.indices) t.shape.push_back(std::max<std::int64_t>(1, c.index_range(e).second + 1));
    if (c.tensors.size() == static_cast<std::size_t>(Compute::kMaxTensors))
      throw_user_error(a.loc, "more than " + std::to_string(Compute::kMaxTensors) + " tensors", "fuse fewer operands");
    id = b.tensor_ids.emplace(a.tensor, static_cast<int>(c.tensors.size())).first;
    c.tensors.push_back(std::move(t));
  }
  acc.tensor = id->second;
  const Tensor& t = c.tensors[acc.tensor];
  if (acc.indices.size() != t.shape.size())
    throw_user_error(a.loc, "tensor '" + a.tensor + "' has " + std::to_string(t.shape.size()) +
                                " dimensions but is indexed with " + std::to_string(acc.indices.size()),
                     "write one index per dimension");
  for (std::size_t d = 0; d < acc.indices.size(); ++d) {
    const auto [lo, hi] = c.index_range(acc.indices[d]);
    if (lo < 0 || hi > t.shape[d] - 1)
      throw_user_error(a.indices[d]->loc, "index " + std::to_string(d) + " of '" + a.tensor + "' ranges over [" +
                                              std::to_string(lo) + ", " + std::to_string(hi) + "], outside its dimension [0, " +
                                              std::to_string(t.shape[d] - 1) + "]",
                       "an epilogue reads its operands in bounds; check the shape and the indices");
  }
  for (std::size_t i = 0; i < c.epilogue.operands.size(); ++i)
    if (c.epilogue.operands[i] == acc) return static_cast<int>(i);
  if (c.epilogue.operands.size() == kMaxEpilogueOperands)
    throw_user_error(a.loc, "the epilogue reads more than " + std::to_string(kMaxEpilogueOperands) + " tensor accesses",
                     "fold constant operands together before tuning");
  c.epilogue.operands.push_back(std::move(acc));
  return static_cast<int>(c.epilogue.operands.size() - 1);
}

/// Appends an epilogue expression to the program, postfix.
void append_epilogue(ComputeBuilder& b, const EpiExprDecl& e) {
  Compute& c = b.c;
  for (const auto& a : e.args) append_epilogue(b, *a);
  EpiNode n{e.op, -1, e.value};
  if (e.op == EpiOp::kOperand && e.access.tensor == b.def.statement.output.tensor) {
    if (!indexed_as_output(b, e.access))
      throw_user_error(e.access.loc, "the epilogue reads '" + e.access.tensor + "' at other indices than the contraction writes",
                         "read the contraction's value where it is: '" + c.statement_text().substr(0, c.statement_text().find(" +=")) + "'");
    n.op = EpiOp::kAcc;
  } else if (e.op == EpiOp::kOperand) {
    n.operand = epilogue_operand(b, e.access);
  }
  if (c.epilogue.program.size() == kMaxEpilogueNodes)
    throw_user_error(e.loc, "the epilogue has more than " + std::to_string(kMaxEpilogueNodes) + " terms",
                     "an epilogue is a short elementwise expression");
  c.epilogue.program.push_back(n);
}

/// The epilogue: its result indexed as the output, its operands, its program; then every
/// dtype it reads and writes is a float it computes in float32.
void build_epilogue(ComputeBuilder& b) {
  if (!b.def.epilogue) return;
  const EpilogueDecl& e = *b.def.epilogue;
  Compute& c = b.c;
  c.epilogue.acc = b.def.statement.output.tensor;
  for (const auto& in : b.def.statement.inputs)
    if (in.tensor == e.output.tensor)
      throw_user_error(e.output.loc, "the epilogue's result '" + in.tensor + "' is an input of the contraction",
                       "name the result differently");
  if (!indexed_as_output(b, e.output))
    throw_user_error(e.output.loc, "the epilogue's result '" + e.output.tensor + "' is not indexed as the contraction's output",
                     "index it exactly as '" + c.epilogue.acc + "' in the statement");
  append_epilogue(b, *e.expr);
  bool reads_sum = false;
  for (const EpiNode& n : c.epilogue.program) reads_sum = reads_sum || n.op == EpiOp::kAcc;
  if (!reads_sum)
    throw_user_error(e.expr->loc, "the epilogue does not read the contraction's value '" + c.epilogue.acc + "'",
                     "apply it to the contraction, e.g. 'relu(" + c.epilogue.acc + "[...])'");
  auto check_float = [&](const Tensor& t, const SourceLoc& loc, const char* role) {
    if (t.dtype != DType::kFloat16 && t.dtype != DType::kBFloat16 && t.dtype != DType::kFloat32)
      throw_user_error(loc, std::string(role) + " '" + t.name + "' is " + std::string(dtype_name(t.dtype)) +
                                "; an epilogue computes in float32 and reads and writes float16, bfloat16 or float32",
                       "declare it float16, bfloat16 or float32");
  };
  check_float(c.tensor_of(c.output), e.output.loc, "the epilogue's result");
  visit_epilogue_accesses(*e.expr, [&](const AccessDecl& a) {
    if (a.tensor != c.epilogue.acc) check_float(c.tensors[b.tensor_ids.at(a.tensor)], a.loc, "epilogue operand");
  });
}

/// Index arithmetic stays within 32 bits, which the kernels compute in: for each access, the
/// sum over its dimensions of the largest magnitude any partial sum of the index can take, times
/// the dimension's stride, is at most INT32_MAX. This bounds every offset the kernels form, also
/// where a padded read leaves its tensor before the read is masked. Every product and sum is
/// checked in 64 bits.
void check_index_arithmetic(const ComputeBuilder& b) {
  const Compute& c = b.c;
  const std::size_t statement = b.accesses.size();
  for (std::size_t ai = 0; ai < statement + c.epilogue.operands.size(); ++ai) {
    const Access& a = ai == 0 ? c.output : ai < statement ? c.inputs[ai - 1] : c.epilogue.operands[ai - statement];
    const Tensor& t = c.tensor_of(a);
    const SourceLoc& loc = ai < statement ? b.accesses[ai]->loc : b.def.epilogue->output.loc;
    bool overflow = false;
    std::int64_t reach = 0;
    for (std::size_t d = 0; d < a.indices.size(); ++d) {
      const AffineExpr& e = a.indices[d];
      std::int64_t widest = e.constant == INT64_MIN ? (overflow = true, 0) : std::abs(e.constant);
      for (const auto& [it, coef] : e.terms) {
        const std::int64_t term = checked_mul(coef, c.iters[it].extent - 1, overflow);
        widest = checked_add(widest, term == INT64_MIN ? (overflow = true, 0) : std::abs(term), overflow);
      }
      reach = checked_add(reach, checked_mul(widest, t.stride(d), overflow), overflow);
    }
    if (overflow || reach > kMaxElements32)
      throw_user_error(loc,
                       "the indices of '" + t.name + "' reach offsets of " +
                           (overflow ? std::string("more than 2^63") : std::to_string(reach)) +
                           " elements, more than 32-bit indexing allows (2147483647)",
                       "tmap's kernels index with 32-bit integers; check the coefficients and the iterators' extents");
  }
}

/// Dtypes: products are summed in the accumulation dtype (the output's unless "accumulate" says
/// otherwise), and the output stores the sums in it or, for floats, in a narrower float.
void check_dtypes(ComputeBuilder& b) {
  const ComputeDef& def = b.def;
  Compute& c = b.c;
  // With an epilogue the statement's output is not stored: its dtype only names the sums'.
  const TensorDecl& out_decl_dtype = *b.out_decl;
  const Tensor out{out_decl_dtype.name, {}, out_decl_dtype.dtype};
  if (dtype_is_float8(out.dtype))
    throw_user_error(out_decl_dtype.dtype_loc,
                     "output '" + out.name + "' of dtype " + std::string(dtype_name(out.dtype)) +
                         ": tmap's kernels read 8-bit floats but do not store them yet",
                     "store the output as float16, bfloat16 or float32");
  c.accumulate = def.accumulate.value_or(out.dtype);
  const SourceLoc& acc_loc = def.accumulate ? def.accumulate_loc : out_decl_dtype.dtype_loc;
  for (const auto& in : c.inputs) {
    const Tensor& t = c.tensor_of(in);
    if (!dtype_accumulates(t.dtype, c.accumulate))
      throw_user_error(acc_loc, "products of '" + t.name + "' (" + std::string(dtype_name(t.dtype)) +
                                    ") cannot be accumulated in " + std::string(dtype_name(c.accumulate)) +
                                    (def.accumulate ? "" : " (the dtype of output '" + out.name + "')"),
                       "accumulate in a dtype at least as wide and of the same kind, e.g. float32 for float16 "
                       "inputs, int32 for int8 (\"accumulate\": \"float32\" keeps a narrower output)");
  }
  const bool narrower_float = dtype_is_float(out.dtype) && dtype_is_float(c.accumulate) &&
                              out.dtype != DType::kTFloat32 && dtype_bits(out.dtype) <= dtype_bits(c.accumulate);
  if (out.dtype != c.accumulate && !narrower_float)
    throw_user_error(out_decl_dtype.dtype_loc,
                     "output '" + out.name + "' of dtype " + std::string(dtype_name(out.dtype)) +
                         " cannot store sums accumulated in " + std::string(dtype_name(c.accumulate)),
                     "store integer sums in their own dtype, and float sums in a float no wider than the "
                     "accumulation (float16, bfloat16 or float32 for float32)");
}

}  // namespace

namespace {

Compute build_one_shape(const ComputeDef& def, const std::vector<ParamOverride>& overrides);

/// The iterator whose extent differs between the computes at a range's two ends, or -1.
int varying_iterator(const Compute& lo, const Compute& hi) {
  int found = -1;
  for (std::size_t i = 0; i < hi.iters.size() && i < lo.iters.size(); ++i)
    if (lo.iters[i].extent != hi.iters[i].extent) {
      if (found >= 0) return -1;
      found = static_cast<int>(i);
    }
  return found;
}

/// build_compute with the range `r` (an element of `overrides`): every size built, each equal
/// to compute_at() of the largest.
Compute build_range(const ComputeDef& def, std::vector<ParamOverride> overrides, std::size_t r) {
  const ParamOverride range = overrides[r];
  const std::string what = "--set " + range.name + "=" + std::to_string(range.lo) + ".." + std::to_string(range.value);
  auto at = [&](std::int64_t size) {
    overrides[r].range = false;
    overrides[r].value = size;
    return build_one_shape(def, overrides);
  };
  Compute c = at(range.value);
  const int iter = varying_iterator(at(range.lo), c);
  auto refuse = [&](const std::string& why) {
    throw_user_error(range.loc, "the range " + what + " cannot be taken at run time: " + why,
                     "give a parameter that sizes one output iterator and the first dimension of the tensors it "
                     "indexes (a GEMM's M, a convolution's batch N), or a single value");
  };
  if (iter < 0) refuse("it must change the extent of exactly one iterator");
  if (c.iters[iter].extent != range.value)
    refuse("iterator '" + c.iters[iter].name + "' must have the parameter's value as its extent");
  if (const std::string why = dynamic_extent_error(c, iter); !why.empty()) refuse(why);
  c.dynamic = {iter, range.name, range.lo, range.value, 0};
  for (std::int64_t size = range.lo; size < range.value; ++size) {
    Compute built = at(size);
    built.name = c.name;
    if (to_json(built) != to_json(compute_at(c, size)))
      refuse("at " + range.name + "=" + std::to_string(size) + " the compute is not the largest one cut down along '" +
             c.iters[iter].name + "'");
  }
  return c;
}

}  // namespace

Compute build_compute(const ComputeDef& def, const std::vector<ParamOverride>& overrides) {
  std::size_t ranges = 0, r = 0;
  for (std::size_t i = 0; i < overrides.size(); ++i)
    if (overrides[i].range) {
      if (ranges++) throw_user_error(overrides[i].loc, "only one parameter may be a range", "give the others single values");
      r = i;
    }
  return ranges ? build_range(def, overrides, r) : build_one_shape(def, overrides);
}

namespace {

Compute build_one_shape(const ComputeDef& def, const std::vector<ParamOverride>& overrides) {
  ComputeBuilder b{def, " of compute '" + def.name + "'", {}, {}, {}, {}, {}, {}, {}, nullptr, {}, {}};
  b.c.name = def.name;
  b.c.update = def.statement.update;
  bind_params(b, overrides);
  prepare_decls(b);
  build_tensors(b);
  check_result_shape(b);
  check_accesses(b);
  build_iterators_and_accesses(b);
  infer_extents(b);
  check_output_written_once(b);
  build_epilogue(b);
  check_index_arithmetic(b);
  check_dtypes(b);
  return std::move(b.c);
}

}  // namespace

namespace {

/// A compute definition (compute-file JSON) that builds `c`: its statement, tensors, every
/// iterator's extent and its accumulation dtype; parameters are already folded into these.
std::string definition_of(const Compute& c) {
  ordered_json tensors = ordered_json::object(), iters = ordered_json::object();
  auto declare = [&](const std::string& name, const Tensor& t, DType dtype) {
    tensors[name] = {{"shape", t.shape}, {"dtype", dtype_name(dtype)}};
  };
  // An epilogue's result takes the place of the statement's output, declared as its sums; the
  // result follows the other tensors, which the build puts back in the output's place.
  for (std::size_t i = 0; i < c.tensors.size(); ++i) {
    const bool out = static_cast<int>(i) == c.output.tensor;
    if (out && !c.epilogue.empty()) declare(c.epilogue.acc, c.tensors[i], c.accumulate);
    else declare(c.tensors[i].name, c.tensors[i], c.tensors[i].dtype);
  }
  if (!c.epilogue.empty()) declare(c.tensor_of(c.output).name, c.tensor_of(c.output), c.tensor_of(c.output).dtype);
  for (const Iterator& it : c.iters) iters[it.name] = it.extent;
  ordered_json def = {{"name", c.name}, {"compute", c.statement_text()}, {"tensors", tensors}, {"iterators", iters}};
  if (c.epilogue.empty() && c.accumulate != c.tensor_of(c.output).dtype) def["accumulate"] = dtype_name(c.accumulate);
  if (!c.epilogue.empty()) def["epilogue"] = c.epilogue_text();
  return def.dump();
}

}  // namespace

Compute rebuild_recorded_compute(const nlohmann::json& recorded, const std::string& key, const std::string& what) {
  const std::string hint = "the record was altered or written by another tool; tune the workload again";
  auto refuse = [&](const std::string& why) {
    throw UserError(format_diagnostic(SourceLoc::whole(what), why, hint));
  };
  const Compute claimed = compute_from_json(recorded, what);
  Compute built;
  try {
    built = build_compute(parse_compute_json(SourceText(what, definition_of(claimed)), claimed.name));
  } catch (const UserError& e) {
    // Without the location in the text made above.
    refuse("the record's compute is not one tmap builds: " + diagnostic_message(e.what()));
  }
  built.params = claimed.params;  // labels only: their values are folded into the shapes and indices
  built.dynamic = claimed.dynamic;  // compute_from_json checked its rules against the same shapes
  if (to_json(built) != to_json(claimed))
    refuse("the record's compute differs from the one its statement, tensors and extents build");
  if (!key.empty() && workload_key(built) != key)
    refuse("the record's key " + key + " is not its compute's (" + workload_key(built) + ")");
  return built;
}

}  // namespace tmap
