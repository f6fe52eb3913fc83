#include "tmap/ir/compute.h"

#include <nlohmann/json.hpp>

namespace tmap {

std::int64_t Tensor::num_elements() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
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

int Compute::find_iterator(const std::string& name) const {
  for (std::size_t i = 0; i < iters.size(); ++i)
    if (iters[i].name == name) return static_cast<int>(i);
  return -1;
}

std::int64_t Compute::iteration_points() const {
  std::int64_t n = 1;
  for (const auto& it : iters) n *= it.extent;
  return n;
}

namespace {
std::string access_text(const Compute& c, const Access& a) {
  std::string out = c.tensor_of(a).name + "[";
  auto names = c.iterator_names();
  for (std::size_t d = 0; d < a.indices.size(); ++d)
    out += (d ? ", " : "") + to_string(a.indices[d], names);
  return out + "]";
}
}  // namespace

std::string Compute::statement_text() const {
  std::string out = access_text(*this, output) + (update == UpdateKind::kAccumulate ? " += " : " = ");
  for (std::size_t i = 0; i < inputs.size(); ++i) out += (i ? " * " : "") + access_text(*this, inputs[i]);
  return out;
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
  return j;
}

}  // namespace tmap
