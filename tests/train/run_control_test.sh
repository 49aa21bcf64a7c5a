#!/usr/bin/env bash
# echo_train under mpirun, as a user runs it: SIGTERM saves a checkpoint and exits cleanly,
# --resume continues from it, and a rank that dies ends the whole job (no hang).
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
"$build/echo_prep" --input "$work/corpus.txt" --format text --tokenizer byte --output-prefix "$work/train" \
  --valid-prefix "$work/valid" --valid-fraction 0.1 >"$work/prep.log" 2>&1 || { cat "$work/prep.log"; fail "echo_prep"; }
cat > "$work/cfg.yaml" <<YAML
run: {seed: 3, out_dir: $work/run}
model: {vocab_size: 257, hidden: 32, ffn: 64, layers: 2, heads: 2, kv_heads: 2, head_dim: 16}
parallel: {tp: 2}
comm: {allreduce: echo, bits: 4, group_size: 32}
optim: {lr: 1.0e-3, min_lr: 1.0e-4}
schedule: {warmup_steps: 5}
data: {train: $work/train, valid: $work/valid, seq_len: 32, eos_id: 256}
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

# 2. --resume continues from that checkpoint (a short run to a fixed end).
step=${ckpt##*step_}; step=$((10#$step))
OPENBLAS_NUM_THREADS=1 "${mpirun[@]}" -np 2 "$build/echo_train" "$work/cfg.yaml" --resume --set train.steps=$((step + 2)) \
  >"$work/run2.log" 2>&1 || { tail -20 "$work/run2.log"; fail "resume failed"; }
grep -q "resumed from" "$work/run2.log" || fail "the resumed run did not say where it resumed from"

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
echo "run control: 4 passed, 0 failed"
