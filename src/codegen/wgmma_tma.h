// TMA views of a wgmma kernel's operands and output (private to src/codegen/): whether TMA can
// read an operand as tiled boxes of a strided view of its tensor (tma_view()) or as im2col boxes
// of a channels-last convolution input (im2col_view()), the tensor maps the launch builds for
// them, and the coordinates the producer's boxes take. wgmma_family.cpp emits the kernels that
// use them; its file comment describes the swizzled lines the boxes fill.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "tile_pipeline.h"

namespace tmap::wgmma {

/// Bytes of one element of dtype `t`.
inline int elem_bytes(DType t) { return dtype_bits(t) / 8; }

/// Bytes of one swizzled line: 128, 64 or 32 (ScheduleParams::swizzle 1, 2 or 3).
inline int line_bytes(const ScheduleParams& p) { return 128 >> (std::clamp(p.swizzle, 1, 3) - 1); }

/// W: elements of operand tile `t` per swizzled line, the swizzle's row (see the file comment).
inline std::int64_t line(const pipeline::StoredTile& t, const ScheduleParams& p) { return line_bytes(p) / t.bytes; }

/// One dimension of an operand's TMA view: what picks its coordinate, and its extent and stride.
struct TmaDim {
  enum Role { kCols, kRows, kBatch, kSerial, kFixed } role;
  std::uint64_t extent = 1, stride_bytes = 0;
  int iter = -1;              ///< kBatch, kSerial: the iterator indexing the dimension alone.
  std::int64_t value = 0;     ///< kFixed: the constant index.
};

/// How TMA im2col boxes fetch a channels-last convolution input as an operand: the tensor
/// [N][spatial...][C] (rank 3 to 5), each box BM (as B, in the transposed product: BN)
/// consecutive output pixels of one swizzled line of channels at one filter tap. An output pixel's spatial index d is lower[d] + p_d * stride[d]
/// plus the tap's offset dil[d] * t_d; the bounding box of each spatial dimension holds exactly
/// the output extent P_d of such positions, so that TMA walks the block's M rows pixel by pixel,
/// wrapping into the next row and the next image as the M index does.
struct Im2colView {
  int which = 0;                     ///< The operand: 0 (A, pixels on m) or 1 (B, pixels on n).
  int rank = 0;                      ///< Of the tensor, 3 to 5.
  std::vector<std::int64_t> shape;   ///< The tensor's, outermost first.
  std::int64_t channels = 0;         ///< C, the innermost reduction iterator's extent.
  int batch_iter = -1;               ///< The iterator indexing dimension 0 (m / n, or batch), -1 for none.
  struct Spatial {
    int out = -1, tap = -1;          ///< The m (n) iterator (output position) and the tap iterator, -1: none.
    std::int64_t stride = 1, dil = 1, extent = 1;
    /// The bounding box [lower, shape + upper) at tap 0: exactly `extent` positions stride apart.
    std::int64_t lower = 0, upper = 0;
  };
  std::vector<Spatial> spatial;      ///< Dimensions 1 .. rank - 2, outermost first.
};

/// How TMA boxes fetch operand `which`'s tile: its tensor seen as at most 5 dimensions, innermost
/// first. Dimension 0 runs along the stored tile's columns (contiguous in memory), dimension 1
/// along its rows; each is one virtual axis whose iterators index consecutive dimensions of the
/// tensor alone (coefficient 1, no offset), every one but the outermost covered whole, so that
/// the axis is one strided run. The tensor's other dimensions are indexed by one batch or serial
/// iterator alone, or by a constant. Returns the reason when the operand is not such a view (a
/// convolution's input, whose rows move with the filter taps, or a row stride TMA cannot take).
std::string tma_view(const ImplicitGemm& g, int which, std::vector<TmaDim>& dims);

/// How TMA stores write the output's epilogue tile (bulk_store 2): as tma_view() reads an operand,
/// dimension 0 along the tile's contiguous axis (n when `c_row`, else m), dimension 1 along its
/// rows, the other dimensions indexed by one batch iterator alone or a constant.
std::string output_tma_view(const ImplicitGemm& g, bool c_row, std::vector<TmaDim>& dims);

/// The im2col view of operand `which` (see Im2colView), or the reason it has none. The output
/// positions are on m for A; for B (the transposed product, whose m is the filters) on n.
std::string im2col_view(const ImplicitGemm& g, int which, Im2colView& v);

/// Where a warp-specialized kernel's TMA boxes come from for operand `which`: a tiled view
/// (tma_view()) or an im2col view. Returns the reasons when neither exists.
std::string tma_source(const ImplicitGemm& g, int which, std::vector<TmaDim>& dims, Im2colView* im2col = nullptr);

/// Whether both operands have TMA sources (tma_source() finds no reason against either).
bool tma_operands(const ImplicitGemm& g);

/// The tensor map of operand `which` seen as `dims` (its tma_view()): boxes of one swizzled line
/// of columns by the stored tile's rows.
TensorMapSpec tensor_map(const ImplicitGemm& g, const ScheduleParams& p, int which, const std::vector<TmaDim>& dims);

/// The coordinate of TMA dimension `d` of operand `which` for the stage of reduction step
/// (s, k0), with `block` the column block (one swizzled line wide) of the tile.
std::string tma_coordinate(const ImplicitGemm& g, int which, const TmaDim& d, const std::string& block, bool clamped);

/// The im2col tensor map of operand v.which seen as `v`: boxes of one swizzled line of channels
/// by the block's BM (BN) pixels.
TensorMapSpec im2col_map(const ImplicitGemm& g, const ScheduleParams& p, const Im2colView& v);

/// The producer's loads of operand v.which from an im2col view, in two parts: the block's first
/// pixel (the input coordinates of its first output pixel at tap 0), computed once per tile ...
std::string im2col_origin(const ImplicitGemm& g, const Im2colView& v);

/// ... then one box per column block (one swizzled line) of a stage at its channel offset and
/// filter tap, `blocks` of them.
std::string im2col_loads(const ImplicitGemm& g, const Im2colView& v, int blocks);

}  // namespace tmap::wgmma
