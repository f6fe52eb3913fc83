// The device library (include/tmap/device/): each primitive compiled by NVRTC (no GPU needed) and
// run on the GPU against expectations computed here, and the plumbing that puts the headers in
// front of NVRTC and into kernel sources written for others.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "test_util.h"
#include "tmap/codegen/device_library.h"
#include "tmap/device/stream_k.cuh"
#include "tmap/runtime/launch_plan.h"
#include "tmap/runtime/nvrtc_compiler.h"

namespace tmap {
namespace {

using testing::have_gpu;

/// A test kernel `name` in `source`, which includes the headers it exercises.
struct Primitive {
  std::string name;
  std::string source;
};

std::string with_library(const std::string& headers, const std::string& body) {
  std::string s;
  std::size_t at = 0;
  while (at < headers.size()) {
    std::size_t sp = headers.find(' ', at);
    if (sp == std::string::npos) sp = headers.size();
    s += "#include \"tmap/device/" + headers.substr(at, sp - at) + ".cuh\"\n";
    at = sp + 1;
  }
  return s + "using namespace tmap::device;\n" + body;
}

const Primitive kSmem{"k_smem", with_library("smem", R"(
extern "C" __global__ void k_smem(unsigned* out) {
  __shared__ unsigned buf[32];
  buf[threadIdx.x] = threadIdx.x;
  out[threadIdx.x] = smem_u32(&buf[threadIdx.x]) - smem_u32(&buf[0]);
})")};

// Vectors of a 4-row tile of 16-bit elements (element i holds i) read by tile_vector(), in each
// word width: block b reads case b's vectors into out[512 * b + ...] and its word into words[b].
const Primitive kTileVector{"k_tile_vector", with_library("smem", R"(
template <int N, int LD>
__device__ void read_tile(unsigned short* out, int* word) {
  __shared__ __align__(16) unsigned short tile[4 * LD];
  for (int i = threadIdx.x; i < 4 * LD; i += blockDim.x) tile[i] = i;
  __syncthreads();
  for (int e = threadIdx.x; e < 4 * (LD / N); e += blockDim.x) {
    const int r = e / (LD / N), c = e % (LD / N) * N;
    const TileVector<unsigned short, N> v = tile_vector<N, LD>(&tile[r * LD + c]);
    for (int t = 0; t < N; ++t) out[e * N + t] = v.v[t];
  }
  if (threadIdx.x == 0) *word = tile_word<unsigned short, N, LD>();
}
extern "C" __global__ void k_tile_vector(unsigned short* out, int* words) {
  unsigned short* o = out + 512 * blockIdx.x;
  int* w = words + blockIdx.x;
  if (blockIdx.x == 0) read_tile<8, 72>(o, w);
  if (blockIdx.x == 1) read_tile<4, 68>(o, w);
  if (blockIdx.x == 2) read_tile<2, 66>(o, w);
  if (blockIdx.x == 3) read_tile<2, 65>(o, w);
})")};

// Thread t copies 16, 8 and 4 bytes; every third thread's copies are invalid (zero-filled).
const Primitive kCpAsync{"k_cp_async", with_library("cp_async", R"(
extern "C" __global__ void k_cp_async(unsigned* out, const unsigned* in) {
  __shared__ __align__(16) unsigned buf[224];
  for (int i = threadIdx.x; i < 224; i += 32) buf[i] = 0xdeadbeefu;
  __syncthreads();
  const int t = threadIdx.x;
  const bool valid = t % 3 != 0;
  cp_async<16>(&buf[4 * t], &in[4 * t], valid);
  cp_async<8>(&buf[128 + 2 * t], &in[128 + 2 * t], valid);
  cp_async<4>(&buf[192 + t], &in[192 + t], valid);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  for (int i = threadIdx.x; i < 224; i += 32) out[i] = buf[i];
})")};

// Four 8 x 8 matrices of 16-bit values (matrix i, row r, column c holds 64 i + 8 r + c); lane l
// names row l % 8 of matrix l / 8. Then to_tf32 of 32 words.
const Primitive kLdmatrix{"k_ldmatrix", with_library("ldmatrix", R"(
extern "C" __global__ void k_ldmatrix(unsigned* out, const unsigned* in) {
  __shared__ __align__(16) unsigned short m[4][8][8];
  for (int i = threadIdx.x; i < 256; i += 32) (&m[0][0][0])[i] = i;
  __syncthreads();
  const int l = threadIdx.x;
  unsigned r[4], t[4];
  ldmatrix_x4(r, &m[l / 8][l % 8][0]);
  ldmatrix_x4_trans(t, &m[l / 8][l % 8][0]);
  for (int i = 0; i < 4; ++i) {
    out[i * 32 + l] = r[i];
    out[128 + i * 32 + l] = t[i];
  }
  out[256 + l] = to_tf32(in[l]);
})")};

const Primitive kMbarrier{"k_mbarrier", with_library("mbarrier", R"(
extern "C" __global__ void k_mbarrier(unsigned* out) {
  __shared__ unsigned long long bar[2];
  if (threadIdx.x == 0) {
    mbar_init(&bar[0], 1);
    mbar_init(&bar[1], 32);
    mbar_fence_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    out[0] = mbar_try_wait(&bar[0], 0);  // no arrival yet
    mbar_arrive(&bar[0]);
    out[1] = mbar_try_wait(&bar[0], 0);  // phase 0 complete
    out[2] = mbar_try_wait(&bar[0], 1);  // phase 1 open
    mbar_wait(&bar[0], 0);
    mbar_expect_tx(&bar[0], 0);          // an arrival expecting no bytes completes phase 1
    out[3] = mbar_try_wait(&bar[0], 1);
  }
  mbar_arrive(&bar[1]);
  mbar_wait_warp(&bar[1], 0);
  if (threadIdx.x == 0) out[4] = 1;
})")};

// Two blocks of one cluster read each other's shared words and arrive on each other's barrier.
const Primitive kCluster{"k_cluster", with_library("mbarrier cluster", R"(
extern "C" __global__ void __cluster_dims__(2, 1, 1) k_cluster(unsigned* out) {
  __shared__ __align__(16) unsigned words[4];
  __shared__ unsigned long long bar;
  const int rank = cluster_ctarank();
  if (threadIdx.x == 0) {
    for (int i = 0; i < 4; ++i) words[i] = 100 * rank + i;
    mbar_init(&bar, 2);
    mbar_fence_init();
  }
  cluster_sync();
  const unsigned other = cluster_address(smem_u32(words), rank ^ 1);
  if (threadIdx.x == 0) {
    out[8 * rank] = rank;
    out[8 * rank + 1] = cluster_load(other + 4);
    unsigned four[4];
    cluster_load4(other, four);
    for (int i = 0; i < 4; ++i) out[8 * rank + 2 + i] = four[i];
    mbar_arrive_pair(&bar);
    mbar_wait(&bar, 0);
    out[8 * rank + 6] = 1;
  }
  cluster_sync();
})")};

// Thread t: the 16 bytes at t % 16 into in[0]:in[1], and every other 1-, 2- and 4-byte element
// of them.
const Primitive kShift{"k_shift", with_library("shift", R"(
extern "C" __global__ void k_shift(uint4* out, const uint4* in) {
  const int t = threadIdx.x, s = t % 16;
  store_shifted(&out[t], in[0], in[1], s);
  store_strided<1, uint2, uint4>(reinterpret_cast<uint2*>(&out[32 + t]), in[0], in[1], s);
  store_strided<2, uint2, uint4>(reinterpret_cast<uint2*>(&out[64 + t]), in[0], in[1], s);
  store_strided<4, uint2, uint4>(reinterpret_cast<uint2*>(&out[96 + t]), in[0], in[1], s);
})")};

// Every (r, c) of 16 x 64 tiles through each swizzle.
const Primitive kSwizzle{"k_swizzle", with_library("swizzle", R"(
extern "C" __global__ void k_swizzle(int* out) {
  for (int i = threadIdx.x; i < 16 * 64; i += blockDim.x) {
    const int r = i / 64, c = i % 64;
    out[i] = swizzle_rows<64, 8>(r, c);
    out[1024 + i] = swizzle_packed<16, 2>(i / 16, i % 16);
    out[2048 + i] = swizzle_atoms<16, 64, 8, 128>(r, c);
    out[3072 + i] = swizzle_atoms<16, 32, 8, 64>(r, c);
    out[4096 + i] = swizzle_atoms<16, 16, 8, 32>(r, c);
  }
})")};

// A 128-byte-swizzled wgmma descriptor, and the fences and group calls around no wgmma at all.
const Primitive kWgmma{"k_wgmma", with_library("wgmma", R"(
extern "C" __global__ void k_wgmma(unsigned long long* out) {
  __shared__ __align__(1024) unsigned char tile[4096];
  tile[threadIdx.x] = 0;
  fence_proxy_async();
  float f = threadIdx.x;
  int n = threadIdx.x;
  wgmma_fence();
  fence_operand(f);
  fence_operand(n);
  wgmma_commit();
  wgmma_wait<0>();
  if (threadIdx.x == 0) {
    out[0] = smem_desc<1>(tile + 1024, 16, 1024);
    out[1] = smem_u32(tile + 1024);
    out[2] = static_cast<unsigned long long>(f) + n;
  }
})")};

// A 64 x 8 box of 16-bit elements at (64, 4) of a 128 x 32 tensor, 128-byte swizzled by TMA,
// read back through swizzle_atoms().
const Primitive kTma{"k_tma", with_library("mbarrier tma swizzle", R"(
extern "C" __global__ void k_tma(unsigned short* out, const __grid_constant__ TmaMap map) {
  __shared__ __align__(1024) unsigned short box[8 * 64];
  __shared__ unsigned long long bar;
  if (threadIdx.x == 0) {
    mbar_init(&bar, 1);
    mbar_fence_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbar_expect_tx(&bar, sizeof(box));
    tma_load_2d(box, map, &bar, 64, 4);
  }
  mbar_wait(&bar, 0);
  for (int i = threadIdx.x; i < 8 * 64; i += blockDim.x) out[i] = box[swizzle_atoms<8, 64, 8, 128>(i / 64, i % 64)];
})")};

/// The relayout copies of 16-bit elements, one kernel each; block b copies share b.
const Primitive kRelayout{"k_transpose", with_library("relayout", R"(
extern "C" __global__ void k_transpose(const unsigned short* s, unsigned short* d, long long moved, long long inner) {
  relayout_transpose(s, d, blockIdx.x, moved, inner);
}
extern "C" __global__ void k_transpose_v(const unsigned short* s, unsigned short* d, long long moved, long long inner) {
  relayout_transpose_v<unsigned short, uint4, 8>(s, d, blockIdx.x, moved, inner);
}
extern "C" __global__ void k_rows(const unsigned short* s, unsigned short* d, long long moved, long long inner) {
  relayout_rows<unsigned short, 9, 64, 256>(s, d, blockIdx.x, moved);
}
extern "C" __global__ void k_gather(const unsigned short* s, unsigned short* d, long long moved, long long inner) {
  relayout_gather<unsigned short, 256, 64>(s, d, blockIdx.x, moved, inner, 3 * moved * inner);
}
extern "C" __global__ void k_pad_rows(const unsigned short* s, unsigned short* d, long long moved, long long inner) {
  relayout_pad_rows<unsigned short, 8, 2>(s, d, blockIdx.x, moved, inner, 2 * inner);
})")};

// Every epilogue function at n points of [-8, 8]: out[f * n + i].
const Primitive kEpilogue{"k_epilogue", with_library("epilogue", R"(
extern "C" __global__ void k_epilogue(float* out, int n) {
  const int i = threadIdx.x;
  if (i >= n) return;
  const float x = -8.0f + 16.0f * i / (n - 1);
  const float y[] = {epi_relu(x), epi_leaky_relu(x, 0.125f), epi_clamp(x, -1.5f, 2.5f), epi_sigmoid(x), epi_tanh(x),
                     epi_silu(x), epi_gelu(x), epi_gelu_tanh(x)};
  for (int f = 0; f < 8; ++f) out[f * n + i] = y[f];
})")};

const std::vector<const Primitive*>& primitives() {
  static const std::vector<const Primitive*> all = {&kSmem,    &kCpAsync, &kLdmatrix, &kMbarrier, &kCluster,
                                                    &kShift,   &kSwizzle, &kWgmma,    &kTma,      &kRelayout,
                                                    &kEpilogue, &kTileVector};
  return all;
}

// --- Without a GPU --------------------------------------------------------------------------

TEST(DeviceLibrary, EveryHeaderCompilesAloneForSm80AndSm90) {
  for (int cc : {80, 90}) {
    NvrtcCompiler compiler(cc);
    for (const DeviceHeader& h : device_headers()) {
      const CompileResult r = compiler.compile("#include \"" + std::string(h.file) + "\"\n", "alone");
      EXPECT_TRUE(r.ok) << h.file << " for sm_" << cc << ":\n" << r.log;
    }
  }
}

TEST(DeviceLibrary, EveryPrimitiveTestKernelCompiles) {
  NvrtcCompiler compiler(90);
  for (const Primitive* p : primitives()) {
    const CompileResult r = compiler.compile(p->source, p->name);
    EXPECT_TRUE(r.ok) << p->name << ":\n" << r.log;
    const CompileResult alone = compiler.compile(self_contained(p->source), p->name);  // as --emit-cuda writes it
    EXPECT_TRUE(alone.ok) << p->name << " self-contained:\n" << alone.log;
  }
}

TEST(DeviceLibrary, SelfContainedSourceHoldsEachHeaderOnceAndNoInclude) {
  const std::string s = self_contained(kTma.source);
  EXPECT_EQ(s.find("#include \"tmap/device/"), std::string::npos) << s;
  for (const char* guard : {"#define TMAP_DEVICE_SMEM_CUH", "#define TMAP_DEVICE_TMA_CUH", "#define TMAP_DEVICE_SWIZZLE_CUH"}) {
    const std::size_t at = s.find(guard);
    ASSERT_NE(at, std::string::npos) << guard;
    EXPECT_EQ(s.find(guard, at + 1), std::string::npos) << guard << " twice";
  }
  EXPECT_NE(s.find("extern \"C\" __global__ void k_tma"), std::string::npos);
}

TEST(DeviceLibrary, IncludesAreGatheredAtTheTopOnce) {
  std::string code =
      "// a kernel\n#include <cuda_fp16.h>\n\nnamespace {\n#include \"tmap/device/cp_async.cuh\"\nint x;\n"
      "#include \"tmap/device/swizzle.cuh\"\n#include \"tmap/device/cp_async.cuh\"\n}\n";
  gather_device_includes(code);
  EXPECT_EQ(code,
            "// a kernel\n#include <cuda_fp16.h>\n\n#include \"tmap/device/cp_async.cuh\"\n"
            "#include \"tmap/device/swizzle.cuh\"\nusing namespace tmap::device;\n\nnamespace {\nint x;\n}\n");
}

TEST(DeviceLibrary, CompileCacheKeysCoverTheLibrary) {
  // A kernel that includes the library must not be served a cubin built from other header text.
  EXPECT_NE(device_library_fingerprint().find("device library"), std::string::npos);
  std::set<std::string_view> files;
  for (const DeviceHeader& h : device_headers()) {
    EXPECT_TRUE(files.insert(h.file).second) << h.file;
    EXPECT_NE(h.text.find("namespace device"), std::string_view::npos) << h.file;
  }
  EXPECT_EQ(files.size(), 13u);
}

// Stream-K's runs, walked on the host with the kernels' own arithmetic, in both forms (every
// tile's steps cut into runs, or only the last waves' with whole tiles before them): every step of
// every tile is in exactly one block's piece; a piece without its tile's first step is its run's
// first, the piece with it is its run's last (or holds the whole tile); the blocks that the
// finisher waits for are later ones whose first pieces are the rest of the tile, each added once,
// so each tile's sum has all its steps, and no block waits on one that could be waiting on it.
// The whole tiles of the second form are every blocks-th from the runs' end, from block b's b.
TEST(DeviceLibrary, StreamKRunsCoverEveryStepOnceAndFinishersAddEachPieceOnce) {
  struct Shape {
    int tiles, steps;
  };
  for (const bool hybrid : {false, true})
    for (const Shape& s : {Shape{4, 9}, Shape{196, 9}, Shape{224, 64}, Shape{1, 5}, Shape{7, 1}, Shape{2048, 128},
                           Shape{131, 3}, Shape{133, 1}, Shape{3, 200}, Shape{264, 4}, Shape{300, 7}, Shape{395, 2}}) {
      const long long units = static_cast<long long>(s.tiles) * s.steps;
      const int blocks = static_cast<int>(std::min<long long>(units, 132));  // the launch: at most one a step
      SCOPED_TRACE(std::to_string(s.tiles) + " tiles of " + std::to_string(s.steps) + " steps, " +
                   std::to_string(blocks) + " blocks" + (hybrid ? ", whole tiles first" : ""));
      std::vector<int> covered(static_cast<std::size_t>(units), 0), owners(s.tiles, 0);
      std::vector<device::StreamPiece> partial(blocks, {-1, 0, 0});  // a block's piece for a finisher
      std::vector<std::pair<int, device::StreamPiece>> finishers;     // pieces with a tile's first step
      long long cut_units = 0;
      int whole = 0;
      for (int b = 0; b < blocks; ++b) {
        const device::StreamWalk walk = device::stream_walk(s.tiles, s.steps, blocks, b, hybrid);
        cut_units = walk.units;
        ASSERT_LT(walk.first, walk.run_end) << "block " << b << " has no run";
        for (long long u = walk.first; u < walk.end;) {
          const device::StreamPiece piece = device::stream_piece(walk, u);
          ASSERT_LT(piece.first, piece.last);
          for (int step = piece.first; step < piece.last; ++step)
            ++covered[static_cast<std::size_t>(piece.tile) * s.steps + step];
          const long long after = static_cast<long long>(piece.tile) * s.steps + piece.last;
          if (after > walk.units) {  // a whole tile past the runs
            EXPECT_EQ(piece.last - piece.first, s.steps);
            EXPECT_EQ((piece.tile - walk.units / s.steps) % blocks, b) << "tile " << piece.tile;
            ++whole;
          }
          const bool leads = u == walk.first;
          u = device::stream_next(walk, after);
          if (piece.first != 0) {
            EXPECT_TRUE(leads) << "block " << b << ": a piece without its tile's first step leads its run";
            partial[b] = piece;
          } else {
            EXPECT_TRUE(piece.last == s.steps || after == walk.run_end)
                << "block " << b << ": a cut tile's first piece ends its run";
            ++owners[piece.tile];
            finishers.push_back({b, piece});
          }
        }
      }
      const int waves = s.tiles / blocks;
      EXPECT_EQ(whole, hybrid && waves >= 2 ? (waves - 1) * blocks : 0);
      EXPECT_EQ(cut_units, units - static_cast<long long>(whole) * s.steps);
      EXPECT_TRUE(std::all_of(covered.begin(), covered.end(), [](int n) { return n == 1; }));
      EXPECT_TRUE(std::all_of(owners.begin(), owners.end(), [](int n) { return n == 1; }));
      std::vector<int> added(blocks, 0);
      for (const auto& [b, piece] : finishers) {
        int steps = piece.last;
        for (int p = b + 1; piece.last < s.steps && device::stream_peer(cut_units, blocks, p, piece.tile, s.steps);
             ++p) {
          ASSERT_EQ(partial[p].tile, piece.tile) << "block " << b << " waits on block " << p;
          steps += partial[p].last - partial[p].first;
          ++added[p];
        }
        EXPECT_EQ(steps, s.steps) << "tile " << piece.tile;
      }
      for (int b = 0; b < blocks; ++b) EXPECT_EQ(added[b], partial[b].tile >= 0 ? 1 : 0) << "block " << b;
    }
}

// --- On the GPU -------------------------------------------------------------------------------

/// A test kernel compiled for the device and loaded; buffers freed at the end.
class DeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no GPU: " << query_runtime().status;
  }
  void TearDown() override {
    for (void* p : buffers_) cudaFree(p);
    for (cudaLibrary_t l : libraries_) cudaLibraryUnload(l);
  }
  cudaKernel_t load(const Primitive& p, const std::string& name = "") {
    NvrtcCompiler compiler(query_runtime().devices.front().compute_capability);
    const CompileResult r = compiler.compile(p.source, p.name);
    EXPECT_TRUE(r.ok) << r.log;
    cudaLibrary_t lib = nullptr;
    cudaKernel_t k = nullptr;
    EXPECT_EQ(cudaLibraryLoadData(&lib, r.cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0), cudaSuccess);
    libraries_.push_back(lib);
    EXPECT_EQ(cudaLibraryGetKernel(&k, lib, (name.empty() ? p.name : name).c_str()), cudaSuccess);
    return k;
  }
  template <typename T>
  T* upload(const std::vector<T>& host) {
    void* d = nullptr;
    EXPECT_EQ(cudaMalloc(&d, host.size() * sizeof(T)), cudaSuccess);
    buffers_.push_back(d);
    EXPECT_EQ(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    return static_cast<T*>(d);
  }
  /// `count` elements of T, poisoned (every byte 0xA5) before the kernel runs.
  template <typename T>
  T* poisoned(std::size_t count) {
    return upload(std::vector<T>(count, poison<T>()));
  }
  template <typename T>
  static T poison() {
    T v;
    std::memset(&v, 0xA5, sizeof v);
    return v;
  }
  template <typename T>
  std::vector<T> download(const T* d, std::size_t count) {
    std::vector<T> host(count);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(host.data(), d, count * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }
  void launch(cudaKernel_t k, dim3 grid, dim3 block, std::vector<void*> args) {
    ASSERT_EQ(cudaLaunchKernel(reinterpret_cast<const void*>(k), grid, block, args.data(), 0, nullptr), cudaSuccess);
  }
  static int cc() { return query_runtime().devices.front().compute_capability; }

 private:
  std::vector<void*> buffers_;
  std::vector<cudaLibrary_t> libraries_;
};

TEST_F(DeviceTest, SmemAddressesAreByteOffsetsInSharedMemory) {
  cudaKernel_t k = load(kSmem);
  unsigned* out = poisoned<unsigned>(32);
  launch(k, 1, 32, {&out});
  const std::vector<unsigned> got = download(out, 32);
  for (unsigned i = 0; i < 32; ++i) EXPECT_EQ(got[i], 4 * i);
}

TEST_F(DeviceTest, EpilogueTileVectorsReadWholeWordsWhereAligned) {
  cudaKernel_t k = load(kTileVector);
  unsigned short* out = poisoned<unsigned short>(4 * 512);
  int* words = poisoned<int>(4);
  launch(k, 4, 64, {&out, &words});
  const std::vector<unsigned short> got = download(out, 4 * 512);
  const std::vector<int> word = download(words, 4);
  const struct { int n, ld, word; } cases[] = {{8, 72, 16}, {4, 68, 8}, {2, 66, 4}, {2, 65, 0}};
  for (int b = 0; b < 4; ++b) {
    const auto& c = cases[b];
    EXPECT_EQ(word[b], c.word) << "vectors of " << c.n << " in rows of " << c.ld;
    for (int e = 0; e < 4 * (c.ld / c.n); ++e) {
      const int r = e / (c.ld / c.n), col = e % (c.ld / c.n) * c.n;
      for (int t = 0; t < c.n; ++t)
        ASSERT_EQ(got[512 * b + e * c.n + t], r * c.ld + col + t) << "case " << b << ", vector " << e << ", element " << t;
    }
  }
}

TEST_F(DeviceTest, CpAsyncCopiesOrZeroFills) {
  if (cc() < 80) GTEST_SKIP() << "cp.async needs sm_80";
  cudaKernel_t k = load(kCpAsync);
  std::vector<unsigned> in(224);
  std::mt19937 rng(7);
  for (unsigned& v : in) v = rng();
  const unsigned* d_in = upload(in);
  unsigned* out = poisoned<unsigned>(224);
  launch(k, 1, 32, {&out, &d_in});
  const std::vector<unsigned> got = download(out, 224);
  for (int i = 0; i < 224; ++i) {
    const int owner = i < 128 ? i / 4 : i < 192 ? (i - 128) / 2 : i - 192;
    EXPECT_EQ(got[i], owner % 3 != 0 ? in[i] : 0u) << "word " << i;
  }
}

TEST_F(DeviceTest, LdmatrixFragmentsAndTf32Rounding) {
  if (cc() < 80) GTEST_SKIP() << "cvt.rna.tf32 needs sm_80";
  cudaKernel_t k = load(kLdmatrix);
  std::vector<unsigned> in(32);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> value(-1000.f, 1000.f);
  for (int i = 0; i < 32; ++i) {
    const float f = value(rng);
    std::memcpy(&in[i], &f, 4);
    if (i % 4 == 0) in[i] = (in[i] & ~0x1FFFu) | 0x1000u;  // a tie: rounds away from zero
  }
  const unsigned* d_in = upload(in);
  unsigned* out = poisoned<unsigned>(288);
  launch(k, 1, 32, {&out, &d_in});
  const std::vector<unsigned> got = download(out, 288);
  auto at = [](int m, int r, int c) { return static_cast<unsigned>(64 * m + 8 * r + c); };
  for (int m = 0; m < 4; ++m)
    for (int l = 0; l < 32; ++l) {
      const int row = l / 4, col = 2 * (l % 4);
      EXPECT_EQ(got[m * 32 + l], at(m, row, col) | at(m, row, col + 1) << 16) << "matrix " << m << " lane " << l;
      EXPECT_EQ(got[128 + m * 32 + l], at(m, col, row) | at(m, col + 1, row) << 16) << "trans " << m << " lane " << l;
    }
  for (int i = 0; i < 32; ++i) EXPECT_EQ(got[256 + i], (in[i] + 0x1000u) & ~0x1FFFu) << "tf32 of word " << i;
}

TEST_F(DeviceTest, MbarrierPhasesCompleteOnArrivals) {
  if (cc() < 90) GTEST_SKIP() << "mbarrier try_wait and expect_tx need sm_90";
  cudaKernel_t k = load(kMbarrier);
  unsigned* out = poisoned<unsigned>(5);
  launch(k, 1, 32, {&out});
  EXPECT_EQ(download(out, 5), (std::vector<unsigned>{0, 1, 0, 1, 1}));
}

TEST_F(DeviceTest, ClusterBlocksReadAndArriveInEachOther) {
  if (cc() < 90) GTEST_SKIP() << "thread block clusters need sm_90";
  cudaKernel_t k = load(kCluster);
  unsigned* out = poisoned<unsigned>(16);
  launch(k, 2, 32, {&out});
  const std::vector<unsigned> got = download(out, 16);
  for (unsigned r = 0; r < 2; ++r) {
    const unsigned other = 100 * (r ^ 1);
    EXPECT_EQ(got[8 * r], r);
    EXPECT_EQ(got[8 * r + 1], other + 1);
    for (unsigned i = 0; i < 4; ++i) EXPECT_EQ(got[8 * r + 2 + i], other + i);
    EXPECT_EQ(got[8 * r + 6], 1u);
  }
}

TEST_F(DeviceTest, ShiftedAndStridedStoresTakeTheBytesAtTheShift) {
  cudaKernel_t k = load(kShift);
  std::vector<unsigned char> bytes(32);
  for (int i = 0; i < 32; ++i) bytes[i] = static_cast<unsigned char>(3 * i + 1);
  std::vector<uint4> in(2);
  std::memcpy(in.data(), bytes.data(), 32);
  const uint4* d_in = upload(in);
  uint4* out = poisoned<uint4>(128);
  launch(k, 1, 32, {&out, &d_in});
  const std::vector<uint4> got_v = download(out, 128);
  std::vector<unsigned char> got(128 * 16);
  std::memcpy(got.data(), got_v.data(), got.size());
  for (int t = 0; t < 32; ++t) {
    const int s = t % 16;
    for (int b = 0; b < 16; ++b) EXPECT_EQ(got[16 * t + b], bytes[s + b]) << "shifted, thread " << t << " byte " << b;
    for (int e : {1, 2, 4}) {  // element j of the strided store: element 2 j of the 16 bytes
      const int base = 16 * ((e == 1 ? 32 : e == 2 ? 64 : 96) + t);
      for (int b = 0; b < 8; ++b)
        EXPECT_EQ(got[base + b], bytes[s + (b / e) * 2 * e + b % e]) << e << "-byte strided, thread " << t << " byte " << b;
    }
  }
}

/// A swizzle maps a tile onto itself, keeps 16-byte chunks whole and in order, and puts the
/// first chunk of `rows_apart` consecutive rows (lines) in distinct chunk slots of 128 bytes.
void expect_swizzle(const std::vector<int>& at, int cols, int elem_bytes, int spread, const std::string& what) {
  const int chunk = 16 / elem_bytes;
  std::set<int> image(at.begin(), at.end());
  EXPECT_EQ(image.size(), at.size()) << what << " is not a permutation";
  EXPECT_EQ(*image.begin(), 0) << what;
  EXPECT_EQ(*image.rbegin(), static_cast<int>(at.size()) - 1) << what;
  for (std::size_t i = 0; i < at.size(); ++i)
    if (i % chunk) EXPECT_EQ(at[i], at[i - 1] + 1) << what << " splits a chunk at " << i;
  std::set<int> slots;
  for (int r = 0; r < spread; ++r) slots.insert(at[r * cols] * elem_bytes / 16 % 8);
  EXPECT_EQ(static_cast<int>(slots.size()), spread) << what << ": rows share a bank group";
}

TEST_F(DeviceTest, SwizzlesArePermutationsThatSpreadRowsOverBanks) {
  cudaKernel_t k = load(kSwizzle);
  int* out = poisoned<int>(5 * 1024);
  launch(k, 1, 256, {&out});
  const std::vector<int> got = download(out, 5 * 1024);
  auto part = [&](int i) { return std::vector<int>(got.begin() + 1024 * i, got.begin() + 1024 * (i + 1)); };
  expect_swizzle(part(0), 64, 2, 8, "swizzle_rows<64, 8>");
  expect_swizzle(part(1), 16, 2, 4, "swizzle_packed<16, 2>");  // 32-byte rows: 4 share a line
  // wgmma's layouts: within one 1024-byte atom (8 lines), line r's chunk 0 moves by its XOR.
  expect_swizzle(part(2), 64, 2, 8, "swizzle_atoms 128-byte");
  const std::vector<int> s64 = part(3), s32 = part(4);
  for (int r = 0; r < 16; ++r) {
    EXPECT_EQ(s64[r * 64] % 32 / 8, (r >> 1) & 3) << "64-byte swizzle, row " << r;
    EXPECT_EQ(s32[r * 64] % 16 / 8, (r >> 2) & 1) << "32-byte swizzle, row " << r;
  }
  expect_swizzle(s64, 64, 2, 1, "swizzle_atoms 64-byte");
  expect_swizzle(s32, 64, 2, 1, "swizzle_atoms 32-byte");
}

TEST_F(DeviceTest, WgmmaDescriptorFieldsAndFencesRun) {
  if (cc() != 90) GTEST_SKIP() << "wgmma is sm_90a's";
  cudaKernel_t k = load(kWgmma);
  unsigned long long* out = poisoned<unsigned long long>(3);
  launch(k, 1, 128, {&out});
  const std::vector<unsigned long long> got = download(out, 3);
  const unsigned long long addr = got[1];
  EXPECT_EQ(got[0] & 0x3FFF, (addr & 0x3FFFF) >> 4) << "start address";
  EXPECT_EQ(got[0] >> 16 & 0x3FFF, 1u) << "leading byte offset, 16-byte units";
  EXPECT_EQ(got[0] >> 32 & 0x3FFF, 64u) << "stride byte offset, 16-byte units";
  EXPECT_EQ(got[0] >> 62, 1u) << "128-byte swizzle";
  EXPECT_EQ(got[2], 0u) << "thread 0's operands through the fences";
}

TEST_F(DeviceTest, TmaLoadsASwizzledBoxThatSwizzleAtomsReads) {
  if (cc() != 90) GTEST_SKIP() << "TMA is sm_90's";
  cudaKernel_t k = load(kTma);
  std::vector<unsigned short> src(128 * 32);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned short>(i * 7 + 3);
  unsigned short* d_src = upload(src);
  unsigned short* out = poisoned<unsigned short>(8 * 64);
  tmap_launch_plan plan{};
  plan.num_steps = 1;
  tmap_launch_step& step = plan.steps[0];
  step.grid[0] = step.grid[1] = step.grid[2] = 1;
  step.threads = 128;
  step.num_args = 2;
  step.args[0] = {1, 0};
  step.args[1] = {TMAP_SLOT_MAP, 0};
  plan.num_maps = 1;
  tmap_tensor_map_spec& m = plan.maps[0];
  m.source = {0, 0};
  m.dtype = 1;  // CU_TENSOR_MAP_DATA_TYPE_UINT16
  m.rank = 2;
  m.dims[0] = 128, m.dims[1] = 32;
  m.strides[0] = 128 * 2;
  m.box[0] = 64, m.box[1] = 8;
  m.swizzle_bytes = 128;
  m.traversal[0] = m.traversal[1] = 1;
  void* slots[2] = {d_src, out};
  const void* kernels[1] = {reinterpret_cast<const void*>(k)};
  const cudaError_t e = tmap_plan_launch(&plan, kernels, slots, 0, nullptr);
  if (e == cudaErrorNotSupported) GTEST_SKIP() << "the driver cannot encode tensor maps";
  ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
  const std::vector<unsigned short> got = download(out, 8 * 64);
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 64; ++c) EXPECT_EQ(got[r * 64 + c], src[(4 + r) * 128 + 64 + c]) << "(" << r << ", " << c << ")";
}

TEST_F(DeviceTest, RelayoutCopiesPutTheMovedDimensionInnermost) {
  struct Case {
    const char* kernel;
    long long outer, moved, inner, padded;  // padded: [moved] in the copy
    unsigned blocks, threads;
  };
  const Case cases[] = {
      {"k_transpose", 2, 45, 37, 45, 2 * 2 * 2, 256},  // 32 x 32 tiles: 2 x 2 per outer
      {"k_transpose_v", 2, 128, 256, 128, 2 * 2 * 1, 256},
      {"k_rows", 3, 72, 9, 72, 3 * 2, 256},  // chunks of 64 rows of moved
      {"k_gather", 3, 5, 9, 5, (3 * 5 * 9 + 63) / 64, 256},
      {"k_pad_rows", 2, 3, 50, 8, 1, 256},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.kernel);
    cudaKernel_t k = load(kRelayout, c.kernel);
    std::vector<unsigned short> src(c.outer * c.moved * c.inner);
    for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned short>(i * 5 + 1);
    const unsigned short* d_src = upload(src);
    unsigned short* dst = poisoned<unsigned short>(c.outer * c.inner * c.padded);
    long long moved = c.moved, inner = c.inner;
    launch(k, c.blocks, c.threads, {&d_src, &dst, &moved, &inner});
    const std::vector<unsigned short> got = download(dst, c.outer * c.inner * c.padded);
    int wrong = 0;
    for (long long o = 0; o < c.outer; ++o)
      for (long long i = 0; i < c.inner; ++i)
        for (long long m = 0; m < c.padded; ++m) {
          const unsigned short want = m < c.moved ? src[(o * c.moved + m) * c.inner + i] : 0;
          if (got[(o * c.inner + i) * c.padded + m] != want && ++wrong <= 3)
            ADD_FAILURE() << "[" << o << "][" << i << "][" << m << "]: " << got[(o * c.inner + i) * c.padded + m]
                          << ", expected " << want;
        }
    EXPECT_EQ(wrong, 0);
  }
}

TEST_F(DeviceTest, EpilogueFunctionsFollowTheirDefinitions) {
  const int n = 257;
  cudaKernel_t k = load(kEpilogue, "k_epilogue");
  float* out = poisoned<float>(8 * n);
  int count = n;
  launch(k, 1, 288, {&out, &count});
  const std::vector<float> got = download(out, 8 * n);
  const double pi = 3.14159265358979323846;
  for (int i = 0; i < n; ++i) {
    const double x = -8.0 + 16.0 * static_cast<float>(i) / (n - 1);
    const double sig = 1.0 / (1.0 + std::exp(-x));
    const double want[] = {std::max(x, 0.0), x >= 0 ? x : x * 0.125, std::min(std::max(x, -1.5), 2.5), sig, std::tanh(x),
                           x * sig, 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))),
                           0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (x + 0.044715 * x * x * x)))};
    for (int f = 0; f < 8; ++f)
      EXPECT_NEAR(got[f * n + i], want[f], 1e-5 * (1.0 + std::fabs(want[f]))) << "function " << f << " at " << x;
  }
}

}  // namespace
}  // namespace tmap
