#!/usr/bin/env bash
# scripts/depth_report.py on a hand-made study folder: the table's means, stds and paired gaps
# against numbers worked out by hand, an unfinished run listed and left out (also one stopped
# right after a mid-run validation, and one with a cut metrics.jsonl), the PNG written, runs of
# different train.steps refused naming them, and a folder without the baseline refused naming it;
# FIFOs, deep YAML, a huge integer loss and a non-UTF-8 OUT_ROOT (audit 90).
#   depth_report_test.sh SRC_DIR WORK
set -uo pipefail
src=$1 work=$2
PY=/usr/bin/python3; [[ -x $PY ]] || PY=python3
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work" && mkdir -p "$work"
# run SETTING LAYERS SEED LAST_STEP VAL_LOSS [VAL_STEP [STEPS [ROOT [SUFFIX]]]]: a metrics.jsonl of
# 3 logged steps and one validation (at step 4), and the config.yaml of a train.steps = 4 run.
run() {
  local dir=${8:-$work/study}/$1/layers=$2_seed=$3${9:-}
  mkdir -p "$dir"
  printf 'train:\n  steps: %d\n  eval_interval: 2\n' "${7:-4}" > "$dir/config.yaml"
  printf '{"step":%d,"loss":3.0,"tokens_per_s":100}\n{"step":%d,"loss":2.9,"tokens_per_s":100}\n' 1 2 > "$dir/metrics.jsonl"
  printf '{"kind":"echo_site","step":2,"direction":"forward","site":0,"delta_norm":1,"partial_sum_norm":1}\n' >> "$dir/metrics.jsonl"
  printf '{"step":%d,"loss":2.8,"tokens_per_s":100}\n{"step":%d,"val_loss":%s}\n' "$4" "${6:-4}" "$5" >> "$dir/metrics.jsonl"
}
# Depth 2: baseline 2.0, 2.2, 2.4; echo4 +1 %, +0 %, +1 % -> gap 0.67 +- 0.58 %,
# echo4 val 2.02, 2.2, 2.424: mean 2.214667, sample std sqrt(0.081931 / 2) = 0.2024.
run bf16 2 1 4 2.0; run bf16 2 2 4 2.2; run bf16 2 3 4 2.4
run echo4 2 1 4 2.02; run echo4 2 2 4 2.2; run echo4 2 3 4 2.424
# Depth 4: echo4 has a run cut short at step 3 (its validation is at step 4): n = 2, gap from
# seeds 1 and 2: -1 % and +3 % -> 1.00 +- 2.83 %.
run bf16 4 1 4 1.9; run bf16 4 2 4 2.1; run bf16 4 3 4 2.3
run echo4 4 1 4 1.881; run echo4 4 2 4 2.163; run echo4 4 3 3 9.9
# Depth 8: echo4 stopped right after the mid-run validation at step 3 of 4 (train.steps): left out.
run bf16 8 1 4 1.8; run echo4 8 1 3 1.7 3
# ... and one whose last validation is not at train.steps (eval_interval 3 does not divide 4: no final one).
run echo4 8 2 4 1.7 3 && printf 'train:\n  steps: 4\n  eval_interval: 3\n' > "$work/study/echo4/layers=8_seed=2/config.yaml"
# ... and one at its last step whose final evaluation (owed: eval_interval 2 divides 4) a stop signal abandoned.
run echo4 8 3 4 1.7 2
# Depth 16: a metrics.jsonl cut off mid-line (a run killed while writing): listed, not fatal.
run bf16 16 1 4 1.6 && printf '{"step":5,"lo' >> "$work/study/bf16/layers=16_seed=1/metrics.jsonl"
out=$("$PY" "$src/scripts/depth_report.py" "$work/study" 2>&1) || { echo "$out"; fail "depth_report.py exited non-zero"; }
md=$work/study/depth-gap.md
[[ -s $md ]] || fail "no depth-gap.md"
grep -q '^| 2 | 2.2000 ± 0.2000 | 2.2147 ± 0.2024 |$' "$md" || fail "depth-2 loss row wrong: $(grep '^| 2 ' "$md" | head -1)"
grep -q '^| 2 | 0.67 ± 0.58 % |$' "$md" || fail "depth-2 gap row wrong: $(grep '^| 2 ' "$md" | tail -1)"
grep -q '^| 4 | 1.00 ± 2.83 % (n=2) |$' "$md" || fail "depth-4 gap row wrong: $(grep '^| 4 ' "$md" | tail -1)"
grep -q 'echo4/layers=4_seed=3 (step 3 of 4)' "$md" || fail "the unfinished run is not listed"
grep -q 'echo4/layers=8_seed=1 (step 3 of 4)' "$md" || fail "a run stopped after a mid-run validation is not listed"
grep -q 'echo4/layers=8_seed=2 (no validation at step 4, the last at step 3; train.eval_interval must divide train.steps)' "$md" ||
  fail "a run without its final validation (eval_interval does not divide train.steps) is not listed with the reason"
grep -q 'echo4/layers=8_seed=3 (final evaluation missing: no validation at step 4, the last at step 2; the run stopped during it: rerun it with --resume)' "$md" ||
  fail "a run whose final evaluation was abandoned is not listed as 'final evaluation missing': $(grep -o 'echo4/layers=8_seed=3 ([^)]*)' "$md")"
grep -q '^| 8 | – |$' "$md" || fail "depth-8 gap row counts the run stopped mid-way: $(grep '^| 8 ' "$md" | tail -1)"
grep -q 'bf16/layers=16_seed=1 (bad metrics.jsonl: .*:6: not a JSON line)' "$md" ||
  fail "the run with a cut metrics.jsonl is not listed with its reason"
[[ $(head -c 8 "$work/study/depth-gap.png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] ||
  fail "depth-gap.png missing or not a PNG"
# The same study with the point names of depth_study.sh --steps (layers=L_seed=S_steps=N).
for d in "$work"/study/*/layers=*; do
  rel=${d#"$work/study/"}
  mkdir -p "$work/long/${rel%/*}" && cp -r "$d" "$work/long/${rel}_steps=1200"
done
"$PY" "$src/scripts/depth_report.py" "$work/long" >/dev/null 2>&1 || fail "depth_report.py refused _steps=N points"
grep -q '^| 2 | 0.67 ± 0.58 % |$' "$work/long/depth-gap.md" || fail "_steps=N points: depth-2 gap row wrong"
# Runs of 7 and 3 steps (depth_study.sh --steps 7, then --steps 3, into one out-root) are refused.
run bf16 2 1 7 2.0 7 7 "$work/mixed" _steps=7; run bf16 2 2 3 2.2 3 3 "$work/mixed" _steps=3
msg=$("$PY" "$src/scripts/depth_report.py" "$work/mixed" 2>&1) && fail "runs of 7 and 3 steps were averaged"
[[ $msg == *"3 steps (bf16/layers=2_seed=2_steps=3)"*"7 steps (bf16/layers=2_seed=1_steps=7)"* ]] ||
  fail "the message does not name the runs of each length: $msg"
rm -rf "$work/study/bf16"
msg=$("$PY" "$src/scripts/depth_report.py" "$work/study" 2>&1) && fail "a study without its baseline was accepted"
[[ $msg == *"baseline setting 'bf16'"* ]] || fail "the message does not name the missing baseline: $msg"
# Runs whose numbers or config.yaml cannot be used are listed with the reason, not a traceback: a
# baseline loss of 0 (the gap divides by it), a NaN loss, a config.yaml that is not UTF-8 or has a key twice.
h=$work/hostile
run bf16 2 1 4 2.0 4 4 "$h"; run bf16 2 2 4 0 4 4 "$h"; run bf16 2 3 4 NaN 4 4 "$h"
run echo4 2 1 4 2.02 4 4 "$h"; run echo4 2 2 4 2.2 4 4 "$h"; run echo4 2 3 4 2.4 4 4 "$h"
run echo4 2 4 4 2.4 4 4 "$h" && printf 'train:\n  steps: 4\xff\n' > "$h/echo4/layers=2_seed=4/config.yaml"
run echo4 2 5 4 2.4 4 4 "$h" && printf 'train:\n  steps: 4\n  steps: 4\n' > "$h/echo4/layers=2_seed=5/config.yaml"
run echo4 2 6 4 Infinity 4 4 "$h"
msg=$("$PY" "$src/scripts/depth_report.py" "$h" 2>&1) || fail "hostile runs: exit non-zero: $msg"
[[ $msg != *Traceback* && $msg == *"bf16/layers=2_seed=2 (final validation loss is 0, not a positive finite number)"* &&
   $msg == *"bf16/layers=2_seed=3 (diverged: $h/bf16/layers=2_seed=3/metrics.jsonl:5: 'val_loss' of a validation line is NaN, not a finite number (the run diverged))"* &&
   $msg == *"echo4/layers=2_seed=6 (diverged: $h/echo4/layers=2_seed=6/metrics.jsonl:5: 'val_loss' of a validation line is Infinity, not a finite number (the run diverged))"* &&
   $msg == *"echo4/layers=2_seed=4 (config.yaml unreadable: not UTF-8 text)"* &&
   $msg == *"echo4/layers=2_seed=5 (config.yaml has the key 'steps' twice (line 3))"* ]] ||
  fail "hostile runs not listed with their reasons: $msg"
grep -q '^| 2 | 1.00 % (n=1) |$' "$h/depth-gap.md" || fail "hostile runs: gap row wrong: $(grep '^| 2 ' "$h/depth-gap.md" | tail -1)"
# A baseline whose only run has a key twice: the refusal lists why it does not count.
rm -rf "$h/bf16" && run bf16 2 1 4 2.0 4 4 "$h" && printf 'train:\n  steps: 4\ntrain:\n  steps: 4\n' > "$h/bf16/layers=2_seed=1/config.yaml"
msg=$("$PY" "$src/scripts/depth_report.py" "$h" 2>&1) && fail "a baseline with a duplicate key was accepted"
[[ $msg != *Traceback* && $msg == *"baseline setting 'bf16' (not finished: bf16/layers=2_seed=1 (config.yaml has the key 'train' twice (line 3))"* ]] ||
  fail "the duplicate key of the baseline's run is not named: $msg"
# Two folders that are one layers and seed (layers=02 and layers=2): one result would replace the other in
# silence; refused, naming both.
run bf16 2 1 4 2.0 4 4 "$work/twice"; run bf16 02 1 4 2.5 4 4 "$work/twice"
msg=$("$PY" "$src/scripts/depth_report.py" "$work/twice" 2>&1) && fail "layers=02 and layers=2 were accepted as one run"
[[ $msg == "depth_report: bf16/layers=02_seed=1 and bf16/layers=2_seed=1 are both layers 2, seed 1; remove or rename one of them" ]] ||
  fail "layers=02 and layers=2: $msg"
# Hostile inputs of audit 90, listed with the reason and no traceback: a FIFO as metrics.jsonl or
# config.yaml (open() blocked forever), a config.yaml nested 5000 deep (a RecursionError), a 400-digit
# integer loss (an OverflowError); an OUT_ROOT whose name is not UTF-8 gets its depth-gap.md, the name
# written back as its bytes (a UnicodeEncodeError).
f=$work/$'fifo\xff'
run bf16 2 1 4 2.0 4 4 "$f"; run bf16 2 2 4 2.2 4 4 "$f"; run bf16 2 3 4 2.4 4 4 "$f"; run bf16 2 4 4 2.4 4 4 "$f"
rm "$f/bf16/layers=2_seed=2/metrics.jsonl" && mkfifo "$f/bf16/layers=2_seed=2/metrics.jsonl"
rm "$f/bf16/layers=2_seed=3/config.yaml" && mkfifo "$f/bf16/layers=2_seed=3/config.yaml"
"$PY" -c 'print("train:\n  steps: " + "[" * 5000 + "]" * 5000)' > "$f/bf16/layers=2_seed=4/config.yaml"
run bf16 2 5 4 "1$(printf '%0400d' 0)" 4 4 "$f"
msg=$(timeout 60 "$PY" "$src/scripts/depth_report.py" "$f" 2>&1); rc=$?
[[ $rc -eq 0 && $msg != *Traceback* &&
   $msg == *"bf16/layers=2_seed=2 (bad metrics.jsonl: $f/bf16/layers=2_seed=2/metrics.jsonl: not a regular file)"* &&
   $msg == *"bf16/layers=2_seed=3 ($f/bf16/layers=2_seed=3/config.yaml: not a regular file)"* &&
   $msg == *"bf16/layers=2_seed=4 (config.yaml unreadable: YAML nesting too deep (echo_train's yaml-cpp reads at most 500 levels))"* &&
   $msg == *"bf16/layers=2_seed=5 (diverged: $f/bf16/layers=2_seed=5/metrics.jsonl:5: 'val_loss' of a validation line is 100000000000... (401 digits), not a finite number (the run diverged))"* ]] ||
  fail "hostile inputs (FIFOs, deep YAML, a huge integer, a non-UTF-8 out-root): exit $rc: $msg"
LC_ALL=C grep -qF "Written by scripts/depth_report.py from $f." "$f/depth-gap.md" ||
  fail "depth-gap.md does not name the non-UTF-8 OUT_ROOT as its bytes: $(head -3 "$f/depth-gap.md" 2>&1)"
echo "ok: depth_report.py tables and figure"
