#!/usr/bin/env bash
# The depth study of docs/results.md: 16-bit, Echo 4-bit, 4-bit without compensation and Echo
# 8-bit (configs/depth/*.yaml) at 2, 4, 8 and 16 layers, seeds 1, 2, 3, tp = 4 on oversubscribed
# CPU ranks: 48 runs of 300 steps, about 70 minutes on 2 cores.
#   bash scripts/depth_study.sh [--out-root runs/depth] [--layers "2 4 8 16"] [--steps N] [--echo-train PATH]
# --steps N trains N steps instead of the configs' 300 (the cosine schedule stretches with it);
# give it its own --out-root, as a finished 300-step run would otherwise count as done.
# It goes depth by depth (all settings and seeds of 2 layers, then 4, ...) so that a study cut
# short is complete for the smaller depths; run it again to finish it: scripts/sweep.py skips
# finished runs and resumes unfinished ones from their last checkpoint. At the end
# scripts/depth_report.py writes OUT_ROOT/depth-gap.md (final validation loss, mean +- std
# over seeds, and the gap to 16-bit per depth) and OUT_ROOT/depth-gap.png. The runs use a copy of
# the echo_train binary (OUT_ROOT/echo_train), so rebuilding while the study runs changes nothing.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out_root=runs/depth
layers="2 4 8 16"
echo_train=$repo/build/echo_train
steps=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --out-root) out_root=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --echo-train) echo_train=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    *) echo "depth_study.sh: unknown argument '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
settings="bf16 echo4 nocomp4 echo8"
PY=/usr/bin/python3; [[ -x $PY ]] || PY=python3  # Debian's, with python3-yaml/-numpy/-matplotlib
mkdir -p "$out_root"
[[ -x $out_root/echo_train ]] || cp "$echo_train" "$out_root/echo_train"
grid_dir=$(mktemp -d)
trap 'rm -rf "$grid_dir"' EXIT

status=0
for depth in $layers; do
  printf 'model.layers: [%s]\nrun.seed: [1, 2, 3]\n' "$depth" > "$grid_dir/layers-$depth.yaml"
  [[ -z $steps ]] || printf 'train.steps: [%s]\n' "$steps" >> "$grid_dir/layers-$depth.yaml"
  for setting in $settings; do
    echo "== depth $depth, $setting"
    "$PY" "$repo/scripts/sweep.py" "$repo/configs/depth/$setting.yaml" "$grid_dir/layers-$depth.yaml" \
      --out-root "$out_root/$setting" --echo-train "$out_root/echo_train" || status=1
  done
done
"$PY" "$repo/scripts/depth_report.py" "$out_root" || status=1
exit $status
