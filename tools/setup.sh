#!/usr/bin/env bash
# Sets tmap up on Debian 12 with the CUDA 13 toolkit (no GPU needed): installs the missing
# Debian packages, builds tmap (Release) into build/, and runs the main job on a default example
# (tmap tune on ResNet-18's conv2d layer 5).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

packages=(cmake ninja-build g++ nlohmann-json3-dev libspdlog-dev libcli11-dev libxgboost-dev libgtest-dev libonnx-dev libprotobuf-dev gnuplot-nox
          clang libclang-rt-14-dev)  # Clang: the sanitizer build and the fuzzers of tools/test.sh
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "error: the CUDA toolkit (13) was not found; install it, or set CUDAToolkit_ROOT" >&2
  exit 1
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build
# The main job: tune ResNet-18's conv2d layer 5 on the GPU, or without one rank candidates with
# the analytic model and check that the chosen kernels compile.
if ./build/bin/tmap version | grep -q '^device '; then
  ./build/bin/tmap tune --op conv2d --trials 100 --log build/example_tune.jsonl "$@"
else
  ./build/bin/tmap tune --op conv2d --measure model --trials 8 --log build/example_tune.jsonl "$@"
fi
