#!/bin/bash
# Without a GPU: tmap_bench lists the tables' workloads with the keys tmap tune logs them under,
# the shipped logs cover those workloads, and every shipped kernel regenerates and compiles.
#   tests/bench_check.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
bench=$build/bin/tmap_bench tmap=$build/bin/tmap
# ROWS (tmap_bench --print-workloads) are COUNT workloads, each with a record in LOG (under $src).
logged() {  # ROWS COUNT LOG WHAT
  [ "$(wc -l <<<"$1")" -eq "$2" ] || { echo "expected $2 $4 workloads"; exit 1; }
  while read -r name key op sets; do
    grep -q "\"key\":\"$key\"" "$src/$3" || { echo "$name $4 ($key) is not in $3"; exit 1; }
  done <<<"$1"
}
# With a log, the key printed is that of the record the benchmark replays (one of float32 output
# when the table asks for float16 and the log has none, or a slower one).
for log in logs/h100_gemm.jsonl logs/h200_gemm.jsonl; do
  logged "$("$bench" --table "$src/benchmarks/workloads/gemm.json" --log "$src/$log" --print-workloads)" 11 "$log" GEMM
done
# Every layer of the ResNet-18 table at every batch, in both layouts.
for batch in 1 16 256; do
  for layout in nhwc nchw; do
    log=logs/h100_resnet18_b$batch.jsonl
    logged "$("$bench" --table "$src/benchmarks/workloads/resnet18_conv2d.json" --batch $batch --layout $layout \
                --log "$src/$log" --print-workloads)" 12 "$log" "conv b$batch $layout"
  done
done
# The bfloat16 table of ResNet-18 at batch 16, NHWC (tuned on an H200).
logged "$("$bench" --table "$src/benchmarks/workloads/resnet18_conv2d.json" --batch 16 --dtype bfloat16 \
            --log "$src/logs/h200_resnet18_b16_bfloat16.jsonl" --print-workloads)" 12 logs/h200_resnet18_b16_bfloat16.jsonl "bfloat16 conv"
# The tables tuned on an H200 in NHWC (ResNet-18 at batch 256, grouped at batch 16): their rows,
# and the same workloads as a workload table for tmap tune --table, each have a record in the log.
for t in resnet18_conv2d:256:resnet18_b256_nhwc:12 grouped_conv2d:16:grouped_b16_nhwc:4; do
  IFS=: read -r table batch wtable count <<<"$t"
  log=logs/h200_$wtable.jsonl
  logged "$("$bench" --table "$src/benchmarks/workloads/$table.json" --batch "$batch" --layout nhwc --log "$src/$log" \
              --print-workloads)" "$count" "$log" "$wtable"
  logged "$("$bench" --table "$src/benchmarks/workloads/$wtable.json" --log "$src/$log" --print-workloads)" "$count" "$log" "$wtable"
done
# The depthwise table in NHWC (tuned on an H200), a workload table only.
logged "$("$bench" --table "$src/benchmarks/workloads/depthwise_b16_nhwc.json" --log "$src/logs/h200_depthwise_b16_nhwc.jsonl" \
            --print-workloads)" 7 logs/h200_depthwise_b16_nhwc.jsonl "depthwise_b16_nhwc"
# The conv1d (batch 1, 16) and conv3d (batch 1) tables, channels first.
for t in h200_conv1d_b1 h200_conv1d_b16 h100_conv3d_b1; do
  log=logs/$t.jsonl t=${t#*_}
  table=${t%_b*} batch=${t#*_b}
  logged "$("$bench" --table "$src/benchmarks/workloads/$table.json" --batch "$batch" --layout nchw --log "$src/$log" \
              --print-workloads)" 5 "$log" "$table"
done
# The skinny GEMM table and the depthwise and grouped tables at batch 1 and 16 (channels first).
# The depthwise batch-16 log was recorded on the H200, the others on the H100.
for t in skinny_gemm:h100_skinny_gemm:9 depthwise_conv2d:h100_depthwise_b1:7 depthwise_conv2d:h200_depthwise_b16:7 \
         grouped_conv2d:h100_grouped_b1:4 grouped_conv2d:h100_grouped_b16:4; do
  IFS=: read -r table logname count <<<"$t"
  log=logs/$logname.jsonl logname=${logname#*_} batch=${logname##*_b}
  [ "$batch" = "$logname" ] && batch=1
  logged "$("$bench" --table "$src/benchmarks/workloads/$table.json" --batch "$batch" --layout nchw --log "$src/$log" \
              --print-workloads)" "$count" "$log" "$table"
done
# Workload tables, fused and LLM GEMMs: each workload has a record to replay (with the bare
# batch-1 log, the fused batch-1 table's are its schedules, which tmap_bench applies with the
# epilogue). The LLM GEMM tables (bfloat16, fp8), the fused batch-1 table and the fused
# batch-16 table's prior were tuned on an H200.
for t in resnet50_fused_b1_nhwc:h100_resnet50_b1:25 resnet50_fused_b1_nhwc:h200_resnet50_fused_b1:25 \
         resnet50_fused_b16_nhwc:h100_resnet50_fused_b16:25 \
         resnet50_fused_b16_nhwc:h200_resnet50_fused_b16:25 \
         transformer_ffn:h100_transformer_ffn:6 llm_gemm:h200_llm_gemm:13 fp8_gemm:h200_fp8_gemm:13; do
  IFS=: read -r table logname count <<<"$t"
  log=logs/$logname.jsonl
  logged "$("$bench" --table "$src/benchmarks/workloads/$table.json" --log "$src/$log" --print-workloads)" "$count" "$log" "$table"
done
# The decode table (tuned on an H200, and on an H100 with the H200's log as prior): four
# workloads, each a range of M compared at 14 sizes, so 56 rows, each served by a bucket of its
# range (a range's sizes go through its buckets without --dispatch), and the kernel of one size
# regenerates and compiles through the bucket that serves it.
for log in logs/h200_decode_gemm.jsonl logs/h100_decode_gemm.jsonl; do
  rows=$("$bench" --table "$src/benchmarks/workloads/decode_gemm.json" --log "$src/$log" --print-workloads)
  [ "$(wc -l <<<"$rows")" -eq 56 ] || { echo "expected 56 decode workloads ($log)"; exit 1; }
  [ "$(awk '{print $2}' <<<"$rows" | sort -u | wc -l)" -eq 4 ] || { echo "expected the decode rows served by 4 ranges ($log)"; exit 1; }
  while read -r name key op sets; do
    [ "$(grep "\"key\":\"$key\"" "$src/$log" | grep -c '"bucket"')" -gt 0 ] ||
      { echo "$name: no bucket of range $key in $log"; exit 1; }
  done <<<"$rows"
  "$tmap" replay "$src/$log" --op gemm_nt --set M=50 --set N=6144 --set K=4096 --dtype bfloat16 \
    --out-dtype bfloat16 --arch sm_90 2>/dev/null | grep -c "qkv@M=50" >/dev/null ||
    { echo "M=50 (no sample) of the decode range in $log does not replay through its bucket"; exit 1; }
done
# The convolution over a range of batch sizes: every row served by the one range.
rows=$("$bench" --table "$src/benchmarks/workloads/conv_batch_range.json" --log "$src/logs/h200_conv_batch_range.jsonl" --print-workloads)
[ "$(wc -l <<<"$rows")" -eq 7 ] || { echo "expected 7 batch-range rows"; exit 1; }
[ "$(awk '{print $2}' <<<"$rows" | sort -u | wc -l)" -eq 1 ] || { echo "expected the batch-range rows served by one range"; exit 1; }
[ "$(grep "\"key\":\"$(awk 'NR == 1 {print $2}' <<<"$rows")\"" "$src/logs/h200_conv_batch_range.jsonl" | grep -c '"bucket"')" -gt 0 ] ||
  { echo "the batch-range rows are not served by a bucket"; exit 1; }
refusal=$("$bench" --table "$src/benchmarks/workloads/conv1d.json" --layout nhwc --log /dev/null --print-workloads 2>&1 || true)
grep -q "no channels-last conv1d op" <<<"$refusal" || { echo "conv1d --layout nhwc should be refused with a reason"; exit 1; }
# Without --layout, a table that tmap runs channels first only is benchmarked so (the same rows).
for t in conv1d:16:h200_conv1d_b16 depthwise_conv2d:1:h100_depthwise_b1; do
  IFS=: read -r table batch log <<<"$t"
  [ "$("$bench" --table "$src/benchmarks/workloads/$table.json" --batch "$batch" --log "$src/logs/$log.jsonl" \
        --print-workloads)" = "$("$bench" --table "$src/benchmarks/workloads/$table.json" --batch "$batch" --layout nchw \
        --log "$src/logs/$log.jsonl" --print-workloads)" ] || { echo "$table without --layout should run channels first"; exit 1; }
done
# Without a record, the key tmap_bench prints is the one tmap tune records (run.sh relies on it).
conv=$("$bench" --table "$src/benchmarks/workloads/resnet18_conv2d.json" --batch 16 --log /dev/null --print-workloads)
read -r name key op sets <<<"$(head -1 <<<"$conv")"
# shellcheck disable=SC2086
"$tmap" tune --op "$op" $sets --out-dtype float16 --measure model --trials 1 --log "$build/bench_check.jsonl" >/dev/null
grep -q "\"key\":\"$key\"" "$build/bench_check.jsonl" || { echo "tmap tune logs $name under another key"; exit 1; }
rm -f "$build/bench_check.jsonl"
# The same for other input dtypes, with the output dtypes run.sh gives tmap tune (the inputs' own
# for bfloat16, the sums' int32 for int8).
for dtypes in "bfloat16 --out-dtype bfloat16" "int8" "float32"; do
  # shellcheck disable=SC2086
  gemm=$("$bench" --table "$src/benchmarks/workloads/gemm.json" --dtype $dtypes --log /dev/null --print-workloads)
  read -r name key op sets <<<"$(head -1 <<<"$gemm")"
  # shellcheck disable=SC2086
  "$tmap" tune --op "$op" $sets --dtype $dtypes --measure model --trials 1 --log "$build/bench_check.jsonl" >/dev/null
  grep -q "\"key\":\"$key\"" "$build/bench_check.jsonl" || { echo "tmap tune --dtype $dtypes logs $name under another key"; exit 1; }
  rm -f "$build/bench_check.jsonl"
done
for log in "$src"/logs/h100_*.jsonl "$src"/logs/h200_*.jsonl; do
  "$tmap" replay "$log" --arch sm_90 >/dev/null 2>&1 || { echo "replay of $log failed"; "$tmap" replay "$log" --arch sm_90; exit 1; }
done
echo "bench_check: ok"
