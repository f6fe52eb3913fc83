#include "tmap/tune/features.h"

#include <algorithm>
#include <cmath>

#include "tmap/codegen/emitter.h"

namespace tmap {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
float lg(double x) { return static_cast<float>(std::log2(std::max(x, 1e-9))); }

/// Tensor-core throughput of an operand dtype relative to 16-bit floats (the WMMA path).
double dtype_rate(DType a) {
  switch (a) {
    case DType::kFloat16:
    case DType::kBFloat16: return 1.0;
    case DType::kTFloat32: return 0.5;
    case DType::kInt8:
    case DType::kFloat8E4M3:
    case DType::kFloat8E5M2: return 2.0;
    case DType::kInt4: return 2.0;  // sub-byte WMMA is emulated at int8 rate or below on sm_90
    case DType::kFloat64: return 1.0 / 16;
    default: return 1.0;
  }
}

/// Everything the features and the analytic model share.
struct Shape {
  std::int64_t tiles_m, tiles_n, tiles, steps_per_tile;
  int warps, fragments, fm, fn;
  double wave_efficiency, waves;
  int bps;
};

Shape shape_of(const ImplicitGemm& g, const ScheduleParams& p, const DeviceModel& d) {
  Shape s{};
  s.tiles_m = ceil_div(g.M, p.block_m);
  s.tiles_n = ceil_div(g.N, p.block_n);
  s.tiles = s.tiles_m * s.tiles_n * g.batch * p.split_k;
  s.steps_per_tile = ceil_div(reduction_steps(g, p), p.split_k);
  if (p.window) {  // block_n counts batch entries, and the whole window is one step
    s.tiles_n = 1;
    s.tiles = s.tiles_m * ceil_div(g.batch, p.block_n);
    s.steps_per_tile = 1;
  }
  s.warps = std::max(1, (block_threads(g, p) + 31) / 32);  // a SIMT block may be a fraction of one warp
  s.fm = static_cast<int>(p.warp_m / g.shape[Axis::kI]);
  s.fn = static_cast<int>(p.warp_n / g.shape[Axis::kJ]);
  s.fragments = s.fm * s.fn;
  s.bps = std::max(1, blocks_per_sm(g, p, d));
  const double concurrent = static_cast<double>(d.sm_count) * s.bps;
  s.waves = s.tiles / concurrent;
  s.wave_efficiency = s.tiles / (std::ceil(s.waves) * concurrent);
  if (p.stream_k) {  // every block runs the same number of steps, to one step (the cut tiles' sums aside)
    const double units = static_cast<double>(s.tiles * s.steps_per_tile);
    s.wave_efficiency = units / (std::ceil(units / concurrent) * concurrent);
  }
  return s;
}

/// Bytes a relayout view's prologue copies: the mean of what it reads and writes (they differ
/// where channels are padded), 0 without one.
double relayout_bytes(const ImplicitGemm& g) {
  double bytes = 0;
  for (const OperandRelayout& r : g.relayout)
    if (r.active) bytes += 0.5 * static_cast<double>(r.elements() + r.copy_elements()) * r.bytes;
  return bytes;
}

}  // namespace

std::vector<std::string> feature_names() {
  std::vector<std::string> out(kDerivedFeatureNames.begin(), kDerivedFeatureNames.end());
  for (const Knob& k : knobs()) {
    if (k.feature == KnobFeature::kValue) out.emplace_back(k.name);
    if (k.feature == KnobFeature::kLog2) out.push_back("log2_" + std::string(k.name));
  }
  return out;
}

DeviceModel DeviceModel::for_arch(int cc, int sm_count) {
  DeviceModel d;
  d.compute_capability = cc;
  if (cc >= 90) {  // H100 SXM; 3.0 TB/s measured with a device-to-device copy
    d.sm_count = kSm90Sms, d.clock_ghz = 1.755, d.dram_bytes_per_s = 3.0e12, d.l2_bytes_per_s = 8e12;
    d.shared_bytes_per_sm = 228 * 1024;
  } else if (cc >= 89) {
    d.sm_count = 128, d.clock_ghz = 2.5, d.dram_bytes_per_s = 1.0e12, d.l2_bytes_per_s = 4e12;
    d.shared_bytes_per_sm = 100 * 1024, d.max_threads_per_sm = 1536, d.max_blocks_per_sm = 24;
    d.tensor_flops_per_clock_sm = 1024;
  } else if (cc >= 86) {
    d.sm_count = 84, d.clock_ghz = 1.7, d.dram_bytes_per_s = 0.9e12, d.l2_bytes_per_s = 3e12;
    d.shared_bytes_per_sm = 100 * 1024, d.max_threads_per_sm = 1536, d.max_blocks_per_sm = 16;
    d.tensor_flops_per_clock_sm = 1024;
  } else {  // A100 and older: A100's rates
    d.sm_count = 108, d.clock_ghz = 1.41, d.dram_bytes_per_s = 1.6e12, d.l2_bytes_per_s = 5e12;
    d.shared_bytes_per_sm = 164 * 1024;
  }
  if (sm_count > 0) d.sm_count = sm_count;
  return d;
}

int estimated_registers(const ImplicitGemm& g, const ScheduleParams& p) {
  const int fm = static_cast<int>(p.warp_m / g.shape[Axis::kI]), fn = static_cast<int>(p.warp_n / g.shape[Axis::kJ]);
  const int lanes = family_of(*g.hw).threads_per_warp_tile(p);  // threads sharing one fragment
  const auto words = [lanes](std::int64_t elements, DType t) {  // 32-bit registers per thread of a fragment
    return static_cast<int>(std::max<std::int64_t>(1, elements * dtype_bits(t) / 32 / lanes));
  };
  const auto m = g.shape[Axis::kI], n = g.shape[Axis::kJ], k = g.shape[Axis::kK];
  const int acc = fm * fn * words(m * n, g.hw->d_dtype);
  const int operands = fm * words(m * k, g.hw->a_dtype) + fn * words(k * n, g.hw->b_dtype);
  // Addresses, loop counters and the gather's index arithmetic; unrolled gathers keep more live.
  const int overhead = 40 + (p.unroll ? 16 : 0) + (p.vec_a > 1 || p.vec_b > 1 ? 8 : 0);
  return std::min(255, acc + operands + overhead);
}

int blocks_per_sm(const ImplicitGemm& g, const ScheduleParams& p, const DeviceModel& d) {
  const int threads = block_threads(g, p);
  const std::int64_t smem = shared_bytes(g, p) + 1024;  // the runtime reserves 1 KiB per block
  const int regs = (estimated_registers(g, p) + 7) / 8 * 8 * threads;
  const std::int64_t by_smem = d.shared_bytes_per_sm / smem;
  return static_cast<int>(std::max<std::int64_t>(
      0, std::min<std::int64_t>({d.max_blocks_per_sm, d.max_threads_per_sm / threads, by_smem,
                                 d.registers_per_sm / std::max(1, regs)})));
}

namespace {

/// The analytic model of a window-staging SIMT kernel (ScheduleParams::window): memory-bound, it
/// reads each block's window from L2 (the image once from DRAM), and multiplies on CUDA cores,
/// about three instructions per tap and output (the input converted, the multiply-add, a share
/// of the shared-memory reads), plus the window's copies.
double window_time_us(const ImplicitGemm& g, const ScheduleParams& p, const DeviceModel& d) {
  const Shape s = shape_of(g, p, d);  // tiles over output runs and batch entries (see its window case)
  const double blocks = static_cast<double>(s.tiles), wave_efficiency = s.wave_efficiency;
  const double staged = static_cast<double>(shared_bytes(g, p));
  const Compute& c = *g.compute;
  double unique = 0;
  for (const Access* a : {&c.inputs[g.a_input], &c.inputs[g.b_input], &c.output})
    unique += static_cast<double>(c.tensor_of(*a).num_elements()) * dtype_bits(c.tensor_of(*a).dtype) / 8;
  const double memory_s = unique / d.dram_bytes_per_s + blocks * staged / d.l2_bytes_per_s / wave_efficiency;
  const double lanes_per_s = 128.0 * d.sm_count * d.clock_ghz * 1e9 * wave_efficiency;
  const int bytes = std::max(1, dtype_bits(g.hw->a_dtype) / 8);
  const double copies = blocks * staged / (p.vec_a * bytes) * 8.0;
  const double compute_s = (3.0 * g.M * g.batch * g.K + copies) / lanes_per_s;
  return d.launch_us + (memory_s + compute_s) * 1e6;
}

/// A sample of a range (DynamicExtent::at) runs the range's kernel at its size: the GEMM the
/// models see has that size along the dynamic axis.
bool sampled(const ImplicitGemm& g) { return g.dynamic() && g.compute->dynamic.at > 0; }
ImplicitGemm at_sample(const ImplicitGemm& g) { return gemm_at_size(g, g.compute->dynamic.at); }

/// Tensor-core work, padded to whole tiles, at a rate reduced when few warps per SM feed the
/// four tensor pipes or when small warp tiles reload fragments for every mma.
double compute_seconds(const ImplicitGemm& g, const ScheduleParams& p, const DeviceModel& d, const Shape& s) {
  const double padded_flops = 2.0 * (s.tiles_m * p.block_m) * (s.tiles_n * p.block_n) *
                              (ceil_div(g.K, p.block_k) * p.block_k) * g.batch * g.serial;
  const double peak = d.tensor_flops_per_clock_sm * d.clock_ghz * 1e9 * d.sm_count * dtype_rate(g.hw->a_dtype);
  const double warp_eff = std::min(1.0, s.bps * s.warps / 4.0);
  const double frag_eff = std::min(1.0, static_cast<double>(s.fragments) / (s.fm + s.fn));
  // Without padding or a swizzle, fragment loads from shared memory conflict on banks.
  const double conflicts = p.smem_pad == 0 && !p.swizzle ? 3.0 : 1.0;
  return padded_flops / (peak * s.wave_efficiency * warp_eff * frag_eff * family_of(*g.hw).peak_fraction()) * conflicts;
}

/// Loading the operand tiles: the slower of their traffic and the instructions that gather them.
double load_seconds(const ImplicitGemm& g, const ScheduleParams& p, const DeviceModel& d, const Shape& s) {
  // Operand traffic: every block reads its A and B tiles once per step; the first read of each
  // element comes from DRAM, re-reads by other blocks from L2.
  const double a_bits = dtype_bits(g.hw->a_dtype), b_bits = dtype_bits(g.hw->b_dtype);
  const double tile_bytes = (p.block_m * p.block_k * a_bits + p.block_k * p.block_n * b_bits) / 8;
  const double moved = static_cast<double>(s.tiles) * s.steps_per_tile * tile_bytes;
  const double unique = (static_cast<double>(g.M) * g.K * a_bits + static_cast<double>(g.K) * g.N * b_bits) / 8 *
                        g.batch * g.serial;
  const double memory_s = unique / d.dram_bytes_per_s + moved / d.l2_bytes_per_s / s.wave_efficiency;
  // Gather instructions, 128 lanes per SM per clock: about 192 per scalar element (coordinates
  // by division, bounds, address, a shared store) and 96 per vector; rolled loops cost 3x.
  // These constants (and the bank-conflict factor above) were fitted to 4,100 measurements of
  // 25 convolutions and GEMMs on the H100, lifting the model's mean rank correlation with the
  // measured times from 0.46 to 0.80 (0.80 on workloads held out of the fit).
  const double tiles_steps = static_cast<double>(s.tiles) * s.steps_per_tile;
  auto gather_cost = [&](double elements, int vec) { return elements / vec * (vec > 1 ? 96.0 : 192.0); };
  const double instructions =
      tiles_steps * (gather_cost(static_cast<double>(p.block_m) * p.block_k, p.vec_a) +
                     gather_cost(static_cast<double>(p.block_k) * p.block_n, p.vec_b)) * (p.unroll ? 1.0 : 3.0);
  const double gather_s = instructions / (128.0 * d.sm_count * d.clock_ghz * 1e9 * s.wave_efficiency);
  return std::max(memory_s, gather_s);
}

/// What follows the main loop and what precedes it, in seconds: the output written once (split-K
/// writes and re-reads float partial sums) and a relayout prologue's copies. Adds their launches
/// to `launches_us`.
std::pair<double, double> outside_loop_seconds(const ImplicitGemm& g, const ScheduleParams& p, const DeviceModel& d,
                                               double& launches_us) {
  const double out_bytes =
      static_cast<double>(g.M) * g.N * g.batch * dtype_bits(g.compute->tensor_of(g.compute->output).dtype) / 8;
  double epilogue_s = out_bytes / d.dram_bytes_per_s;
  if (p.split_k > 1 && p.cluster) {
    // The splits' blocks read each other's tiles over the SM-to-SM network (about twice DRAM's
    // rate) and need no second launch; but a cluster's blocks are scheduled and retired together,
    // which on the H100 cost as much as that launch from 4 splits up (decode GEMVs: 8.1 -> 12.9
    // us), so it is charged one all the same.
    epilogue_s += 1.0 * p.split_k * g.M * g.N * g.batch * 4 / (2.0 * d.dram_bytes_per_s);
    launches_us += d.launch_us;
  } else if (p.split_k > 1) {
    epilogue_s += 2.0 * p.split_k * g.M * g.N * g.batch * 4 / d.dram_bytes_per_s;
    launches_us += d.launch_us;
  }
  // A relayout prologue reads and writes its copies once, and the main kernel's launch overlaps
  // the prologue's last blocks (a programmatic dependent launch), so it adds about half a launch.
  double prologue_s = 0;
  if (g.relayouted()) {
    prologue_s = 2.0 * relayout_bytes(g) / d.dram_bytes_per_s;
    launches_us += 0.5 * d.launch_us;
  }
  return {epilogue_s, prologue_s};
}

double analytic_time_of(const ImplicitGemm& g, const ScheduleParams& p, const DeviceModel& d) {
  if (p.window) return window_time_us(g, p, d);
  const Shape s = shape_of(g, p, d);
  const double compute_s = compute_seconds(g, p, d, s), load_s = load_seconds(g, p, d, s);
  const double body_s = p.stages >= 2 ? std::max(compute_s, load_s) : compute_s + load_s;
  double launches_us = d.launch_us;
  const auto [epilogue_s, prologue_s] = outside_loop_seconds(g, p, d, launches_us);
  return launches_us + (body_s + epilogue_s + prologue_s) * 1e6;
}

Features features_of(const ImplicitGemm& g, const ScheduleParams& p, const DeviceModel& d) {
  const Shape s = shape_of(g, p, d);
  const int a_bytes = std::max(1, dtype_bits(g.hw->a_dtype) / 8), b_bytes = std::max(1, dtype_bits(g.hw->b_dtype) / 8);
  const double padded = static_cast<double>(s.tiles_m * p.block_m) * (s.tiles_n * p.block_n) *
                        (ceil_div(g.K, p.block_k) * p.block_k);
  // A window's block reads its staged window (and a few taps) instead of two operand tiles.
  const double tile_bytes =
      p.window ? static_cast<double>(shared_bytes(g, p))
               : (static_cast<double>(p.block_m) * p.block_k * dtype_bits(g.hw->a_dtype) +
                  static_cast<double>(p.block_k) * p.block_n * dtype_bits(g.hw->b_dtype)) / 8;
  Features f{};
  std::size_t i = 0;
  f[i++] = lg(g.M);                                      // virtual GEMM sizes
  f[i++] = lg(g.N);
  f[i++] = lg(g.K);
  f[i++] = lg(static_cast<double>(g.batch * g.serial));  // grid z and serial reduction loops
  f[i++] = static_cast<float>(1.0 - static_cast<double>(g.M) * g.N * g.K / padded);  // work spent on padding
  f[i++] = static_cast<float>(s.fragments);              // accumulator fragments per warp
  f[i++] = static_cast<float>(s.warps);                  // warps per block
  f[i++] = lg(static_cast<double>(shared_bytes(g, p)));  // shared memory per block
  f[i++] = static_cast<float>(estimated_registers(g, p));
  f[i++] = static_cast<float>(s.bps * s.warps / 64.0);   // occupancy: resident warps / 64
  f[i++] = static_cast<float>(s.waves);                  // blocks / (SMs x blocks per SM)
  f[i++] = static_cast<float>(s.wave_efficiency);        // busy fraction of the last wave
  f[i++] = lg(tile_bytes);                               // global bytes per block and step
  f[i++] = static_cast<float>(2.0 * p.block_m * p.block_n * p.block_k / tile_bytes);  // FLOP per byte
  f[i++] = static_cast<float>(p.vec_a * a_bytes);        // bytes per global load of A, B
  f[i++] = static_cast<float>(p.vec_b * b_bytes);
  f[i++] = static_cast<float>(max_vector_width(g, 0) * a_bytes);  // contiguity of each operand
  f[i++] = static_cast<float>(max_vector_width(g, 1) * b_bytes);
  f[i++] = static_cast<float>(g.shape[Axis::kI]);        // the intrinsic's shape (m x n x k)
  f[i++] = static_cast<float>(g.shape[Axis::kK]);
  f[i++] = static_cast<float>(dtype_rate(g.hw->a_dtype));
  f[i++] = lg(analytic_time_of(g, p, d));                // the analytic model's estimate
  f[i++] = static_cast<float>(family_of(*g.hw).ordinal());  // the emitter family
  f[i++] = static_cast<float>(std::log2(1.0 + relayout_bytes(g)));  // operands copied channels-last first
  // The knobs the cost model sees, as knobs.def declares them.
  for (const Knob& k : knobs()) {
    if (k.feature == KnobFeature::kValue) f[i++] = static_cast<float>(k.get(p));
    if (k.feature == KnobFeature::kLog2) f[i++] = lg(k.get(p));
  }
  return f;
}

}  // namespace

double analytic_time_us(const ImplicitGemm& g, const ScheduleParams& p, const DeviceModel& d) {
  return sampled(g) ? analytic_time_of(at_sample(g), p, d) : analytic_time_of(g, p, d);
}

Features candidate_features(const ImplicitGemm& g, const ScheduleParams& p, const DeviceModel& d) {
  return sampled(g) ? features_of(at_sample(g), p, d) : features_of(g, p, d);
}

}  // namespace tmap
