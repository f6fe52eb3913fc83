#!/usr/bin/env bash
# tmap's tests, on a machine with or without a GPU (GPU tests skip without one):
#   bash tools/test.sh          the Release build (build/) and its suite, in which the NVRTC
#                               sweeps compile each kernel for one of the architectures they name
#   bash tools/test.sh --full   what CI runs: that suite with every sweep kernel compiled for every
#                               architecture, then the same suite built with AddressSanitizer and
#                               UndefinedBehaviorSanitizer by Clang (build-san/, which also builds
#                               the libFuzzer targets; its sweeps generate every kernel and
#                               compile one in eight), then each fuzz target for TMAP_FUZZ_SECONDS
#                               (default 45) seconds (tools/fuzz.sh)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
full=0
for arg in "$@"; do
  case "$arg" in
    --full) full=1 ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "tools/test.sh: unknown argument '$arg'; the only option is --full" >&2; exit 2 ;;
  esac
done
export TMAP_TEST_FULL=$full
[ -f build/build.ninja ] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build
if [ "$full" = 1 ]; then
  # The tuner's tests keep their candidates' cubins here: compiled by this suite, read back by the
  # sanitizer build's (tests/test_util.h, test_compile_cache()).
  export TMAP_TEST_COMPILE_CACHE=$PWD/build/test-cubins
  rm -rf "$TMAP_TEST_COMPILE_CACHE"
fi
ctest --test-dir build --output-on-failure -j2
[ "$full" = 1 ] || exit 0

if [ ! -f build-san/build.ninja ]; then
  CC=clang CXX=clang++ cmake -S . -B build-san -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DTMAP_SANITIZE=ON -DTMAP_FUZZ=ON -DTMAP_BUILD_BENCHMARKS=OFF >/dev/null
fi
cmake --build build-san
# protect_shadow_gap=0: the CUDA driver maps memory where ASan's shadow gap would be.
export ASAN_OPTIONS=detect_leaks=1:protect_shadow_gap=0:abort_on_error=0
export LSAN_OPTIONS=suppressions=$PWD/tools/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# The sanitizers watch tmap's own code, which generates every kernel of a sweep here as above;
# NVRTC's acceptance of each kernel for each architecture was checked above, and NVRTC runs five
# times slower under AddressSanitizer, so the sweeps compile one kernel in eight (TMAP_TEST_SAMPLE)
# for one architecture each, the tuner's tests read their candidates' cubins from the release
# suite's cache (TMAP_TEST_COMPILE_CACHE), and the README test leaves out the two tunes ranked by
# the model (each compiles every candidate), which keeps CI within its time.
TMAP_TEST_FULL=0 TMAP_TEST_SAMPLE=8 ctest --test-dir build-san --output-on-failure -j2
bash tools/fuzz.sh build-san
