#!/usr/bin/env bash
# echo_train under mpirun, as a user runs it: SIGTERM saves a checkpoint and exits cleanly,
# --resume continues from it, and a rank that dies ends the whole job (no hang); a signal during
# start-up stops cleanly, a full disk under metrics.jsonl is an error, and a checkpoint folder is a
# clean Hugging Face folder, and a config at run.out_dir/config.yaml is not replaced by a new run.
#   run_control_test.sh BUILD_DIR MPIRUN [mpirun flags...]
set -uo pipefail
build=$1; shift
mpirun=("$@")
export OMP_NUM_THREADS=1  # oneDNN (OpenMP): one thread per rank, like OpenBLAS below
work=$(mktemp -d /tmp/echo_run_control.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# A small English-like corpus through the byte-level tokenizer.
for i in $(seq 1 400); do echo "the quick brown fox $i jumps over the lazy dog and runs to the river bank $((i * 7))"; done > "$work/corpus.txt"
# No validation set: the file is one document, which a split cannot divide (echo_prep refuses a split
# that leaves one side empty), and the runs below evaluate nothing (eval_interval: 0).
"$build/echo_prep" --input "$work/corpus.txt" --format text --tokenizer byte --output-prefix "$work/train" \
  >"$work/prep.log" 2>&1 || { cat "$work/prep.log"; fail "echo_prep"; }
cat > "$work/cfg.yaml" <<YAML
run: {seed: 3, out_dir: $work/run}
model: {vocab_size: 257, hidden: 32, ffn: 64, layers: 2, heads: 2, kv_heads: 2, head_dim: 16}
parallel: {tp: 2}
comm: {allreduce: echo, bits: 4, group_size: 32}
optim: {lr: 1.0e-3, min_lr: 1.0e-4}
schedule: {warmup_steps: 5}
data: {train: $work/train, seq_len: 32, eos_id: 256}
train: {steps: 100000, micro_batch: 2, global_batch: 2, eval_interval: 0, checkpoint_interval: 0, log_interval: 1}
YAML

# 1. SIGTERM to the ranks (what a scheduler's scancel does) and SIGUSR1 to mpirun (which Open MPI
#    forwards): the ranks save a checkpoint and exit 0.
wait_for_steps() {
  for _ in $(seq 1 120); do
    [[ -f $work/run/metrics.jsonl ]] && (( $(wc -l < "$work/run/metrics.jsonl") >= $1 )) && return
    sleep 0.5
  done
}
stop_run() {  # stop_run LOG SIGNAL TARGET(ranks|mpirun)
  rm -rf "$work/run"  # so wait_for_steps sees this run's metrics, not the last one's
  OPENBLAS_NUM_THREADS=1 "${mpirun[@]}" -np 2 "$build/echo_train" "$work/cfg.yaml" >"$work/$1" 2>&1 &
  local pid=$!
  wait_for_steps 3
  if [[ $3 == ranks ]]; then
    pkill "-$2" -f "^$build/echo_train $work/cfg.yaml"
  else
    kill "-$2" $pid
  fi
  for _ in $(seq 1 60); do kill -0 $pid 2>/dev/null || break; sleep 0.5; done
  kill -0 $pid 2>/dev/null && { kill -KILL $pid; fail "echo_train did not exit within 30 s of SIG$2"; }
  wait $pid || { tail -20 "$work/$1"; fail "echo_train exited non-zero after SIG$2"; }
  grep -q "checkpoint saved" "$work/$1" || { tail -20 "$work/$1"; fail "no checkpoint saved on SIG$2"; }
}
stop_run run1a.log TERM ranks
stop_run run1b.log USR1 mpirun
ckpt=$(ls -d "$work"/run/checkpoints/step_* 2>/dev/null | tail -1)
[[ -n $ckpt && -f $ckpt/COMPLETE ]] || fail "no complete checkpoint after the signal"
echo "signals: checkpoint $(basename "$ckpt") saved, clean exit"

# 2. --resume continues from that checkpoint (a short run to a fixed end). A user's copy of it
#    under a name echo does not write (step_99999) is named in a warning, not taken for a later step.
step=${ckpt##*step_}; step=$((10#$step))
cp -r "$ckpt" "$work/run/checkpoints/step_99999"
OPENBLAS_NUM_THREADS=1 "${mpirun[@]}" -np 2 "$build/echo_train" "$work/cfg.yaml" --resume --set train.steps=$((step + 2)) \
  >"$work/run2.log" 2>&1 || { tail -20 "$work/run2.log"; fail "resume failed"; }
grep -q "resumed from .*$(basename "$ckpt")" "$work/run2.log" || fail "the resumed run did not say it resumed from $(basename "$ckpt")"
grep -q "ignoring $work/run/checkpoints/step_99999: not a name echo gives a checkpoint (5 digits, where echo writes at least 8;" "$work/run2.log" ||
  { tail -20 "$work/run2.log"; fail "no warning for a copy named step_99999"; }
[[ -f $work/run/checkpoints/step_99999/COMPLETE ]] || fail "the copy named step_99999 was removed"
rm -rf "$work/run/checkpoints/step_99999"

# 3. A fresh run into the same directory is refused, naming the way out.
OPENBLAS_NUM_THREADS=1 "${mpirun[@]}" -np 2 "$build/echo_train" "$work/cfg.yaml" >"$work/run3.log" 2>&1 && fail "reused out_dir"
grep -q "already holds a run" "$work/run3.log" || { tail -5 "$work/run3.log"; fail "no message for a reused out_dir"; }

# 4. A rank killed mid-run ends the job.
rm -rf "$work/run"
OPENBLAS_NUM_THREADS=1 "${mpirun[@]}" -np 2 "$build/echo_train" "$work/cfg.yaml" --overwrite >"$work/run4.log" 2>&1 &
pid=$!
wait_for_steps 2
victim=$(pgrep -f "$build/echo_train $work/cfg.yaml --overwrite" | grep -v "^$pid$" | tail -1)
[[ -n $victim ]] || fail "no rank process found"
kill -KILL "$victim"
for _ in $(seq 1 60); do kill -0 $pid 2>/dev/null || break; sleep 0.5; done
if kill -0 $pid 2>/dev/null; then kill -KILL $pid; fail "the job hung after a rank died"; fi
wait $pid && fail "the job exited 0 after a rank died"
echo "rank death: the job ended"

# 5. SIGTERM to the ranks while they start up (MPI_Init, data scan): a clean exit 0, no kill.
rm -rf "$work/run"
OPENBLAS_NUM_THREADS=1 "${mpirun[@]}" -np 2 "$build/echo_train" "$work/cfg.yaml" >"$work/run5.log" 2>&1 &
pid=$!
# catches_term PID: the process has a SIGTERM handler (bit 15 of SigCgt), i.e. echo_train's main()
# has run its first line; the rest of start-up (MPI_Init, the model, the data) is still ahead.
catches_term() { local m; m=$(awk '/^SigCgt/ {print $2}' "/proc/$1/status" 2>/dev/null) && (( (16#${m:-0} >> 14) & 1 )); }
ready=0
for _ in $(seq 1 400); do
  ranks=$(pgrep -f "^$build/echo_train $work/cfg.yaml")
  n=0; for r in $ranks; do catches_term "$r" && n=$((n + 1)); done
  (( n >= 2 )) && { ready=1; break; }
  sleep 0.02
done
(( ready )) || { kill -KILL $pid; fail "the ranks never installed a SIGTERM handler"; }
pkill -TERM -f "^$build/echo_train $work/cfg.yaml"
for _ in $(seq 1 60); do kill -0 $pid 2>/dev/null || break; sleep 0.5; done
kill -0 $pid 2>/dev/null && { kill -KILL $pid; fail "echo_train did not exit within 30 s of a SIGTERM at start-up"; }
wait $pid || { tail -20 "$work/run5.log"; fail "a SIGTERM during start-up killed the ranks"; }
grep -q "nothing new to save" "$work/run5.log" || { tail -20 "$work/run5.log"; fail "did not stop before the first step"; }
echo "start-up signal: clean exit"

# 5b. SIGTERM before main(), while the shared libraries initialise (a preloaded library that waits
#     5 s in its initializer stands for cuBLASLt's half second): the handlers are installed from
#     the executable's .preinit_array, which runs first, so the ranks stop cleanly as in 5.
if [[ -n ${ECHO_SLOW_START_PRELOAD:-} ]]; then
  rm -rf "$work/run" "$work/slow" && mkdir -p "$work/slow"
  OPENBLAS_NUM_THREADS=1 "${mpirun[@]}" -np 2 -x LD_PRELOAD="$ECHO_SLOW_START_PRELOAD" -x ECHO_SLOW_START_DIR="$work/slow" \
    "$build/echo_train" "$work/cfg.yaml" >"$work/run5b.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 400); do (( $(ls "$work/slow" | wc -l) >= 2 )) && break; sleep 0.05; done
  (( $(ls "$work/slow" | wc -l) >= 2 )) || { kill -KILL $pid; fail "the preloaded initializer never ran in both ranks"; }
  for rank_pid in $(ls "$work/slow"); do
    catches_term "$rank_pid" || { kill -KILL $pid; fail "no SIGTERM handler while the libraries initialise"; }
    kill -TERM "$rank_pid"
  done
  for _ in $(seq 1 60); do kill -0 $pid 2>/dev/null || break; sleep 0.5; done
  kill -0 $pid 2>/dev/null && { kill -KILL $pid; fail "echo_train did not exit within 30 s of a SIGTERM before main()"; }
  wait $pid || { tail -20 "$work/run5b.log"; fail "a SIGTERM before main() killed the ranks"; }
  grep -q "nothing new to save" "$work/run5b.log" || { tail -20 "$work/run5b.log"; fail "did not stop before the first step"; }
  echo "signal before main(): clean exit"
else
  echo "signal before main(): not built in this build (AddressSanitizer), case 5b not run"
fi

# 6. metrics.jsonl on a full disk (a link to /dev/full): the run fails naming the file.
rm -rf "$work/run" && mkdir -p "$work/run" && ln -s /dev/full "$work/run/metrics.jsonl"
OPENBLAS_NUM_THREADS=1 "${mpirun[@]}" -np 2 "$build/echo_train" "$work/cfg.yaml" --set train.steps=3 \
  >"$work/run6.log" 2>&1 && { tail -20 "$work/run6.log"; fail "exit 0 with metrics.jsonl on a full disk"; }
grep -q "cannot write the metrics file '$work/run/metrics.jsonl'" "$work/run6.log" || { tail -20 "$work/run6.log"; fail "no message naming metrics.jsonl"; }
echo "full disk: the run failed naming metrics.jsonl"

# 7. A checkpoint is a clean Hugging Face folder: model.safetensors is its only *.safetensors.
rm -rf "$work/run"
OPENBLAS_NUM_THREADS=1 "${mpirun[@]}" -np 2 "$build/echo_train" "$work/cfg.yaml" --set train.steps=2 \
  --set train.checkpoint_interval=2 --set schedule.warmup_steps=2 >"$work/run7.log" 2>&1 || { tail -20 "$work/run7.log"; fail "short run"; }
ckpt=$work/run/checkpoints/step_00000002
[[ $(cd "$ckpt" && ls *.safetensors) == model.safetensors ]] || fail "other *.safetensors beside the model: $(ls "$ckpt")"
[[ -f $ckpt/trainer/optimizer.safetensors && -f $ckpt/trainer/trainer_state.json ]] || fail "no trainer/ state"
grep -q '"max_position_embeddings": 40960' "$ckpt/config.json" || fail "config.json: $(grep max_pos "$ckpt/config.json")"
grep -q "done at step 2: .*last checkpoint $ckpt\$" "$work/run7.log" || fail "final line: $(grep 'done at' "$work/run7.log")"
echo "checkpoint: a clean Hugging Face folder"

# 7b. With train.checkpoint_interval 0 and no signal nothing is saved, and the final line says so
#     (it named checkpoints/ before, which does not exist). Two legal settings seldom meant are
#     warned about: a warmup (5) longer than the run (run 7: as long), validation on the training data.
rm -rf "$work/run"
OPENBLAS_NUM_THREADS=1 "${mpirun[@]}" -np 2 "$build/echo_train" "$work/cfg.yaml" --set train.steps=1 \
  --set data.valid="$work/train" --set train.eval_interval=1 --set train.eval_batches=1 \
  >"$work/run7b.log" 2>&1 || { tail -20 "$work/run7b.log"; fail "short run without checkpoints"; }
grep -q "'schedule.warmup_steps' = 5 is not below 'train.steps' = 1: the learning rate rises for the whole run, to 0.0002 at the last step ('optim.lr' = 0.001)" "$work/run7b.log" ||
  fail "no warning for a warmup longer than the run: $(cat "$work/run7b.log")"
grep -q "'schedule.warmup_steps' = 2 is not below 'train.steps' = 2: the learning rate rises for the whole run, to 0.001 at the last step" "$work/run7.log" ||
  fail "no warning for a warmup as long as the run: $(grep warmup "$work/run7.log")"
! grep -q "warmup_steps" "$work/run2.log" || fail "a warning for a warmup shorter than the run: $(grep warmup "$work/run2.log")"
grep -q "'data.valid' = $work/train is the training data" "$work/run7b.log" ||
  fail "no warning for data.valid = data.train: $(cat "$work/run7b.log")"
[[ ! -e $work/run/checkpoints ]] || fail "checkpoints/ written with checkpoint_interval 0: $(ls "$work/run/checkpoints")"
grep -q 'done at step 1: .*no checkpoint saved (train.checkpoint_interval is 0)' "$work/run7b.log" ||
  fail "final line: $(grep 'done at' "$work/run7b.log")"
echo "checkpoint_interval 0: no checkpoint, and the final line says so"

# 7c. A stop signal during a long evaluation ends it after the batch in progress: the checkpoint is
#     written within seconds, not after the last of 100 000 batches (a scheduler's grace period).
rm -rf "$work/run"
OPENBLAS_NUM_THREADS=1 "${mpirun[@]}" -np 2 "$build/echo_train" "$work/cfg.yaml" --set data.valid="$work/train" \
  --set train.eval_interval=1 --set train.eval_batches=100000 >"$work/run7c.log" 2>&1 &
pid=$!
wait_for_steps 1
sleep 1  # inside the evaluation of step 1
pkill -TERM -f "^$build/echo_train $work/cfg.yaml"
for _ in $(seq 1 60); do kill -0 $pid 2>/dev/null || break; sleep 0.5; done
kill -0 $pid 2>/dev/null && { kill -KILL $pid; fail "echo_train did not exit within 30 s of a SIGTERM during evaluation"; }
wait $pid || { tail -20 "$work/run7c.log"; fail "echo_train exited non-zero after a SIGTERM during evaluation"; }
grep -q "evaluation abandoned after [0-9]* of 100000 batches: a stop was asked" "$work/run7c.log" ||
  { tail -20 "$work/run7c.log"; fail "the evaluation was not abandoned"; }
grep -q "stopping at step 1 on signal 15; checkpoint saved" "$work/run7c.log" ||
  { tail -20 "$work/run7c.log"; fail "no checkpoint of step 1 after a SIGTERM during evaluation"; }
! grep -q '"val_loss"' "$work/run/metrics.jsonl" || fail "an abandoned evaluation logged a val_loss"
# The resume owes that evaluation: with train.steps = 1 (the run's last step, as when the stop came
# during the final evaluation) it runs the evaluation instead of "nothing to train", and logs the
# number echo_eval gives for the same checkpoint and batches.
OPENBLAS_NUM_THREADS=1 "${mpirun[@]}" -np 2 "$build/echo_train" "$work/cfg.yaml" --resume --set data.valid="$work/train" \
  --set train.eval_interval=1 --set train.eval_batches=3 --set train.steps=1 >"$work/run7d.log" 2>&1 ||
  { tail -20 "$work/run7d.log"; fail "the resume that owes an evaluation failed"; }
! grep -q "nothing to train" "$work/run7d.log" || fail "a resume owing an evaluation said nothing to train"
grep -q "evaluated on resume: metrics.jsonl had no val_loss of this step" "$work/run7d.log" ||
  { tail -20 "$work/run7d.log"; fail "the resume did not run the owed evaluation"; }
owed=$(grep '"val_loss"' "$work/run/metrics.jsonl")
[[ $(grep -c '"val_loss"' "$work/run/metrics.jsonl") == 1 && $owed == *'"step":1,'* ]] ||
  fail "metrics after the owed evaluation: $(cat "$work/run/metrics.jsonl")"
OPENBLAS_NUM_THREADS=1 "${mpirun[@]}" -np 2 "$build/echo_eval" "$work/run/checkpoints/step_00000001" \
  --data "$work/train" --batches 3 --json "$work/eval7d.json" >"$work/eval7d.log" 2>&1 ||
  { tail -20 "$work/eval7d.log"; fail "echo_eval of step 1"; }
# A command-line value the config check refuses is named as the command line's, not as the
# checkpoint's recorded config's.
OPENBLAS_NUM_THREADS=1 "${mpirun[@]}" -np 2 "$build/echo_eval" "$work/run/checkpoints/step_00000001" \
  --data "$work/train" --seq-len 100000000 >"$work/eval7s.log" 2>&1 && fail "echo_eval took --seq-len 100000000"
grep -q "(its recorded config) with echo_eval --seq-len 100000000: 'data.seq_len' = 100000000" "$work/eval7s.log" ||
  { tail -5 "$work/eval7s.log"; fail "echo_eval --seq-len 100000000 not named as the command line's"; }
python3 - "$work/eval7d.json" "$owed" <<'PY' || fail "the owed evaluation differs from echo_eval's"
import json, sys
offline = json.load(open(sys.argv[1]))
logged = json.loads(sys.argv[2])["val_loss"]
want = offline["loss"]
if abs(logged - want) > 1e-6 * abs(want):
    sys.exit(f"logged {logged}, echo_eval {want}")
PY
# Owed no more: a second resume has nothing to do and leaves the run directory as it was.
cp "$work/run/metrics.jsonl" "$work/metrics7d" && cp "$work/run/config.yaml" "$work/config7d"
OPENBLAS_NUM_THREADS=1 "${mpirun[@]}" -np 2 "$build/echo_train" "$work/cfg.yaml" --resume --set data.valid="$work/train" \
  --set train.eval_interval=1 --set train.eval_batches=3 --set train.steps=1 >"$work/run7e.log" 2>&1 ||
  fail "the second resume failed"
grep -q "nothing to train" "$work/run7e.log" || { tail -5 "$work/run7e.log"; fail "the evaluation was owed twice"; }
cmp -s "$work/run/metrics.jsonl" "$work/metrics7d" && cmp -s "$work/run/config.yaml" "$work/config7d" ||
  fail "a resume with nothing to do changed metrics.jsonl or config.yaml"
# Owed and then training on: the val_loss of step 1 comes back before step 2's lines.
sed -i '/"val_loss"/d' "$work/run/metrics.jsonl"
OPENBLAS_NUM_THREADS=1 "${mpirun[@]}" -np 2 "$build/echo_train" "$work/cfg.yaml" --resume --set data.valid="$work/train" \
  --set train.eval_interval=1 --set train.eval_batches=3 --set train.steps=2 >"$work/run7f.log" 2>&1 ||
  { tail -20 "$work/run7f.log"; fail "the resume owing an evaluation and training on failed"; }
order=$(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    if "step" in d and ("loss" in d or "val_loss" in d): print(d["step"], "val" if "val_loss" in d else "train")' \
  "$work/run/metrics.jsonl" | tr '\n' ' ')
[[ $order == "1 train 1 val 2 train 2 val " ]] || fail "metrics after an owed evaluation and a step: $order"
grep -qF "$owed" "$work/run/metrics.jsonl" || fail "the owed evaluation's val_loss changed: $(grep val_loss "$work/run/metrics.jsonl")"
echo "a stop during evaluation: abandoned, step 1 saved, the evaluation done on resume"

# 8. The training .bin truncated while the run reads it: the job ends naming the file (it died of
#    a bare SIGBUS before). On a copy, so the other cases keep their data.
rm -rf "$work/run"
cp "$work/train.bin" "$work/cut.bin" && cp "$work/train.idx" "$work/cut.idx"
OPENBLAS_NUM_THREADS=1 "${mpirun[@]}" -np 2 "$build/echo_train" "$work/cfg.yaml" --set data.train="$work/cut" \
  >"$work/run8.log" 2>&1 &
pid=$!
wait_for_steps 2
truncate -s 16 "$work/cut.bin"
for _ in $(seq 1 60); do kill -0 $pid 2>/dev/null || break; sleep 0.5; done
if kill -0 $pid 2>/dev/null; then kill -KILL $pid; fail "the job went on after its .bin was truncated"; fi
wait $pid && fail "exit 0 after the .bin was truncated"
# Two diagnoses name it, whichever comes first: the SIGBUS handler (a step touched a page past the new end)
# or the per-batch check of the file's size and time (the truncation landed between two batches).
grep -qF -e "bus error reading the memory-mapped file '$work/cut.bin'" \
  -e "$work/cut.bin changed while this run was reading it" "$work/run8.log" ||
  { tail -20 "$work/run8.log"; fail "the fault does not name the file"; }
echo "truncated .bin: the job ended naming the file"
# 9. A config kept in run.out_dir as its config.yaml, where a run writes its effective config: a new
#    run would replace it (comments and all), so it is refused and the file kept.
mkdir -p "$work/own"
{ echo "# my notes"; sed "s|out_dir: $work/run|out_dir: $work/own|" "$work/cfg.yaml"; } > "$work/own/config.yaml"
cp "$work/own/config.yaml" "$work/own.orig"
OPENBLAS_NUM_THREADS=1 "${mpirun[@]}" -np 2 "$build/echo_train" "$work/own/./config.yaml" --set train.steps=1 \
  >"$work/run9.log" 2>&1 && fail "a run replaced its own config file"
grep -q "where the run writes its effective config: it would be replaced" "$work/run9.log" || { tail -5 "$work/run9.log"; fail "no message for a config at out_dir/config.yaml"; }
cmp -s "$work/own/config.yaml" "$work/own.orig" || fail "the config at out_dir/config.yaml was changed"
# A --resume there holds no run to resume (a config.yaml alone is not a run): refused the same way.
OPENBLAS_NUM_THREADS=1 "${mpirun[@]}" -np 2 "$build/echo_train" "$work/own/config.yaml" --resume --set train.steps=1 \
  >"$work/run9r.log" 2>&1 && fail "a --resume without a run replaced its own config file"
grep -q "where the run writes its effective config: it would be replaced" "$work/run9r.log" || { tail -5 "$work/run9r.log"; fail "no message for --resume with a config at out_dir/config.yaml"; }
cmp -s "$work/own/config.yaml" "$work/own.orig" || fail "the config at out_dir/config.yaml was changed by --resume"

# 10. A run.out_dir so long that a checkpoint's files cannot be named (over PATH_MAX): refused at
#     start-up, before anything is created (it failed at the first save, after the steps before it).
long=$work/deep
for _ in $(seq 1 20); do long+=/$(printf 'd%.0s' $(seq 1 200)); done
OPENBLAS_NUM_THREADS=1 "${mpirun[@]}" -np 2 "$build/echo_train" "$work/cfg.yaml" --set run.out_dir="$long" \
  --set train.steps=2 >"$work/run10.log" 2>&1 && fail "a run.out_dir of ${#long} characters was accepted"
grep -q "'run.out_dir' is ${#long} bytes long: a checkpoint's files would be named by paths of up to" \
  "$work/run10.log" || { tail -5 "$work/run10.log"; fail "no message for a run.out_dir over PATH_MAX"; }
[[ ! -e $work/deep ]] || fail "the refused run created $work/deep"
echo "a run.out_dir too long for a checkpoint: refused at start-up"

# 11. run.out_dir deleted (rm -rf) or moved and made again while the run writes it: the run stops,
#     naming it, instead of writing into a deleted metrics file and making the folder again without
#     its lock (where a second --resume was then admitted and both wrote one run).
lose_run_dir() {  # lose_run_dir LOG EXPECTED-MESSAGE COMMAND...
  local log=$1 expected=$2; shift 2
  rm -rf "$work/run" "$work/run.moved"
  OPENBLAS_NUM_THREADS=1 "${mpirun[@]}" -np 2 "$build/echo_train" "$work/cfg.yaml" >"$work/$log" 2>&1 &
  local pid=$!
  wait_for_steps 3
  "$@"
  for _ in $(seq 1 60); do kill -0 $pid 2>/dev/null || break; sleep 0.5; done
  kill -0 $pid 2>/dev/null && { kill -KILL $pid; fail "echo_train ran on for 30 s after its run directory was lost"; }
  wait $pid && fail "echo_train exited 0 after its run directory was lost"
  grep -qE "$expected while this run was writing it" "$work/$log" ||
    { tail -5 "$work/$log"; fail "no message naming what was lost ($expected)"; }
}
# rm -rf unlinks the folder's files before the folder: a run that looks in between finds its metrics
# file gone first (CI saw this), and either verdict names what was lost.
lose_run_dir run11a.log "(the run directory $work/run was deleted|the metrics file '$work/run/metrics.jsonl' was deleted or moved away)" rm -rf "$work/run"
[[ ! -e $work/run ]] || fail "the run made its deleted run directory again"
# The run may look between the mv and the mkdir, or meet the metrics file's check first: each
# verdict names what was lost.
lose_run_dir run11b.log "(the run directory $work/run (now names another directory than the one this run locked \(that one was moved or deleted and the name made again, a link at the name was pointed elsewhere, or a file system was mounted over it\)|was moved away or deleted)|the metrics file '$work/run/metrics.jsonl' was deleted or moved away)" eval 'mv "$work/run" "$work/run.moved" && mkdir "$work/run"'
[[ -z $(ls -A "$work/run") ]] || fail "the run wrote into the new $work/run: $(ls -A "$work/run")"
# An rm -rf that fails part way ("Directory not empty" when it races a checkpoint save) leaves the
# folder itself: the run must still notice its metrics file is gone, not write on into the unlinked one.
lose_run_dir run11c.log "the metrics file '$work/run/metrics.jsonl' was deleted or moved away" rm "$work/run/metrics.jsonl"
echo "run directory or metrics file deleted or replaced mid-run: the run stopped naming it"

echo "run control: 11 passed, 0 failed"
