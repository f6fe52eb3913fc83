#!/usr/bin/env bash
# Runs each libFuzzer target of tmap for a bounded time, seeded from tests/fuzz/corpus/<target>,
# and prints the executions per target. A crash, a hang (-timeout), an uncaught exception or a
# sanitizer report fails the run and leaves the input in <build>/fuzz/findings/: fix the bug and
# add the input to the target's corpus, where the ordinary test suite replays it.
#   bash tools/fuzz.sh [build-dir]      (a build configured with -DTMAP_FUZZ=ON; default build-san)
#   TMAP_FUZZ_SECONDS=45                (per target)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build-san}
seconds=${TMAP_FUZZ_SECONDS:-45}
targets=(dsl compute hw log params table record)
[ -x "$build/fuzz/fuzz_onnx" ] && targets+=(onnx)  # built where libonnx is found
mkdir -p "$build/fuzz/findings"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:protect_shadow_gap=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
printf '%-8s %12s %10s %8s  %s\n' target executions "exec/s" corpus result
status=0
for t in "${targets[@]}"; do
  bin="$build/fuzz/fuzz_$t"
  [ -x "$bin" ] || { echo "error: $bin is missing; configure $build with -DTMAP_FUZZ=ON (Clang)" >&2; exit 1; }
  work=$(mktemp -d)
  log="$build/fuzz/$t.log"
  if "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=16384 -print_final_stats=1 \
      -artifact_prefix="$build/fuzz/findings/$t-" "$work" "tests/fuzz/corpus/$t" >"$log" 2>&1; then
    result=ok
  else
    result="FAILED (see $log)"
    status=1
  fi
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  corpus=$(find "$work" -type f | wc -l)
  printf '%-8s %12s %10s %8s  %s\n' "$t" "${execs:-0}" "${rate:-0}" "$corpus" "$result"
  [ "$result" = ok ] || grep -E 'ERROR|SUMMARY|==[0-9]+==|Test unit written' "$log" | head -20 >&2
  rm -rf "$work"
done
exit $status
