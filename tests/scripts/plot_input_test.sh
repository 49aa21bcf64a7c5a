#!/usr/bin/env bash
# scripts/plot.py on hand-made runs: one label for two runs refused, and one run given twice (also
# as RUN/metrics.jsonl, with a trailing slash or through a link); labels that are one file name
# ('x y' and 'x-y') get a telemetry PNG each; --labels counted against sweep CSV
# files; a metrics.jsonl whose last line was cut off plotted up to it, with a warning; non-finite
# losses refused by file and line, values beyond +-1e300 refused, values up to +-1e300 plotted; FIFOs,
# huge integers, bad echo_depth values, a --ymax below the data and unknown telemetry directions.
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
# Non-finite losses are refused naming the file and line (the run diverged); values beyond +-1e300 (matplotlib
# cannot place them on an axis: a traceback) are refused naming the file and step or point; values up to
# +-1e300 are plotted (their squares and sums overflowed to nan in the smoothing).
for v in Infinity -Infinity NaN; do
  printf '{"step":1,"loss":3.0,"tokens_per_s":1}\n{"step":2,"loss":%s,"tokens_per_s":1}\n' "$v" > "$work/nf.jsonl"
  msg=$(plot "$work/nf.jsonl") && fail "a training loss of $v was plotted"
  [[ $msg == "plot: $work/nf.jsonl:2: 'loss' of a training line is $v, not a finite number (the run diverged)" ]] ||
    fail "training loss $v: $msg"
done
printf '{"step":1,"loss":3.0,"tokens_per_s":1}\n{"step":1,"val_loss":Infinity}\n' > "$work/nf.jsonl"
msg=$(plot "$work/nf.jsonl") && fail "a validation loss of Infinity was plotted"
[[ $msg == "plot: $work/nf.jsonl:2: 'val_loss' of a validation line is Infinity, not a finite number (the run diverged)" ]] ||
  fail "validation loss Infinity: $msg"
printf '{"step":1,"loss":3.0,"tokens_per_s":1}\n{"step":2,"loss":-1e308,"tokens_per_s":1}\n{"step":3,"loss":1e308,"tokens_per_s":1}\n' > "$work/huge.jsonl"
msg=$(plot "$work/huge.jsonl") && fail "a training loss of -1e308 was plotted"
[[ $msg == "plot: $work/huge.jsonl: the training loss of step 2 is -1e+308, beyond ±1e+300: too large to plot (did the run diverge?)" ]] ||
  fail "training loss -1e308: $msg"
printf '{"step":1,"loss":1e300,"tokens_per_s":1}\n{"step":2,"loss":-1e300,"tokens_per_s":1}\n{"step":3,"loss":1e300,"tokens_per_s":1}\n{"step":3,"val_loss":-1e300}\n' > "$work/big.jsonl"
rm -f "$work/out/loss.png"
msg=$(plot "$work/big.jsonl" --labels big) || fail "losses of +-1e300 were refused: $msg"
[[ $msg != *Warning* && -s $work/out/loss.png && $msg == *"big: step 3, tail-100 loss 3.3333e+299, last val loss -1.0000e+300 (step 3)"* ]] ||
  fail "losses of +-1e300: $msg"
sweep_csv() { printf 'point,optim.lr,status,final_val_loss\n'; printf '%s\n' "$@"; }
sweep_csv p1,0.001,done,1e308 p2,0.002,done,-1e308 > "$work/huge.csv"
msg=$(plot --sweep "$work/huge.csv" --sweep-x optim.lr) && fail "a sweep loss of 1e308 was plotted"
[[ $msg == "plot: $work/huge.csv: point p1: final_val_loss is 1e+308, beyond ±1e+300: too large to plot (did it diverge?)" ]] ||
  fail "sweep loss 1e308: $msg"
sweep_csv p1,0.001,done,nan > "$work/nan.csv"
msg=$(plot --sweep "$work/nan.csv" --sweep-x optim.lr) && fail "a sweep loss of nan was plotted"
[[ $msg == "plot: $work/nan.csv: point p1: final_val_loss is nan, not a finite number" ]] || fail "sweep loss nan: $msg"
sweep_csv p1,0.001,done,1e300 p2,0.001,done,-1e300 p3,0.002,done,-1e300 > "$work/big.csv"
msg=$(plot --sweep "$work/big.csv" --sweep-x optim.lr) || fail "sweep losses of +-1e300 were refused: $msg"
[[ $msg == *"optim.lr=0.001: final val loss 0.0000 ± 1.4142e+300 (n=2)"* && $msg != *Warning* ]] ||
  fail "sweep losses of +-1e300: $msg"
# Hostile inputs of audit 90, each one line with exit 1 (2: a command-line error), no traceback, no figure:
# a FIFO as --depth or --sweep CSV (open() blocked forever); integers beyond a double or 64 bits as a loss,
# step or site (an OverflowError); a depth CSV value that is inf, nan, 1e308 or a 0 where the axes are
# logarithmic (plotted with exit 0); --ymax not above the plotted losses (an inverted axis) or with --depth.
# Telemetry of an unknown direction is left out with a warning (a matplotlib ValueError when alone).
mkfifo "$work/fifo.csv"
msg=$(timeout 20 "$PY" "$src/scripts/plot.py" --out "$work/out" --depth "$work/fifo.csv" 2>&1); rc=$?
[[ $rc -eq 1 && $msg == "plot: $work/fifo.csv: not a regular file" ]] || fail "--depth FIFO: exit $rc: $msg"
msg=$(timeout 20 "$PY" "$src/scripts/plot.py" --out "$work/out" --sweep "$work/fifo.csv" --sweep-x optim.lr 2>&1); rc=$?
[[ $rc -eq 1 && $msg == "plot: $work/fifo.csv: not a regular file" ]] || fail "--sweep FIFO: exit $rc: $msg"
big=1$(printf '%0400d' 0)
hostile() {  # hostile LINE MESSAGE: a run whose metrics.jsonl has LINE second is refused with MESSAGE
  printf '{"step":1,"loss":3.0,"tokens_per_s":1}\n%s\n' "$1" > "$work/h.jsonl"
  msg=$(plot "$work/h.jsonl"); local rc=$?
  [[ $rc -eq 1 && $msg == "plot: $work/h.jsonl:2: $2" ]] || fail "metrics line ${1:0:60}...: exit $rc: $msg"
}
hostile "{\"step\":2,\"loss\":$big,\"tokens_per_s\":1}" \
  "'loss' of a training line is 100000000000... (401 digits), not a finite number (the run diverged)"
hostile "{\"step\":$big,\"loss\":2.0,\"tokens_per_s\":1}" "'step' of a training line is 100000000000... (401 digits), beyond 2^64"
hostile "{\"kind\":\"echo_site\",\"step\":1,\"direction\":\"forward\",\"site\":$big,\"delta_norm\":1,\"partial_sum_norm\":1}" \
  "'site' of a telemetry (echo_site) line is 100000000000... (401 digits), beyond 2^64"
printf '{"step":1,"loss":3.0,"tokens_per_s":1}\n{"kind":"echo_site","step":1,"direction":"sideways","site":0,"delta_norm":1,"partial_sum_norm":1}\n' \
  > "$work/side.jsonl"
rm -rf "$work/out"
msg=$(plot "$work/side.jsonl" --labels side) || fail "telemetry of direction 'sideways': $msg"
[[ $msg == *"plot: $work/side.jsonl: telemetry lines of direction 'sideways' (echo_train writes forward and backward) left out"* &&
   -s $work/out/loss.png && ! -e $work/out/telemetry-side.png ]] || fail "telemetry of direction 'sideways': $msg; $(ls "$work/out")"
depth_row() {  # depth_row ROW MESSAGE: a depth CSV with ROW is refused with MESSAGE
  printf 'case,eta,beta1,beta2,a,mu_w,sites,max_s_over_q,bound\ncoherent,1,0.9,0.99,1,1.095,8,1.5,2.1\n%s\n' "$1" > "$work/d.csv"
  msg=$(plot --depth "$work/d.csv"); local rc=$?
  [[ $rc -eq 1 && $msg == "plot: $work/d.csv: row 2: $2" ]] || fail "depth row $1: exit $rc: $msg"
}
depth_row coherent,1,0.9,0.99,1,1.095,16,inf,2.1 "max_s_over_q is inf, not a finite number"
depth_row coherent,1,0.9,0.99,1,1.095,16,nan,2.1 "max_s_over_q is nan, not a finite number"
depth_row coherent,1,0.9,0.99,1,1.095,16,1e308,2.1 "max_s_over_q is 1e308, beyond 1e+300: too large to plot"
depth_row coherent,1,0.9,0.99,1,1.095,0,1.5,2.1 "sites is 0, not positive (the axes are logarithmic)"
depth_row coherent,1,0.9,0.99,1,1.095,16,1.5,0 "bound is 0, not positive (the axes are logarithmic)"
depth_row coherent,nan,0.9,0.99,1,1.095,16,1.5,2.1 "eta is nan, not a finite number"
msg=$(plot "$work/a" --ymax -5); rc=$?
[[ $rc -eq 1 && $msg == "plot: --ymax -5: not above the lowest loss of the full-run panel (2.8000); give a top above it" ]] ||
  fail "--ymax -5: exit $rc: $msg"
msg=$(plot "$work/a" --ymax 4) || fail "--ymax 4 (above the losses) was refused: $msg"
msg=$(plot --depth "$work/d.csv" --ymax 3); rc=$?
[[ $rc -eq 2 && $msg == *"--ymax sets the top of loss.png (RUN directories); --depth does not use it" ]] ||
  fail "--depth --ymax: exit $rc: $msg"
echo "ok: plot.py labels and cut metrics lines"
