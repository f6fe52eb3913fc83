#!/bin/bash
# Model-level tuning against its goals, on the GPU machine (needs tmap built with ONNX):
#   benchmarks/model_goals.sh r18 [--seconds 20] [--out DIR]
#     Each ResNet-18 conv layer (batch 1, NHWC, float16 output) tuned from scratch for --seconds
#     into a fresh log (the cost model warm-started from the batch-16 and -256 logs, which hold
#     other workloads only), then its best and the shipped log's best for the layer (longer
#     tuning of earlier sessions) replayed in the same run: DIR/model_r18_<seconds>s.md.
#   benchmarks/model_goals.sh r50 [--seconds 180] [--log LOG] [--bench] [--out DIR]
#     ResNet-50 v1.5 at batch 1 (tests/models, weights as inputs; convolutions NHWC) imported and
#     tuned as one model for --seconds (resuming LOG when it exists, default DIR/r50_b1.jsonl);
#     --bench then times every workload against cuDNN / cuBLAS with tmap_bench.
#   benchmarks/model_goals.sh compare LOG_A LOG_B [--out DIR]
#     Replays the best of each workload of two logs in one run and sums count x time over the
#     ResNet-50 table: how far a shorter tuning run (A) is from a longer one (B).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${TMAP_BIN:-$root/build/bin}
what=${1:?"usage: benchmarks/model_goals.sh r18|r50|compare ..."}
shift
seconds="" out="$root/benchmarks/results" log="" bench=0 args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --log) log=$2; shift 2 ;;
    --bench) bench=1; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
mkdir -p "$out"
table="$out/resnet50_b1_nhwc.json"
make_table() {
  [ -f "$table" ] && return
  "$bin/tmap_make_model" resnet50 "$out/resnet50.onnx" --shapes-only
  "$bin/tmap" import "$out/resnet50.onnx" --batch 1 --layout nhwc --out "$table" > "$out/resnet50_b1_nhwc.txt"
  rm -f "$out/resnet50.onnx"
}
# Replays a log's best records as JSON (workload key -> us).
replay_json() { "$bin/tmap" replay "$1" --format json 2>/dev/null || true; }

case "$what" in
  r18)
    seconds=${seconds:-20}
    fresh="$out/model_r18_${seconds}s.jsonl"
    rm -f "$fresh"
    "$bin/tmap_bench" --table "$root/benchmarks/workloads/resnet18_conv2d.json" --batch 1 --layout nhwc \
      --log "$root/logs/h100_resnet18_b1.jsonl" --print-workloads > "$out/r18_workloads.txt"
    : > "$out/r18_tuned.txt"
    while read -r name key op sets; do
      # shellcheck disable=SC2086
      "$bin/tmap" tune --op "$op" $sets --out-dtype float16 --time-budget "$seconds" --trials 100000 --log "$fresh" \
        --prior "$root/logs/h100_resnet18_b16.jsonl" --prior "$root/logs/h100_resnet18_b256.jsonl" --seed 1 --format json \
        > "$out/r18_$name.json" 2>/dev/null < /dev/null
      echo "$name $key" >> "$out/r18_tuned.txt"
    done < "$out/r18_workloads.txt"
    replay_json "$root/logs/h100_resnet18_b1.jsonl" > "$out/r18_replay_shipped.json"
    replay_json "$fresh" > "$out/r18_replay_fresh.json"
    python3 - "$out" "$seconds" <<'PY'
import json, sys
out, seconds = sys.argv[1], sys.argv[2]
names = [l.split() for l in open(f"{out}/r18_tuned.txt")]
shipped = {r["workload"]: r for r in json.load(open(f"{out}/r18_replay_shipped.json"))["results"]}
fresh = {r["workload"]: r for r in json.load(open(f"{out}/r18_replay_fresh.json"))["results"]}
rows, within = [], 0
for name, key in names:
    t = json.load(open(f"{out}/r18_{name}.json"))
    f = fresh.get(t["workload"]["key"], {}).get("now_us")
    s = shipped.get(key, {}).get("now_us")
    ratio = f / s if f and s else None
    within += ratio is not None and ratio <= 1.05
    rows.append(f"| {name} | {t['trials']} | {t['wall_s']:.1f} | {f or '-'} | {s or '-'} | {ratio:.3f} |" if ratio else f"| {name} | {t['trials']} | {t['wall_s']:.1f} | {f} | {s} | - |")
md = [f"### ResNet-18 batch 1 NHWC: each layer tuned from scratch for {seconds} s",
      "", "Replayed in the same run: the best of the fresh log and the shipped log's best (earlier, longer tuning). Ratio = fresh / shipped (1.05 = within 5%).",
      "", "| layer | trials | tuning s | fresh best us | shipped best us | ratio |", "| --- | ---: | ---: | ---: | ---: | ---: |"] + rows
md.append(f"\n{within} of {len(names)} layers within 5% of the shipped best.")
open(f"{out}/model_r18_{seconds}s.md", "w").write("\n".join(md) + "\n")
print("\n".join(md))
PY
    ;;
  r50)
    seconds=${seconds:-180}
    make_table
    log=${log:-$out/r50_b1.jsonl}
    start=$(date +%s)
    "$bin/tmap" tune --table "$table" --time-budget "$seconds" --log "$log" --seed 1 --no-baselines \
      --prior "$root/logs/h100_resnet18_b1.jsonl" --prior "$root/logs/h100_resnet18_b16.jsonl" \
      > "$out/r50_tune_${seconds}s.txt" 2> "$out/r50_tune_${seconds}s.err" < /dev/null
    echo "model tuning: $(( $(date +%s) - start )) s wall" >> "$out/r50_tune_${seconds}s.txt"
    cat "$out/r50_tune_${seconds}s.txt"
    if [ "$bench" = 1 ]; then
      "$bin/tmap_bench" --table "$table" --log "$log" --csv "$out/resnet50_b1_nhwc.csv" --md "$out/resnet50_b1_nhwc.md" \
        2> "$out/resnet50_b1_nhwc.bench.err"
    fi
    ;;
  compare)
    a=${args[0]:?"compare LOG_A LOG_B"} b=${args[1]:?"compare LOG_A LOG_B"}
    make_table
    replay_json "$a" > "$out/compare_a.json"
    replay_json "$b" > "$out/compare_b.json"
    python3 - "$table" "$out/compare_a.json" "$out/compare_b.json" "$a" "$b" <<'PY'
import json, sys
table = json.load(open(sys.argv[1]))
counts = {w["name"]: w["count"] for w in table["workloads"]}
a = {r["name"]: r.get("now_us") for r in json.load(open(sys.argv[2]))["results"]}
b = {r["name"]: r.get("now_us") for r in json.load(open(sys.argv[3]))["results"]}
ta = tb = 0
print("| workload | count | A us | B us | A / B |\n| --- | ---: | ---: | ---: | ---: |")
for n, c in counts.items():
    if a.get(n) and b.get(n):
        ta += c * a[n]; tb += c * b[n]
        print(f"| {n} | {c} | {a[n]:.2f} | {b[n]:.2f} | {a[n] / b[n]:.3f} |")
    else:
        print(f"| {n} | {c} | {a.get(n) or '-'} | {b.get(n) or '-'} | - |")
print(f"\nReplayed in one run: A = {sys.argv[4]}, B = {sys.argv[5]}.")
print("Model total (sum of count x time over workloads in both): A %.2f us, B %.2f us, A / B = %.3f" % (ta, tb, ta / tb if tb else 0))
PY
    ;;
  *) echo "error: r18, r50 or compare" >&2; exit 2 ;;
esac
