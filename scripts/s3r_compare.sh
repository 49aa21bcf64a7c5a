#!/usr/bin/env bash
# The S3R training comparison (issue: INT8 linear layers): the quickstart model on the demo
# corpus, for each backward mode and 3 seeds, final validation loss as a Markdown table.
#   bash scripts/s3r_compare.sh [STEPS] > docs/s3r_comparison.md
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-200}
modes=(
  "bf16|linear.mode=bf16"
  "int8 RTNE|linear.mode=int8 linear.backward_rounding=rtne linear.ec=none"
  "independent SR|linear.mode=int8 linear.backward_rounding=sr_independent linear.ec=none"
  "S3R|linear.mode=int8 linear.backward_rounding=s3r linear.thresholds=per_token linear.ec=none"
  "S3R-EC dx_only|linear.mode=int8 linear.backward_rounding=s3r linear.thresholds=per_token linear.ec=dx_only"
  "S3R-EC two_way|linear.mode=int8 linear.backward_rounding=s3r linear.thresholds=per_token linear.ec=two_way"
)
echo "Quickstart model (configs/quickstart.yaml, Echo 4-bit all-reduces, tp = 2), $steps steps, eval every"
echo "$steps steps on 8 validation batches; \`bash scripts/s3r_compare.sh $steps\`."
echo
echo "| backward | seed 1 | seed 2 | seed 3 | mean |"
echo "|---|---|---|---|---|"
for entry in "${modes[@]}"; do
  name=${entry%%|*}
  read -r -a sets <<<"${entry#*|}"
  row="| $name |"
  sum=0
  for seed in 1 2 3; do
    out=runs/s3r/${name// /_}_$seed
    args=(--overwrite --set run.seed=$seed --set run.out_dir=$out --set train.steps=$steps
          --set train.eval_interval=$steps --set train.checkpoint_interval=0 --set train.log_interval=1000
          --set comm.telemetry_interval=0)
    for s in "${sets[@]}"; do args+=(--set "$s"); done
    OPENBLAS_NUM_THREADS=1 bash scripts/mpirun.sh -np 2 build/echo_train configs/quickstart.yaml "${args[@]}" >"$out.log" 2>&1 ||
      { echo "run $out failed; see $out.log" >&2; exit 1; }
    val=$(grep -o '"val_loss":[0-9.eE+-]*' "$out/metrics.jsonl" | tail -1 | cut -d: -f2)
    row+=" $(printf '%.4f' "$val") |"
    sum=$(echo "$sum + $val" | bc -l)
  done
  echo "$row $(printf '%.4f' "$(echo "$sum / 3" | bc -l)") |"
done
