#!/usr/bin/env bash
# The eta and learning-rate sweeps of docs/results.md, through scripts/sweep.py:
#   Echo 4-bit over comm.compensator.eta (configs/depth/grids/eta-seeds.yaml), and 16-bit and
#   Echo 4-bit over optim.lr (configs/depth/grids/lr-seeds.yaml); 2 layers, tp = 4 on
#   oversubscribed CPU ranks, 3 seeds: 30 runs of 300 steps, about 35 minutes on 2 cores.
#   bash scripts/eta_lr_study.sh [--out-root runs/sweeps] [--echo-train PATH]
# Finished runs are skipped and unfinished ones resumed, so a study cut short is finished by
# running it again; a SIGTERM, SIGHUP or SIGINT (Ctrl-C) is passed on to the running sweep, which
# saves a checkpoint, and the study exits 128 + n. At the end scripts/plot.py --sweep draws
# OUT_ROOT/eta.png and OUT_ROOT/lr.png (final validation loss, mean +- std over seeds) from the sweeps' results.csv; the tables are
# OUT_ROOT/*/results.md. The runs use a copy of echo_train (OUT_ROOT/echo_train), which
# --echo-train PATH replaces. An option with an empty value, an --out-root that is not a folder and
# an --echo-train that is not an executable file are refused before anything runs.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out_root=runs/sweeps
echo_train=$repo/build/echo_train
echo_train_given=""
STUDY=eta_lr_study.sh
source "$repo/scripts/study_common.sh"  # LC_ALL=C, die, run_child, need, check_paths, make_out_root, copy_echo_train
while [[ $# -gt 0 ]]; do
  case $1 in
    --out-root) need "$@"; out_root=$2; shift 2 ;;
    --echo-train) need "$@"; echo_train=$2; echo_train_given=1; shift 2 ;;
    *) echo "eta_lr_study.sh: unknown argument '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
PY=/usr/bin/python3; [[ -x $PY ]] || PY=python3  # Debian's, with python3-yaml/-numpy/-matplotlib
check_paths
make_out_root
copy_echo_train
sweep() {  # BASE GRID OUT
  echo "== $1 over $2"
  run_child "$PY" "$repo/scripts/sweep.py" "$repo/configs/depth/$1.yaml" "$repo/configs/depth/grids/$2.yaml" \
    --out-root "$out_root/$3" --echo-train "$out_root/echo_train" || status=1
}
status=0
sweep echo4 eta-seeds eta-echo4
sweep bf16 lr-seeds lr-bf16
sweep echo4 lr-seeds lr-echo4
run_child "$PY" "$repo/scripts/plot.py" --out "$out_root" --sweep-x comm.compensator.eta \
  --sweep "$out_root/eta-echo4/results.csv" --labels "Echo 4-bit" || status=1
run_child "$PY" "$repo/scripts/plot.py" --out "$out_root" --sweep-x optim.lr \
  --sweep "$out_root/lr-bf16/results.csv" "$out_root/lr-echo4/results.csv" --labels "16-bit,Echo 4-bit" || status=1
exit $status
