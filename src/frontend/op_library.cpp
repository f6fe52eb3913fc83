#include "tmap/frontend/op_library.h"

#include <utility>

namespace tmap {
namespace {

// Output extent of a convolution along one dimension, written once for every conv op.
#define TMAP_CONV_OUT(IN, KER) "(" IN " + 2*pad - dil*(" KER " - 1) - 1)/stride + 1"
#define TMAP_CONV_REQUIRES "\"stride >= 1\", \"dil >= 1\", \"pad >= 0\""
#define TMAP_GROUP_REQUIRES "\"groups >= 1\", \"C % groups == 0\", \"K % groups == 0\""

/// Each built-in op: its name and its definition in the compute JSON language.
struct OpSource {
  const char* name;
  const char* json;
};

const OpSource kOps[] = {
  {"gemm", R"op({
  "name": "gemm",
  "description": "C = A B with A stored [M, K] and B stored [K, N] (row-major, no transposition)",
  "compute": "C[m, n] += A[m, k] * B[k, n]",
  "params": {"M": 1024, "N": 1024, "K": 1024},
  "tensors": {
    "A": {"shape": ["M", "K"], "dtype": "float16"},
    "B": {"shape": ["K", "N"], "dtype": "float16"},
    "C": {"shape": ["M", "N"], "dtype": "float32"}
  }
})op"},
  {"gemm_nt", R"op({
  "name": "gemm_nt",
  "description": "C = A B^T with A stored [M, K] and B stored [N, K]",
  "compute": "C[m, n] += A[m, k] * B[n, k]",
  "params": {"M": 1024, "N": 1024, "K": 1024},
  "tensors": {
    "A": {"shape": ["M", "K"], "dtype": "float16"},
    "B": {"shape": ["N", "K"], "dtype": "float16"},
    "C": {"shape": ["M", "N"], "dtype": "float32"}
  }
})op"},
  {"gemm_tn", R"op({
  "name": "gemm_tn",
  "description": "C = A^T B with A stored [K, M] and B stored [K, N]",
  "compute": "C[m, n] += A[k, m] * B[k, n]",
  "params": {"M": 1024, "N": 1024, "K": 1024},
  "tensors": {
    "A": {"shape": ["K", "M"], "dtype": "float16"},
    "B": {"shape": ["K", "N"], "dtype": "float16"},
    "C": {"shape": ["M", "N"], "dtype": "float32"}
  }
})op"},
  {"gemm_tt", R"op({
  "name": "gemm_tt",
  "description": "C = A^T B^T with A stored [K, M] and B stored [N, K]",
  "compute": "C[m, n] += A[k, m] * B[n, k]",
  "params": {"M": 1024, "N": 1024, "K": 1024},
  "tensors": {
    "A": {"shape": ["K", "M"], "dtype": "float16"},
    "B": {"shape": ["N", "K"], "dtype": "float16"},
    "C": {"shape": ["M", "N"], "dtype": "float32"}
  }
})op"},
  {"batched_gemm", R"op({
  "name": "batched_gemm",
  "description": "BATCH independent products C[b] = A[b] B[b]",
  "compute": "C[b, m, n] += A[b, m, k] * B[b, k, n]",
  "params": {"BATCH": 16, "M": 512, "N": 512, "K": 64},
  "tensors": {
    "A": {"shape": ["BATCH", "M", "K"], "dtype": "float16"},
    "B": {"shape": ["BATCH", "K", "N"], "dtype": "float16"},
    "C": {"shape": ["BATCH", "M", "N"], "dtype": "float32"}
  }
})op"},
  {"gemv", R"op({
  "name": "gemv",
  "description": "y = A x with A stored [M, K]",
  "compute": "y[m] += A[m, k] * x[k]",
  "params": {"M": 4096, "K": 4096},
  "tensors": {
    "A": {"shape": ["M", "K"], "dtype": "float16"},
    "x": {"shape": ["K"], "dtype": "float16"},
    "y": {"shape": ["M"], "dtype": "float32"}
  }
})op"},
  {"conv1d", R"op({
  "name": "conv1d",
  "description": "1-D convolution, input [N, C, W], weights [K, C, S], output [N, K, Q]",
  "compute": "Out[n, k, q] += I[n, c, q*stride + s*dil - pad] * Wt[k, c, s]",
  "params": {"N": 1, "C": 64, "W": 1024, "K": 64, "S": 3, "stride": 1, "pad": 1, "dil": 1},
  "tensors": {
    "I": {"shape": ["N", "C", "W"], "dtype": "float16"},
    "Wt": {"shape": ["K", "C", "S"], "dtype": "float16"},
    "Out": {"shape": ["N", "K", ")op" TMAP_CONV_OUT("W", "S") R"op("], "dtype": "float32"}
  },
  "requires": [)op" TMAP_CONV_REQUIRES R"op(]
})op"},
  {"conv2d", R"op({
  "name": "conv2d",
  "description": "2-D convolution in NCHW/KCRS: input [N, C, H, W], weights [K, C/groups, R, S], output [N, K, P, Q]",
  "compute": "Out[n, g*(K/groups) + k, p, q] += I[n, g*(C/groups) + c, p*stride + r*dil - pad, q*stride + s*dil - pad] * Wt[g*(K/groups) + k, c, r, s]",
  "params": {"N": 1, "C": 128, "H": 28, "W": 28, "K": 128, "R": 3, "S": 3,
             "stride": 1, "pad": 1, "dil": 1, "groups": 1},
  "tensors": {
    "I": {"shape": ["N", "C", "H", "W"], "dtype": "float16"},
    "Wt": {"shape": ["K", "C/groups", "R", "S"], "dtype": "float16"},
    "Out": {"shape": ["N", "K", ")op" TMAP_CONV_OUT("H", "R") R"op(", ")op" TMAP_CONV_OUT("W", "S") R"op("], "dtype": "float32"}
  },
  "iterators": {"g": "groups", "k": "K/groups"},
  "requires": [)op" TMAP_GROUP_REQUIRES ", " TMAP_CONV_REQUIRES R"op(]
})op"},
  {"conv2d_nhwc", R"op({
  "name": "conv2d_nhwc",
  "description": "2-D convolution in NHWC/KRSC: input [N, H, W, C], weights [K, R, S, C/groups], output [N, P, Q, K]",
  "compute": "Out[n, p, q, g*(K/groups) + k] += I[n, p*stride + r*dil - pad, q*stride + s*dil - pad, g*(C/groups) + c] * Wt[g*(K/groups) + k, r, s, c]",
  "params": {"N": 1, "C": 128, "H": 28, "W": 28, "K": 128, "R": 3, "S": 3,
             "stride": 1, "pad": 1, "dil": 1, "groups": 1},
  "tensors": {
    "I": {"shape": ["N", "H", "W", "C"], "dtype": "float16"},
    "Wt": {"shape": ["K", "R", "S", "C/groups"], "dtype": "float16"},
    "Out": {"shape": ["N", ")op" TMAP_CONV_OUT("H", "R") R"op(", ")op" TMAP_CONV_OUT("W", "S") R"op(", "K"], "dtype": "float32"}
  },
  "iterators": {"g": "groups", "k": "K/groups"},
  "requires": [)op" TMAP_GROUP_REQUIRES ", " TMAP_CONV_REQUIRES R"op(]
})op"},
  {"depthwise_conv2d", R"op({
  "name": "depthwise_conv2d",
  "description": "Depthwise 2-D convolution in NCHW: input [N, C, H, W], weights [C, R, S], output [N, C, P, Q]",
  "compute": "Out[n, c, p, q] += I[n, c, p*stride + r*dil - pad, q*stride + s*dil - pad] * Wt[c, r, s]",
  "params": {"N": 1, "C": 256, "H": 28, "W": 28, "R": 3, "S": 3, "stride": 1, "pad": 1, "dil": 1},
  "tensors": {
    "I": {"shape": ["N", "C", "H", "W"], "dtype": "float16"},
    "Wt": {"shape": ["C", "R", "S"], "dtype": "float16"},
    "Out": {"shape": ["N", "C", ")op" TMAP_CONV_OUT("H", "R") R"op(", ")op" TMAP_CONV_OUT("W", "S") R"op("], "dtype": "float32"}
  },
  "requires": [)op" TMAP_CONV_REQUIRES R"op(]
})op"},
  {"conv3d", R"op({
  "name": "conv3d",
  "description": "3-D convolution in NCDHW/KCTRS: input [N, C, D, H, W], weights [K, C, T, R, S], output [N, K, Z, P, Q]",
  "compute": "Out[n, k, z, p, q] += I[n, c, z*stride + t*dil - pad, p*stride + r*dil - pad, q*stride + s*dil - pad] * Wt[k, c, t, r, s]",
  "params": {"N": 1, "C": 64, "D": 16, "H": 28, "W": 28, "K": 64, "T": 3, "R": 3, "S": 3,
             "stride": 1, "pad": 1, "dil": 1},
  "tensors": {
    "I": {"shape": ["N", "C", "D", "H", "W"], "dtype": "float16"},
    "Wt": {"shape": ["K", "C", "T", "R", "S"], "dtype": "float16"},
    "Out": {"shape": ["N", "K", ")op" TMAP_CONV_OUT("D", "T") R"op(", ")op" TMAP_CONV_OUT("H", "R") R"op(", ")op" TMAP_CONV_OUT("W", "S") R"op("], "dtype": "float32"}
  },
  "requires": [)op" TMAP_CONV_REQUIRES R"op(]
})op"},
};

const std::vector<std::pair<std::string, std::string>>& library() {
  static const std::vector<std::pair<std::string, std::string>> ops = [] {
    std::vector<std::pair<std::string, std::string>> out;
    for (const OpSource& op : kOps) out.emplace_back(op.name, op.json);
    return out;
  }();
  return ops;
}

}  // namespace

std::vector<std::string> builtin_op_names() {
  std::vector<std::string> names;
  for (const auto& [name, src] : library()) names.push_back(name);
  return names;
}

const std::string& builtin_op_source(const std::string& name) {
  for (const auto& [n, src] : library())
    if (n == name) return src;
  std::string names;
  for (const auto& n : builtin_op_names()) names += (names.empty() ? "" : ", ") + n;
  throw UserError("error: unknown op '" + name + "'\n  hint: built-in ops are: " + names);
}

ComputeDef builtin_op(const std::string& name) {
  SourceText src("<op:" + name + ">", builtin_op_source(name));
  return parse_compute_json(src, name);
}

}  // namespace tmap
