// tmap device primitives: where element (r, c) of a swizzled shared-memory tile lives. Swizzling
// XORs the 16-byte chunk index within a 128-byte line with the line's position, so that the rows
// a warp reads or writes together fall in different banks.
#ifndef TMAP_DEVICE_SWIZZLE_CUH
#define TMAP_DEVICE_SWIZZLE_CUH

namespace tmap {
namespace device {

/// A tile of rows of whole 128-byte lines, COLS elements each, CHUNK elements per 16-byte chunk:
/// chunk c of row r moves to c ^ (r % 8) within its line. In elements from the tile's start.
template <int COLS, int CHUNK>
__device__ __forceinline__ int swizzle_rows(int r, int c) {
  return r * COLS + (((c / CHUNK) ^ (r & 7)) * CHUNK) + c % CHUNK;
}

/// A tile whose rows (COLS elements of BYTES bytes) are shorter than 128 bytes, several sharing a
/// line: chunk c of line l moves to c ^ (l % 8).
template <int COLS, int BYTES>
__device__ __forceinline__ int swizzle_packed(int r, int c) {
  const int o = (r * COLS + c) * BYTES, line = o >> 7;
  return ((line << 7) | ((((o >> 4) ^ line) & 7) << 4) | (o & 15)) / BYTES;
}

/// The XOR pattern of wgmma's swizzle modes for row r of LINE_BYTES-byte lines (128, 64 or 32).
template <int LINE_BYTES>
__device__ __forceinline__ int swizzle_xor(int r) {
  if (LINE_BYTES == 128) return r & 7;
  if (LINE_BYTES == 64) return (r >> 1) & 3;
  return (r >> 2) & 1;
}

/// wgmma's canonical layout: the tile is column blocks of W elements (one LINE_BYTES line),
/// each ROWS rows, chunks of T elements swizzled within the line by swizzle_xor().
template <int ROWS, int W, int T, int LINE_BYTES>
__device__ __forceinline__ int swizzle_atoms(int r, int c) {
  return ((c / W) * ROWS + r) * W + ((((c % W) / T) ^ swizzle_xor<LINE_BYTES>(r)) * T) + c % T;
}

}  // namespace device
}  // namespace tmap

#endif  // TMAP_DEVICE_SWIZZLE_CUH
