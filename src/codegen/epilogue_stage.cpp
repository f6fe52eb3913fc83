// The output stage of a kernel with a fused epilogue (ir/epilogue.h): where every family stores
// an output, store_d / store_d_vec read the epilogue's operands at the element's indices, apply
// the expression to the accumulator in float32 and round the result to the output's dtype once.
// Split-K and cluster sums reach store_d only after the sum, so the epilogue runs once. Operands
// are read through the read-only path (__ldg): the loads are then not ordered after the output's
// stores, so that an unrolled epilogue loop issues them ahead instead of waiting on each.

#include <algorithm>
#include <functional>

#include "tile_pipeline.h"
#include "tmap/codegen/device_library.h"
#include "tmap/codegen/reference_emitter.h"
#include "tmap/gemm/contiguity.h"

namespace tmap::pipeline {
namespace {

std::string operand_name(int i) { return "epi_" + std::to_string(i); }

/// The expression in float32 code, with leaves named by `acc` and `operand`.
std::string epilogue_code(const Epilogue& e, const std::string& acc, const std::function<std::string(int)>& operand) {
  std::function<std::string(const EpiNode&)> leaf = [&](const EpiNode& n) -> std::string {
    if (n.op == EpiOp::kAcc) return acc;
    if (n.op == EpiOp::kOperand) return operand(n.operand);
    return epi_constant_code(n.value, false);
  };
  std::function<std::string(EpiOp, std::vector<std::string>&)> apply = [](EpiOp op, std::vector<std::string>& a) {
    return epi_op_code(op, a, "epi_");
  };
  return fold_epilogue<std::string>(e.program, leaf, apply);
}

/// The iterators of virtual axis `along` ('m' or 'n').
const std::vector<int>& axis_iters(const ImplicitGemm& g, char along) { return along == 'm' ? g.m_iters : g.n_iters; }

/// How an operand's values for a vector of `vec` outputs along `along` are loaded: 0 when they
/// are one value (the operand does not vary along the axis), else the elements per load (1: one
/// by one; more: aligned vectors of that many).
int operand_load_width(const ImplicitGemm& g, const Access& a, char along, int vec) {
  const Compute& c = *g.compute;
  bool varies = false;
  for (int it : axis_iters(g, along)) varies = varies || a.uses(it);
  if (!varies) return 0;
  const int w = contiguous_width(c, a, axis_iters(g, along), dtype_bits(c.tensor_of(a).dtype));
  return std::max(1, std::min(w, vec));
}

/// Whether operand `a` stays the same along the epilogue loop of vectors along `along`: it uses
/// no iterator of the other virtual axis (a convolution's per-channel scale or bias), so a thread
/// whose vectors keep their position along `along` loads it once.
bool operand_fixed(const ImplicitGemm& g, const Access& a, char along) {
  for (int it : axis_iters(g, along == 'm' ? 'n' : 'm'))
    if (a.uses(it)) return false;
  return true;
}

/// `int epi_offset_<i>(m, n, z)`: where operand i's element for the output at virtual (m, n) of
/// batch z is.
void emit_operand_offsets(std::ostringstream& os, const ImplicitGemm& g) {
  const Compute& c = *g.compute;
  for (std::size_t i = 0; i < c.epilogue.operands.size(); ++i) {
    const Access& a = c.epilogue.operands[i];
    const std::vector<bool> used = used_by(c, a);
    os << "// " << c.tensor_of(a).name << ": operand " << i << " of the epilogue\n"
       << "__device__ __forceinline__ int " << operand_name(static_cast<int>(i)) << "_offset(int m, int n, int z) {\n";
    if (const std::string linear = linear_offset_code(g, a); !linear.empty()) {
      os << "  (void)m; (void)n; (void)z;\n  return " << linear << ";\n}\n\n";
      continue;
    }
    decompose(os, c, g.m_iters, "m", used, "  ");
    decompose(os, c, g.n_iters, "n", used, "  ");
    decompose(os, c, g.batch_iters, "z", used, "  ");
    std::string offset = "0";
    for (std::size_t d = 0; d < a.indices.size(); ++d)
      offset = d ? "(" + offset + ") * " + std::to_string(c.tensor_of(a).shape[d]) + " + (" + affine_code(a.indices[d], c) + ")"
                 : "(" + affine_code(a.indices[d], c) + ")";
    os << "  (void)m; (void)n; (void)z;\n  return " << offset << ";\n}\n\n";
  }
}

/// Loads operand i's values for the vector at virtual (m, n) into `v.epi_<i>` in its storage
/// type: one value when the operand does not vary along `along`, else `vec` values, in aligned
/// vectors where they are contiguous.
void emit_operand_loads(std::ostringstream& os, const ImplicitGemm& g, int i, int vec, char along,
                        const std::string& indent) {
  const Compute& c = *g.compute;
  const Tensor& t = c.tensor_of(c.epilogue.operands[i]);
  const std::string name = operand_name(i), type = storage_type(t.dtype);
  const int w = operand_load_width(g, c.epilogue.operands[i], along, vec);
  if (w == 0) {
    os << indent << "v." << name << "[0] = __ldg(out." << name << " + " << name << "_offset(m, n, z));\n";
    return;
  }
  const std::string at = along == 'm' ? "m + p, n" : "m, n + p";
  const int bytes = w * dtype_bits(t.dtype) / 8;
  os << indent << "#pragma unroll\n" << indent << "for (int p = 0; p < " << vec << "; p += " << w << ")";
  if (w == 1) {
    os << " v." << name << "[p] = __ldg(out." << name << " + " << name << "_offset(" << at << ", z));\n";
    return;
  }
  const std::string vt = vector_type(bytes);
  os << "  // " << w << " contiguous, aligned elements: one " << bytes << "-byte load\n"
     << indent << "  v." << name << "[p / " << w << "] = __ldg(reinterpret_cast<const " << vt << "*>(out." << name << " + "
     << name << "_offset(" << at << ", z)));\n";
}

/// Operand i's value for output t of the vector, converted to float from `v`.
std::string loaded_value(const ImplicitGemm& g, int i, int vec, char along, const std::string& t) {
  const Compute& c = *g.compute;
  const Access& a = c.epilogue.operands[i];
  const int w = operand_load_width(g, a, along, vec);
  const std::string src = "v." + operand_name(i);
  if (w > 1) return "(float)reinterpret_cast<const " + storage_type(c.tensor_of(a).dtype) + "*>(" + src + ")[" + t + "]";
  return "(float)" + src + "[" + (w ? t : "0") + "]";
}

/// The values an operand the same along the loop keeps in `EpiFixed` (floats): one, or one per
/// output of the vector.
int fixed_values(const ImplicitGemm& g, const Access& a, char along, int vec) {
  return operand_load_width(g, a, along, vec) ? vec : 1;
}

/// Operand i as the epilogue reads it for output t of the vector: from `f`, already in float, when
/// it is the same along the loop and use_f says it was loaded there, else from `v`.
std::string operand_value(const ImplicitGemm& g, int i, int vec, char along, const std::string& t) {
  const Access& a = g.compute->epilogue.operands[i];
  if (!operand_fixed(g, a, along)) return loaded_value(g, i, vec, along, t);
  const std::string at = fixed_values(g, a, along, vec) > 1 ? t : "0";
  return "(use_f ? f." + operand_name(i) + "[" + at + "] : " + loaded_value(g, i, vec, along, t) + ")";
}

/// `struct EpiFixed`: the operands the same along the loop, converted to float once a tile rather
/// than for every vector (a convolution's per-channel scale and bias: 16 conversions a vector of 8
/// outputs), and `epi_fixed`, which converts them from a loaded EpiVec.
void emit_fixed_floats(std::ostringstream& os, const ImplicitGemm& g, int vec, char along) {
  const Epilogue& e = g.compute->epilogue;
  os << "// The operands the same along the loop, in float32: converted once, not for every vector\n"
     << "struct EpiFixed {\n";
  for (std::size_t i = 0; i < e.operands.size(); ++i)
    if (operand_fixed(g, e.operands[i], along))
      os << "  float " << operand_name(static_cast<int>(i)) << "[" << fixed_values(g, e.operands[i], along, vec) << "];\n";
  os << "};\n\n"
     << "__device__ __forceinline__ EpiFixed epi_fixed(const EpiVec& v) {\n  EpiFixed f{};\n";
  for (std::size_t i = 0; i < e.operands.size(); ++i) {
    if (!operand_fixed(g, e.operands[i], along)) continue;
    const std::string name = operand_name(static_cast<int>(i));
    os << "  #pragma unroll\n  for (int t = 0; t < " << fixed_values(g, e.operands[i], along, vec) << "; ++t) f." << name
       << "[t] = " << loaded_value(g, static_cast<int>(i), vec, along, "t") << ";\n";
  }
  os << "  (void)v;\n  return f;\n}\n\n";
}

/// `struct EpiVec`: the epilogue's operand values of one output vector, and `epi_load`, which
/// fills it (which: 0 every operand, 1 those fixed along the loop, 2 the others).
void emit_operand_vector(std::ostringstream& os, const ImplicitGemm& g, int vec, char along) {
  const Compute& c = *g.compute;
  const Epilogue& e = c.epilogue;
  os << "// The epilogue's operand values of one vector of outputs, in their storage types\nstruct EpiVec {\n";
  for (std::size_t i = 0; i < e.operands.size(); ++i) {
    const Access& a = e.operands[i];
    const int w = operand_load_width(g, a, along, vec);
    const std::string type = w > 1 ? vector_type(w * dtype_bits(c.tensor_of(a).dtype) / 8) : storage_type(c.tensor_of(a).dtype);
    os << "  " << type << " " << operand_name(static_cast<int>(i)) << "[" << (w > 1 ? vec / w : w ? vec : 1) << "];  // "
       << c.tensor_of(a).name
       << (operand_fixed(g, a, along) ? ": the same along the loop" : "") << "\n";
  }
  os << "};\n\n"
     << "// The operands of the vector at virtual (m, n) of batch z (which: 0 all, 1 those the same along the\n"
     << "// loop, 2 the others)\n"
     << "__device__ __forceinline__ void epi_load(const Output& out, int m, int n, int z, EpiVec& v, const int which) {\n"
     << "  if (m >= M || n >= N) return;\n";
  for (int fixed = 1; fixed >= 0; --fixed) {
    bool any = false;
    for (std::size_t i = 0; i < e.operands.size(); ++i) any = any || operand_fixed(g, e.operands[i], along) == bool(fixed);
    if (!any) continue;
    os << "  if (which != " << (fixed ? 2 : 1) << ") {\n";
    for (std::size_t i = 0; i < e.operands.size(); ++i)
      if (operand_fixed(g, e.operands[i], along) == bool(fixed)) emit_operand_loads(os, g, static_cast<int>(i), vec, along, "    ");
    os << "  }\n";
  }
  os << "  (void)which;\n}\n\n";
  emit_fixed_floats(os, g, vec, along);
}

/// The epilogue of one vector of `vec` sums: `dst`[t] = the epilogue of `src`[t], in out_type
/// (store_d_vec into its result, epi_in_place over the tile's vector itself).
void emit_vector_epilogue(std::ostringstream& os, const ImplicitGemm& g, const std::string& out_type, int vec,
                          char along, const std::string& src, const std::string& dst) {
  os << "  #pragma unroll\n  for (int t = 0; t < " << vec << "; ++t) {\n"
     << "    const float acc = (float)" << src << "[t];\n"
     << "    " << dst << "[t] = (" << out_type << ")"
     << epilogue_code(g.compute->epilogue, "acc", [&](int i) { return operand_value(g, i, vec, along, "t"); })
     << ";\n  }\n";
}

}  // namespace

std::string output_params(const ImplicitGemm& g, const std::string& out_type) {
  const Compute& c = *g.compute;
  const std::string size = g.dynamic() ? ", const int size" : "";
  if (c.epilogue.empty()) return out_type + "* __restrict__ out" + size;
  std::string s = out_type + "* __restrict__ out_data";
  for (std::size_t i = 0; i < c.epilogue.operands.size(); ++i)
    s += ", const " + storage_type(c.tensor_of(c.epilogue.operands[i]).dtype) + "* __restrict__ " +
         operand_name(static_cast<int>(i));
  return s + size;
}

std::string output_bundle(const ImplicitGemm& g) {
  const Compute& c = *g.compute;
  std::string s = !g.dynamic() ? "" : g.dynamic_axis == 'm' ? "  M = size * PER_SIZE;\n" : "  N = size * PER_SIZE;\n";
  if (c.epilogue.empty()) return s;
  s += "  const Output out{out_data";
  for (std::size_t i = 0; i < c.epilogue.operands.size(); ++i) s += ", " + operand_name(static_cast<int>(i));
  return s + "};\n";
}

std::string stored_value(const ImplicitGemm& g, const std::string& out_type, const std::string& value) {
  return g.compute->epilogue.empty() ? "(" + out_type + ")" + value : value;
}

void emit_epilogue_scatter(std::ostringstream& os, const ImplicitGemm& g, const std::string& out_type, int vec,
                           char along) {
  const Compute& c = *g.compute;
  const Epilogue& e = c.epilogue;
  emit_device_include(os, "epilogue");
  os << "// The output and the epilogue's operands: " << c.epilogue_text() << "\n"
     << "struct Output {\n  " << out_type << "* __restrict__ data;\n";
  for (std::size_t i = 0; i < e.operands.size(); ++i)
    os << "  const " << storage_type(c.tensor_of(e.operands[i]).dtype) << "* __restrict__ " << operand_name(static_cast<int>(i))
       << ";  // " << c.tensor_of(e.operands[i]).name << "\n";
  os << "};\n\n";
  emit_operand_offsets(os, g);
  auto offset = [&] { emit_output_offset(os, g); };
  os << "// " << c.tensor_of(c.output).name << " element at virtual (m, n) of batch z: the epilogue applied to the sum\n"
     << "template <typename V>\n"
     << "__device__ __forceinline__ void store_d(const Output& out, int m, int n, int z, V value) {\n";
  offset();
  for (std::size_t i = 0; i < e.operands.size(); ++i) {
    const std::string name = operand_name(static_cast<int>(i));
    os << "  const float " << name << " = (float)__ldg(out." << name << " + " << name << "_offset(m, n, z));\n";
  }
  os << "  const float acc = (float)value;\n"
     << "  out.data[offset] = (" << out_type << ")" << epilogue_code(e, "acc", operand_name) << ";\n}\n\n";
  emit_plain_stores(os, g, out_type, vec, along);  // for sums the epilogue was applied to in registers
  if (vec <= 1) return;
  emit_operand_vector(os, g, vec, along);
  const int bits = dtype_bits(c.tensor_of(c.output).dtype);
  os << "// " << vec << " outputs from virtual (m, n) on along " << along
     << ", contiguous and aligned in memory: one " << vec * bits / 8 << "-byte store, the operands' values in v\n"
     << "template <typename V>\n"
     << "__device__ __forceinline__ void store_d_vec(const Output& out, int m, int n, int z, const V* values, const EpiFixed& f,\n"
     << "                                            const EpiVec& v, const bool use_f) {\n";
  offset();
  os << "  __align__(16) " << out_type << " result[" << vec << "];\n";
  emit_vector_epilogue(os, g, out_type, vec, along, "values", "result");
  os << "  *reinterpret_cast<" << vector_type(vec * bits / 8) << "*>(out.data + offset) = *reinterpret_cast<const "
     << vector_type(vec * bits / 8) << "*>(result);\n}\n\n"
     << "// The same, loading the operands itself\n"
     << "template <typename V>\n"
     << "__device__ __forceinline__ void store_d_vec(const Output& out, int m, int n, int z, const V* values) {\n"
     << "  EpiVec v;\n  epi_load(out, m, n, z, v, 0);\n  store_d_vec(out, m, n, z, values, EpiFixed{}, v, false);\n}\n\n";
}

namespace {

/// Whether operand `a` varies along both virtual axes (a residual), not per channel or tensor.
bool full_shape(const ImplicitGemm& g, const Access& a) { return !operand_fixed(g, a, 'm') && !operand_fixed(g, a, 'n'); }

}  // namespace

std::string vector_position(char along, const std::string& width) {
  return along == 'n' ? "const int mm = e / (BN / " + width + "), nn = e % (BN / " + width + ") * " + width + ";"
                      : "const int nn = e / (BM / " + width + "), mm = e % (BM / " + width + ") * " + width + ";";
}

bool epilogue_has_full_shape_operand(const ImplicitGemm& g) {
  for (const Access& a : g.compute->epilogue.operands)
    if (full_shape(g, a)) return true;
  return false;
}

std::vector<PrefetchedOperand> prefetched_operands(const ImplicitGemm& g, const ScheduleParams& p) {
  const Compute& c = *g.compute;
  std::vector<PrefetchedOperand> out;
  if (p.split_k > 1 || p.window) return out;  // split sums reach the epilogue in another kernel or block
  const char along = out_vector(g, p).along;
  const int extent = along == 'n' ? p.block_n : p.block_m;
  for (std::size_t i = 0; i < c.epilogue.operands.size(); ++i) {
    const Access& a = c.epilogue.operands[i];
    if (!full_shape(g, a)) continue;  // a few lines every block reads
    // A request per 128-byte line, or per contiguous run where runs are shorter.
    const int bits = dtype_bits(c.tensor_of(a).dtype);
    int w = contiguous_width(c, a, axis_iters(g, along), bits, 128);
    while (w > 1 && extent % w) w /= 2;  // whole requests per tile row
    if (w * bits >= 128) out.push_back({static_cast<int>(i), w});  // else too many requests
  }
  return out;
}

void emit_epilogue_prefetch(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p,
                            const std::string& threads, const std::string& indent, const std::string& thread) {
  if (!p.epi_prefetch) return;
  const Compute& c = *g.compute;
  const char along = out_vector(g, p).along;
  for (const PrefetchedOperand& po : prefetched_operands(g, p)) {
    const Access& a = c.epilogue.operands[po.operand];
    const std::string name = operand_name(po.operand), W = std::to_string(po.width);
    const std::string position = vector_position(along, W);
    os << indent << "// " << c.tensor_of(a).name << ", " << po.width * dtype_bits(c.tensor_of(a).dtype) / 8
       << " bytes at a time, asked of L2 while the main loop runs: the\n"
       << indent << "// epilogue's loads of this tile then hit L2 instead of waiting on memory.\n"
       << indent << "for (int e = " << thread << "; e < BM * BN / " << W << "; e += " << threads << ") {\n"
       << indent << "  " << position << "\n"
       << indent << "  if (m0 + mm < M && n0 + nn < N) epi_prefetch_l2(out." << name << " + " << name
       << "_offset(m0 + mm, n0 + nn, z));\n"
       << indent << "}\n";
  }
}

namespace {

bool any_operand_fixed(const ImplicitGemm& g, char along) {
  for (const Access& a : g.compute->epilogue.operands)
    if (operand_fixed(g, a, along)) return true;
  return false;
}

/// `constexpr bool EPI_FIXED`: whether each thread's vectors keep their place along ov.along, the
/// loop's stride being a multiple of the vectors across the tile (false without such operands).
std::string epi_fixed_constant(const ImplicitGemm& g, const OutVector& ov, const std::string& threads,
                               const std::string& indent) {
  const std::string V = std::to_string(ov.width);
  const std::string across = ov.along == 'n' ? "BN / " + V : "BM / " + V;
  return indent + "constexpr bool EPI_FIXED = " +
         (any_operand_fixed(g, ov.along) ? "(" + threads + ") % (" + across + ") == 0" : "false") + ";\n";
}

/// `EPI_FIXED` and `EpiVec epi_early`: the operands the same along the epilogue loop, loaded for
/// the place in the tile of thread `thread` of `threads` (where EPI_FIXED holds).
void emit_fixed_loads(std::ostringstream& os, const ImplicitGemm& g, const OutVector& ov, const std::string& threads,
                      const std::string& thread, const std::string& indent) {
  os << epi_fixed_constant(g, ov, threads, indent)
     << indent << "EpiVec epi_early{};\n"
     << indent << "if (EPI_FIXED) {\n"
     << indent << "  const int e = " << thread << ";\n"
     << indent << "  " << vector_position(ov.along, std::to_string(ov.width)) << "\n"
     << indent << "  epi_load(out, m0 + mm, n0 + nn, z, epi_early, 1);\n"
     << indent << "}\n";
}

}  // namespace

bool epilogue_loads_early(const ImplicitGemm& g, const ScheduleParams& p) {
  if (g.compute->epilogue.empty() || epilogue_on_accumulators(g, p) || p.split_k > 1 || p.cluster == 1) return false;
  const OutVector ov = out_vector(g, p);
  return ov.width > 1 && any_operand_fixed(g, ov.along);
}

void emit_epilogue_early_loads(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p,
                               const std::string& threads, const std::string& thread, const std::string& indent) {
  TMAP_CHECK(epilogue_loads_early(g, p), "early epilogue loads need operands the same along the epilogue loop");
  os << indent << "// The epilogue's operands the same along its loop, for this thread's place in the tile, loaded\n"
     << indent << "// before the main loop: their latency hides behind it instead of trailing it.\n";
  emit_fixed_loads(os, g, out_vector(g, p), threads, thread, indent);
}

void emit_epilogue_loop(std::ostringstream& os, const ImplicitGemm& g, const OutVector& ov, const std::string& threads,
                        const std::string& thread, const std::string& end, const std::string& values,
                        const std::string& apply, bool early) {
  const std::string V = std::to_string(ov.width), T = "(" + threads + ")";
  const std::string position = vector_position(ov.along, V);
  // The stores read each vector of sums in whole words (tile_vector()); the in-place pass
  // reads and writes its vector itself (epi_in_place).
  const bool read_vectors = apply == "store_d_vec";
  if (read_vectors) emit_device_include(os, "smem");
  const std::string sums = read_vectors ? "tile_vector<" + V + ", C_LD>(" + values + ").v" : values;
  // Operands that use no iterator of the other axis are loaded once when every vector of the
  // thread keeps its place along `along`; the others, a chunk of vectors at a time, all before
  // the chunk's first store, so that their loads are in flight together. A chunk of 8 held 16
  // registers more than one of 4, which spilled in blocks of 640 threads and more.
  os << "  // The epilogue: each thread's vectors keep their place along " << ov.along << " when the stride is a\n"
     << "  // multiple of the vectors across the tile; operands the same along the loop are then loaded once"
     << (early ? "\n  // (before the main loop, into epi_early).\n" : ".\n");
  if (!early) emit_fixed_loads(os, g, ov, threads, thread, "  ");
  os << "  constexpr int EPI_CHUNK = 65536 / (THREADS) >= 128 ? 8 : 4;  // 8 where ptxas may give 128 registers\n"
     << "  EpiFixed fixed{};\n"
     << "  if (EPI_FIXED) fixed = epi_fixed(epi_early);\n"
     << "  for (int e0 = " << thread << "; e0 < " << end << "; e0 += EPI_CHUNK * " << T << ") {\n"
     << "    EpiVec ops[EPI_CHUNK];\n"
     << "    #pragma unroll\n    for (int c = 0; c < EPI_CHUNK; ++c) {\n"
     << "      const int e = e0 + c * " << T << ";\n      if (e >= " << end << ") break;\n"
     << "      " << position << "\n"
     << "      epi_load(out, m0 + mm, n0 + nn, z, ops[c], EPI_FIXED ? 2 : 0);\n    }\n"
     << "    #pragma unroll\n    for (int c = 0; c < EPI_CHUNK; ++c) {\n"
     << "      const int e = e0 + c * " << T << ";\n      if (e >= " << end << ") break;\n"
     << "      " << position << "\n"
     << "      " << apply << "(out, m0 + mm, n0 + nn, z, " << sums << ", fixed, ops[c], EPI_FIXED);\n    }\n  }\n";
}

void emit_epilogue_in_place(std::ostringstream& os, const ImplicitGemm& g, const std::string& out_type, int vec,
                            char along) {
  const Epilogue& e = g.compute->epilogue;
  TMAP_CHECK(!e.empty() && vec > 1, "an epilogue applied in place works on vectors of outputs");
  const std::string vt = vector_type(vec * dtype_bits(g.compute->tensor_of(g.compute->output).dtype) / 8);
  os << "// The epilogue of the " << vec << " outputs from virtual (m, n) on along " << along
     << " applied in place: `values`, the sums in\n"
     << "// an epilogue tile, become the outputs there (the tile is then stored whole)\n"
     << "__device__ __forceinline__ void epi_in_place(const Output& out, int m, int n, int z, " << out_type
     << "* values, const EpiFixed& f,\n"
     << "                                             const EpiVec& v, const bool use_f) {\n"
     << "  if (m >= M || n >= N) return;\n"
     << "  // One load and one store of the whole vector: the tile's chunks are aligned to the vector\n"
     << "  __align__(16) " << out_type << " sums[" << vec << "];\n"
     << "  *reinterpret_cast<" << vt << "*>(sums) = *reinterpret_cast<const " << vt << "*>(values);\n";
  emit_vector_epilogue(os, g, out_type, vec, along, "sums", "sums");
  os << "  *reinterpret_cast<" << vt << "*>(values) = *reinterpret_cast<const " << vt << "*>(sums);\n}\n\n";
}

bool epilogue_fits_accumulators(const ImplicitGemm& g) {
  const Epilogue& e = g.compute->epilogue;
  if (e.empty() || accumulator_type(g.hw->d_dtype) != "float") return false;
  for (const Access& a : e.operands)
    if (!operand_fixed(g, a, 'm') && !operand_fixed(g, a, 'n')) return false;  // a thread's elements are scattered
  return true;
}

std::string why_not_on_accumulators(const ImplicitGemm& g, const ScheduleParams& p) {
  if (g.compute->epilogue.empty()) return "no fused epilogue";
  if (accumulator_type(g.hw->d_dtype) != "float") return "sums in " + accumulator_type(g.hw->d_dtype) + ", not float32";
  if (!epilogue_fits_accumulators(g))
    return "an epilogue operand that varies along both m and n (a thread's elements of it are scattered)";
  if (p.split_k > 1) return "split_k = " + std::to_string(p.split_k) + ": the split sums reach the epilogue later";
  if (p.stream_k) return "stream_k = " + std::to_string(p.stream_k) + ": a tile's pieces are summed after";
  return "";
}

bool epilogue_on_accumulators(const ImplicitGemm&, const ScheduleParams& p) { return p.epi_regs == 1; }

namespace {

/// Whether each operand of the epilogue varies along m at most (a thread's two rows of each tile).
std::vector<bool> per_row_operands(const ImplicitGemm& g) {
  const Epilogue& e = g.compute->epilogue;
  std::vector<bool> per_row(e.operands.size());
  for (std::size_t i = 0; i < e.operands.size(); ++i) per_row[i] = operand_fixed(g, e.operands[i], 'm');
  return per_row;
}

}  // namespace

bool accumulator_epilogue_has_rows(const ImplicitGemm& g) {
  const std::vector<bool> per_row = per_row_operands(g);
  return std::find(per_row.begin(), per_row.end(), true) != per_row.end();
}

void emit_accumulator_row_loads(std::ostringstream& os, const ImplicitGemm& g, const AccumulatorTiles& t,
                                const std::string& in) {
  const Epilogue& e = g.compute->epilogue;
  const std::vector<bool> per_row = per_row_operands(g);
  for (std::size_t i = 0; i < e.operands.size(); ++i)
    if (per_row[i]) os << in << "float " << operand_name(static_cast<int>(i)) << "_rows[" << t.tiles << "][2];\n";
  os << in << "#pragma unroll\n" << in << "for (int i = 0; i < " << t.tiles << "; ++i)\n"
     << in << "  #pragma unroll\n" << in << "  for (int h = 0; h < 2; ++h) {\n"
     << in << "    const int m = " << t.first_row << " + 8 * h;  // rows past M read nothing, store nothing\n";
  for (std::size_t i = 0; i < e.operands.size(); ++i) {
    if (!per_row[i]) continue;
    const std::string name = operand_name(static_cast<int>(i));
    os << in << "    " << name << "_rows[i][h] = m < M ? (float)__ldg(out." << name << " + " << name
       << "_offset(m, n0, z)) : 0.0f;\n";
  }
  os << in << "  }\n";
}

void emit_accumulator_epilogue(std::ostringstream& os, const ImplicitGemm& g, const AccumulatorTiles& t,
                               const std::string& indent, bool rows_loaded) {
  const Epilogue& e = g.compute->epilogue;
  const std::string& in = indent;
  // An operand that varies along m at most is loaded for the thread's two rows of each tile before
  // the walk (or before the main loop: rows_loaded); the others vary along n only: two columns of
  // each quad, loaded as the walk reaches it.
  const std::vector<bool> per_row = per_row_operands(g);
  auto value = [&](int i) { return operand_name(i) + (per_row[i] ? "_rows[i][q / 2]" : "_cols[q % 2]"); };
  os << in << "// The epilogue applied to the accumulators in float32, before they are rounded into the\n"
     << in << "// epilogue tile: its operands vary along m or along n, a thread's two rows of each tile\n"
     << in << "// or two columns of each quad" << (rows_loaded ? " (the rows loaded before the main loop).\n" : ".\n")
     << in << "{\n";
  if (!rows_loaded && accumulator_epilogue_has_rows(g)) emit_accumulator_row_loads(os, g, t, in + "  ");
  std::string quad = t.quad;
  quad.replace(quad.find('#'), 1, "q");
  os << in << "  #pragma unroll\n" << in << "  for (int i = 0; i < " << t.tiles << "; ++i)\n"
     << in << "    #pragma unroll\n" << in << "    for (int j = 0; j < " << t.quads << "; ++j) {\n";
  for (std::size_t i = 0; i < e.operands.size(); ++i) {
    if (per_row[i]) continue;  // loaded in each tile i: the same columns, which L1 then holds
    const std::string name = operand_name(static_cast<int>(i));
    os << in << "      float " << name << "_cols[2];\n"
       << in << "      #pragma unroll\n" << in << "      for (int w = 0; w < 2; ++w) {\n"
       << in << "        const int n = " << t.first_col << " + w;  // columns past N read nothing, store nothing\n"
       << in << "        " << name << "_cols[w] = n < N ? (float)__ldg(out." << name << " + " << name
       << "_offset(m0, n, z)) : 0.0f;\n"
       << in << "      }\n";
  }
  os << in << "      #pragma unroll\n" << in << "      for (int q = 0; q < 4; ++q) {  // (r, c), (r, c + 1), (r + 8, c), (r + 8, c + 1)\n"
     << in << "        const float sum = " << quad << ";\n"
     << in << "        " << quad << " = " << epilogue_code(e, "sum", value) << ";\n"
     << in << "      }\n"
     << in << "    }\n"
     << in << "}\n";
}

}  // namespace tmap::pipeline
