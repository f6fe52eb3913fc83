// The relayout prologue of a relayout view's kernel (tile_pipeline.h: emit_relayout): a kernel
// launched before the main one that copies operand tensors with the reduction's dimension
// innermost into the workspace, and the main kernel's wait for it.
#include <sstream>

#include "tile_pipeline.h"
#include "tmap/codegen/device_library.h"
#include "tmap/support/diagnostic.h"

namespace tmap::pipeline {

void emit_prologue_wait(std::ostringstream& os, const ImplicitGemm& g) {
  if (!g.relayouted()) return;
  os << "#if __CUDA_ARCH__ >= 900\n"
     << "  // Launched as a programmatic dependent of the prologue that copies the operands\n"
     << "  // channels-last: wait until its copies are in memory.\n"
     << "  asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n"
     << "#endif\n";
}

namespace {

/// Copies that no register transpose fits (relayout_vector) and that have fewer than this many
/// elements per [moved] row (a filter's taps) are copied a run of whole rows per block
/// (relayout_rows) or gathered element by element (relayout_gather); longer ones are transposed
/// in 32 x 32 tiles through shared memory.
constexpr std::int64_t kTransposeMinInner = 32;
constexpr std::int64_t kRowsBytes = 16 * 1024;  // the most shared memory a block of relayout_rows stages
constexpr std::int64_t kGatherPerBlock = 2048;  // elements per block of relayout_gather
/// Destination rows a thread of relayout_pad_rows builds (the prologue's 256 threads a block).
constexpr std::int64_t kPadRowsPerThread = 4;

/// Short rows are copied whole (relayout_rows) only above this many [moved] elements (channels);
/// at or below it they are gathered. Measured on the H100 (replays of the shipped NCHW, NCW and
/// NCDHW logs, both copies alternating in one call, two rounds, then again in a second call): the
/// row copy took 1-21% off the prologue-and-kernel time with 80 to 512 channels (ResNet-18 l11
/// 25.5 -> 21.1 us, l9 17.7 -> 15.3, a conv1d layer 7.0 -> 5.5) but added 1-11% with 64 (l3 10.6
/// -> 11.8, l1 17.5 -> 17.7, a conv3d layer 48.3 -> 49.0). Measured again once both copies issued
/// all of a thread's loads before its first store (they had waited for one load, or one group of
/// four, at a time): rows for 64 channels took batch-1 l1 and l3 from 4.8 to 4.7 us but batch-16
/// l3 from 9.2 to 10.3 us (replays, two rounds), so the threshold stayed.
constexpr std::int64_t kRowsMinMoved = 65;

/// The [moved] rows a block of relayout_rows copies: a power of two, at most one per thread (256),
/// no more than [moved] needs (down to 32) and at most kRowsBytes of them.
int rows_per_block(const OperandRelayout& r) {
  int mc = 256;
  while (mc > 32 && mc / 2 >= r.moved) mc /= 2;
  while (mc > 1 && mc * r.inner * r.bytes > kRowsBytes) mc /= 2;
  return mc;
}

/// The fewest blocks a register transpose is used with: it makes 4 to 64 times fewer blocks than
/// the 32 x 32 tiles, and was measured faster on copies of 128 to 256 of its blocks (ResNet-18
/// batch 16); below about one block per SM (batch 1) the tiles keep more SMs busy, and their
/// times are the ones measured.
constexpr std::int64_t kMinRegisterTransposeBlocks = 128;

std::int64_t register_transpose_blocks(const OperandRelayout& r, int v) {
  return r.outer * ((r.moved + 8 * v - 1) / (8 * v)) * ((r.inner + 32 * v - 1) / (32 * v));
}

/// The elements per vector of a register transpose of `r` (a lane moves a V x V block: V vectors
/// of V elements read along inner, V written along moved, blocks of 8 V x 32 V): the widest of at
/// most 16 bytes that divides both inner and moved, or 0 when none of 2 elements or more does or
/// the copy is too small (then the 32 x 32 transpose through shared memory, the row copy or the
/// gather).
int relayout_vector(const OperandRelayout& r) {
  if (!r.active || r.pads()) return 0;
  for (int v = 16 / r.bytes; v >= 2; v /= 2)
    if (r.inner % v == 0 && r.moved % v == 0)
      return register_transpose_blocks(r, v) >= kMinRegisterTransposeBlocks ? v : 0;
  return 0;
}

/// How the prologue copies one operand: the one choice its block count, the device helpers
/// emitted and the call all follow.
enum class RelayoutCopy {
  kNone,               ///< not copied
  kPadRows,            ///< padded (to whole 16- or 8-byte vectors, relayout_view()): relayout_pad_rows
  kRegisterTranspose,  ///< relayout_transpose_v
  kRows,               ///< short rows of at least kRowsMinMoved: relayout_rows
  kGather,             ///< short rows of fewer: relayout_gather
  kTiles,              ///< relayout_transpose (32 x 32 tiles through shared memory)
};

RelayoutCopy relayout_copy(const OperandRelayout& r) {
  if (!r.active) return RelayoutCopy::kNone;
  const bool short_rows = r.inner < kTransposeMinInner;
  if (r.pads()) {
    TMAP_CHECK(r.copy_moved() * r.bytes % 8 == 0, "relayout_view() pads channels to whole 16- or 8-byte vectors");
    return RelayoutCopy::kPadRows;
  }
  if (relayout_vector(r)) return RelayoutCopy::kRegisterTranspose;
  if (!short_rows) return RelayoutCopy::kTiles;
  if (r.moved < kRowsMinMoved) return RelayoutCopy::kGather;
  TMAP_CHECK(r.moved * r.bytes % 16 == 0, "relayout_view() pads channels that are not whole 16-byte vectors");
  return RelayoutCopy::kRows;
}

std::int64_t relayout_blocks(const OperandRelayout& r) {
  switch (relayout_copy(r)) {
    case RelayoutCopy::kNone: return 0;
    case RelayoutCopy::kRegisterTranspose: return register_transpose_blocks(r, relayout_vector(r));
    case RelayoutCopy::kRows: return r.outer * ((r.moved + rows_per_block(r) - 1) / rows_per_block(r));
    case RelayoutCopy::kGather: return (r.copy_elements() + kGatherPerBlock - 1) / kGatherPerBlock;
    case RelayoutCopy::kPadRows: return (r.outer * r.inner + 256 * kPadRowsPerThread - 1) / (256 * kPadRowsPerThread);
    case RelayoutCopy::kTiles: break;
  }
  return r.outer * ((r.copy_moved() + 31) / 32) * ((r.inner + 31) / 32);
}

/// The call that copies operand `src`'s part of block `block` (relayout_copy(r) says which copy)
/// into its place at `offset` of the workspace.
void emit_copy_call(std::ostringstream& os, const OperandRelayout& r, const std::string& src, std::int64_t offset,
                    int threads) {
  const std::string t = vector_type(r.bytes);
  // The source, the copy in the workspace, the block and [moved]: what every copy takes first.
  const std::string head = "reinterpret_cast<const " + t + "*>(" + src + "), reinterpret_cast<" + t + "*>(workspace + " +
                           std::to_string(offset) + "LL), block, " + std::to_string(r.moved) + "LL";
  const std::string args = head + ", " + std::to_string(r.inner) + "LL";
  switch (relayout_copy(r)) {
    case RelayoutCopy::kPadRows:
      os << "    relayout_pad_rows<" << t << ", " << r.copy_moved() << ", " << kPadRowsPerThread << ">(" << args << ", "
         << r.outer * r.inner << "LL);\n";
      break;
    case RelayoutCopy::kRegisterTranspose: {
      const int v = relayout_vector(r);
      os << "    relayout_transpose_v<" << t << ", " << vector_type(v * r.bytes) << ", " << v << ">(" << args << ");\n";
      break;
    }
    case RelayoutCopy::kGather:
      os << "    relayout_gather<" << t << ", " << threads << ", " << kGatherPerBlock << ">(" << args << ", "
         << r.elements() << "LL);\n";
      break;
    case RelayoutCopy::kRows:
      os << "    relayout_rows<" << t << ", " << r.inner << ", " << rows_per_block(r) << ", " << threads << ">(" << head
         << ");\n";
      break;
    case RelayoutCopy::kTiles: os << "    relayout_transpose(" << args << ");\n"; break;
    case RelayoutCopy::kNone: break;  // not reached: operands not copied have no call
  }
}

/// The prologue kernel: each block copies its part of operand A's or B's copy; records where
/// each copy lies in the workspace, how many blocks the kernel takes and the workspace's size.
void emit_relayout_entry(std::ostringstream& os, KernelSource& k, const ImplicitGemm& g) {
  std::int64_t offset = round_up(k.workspace_bytes, 256), blocks = 0;
  os << "extern \"C\" __global__ void __launch_bounds__(" << k.relayout_threads << ")\n"
     << k.relayout_name << "(const void* __restrict__ a_src, const void* __restrict__ b_src, unsigned char* __restrict__ workspace) {\n"
     << "  long long block = blockIdx.x;\n";
  for (int which = 0; which < 2; ++which) {
    const OperandRelayout& r = g.relayout[which];
    if (!r.active) continue;
    k.relayout_offset[which] = offset;
    const std::int64_t n = relayout_blocks(r);
    os << "  if (block < " << n << ") {  // operand " << (which == 0 ? 'A' : 'B') << ": [" << r.outer << "][" << r.moved
       << "][" << r.inner << "] -> [" << r.outer << "][" << r.inner << "][" << r.copy_moved() << "]"
       << (r.pads() ? " (zeros after " + std::to_string(r.moved) + ")" : std::string()) << "\n";
    emit_copy_call(os, r, which == 0 ? "a_src" : "b_src", offset, k.relayout_threads);
    os << "    goto copied;\n  }\n";
    if (which == 0 && g.relayout[1].active) os << "  block -= " << n << ";\n";
    offset = round_up(offset + r.copy_elements() * r.bytes, 256);
    blocks += n;
  }
  // The trigger comes after the block's copy, not before it: a copy of more blocks than fit the
  // GPU at once would otherwise let the main kernel's blocks, waiting, take the SMs (their shared
  // memory) its later blocks need.
  os << "copied:\n"
     << "#if __CUDA_ARCH__ >= 900\n"
     << "  // The main kernel may launch once every block of this one has copied its part; it waits\n"
     << "  // for the copies to be in memory.\n"
     << "  asm volatile(\"griddepcontrol.launch_dependents;\");\n"
     << "#endif\n"
     << "  return;\n}\n";
  k.relayout_blocks = blocks;
  k.workspace_bytes = offset;
}

}  // namespace

void emit_relayout(KernelSource& k, const ImplicitGemm& g) {
  k.relayout_name = k.name + "_prologue";
  std::ostringstream os;
  os << "\n// The relayout prologue: copies operand tensors so that the reduction's dimension is innermost\n"
     << "// ([outer][moved][inner] -> [outer][inner][moved]) into the workspace, for the kernel above.\n";
  emit_device_include(os, "relayout");
  emit_relayout_entry(os, k, g);
  k.code += os.str();
}

}  // namespace tmap::pipeline
