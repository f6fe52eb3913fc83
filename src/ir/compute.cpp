#include "tmap/ir/compute.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <functional>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "tmap/support/diagnostic.h"
#include "tmap/support/identifier.h"
#include "tmap/support/json_integer.h"

namespace tmap {

std::int64_t Tensor::num_elements() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::int64_t Tensor::stride(std::size_t d) const {
  std::int64_t s = 1;
  for (std::size_t i = d + 1; i < shape.size(); ++i) s *= shape[i];
  return s;
}

bool Access::uses(int iter) const {
  for (const auto& idx : indices)
    if (idx.uses(iter)) return true;
  return false;
}

std::vector<std::string> Compute::iterator_names() const {
  std::vector<std::string> names;
  for (const auto& it : iters) names.push_back(it.name);
  return names;
}

std::pair<std::int64_t, std::int64_t> Compute::index_range(const AffineExpr& e) const {
  std::int64_t lo = e.constant, hi = e.constant;
  for (const auto& [it, coef] : e.terms) {
    const std::int64_t reach = coef * (iters[it].extent - 1);
    (reach < 0 ? lo : hi) += reach;
  }
  return {lo, hi};
}

int Compute::find_iterator(const std::string& name) const {
  for (std::size_t i = 0; i < iters.size(); ++i)
    if (iters[i].name == name) return static_cast<int>(i);
  return -1;
}

std::vector<int> Compute::live_iterators(const std::vector<int>& its) const {
  std::vector<int> out;
  for (int it : its)
    if (iters[it].extent != 1) out.push_back(it);
  return out;
}

std::int64_t Compute::iteration_points() const {
  std::int64_t n = 1;
  for (const auto& it : iters) n *= it.extent;
  return n;
}

namespace {

/// Every access of `c`: the output, the inputs and the epilogue's operands.
std::vector<const Access*> all_accesses(const Compute& c) {
  std::vector<const Access*> out{&c.output};
  for (const Access& a : c.inputs) out.push_back(&a);
  for (const Access& a : c.epilogue.operands) out.push_back(&a);
  return out;
}

}  // namespace

std::string dynamic_extent_error(const Compute& c, int iter) {
  if (iter < 0 || iter >= static_cast<int>(c.iters.size())) return "there is no such iterator";
  const Iterator& it = c.iters[iter];
  if (it.kind != IterKind::kSpatial)
    return "iterator '" + it.name + "' is a reduction; only an output's iterator may take its size at run time";
  const std::vector<const Access*> accesses = all_accesses(c);
  for (std::size_t i = 0; i < accesses.size(); ++i) {
    const Access& a = *accesses[i];
    const Tensor& t = c.tensor_of(a);
    for (std::size_t d = 0; d < a.indices.size(); ++d) {
      const AffineExpr& e = a.indices[d];
      if (!e.uses(iter)) continue;
      const bool alone = e.terms.size() == 1 && e.terms[0].second == 1 && e.constant == 0;
      if (d != 0 || !alone || t.shape[0] != it.extent)
        return "iterator '" + it.name + "' must index dimension 0 of '" + t.name +
               "' alone (as its whole extent) to vary at run time";
      // The statement's tensors are copied in vectors along their last dimension.
      if (i <= c.inputs.size() && a.indices.size() < 2)
        return "iterator '" + it.name + "' indexes the only dimension of '" + t.name +
               "'; a run-time size must index the first of two or more";
    }
  }
  return {};
}

Compute compute_at(const Compute& c, std::int64_t size) {
  Compute out = c;
  out.dynamic = {};
  if (!c.dynamic.active()) return out;
  const int iter = c.dynamic.iter;
  out.iters[iter].extent = size;
  for (const Access* a : all_accesses(c))
    if (!a->indices.empty() && a->indices[0].uses(iter)) out.tensors[a->tensor].shape[0] = size;
  for (auto& [name, value] : out.params)
    if (name == c.dynamic.param) value = size;
  return out;
}

Compute contraction_of(const Compute& c) {
  Compute out = c;
  if (c.epilogue.empty()) return out;
  // The epilogue's operands' tensors follow the statement's (Compute::epilogue).
  int statement_tensors = c.output.tensor + 1;
  for (const Access& in : c.inputs) statement_tensors = std::max(statement_tensors, in.tensor + 1);
  out.tensors.resize(statement_tensors);
  out.tensors[c.output.tensor].name = c.epilogue.acc;
  out.epilogue = {};
  return out;
}

Compute range_sample(const Compute& c, std::int64_t size) {
  if (!c.dynamic.active() || size < c.dynamic.lo || size > c.dynamic.hi)
    throw InternalError("range_sample of a size outside the range");
  Compute out = c;
  out.dynamic.at = size;
  return out;
}

namespace {
std::string access_text(const Compute& c, const Access& a) {
  std::string out = c.tensor_of(a).name + "[";
  auto names = c.iterator_names();
  for (std::size_t d = 0; d < a.indices.size(); ++d)
    out += (d ? ", " : "") + to_string(a.indices[d], names);
  return out + "]";
}

/// The text of an access with `name` in place of its tensor's.
std::string renamed_access_text(const Compute& c, const Access& a, const std::string& name) {
  const std::string text = access_text(c, a);
  return name + text.substr(text.find('['));
}

/// Infix text of an epilogue program with the fewest parentheses that keep its tree: operators
/// bind as in C, an operand of the same precedence on the right is parenthesized, and a negative
/// constant is written as one (the parser reads '-' before a number as part of it).
std::string program_text(const Compute& c) {
  struct Text {
    std::string s;
    int prec;  // 1: + -, 2: * /, 3: unary minus, 4: leaves and calls
  };
  const Epilogue& e = c.epilogue;
  std::function<Text(const EpiNode&)> leaf = [&](const EpiNode& n) -> Text {
    if (n.op == EpiOp::kAcc) return {renamed_access_text(c, c.output, e.acc), 4};
    if (n.op == EpiOp::kOperand) return {access_text(c, e.operands[n.operand]), 4};
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", n.value);
    return {buf, n.value < 0 ? 3 : 4};
  };
  std::function<Text(EpiOp, std::vector<Text>&)> apply = [](EpiOp op, std::vector<Text>& a) -> Text {
    auto wrap = [](const Text& t, bool paren) { return paren ? "(" + t.s + ")" : t.s; };
    auto binary = [&](const char* sym, int prec) -> Text {
      return {wrap(a[0], a[0].prec < prec) + sym + wrap(a[1], a[1].prec <= prec), prec};
    };
    switch (op) {
      case EpiOp::kNeg: return {"-" + wrap(a[0], a[0].prec < 3), 3};
      case EpiOp::kAdd: return binary(" + ", 1);
      case EpiOp::kSub: return binary(" - ", 1);
      case EpiOp::kMul: return binary(" * ", 2);
      case EpiOp::kDiv: return binary(" / ", 2);
      default: break;
    }
    std::string call = std::string(epi_function_name(op)) + "(";
    for (std::size_t i = 0; i < a.size(); ++i) call += (i ? ", " : "") + a[i].s;
    return {call + ")", 4};
  };
  return fold_epilogue<Text>(e.program, leaf, apply).s;
}
}  // namespace

std::string Compute::statement_text() const {
  std::string out = (epilogue.empty() ? access_text(*this, output) : renamed_access_text(*this, output, epilogue.acc)) +
                    (update == UpdateKind::kAccumulate ? " += " : " = ");
  for (std::size_t i = 0; i < inputs.size(); ++i) out += (i ? " * " : "") + access_text(*this, inputs[i]);
  return out;
}

std::string Compute::epilogue_text() const {
  if (epilogue.empty()) return {};
  return access_text(*this, output) + " = " + program_text(*this);
}

nlohmann::json to_json(const Compute& c) {
  nlohmann::json j;
  j["name"] = c.name;
  j["statement"] = c.statement_text();
  j["params"] = nlohmann::json::object();
  for (const auto& [k, v] : c.params) j["params"][k] = v;
  j["tensors"] = nlohmann::json::array();
  for (const auto& t : c.tensors)
    j["tensors"].push_back({{"name", t.name}, {"shape", t.shape}, {"dtype", dtype_name(t.dtype)}});
  j["iterators"] = nlohmann::json::array();
  for (const auto& it : c.iters)
    j["iterators"].push_back({{"name", it.name},
                              {"extent", it.extent},
                              {"kind", it.kind == IterKind::kSpatial ? "spatial" : "reduction"}});
  auto access = [](const Access& a) {
    nlohmann::json indices = nlohmann::json::array();
    for (const auto& idx : a.indices) indices.push_back({{"constant", idx.constant}, {"terms", idx.terms}});
    return nlohmann::json{{"tensor", a.tensor}, {"indices", indices}};
  };
  j["update"] = c.update == UpdateKind::kAccumulate ? "+=" : "=";
  if (c.accumulate != c.tensor_of(c.output).dtype) j["accumulate"] = dtype_name(c.accumulate);
  j["output"] = access(c.output);
  j["inputs"] = nlohmann::json::array();
  for (const auto& in : c.inputs) j["inputs"].push_back(access(in));
  if (!c.epilogue.empty()) {
    nlohmann::json program = nlohmann::json::array(), operands = nlohmann::json::array();
    for (const EpiNode& n : c.epilogue.program) program.push_back({static_cast<int>(n.op), n.operand, n.value});
    for (const auto& a : c.epilogue.operands) operands.push_back(access(a));
    j["epilogue"] = {{"text", c.epilogue_text()}, {"acc", c.epilogue.acc}, {"operands", operands}, {"program", program}};
  }
  if (c.dynamic.active())
    j["dynamic"] = {{"iterator", c.dynamic.iter}, {"param", c.dynamic.param}, {"lo", c.dynamic.lo}, {"hi", c.dynamic.hi}};
  if (c.dynamic.at > 0) j["dynamic"]["at"] = c.dynamic.at;
  return j;
}

std::string workload_key(const Compute& c) {
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& t : c.tensors)
    tensors.push_back({{"name", t.name}, {"shape", t.shape}, {"dtype", std::string(dtype_name(t.dtype))}});
  nlohmann::json iters = nlohmann::json::array();
  for (const auto& it : c.iters) iters.push_back({it.name, it.extent});
  nlohmann::json canonical = {{"statement", c.statement_text()}, {"tensors", tensors}, {"iterators", iters}};
  if (!c.epilogue.empty()) canonical["epilogue"] = c.epilogue_text();
  if (c.accumulate != c.tensor_of(c.output).dtype) canonical["accumulate"] = dtype_name(c.accumulate);
  if (c.dynamic.active())
    canonical["dynamic"] = {c.iters[c.dynamic.iter].name, c.dynamic.lo, c.dynamic.hi};
  if (c.dynamic.at > 0) canonical["sample"] = c.dynamic.at;
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char ch : canonical.dump()) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  char key[17];
  std::snprintf(key, sizeof key, "%016llx", static_cast<unsigned long long>(h));
  return key;
}

namespace {

/// `v` as a T, when it is a JSON integer that T holds (a float or a wider integer converted
/// unchecked is undefined behaviour).
template <typename T>
T integer(const nlohmann::json& v, const char* what) {
  if (!is_integer_of<T>(v)) throw std::runtime_error(std::string(what) + " is not an integer in range");
  return v.get<T>();
}

DType dtype_from_json(const nlohmann::json& v, const char* what) {
  const std::string name = v.get<std::string>();
  auto dtype = parse_dtype(name);
  if (!dtype) throw std::runtime_error(std::string("unknown ") + what + " " + name);
  return *dtype;
}

void read_tensors_and_iterators(const nlohmann::json& j, Compute& c) {
  for (const auto& t : j.at("tensors")) {
    std::vector<std::int64_t> shape;
    for (const auto& d : t.at("shape")) shape.push_back(integer<std::int64_t>(d, "a dimension"));
    c.tensors.push_back({t.at("name").get<std::string>(), std::move(shape), dtype_from_json(t.at("dtype"), "dtype")});
  }
  for (const auto& it : j.at("iterators"))
    c.iters.push_back({it.at("name").get<std::string>(), integer<std::int64_t>(it.at("extent"), "an extent"),
                       it.at("kind").get<std::string>() == "spatial" ? IterKind::kSpatial : IterKind::kReduction});
}

/// An access of one of `c`'s tensors by affine indices of its iterators, checked against both.
Access access_from_json(const nlohmann::json& a, const Compute& c) {
  Access out;
  out.tensor = integer<int>(a.at("tensor"), "a tensor number");
  if (out.tensor < 0 || out.tensor >= static_cast<int>(c.tensors.size())) throw std::runtime_error("bad tensor index");
  for (const auto& idx : a.at("indices")) {
    AffineExpr e{integer<std::int64_t>(idx.at("constant"), "an index constant"), {}};
    for (const auto& term : idx.at("terms")) {
      if (!term.is_array() || term.size() != 2) throw std::runtime_error("an index term is not [iterator, coefficient]");
      const int it = integer<int>(term[0], "an iterator number");
      if (it < 0 || it >= static_cast<int>(c.iters.size())) throw std::runtime_error("bad iterator index");
      e.terms.push_back({it, integer<std::int64_t>(term[1], "a coefficient")});
    }
    out.indices.push_back(std::move(e));
  }
  if (out.indices.size() != c.tensors[out.tensor].shape.size()) throw std::runtime_error("rank mismatch");
  return out;
}

void read_epilogue(const nlohmann::json& e, Compute& c) {
  c.epilogue.acc = e.at("acc").get<std::string>();
  for (const auto& a : e.at("operands")) c.epilogue.operands.push_back(access_from_json(a, c));
  for (const auto& n : e.at("program")) {
    if (!n.is_array() || n.size() != 3 || !n[2].is_number()) throw std::runtime_error("an epilogue node is not [op, operand, value]");
    c.epilogue.program.push_back({static_cast<EpiOp>(integer<int>(n[0], "an epilogue op")),
                                  integer<int>(n[1], "an epilogue operand"), n[2].get<double>()});
  }
  if (const std::string why = epilogue_program_error(c.epilogue.program, c.epilogue.operands.size()); !why.empty())
    throw std::runtime_error("an epilogue with " + why);
}

void read_dynamic(const nlohmann::json& d, Compute& c) {
  c.dynamic = {integer<int>(d.at("iterator"), "the dynamic iterator"), d.at("param").get<std::string>(),
               integer<std::int64_t>(d.at("lo"), "a range's start"), integer<std::int64_t>(d.at("hi"), "a range's end"), 0};
  if (const std::string why = dynamic_extent_error(c, c.dynamic.iter); !why.empty()) throw std::runtime_error(why);
  // The parameter's name reaches exported sources (a launch function's parameter, comments).
  if (c.dynamic.param.size() > 64 || !is_identifier(c.dynamic.param)) throw std::runtime_error("a range's parameter that is not an identifier");
  if (c.dynamic.lo < 1 || c.dynamic.lo >= c.dynamic.hi || c.dynamic.hi != c.iters[c.dynamic.iter].extent)
    throw std::runtime_error("a range that is not 1 <= lo < hi = the iterator's extent");
  if (d.contains("at")) {
    c.dynamic.at = integer<std::int64_t>(d.at("at"), "a range's sample size");
    if (c.dynamic.at < c.dynamic.lo || c.dynamic.at > c.dynamic.hi)
      throw std::runtime_error("a range's sample size outside the range");
  }
}

}  // namespace

Compute compute_from_json(const nlohmann::json& j, const std::string& what) {
  try {
    Compute c;
    c.name = j.at("name").get<std::string>();
    for (const auto& [k, v] : j.at("params").items()) c.params.emplace_back(k, integer<std::int64_t>(v, "a parameter"));
    read_tensors_and_iterators(j, c);
    c.update = j.at("update").get<std::string>() == "+=" ? UpdateKind::kAccumulate : UpdateKind::kAssign;
    c.output = access_from_json(j.at("output"), c);
    c.accumulate = j.contains("accumulate") ? dtype_from_json(j.at("accumulate"), "accumulate dtype")
                                            : c.tensor_of(c.output).dtype;
    for (const auto& in : j.at("inputs")) c.inputs.push_back(access_from_json(in, c));
    if (j.contains("epilogue")) read_epilogue(j.at("epilogue"), c);
    if (j.contains("dynamic")) read_dynamic(j.at("dynamic"), c);
    return c;
  } catch (const std::exception& e) {
    throw UserError(format_diagnostic(SourceLoc::whole(what), "malformed compute description: " + exception_text(e),
                                      "it must be a document written by tmap (to_json of a compute)"));
  }
}

}  // namespace tmap
