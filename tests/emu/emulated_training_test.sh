#!/usr/bin/env bash
# echo_train on the CUDA backend, run by the kernel emulator (echo_train_emu: every kernel, the
# cuBLASLt GEMMs and the CUDA runtime calls on the CPU; docs/design.md §15b), against echo_train on
# the CPU backend: the same config and data, step by step. The CUDA backend keeps activations in
# bf16 where the CPU keeps f32, so the losses agree to bf16 noise, not bit for bit: every step's
# relative difference must be under 2e-2, the bound of the device check's loss_parity stage. The
# cases: tp 1 with the exact all-reduce; tp 2 with Echo 4-bit forward and backward and the
# compensator (two ranks on the one emulated device: Echo through host copies over MPI, the exact
# reductions host-staged); tp 2 with S3R-EC INT8 linear layers as well; and tp 2 with each rank on
# its own emulated GPU (ECHO_EMU_DEVICES=2), so the exact all-reduce and Echo's byte exchange go
# over NCCL (tests/emu/nccl_emu.cpp), exact and Echo 4-bit. Each emulated run's step 1
# must also be served from the start-up reservation of its memory plan (the emulated pool counts
# cudaMallocAsync bytes as the device's does).
#   emulated_training_test.sh BUILD_DIR MPIRUN [mpirun flags...]
set -uo pipefail
build=$1; shift
mpirun=("$@")
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# Open MPI's own allocations that live until exit are not the kernels' leaks.
export ASAN_OPTIONS=detect_leaks=0
work=$(mktemp -d /tmp/echo_emulated_training.XXXXXX)
trap 'rm -rf "$work"' EXIT
trap 'exit 143' TERM INT  # ctest's timeout: still remove the work folder
fail() { echo "FAIL: $*"; exit 1; }
passed=0

# Text with some structure (the loss must fall for the comparison to mean something).
for i in $(seq 1 400); do
  echo "line $i: the quick brown fox $((i % 7)) jumps over the lazy dog $((i * 31 % 97)); tensor parallel"
done >"$work/corpus.txt"
"$build/echo_prep" --input "$work/corpus.txt" --format text --tokenizer byte --output-prefix "$work/train" \
  >"$work/prep.log" 2>&1 || { cat "$work/prep.log"; fail "echo_prep"; }
cat >"$work/cfg.yaml" <<YAML
run: {seed: 11}
model: {vocab_size: 257, hidden: 64, ffn: 192, layers: 2, heads: 4, kv_heads: 2, head_dim: 16, init_std: 0.02}
comm: {allreduce: exact, telemetry_interval: 0}
optim: {lr: 1.0e-3, min_lr: 1.0e-4}
schedule: {warmup_steps: 2}
data: {train: $work/train, seq_len: 32, eos_id: 256}
train: {steps: 6, micro_batch: 4, global_batch: 4, eval_interval: 0, checkpoint_interval: 0, log_interval: 1}
YAML

# losses RUN: the run's per-step losses, one per line.
losses() { grep -o '"loss": *[-0-9.eE+]*' "$1/metrics.jsonl" | sed 's/.*: *//'; }

# check NAME TP ARGS...: the same run on the cpu and the emulated cuda backend, loss by loss.
# EMU_DEVICES: the emulated GPUs (default 1: every rank on the same one).
check() {
  local name=$1 tp=$2; shift 2
  local dev bin
  for dev in cpu cuda; do
    bin=$build/echo_train
    [[ $dev == cuda ]] && bin=$build/tests/emu/echo_train_emu
    ECHO_EMU_DEVICES=${EMU_DEVICES:-1} "${mpirun[@]}" -np "$tp" "$bin" "$work/cfg.yaml" --set parallel.tp="$tp" --set run.device=$dev \
      --set run.out_dir="$work/$name-$dev" "$@" >"$work/$name-$dev.log" 2>&1 ||
      { tail -25 "$work/$name-$dev.log"; fail "$name: echo_train on $dev failed"; }
  done
  grep -q "CUDA backend on device" "$work/$name-cuda.log" || fail "$name: the emulated run did not use the CUDA backend"
  if [[ ${EMU_DEVICES:-1} -gt 1 ]]; then
    grep -q "CUDA backend on device 0 of ${EMU_DEVICES}" "$work/$name-cuda.log" ||
      fail "$name: the emulated run does not see ${EMU_DEVICES} devices"
    grep -q "NCCL communicator of $tp ranks, rank 1" "$work/$name-cuda.log" || fail "$name: no NCCL communicator was made"
    if grep -q "share a GPU" "$work/$name-cuda.log"; then fail "$name: the exact all-reduce was host-staged, not NCCL"; fi
  fi
  # The memory plan against the pool: step 1 must fit in the start-up reservation of the plan.
  local memory
  memory=$(grep -o 'memory: at most .*' "$work/$name-cuda.log" | head -1)
  echo "$name: $memory"
  [[ $memory == *"(the pool never grew)"* ]] || fail "$name: the CUDA backend's step 1 needed more than its memory plan"
  local verdict
  verdict=$(paste <(losses "$work/$name-cpu") <(losses "$work/$name-cuda") | awk '
    { n++; d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > max) max = r
      if (NR == 1) first = $1; last_cpu = $1; last_cuda = $2 }
    END { printf "%d steps, max rel %.2e, loss %.4f -> %.4f (cpu) / %.4f (cuda)", n, max, first, last_cpu, last_cuda
          exit !(n == 6 && max < 2e-2 && last_cpu < first - 0.05) }')
  local ok=$?
  echo "$name: $verdict"
  ((ok == 0)) || fail "$name: the emulated CUDA run's losses are not the CPU run's (6 steps, relative 2e-2, falling)"
  passed=$((passed + 1))
}

check tp1_exact 1 --set linear.mode=bf16
check tp2_echo4 2 --set linear.mode=bf16 --set comm.allreduce=echo --set comm.bits=4 --set comm.group_size=32
check tp2_echo4_int8 2 --set linear.mode=int8 --set comm.allreduce=echo --set comm.bits=4 --set comm.group_size=32
EMU_DEVICES=2 check tp2_exact_nccl 2 --set linear.mode=bf16
EMU_DEVICES=2 check tp2_echo4_nccl 2 --set linear.mode=bf16 --set comm.allreduce=echo --set comm.bits=4 --set comm.group_size=32
echo "$passed passed, 0 failed"
