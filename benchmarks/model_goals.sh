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
#   benchmarks/model_goals.sh ref r18|r50 [--trials 1000] [--out DIR]
#     The goals' reference: each workload of the model tuned on its own for --trials (no time
#     limit, seed 2, the same priors as above); each one's best record is kept in
#     DIR/ref_<model>/<name>.best.jsonl, all of them in DIR/ref_<model>_<trials>.jsonl. A workload
#     whose run finished is not tuned again, so an interrupted run goes on where it stopped.
#   benchmarks/model_goals.sh r18 ... --ref DIR/ref_r18_1000.jsonl adds each layer's reference;
#     --no-tune replays an earlier run's DIR/model_r18_<seconds>s.jsonl without tuning again.
#   Every comparison replays its logs --rounds times (default 3) in turn and takes the medians.
#   benchmarks/model_goals.sh compare LOG_A LOG_B [--out DIR]
#     Replays the best of each workload of two logs in one run and sums count x time over the
#     ResNet-50 table: how far a shorter tuning run (A) is from a longer one (B).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${TMAP_BIN:-$root/build/bin}
what=${1:?"usage: benchmarks/model_goals.sh r18|r50|compare ..."}
shift
seconds="" out="$root/benchmarks/results" log="" bench=0 ref="" trials=1000 tune=1 rounds=3 args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --log) log=$2; shift 2 ;;
    --bench) bench=1; shift ;;
    --ref) ref=$2; shift 2 ;;
    --trials) trials=$2; shift 2 ;;
    --no-tune) tune=0; shift ;;
    --rounds) rounds=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
mkdir -p "$out"
table="$out/resnet50_b1_nhwc.json"
make_table() {
  [ -f "$table" ] && return
  "$bin/tmap_make_model" resnet50 "$out/resnet50.onnx" --shapes-only
  "$bin/tmap" import "$out/resnet50.onnx" --batch 1 --layout nhwc --no-fuse --out "$table" > "$out/resnet50_b1_nhwc.txt"
  rm -f "$out/resnet50.onnx"
}
# Each workload key of a log, one per line.
log_keys() {
  "$bin/tmap" logs list "$1" --format json 2>/dev/null |
    python3 -c 'import json, sys; print("\n".join(w["workload"] for w in json.load(sys.stdin)["workloads"]))' || true
}
# replay_rounds PREFIX LOG...: each log's workloads replayed --rounds times, the logs in turn
# within a round, each workload in a process of its own (PREFIX_<i>_<round>_<key>.json for the
# i-th log), so that drift of the GPU between processes falls on all of them alike;
# replay_median (Python) takes each workload's median over the rounds. Kernels of 2-5 us
# replayed once moved by up to 10% from one process to the next, and replayed after a log's
# other workloads in one process they moved with their place in it: ResNet-18 layer 10's 20 s
# best read 2.28 us (3 rounds) after the log's layers 0-9 and 2.13-2.17 alone, the reference's
# 2.12 and 2.19 (H100, 2026-11-26).
replay_rounds() {
  local prefix=$1 round i log key
  shift
  for round in $(seq "$rounds"); do
    i=0
    for log in "$@"; do
      for key in $(log_keys "$log"); do
        "$bin/tmap" replay "$log" --workload "$key" --format json > "${prefix}_${i}_${round}_${key}.json" 2>/dev/null || true
      done
      i=$((i + 1))
    done
  done
}
replay_median_py='
import glob, json, statistics
def replay_median(prefix):  # workload key -> median over the rounds of its replayed time in us
    times = {}
    for path in sorted(glob.glob(prefix + "_*.json")):
        try: results = json.load(open(path))["results"]
        except (ValueError, KeyError): continue
        for r in results:
            if r.get("now_us"): times.setdefault(r["workload"], []).append(r["now_us"])
    return {k: statistics.median(v) for k, v in times.items()}
'
r18_priors=(--prior "$root/logs/h100_resnet18_b16.jsonl" --prior "$root/logs/h100_resnet18_b256.jsonl")
r50_priors=(--prior "$root/logs/h100_resnet18_b1.jsonl" --prior "$root/logs/h100_resnet18_b16.jsonl")
# Each workload as 'name key op --set ...' (the key is that of its log records).
print_workloads() {
  case "$1" in
    r18) "$bin/tmap_bench" --table "$root/benchmarks/workloads/resnet18_conv2d.json" --batch 1 --layout nhwc \
           --log "$root/logs/h100_resnet18_b1.jsonl" --print-workloads ;;
    r50) make_table; "$bin/tmap_bench" --table "$table" --log "$out/none.jsonl" --print-workloads ;;
    *) echo "error: r18 or r50" >&2; exit 2 ;;
  esac
}

case "$what" in
  r18)
    seconds=${seconds:-20}
    fresh="$out/model_r18_${seconds}s.jsonl"
    [ "$tune" = 1 ] && rm -f "$fresh" && : > "$out/r18_tuned.txt"
    print_workloads r18 > "$out/r18_workloads.txt"
    while [ "$tune" = 1 ] && read -r name key op sets; do
      # shellcheck disable=SC2086
      "$bin/tmap" tune --op "$op" $sets --out-dtype float16 --time-budget "$seconds" --trials 100000 --log "$fresh" \
        "${r18_priors[@]}" --seed 1 --format json \
        > "$out/r18_$name.json" 2>/dev/null < /dev/null
      echo "$name $key" >> "$out/r18_tuned.txt"
    done < "$out/r18_workloads.txt"
    rm -f "$out"/r18_replay_*.json
    replay_rounds "$out/r18_replay" "$fresh" "$root/logs/h100_resnet18_b1.jsonl" ${ref:+"$ref"}
    { echo "$replay_median_py"; cat <<'PY'
import sys
out, seconds, ref_log, rounds = sys.argv[1:5]
names = [l.split() for l in open(f"{out}/r18_tuned.txt")]
fresh, shipped, ref = (replay_median(f"{out}/r18_replay_{i}") for i in range(3))
fmt = lambda x: f"{x:.2f}" if x else "-"
ratio = lambda a, b: a / b if a and b else None
rows, within_shipped, within_ref, comparable = [], 0, 0, 0
for name, key in names:
    t = json.load(open(f"{out}/r18_{name}.json"))
    # The shipped log's key is the one tmap_bench replays for the layer; tmap tune --op keys the fresh
    # log and the reference alike.
    f, s, r = fresh.get(t["workload"]["key"]), shipped.get(key), ref.get(t["workload"]["key"])
    if key != t["workload"]["key"]: s = None  # the shipped log has only another output dtype of the layer
    comparable += s is not None
    fs, fr = ratio(f, s), ratio(f, r)
    within_shipped += fs is not None and fs <= 1.05
    within_ref += fr is not None and fr <= 1.05
    row = f"| {name} | {t['trials']} | {t['wall_s']:.1f} | {fmt(f)} | {fmt(s)} | {fs:.3f} |" if fs else f"| {name} | {t['trials']} | {t['wall_s']:.1f} | {fmt(f)} | {fmt(s)} | - |"
    if ref_log: row += f" {fmt(r)} | {fr:.3f} |" if fr else f" {fmt(r)} | - |"
    rows.append(row)
head = "| layer | trials | tuning s | fresh best us | shipped best us | fresh / shipped |"
rule = "| --- | ---: | ---: | ---: | ---: | ---: |"
if ref_log: head += " reference best us | fresh / reference |"; rule += " ---: | ---: |"
md = [f"### ResNet-18 batch 1 NHWC: each layer tuned from scratch for {seconds} s",
      "", f"Replayed in the same run, {rounds} rounds in turn, medians: the best of the fresh log, the shipped log's best (earlier, longer tuning; '-' where it holds only a float32-output record of the layer)"
      + (f" and each layer's own best of {ref_log} (the goal's reference: tuned on its own with a fixed trial count)" if ref_log else "")
      + ". A ratio of at most 1.05 is within 5%.", "", head, rule] + rows
md.append(f"\n{within_shipped} of {comparable} comparable layers within 5% of the shipped best" +
          (f"; {within_ref} of {len(names)} within 5% of their reference best." if ref_log else "."))
open(f"{out}/model_r18_{seconds}s.md", "w").write("\n".join(md) + "\n")
print("\n".join(md))
PY
    } | python3 - "$out" "$seconds" "$ref" "$rounds"
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
    print_workloads r50 > "$out/r50_workloads.txt"
    rm -f "$out"/compare_*.json
    replay_rounds "$out/compare" "$a" "$b"
    { echo "$replay_median_py"; cat <<'PY'
import sys
table = json.load(open(sys.argv[1]))
counts = {w["name"]: w["count"] for w in table["workloads"]}
keys = dict(l.split()[:2] for l in open(sys.argv[6]))  # by key: workloads tuned on their own carry the op's name
a, b = replay_median(sys.argv[2]), replay_median(sys.argv[3])
a = {n: a.get(keys[n]) for n in counts}
b = {n: b.get(keys[n]) for n in counts}
ta = tb = 0
print("| workload | count | A us | B us | A / B |\n| --- | ---: | ---: | ---: | ---: |")
for n, c in counts.items():
    if a.get(n) and b.get(n):
        ta += c * a[n]; tb += c * b[n]
        print(f"| {n} | {c} | {a[n]:.2f} | {b[n]:.2f} | {a[n] / b[n]:.3f} |")
    else:
        print(f"| {n} | {c} | {a.get(n) or '-'} | {b.get(n) or '-'} | - |")
print(f"\nReplayed in one run, {sys.argv[7]} rounds in turn, medians: A = {sys.argv[4]}, B = {sys.argv[5]}.")
print("Model total (sum of count x time over workloads in both): A %.2f us, B %.2f us, A / B = %.3f" % (ta, tb, ta / tb if tb else 0))
PY
    } | python3 - "$table" "$out/compare_0" "$out/compare_1" "$a" "$b" "$out/r50_workloads.txt" "$rounds"
    ;;
  ref)
    model=${args[0]:?"ref r18|r50"}
    dir="$out/ref_$model"
    mkdir -p "$dir"
    if [ "$model" = r18 ]; then priors=("${r18_priors[@]}"); else priors=("${r50_priors[@]}"); fi
    print_workloads "$model" > "$out/${model}_workloads.txt"
    while read -r name key op sets; do
      [ -f "$dir/$name.json" ] && continue  # written once its run has finished
      rm -f "$dir/$name.jsonl"
      # shellcheck disable=SC2086
      "$bin/tmap" tune --op "$op" $sets --out-dtype float16 --trials "$trials" --log "$dir/$name.jsonl" \
        "${priors[@]}" --seed 2 --format json > "$dir/$name.part" 2> "$dir/$name.err" < /dev/null ||
        { echo "error: tuning $model $name failed:" >&2; tail -5 "$dir/$name.err" >&2; exit 1; }
      # Only the best record is kept (a thousand records of code and timings are megabytes).
      "$bin/tmap" logs prune "$dir/$name.jsonl" --out "$dir/$name.best.jsonl" > /dev/null
      rm -f "$dir/$name.jsonl"
      mv "$dir/$name.part" "$dir/$name.json"
      echo "$model $name: $(python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(j['trials'], 'trials in', round(j['wall_s'], 1), 's, best', round(j['best']['result']['median_us'], 2), 'us')" "$dir/$name.json")"
    done < "$out/${model}_workloads.txt"
    cat "$dir"/*.best.jsonl > "$out/ref_${model}_${trials}.jsonl"
    echo "reference log: $out/ref_${model}_${trials}.jsonl ($(wc -l < "$out/ref_${model}_${trials}.jsonl") records)"
    ;;
  *) echo "error: r18, r50, ref or compare" >&2; exit 2 ;;
esac
