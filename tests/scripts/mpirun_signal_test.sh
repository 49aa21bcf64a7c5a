#!/usr/bin/env bash
# scripts/mpirun.sh passes a SIGTERM sent to it on to mpirun as SIGUSR1: echo_train (quickstart
# model, 2 ranks) stops at the end of its step, saves a checkpoint and exits 0, and so does the
# wrapper. (While the wrapper exec'd mpirun, SIGTERM made Open MPI abort the job: the ranks were
# SIGKILLed about a second later, with no checkpoint and no log line.)
#   mpirun_signal_test.sh SRC_DIR BUILD_DIR WORK
set -uo pipefail
src=$1 build=$2 work=$3
passed=0 failed=0
ok() { echo "ok: $*"; passed=$((passed + 1)); }
bad() { echo "FAIL: $*"; failed=$((failed + 1)); }
rm -rf "$work" && mkdir -p "$work" || { echo "FAIL: cannot make $work"; exit 1; }
cd "$src" || exit 1
[[ -e data/demo-bytes/train.bin ]] || { echo "FAIL: data/demo-bytes is missing (bash scripts/get_data.sh)"; exit 1; }

# Quickstart settings, smaller and without a scheduled checkpoint or evaluation: only the signal
# can make the checkpoint the test looks for.
bash scripts/mpirun.sh -np 2 "$build/echo_train" configs/quickstart.yaml --set train.steps=100000 \
  --set run.out_dir="$work/run" --set model.layers=2 --set data.seq_len=64 --set train.micro_batch=2 \
  --set train.global_batch=2 --set train.log_interval=1 --set train.eval_interval=100000 \
  --set train.checkpoint_interval=100000 >"$work/log" 2>&1 &
wrapper=$!
for _ in $(seq 1 400); do  # up to 40 s for start-up and the first step
  [[ -s $work/run/metrics.jsonl ]] && break
  kill -0 "$wrapper" 2>/dev/null || break
  sleep 0.1
done
if [[ -s $work/run/metrics.jsonl ]]; then ok "training started"; else bad "no metrics line within 40 s"; fi
kill -TERM "$wrapper"
status=timeout
for _ in $(seq 1 300); do  # the wrapper waits for mpirun; 30 s is ample for one step and a checkpoint
  if ! kill -0 "$wrapper" 2>/dev/null; then wait "$wrapper"; status=$?; break; fi
  sleep 0.1
done
if [[ $status == timeout ]]; then
  bad "the wrapper still runs 30 s after SIGTERM"
  kill -KILL "$wrapper" 2>/dev/null
elif [[ $status == 0 ]]; then
  ok "the wrapper exited 0 (echo_train's status after a clean stop)"
else
  bad "the wrapper exited $status"
fi
if grep -q "rank 0/.*stopping at step [0-9]* on signal 10; checkpoint saved" "$work/log"; then
  ok "echo_train stopped on SIGUSR1 (signal 10) and saved a checkpoint"
else
  bad "no 'stopping at step N on signal 10; checkpoint saved' line in the log"
fi
ckpts=("$work"/run/checkpoints/step_*/COMPLETE)
if [[ -e ${ckpts[0]} ]]; then ok "checkpoint ${ckpts[0]%/COMPLETE} is complete"; else bad "no checkpoints/step_*/COMPLETE"; fi
if ((failed > 0)); then echo "--- log"; tail -30 "$work/log"; fi
echo "$passed passed, $failed failed"
