#!/bin/bash
# Builds the im2col-view probe (see harness.cu) on the GPU machine:
#   build.sh TMAP PROXY_LOGS WORK
# TMAP: the tmap binary; PROXY_LOGS: a folder with pxcol_<layer>.jsonl, each the log of
#   `tmap tune pxcol_<layer>.json --out-dtype float16 --log PROXY_LOGS/pxcol_<layer>.jsonl`;
# WORK: a scratch folder; the probe is WORK/harness. Run from the repository root (it exports
# the shipped batch-1 NHWC and NCHW records of logs/h100_resnet18_b1.jsonl to compare).
set -e
B=$1; PL=$2; WK=$3; D=$(cd "$(dirname "$0")" && pwd)
NVCC=/usr/local/cuda/bin/nvcc; FL="-O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -diag-suppress=177"
rm -rf "$WK"; mkdir -p "$WK/obj"
declare -A NHWC=([l11]=7f47eba6418d96a4 [l8]=e5e6f12ecce17a81 [l9]=f276feee4f56afbc [l6]=765f730cc7307a3b)
declare -A NCHW=([l11]=d9198bcb5985a6c8 [l8]=ba98fb3fe4dad03d [l9]=22952042abf3a714 [l6]=2c9fd99c6e3ba9db)
declare -A DIMS=([l11]="512,7,7,512,1" [l8]="256,14,14,256,1" [l9]="256,14,14,512,2" [l6]="128,28,28,256,2")
INC=$WK/layers.inc; : > "$INC"; ROWS=""
for l in l11 l8 l9 l6; do
  [ -f "$PL/pxcol_$l.jsonl" ] || continue
  "$B" export "$PL/pxcol_$l.jsonl" --allow-unmeasured --out "$WK/px_$l" > /dev/null
  "$B" export logs/h100_resnet18_b1.jsonl --workload "${NHWC[$l]}" --out "$WK/nhwc_$l" > /dev/null
  "$B" export logs/h100_resnet18_b1.jsonl --workload "${NCHW[$l]}" --out "$WK/nchw_$l" > /dev/null
  k=$(python3 "$D/transform.py" "$WK"/px_$l/kernels/*.cu "$WK/px_$l/px.cu")
  px=$(grep -o "^cudaError_t tmap_pxcol_${l}_[0-9a-f]*" "$WK/px_$l/tmap_kernels.h" | cut -d' ' -f2)
  nh=$(grep -o "^cudaError_t tmap_conv2d_nhwc_[0-9a-f]*" "$WK/nhwc_$l/tmap_kernels.h" | cut -d' ' -f2)
  nc=$(grep -o "^cudaError_t tmap_conv2d_[0-9a-f]*" "$WK/nchw_$l/tmap_kernels.h" | cut -d' ' -f2)
  echo "extern \"C\" cudaError_t $px(const half*, const half*, half*, cudaStream_t); extern \"C\" void px_set_$k(int, const void*, long long);" >> "$INC"
  echo "extern \"C\" cudaError_t $nh(const half*, const half*, half*, cudaStream_t); extern \"C\" cudaError_t $nc(const half*, const half*, half*, cudaStream_t);" >> "$INC"
  ROWS="$ROWS {\"$l\", ${DIMS[$l]}, $px, px_set_$k, $nh, $nc},"
  $NVCC $FL -I"$WK/px_$l" -c "$WK/px_$l/px.cu" -o "$WK/obj/px_$l.o" &
  $NVCC $FL -I"$WK/nhwc_$l" -c "$WK"/nhwc_$l/kernels/*.cu -o "$WK/obj/nhwc_$l.o" &
  $NVCC $FL -I"$WK/nchw_$l" -c "$WK"/nchw_$l/kernels/*.cu -o "$WK/obj/nchw_$l.o" &
  wait
done
echo "static const Layer layers[] = {$ROWS};" >> "$INC"
first=$(ls -d "$WK"/px_* | head -1)
$NVCC $FL -I"$first" -c "$first/tmap_runtime.cu" -o "$WK/obj/runtime.o"
$NVCC $FL -I"$WK" -c "$D/harness.cu" -o "$WK/obj/harness.o"
$NVCC $FL "$WK"/obj/*.o -o "$WK/harness" -lcuda
echo "built $WK/harness"
