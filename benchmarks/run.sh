#!/bin/bash
# Benchmarks tmap against cuDNN / cuBLAS for one table and batch, on the GPU machine:
#   benchmarks/run.sh conv [--batch 1|16|256] [--layout nhwc|nchw] [--trials N] [--time-budget S] [--log LOG] [--out DIR]
#   benchmarks/run.sh conv1d|conv3d [--batch 1|16 (conv1d), 1|8 (conv3d)] [--trials N] [--time-budget S] [--log LOG] [--out DIR]
#   benchmarks/run.sh gemm|skinny [--trials N] [--time-budget S] [--log LOG] [--out DIR]
#   benchmarks/run.sh depthwise [--batch 1|16] [--trials N] [--time-budget S] [--log LOG] [--out DIR]
#   benchmarks/run.sh grouped [--batch 1|16] [--layout nchw|nhwc] [--trials N] [--time-budget S] [--log LOG] [--out DIR]
#   benchmarks/run.sh table FILE.json [--trials N] [--time-budget S] [--objective total|geomean] [--log LOG] [--prior LOG]... [--out DIR]
# A workload table (tmap import MODEL --format json) is tuned as one model: tmap tune --table,
# --trials in all (default 64 per workload) or --time-budget seconds in all, the cost model and
# the first candidates seeded from each --prior log (--objective geomean where the rows are
# separate problems, each judged by its ratio, not one model's summed time); then tmap_bench
# times every workload against cuDNN or cuBLAS (a fused one against their fused calls and the
# unfused sequence) and adds the model's weighted total.
# plus, for the fixed tables, [--dtype float16|bfloat16|float32|int8]: the inputs' dtype of tmap and
# the baselines (default float16; float32 runs on tf32 Tensor Cores; cuDNN writes int8
# convolutions' sums as float32), naming the results <name>_<dtype> and the default log logs/h100_<table>_<dtype>.jsonl for
# another dtype than float16; and [--out-dtype D]: the output dtype (default the inputs' for 16-bit
# floats, else the sums': float32, int32). A workload whose log holds only a record of another
# output dtype replays that record's schedule (noted in the table) instead of being tuned again.
# The logs default to the shipped ones (logs/h100_resnet18_b<batch>.jsonl, logs/h200_conv1d_b<batch>.jsonl,
# logs/h100_conv3d_b<batch>.jsonl, logs/h100_gemm.jsonl). conv1d and conv3d run tmap in NCW / NCDHW;
# every convolution table also times cuDNN in the other layout on the same values.
# Each workload the log does not hold yet is tuned first (tmap tune, --trials each, stopping
# early after --time-budget seconds when given); the seconds each took go into DIR/<name>.md. Then
# tmap_bench replays the log's best kernels and times the baselines in the same process, and
# writes DIR/<name>.csv, DIR/<name>.md and, with gnuplot, DIR/<name>.png (speedup per workload).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${TMAP_BIN:-$root/build/bin}
# The commit measured, for the table's header: TMAP_COMMIT (a copy without .git, e.g. on the GPU
# machine), else git's, marked "+changes" when the working tree differs from it.
commit=${TMAP_COMMIT:-$(git -C "$root" rev-parse --short=7 HEAD 2>/dev/null || echo unknown)}
if [ -z "${TMAP_COMMIT:-}" ] && [ "$commit" != unknown ] && ! git -C "$root" diff --quiet HEAD 2>/dev/null; then
  commit="$commit+changes"
fi
table=${1:?"usage: benchmarks/run.sh conv|conv1d|conv3d|gemm|skinny|depthwise|grouped|table [FILE] [--batch B] [--layout L] [--trials N] [--log LOG] [--out DIR]"}
shift
if [ "$table" = table ]; then
  json=${1:?"usage: benchmarks/run.sh table FILE.json [--trials N] [--time-budget S] [--objective total|geomean] [--log LOG] [--prior LOG]... [--out DIR]"}
  shift
  trials="" budget=0 log="" out="$root/benchmarks/results" priors=() objective=total
  while [ $# -gt 0 ]; do
    case "$1" in
      --trials) trials=$2; shift 2 ;;
      --prior) priors+=(--prior "$2"); shift 2 ;;
      --time-budget) budget=$2; shift 2 ;;
      --objective) objective=$2; shift 2 ;;
      --log) log=$2; shift 2 ;;
      --out) out=$2; shift 2 ;;
      *) echo "error: unknown option $1 for a workload table" >&2; exit 2 ;;
    esac
  done
  name=$(basename "$json" .json)
  log=${log:-$root/logs/$name.jsonl}
  mkdir -p "$out" "$(dirname "$log")"
  start=$(date +%s)
  # shellcheck disable=SC2046
  "$bin/tmap" tune --table "$json" --log "$log" --seed 1 --no-baselines --objective "$objective" "${priors[@]}" \
    $([ -n "$trials" ] && echo --trials "$trials") $([ "$budget" != 0 ] && echo --time-budget "$budget") > "$out/$name.tune.txt"
  tuned=$(( $(date +%s) - start ))
  "$bin/tmap_bench" --table "$json" --log "$log" --csv "$out/$name.csv" --md "$out/$name.md" --commit "$commit"
  { echo; echo "Model-level tuning before this run took $tuned s ($(grep -m1 -o '[0-9]* trials measured' "$out/$name.tune.txt" || echo 'see the tune output'))."; } >> "$out/$name.md"
  "$root/benchmarks/plot.sh" "$out/$name.csv"
  exit 0
fi
batch=1 layout="" trials=200 budget=0 log="" out="$root/benchmarks/results" dtype=float16 out_dtype=""
while [ $# -gt 0 ]; do
  case "$1" in
    --batch) batch=$2; shift 2 ;;
    --layout) layout=$2; shift 2 ;;
    --trials) trials=$2; shift 2 ;;
    --time-budget) budget=$2; shift 2 ;;
    --log) log=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --dtype) dtype=$2; shift 2 ;;
    --out-dtype) out_dtype=$2; shift 2 ;;
    *) echo "error: unknown option $1" >&2; exit 2 ;;
  esac
done
case "$dtype" in
  float16|fp16|half) dtype=float16 ;;
  bfloat16|bf16) dtype=bfloat16 ;;
  float32|fp32|float) dtype=float32 ;;
  int8) ;;
  *) echo "error: --dtype $dtype: give float16, bfloat16, float32 or int8" >&2; exit 2 ;;
esac
# The dtypes as tmap and tmap_bench take them: --out-dtype only where it is not the sums' own.
[ -n "$out_dtype" ] || case "$dtype" in float16|bfloat16) out_dtype=$dtype ;; esac
dtypes=(--dtype "$dtype")
[ -n "$out_dtype" ] && dtypes+=(--out-dtype "$out_dtype")
suffix=$([ "$dtype" = float16 ] || echo "_$dtype")
case "$table" in
  conv) layout=${layout:-nhwc}; json="$root/benchmarks/workloads/resnet18_conv2d.json"; name="resnet18_b${batch}_${layout}$suffix"
        log=${log:-$root/logs/h100_resnet18_b${batch}$suffix.jsonl} ;;
  conv1d|conv3d)
        [ "${layout:-nchw}" = nchw ] || { echo "error: $table runs channels first (NCW / NCDHW): no --layout $layout" >&2; exit 2; }
        layout=nchw; json="$root/benchmarks/workloads/$table.json"
        name="${table}_b${batch}_$([ "$table" = conv1d ] && echo ncw || echo ncdhw)$suffix"
        # The conv1d logs were recorded on the H200, the conv3d one on the H100.
        log=${log:-$root/logs/$([ "$table" = conv1d ] && echo h200 || echo h100)_${table}_b${batch}$suffix.jsonl} ;;
  gemm) layout=nhwc; json="$root/benchmarks/workloads/gemm.json"; name="gemm$suffix"; log=${log:-$root/logs/h100_gemm$suffix.jsonl} ;;
  skinny) layout=nhwc; json="$root/benchmarks/workloads/skinny_gemm.json"; name="skinny_gemm$suffix"
        log=${log:-$root/logs/h100_skinny_gemm$suffix.jsonl} ;;
  depthwise)
        [ "${layout:-nchw}" = nchw ] || { echo "error: depthwise runs channels first (NCHW): no --layout $layout" >&2; exit 2; }
        layout=nchw; json="$root/benchmarks/workloads/depthwise_conv2d.json"; name="depthwise_b${batch}_nchw$suffix"
        # The batch-16 log was recorded on the H200, the batch-1 one on the H100.
        log=${log:-$root/logs/$([ "$batch" = 16 ] && echo h200 || echo h100)_depthwise_b${batch}$suffix.jsonl} ;;
  grouped)
        layout=${layout:-nchw}; json="$root/benchmarks/workloads/grouped_conv2d.json"; name="grouped_b${batch}_${layout}$suffix"
        # The channels-first logs were recorded on the H100, the channels-last one on the H200.
        [ "$layout" = nchw ] && log=${log:-$root/logs/h100_grouped_b${batch}$suffix.jsonl}
        log=${log:-$root/logs/h200_grouped_b${batch}_nhwc$suffix.jsonl} ;;
  *) echo "error: table must be conv, conv1d, conv3d, gemm, skinny, depthwise or grouped" >&2; exit 2 ;;
esac
mkdir -p "$out" "$(dirname "$log")"
touch "$log"
start=$(date +%s)
times=$(mktemp)
trap 'rm -f "$times"' EXIT
"$bin/tmap_bench" --table "$json" --batch "$batch" --layout "$layout" --log "$log" "${dtypes[@]}" --print-workloads |
while read -r wname key op sets; do
  # grep -c reads to the end: with grep -q the first grep could die of SIGPIPE (and pipefail).
  if [ "$(grep -F "\"key\":\"$key\"" "$log" | grep -cF '"status":"ok"' || true)" -gt 0 ]; then
    echo "$wname: in the log, replaying" >&2
  else
    echo "$wname: tuning ($trials trials)" >&2
    t0=$(date +%s)
    # shellcheck disable=SC2086
    "$bin/tmap" tune --op "$op" $sets "${dtypes[@]}" --trials "$trials" --time-budget "$budget" --log "$log" --seed 1 >/dev/null
    echo "$wname $(( $(date +%s) - t0 ))" >> "$times"
  fi
done
tuned=$(( $(date +%s) - start ))
echo "tuning took $tuned s" >&2
"$bin/tmap_bench" --table "$json" --batch "$batch" --layout "$layout" --log "$log" "${dtypes[@]}" \
  --csv "$out/$name.csv" --md "$out/$name.md" --commit "$commit"
{
  echo
  echo "Tuning before this run took $tuned s (workloads already in $(basename "$log") are replayed, not tuned;" \
    "new ones get $trials trials$([ "$budget" != 0 ] && echo ", at most $budget s each"))."
  [ -s "$times" ] && echo "Seconds per tuned workload: $(awk '{printf "%s%s %s s", (NR > 1 ? ", " : ""), $1, $2}' "$times")."
} >> "$out/$name.md"
"$root/benchmarks/plot.sh" "$out/$name.csv"
