// Hardware abstractions as data: one JSON file per intrinsic DAG in hw_abstractions/.
//
// A DAG has one compute intrinsic, written as a statement of the compute language
// ("D[i, j] += A[i, k] * B[k, j]"), and the memory intrinsics around it (fill of the
// accumulator, loads of the input operands into fragments, store of the result), joined by
// edges. The compute's axes are classified like a software contraction: i indexes A and D,
// j indexes B and D, k indexes A and B and is reduced. Shapes are given as [m, n, k], the
// extents along i, j, k. Layout keys name the majorness of A, B and D in that order: 'n' is
// the operand as written, row-major; 't' is its transpose, column-major (AMOS's naming).
//
// Adding a shape or dtype is a JSON edit; a new family (mma.sync, wgmma, cpu) adds an emitter
// in the code generator and reuses this schema.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tmap/ir/dtype.h"
#include "tmap/support/diagnostic.h"

namespace tmap {

/// The three axes of a matrix multiply-accumulate intrinsic.
enum class Axis { kI = 0, kJ = 1, kK = 2 };
inline constexpr std::array<Axis, 3> kAxes = {Axis::kI, Axis::kJ, Axis::kK};
const char* axis_name(Axis a);  ///< "i", "j", "k"

struct IntrinsicShape {
  std::array<std::int64_t, 3> extent{};  ///< Along i, j, k: (m, n, k).
  std::int64_t operator[](Axis a) const { return extent[static_cast<int>(a)]; }
  std::string str() const;  ///< "16x16x16"
  bool operator==(const IntrinsicShape&) const = default;
};

enum class MemoryKind { kFill, kLoad, kStore };
const char* memory_kind_name(MemoryKind k);

struct MemoryIntrinsic {
  std::string name;       ///< Node name in the DAG.
  MemoryKind kind = MemoryKind::kLoad;
  std::string operand;    ///< "A", "B" or "D" (the compute expression's tensor names).
  std::string intrinsic;  ///< The call, e.g. "nvcuda::wmma::load_matrix_sync".
  std::string from, to;   ///< Memory scopes: "global", "shared", "fragment" (fills have no source).
};

struct HwAbstraction {
  std::string name;         ///< e.g. "wmma_fp16_fp32"
  std::string family;       ///< The emitter family that generates its kernels (tmap/codegen/emitter.h).
  std::string description;
  std::string scope;        ///< Execution scope of one intrinsic call: "warp", "warpgroup", "thread".
  int min_compute_capability = 0;  ///< e.g. 70 for sm_70.
  std::string source_file;

  // The compute intrinsic.
  std::string compute_name;      ///< DAG node name, e.g. "mma".
  std::string compute_intrinsic; ///< e.g. "nvcuda::wmma::mma_sync".
  std::string expression;        ///< As written in the file.
  std::string a, b, d;           ///< Operand tensor names in the expression ("A", "B", "D").
  std::array<std::string, 3> axis_names;  ///< The expression's iterator for i, j, k.
  DType a_dtype = DType::kFloat16, b_dtype = DType::kFloat16, d_dtype = DType::kFloat32;
  std::vector<IntrinsicShape> shapes;
  std::vector<std::string> layouts;  ///< "nnn", "ntn", ...

  std::vector<MemoryIntrinsic> memory;
  std::vector<std::pair<std::string, std::string>> edges;  ///< (from, to) node names.
};

/// The compute instruction the kernels of `family` issue for operands of these dtypes, as an
/// abstraction file must name it in "compute.intrinsic" (wgmma's "nN" stands for the N each
/// schedule picks); empty where the family has no instruction for them. The emitters write
/// this text, never the file's: a file chooses an instruction, it cannot write one.
std::string family_intrinsic(const std::string& family, DType a, DType b, DType d);
std::string family_intrinsic(const HwAbstraction& hw);
/// The shapes (m, n, k) family `family`'s emitter issues for operands of dtype `a`: wgmma m64 and
/// mma.sync m16n8 with k of 32 bytes (wgmma's n is the schedule's, listed as 8), WMMA's fragment
/// shapes for the dtype, SIMT's 1 x 1 x (elements packed in one instruction). Empty for none.
std::vector<IntrinsicShape> family_shapes(const std::string& family, DType a);
/// Whether family_intrinsic() knows `family`'s instructions.
bool known_intrinsic_family(const std::string& family);

/// Parses and validates one abstraction; errors name the file, line and column.
HwAbstraction parse_hw_abstraction(const SourceText& source);
HwAbstraction load_hw_file(const std::string& path);
/// Every *.json file of a directory, in file-name order.
std::vector<HwAbstraction> load_hw_directory(const std::string& dir);

/// The directory of the shipped abstractions: $TMAP_HW_DIR, else the installed share/tmap
/// directory, else the source tree's hw_abstractions/ (when run from a build tree).
std::string builtin_hw_directory();

/// The shipped abstractions plus those of `extra_dirs`; two with one name are an error that
/// names both files.
std::vector<HwAbstraction> load_hw_abstractions(const std::vector<std::string>& extra_dirs = {});

/// Finds one by name, or a UserError listing the names.
const HwAbstraction& find_hw(const std::vector<HwAbstraction>& all, const std::string& name);

/// The abstraction in the schema of its file (what `tmap hw show` prints): it loads back unchanged.
nlohmann::ordered_json to_json(const HwAbstraction& hw);

}  // namespace tmap
