#!/bin/bash
# One shard of a workload table's tuning, as a Slurm array task or a Kubernetes Indexed Job's pod
# runs it (docs/scale.md):
#   tools/scale/tune_shard.sh TABLE OUT_DIR [tmap tune options...]
# The shard comes from the scheduler: JOB_COMPLETION_INDEX of TMAP_SHARDS in Kubernetes, else
# Slurm's SLURM_ARRAY_TASK_* variables. Its log is OUT_DIR/shard_<index>.jsonl; a --prior log
# (a merged log of an earlier round) seeds it.
set -euo pipefail
tmap=${TMAP:-tmap}
table=${1:?"usage: tune_shard.sh TABLE OUT_DIR [tmap tune options...]"}
out=${2:?"usage: tune_shard.sh TABLE OUT_DIR [tmap tune options...]"}
shift 2
if [ -n "${JOB_COMPLETION_INDEX:-}" ]; then
  shard="auto/${TMAP_SHARDS:?"set TMAP_SHARDS to the Indexed Job's completions"}" index=$JOB_COMPLETION_INDEX
else
  shard=auto index=$((${SLURM_ARRAY_TASK_ID:?"run as a Slurm array task or a Kubernetes Indexed Job"} - ${SLURM_ARRAY_TASK_MIN:-0}))
fi
mkdir -p "$out"
exec "$tmap" tune --table "$table" --shard "$shard" --log "$out/shard_$index.jsonl" --no-baselines "$@"
