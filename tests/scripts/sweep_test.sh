#!/usr/bin/env bash
# scripts/sweep.py as a user runs it, on a tiny model (2 ranks, 4 steps per point): a 2 x 2 grid
# over run.seed and comm.compensator.eta writes results.csv / results.md with one row per point
# and the seeds averaged; a second invocation runs nothing; an interrupted point is resumed;
# --print prints one command line per point; bad grids are refused before anything runs; the
# hostile-input cases (4b, 5b-5g: a cut metrics line, colliding names, a stale out-root, damaged
# metrics, odd paths, signals, a base config with a leading zero or a merge key); a point without its
# final evaluation resumed (4c, 5h), a diverged point (NaN val_loss) listed and not rerun (5h), outputs
# that are folders refused (5i), --print | head -1 quiet (5j), audit 90's FIFOs, deep YAML, huge integers,
# non-UTF-8 out-root and a point that exits 0 without metrics (5l).
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
# An empty --out-root (an unset shell variable) is refused, not read as the default runs/sweep-NAME.
empty=$(run_sweep --print --out-root '' 2>&1); rc=$?
[[ $rc -eq 2 && $empty == *"--out-root: an empty value (an unset shell variable?)"* ]] && ok "an empty --out-root is refused" ||
  bad "--out-root '': exit $rc: $empty"
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

# 4. An interrupted point (metrics only up to step 2 and a cut-off step-3 line, checkpoint of step 2) is
# resumed, not restarted, and said to be (echo_train drops the cut line).
p=$root/seed=2_eta=0.5
rm -rf "$p/checkpoints/step_00000004"
"$PY" - "$p/metrics.jsonl" <<'PYEOF'
import json, sys
lines = [l for l in open(sys.argv[1]) if json.loads(l)["step"] <= 2]
open(sys.argv[1], "w").writelines(lines + ['{"step":3,"lo'])
PYEOF
out=$(run_sweep 2>&1); rc=$?
steps=$(grep -v echo_site "$p/metrics.jsonl" | grep -v val_loss | grep -o '"step":[0-9]*' | tr -d '"step:' | tr '\n' ' ')
[[ $rc -eq 0 && $out == *"3 finished, 1 to run"* && $out == *"resume seed=2_eta=0.5"* && $steps == "1 2 3 4 " ]] &&
  grep -q 'resumed from .*step_00000002' "$root/logs/seed=2_eta=0.5.log" && ok "the interrupted point resumed from step 2" ||
  bad "resume: exit $rc, steps '$steps': $out"

# 4b. A finished point (metrics and checkpoint at train.steps) whose last line is cut off is done, with a
# warning naming the line: echo_train --resume would train nothing and leave the line as it is.
p=$root/seed=1_eta=0.75
cp "$p/metrics.jsonl" "$work/metrics.keep"
printf '{"step":4,"val_lo' >> "$p/metrics.jsonl"
cut=$(wc -l < "$work/metrics.keep"); cut=$((cut + 1))
out=$(run_sweep 2>&1); rc=$?
[[ $rc -eq 0 && $out == *"4 finished, 0 to run"* && $out != *"] run "* && $out != *"] resume "* &&
   $out == *"$p/metrics.jsonl:$cut: the last line is cut off"*"seed=1_eta=0.75 counts as done"* ]] &&
  ok "a finished point with a cut last line: done, with a warning" || bad "finished point, cut line: exit $rc: $out"
cp "$work/metrics.keep" "$p/metrics.jsonl"

# 4c. A finished point whose final evaluation a stop signal abandoned (the step-4 checkpoint and training line
# are there, the step-4 val_loss line is not) is not done: it is resumed, and echo_train --resume runs just that
# evaluation, logging the val_loss the run would have logged (same weights, same batches).
p=$root/seed=2_eta=0.75
val4=$(grep '"step":4,"val_loss"' "$p/metrics.jsonl")
grep -v '"step":4,"val_loss"' "$p/metrics.jsonl" > "$work/m.tmp" && cat "$work/m.tmp" > "$p/metrics.jsonl"
out=$(run_sweep 2>&1); rc=$?
[[ -n $val4 && $rc -eq 0 && $out == *"3 finished, 1 to run"* && $out == *"resume seed=2_eta=0.75 (final evaluation missing)"* &&
   $(grep -c '"val_loss"' "$p/metrics.jsonl") -eq 2 && $(grep '"step":4,"val_loss"' "$p/metrics.jsonl") == "$val4" ]] &&
  ok "a point without its final evaluation: resumed, the same val_loss logged" ||
  bad "final evaluation missing: exit $rc, val line '$val4', now: $(grep val_loss "$p/metrics.jsonl" | tr '\n' ' '): $out"

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

# 5b. Grids that echo_train would refuse at every point, or that would run one folder twice (hostile-input audit).
check_bad 'data.train: [d/x-y/train, d/x/y/train]' "data.train: 'd/x-y/train' and 'd/x/y/train'"
check_bad 'optim.lr: [1e-3, 0.001]' "lists one value twice: '1e-3' and '0.001'"
# echo_train trims the spaces and tabs around a --set value: 'echo' and 'echo ' would run one config twice.
check_bad 'comm.allreduce: [echo, "echo "]' "lists one value twice: 'echo' and 'echo ' (echo_train drops the spaces and tabs around a value)"
check_bad $'data.valid: ["\tv", "v"]' "lists one value twice: '\tv' and 'v' (echo_train drops the spaces and tabs around a value)"
check_bad 'data.valid: ["  "]' "'data.valid': empty value"
check_bad 'train.steps: [4.0, 8]' "value '4.0' must be an integer"
check_bad 'train.steps: [1_0]' "value '1_0' is not a number"
check_bad 'train.steps: [4, 010]' "value '010' has a leading zero, which YAML readers disagree on (octal in YAML 1.1, decimal in 1.2); write it without: 10"
check_bad 'optim.lr: [-0300]' "value '-0300' has a leading zero, which YAML readers disagree on (octal in YAML 1.1, decimal in 1.2); write it without: -300"
check_bad 'comm.allreduce: [1]' "value '1' is not text"
check_bad $'? [run.seed, optim.lr]\n: [1]' "a key must be a dotted config key, not a list or mapping"
check_bad $'{run.seed: 1}: [1]' "a key must be a dotted config key, not a list or mapping"
check_bad $'run.seed: [1]\noptim.lr: [\xff]' "is not UTF-8 text"
# Integer values are compared exactly: two seeds beyond a double's 2^53 that differ in the last digit are two
# points (as floats they are one value), and a real key whose default is written 300.0 takes 2.5.
printf 'run.seed: [12345678901234567, 12345678901234568]\n' > "$work/seeds.yaml"
out=$("${sweep[@]}" "$work/base.yaml" "$work/seeds.yaml" --print 2>&1); rc=$?
[[ $rc -eq 0 && $(grep -c -- '--set run.seed=1234567890123456[78] ' <<<"$out") -eq 2 ]] &&
  ok "two seeds beyond 2^53 one apart are two points" || bad "large seeds: exit $rc: $out"
printf 'comm.peer_timeout_s: [2.5, 300]\n' > "$work/timeouts.yaml"
out=$("${sweep[@]}" "$work/base.yaml" "$work/timeouts.yaml" --print 2>&1); rc=$?
[[ $rc -eq 0 && $(grep -c -- '--set comm.peer_timeout_s=' <<<"$out") -eq 2 ]] &&
  ok "comm.peer_timeout_s (a real key) takes 2.5" || bad "peer_timeout_s 2.5: exit $rc: $out"
check_bad "$(for k in run.seed optim.lr train.steps model.layers; do echo "$k: [1,2,3,4,5,6,7,8,9,10]"; done)" \
  "10000 points (more than 1000); pass --yes"

# 5c. Command lines and bases refused before anything runs (exit 2, the message names the culprit).
check_refused() {  # check_refused WORD_IN_MESSAGE ARGS...
  local want=$1 out rc; shift
  out=$("${sweep[@]}" "$@" 2>&1); rc=$?
  if [[ $rc -eq 2 && $out == *"$want"* && $out != *Traceback* ]]; then ok "refused ($out)"
  else bad "expected exit 2 and '$want': exit $rc: $out"; fi
}
printf 'run.seed: [1]\n' > "$work/one.yaml"
check_refused "--echo-train $work/no-echo-train: no executable file" "$work/base.yaml" "$work/one.yaml" \
  --out-root "$work/bad" --echo-train "$work/no-echo-train" --mpirun "$mpirun_cmd"
touch "$work/a-file"
check_refused "--out-root $work/a-file: exists and is not a folder" "$work/base.yaml" "$work/one.yaml" \
  --out-root "$work/a-file" --echo-train "$build/echo_train" --mpirun "$mpirun_cmd"
sed 's/parallel: {tp: 2}/parallel: {tp: two}/' "$work/base.yaml" > "$work/base-tp.yaml"
check_refused "parallel.tp 'two': must be a positive integer" "$work/base-tp.yaml" "$work/one.yaml" --print
check_refused "--mpirun \"'unclosed\": cannot be split" "$work/base.yaml" "$work/one.yaml" --print --mpirun "'unclosed"
# A base config whose train.steps is no whole number (the sweep compares it with each run's last step).
for v in abc:"'abc'" 1.5:1.5 true:True; do
  sed "s/steps: 4,/steps: ${v%%:*},/" "$work/base.yaml" > "$work/base-steps.yaml"
  check_refused "base config $work/base-steps.yaml: 'train.steps' is ${v#*:}, not a whole number of steps" \
    "$work/base-steps.yaml" "$work/one.yaml" --print
done
# A base config number with a leading zero (PyYAML reads 010 as octal 8, echo_train refuses it) and
# a YAML merge key (PyYAML resolves it, echo_train reads none) are refused by name.
sed "s/steps: 4,/steps: 010,/" "$work/base.yaml" > "$work/base-octal.yaml"
check_refused "base config $work/base-octal.yaml: 'train.steps': value '010' has a leading zero" \
  "$work/base-octal.yaml" "$work/one.yaml" --print
sed "s/optim: {lr: 1.0e-3,/optim: {<<: {lr: 1.0e-3},/" "$work/base.yaml" > "$work/base-merge.yaml"
check_refused "base config $work/base-merge.yaml: a YAML merge key ('<<') at 'optim.<<.lr'" \
  "$work/base-merge.yaml" "$work/one.yaml" --print
# A text key is compared as text with an earlier run's config.yaml: run.init_from '1e3' is not '1000'.
sed 's/run: {seed: 1,/run: {seed: 1, init_from: 1e3,/' "$work/base.yaml" > "$work/base-text.yaml"
mkdir -p "$work/text/seed=1_eta=0.5"
sed 's/init_from: ""/init_from: "1000"/' "$root/seed=1_eta=0.5/config.yaml" > "$work/text/seed=1_eta=0.5/config.yaml"
check_refused "holds a run of another config: run.init_from is '1000' there, '1e3' here" "$work/base-text.yaml" \
  "$work/grid.yaml" --out-root "$work/text" --print
sed 's/init_from: ""/init_from: 1e3/' "$root/seed=1_eta=0.5/config.yaml" > "$work/text/seed=1_eta=0.5/config.yaml"
out=$("${sweep[@]}" "$work/base-text.yaml" "$work/grid.yaml" --out-root "$work/text" --print 2>&1); rc=$?
[[ $rc -eq 0 && $out != *"another config"* ]] && ok "run.init_from 1e3 is the 1e3 of the run there" ||
  bad "init_from 1e3 vs 1e3: exit $rc: $out"
# An earlier run's seed is compared exactly too (relative 1e-12 once made 123456789012345 and ...346 one seed).
mkdir -p "$work/seedrun/seed=123456789012346"
sed 's/^  seed: 1 /  seed: 123456789012345 /' "$root/seed=1_eta=0.5/config.yaml" > "$work/seedrun/seed=123456789012346/config.yaml"
grep -q '^  seed: 123456789012345 ' "$work/seedrun/seed=123456789012346/config.yaml" || bad "the seed line of config.yaml was not found"
printf 'run.seed: [123456789012346]\n' > "$work/seed-one.yaml"
check_refused "holds a run of another config: run.seed is 123456789012345 there, 123456789012346 here" \
  "$work/base.yaml" "$work/seed-one.yaml" --out-root "$work/seedrun" --print
# Ctrl-C before the first point (the sweep is reading its grid, a FIFO nobody writes; a grid may be a pipe,
# <(...), a base config may not): one line, no traceback, and the sweep dies of SIGINT (a background job of
# this script starts with SIGINT ignored).
rm -f "$work/fifo.yaml" && mkfifo "$work/fifo.yaml"
"$PY" -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])' \
  "${sweep[@]}" "$work/base.yaml" "$work/fifo.yaml" --print >"$work/int.out" 2>&1 & pid=$!
sleep 2; kill -INT $pid; wait $pid; rc=$?
[[ $rc -eq 130 && $(<"$work/int.out") == "sweep: interrupted (SIGINT); no run was in progress" ]] &&
  ok "Ctrl-C before the first point: one line, killed by SIGINT" || bad "Ctrl-C before the first point: exit $rc: $(<"$work/int.out")"
rm -f "$work/fifo.yaml"
# An earlier sweep's runs in the out-root, made with another base config, are not this sweep's results.
sed 's/lr: 1.0e-3/lr: 2.0e-3/' "$work/base.yaml" > "$work/base-lr.yaml"
check_refused "holds a run of another config: optim.lr is 0.001 there, 0.002 here" "$work/base-lr.yaml" \
  "$work/grid.yaml" --out-root "$root" --echo-train "$build/echo_train" --mpirun "$mpirun_cmd"
# The same value spelled 1e-3 (a string to PyYAML, 0.001 to echo_train) is the same config.
sed 's/lr: 1.0e-3/lr: 1e-3/' "$work/base.yaml" > "$work/base-exp.yaml"
out=$("${sweep[@]}" "$work/base-exp.yaml" "$work/grid.yaml" --out-root "$root" --print 2>&1); rc=$?
[[ $rc -eq 0 && $out != *"another config"* ]] && ok "lr 1e-3 is the 1.0e-3 the runs were made with" ||
  bad "1e-3 vs 1.0e-3: exit $rc: $out"

# 5d. --print: each point's parallel.tp is its -np; a long name is shortened with a hash; a repository path
# with a space and a quote is one argument, quoted so that the line can be pasted into a shell.
out=$("${sweep[@]}" "$work/base.yaml" <(printf 'parallel.tp: [1, 2]\n') --print --out-root "$work/p" 2>&1)
[[ $(grep -o -- ' -np [0-9]' <<<"$out" | tr -d '\n') == " -np 1 -np 2" ]] &&
  ok "a grid over parallel.tp: -np 1 and -np 2" ||
  bad "parallel.tp grid: $out"
out=$("${sweep[@]}" "$work/base.yaml" <(printf 'optim.lr: [1%0250d]\n' 0) --print --out-root "$work/p" 2>&1); rc=$?
name=$(grep -o 'run.out_dir=[^ ]*' <<<"$out" | sed 's|.*/||')
[[ $rc -eq 0 && ${#name} -eq 250 && $name =~ ^lr=10000.*-[0-9a-f]{16}$ ]] &&
  ok "a 251-digit value: name shortened to 250" ||
  bad "long name: exit $rc, name of ${#name}: $out"
odd="$work/my dir'q"
mkdir -p "$odd" && cp -r "$src/scripts" "$src/configs" "$odd/" && ln -sfn "$build" "$odd/build"
out=$(cd "$work" && "$PY" "$odd/scripts/sweep.py" base.yaml one.yaml --print --out-root p 2>&1); rc=$?
eval "set -- $out" 2>/dev/null
[[ $rc -eq 0 && ${1-} == bash && ${2-} == "my dir'q/scripts/mpirun.sh" && ${5-} == "my dir'q/build/echo_train" ]] &&
  ok "a repository path with a space and a quote: one argument, pasteable" || bad "odd path: exit $rc: $out"

# 5e. Damaged metrics: one clear FILE:LINE message naming the field, never a traceback.
check_metrics() {  # check_metrics LINE MESSAGE
  printf '%s\n' "$1" > "$work/m.jsonl"
  local out
  out=$(cd "$src/scripts" && "$PY" -c 'import sys, metrics
try: metrics.read_metrics(sys.argv[1])
except metrics.MetricsError as e: print(e)' "$work/m.jsonl" 2>&1)
  [[ $out == "$work/m.jsonl:1: $2" ]] && ok "metrics: $2" || bad "metrics line '$1': $out"
}
# echo_train's log (nlohmann's dump) writes a NaN or infinite val_loss as null: diverged too, not a damaged file.
check_metrics '{"step":1,"loss":null,"tokens_per_s":1}' \
  "'loss' of a training line is null (how echo_train writes a NaN or infinite loss), not a finite number (the run diverged)"
check_metrics '{"step":4,"val_loss":null}' \
  "'val_loss' of a validation line is null (how echo_train writes a NaN or infinite loss), not a finite number (the run diverged)"
check_metrics '{"step":1,"loss":"1.5","tokens_per_s":1}' "'loss' of a training line is \"1.5\", not a number"
check_metrics '{"step":1,"loss":1.5}' "a training line lacks 'tokens_per_s'"
check_metrics '{"step":"1","loss":1.5,"tokens_per_s":1}' \
  "'step' of a training line is \"1\", not a non-negative integer"
check_metrics '{"loss":1.5,"tokens_per_s":1}' "a training line lacks 'step'"
check_metrics $'\xff\xfe' "not UTF-8 text"
# Python's json reads NaN and Infinity: a loss of one is a diverged run, not a result.
check_metrics '{"step":4,"val_loss":NaN}' "'val_loss' of a validation line is NaN, not a finite number (the run diverged)"
check_metrics '{"step":1,"loss":-Infinity,"tokens_per_s":1}' \
  "'loss' of a training line is -Infinity, not a finite number (the run diverged)"

# 5f. Exit 1 when a point is unfinished, naming it and why (a point of 2 steps in its own out-root).
one=("${sweep[@]}" "$work/base.yaml" "$work/one.yaml" --out-root "$work/unfin" --echo-train "$build/echo_train"
     --mpirun "$mpirun_cmd")
"${one[@]}" >/dev/null 2>&1 || bad "the one-point sweep failed"
echo 'garbage' >> "$work/unfin/seed=1/metrics.jsonl"
out=$("${one[@]}" 2>&1); rc=$?
[[ $rc -eq 1 && $out == *"1 of 1 points unfinished"*"seed=1: bad metrics ("*"metrics.jsonl:"*": not a JSON line)"* ]] &&
  ok "damaged metrics: exit 1, the point named" || bad "damaged metrics: exit $rc: $out"
rm "$work/unfin/seed=1/metrics.jsonl"
out=$("${one[@]}" 2>&1); rc=$?
[[ $rc -eq 1 && $out == *"seed=1: no metrics.jsonl although a checkpoint exists"* ]] &&
  ok "lost metrics: exit 1, the point named" || bad "lost metrics: exit $rc: $out"

# 5h. Hand-made runs (no training: a stand-in launcher that runs nothing). A point at train.steps whose final
# evaluation is missing (a stop signal during it: eval_interval 2 divides train.steps 4, no val_loss at 4) is
# not done: it is resumed (echo_train --resume runs just that evaluation); a point with a NaN or infinite
# (or null: how echo_train writes one) val_loss is diverged: listed, not started again, out of the means; a point of eval_interval 3 (no final
# evaluation is due) is done without one.
h=$work/hand
mkdir -p "$h/seed=1" "$h/seed=2/checkpoints/step_00000004" "$h/seed=3" "$h/seed=4" "$h/eval_interval=3"
touch "$h/seed=2/checkpoints/step_00000004/COMPLETE"
steps4() { for s in 1 2 3 4; do printf '{"step":%d,"loss":3.0,"tokens_per_s":100}\n' $s; done; }
{ steps4; printf '{"step":2,"val_loss":2.5}\n{"step":4,"val_loss":2.4}\n'; } > "$h/seed=1/metrics.jsonl"
{ steps4; printf '{"step":2,"val_loss":2.5}\n'; } > "$h/seed=2/metrics.jsonl"
{ steps4; printf '{"step":2,"val_loss":2.5}\n{"step":4,"val_loss":NaN}\n'; } > "$h/seed=3/metrics.jsonl"
{ steps4; printf '{"step":4,"val_loss":null}\n'; } > "$h/seed=4/metrics.jsonl"  # echo_train's NaN
{ steps4; printf '{"step":3,"val_loss":2.5}\n'; } > "$h/eval_interval=3/metrics.jsonl"
printf 'run.seed: [1, 2, 3, 4]\n' > "$work/four.yaml"
printf '#!/bin/bash\nshift 2; exit 0\n' > "$work/no-mpirun.sh"  # -np N dropped, nothing run
hand=("${sweep[@]}" "$work/base.yaml" "$work/four.yaml" --out-root "$h" --echo-train "$build/echo_train"
      --mpirun "$work/no-mpirun.sh")
out=$("${hand[@]}" --print 2>"$work/hand.err"); rc=$?
err=$(<"$work/hand.err")
[[ $rc -eq 0 && $(wc -l <<<"$out") -eq 1 && $out == *"--set run.out_dir=$h/seed=2 --resume" &&
   $err == *"1 of 4 points already finished"* ]] &&
  ok "--print: a point without its final evaluation is printed (resumed), the finished one is not" ||
  bad "final evaluation missing, --print: exit $rc: $out // $err"
[[ $err == *"sweep: seed=3 diverged, not started again ($h/seed=3/metrics.jsonl:6: 'val_loss' of a validation line is NaN, not a finite number (the run diverged))"* &&
   $err == *"sweep: seed=4 diverged, not started again ($h/seed=4/metrics.jsonl:5: 'val_loss' of a validation line is null (how echo_train writes a NaN or infinite loss), not a finite number (the run diverged))"* ]] &&
  ok "--print: NaN and null (echo_train's NaN) val_loss: diverged, named by line, not printed" || bad "diverged, --print: $err"
out=$("${hand[@]}" 2>&1); rc=$?
csv=$h/results.csv
[[ $rc -eq 1 && $out == *"1 finished, 2 diverged, 1 to run"* && $out == *"resume seed=2 (final evaluation missing)"* &&
   $out == *"3 of 4 points unfinished"* && $out == *"    seed=2: final evaluation missing"* &&
   $out == *"    seed=3: diverged ($h/seed=3/metrics.jsonl:6: 'val_loss' of a validation line is NaN"* ]] &&
  grep -q '^seed=2,2,final evaluation missing,4,4,' "$csv" && grep -q '^seed=3,3,"diverged (' "$csv" &&
  grep -q '^| 1/4 | ' "$h/results.md" &&
  ok "a sweep: final evaluation missing resumed, diverged points listed, exit 1" ||
  bad "final evaluation missing / diverged, run: exit $rc: $out; $(cat "$csv")"
out=$("${sweep[@]}" "$work/base.yaml" <(printf 'train.eval_interval: [3]\n') --out-root "$h" --print 2>&1); rc=$?
[[ $rc -eq 0 && $out == "# sweep: 1 of 1 points already finished, not printed" ]] &&
  ok "eval_interval 3 (no final evaluation due): done without one" || bad "eval_interval 3: exit $rc: $out"

# 5i. Outputs that cannot be written are refused before any point runs, naming the path: results.csv or
# results.md a folder (a traceback after the runs), a point's log a folder (blamed on the launcher).
rm -f "$h/results.csv" && mkdir "$h/results.csv"
check_refused "$h/results.csv: is a folder, but the sweep writes its results there; remove or rename it" \
  "${hand[@]:2}"
rmdir "$h/results.csv" && rm -f "$h/logs/seed=2.log" && mkdir "$h/logs/seed=2.log"
check_refused "$h/logs/seed=2.log: is a folder, but the sweep appends the output of seed=2 to it; remove or rename it" \
  "${hand[@]:2}"
rmdir "$h/logs/seed=2.log"

# 5j. --print into a reader that stops early (| head -1): no BrokenPipeError traceback (1000 points, 250 kB:
# more than a pipe holds, so the sweep is still writing when head exits).
"${sweep[@]}" "$work/base.yaml" <(printf 'run.seed: [%s]\n' "$(seq -s, 1 1000)") --out-root "$work/pipe" --print \
  2>"$work/pipe.err" | head -1 > "$work/pipe.out"
[[ $(wc -l < "$work/pipe.out") -eq 1 && ! -s $work/pipe.err ]] && ok "--print | head -1: quiet" ||
  bad "--print | head -1: $(head -c 600 "$work/pipe.err")"

# 5k. A point at train.steps whose last line is cut off is done only if echo_train --resume would train nothing:
# a complete checkpoint at train.steps under echo's own name. step_4 and step_best (a user's copies, which
# echo_train ignores since it names checkpoints step_%08d) leave it to resume; step_00000004 finishes it.
k=$work/copies
mkdir -p "$k/seed=1/checkpoints/step_4" "$k/seed=1/checkpoints/step_best"
touch "$k/seed=1/checkpoints/step_4/COMPLETE" "$k/seed=1/checkpoints/step_best/COMPLETE"
{ steps4; printf '{"step":4,"val_loss":2.4}\n{"step":5,"lo'; } > "$k/seed=1/metrics.jsonl"
printf 'run.seed: [1]\n' > "$work/seed1.yaml"
copies=("${sweep[@]}" "$work/base.yaml" "$work/seed1.yaml" --out-root "$k" --print)
out=$("${copies[@]}" 2>&1); rc=$?
[[ $rc -eq 0 && $out == *"--set run.out_dir=$k/seed=1 --resume"* ]] &&
  ok "cut last line, only step_4 and step_best: resumed (not echo's checkpoint names)" ||
  bad "cut line, step_4 copies: exit $rc: $out"
mkdir "$k/seed=1/checkpoints/step_00000004" && touch "$k/seed=1/checkpoints/step_00000004/COMPLETE"
out=$("${copies[@]}" 2>&1); rc=$?
[[ $rc -eq 0 && $out == *"1 of 1 points already finished"* && $out != *"--resume"* ]] &&
  ok "cut last line, step_00000004 complete: done" || bad "cut line, step_00000004: exit $rc: $out"

# 5l. Hostile inputs of audit 90, each one line, no traceback (checked here without an "ok": ctest counts the
# passes): a FIFO as a point's metrics.jsonl or as the base config is refused before anything runs (open()
# blocked forever); YAML nested 5000 deep as the grid or base config (a RecursionError); a 400-digit integer
# loss (an OverflowError); an out-root whose name is not UTF-8 gets its logs and results, the name written
# back as its bytes (a UnicodeEncodeError); a point whose echo_train exits 0 without a metrics.jsonl is failed,
# not "not started".
hostile() {  # hostile MESSAGE ARGS...: sweep.py ARGS exits 2 with the one line MESSAGE
  local want=$1 out rc; shift
  out=$(timeout 30 "${sweep[@]}" "$@" 2>&1); rc=$?
  [[ $rc -eq 2 && $out == "$want" ]] || bad "sweep.py $*: exit $rc, not 2 with '$want': $out"
}
mkdir -p "$work/fifo-run/seed=1" && mkfifo "$work/fifo-run/seed=1/metrics.jsonl" "$work/fifo-base.yaml"
hostile "sweep: $work/fifo-run/seed=1/metrics.jsonl: not a regular file; remove or rename it" \
  "$work/base.yaml" "$work/one.yaml" --out-root "$work/fifo-run" --print
hostile "sweep: base config $work/fifo-base.yaml: not a regular file" "$work/fifo-base.yaml" "$work/one.yaml" --print
"$PY" -c 'print("run.seed: " + "[" * 5000 + "1" + "]" * 5000)' > "$work/deep.yaml"
hostile "sweep: grid $work/deep.yaml: YAML nesting too deep (echo_train's yaml-cpp reads at most 500 levels)" \
  "$work/base.yaml" "$work/deep.yaml" --print
hostile "sweep: base config $work/deep.yaml: YAML nesting too deep (echo_train's yaml-cpp reads at most 500 levels)" \
  "$work/deep.yaml" "$work/one.yaml" --print
printf '{"step":1,"loss":1%0400d,"tokens_per_s":1}\n' 0 > "$work/m.jsonl"
out=$(cd "$src/scripts" && "$PY" -c 'import sys, metrics
try: metrics.read_metrics(sys.argv[1])
except metrics.NonFiniteLoss as e: print(e)' "$work/m.jsonl" 2>&1)
[[ $out == "$work/m.jsonl:1: 'loss' of a training line is 100000000000... (401 digits), not a finite number (the run diverged)" ]] ||
  bad "a 400-digit integer loss: $out"
u=$work/$'utf\xff'
out=$("${sweep[@]}" "$work/base.yaml" "$work/one.yaml" --out-root "$u" --echo-train "$build/echo_train" \
      --mpirun "$work/no-mpirun.sh" 2>&1); rc=$?
[[ $rc -eq 1 && $out != *Traceback* && $out == *"sweep: seed=1: echo_train exited 0 but wrote no metrics.jsonl (log: "* &&
   $out == *"    seed=1: failed (exit 0 without a metrics.jsonl; see "* ]] &&
  LC_ALL=C grep -qF "run.out_dir=$u/seed=1" "$u/logs/seed=1.log" &&
  LC_ALL=C grep -qF "seed=1,1,failed (exit 0 without a metrics.jsonl; see $u/logs/seed=1.log)" "$u/results.csv" ||
  bad "a non-UTF-8 out-root, a point that exits 0 without metrics: exit $rc: $out"

# 5g. SIGTERM, then SIGINT, to a sweep of long points: forwarded as SIGUSR1 through mpirun to echo_train
# (a checkpoint, no orphan; SIGTERM made mpirun kill ranks still saving, about 1 run in 4 under load),
# exit 128 + signal, and the rerun resumes.
sed 's/steps: 4,/steps: 100000,/' "$work/base.yaml" > "$work/base-long.yaml"
long=("${sweep[@]}" "$work/base-long.yaml" "$work/one.yaml" --out-root "$work/sig" --echo-train "$build/echo_train"
      --mpirun "$mpirun_cmd")
signal_sweep() {  # signal_sweep SIGNAL EXPECTED_EXIT STOPS: a step or two after training starts; STOPS: in the log
  local before pid rc i
  before=$(cat "$work/sig/seed=1/metrics.jsonl" 2>/dev/null | wc -l)
  "${long[@]}" >"$work/sig.out" 2>&1 & pid=$!
  local started=""
  for i in $(seq 1 1800); do  # up to 180 s: start-up on a loaded 2-core machine
    (( $(cat "$work/sig/seed=1/metrics.jsonl" 2>/dev/null | wc -l) > before + 2 )) && { started=1; break; }
    sleep 0.1
  done
  [[ -n $started ]] || bad "SIG$1: training did not start within 180 s (the signal would land in start-up)"
  kill -"$1" $pid; wait $pid; rc=$?
  sleep 0.5
  local said="interrupted at point 1 of 1 (seed=1); rerun the same command to resume"
  if [[ $rc -eq $2 && $(<"$work/sig.out") == *"$said"* \
        && $(<"$work/sig.out") != *Traceback* ]] && ! pgrep -f -- "run.out_dir=$work/sig/" >/dev/null &&
     (( $(grep -c "rank 0/.*stopping at step .* on signal 10; checkpoint saved" "$work/sig/logs/seed=1.log") == $3 ))
  then ok "SIG$1: forwarded as SIGUSR1, checkpoint saved, exit $2"
  else
    bad "SIG$1: exit $rc (expected $2); left running: $(pgrep -af -- "run.out_dir=$work/sig/" | head -3);" \
      "checkpoint lines: $(grep -c "stopping at step .* on signal 10; checkpoint saved" "$work/sig/logs/seed=1.log")" \
      "(expected $3); log tail: $(tail -5 "$work/sig/logs/seed=1.log"); sweep said: $(<"$work/sig.out")"
  fi
}
signal_sweep TERM 143 1
signal_sweep INT 130 2
grep -q 'resumed from .*step_' "$work/sig/logs/seed=1.log" && ok "the rerun after SIGTERM resumed" ||
  bad "no resume in $work/sig/logs/seed=1.log"

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
