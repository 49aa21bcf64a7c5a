#!/usr/bin/env bash
# scripts/plot.py on hand-made runs: one label for two runs refused, and one run given twice (also
# as RUN/metrics.jsonl, with a trailing slash or through a link); labels that are one file name
# ('x y' and 'x-y') get a telemetry PNG each; --labels counted against sweep CSV
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
msg=$(plot "$work/a" "$work/a/") && fail "a run given twice (once with a trailing slash) was accepted"
[[ $msg == *"$work/a/ is given twice"* ]] || fail "a run given twice with a trailing slash: $msg"
msg=$(plot "$work/a" "$work/a/metrics.jsonl") && fail "a run given as RUN and RUN/metrics.jsonl was accepted"
[[ $msg == *"runs $work/a and $work/a/metrics.jsonl are one file ($work/a/metrics.jsonl); give it once"* ]] ||
  fail "RUN and RUN/metrics.jsonl: $msg"
ln -s a "$work/a-link"
msg=$(plot "$work/a" "$work/a-link") && fail "a run and a link to it were accepted"
[[ $msg == *"runs $work/a and $work/a-link are one file ($work/a/metrics.jsonl)"* ]] || fail "a run and a link to it: $msg"
# Labels that differ only in characters a file name cannot hold are two labels, with a telemetry PNG each.
msg=$(plot "$work/a" "$work/b" --labels "x y,x-y") || fail "labels 'x y' and 'x-y' were refused: $msg"
[[ $msg == *"'x-y': telemetry-x-y.png is another label's; writing telemetry-x-y-2.png"* &&
   -s $work/out/telemetry-x-y.png && -s $work/out/telemetry-x-y-2.png ]] ||
  fail "labels 'x y' and 'x-y': $msg; $(ls "$work/out")"
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
# Hostile inputs: one line naming the file (and the line), never a traceback.
for y in nan inf -inf; do
  msg=$(plot "$work/a" --ymax="$y") && fail "--ymax $y was accepted"
  [[ $msg == *"--ymax $y: must be a finite number"* && $msg != *Traceback* ]] || fail "--ymax $y: $msg"
done
printf 'case,eta\n\xff\xfe,1\n' > "$work/latin1.csv"
msg=$(plot --depth "$work/latin1.csv") && fail "a non-UTF-8 depth CSV was accepted"
[[ $msg == "plot: $work/latin1.csv: not UTF-8 text" ]] || fail "non-UTF-8 depth CSV: $msg"
msg=$(plot --sweep "$work/latin1.csv" --sweep-x optim.lr) && fail "a non-UTF-8 sweep CSV was accepted"
[[ $msg == "plot: $work/latin1.csv: not UTF-8 text" ]] || fail "non-UTF-8 sweep CSV: $msg"
printf 'case,eta,beta1,beta2,a,mu_w,sites,max_s_over_q,bound\ncoherent,0.5\n' > "$work/short.csv"
msg=$(plot --depth "$work/short.csv") && fail "a short depth CSV row was accepted"
[[ $msg == "plot: $work/short.csv:2: 2 fields, the header has 9" ]] || fail "short depth CSV row: $msg"
# A metrics line nested 100,000 deep is a bad line like any other (no RecursionError).
"$PY" -c 'import sys; sys.stdout.write("[" * 100000 + "]" * 100000 + "\n{\"step\":1,\"loss\":1,\"tokens_per_s\":1}\n")' > "$work/deep.jsonl"
msg=$(plot "$work/deep.jsonl") && fail "a metrics line nested 100,000 deep was accepted"
[[ $msg == "plot: $work/deep.jsonl:1: not a JSON line" ]] || fail "deeply nested metrics line: $msg"
echo "ok: plot.py labels and cut metrics lines"
