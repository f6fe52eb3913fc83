#include "tmap/runtime/launch.h"

#include <sstream>
#include <stdexcept>

#include <cuda.h>  // CUtensorMapDataType's values only
#include <nlohmann/json.hpp>

#include "tmap/support/diagnostic.h"

namespace tmap {

static_assert(TMAP_PLAN_MAX_ARGS >= Compute::kMaxTensors && TMAP_PLAN_MAX_SLOTS >= Compute::kMaxTensors,
              "a reference kernel passes every tensor of a compute");

namespace {

int tensor_map_type(DType t) {
  switch (t) {
    case DType::kFloat16: return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case DType::kBFloat16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    case DType::kFloat32:
    case DType::kTFloat32: return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    case DType::kInt32: return CU_TENSOR_MAP_DATA_TYPE_INT32;
    case DType::kFloat64: return CU_TENSOR_MAP_DATA_TYPE_FLOAT64;
    case DType::kInt8:
    case DType::kFloat8E4M3:
    case DType::kFloat8E5M2: return CU_TENSOR_MAP_DATA_TYPE_UINT8;  // bytes copied as they are
    case DType::kInt4: break;
  }
  throw InternalError("a tensor map of packed int4 was generated");
}

tmap_tensor_map_spec map_of(const TensorMapSpec& m, tmap_arg source) {
  tmap_tensor_map_spec s{};
  s.source = source;
  s.dtype = tensor_map_type(m.dtype);
  s.rank = m.rank;
  for (int d = 0; d < 5; ++d) {
    s.dims[d] = m.dims[d];
    s.box[d] = m.box[d];
    s.traversal[d] = m.traversal[d];
  }
  for (int d = 0; d < 4; ++d) s.strides[d] = m.strides[d];
  for (int d = 0; d < 3; ++d) {
    s.lower[d] = m.lower[d];
    s.upper[d] = m.upper[d];
  }
  s.swizzle_bytes = m.swizzle_bytes;
  s.im2col = m.im2col;
  s.grow_dim = m.grow_dim;
  s.grow_per_size = m.grow_per_size;
  return s;
}

tmap_grid_growth growth_of(const GridGrowth& g) { return {g.axis, g.per_size, g.per_block, g.times}; }

/// Appends a step launching kernel `name` with `args`.
tmap_launch_step& add_step(LaunchPlan& out, const std::string& name, std::int64_t blocks, int threads,
                           std::initializer_list<tmap_arg> args) {
  tmap_launch_plan& p = out.plan;
  TMAP_CHECK(p.num_steps < TMAP_PLAN_MAX_STEPS, "more launches than a plan holds");
  tmap_launch_step& s = p.steps[p.num_steps++];
  s.kernel = static_cast<int>(out.kernels.size());
  out.kernels.push_back(name);
  s.grid[0] = blocks;
  s.grid[1] = s.grid[2] = 1;
  s.threads = threads;
  s.cluster_x = 1;
  for (const tmap_arg& a : args) s.args[s.num_args++] = a;
  return s;
}

}  // namespace

LaunchPlan plan_launch(const KernelSource& k) {
  LaunchPlan out;
  tmap_launch_plan& p = out.plan;
  p.workspace_bytes = k.workspace_bytes;
  p.workspace_slot = kSlotWorkspace;
  p.zeroed_offset = k.zeroed_offset;
  p.zeroed_bytes = k.zeroed_bytes;
  const tmap_arg a_in{kSlotA, 0}, b_in{kSlotB, 0}, output{kSlotOut, 0}, workspace{kSlotWorkspace, 0};
  // A relayouted operand is its copy in the workspace, which the prologue writes.
  auto operand = [&](int which) {
    return k.relayout_offset[which] < 0 ? tmap_arg{which, 0} : tmap_arg{kSlotWorkspace, k.relayout_offset[which]};
  };
  const bool prologue = !k.relayout_name.empty();
  if (prologue) add_step(out, k.relayout_name, k.relayout_blocks, k.relayout_threads, {a_in, b_in, workspace});
  TMAP_CHECK(k.epilogue_operands >= 0 && kSlotEpilogue + k.epilogue_operands <= TMAP_PLAN_MAX_SLOTS &&
                 5 + k.epilogue_operands + static_cast<int>(k.tensor_maps.size()) <= TMAP_PLAN_MAX_ARGS,
             "more epilogue operands than a plan passes");
  auto epilogue_args = [&](tmap_launch_step& s) {
    for (int i = 0; i < k.epilogue_operands; ++i) s.args[s.num_args++] = {kSlotEpilogue + i, 0};
  };
  // A kernel of a range of sizes takes the size after the epilogue's operands.
  const bool sized = k.size_lo > 0;
  p.size_lo = k.size_lo;
  p.size_hi = k.size_hi;
  tmap_launch_step& main = add_step(out, k.name, k.grid[0], k.threads, {operand(0), operand(1), output});
  epilogue_args(main);
  if (sized) main.args[main.num_args++] = {TMAP_SLOT_SIZE, 0};
  main.args[main.num_args++] = workspace;
  main.growth = growth_of(k.grid_growth);
  main.grid[1] = k.grid[1];
  main.grid[2] = k.grid[2];
  main.shared_bytes = k.shared_bytes;
  main.persistent = k.persistent;
  main.cluster_x = k.cluster_x;
  main.dependent = prologue;
  TMAP_CHECK(k.tensor_maps.size() <= TMAP_PLAN_MAX_MAPS, "more tensor maps than a plan holds");
  for (const TensorMapSpec& m : k.tensor_maps) {
    main.args[main.num_args++] = {TMAP_SLOT_MAP + p.num_maps, 0};
    p.maps[p.num_maps++] = map_of(m, m.operand == 2 ? output : operand(m.operand));
  }
  if (!k.reduce_name.empty()) {
    tmap_launch_step& reduce = add_step(out, k.reduce_name, k.reduce_blocks, k.reduce_threads, {workspace, output});
    reduce.dependent = 1;
    epilogue_args(reduce);
    if (sized) reduce.args[reduce.num_args++] = {TMAP_SLOT_SIZE, 0};
    reduce.growth = growth_of(k.reduce_growth);
  }
  return out;
}

LaunchPlan plan_plain_launch(const KernelSource& k, int tensors) {
  TMAP_CHECK(tensors <= TMAP_PLAN_MAX_ARGS && tensors <= TMAP_PLAN_MAX_SLOTS, "more tensors than a launch passes");
  LaunchPlan out;
  tmap_launch_step& s = add_step(out, k.name, k.grid[0], k.threads, {});
  s.grid[1] = k.grid[1];
  s.grid[2] = k.grid[2];
  for (int t = 0; t < tensors; ++t) s.args[s.num_args++] = {t, 0};
  return out;
}

namespace {

template <class T, std::size_t N>
std::vector<T> list(const T (&a)[N], int n) {
  return std::vector<T>(a, a + n);
}

nlohmann::json arg_json(const tmap_arg& a) { return nlohmann::json::array({a.slot, a.offset}); }

}  // namespace

nlohmann::json to_json(const LaunchPlan& lp) {
  const tmap_launch_plan& p = lp.plan;
  nlohmann::json steps = nlohmann::json::array(), maps = nlohmann::json::array();
  for (int i = 0; i < p.num_steps; ++i) {
    const tmap_launch_step& s = p.steps[i];
    nlohmann::json args = nlohmann::json::array();
    for (int a = 0; a < s.num_args; ++a) args.push_back(arg_json(s.args[a]));
    steps.push_back({{"kernel", s.kernel}, {"grid", list(s.grid, 3)}, {"threads", s.threads},
                     {"shared_bytes", s.shared_bytes}, {"persistent", s.persistent}, {"cluster_x", s.cluster_x},
                     {"dependent", s.dependent}, {"args", args}});
    if (s.growth.per_size > 0)
      steps.back()["growth"] = {s.growth.axis, s.growth.per_size, s.growth.per_block, s.growth.times};
  }
  for (int i = 0; i < p.num_maps; ++i) {
    const tmap_tensor_map_spec& m = p.maps[i];
    maps.push_back({{"source", arg_json(m.source)}, {"dtype", m.dtype}, {"rank", m.rank}, {"dims", list(m.dims, 5)},
                    {"strides", list(m.strides, 4)}, {"box", list(m.box, 5)}, {"swizzle_bytes", m.swizzle_bytes},
                    {"im2col", m.im2col}, {"lower", list(m.lower, 3)}, {"upper", list(m.upper, 3)},
                    {"traversal", list(m.traversal, 5)}});
    if (m.grow_per_size > 0) maps.back()["grow"] = {m.grow_dim, m.grow_per_size};
  }
  nlohmann::json j = {{"kernels", lp.kernels}, {"workspace_bytes", p.workspace_bytes},
                      {"workspace_slot", p.workspace_slot}, {"steps", steps}, {"maps", maps}};
  if (p.size_lo > 0) j["sizes"] = {p.size_lo, p.size_hi};
  if (p.zeroed_bytes > 0) j["zeroed"] = {p.zeroed_offset, p.zeroed_bytes};
  return j;
}

namespace {

[[noreturn]] void bad_plan(const std::string& what) { throw std::runtime_error("launch plan: " + what); }

long long checked(const nlohmann::json& v, const char* key, long long lo, long long hi) {
  const long long x = v.get<long long>();
  if (x < lo || x > hi)
    bad_plan(std::string(key) + " " + std::to_string(x) + " outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

/// j[key] as an integer in [lo, hi].
template <class T>
T bounded(const nlohmann::json& j, const char* key, long long lo, long long hi) {
  return static_cast<T>(checked(j.at(key), key, lo, hi));
}

template <class T, std::size_t N>
void read_list(const nlohmann::json& j, const char* key, T (&out)[N], long long lo, long long hi) {
  const nlohmann::json& v = j.at(key);
  if (!v.is_array() || v.size() != N) bad_plan(std::string(key) + " must list " + std::to_string(N) + " numbers");
  for (std::size_t i = 0; i < N; ++i) out[i] = static_cast<T>(checked(v[i], key, lo, hi));
}

/// An argument: a caller's slot at an offset inside what it points to (at most the workspace's
/// size), or one of the plan's `maps` tensor maps when `maps` >= 0.
tmap_arg read_arg(const nlohmann::json& j, const tmap_launch_plan& p, int maps) {
  if (!j.is_array() || j.size() != 2) bad_plan("an argument must be [slot, offset]");
  tmap_arg a{};
  a.slot = j[0].get<int>();
  a.offset = j[1].get<long long>();
  if (a.slot == TMAP_SLOT_SIZE && a.offset == 0 && p.size_lo > 0 && maps >= 0) return a;
  const bool map = maps >= 0 && a.slot >= TMAP_SLOT_MAP && a.slot < TMAP_SLOT_MAP + maps && a.offset == 0;
  const bool pointer = a.slot >= 0 && a.slot < TMAP_PLAN_MAX_SLOTS && a.offset >= 0 &&
                       (a.offset == 0 || (a.slot == p.workspace_slot && a.offset < p.workspace_bytes));
  if (!map && !pointer) bad_plan("argument [" + std::to_string(a.slot) + ", " + std::to_string(a.offset) + "] out of range");
  return a;
}

tmap_tensor_map_spec read_map(const nlohmann::json& j, const tmap_launch_plan& p) {
  tmap_tensor_map_spec m{};
  m.source = read_arg(j.at("source"), p, -1);
  m.dtype = bounded<int>(j, "dtype", 0, 15);
  m.rank = bounded<int>(j, "rank", 1, 5);
  read_list(j, "dims", m.dims, 0, 1LL << 40);
  read_list(j, "strides", m.strides, 0, 1LL << 40);
  read_list(j, "box", m.box, 0, 256);
  m.swizzle_bytes = bounded<int>(j, "swizzle_bytes", 32, 128);
  if (m.swizzle_bytes != 32 && m.swizzle_bytes != 64 && m.swizzle_bytes != 128) bad_plan("swizzle_bytes must be 32, 64 or 128");
  m.im2col = bounded<int>(j, "im2col", 0, 1);
  read_list(j, "lower", m.lower, -1024, 1024);
  read_list(j, "upper", m.upper, -1024, 1024);
  read_list(j, "traversal", m.traversal, 1, 8);
  if (j.contains("grow")) {
    long long grow[2];
    read_list(j, "grow", grow, 0, 1LL << 40);
    if (p.size_lo <= 0 || grow[0] >= m.rank || grow[1] < 1) bad_plan("a tensor map grows in a plan of one shape, or out of its rank");
    m.grow_dim = static_cast<int>(grow[0]);
    m.grow_per_size = static_cast<unsigned long long>(grow[1]);
    if (m.dims[m.grow_dim] != static_cast<unsigned long long>(p.size_hi) * m.grow_per_size)
      bad_plan("a growing tensor map's dimension is not its largest size");
  }
  return m;
}

tmap_launch_step read_step(const nlohmann::json& j, const tmap_launch_plan& p, int kernels) {
  tmap_launch_step s{};
  s.kernel = bounded<int>(j, "kernel", 0, kernels - 1);
  read_list(j, "grid", s.grid, 1, 0x7fffffff);
  s.threads = bounded<int>(j, "threads", 1, 1 << 20);  // CUDA refuses what it cannot launch
  s.shared_bytes = bounded<long long>(j, "shared_bytes", 0, 1 << 30);
  s.persistent = bounded<int>(j, "persistent", 0, 1);
  s.cluster_x = bounded<int>(j, "cluster_x", 1, 16);
  s.dependent = bounded<int>(j, "dependent", 0, 1);
  const nlohmann::json& args = j.at("args");
  if (!args.is_array() || args.size() > TMAP_PLAN_MAX_ARGS) bad_plan("a step passes at most " + std::to_string(TMAP_PLAN_MAX_ARGS) + " arguments");
  for (const auto& a : args) s.args[s.num_args++] = read_arg(a, p, p.num_maps);
  if (j.contains("growth")) {
    long long g[4];
    read_list(j, "growth", g, 0, 0x7fffffff);
    if (p.size_lo <= 0 || g[0] > 2 || g[1] < 1 || g[2] < 1 || g[3] < 1) bad_plan("a grid grows in a plan of one shape, or out of range");
    s.growth = {static_cast<int>(g[0]), g[1], g[2], g[3]};
    if ((p.size_hi * g[1] + g[2] - 1) / g[2] * g[3] != s.grid[g[0]]) bad_plan("a growing grid is not its largest size's");
  }
  return s;
}

LaunchPlan read_plan(const nlohmann::json& j) {
  LaunchPlan lp;
  tmap_launch_plan& p = lp.plan;
  lp.kernels = j.at("kernels").get<std::vector<std::string>>();
  p.workspace_bytes = bounded<long long>(j, "workspace_bytes", 0, 1LL << 40);
  p.workspace_slot = bounded<int>(j, "workspace_slot", 0, TMAP_PLAN_MAX_SLOTS - 1);
  if (j.contains("sizes")) {
    long long sizes[2];
    read_list(j, "sizes", sizes, 1, 0x7fffffff);
    if (sizes[0] >= sizes[1]) bad_plan("sizes must be [lo, hi] with lo < hi");
    p.size_lo = sizes[0];
    p.size_hi = sizes[1];
  }
  if (j.contains("zeroed")) {
    long long zeroed[2];
    read_list(j, "zeroed", zeroed, 0, 1LL << 40);
    if (zeroed[1] < 1 || zeroed[0] + zeroed[1] > p.workspace_bytes) bad_plan("zeroed bytes outside the workspace");
    p.zeroed_offset = zeroed[0];
    p.zeroed_bytes = zeroed[1];
  }
  const nlohmann::json& maps = j.at("maps");
  const nlohmann::json& steps = j.at("steps");
  if (!maps.is_array() || maps.size() > TMAP_PLAN_MAX_MAPS) bad_plan("at most " + std::to_string(TMAP_PLAN_MAX_MAPS) + " tensor maps");
  if (!steps.is_array() || steps.empty() || steps.size() > TMAP_PLAN_MAX_STEPS) bad_plan("1 to 3 steps");
  for (const auto& m : maps) p.maps[p.num_maps++] = read_map(m, p);
  for (const auto& s : steps) p.steps[p.num_steps++] = read_step(s, p, static_cast<int>(lp.kernels.size()));
  return lp;
}

}  // namespace

LaunchPlan launch_plan_from_json(const nlohmann::json& j) {
  try {
    return read_plan(j);
  } catch (const nlohmann::json::exception& e) {  // a missing field, or one of the wrong type
    bad_plan(e.what());
  }
}

namespace {

template <class T, std::size_t N>
std::string braces(const T (&a)[N]) {
  std::string s = "{";
  for (std::size_t i = 0; i < N; ++i) s += (i ? ", " : "") + std::to_string(a[i]) + (sizeof(T) == 8 ? "ll" : "");
  return s + "}";
}

std::string arg_text(const tmap_arg& a) { return "{" + std::to_string(a.slot) + ", " + std::to_string(a.offset) + "ll}"; }

}  // namespace

std::string plan_initializer(const tmap_launch_plan& p) {
  std::ostringstream os;
  os << "{\n    " << p.workspace_bytes << "ll,  // workspace bytes\n    " << p.workspace_slot << ",  // workspace slot\n    "
     << p.num_steps << ",  // steps: kernel, grid, threads, shared bytes, persistent, cluster_x, dependent, arguments\n    {";
  for (int i = 0; i < p.num_steps; ++i) {
    const tmap_launch_step& s = p.steps[i];
    os << (i ? ",\n     " : "") << "{" << s.kernel << ", " << braces(s.grid) << ", " << s.threads << ", " << s.shared_bytes
       << "ll, " << s.persistent << ", " << s.cluster_x << ", " << s.dependent << ", " << s.num_args << ", {";
    for (int a = 0; a < s.num_args; ++a) os << (a ? ", " : "") << arg_text(s.args[a]);
    os << "}";
    if (s.growth.per_size > 0)
      os << ", {" << s.growth.axis << ", " << s.growth.per_size << "ll, " << s.growth.per_block << "ll, "
         << s.growth.times << "ll}";
    os << "}";
  }
  os << "},\n    " << p.num_maps
     << ",  // tensor maps: source, dtype, rank, dims, strides, box, swizzle, im2col, lower, upper, traversal\n    {";
  for (int i = 0; i < p.num_maps; ++i) {
    const tmap_tensor_map_spec& m = p.maps[i];
    os << (i ? ",\n     " : "") << "{" << arg_text(m.source) << ", " << m.dtype << ", " << m.rank << ", " << braces(m.dims)
       << ", " << braces(m.strides) << ", " << braces(m.box) << ", " << m.swizzle_bytes << ", " << m.im2col << ", "
       << braces(m.lower) << ", " << braces(m.upper) << ", " << braces(m.traversal);
    if (m.grow_per_size > 0) os << ", " << m.grow_dim << ", " << m.grow_per_size << "ull";
    os << "}";
  }
  os << "}";
  if (p.size_lo > 0 || p.zeroed_bytes > 0) os << ",\n    " << p.size_lo << "ll, " << p.size_hi << "ll";
  if (p.zeroed_bytes > 0) os << ",\n    /* zeroed workspace bytes */ " << p.zeroed_offset << "ll, " << p.zeroed_bytes << "ll";
  os << "}";
  return os.str();
}

}  // namespace tmap
