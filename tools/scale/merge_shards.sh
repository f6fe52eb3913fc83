#!/bin/bash
# Merges the shards' logs of tune_shard.sh into OUT_DIR/merged.jsonl (every record once) and
# OUT_DIR/best.jsonl (the best record of each workload), once every shard has finished:
#   tools/scale/merge_shards.sh OUT_DIR
set -euo pipefail
tmap=${TMAP:-tmap}
out=${1:?"usage: merge_shards.sh OUT_DIR"}
shopt -s nullglob
logs=("$out"/shard_*.jsonl)
[ ${#logs[@]} -gt 0 ] || { echo "merge_shards.sh: no shard_*.jsonl in $out" >&2; exit 1; }
"$tmap" logs merge "${logs[@]}" --out "$out/merged.jsonl"
"$tmap" logs merge "${logs[@]}" --best --out "$out/best.jsonl"
