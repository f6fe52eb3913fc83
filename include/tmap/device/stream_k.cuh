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

/// One block's walk over its units. With `hybrid`, when there are two waves of tiles or more,
/// all but the last one to two waves are data-parallel: the first `units` steps (the tiles of the
/// last waves' worth) are cut into runs as above, then block b takes whole tiles of the rest,
/// every blocks-th from tile units / steps + b, so that the blocks at work at one time hold
/// neighbouring tiles (and the operands' panels in L2), as a persistent kernel's do.
struct StreamWalk {
  long long units;       ///< The steps cut into runs; the rest are whole tiles.
  long long run_end;     ///< The end of this block's run.
  long long first, end;  ///< This block's first unit, and the end of all units.
  int blocks, steps;
  int block;             ///< The block that walks.
};

/// Where the walk goes after a piece that ended at unit `u`: on in its run, from the run's end to
/// its block's first whole tile, or from a whole tile to its next one (past w.end: done).
__host__ __device__ inline long long stream_next(const StreamWalk& w, long long u) {
  if (u < w.run_end) return u;
  if (u <= w.units) return w.units + static_cast<long long>(w.block) * w.steps;
  return u + static_cast<long long>(w.blocks - 1) * w.steps;
}

__host__ __device__ inline StreamWalk stream_walk(long long tiles, int steps, int blocks, int b, bool hybrid) {
  const long long waves = tiles / blocks;
  const long long whole = hybrid && waves >= 2 ? (waves - 1) * blocks : 0;  // tiles taken whole
  StreamWalk w{(tiles - whole) * steps, 0, 0, tiles * steps, blocks, steps, b};
  const long long run_first = stream_run_first(w.units, blocks, b);
  w.run_end = stream_run_first(w.units, blocks, b + 1);
  w.first = run_first < w.run_end ? run_first : stream_next(w, w.run_end);
  return w;
}

/// The piece of the walk at unit `u`: up to the run's end inside the runs, a whole tile past them.
__host__ __device__ inline StreamPiece stream_piece(const StreamWalk& w, long long u) {
  return stream_piece(u, u < w.units ? w.run_end : u + w.steps, w.steps);
}

}  // namespace device
}  // namespace tmap

#endif  // TMAP_DEVICE_STREAM_K_CUH
