#!/usr/bin/env bash
# Sets tmap up on Debian 12 with the CUDA 13 toolkit (no GPU needed): installs the missing
# Debian packages, builds tmap (Release) into build/, and runs the main job on a default example.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

packages=(cmake ninja-build g++ nlohmann-json3-dev libspdlog-dev libcli11-dev libxgboost-dev libgtest-dev)
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
./build/bin/tmap map --op conv2d --hw wmma_fp16_fp32 "$@"
