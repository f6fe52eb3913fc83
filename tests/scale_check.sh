#!/bin/bash
# Without a scheduler or a GPU: the scale-out scripts of docs/scale.md run a table in shards as
# Slurm array tasks and as Kubernetes Indexed Job pods would (their environment variables set
# here, the shards ranked by the analytic model), and the merged shards' best records are the
# records of one run over the whole table with the same seed.
#   tests/scale_check.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
export TMAP=$build/bin/tmap
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
table=$src/benchmarks/workloads/transformer_ffn.json
opts=(--measure model --trials 6)
# (workload key, candidate) of each best record: what must agree (compile times differ).
best_set() {
  "$TMAP" logs best "$1" | sed -E -e 's/,"recorded_at":"[^"]*"//' -e 's/^\{"candidate":(.*),"result":.*"key":"([0-9a-f]+)".*/\2 \1/' | sort
}

"$TMAP" tune --table "$table" --seed 1 "${opts[@]}" --log "$work/whole.jsonl" > /dev/null
[ "$(best_set "$work/whole.jsonl" | wc -l)" -eq 6 ] || { echo "one run over the table kept no record per workload"; exit 1; }
# Slurm: three array tasks numbered from 4 (--array=4-6), srun standing in for Slurm's.
srun() { while [ "${1#--}" != "$1" ]; do shift; done; "$@"; }
export -f srun
for id in 4 5 6; do
  (cd "$src" && SLURM_ARRAY_TASK_ID=$id SLURM_ARRAY_TASK_MIN=4 SLURM_ARRAY_TASK_COUNT=3 TMAP_BUDGET=600 \
    bash tools/scale/slurm_tune.sbatch "$table" "$work/slurm" "${opts[@]}") > /dev/null
done
(cd "$src" && bash tools/scale/merge_shards.sh "$work/slurm") > /dev/null
diff <(best_set "$work/whole.jsonl") <(best_set "$work/slurm/best.jsonl") ||
  { echo "Slurm shards merged differ from one run"; exit 1; }
[ "$(wc -l < "$work/slurm/merged.jsonl")" -eq "$(cat "$work"/slurm/shard_*.jsonl | wc -l)" ] ||
  { echo "merging the shards lost or added records"; exit 1; }
# Kubernetes: the Indexed Job's pods run the manifest's command with JOB_COMPLETION_INDEX set.
grep -q '"tools/scale/tune_shard.sh", "/data/table.json", "/out", "--seed", "1"' "$src/tools/scale/k8s_tune.yaml" ||
  { echo "k8s_tune.yaml no longer runs tune_shard.sh as this check does"; exit 1; }
for index in 0 1 2; do
  (cd "$src" && JOB_COMPLETION_INDEX=$index TMAP_SHARDS=3 tools/scale/tune_shard.sh "$table" "$work/k8s" --seed 1 "${opts[@]}") > /dev/null
done
(cd "$src" && bash tools/scale/merge_shards.sh "$work/k8s") > /dev/null
diff <(best_set "$work/whole.jsonl") <(best_set "$work/k8s/best.jsonl") ||
  { echo "Kubernetes shards merged differ from one run"; exit 1; }
# A second round starts from the first: the merged log as --prior warm-starts and seeds it.
"$TMAP" tune --table "$table" --seed 2 "${opts[@]}" --shard 0/2 --prior "$work/k8s/merged.jsonl" \
  --log "$work/round2.jsonl" > /dev/null
[ -s "$work/round2.jsonl" ] || { echo "a second round with the merged log as --prior wrote nothing"; exit 1; }
echo "scale_check: ok"
