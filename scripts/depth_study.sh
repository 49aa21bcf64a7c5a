#!/usr/bin/env bash
# The depth study of docs/results.md: 16-bit, Echo 4-bit, 4-bit without compensation and Echo
# 8-bit (configs/depth/*.yaml) at 2, 4, 8 and 16 layers, seeds 1, 2, 3, tp = 4 on oversubscribed
# CPU ranks: 48 runs of 300 steps, about 70 minutes on 2 cores.
#   bash scripts/depth_study.sh [--out-root runs/depth] [--layers "2 4 8 16"] [--seeds "1 2 3"] [--steps N]
#                               [--echo-train PATH]
# --steps N trains N steps instead of the configs' 300 (the cosine schedule stretches with it; N a
# multiple of their eval_interval, 150, so that the run ends with a validation);
# give it its own --out-root: the points are named layers=L_seed=S_steps=N, so they are runs of
# their own, but scripts/depth_report.py refuses a study whose finished runs differ in length.
# It goes depth by depth (2 layers, then 4, ...) and within a depth seed by seed (seed 1 of all
# four settings, then seed 2, ...), so that a study cut short is complete for the smaller depths
# and has whole paired seeds at the depth it stopped in; run it again to finish it: scripts/sweep.py skips
# finished runs and resumes unfinished ones from their last checkpoint. At the end
# scripts/depth_report.py writes OUT_ROOT/depth-gap.md (final validation loss, mean +- std
# over seeds, and the gap to 16-bit per depth) and OUT_ROOT/depth-gap.png. The runs use a copy of
# the echo_train binary (OUT_ROOT/echo_train), so rebuilding while the study runs changes nothing;
# --echo-train PATH replaces that copy.
# A SIGTERM, SIGHUP or SIGINT (Ctrl-C) is passed on to the running sweep, which saves a checkpoint;
# the study then exits 128 + n, and running it again resumes.
# --layers and --seeds are whole numbers separated by spaces (layers >= 1, seeds >= 0, none twice);
# an empty list, an option with an empty value and an --echo-train that is not an executable file
# are refused before anything runs.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out_root=runs/depth
layers="2 4 8 16"
seeds="1 2 3"
echo_train=$repo/build/echo_train
echo_train_given=""
STUDY=depth_study.sh
source "$repo/scripts/study_common.sh"  # LC_ALL=C, die, run_child, need, check_paths, make_out_root, copy_echo_train
steps=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --out-root) need "$@"; out_root=$2; shift 2 ;;
    --layers) need "$@"; layers=$2; shift 2 ;;
    --seeds) need "$@"; seeds=$2; shift 2 ;;
    --echo-train) need "$@"; echo_train=$2; echo_train_given=1; shift 2 ;;
    --steps) need "$@"; steps=$2; shift 2 ;;
    *) echo "depth_study.sh: unknown argument '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
settings="bf16 echo4 nocomp4 echo8"
PY=/usr/bin/python3; [[ -x $PY ]] || PY=python3  # Debian's, with python3-yaml/-numpy/-matplotlib
# echo_train validates every train.eval_interval steps, not at the end: a length that is not a
# multiple would end without the final validation depth_report.py reports.
every=$("$PY" -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["train"]["eval_interval"])' \
  "$repo/configs/depth/bf16.yaml")
if [[ -n $steps ]] && ! [[ $steps =~ ^[1-9][0-9]{0,8}$ ]]; then
  die "--steps $steps: not a whole number >= 1 (at most 9 digits, no leading zero)"
elif [[ -n $steps ]] && (((steps % every) != 0)); then
  die "--steps $steps: not a multiple of the configs' train.eval_interval ($every)"
fi
# numbers OPTION VALUE MIN: VALUE is a list of whole numbers >= MIN, separated by spaces, none twice.
numbers() {
  local n seen=" " list
  # One line: `read` would take the first line only and leave the rest to fail in sweep.py.
  [[ $2 != *$'\n'* ]] || die "$1: a list on one line, numbers separated by spaces: $1 \"1 2 3\""
  read -r -a list <<<"$2"
  ((${#list[@]} > 0)) || die "$1 '$2' lists no number"
  for n in "${list[@]}"; do
    [[ $n =~ ^(0|[1-9][0-9]{0,8})$ ]] && ((n >= $3)) ||
      die "$1 '$2': '$n' is not a whole number >= $3 (at most 9 digits, no leading zero; separated by spaces: $1 \"1 2 3\")"
    [[ $seen != *" $n "* ]] || die "$1 '$2' lists $n twice"
    seen+="$n "
  done
}
numbers --layers "$layers" 1
numbers --seeds "$seeds" 0
check_paths
make_out_root
copy_echo_train
grid_dir=$(mktemp -d)
trap 'rm -rf "$grid_dir"' EXIT

status=0
sweep() {  # sweep SETTING GRID: the setting's points of GRID; sweep.py skips the finished ones
  run_child "$PY" "$repo/scripts/sweep.py" "$repo/configs/depth/$1.yaml" "$2" --out-root "$out_root/$1" \
    --echo-train "$out_root/echo_train" || status=1
}
grid() {  # grid FILE DEPTH SEEDS...
  local file=$1 depth=$2; shift 2
  printf 'model.layers: [%s]\nrun.seed: [%s]\n' "$depth" "$(IFS=,; echo "$*" | sed 's/,/, /g')" > "$file"
  [[ -z $steps ]] || printf 'train.steps: [%s]\n' "$steps" >> "$file"
}
for depth in $layers; do
  for seed in $seeds; do
    grid "$grid_dir/one.yaml" "$depth" "$seed"
    for setting in $settings; do
      echo "== depth $depth, seed $seed, $setting"
      sweep "$setting" "$grid_dir/one.yaml"
    done
  done
  # The points are finished now (a failed one is tried once more): this writes each setting's
  # results table over all the seeds.
  grid "$grid_dir/all.yaml" "$depth" $seeds
  for setting in $settings; do sweep "$setting" "$grid_dir/all.yaml" >/dev/null; done
done
run_child "$PY" "$repo/scripts/depth_report.py" "$out_root" || status=1
exit $status
