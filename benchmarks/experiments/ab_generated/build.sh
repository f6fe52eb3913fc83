#!/bin/bash
# build.sh SRC EXPORT: compiles make_cases.py's SRC folder with ab.cu and an export's
# tmap_runtime.cu into SRC/ab (see ab.cu).
set -e
S=$1; E=$2; D=$(cd "$(dirname "$0")" && pwd)
NVCC=/usr/local/cuda/bin/nvcc; FL="-O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -diag-suppress=177"
mkdir -p "$S/obj"
ls "$S"/*_old.cu "$S"/*_new.cu | xargs -P 16 -I{} sh -c "$NVCC $FL -I'$E' -c {} -o '$S/obj/'\$(basename {} .cu).o"
$NVCC $FL -I"$E" -c "$E/tmap_runtime.cu" -o "$S/obj/runtime.o"
$NVCC $FL -I"$S" -c "$D/ab.cu" -o "$S/obj/ab.o"
$NVCC $FL "$S"/obj/*.o -o "$S/ab" -lcuda
