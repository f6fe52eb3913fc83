// Stages of an implicit-GEMM kernel that every emitter family shares (private to src/codegen/).
//
// A kernel of any family has the same skeleton: the block's tile origin (with optional
// rasterization), operand tiles gathered from the compute's tensors through the mapping into
// shared memory (scalar, vector or cp.async copies; the family decides where element (r, c) of a
// stored tile lives through the functions a_at / b_at it emits), a main loop that pipelines those
// copies against the family's math (`load_tiles(step, buf)` and `compute(buf)` lambdas), and an
// epilogue that scatters the block's results to the output through its indices, or to split-K
// partial sums reduced by a second kernel (or, on sm_90, summed by the splits' blocks as a
// thread block cluster). The families emit only the math and the shared-memory
// layouts.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

#include "tmap/codegen/emitter.h"

namespace tmap::pipeline {

inline std::int64_t round_up(std::int64_t x, std::int64_t to) { return (x + to - 1) / to * to; }
/// The pragma for the kernel's loops: unrolled with p.unroll, else kept rolled.
inline const char* unroll_pragma(const ScheduleParams& p) { return p.unroll ? "#pragma unroll\n" : "#pragma unroll 1\n"; }

/// Whether `x` is one of `v` (iterator ids).
inline bool contains(const std::vector<int>& v, int x) {
  for (int y : v)
    if (y == x) return true;
  return false;
}
/// Iterator `it`'s value in generated code, from a flat coordinate `flat` (mixed radix over
/// `iters`, the last fastest, `it` among them): "(flat / below) % extent", the % unparenthesized.
std::string digit_code(const Compute& c, const std::vector<int>& iters, int it, const std::string& flat);
/// Emits `const int it_<name> = ...;` lines recovering iterator values from a flat coordinate
/// `coord` (mixed radix over `iters`, the last fastest), only for iterators in `used`.
void decompose(std::ostringstream& os, const Compute& c, const std::vector<int>& iters, const std::string& coord,
               const std::vector<bool>& used, const std::string& indent);
/// The expression in generated code (iterators as it_<name>).
std::string affine_code(const AffineExpr& e, const Compute& c);
/// Which iterators an access uses, by iterator id.
std::vector<bool> used_by(const Compute& c, const Access& a);
/// An access by output iterators: its element's offset at virtual (m, n) of batch z as one linear
/// expression ("m * 256 + n") where m, n and z each step evenly through its tensor (flat_stride());
/// empty where one does not, and the offset is then built from the iterators' digits.
std::string linear_offset_code(const ImplicitGemm& g, const Access& a);

/// An unsigned type as wide as `bytes` (1 to 16), for vector copies.
std::string vector_type(int bytes);
/// A C identifier made of `s` (other characters become '_').
std::string identifier(const std::string& s);

/// An operand's shared tile per stage: rows x cols elements of `bytes` bytes, cols contiguous
/// (rows along k and cols along m or n when stored_along_mn(), else the other way round).
struct StoredTile {
  std::int64_t rows, cols;
  int bytes;
  /// Bytes of one row with `pad` elements added.
  std::int64_t row_bytes(int pad) const { return (cols + pad) * bytes; }
};
StoredTile stored_tile(const ImplicitGemm& g, const ScheduleParams& p, int which);

/// Bytes of one stage of operand `which`'s tile in padded rows (smem_pad) or, with p.swizzle,
/// unpadded XOR-swizzled ones, rounded up to 128 (mma_sync and SIMT).
std::int64_t stage_bytes(const ImplicitGemm& g, const ScheduleParams& p, int which);
/// `op`_LD / `op`_TILE and `op`_at(r, c): where element (r, c) of a stored tile lives, in elements
/// from the stage's start: padded rows, or 16-byte chunks XOR-swizzled within 128-byte lines
/// with p.swizzle (chunk c of row r at c ^ (r % 8), or of line l at c ^ (l % 8) when rows are shorter).
void emit_tile_index(std::ostringstream& os, const char* op, const StoredTile& s, const ScheduleParams& p);

/// The accumulator's type in generated code: int for int32 accumulators, else float.
std::string accumulator_type(DType t);

/// Name, block size, grid and split-K workspace of a kernel of `threads` threads per block.
KernelSource kernel_shell(const ImplicitGemm& g, const ScheduleParams& p, int threads);

/// The comment block naming the statement, intrinsic, mapping and virtual GEMM.
void emit_header(std::ostringstream& os, const ImplicitGemm& g);

/// The constants every kernel body uses: M, N, K, SERIAL, BM, BN, BK, WM, WN, WARPS_N, THREADS,
/// STAGES, SPLIT_K, BATCH, RASTER (the family adds its intrinsic's).
void emit_common_constants(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p, int threads);

/// The cp.async helpers cp_async<BYTES>(dst, src, valid), cp_async_commit(), cp_async_wait<N>().
void emit_cp_async_helpers(std::ostringstream& os);

/// Loaders of operand `which` (0 = A at (m, k), 1 = B at (k, n)), split so that what stays fixed
/// for a whole reduction is computed once: `a_fixed(m, z)` (`b_fixed(n, z)`) gives the part of
/// the offset and bounds that the row (column) and batch decide; with p.vec_{a,b} = 1
/// `load_a(src, fixed, k, s)` returns one element (packed sub-byte elements as an int), else
/// `load_a_vec(src, fixed, k, s, dst)` copies that many contiguous elements to `dst` (with cp.async
/// where copies_async()). Out of the GEMM or the tensor reads zero, without branching.
void emit_operand_loader(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p, int which);

/// `store_d(out, m, n, z, value)`: the output element at virtual (m, n) of batch z (with an
/// epilogue, emit_epilogue_scatter's); and when
/// `vec` > 1, `store_d_vec<VEC>(out, m, n, z, values)` writing `vec` outputs contiguous along
/// the virtual axis `along` ('m' or 'n') with one store (see output_vector_width()).
void emit_output_scatter(std::ostringstream& os, const ImplicitGemm& g, const std::string& out_type, int vec,
                         char along);
/// The same without an epilogue: store_d(out, ...) and store_d_vec(out, ...) of values already
/// rounded to `out_type`, `out` the output's pointer (in fused kernels too, as out.data, for
/// values the epilogue was applied to in registers).
void emit_plain_stores(std::ostringstream& os, const ImplicitGemm& g, const std::string& out_type, int vec,
                       char along);

/// In a function of (m, n, z): returns when outside the GEMM, else `const int offset` of the
/// output element (its iterators it_<name> in scope).
void emit_output_offset(std::ostringstream& os, const ImplicitGemm& g);
/// `out_address(out, m, n, z)`: where the output element at virtual (m, n) of batch z lies, which
/// must be inside the GEMM (the start of a bulk store's run).
void emit_output_address(std::ostringstream& os, const ImplicitGemm& g, const std::string& out_type);
/// With a fused epilogue (epilogue_stage.cpp): the struct Output that `out` is in kernels (the
/// output's data and the epilogue's operands), and store_d / store_d_vec templates over the
/// accumulator type that apply the epilogue in float32 and round its result to `out_type`.
void emit_epilogue_scatter(std::ostringstream& os, const ImplicitGemm& g, const std::string& out_type, int vec,
                           char along);
/// A kernel's output parameters: "OUT* __restrict__ out", or with an epilogue the output's data
/// and each operand's pointer, which output_bundle() gathers into `out` at the kernel's top
/// ("" without an epilogue). Launches pass them in this order (runtime/launch.h).
std::string output_params(const ImplicitGemm& g, const std::string& out_type);
std::string output_bundle(const ImplicitGemm& g);
/// What a kernel passes store_d / store_d_vec for accumulator `value`: rounded to `out_type`
/// without an epilogue; as it is with one, whose result is rounded.
std::string stored_value(const ImplicitGemm& g, const std::string& out_type, const std::string& value);

/// The widest vector (elements, at most 16 bytes of `out_bits`-bit elements) in which outputs
/// consecutive along virtual axis `along` ('m' or 'n') are contiguous and aligned in the output
/// tensor: the axis's innermost iterator indexes the output's last dimension alone.
int output_vector_width(const ImplicitGemm& g, char along, int out_bits);

/// The kernel's signature (operands A and B, the output, split-K partial sums), its dynamic
/// shared memory with stage buffers As and Bs (A_BYTES each for A, then B), the block origin
/// (emit_block_origin) and `z`, `split` from blockIdx.z, for the families that stage through
/// such buffers.
void emit_kernel_entry(std::ostringstream& os, const ImplicitGemm& g, const KernelSource& k, const ScheduleParams& p, const std::string& ta,
                       const std::string& tb, const std::string& tout, const std::string& tpart);
/// K_TILES, STEPS (serial points x K tiles) and this block's share [first, last) of them.
void emit_step_range(std::ostringstream& os);

/// `const int m0, n0` of this block, walking `p.raster` rows of tiles column by column.
void emit_block_origin(std::ostringstream& os, const ScheduleParams& p);
/// `const int m0, n0` of output tile number `linear` (row-major over GRID_M x GRID_N tiles, which
/// must be in scope), walking `p.raster` rows of tiles column by column as emit_block_origin does.
/// With a pair of blocks sharing an operand (p.cluster 2 or 3) the tiles are the pair's, twice as
/// tall (wide), and `cta_rank` (in scope) picks this block's half.
void emit_tile_origin(std::ostringstream& os, const ScheduleParams& p, const std::string& linear,
                      const std::string& indent);

/// How an operand tile is gathered: `op` ('a' or 'b') stored as rows x cols (constant names such
/// as "BM", "BK"), the tile coordinates named `row_var`/`col_var` ("mm", "kk", "nn"), copied
/// `vec` contiguous elements at a time or `pack` sub-byte elements to a byte; `shifted` vectors
/// (copies_shifted) are fetched into registers by load_tiles and stored by store_staged.
struct GatherTile {
  char op = 'a';
  std::string rows, cols, row_var, col_var;
  int vec = 1, pack = 1;
  bool shifted = false;
};
/// The gather of operand `op` whose stored rows run along k (`k_rows`) or along m / n.
GatherTile gather_tile(char op, bool k_rows, int vec, int pack, bool shifted);
/// Everything a kernel needs to fill its stage buffers: the hoisted fixed parts, the registers of
/// shifted copies, the lambda load_tiles(step, buf) gathering both operands (`a_buffer` and
/// `b_buffer` declare pointers `a` and `b` to stage `buf`'s tiles), and, when a gather is
/// shifted, store_staged(buf). Returns whether store_staged exists (for emit_main_loop).
bool emit_tile_loads(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p, int threads,
                     const GatherTile& a, const GatherTile& b, const std::string& a_buffer,
                     const std::string& b_buffer);
/// emit_tile_loads of one element a lane (pack 1), each operand's gather as gather_tile's
/// `k_rows` (`a_rows`, `b_rows`) gives it, into stage buffers of A_BYTES and B_BYTES holding
/// `ta` and `tb`.
bool emit_byte_stage_loads(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p, int threads,
                           bool a_rows, bool b_rows, const std::string& ta, const std::string& tb);
/// store_shifted(dst, lo, hi, shift), when an operand is copied in shifted vectors
/// (copies_shifted), and store_strided<EB, O>(dst, lo, hi, shift) when one is strided (every
/// other element of the two aligned vectors, Contiguity::step 2).
void emit_shift_helpers(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p);
/// The main loop over this block's steps [first, last): cp.async ring of p.stages buffers,
/// register-staged double buffering, or a single buffer. Needs the lambdas load_tiles(step,
/// buf) and compute(buf) in scope, and with `staged` store_staged(buf), called with the buffer
/// of a load_tiles after the math of the step that issued it; ends with the buffers free for
/// the epilogue.
void emit_main_loop(std::ostringstream& os, const ScheduleParams& p, bool staged);

/// The epilogue's output vector: `width` outputs contiguous along virtual axis `along` ('m' or
/// 'n'); one element along n with split-K (partial sums are written in [m][n] order).
struct OutVector {
  int width;
  char along;
};

/// The fused epilogue's store loop over the tile's vectors in Cs (`values`: where vector (mm, nn)
/// is; `end`: how many it walks), `threads` threads numbered by `thread` from 0: operands that
/// stay the same along the loop are loaded once, the others a chunk of vectors ahead of their stores.
/// `apply` names what each vector goes through: store_d_vec, or epi_in_place (emit_epilogue_in_place()).
/// `early`: those the same along the loop were loaded before the main loop (emit_epilogue_early_loads()).
void emit_epilogue_loop(std::ostringstream& os, const ImplicitGemm& g, const OutVector& ov, const std::string& threads,
                        const std::string& thread, const std::string& end, const std::string& values,
                        const std::string& apply = "store_d_vec", bool early = false);
/// Whether the fused epilogue under `p`, run by emit_epilogue_loop() in a block that has the SM to
/// itself, has operands the same along the loop (a convolution's per-channel scale and bias) that
/// emit_epilogue_early_loads() can load before the main loop.
bool epilogue_loads_early(const ImplicitGemm& g, const ScheduleParams& p);
/// With epilogue_loads_early(): the operands the same along the epilogue loop of `threads` threads
/// numbered by `thread`, loaded for the thread's place in the tile into `epi_early` while the main
/// loop has yet to run, so that their latency hides behind it instead of trailing it (a kernel of
/// one wave at one block an SM has no other block to hide it). Emitted where m0, n0, z and `out`
/// are defined, in a scope that the epilogue loop is inside.
void emit_epilogue_early_loads(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p,
                               const std::string& threads, const std::string& thread, const std::string& indent);
/// `epi_in_place`: store_d_vec's epilogue of one vector of outputs, written back over the sums in
/// the epilogue tile instead of to the output (which a TMA store then copies whole). Emitted
/// after emit_output_scatter() of the same vector.
void emit_epilogue_in_place(std::ostringstream& os, const ImplicitGemm& g, const std::string& out_type, int vec,
                            char along);
OutVector out_vector(const ImplicitGemm& g, const ScheduleParams& p);
/// Where vector `e` of `width` elements along `along` sits in the tile: the C++ statement
/// "const int mm = ..., nn = ...;" of its row and column there.
std::string vector_position(char along, const std::string& width);
/// Bytes of the epilogue tile Cs[BM][BN + 8] (rows along n) or Cs[BN][BM + 4] (rows along m) of
/// 4-byte accumulators (float or int, as accumulator_type()), for families that stage the
/// block's results through shared memory.
std::int64_t epilogue_bytes(const ImplicitGemm& g, const ScheduleParams& p);
/// Shared memory of a family whose A and B rings (`stages` of stage_bytes()) are reused for the
/// epilogue tile: the larger of the two.
std::int64_t ring_or_epilogue_bytes(const ImplicitGemm& g, const ScheduleParams& p);
/// For such a family: the tile index functions of A and B, the constants A_BYTES, B_BYTES and
/// C_LD (epilogue rows along n when `c_row`), the cp.async helpers when used, and the shift helpers.
void emit_ring_helpers(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p, const StoredTile& sa,
                       const StoredTile& sb, bool c_row);
/// Into the epilogue tile Cs (rows along n when `c_row`, else along m), the four accumulators of
/// the m16n8 C-fragment layout that mma.sync and wgmma share: (r, c), (r, c + 1), (r + 8, c) and
/// (r + 8, c + 1), with r and c in scope; `value` names accumulator t with '#' standing for t.
/// `r8` and `c1` name the rows and columns r + 8 and c + 1 where they are not just that.
/// `swizzled`: instead into that tile, laid out by cs_at(row, column) (TMA-stored tiles).
void emit_accumulator_quad(std::ostringstream& os, bool c_row, const std::string& value, const std::string& r8 = "r + 8",
                           const std::string& c1 = "c + 1", const std::string& swizzled = "");
/// Whether the fused epilogue is applied to the accumulators in registers (ScheduleParams::epi_regs),
/// before they enter the epilogue tile (emit_accumulator_epilogue()), in a family whose
/// accumulators lie in the m16n8 C-fragment layout. The stores then copy the tile through the
/// plain stores (emit_plain_stores()), and TMA-stored tiles need no pass in place.
bool epilogue_on_accumulators(const ImplicitGemm& g, const ScheduleParams& p);
/// Whether `g`'s epilogue can be: every operand varies along m or along n, not both (a channel's
/// scale and bias, a per-tensor value), so a thread needs two rows of each per m16 tile or two
/// columns per n8 quad, and the sums are float32.
bool epilogue_fits_accumulators(const ImplicitGemm& g);
/// Why epi_regs = 1 cannot hold under `p` ("" where it can): also the whole sum must be in the
/// block (no split-K or stream-K pieces).
std::string why_not_on_accumulators(const ImplicitGemm& g, const ScheduleParams& p);
/// A thread's accumulator tiles in the m16n8 C-fragment layout, as emit_accumulator_epilogue()
/// walks them: `tiles` along m, `quads` quads along n each, accumulator t of quad j of tile i
/// named by `quad` with '#' for t, `first_row` the output row (virtual m) of tile i's first and
/// `first_col` the output column (virtual n) of quad j's first.
struct AccumulatorTiles {
  std::string tiles, quads, quad, first_row, first_col;
};
/// The epilogue applied to every accumulator in place (epilogue_on_accumulators()), its operands
/// loaded for the thread's rows or columns; `out`, m0, n0 and z in scope. `rows_loaded`: the
/// operands that vary along m at most are in scope already (emit_accumulator_row_loads()).
void emit_accumulator_epilogue(std::ostringstream& os, const ImplicitGemm& g, const AccumulatorTiles& t,
                               const std::string& indent, bool rows_loaded = false);
/// Whether an operand of the epilogue varies along m at most (a per-row scale or bias).
bool accumulator_epilogue_has_rows(const ImplicitGemm& g);
/// The operands of emit_accumulator_epilogue() that vary along m at most, declared and loaded for
/// the thread's two rows of each of t.tiles tiles (`epi_<i>_rows`), a few registers each: a kernel
/// emits this before its main loop so that their latency hides behind it.
void emit_accumulator_row_loads(std::ostringstream& os, const ImplicitGemm& g, const AccumulatorTiles& t,
                                const std::string& indent);
/// Whether an operand of the epilogue varies along both virtual axes (a residual, SiLU's gate):
/// the operands ScheduleParams::epi_prefetch asks L2 for.
bool epilogue_has_full_shape_operand(const ImplicitGemm& g);
/// Operand `operand` of the epilogue, asked of L2 `width` elements (a 128-byte line, or a shorter
/// contiguous run) at a time along the output's vectors.
struct PrefetchedOperand {
  int operand;
  int width;
};
/// The full-shape operands that epi_prefetch asks L2 for under `p`: none with split sums or a
/// sliding window, nor those contiguous for less than 16 bytes along the output's vectors.
std::vector<PrefetchedOperand> prefetched_operands(const ImplicitGemm& g, const ScheduleParams& p);
/// With p.epi_prefetch: each of prefetched_operands() of the block's tile asked of L2 at the
/// tile's start, by `threads` threads numbered by `thread` from 0, so that its fetch overlaps the
/// main loop. Emitted where m0, n0, z and `out` are defined.
void emit_epilogue_prefetch(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p,
                            const std::string& threads, const std::string& indent,
                            const std::string& thread = "threadIdx.x");

/// Who runs the epilogue's stores: by default every thread of the block after a __syncthreads,
/// ending the kernel; a persistent kernel's consumers alone (`threads` of them numbered by
/// `thread` from 0, after `barrier`) inside its tile loop (`close` false).
struct EpilogueScope {
  std::string barrier = "  __syncthreads();\n";
  std::string threads = "THREADS";
  std::string thread = "threadIdx.x";
  bool close = true;
  /// The block has the SM to itself (__launch_bounds__(THREADS, 1)) and its accumulators are dead
  /// here: a fused epilogue may hold operands of several vectors in registers (emit_epilogue_loop)
  /// without lowering the number of resident blocks.
  bool sm_to_itself = false;
  /// The operands the same along the epilogue loop are in `epi_early` (emit_epilogue_early_loads()).
  bool operands_early = false;
  /// A variable whose rows the epilogue tile holds before the tile's own (a clamped box's, the
  /// wgmma family's BoxClamp): the stores read row x + row_skip, and walk the rows x below the
  /// tile's rows less row_skip only (the rest lie past the extent). Empty: none.
  std::string row_skip;
};
/// The end of a kernel whose accumulators are in the epilogue tile `Cs` (of `acc_type`, rows of
/// C_LD, laid out as epilogue_bytes() says): a barrier, then the block's outputs written in
/// out_vector() vectors rounded to `out_type`, or its split-K partial sums; with p.cluster the
/// barrier is the cluster's, and each block sums its share of the tile over every block's Cs.
void emit_epilogue_stores(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p,
                          const std::string& acc_type, const std::string& out_type,
                          const EpilogueScope& scope = EpilogueScope());

/// With split_reduce (split-K outside a cluster), after the block's partial sums are stored: the
/// tile's last block to arrive (its counter in the workspace, tile_counters()) sums every split's
/// partial sums and stores them through store_d, the epilogue included. Nothing otherwise. The
/// kernel names z, m0, n0 and partial.
void emit_last_block_sum(std::ostringstream& os, const ImplicitGemm& g, const ScheduleParams& p,
                         const std::string& out_type, const EpilogueScope& scope = EpilogueScope());

/// `__cluster_dims__(1, 1, SPLIT_K) ` for a kernel whose splits meet in a cluster (p.cluster), to
/// put before its name: the grid's z (batch x SPLIT_K, split fastest) in clusters of SPLIT_K.
std::string cluster_attribute(const ScheduleParams& p);
/// With p.cluster: cluster_sync(), cluster_address(local, rank), cluster_load(address) and
/// cluster_load4(address, words), the cluster barrier and the reads of another block's shared
/// memory (one word, or four 16-byte aligned) that the epilogue uses; an
/// #error when compiled for less than sm_90.
void emit_cluster_helpers(std::ostringstream& os, const ScheduleParams& p);

/// With split-K, where the main loop ends: lets the reduce kernel, a programmatic dependent launch
/// on sm_90, start launching (griddepcontrol.launch_dependents). Nothing otherwise.
void emit_dependents_trigger(std::ostringstream& os, const ScheduleParams& p);

/// The split-K reduce kernel (when p.split_k > 1), summing partial[split][z][m][n]; on sm_90 it
/// waits for the main kernel with griddepcontrol.wait (launched as its programmatic dependent).
void emit_split_reduce(std::ostringstream& os, const ImplicitGemm& g, const KernelSource& k, const std::string& part_type,
                       const std::string& out_type);

/// The relayout prologue (relayout_prologue.cpp).
/// In a relayout view's kernel (ImplicitGemm::relayouted()), at the top of the main kernel: on
/// sm_90, wait (griddepcontrol.wait) for the prologue that copies the operands. Nothing otherwise.
void emit_prologue_wait(std::ostringstream& os, const ImplicitGemm& g);
/// Appends the prologue kernel of a relayout view to `k`: blocks over [moved][inner] of each
/// copied operand (A's first) writing [inner][moved] into the workspace after the split-K partial
/// sums: each lane transposes a V x V block in registers where vectors of V >= 2 elements divide
/// both extents and the copy makes at least 128 such blocks of 8 V x 32 V, else 32 x 32 tiles go
/// through shared memory, and rows shorter than 32 (a filter's taps) are copied up to 256 whole
/// rows per block, read as one run of 16-byte vectors and written along moved in vectors, where
/// moved exceeds 64 (else gathered element by element); copies padded to whole 16-byte vectors
/// (a first layer's channels) are built a destination row at a time and stored as vectors. Each
/// thread issues all its loads before its first store. A block lets the main kernel launch
/// (griddepcontrol.launch_dependents) once it has copied its part. Sets relayout_* and grows
/// workspace_bytes.
void emit_relayout(KernelSource& k, const ImplicitGemm& g);

/// The type partial sums are kept in: at least float.
std::string partial_type(const ImplicitGemm& g);
/// The split-K partial sums' bytes in the workspace: partial[split][z][m][n] at the largest size.
std::int64_t partial_bytes(const ImplicitGemm& g, const ScheduleParams& p);
/// With split_reduce, the workspace's tile counters after the partial sums: one unsigned per
/// output tile of each batch entry ([z][tile row][tile column], at the largest size), counting
/// the splits that have stored their partial tile.
struct TileCounters {
  std::int64_t offset, batch, rows, cols;
  std::int64_t bytes() const { return batch * rows * cols * 4; }
};
TileCounters tile_counters(const ImplicitGemm& g, const ScheduleParams& p);

/// Whether validating `p` raises error `e`.
bool raises(const ImplicitGemm& g, const ScheduleParams& p, const DeviceLimits& limits, ScheduleError e);
/// The copies of a default schedule: each operand's vector (from vec_a / vec_b) halved while
/// validation raises one of `errors`, cp.async on sm_80+ where an operand's vectors allow it, and
/// `deep` stages with it (else 2), fewer while the shared memory exceeds the device's limit.
void default_copies(const ImplicitGemm& g, ScheduleParams& p, const DeviceLimits& limits,
                    std::initializer_list<ScheduleError> errors, int deep);

/// base x each factor up to cap (base alone when none fits), for the families' choices.
std::vector<int> multiples(std::int64_t base, std::initializer_list<int> factors, std::int64_t cap);
/// 1, 2, 4, ... up to max.
std::vector<int> powers_up_to(int max);

// ---- The SIMT family's window staging (simt_window.cpp) ----

/// One dimension of a sliding window in the image operand: index = out * stride + tap *
/// dilation + offset, `out` on m, `tap` on k (-1 where the iterator is absent or of extent 1).
struct WindowDim {
  int dim = -1;  ///< The image tensor's dimension.
  int out_iter = -1, tap_iter = -1;
  std::int64_t stride = 0, dilation = 0, offset = 0;
  std::int64_t outputs = 1, taps = 1;  ///< The iterators' extents (1 when absent).
  std::int64_t size = 1;               ///< The image's extent along `dim`.
};
/// How a mapping stages its image (operand A) as windows: rows (absent in 1-D: outputs 1, taps
/// 1) and columns. The image's contiguous last dimension is either the columns (channels first:
/// each batch entry's window is staged whole) or one batch iterator, the channels (channels
/// last: the block's consecutive batch entries are staged side by side, copied along them).
struct WindowPlan {
  std::string why_not;  ///< Empty when the mapping can stage windows, else the reason.
  WindowDim row, col;
  std::int64_t row_stride = 0;  ///< Image elements between consecutive rows.
  bool channels_last = false;
  std::int64_t col_stride = 1;  ///< Image elements between consecutive columns.
  std::int64_t channels = 1;    ///< Channels last: the extent of the image's last dimension.
  /// Channels last: whether the output's last dimension is the channels too, so that a thread's
  /// consecutive channels are stored as one vector.
  bool output_channels_last = false;
};
WindowPlan window_plan(const ImplicitGemm& g);
/// The widest copy of the image (elements): a power of two up to 16 bytes dividing its rows (or
/// its channels, channels last).
int window_vector_limit(const ImplicitGemm& g);
/// The block_k of a window schedule: its whole reduction in one step (the smallest of 8, 16,
/// ..., 256 covering K), or 0 when K is larger.
int window_block_k(const ImplicitGemm& g);
void validate_window(const ImplicitGemm& g, const ScheduleParams& p, const DeviceLimits& limits,
                     std::vector<ScheduleIssue>& out);
std::int64_t window_shared_bytes(const ImplicitGemm& g, const ScheduleParams& p);
ScheduleParams window_default_schedule(const ImplicitGemm& g, const DeviceLimits& limits);
KnobChoices window_choices(const ImplicitGemm& g);
std::vector<int> window_block_tiles(const ImplicitGemm& g, const ScheduleParams& p, char axis);
KernelSource emit_simt_window(const ImplicitGemm& g, const ScheduleParams& p);

}  // namespace tmap::pipeline

namespace tmap {
/// The families, registered by find_family() (src/codegen/emitter.cpp).
const EmitterFamily& wmma_family();
const EmitterFamily& mma_sync_family();
const EmitterFamily& wgmma_family();
const EmitterFamily& simt_family();
}  // namespace tmap
