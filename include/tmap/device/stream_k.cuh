// tmap device primitives: how a stream-K kernel cuts the steps of all its output tiles into runs,
// one per block, and which blocks hold the pieces of a tile that its finisher adds. Plain
// arithmetic, so that host code (the tests) can include it with cuda_runtime.h and walk every
// block's pieces as the kernels do.
#ifndef TMAP_DEVICE_STREAM_K_CUH
#define TMAP_DEVICE_STREAM_K_CUH

namespace tmap {
namespace device {

/// The first step of run `b` when `units` steps (tiles x steps a tile, tile after tile) are cut
/// into `blocks` even runs; run b is [stream_run_first(b), stream_run_first(b + 1)).
__host__ __device__ inline long long stream_run_first(long long units, int blocks, int b) {
  return units * b / blocks;
}

/// The piece of a run that starts at step `u` (the run ends at `end`): steps [first, last) of
/// `tile`, each tile `steps` long. The run's next piece starts at tile x steps + last.
struct StreamPiece {
  int tile, first, last;
};
__host__ __device__ inline StreamPiece stream_piece(long long u, long long end, int steps) {
  const int tile = static_cast<int>(u / steps);
  const long long left = end - static_cast<long long>(tile) * steps;
  return {tile, static_cast<int>(u % steps), left < steps ? static_cast<int>(left) : steps};
}

/// Whether block `b` (a block after the tile's finisher) holds a piece of `tile` for the
/// finisher to add: its run starts inside the tile. That piece is its run's first.
__host__ __device__ inline bool stream_peer(long long units, int blocks, int b, int tile, int steps) {
  return b < blocks && stream_run_first(units, blocks, b) < static_cast<long long>(tile + 1) * steps;
}

}  // namespace device
}  // namespace tmap

#endif  // TMAP_DEVICE_STREAM_K_CUH
