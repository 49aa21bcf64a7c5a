#!/usr/bin/env bash
# scripts/plot.py on the runs sweep_test.sh left in WORK (ctest fixture sweep_runs): loss.png and
# one telemetry PNG per run, each a non-empty PNG file; a missing run is an error naming it.
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
echo "ok: plot.py wrote ${#pngs[@]} PNGs (loss.png and one telemetry figure per run)"
