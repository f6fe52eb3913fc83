#!/usr/bin/env bash
# Every test of tmap (what CI runs, on a machine without a GPU):
#   1. the Release build (build/) and its suite;
#   2. the same suite built with AddressSanitizer + UndefinedBehaviorSanitizer by Clang
#      (build-san/), which also builds the libFuzzer targets;
#   3. each fuzz target for TMAP_FUZZ_SECONDS (default 45) seconds (tools/fuzz.sh).
# GPU tests skip without a GPU. TMAP_TEST_QUICK=1 runs step 1 only.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[ -f build/build.ninja ] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build
ctest --test-dir build --output-on-failure -j2
[ "${TMAP_TEST_QUICK:-0}" = 1 ] && exit 0

if [ ! -f build-san/build.ninja ]; then
  CC=clang CXX=clang++ cmake -S . -B build-san -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DTMAP_SANITIZE=ON -DTMAP_FUZZ=ON -DTMAP_BUILD_BENCHMARKS=OFF >/dev/null
fi
cmake --build build-san
# protect_shadow_gap=0: the CUDA driver maps memory where ASan's shadow gap would be.
export ASAN_OPTIONS=detect_leaks=1:protect_shadow_gap=0:abort_on_error=0
export LSAN_OPTIONS=suppressions=$PWD/tools/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir build-san --output-on-failure -j2
bash tools/fuzz.sh build-san
