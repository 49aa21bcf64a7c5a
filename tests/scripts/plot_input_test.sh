#!/usr/bin/env bash
# scripts/plot.py on hand-made runs: one label for two runs (or one run given twice) refused, as
# the second telemetry-LABEL.png would overwrite the first; --labels counted against sweep CSV
# files; a metrics.jsonl whose last line was cut off plotted up to it, with a warning.
#   plot_input_test.sh SRC_DIR WORK
set -uo pipefail
src=$1 work=$2
PY=/usr/bin/python3; [[ -x $PY ]] || PY=python3
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work" && mkdir -p "$work"/a "$work"/b
for d in a b; do
  printf '%s\n' '{"step":1,"loss":3.0,"tokens_per_s":100}' '{"step":2,"loss":2.9,"tokens_per_s":100}' \
    '{"step":2,"val_loss":2.8}' > "$work/$d/metrics.jsonl"
  printf '{"kind":"echo_site","step":2,"direction":"forward","site":0,"delta_norm":1,"partial_sum_norm":1}\n' \
    >> "$work/$d/metrics.jsonl"
done
plot() { "$PY" "$src/scripts/plot.py" --out "$work/out" "$@" 2>&1; }
msg=$(plot "$work/a" "$work/b" --labels A,A) && fail "two runs labelled A were accepted"
[[ $msg == *"runs $work/a and $work/b have the same label ('A' and 'A')"* ]] || fail "duplicate labels: $msg"
msg=$(plot "$work/a" "$work/a") && fail "a run given twice was accepted"
[[ $msg == *"$work/a is given twice"* ]] || fail "a run given twice: $msg"
msg=$(plot --sweep "$work/x.csv" --sweep-x optim.lr --labels a,b) && fail "2 labels for 1 sweep CSV were accepted"
[[ $msg == *"--labels names 2 sweep CSV files, but 1 were given"* ]] || fail "--sweep --labels count: $msg"
# A run killed while writing its step-3 line.
printf '{"step":3,"lo' >> "$work/b/metrics.jsonl"
msg=$(plot "$work/a" "$work/b") || fail "a metrics.jsonl with a cut last line was refused: $msg"
[[ $msg == *"$work/b/metrics.jsonl:5: the last line is cut off"*"plotting the 4 lines before it"* ]] ||
  fail "no warning about the cut line: $msg"
[[ $msg == *"b: step 2, tail-100 loss 2.9500, last val loss 2.8000 (step 2)"* ]] || fail "cut run's summary: $msg"
[[ -s $work/out/telemetry-a.png && -s $work/out/telemetry-b.png ]] || fail "telemetry PNGs missing: $(ls "$work/out")"
# A bad line before the last is still an error naming it.
printf '{"bad\n{"step":1,"loss":1}\n' > "$work/c.jsonl"
msg=$(plot "$work/c.jsonl") && fail "a bad first line was accepted"
[[ $msg == *"$work/c.jsonl:1: not a JSON line"* ]] || fail "bad first line: $msg"
echo "ok: plot.py labels and cut metrics lines"
