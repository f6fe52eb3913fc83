# Runs an exported PyTorch extension (tmap export ... --out DIR; cmake-build DIR; python3 setup.py
# build_ext --inplace in DIR/torch) against PyTorch's own op on random inputs, for conv2d and gemm_nt
# workloads of a workload table:
#   python3 tests/export/torch_check.py DIR/torch DIR/tmap_kernels.h TABLE.json
# Needs PyTorch and a GPU (run on the GPU machine); not part of the suite.
import json, re, sys
import torch
sys.path.insert(0, sys.argv[1])  # the built extension
import tmap_ext
header = open(sys.argv[2]).read()
table = json.load(open(sys.argv[3]))
fn = re.search(r"const cudaError_t e = (tmap_\w+)\(", open(sys.argv[1] + "/tmap_ext.cpp").read()).group(1)
name = fn[len("tmap_"):fn.rfind("_")]
w = next(x for x in table["workloads"] if x["name"] == name)
p = w["params"]
torch.manual_seed(0)
if w["op"] == "conv2d":
    I = torch.rand(p["N"], p["C"], p["H"], p["W"], device="cuda", dtype=torch.half) * 2 - 1
    Wt = torch.rand(p["K"], p["C"] // p["groups"], p["R"], p["S"], device="cuda", dtype=torch.half) * 2 - 1
    got = tmap_ext.run(I, Wt).float()
    ref = torch.nn.functional.conv2d(I.float(), Wt.float(), stride=p["stride"], padding=p["pad"], dilation=p["dil"], groups=p["groups"])
elif w["op"] == "gemm_nt":
    A = torch.rand(p["M"], p["K"], device="cuda", dtype=torch.half) * 2 - 1
    B = torch.rand(p["N"], p["K"], device="cuda", dtype=torch.half) * 2 - 1
    got = tmap_ext.run(A, B).float()
    ref = A.float() @ B.float().T
else:
    raise SystemExit(f"no PyTorch reference written for {w['op']}")
err = ((got - ref).norm() / ref.norm()).item()
print(f"{fn} ({w['op']} {p}): relative L2 vs PyTorch {err:.2e}", "ok" if err < 1e-2 else "WRONG")
sys.exit(0 if err < 1e-2 else 1)
