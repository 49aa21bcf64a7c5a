#!/usr/bin/env bash
# scripts/plot.py on the runs sweep_test.sh left in WORK (ctest fixture sweep_runs): loss.png and
# one telemetry PNG per run, each a non-empty PNG file; a missing run is an error naming it.
# --sweep: the per-point mean +- std of a hand-written results.csv, and a missing key refused.
#   plot_test.sh SRC_DIR WORK
set -uo pipefail
src=$1 work=$2
PY=/usr/bin/python3; [[ -x $PY ]] || PY=python3
fail() { echo "FAIL: $*"; exit 1; }
runs=("$work"/sweep/seed=*)
((${#runs[@]} == 4)) || fail "expected the 4 runs of sweep_test in $work/sweep, found ${#runs[@]}"
out=$work/plots
rm -rf "$out"
log=$("$PY" "$src/scripts/plot.py" "${runs[@]}" --out "$out" 2>&1) || { echo "$log"; fail "plot.py exited non-zero"; }
pngs=("$out/loss.png" "$out"/telemetry-*.png)
((${#pngs[@]} == 5)) || fail "expected loss.png and 4 telemetry PNGs, got: ${pngs[*]}"
for f in "${pngs[@]}"; do
  [[ -s $f ]] || fail "$f is empty or missing"
  [[ $(head -c 8 "$f" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] || fail "$f lacks the PNG signature"
done
grep -q 'tail-100 loss' <<<"$log" || fail "plot.py printed no summary: $log"
msg=$("$PY" "$src/scripts/plot.py" "$work/no-such-run" --out "$out" 2>&1) && fail "a missing run was accepted"
[[ $msg == *no-such-run* ]] || fail "the message does not name the missing run: $msg"

# --sweep on a hand-written results.csv: lr 0.001 has losses 2.0, 2.2, 2.4 (mean 2.2, sample std
# 0.2); lr 0.004 has 1.9 and 2.1 done (mean 2.0, std 0.1414) and one unfinished point, left out.
csv=$work/sweep-hand.csv
cat > "$csv" <<'CSV'
point,optim.lr,run.seed,status,steps_done,steps,tail100_loss,final_val_loss,val_step,tokens_per_s,out_dir
lr=0.001_seed=1,0.001,1,done,10,10,2.1,2.0,10,100,x
lr=0.001_seed=2,0.001,2,done,10,10,2.3,2.2,10,100,x
lr=0.001_seed=3,0.001,3,done,10,10,2.5,2.4,10,100,x
lr=0.004_seed=1,0.004,1,done,10,10,2.0,1.9,10,100,x
lr=0.004_seed=2,0.004,2,done,10,10,2.2,2.1,10,100,x
lr=0.004_seed=3,0.004,3,unfinished,5,10,,,,,x
CSV
log=$("$PY" "$src/scripts/plot.py" --sweep "$csv" --sweep-x optim.lr --labels hand --out "$out" 2>&1) \
  || { echo "$log"; fail "plot.py --sweep exited non-zero"; }
grep -qF 'hand: optim.lr=0.001: final val loss 2.2000 ± 0.2000 (n=3)' <<<"$log" || fail "wrong lr=0.001 summary: $log"
grep -qF 'hand: optim.lr=0.004: final val loss 2.0000 ± 0.1414 (n=2)' <<<"$log" || fail "wrong lr=0.004 summary: $log"
[[ $(head -c 8 "$out/lr.png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] || fail "lr.png is not a PNG"
msg=$("$PY" "$src/scripts/plot.py" --sweep "$csv" --sweep-x comm.compensator.eta --out "$out" 2>&1) \
  && fail "a sweep key missing from the CSV was accepted"
[[ $msg == *comm.compensator.eta* ]] || fail "the message does not name the missing column: $msg"
echo "ok: plot.py wrote ${#pngs[@]} PNGs (loss.png and one telemetry figure per run) and lr.png from a sweep CSV"
