#!/usr/bin/env bash
# scripts/sweep.py as a user runs it, on a tiny model (2 ranks, 4 steps per point): a 2 x 2 grid
# over run.seed and comm.compensator.eta writes results.csv / results.md with one row per point
# and the seeds averaged; a second invocation runs nothing; an interrupted point is resumed;
# --print prints one command line per point; bad grids are refused before anything runs.
# Leaves its runs in WORK for plot_test.sh (ctest fixture sweep_runs).
#   sweep_test.sh SRC_DIR BUILD_DIR WORK MPIRUN [mpirun flags...]
set -uo pipefail
src=$1 build=$2 work=$3; shift 3
mpirun_cmd=$(printf '%q ' "$@")
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
PY=/usr/bin/python3; [[ -x $PY ]] || PY=python3
sweep=("$PY" "$src/scripts/sweep.py")
passed=0 failed=0
ok() { echo "ok: $*"; passed=$((passed + 1)); }
bad() { echo "FAIL: $*"; failed=$((failed + 1)); }
die() { echo "FAIL: $*"; echo "$passed passed, $((failed + 1)) failed"; exit 1; }

rm -rf "$work" && mkdir -p "$work" || die "cannot make $work"
# A small English-like corpus through the byte-level tokenizer.
for i in $(seq 1 300); do echo "the quick brown fox $i jumps over the lazy dog and runs to the river bank $((i * 7))"; done > "$work/corpus.txt"
"$build/echo_prep" --input "$work/corpus.txt" --format text --text-split line --tokenizer byte --output-prefix "$work/train" \
  --valid-prefix "$work/valid" --valid-fraction 0.1 --threads 1 >"$work/prep.log" 2>&1 || { cat "$work/prep.log"; die "echo_prep"; }
cat > "$work/base.yaml" <<YAML
run: {seed: 1, out_dir: $work/unused}
model: {vocab_size: 257, hidden: 32, ffn: 64, layers: 2, heads: 2, kv_heads: 2, head_dim: 16}
parallel: {tp: 2}
comm: {allreduce: echo, bits: 4, group_size: 32, telemetry_interval: 2}
optim: {lr: 1.0e-3, min_lr: 1.0e-4}
schedule: {warmup_steps: 2}
data: {train: $work/train, valid: $work/valid, seq_len: 32, eos_id: 256}
train: {steps: 4, micro_batch: 2, global_batch: 2, eval_interval: 2, eval_batches: 2, checkpoint_interval: 2,
        log_interval: 1}
YAML
printf 'run.seed: [1, 2]\ncomm.compensator.eta: [0.5, 0.75]\n' > "$work/grid.yaml"
root=$work/sweep
run_sweep() { "${sweep[@]}" "$work/base.yaml" "$work/grid.yaml" --out-root "$root" --echo-train "$build/echo_train" \
              --mpirun "$mpirun_cmd" "$@"; }

# 1. --print: one command line per point, nothing run or created.
out=$(run_sweep --print 2>&1); rc=$?
n=$(grep -c -- '-np 2 .*echo_train .*--set run.out_dir=' <<<"$out")
[[ $rc -eq 0 && $n -eq 4 && $(wc -l <<<"$out") -eq 4 ]] && ok "--print printed 4 command lines" ||
  bad "--print: exit $rc, $n command lines: $out"
grep -q -- "--set run.seed=2 --set comm.compensator.eta=0.75 --set run.out_dir=$root/seed=2_eta=0.75 --resume" <<<"$out" &&
  ok "--print names the point's overrides and out_dir" || bad "--print line for seed=2_eta=0.75 not as expected: $out"
[[ ! -e $root ]] && ok "--print created nothing" || bad "--print created $root"

# 2. The sweep: 4 points, CSV with 4 rows, MD with the seeds averaged per eta.
out=$(run_sweep 2>&1); rc=$?
[[ $rc -eq 0 ]] && ok "sweep ran 4 points" || { echo "$out"; tail -n 5 "$root"/logs/*.log; die "sweep exited $rc"; }
csv=$root/results.csv md=$root/results.md
[[ -s $csv && -s $md ]] || die "results.csv / results.md missing"
rows=$(tail -n +2 "$csv" | wc -l)
done_rows=$(tail -n +2 "$csv" | grep -c ',done,4,4,[0-9.]*,[0-9.]*,4,[0-9.]*,')
[[ $rows -eq 4 && $done_rows -eq 4 ]] && ok "results.csv: 4 rows, each done with tail-100, val loss and tokens/s" ||
  { cat "$csv"; bad "results.csv: $rows rows, $done_rows complete"; }
head -1 "$csv" | grep -q '^point,run.seed,comm.compensator.eta,status,' && ok "results.csv header names the grid keys" ||
  bad "results.csv header: $(head -1 "$csv")"
groups=$(grep -cE '^\| 0\.(5|75) \| 2/2 \| [0-9.]+ ± [0-9.]+ \| [0-9.]+ ± [0-9.]+ \|' "$md")
[[ $groups -eq 2 ]] && ok "results.md: mean ± std over 2 seeds for each eta" || { cat "$md"; bad "results.md: $groups group rows"; }

# 3. A second invocation runs nothing.
before=$(stat -c %Y "$root"/*/metrics.jsonl | md5sum)
out=$(run_sweep 2>&1); rc=$?
after=$(stat -c %Y "$root"/*/metrics.jsonl | md5sum)
[[ $rc -eq 0 && $out == *"4 finished, 0 to run"* && $out != *"] run "* && $before == "$after" ]] &&
  ok "second invocation skipped the 4 finished points" || bad "second invocation: exit $rc: $out"
[[ -z $(run_sweep --print 2>/dev/null) ]] && ok "--print prints nothing when every point is finished" ||
  bad "--print after the sweep printed lines"

# 4. An interrupted point (metrics only up to step 2, checkpoint of step 2) is resumed, not restarted.
p=$root/seed=2_eta=0.5
rm -rf "$p/checkpoints/step_00000004"
"$PY" - "$p/metrics.jsonl" <<'PYEOF'
import json, sys
lines = [l for l in open(sys.argv[1]) if json.loads(l)["step"] <= 2]
open(sys.argv[1], "w").writelines(lines)
PYEOF
out=$(run_sweep 2>&1); rc=$?
steps=$(grep -v echo_site "$p/metrics.jsonl" | grep -v val_loss | grep -o '"step":[0-9]*' | tr -d '"step:' | tr '\n' ' ')
[[ $rc -eq 0 && $out == *"3 finished, 1 to run"* && $out == *"resume seed=2_eta=0.5"* && $steps == "1 2 3 4 " ]] &&
  grep -q 'resumed from .*step_00000002' "$root/logs/seed=2_eta=0.5.log" && ok "the interrupted point resumed from step 2" ||
  bad "resume: exit $rc, steps '$steps': $out"

# 5. Bad grids: refused before anything runs, exit != 0, the message names the key.
check_bad() {  # check_bad GRID_TEXT WORD_IN_MESSAGE
  printf '%s\n' "$1" > "$work/bad.yaml"
  local out rc
  out=$("${sweep[@]}" "$work/base.yaml" "$work/bad.yaml" --out-root "$work/bad" --echo-train "$build/echo_train" \
        --mpirun "$mpirun_cmd" 2>&1); rc=$?
  if [[ $rc -ne 0 && $out == *"$2"* && ! -e $work/bad ]]; then ok "refused: $1 ($out)"; else bad "grid '$1': exit $rc: $out"; fi
}
check_bad 'comm.compensator.etaa: [0.5, 0.7]' "unknown key 'comm.compensator.etaa'"
check_bad $'run.seed: [1]\ncomm.bitz: [4, 8]' "unknown key 'comm.bitz'"
check_bad 'run.seed: []' "'run.seed' is empty"
check_bad 'comm.compensator.eta: 0.5' "'comm.compensator.eta' must be a list"
check_bad 'optim.lr: [fast]' "'optim.lr'"

# 6. The shipped grids are valid with the bases they are written for (--print runs nothing).
check_shipped() {  # check_shipped BASE GRID POINTS
  local out rc
  out=$("${sweep[@]}" "$src/$1" "$src/$2" --print --out-root "$work/shipped" 2>&1); rc=$?
  if [[ $rc -eq 0 && $(grep -c ' --resume$' <<<"$out") -eq $3 ]]; then ok "$2 over $1: $3 points"
  else bad "$2 over $1: exit $rc, expected $3 command lines: $out"; fi
}
check_shipped configs/paper/lr-ablation.yaml configs/paper/grids/lr-ablation.yaml 4
check_shipped configs/depth/bf16.yaml configs/depth/grids/layers-seeds.yaml 12
check_shipped configs/depth/echo4.yaml configs/depth/grids/eta-seeds.yaml 12
check_shipped configs/depth/bf16.yaml configs/depth/grids/lr-seeds.yaml 9

echo "$passed passed, $failed failed"
((failed == 0))
