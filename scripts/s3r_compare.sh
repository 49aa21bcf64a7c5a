#!/usr/bin/env bash
# The S3R training comparison (issue: INT8 linear layers): the quickstart model on the demo
# corpus, for each backward mode and 3 seeds, final validation loss as a Markdown table.
#   bash scripts/s3r_compare.sh [STEPS] [--out runs/s3r/table.md] [--runs runs/s3r] [--echo-train PATH]
# --out gets the whole output (a title line and the table): paste the table into
# docs/s3r_comparison.md, whose analysis below it --out would replace.
# The table goes to --out only when every run finished (written beside it, then moved into place,
# so a failed comparison leaves the old file as it was, and a replaced file keeps its mode); without
# --out it is printed at the end.
# The runs go to --runs (default runs/s3r), each with its log RUNS/NAME_SEED.log.
# Refused before anything runs: STEPS that is not a whole number >= 1 (without a leading zero) or
# given twice, an option with an empty value, an --out that is a folder or below a file or a folder
# this user cannot write in (a missing folder of --out is made, as --runs is), a --runs that is
# not a folder, an --echo-train that is not an executable file.
# A SIGTERM, SIGHUP or SIGINT (Ctrl-C) is passed on to the running echo_train (through
# scripts/mpirun.sh: it stops at the end of its step); the script then exits 128 + n, --out as it was.
set -euo pipefail
export LC_ALL=C  # printf %f and bc: a decimal point whatever the caller's locale (de_DE wants 2,0)
steps="" out="" out_arg="" runs=runs/s3r echo_train=""  # the defaults (runs/s3r, build/echo_train): in the repository
STUDY=s3r_compare.sh
source "$(dirname "${BASH_SOURCE[0]}")/study_common.sh"  # die, need, run_child
given() { [[ $1 == /* ]] && echo "$1" || echo "$PWD/$1"; }  # a given path: relative to the caller's folder
while [[ $# -gt 0 ]]; do
  case $1 in
    --out) need "$@"; out=$(given "$2"); out_arg=$2; shift 2 ;;
    --runs) need "$@"; runs=$(given "$2"); shift 2 ;;
    --echo-train) need "$@"; echo_train=$(given "$2"); shift 2 ;;
    -[!0-9]*) die "unknown option '$1' (see the header of $0)" ;;
    *) [[ $1 =~ ^[1-9][0-9]{0,8}$ ]] || die "STEPS '$1' is not a whole number >= 1 (at most 9 digits, no leading zero; see the header of $0)"
       [[ -z $steps ]] || die "STEPS given twice ('$steps' and '$1'): give one number"
       steps=$1; shift ;;
  esac
done
steps=${steps:-200}
if [[ -n $out ]]; then
  [[ $out != */ && ! -d $out ]] || die "--out $out_arg is a folder: give the table's file name (--out DIR/table.md)"
  [[ ! -e $out || -f $out ]] || die "--out $out_arg is not a regular file"
  # A missing folder is made (as --runs is) once the checks pass; what exists of it must be a
  # folder this user can write in.
  have=$(dirname "$out")
  while [[ ! -e $have && ! -L $have ]]; do have=$(dirname "$have"); done
  [[ -d $have ]] || die "--out $out_arg: $have is not a folder"
  [[ -w $have ]] || die "--out $out_arg: folder $have is not writable"
  # As the kernel reads it ("missing/../b/t.md" is b/t.md): mkdir -p would make "missing" too.
  out=$(realpath -m -- "$out")
fi
cd "$(dirname "$0")/.."
echo_train=${echo_train:-$PWD/build/echo_train}
[[ ! -e $runs || -d $runs ]] || die "--runs $runs is not a folder"
[[ -f $echo_train && -x $echo_train ]] ||
  die "echo_train $echo_train: no executable file there (build it, or name one with --echo-train)"
modes=(
  "bf16|linear.mode=bf16"
  "int8 RTNE|linear.mode=int8 linear.backward_rounding=rtne linear.ec=none"
  "independent SR|linear.mode=int8 linear.backward_rounding=sr_independent linear.ec=none"
  "S3R|linear.mode=int8 linear.backward_rounding=s3r linear.thresholds=per_token linear.ec=none"
  "S3R-EC dx_only|linear.mode=int8 linear.backward_rounding=s3r linear.thresholds=per_token linear.ec=dx_only"
  "S3R-EC two_way|linear.mode=int8 linear.backward_rounding=s3r linear.thresholds=per_token linear.ec=two_way"
)
err=$(mkdir -p "$runs" 2>&1) || die "--runs $runs: cannot make the folder: ${err#mkdir: }"
[[ -z $out ]] || err=$(mkdir -p "$(dirname "$out")" 2>&1) || die "--out $out_arg: cannot make its folder: ${err#mkdir: }"
# The table is built in a temporary file: beside --out, so that the final mv is a rename.
table=$(mktemp "${out:-${TMPDIR:-/tmp}/s3r_compare}.XXXXXX")
trap 'rm -f "$table"' EXIT
{
  echo "Quickstart model (configs/quickstart.yaml, Echo 4-bit all-reduces, tp = 2), $steps steps, eval every"
  echo "$steps steps on 8 validation batches; \`bash scripts/s3r_compare.sh $steps${out_arg:+ --out $(printf %q "$out_arg")}\`."
  echo
  echo "| backward | seed 1 | seed 2 | seed 3 | mean |"
  echo "|---|---|---|---|---|"
} > "$table"
for entry in "${modes[@]}"; do
  name=${entry%%|*}
  read -r -a sets <<<"${entry#*|}"
  row="| $name |"
  sum=0
  for seed in 1 2 3; do
    run=$runs/${name// /_}_$seed
    args=(--overwrite --set "run.seed=$seed" --set "run.out_dir=$run" --set "train.steps=$steps"
          --set "train.eval_interval=$steps" --set train.checkpoint_interval=0 --set train.log_interval=1000
          --set comm.telemetry_interval=0)
    for s in "${sets[@]}"; do args+=(--set "$s"); done
    echo "== $name, seed $seed" >&2
    OPENBLAS_NUM_THREADS=1 run_child bash scripts/mpirun.sh -np 2 "$echo_train" configs/quickstart.yaml "${args[@]}" \
      >"$run.log" 2>&1 ||
      { echo "s3r_compare.sh: run $run failed; see $run.log" >&2; exit 1; }
    val=$(grep -o '"val_loss":[0-9.eE+-]*' "$run/metrics.jsonl" 2>/dev/null | tail -1 | cut -d: -f2) || true
    [[ -n $val ]] || { echo "s3r_compare.sh: run $run logged no val_loss in $run/metrics.jsonl" >&2; exit 1; }
    row+=" $(printf '%.4f' "$val") |"
    sum=$(echo "$sum + $val" | bc -l)
  done
  echo "$row $(printf '%.4f' "$(echo "$sum / 3" | bc -l)") |" >> "$table"
done
if [[ -n $out ]]; then
  # mktemp made the table 600: give it the mode of the --out it replaces, or a new file's (0666 less the umask).
  if [[ -e $out ]]; then chmod --reference="$out" "$table"; else chmod "$(printf '%o' $((0666 & ~0$(umask))))" "$table"; fi
  mv "$table" "$out" && echo "wrote $out" >&2
else
  cat "$table"
fi
