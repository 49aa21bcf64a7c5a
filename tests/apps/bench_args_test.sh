#!/usr/bin/env bash
# The benchmark programs as a user runs them: bad arguments end the program with a non-zero exit
# and a message in words naming the argument (no C++ library message, no source location, no
# hang, no allocation until memory runs out); good runs print the machine in their header and JSON.
#   bench_args_test.sh BUILD_DIR MPIRUN [mpirun flags...]
set -uo pipefail
build=$1; shift
mpirun=("$@")
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/echo_bench_args.XXXXXX)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/results.sh"

# refused NAME MESSAGE CMD...: CMD exits non-zero within 60 s (an exit, not a signal) and prints
# MESSAGE, no library text.
refused() {
  local name=$1 message=$2; shift 2
  local out rc
  out=$(timeout 60 "$@" 2>&1 </dev/null); rc=$?
  if ((rc == 124)); then bad "$name: still running after 60 s" "$out"
  elif ((rc == 0)); then bad "$name: exit 0, expected a refusal" "$out"
  elif [[ $out == *"was unable to launch the specified application"* ]]; then
    # Open MPI 4.1 exits 132 then (not SIGILL): a binary being relinked by a build beside the run.
    bad "$name: mpiexec could not start the program (exit $rc, not a signal)" "$out"
  elif ((rc >= 128)); then bad "$name: killed by signal $((rc - 128)), expected a refusal" "$out"
  elif [[ $out != *"$message"* ]]; then bad "$name: missing message '$message'" "$out"
  elif [[ $out == *"terminate called"* || $out == *"std::"* || $out == *"Could not convert"* ]]; then
    bad "$name: a library message reached the user" "$out"
  elif [[ $out == *"[check '"* || $out == *"[at /"* ]]; then
    bad "$name: a user error carries a source location (use ECHO_INPUT_CHECK)" "$out"
  else ok "$name (exit $rc)"; fi
}

# runs NAME JSON_FILE CMD...: CMD exits 0, its header names the machine, JSON_FILE carries it.
runs() {
  local name=$1 json=$2; shift 2
  local out rc
  out=$(timeout 120 "$@" 2>&1 </dev/null); rc=$?
  if [[ $out == *"was unable to launch the specified application"* ]]; then
    bad "$name: mpiexec could not start the program (exit $rc)" "$out"
  elif ((rc != 0)); then bad "$name: exit $rc" "$out"
  elif [[ $out != *"machine: "*"logical CPUs"* || $out != *"OpenBLAS core "* || $out != *"MPI: "* ]]; then
    bad "$name: header does not name the machine" "$out"
  elif ! grep -q '"machine": *{' "$json" || ! grep -q '"openblas_core"' "$json" || ! grep -q '"mpi_library"' "$json" ||
       ! grep -q '"cpu_model"' "$json"; then
    bad "$name: JSON does not name the machine" "$(cat "$json")"
  else ok "$name"; fi
}

np1=("${mpirun[@]}" -np 1)
bench=("${np1[@]}" "$build/echo_bench")
refused "echo_bench sizes past 2^64" "size '18446744073709551615' exceeds echo_bench's largest message (--sizes), 1073741824 bytes (1G)" \
  "${bench[@]}" --sizes 1K..18446744073709551615
refused "echo_bench size above the limit" "size '2G' exceeds echo_bench's largest message" "${bench[@]}" --sizes 2G
refused "echo_bench negative size" "size '-4K' must be positive" "${bench[@]}" --sizes -4K
refused "echo_bench message shorter than a group" "--sizes 1K holds 512 16-bit values, fewer than one group of --group-size 1048576: each call would quantize one partial group; give sizes of at least 2M or a smaller --group-size" \
  "${bench[@]}" --sizes 1K --impl echo --group-size 1048576
refused "echo_bench iters 0" "--iters must be at least 1 (got 0)" "${bench[@]}" --sizes 1K --iters 0
refused "echo_bench negative warmup" "--warmup must be 0 or more (got -1)" "${bench[@]}" --sizes 1K --warmup -1
refused "echo_bench tiles 0" "--tiles must lie in [1, 64] (got 0)" "${bench[@]}" --sizes 1K --tiles 0
refused "echo_bench slot 0" "--slot-kib must lie in [1, 65536] (got 0)" "${bench[@]}" --sizes 1K --slot-kib 0
refused "echo_bench threads above tiles" "--threads must lie in [1, --tiles = 2] (got 3)" "${bench[@]}" --sizes 1K --tiles 2 --threads 3
refused "echo_bench --threads over mpi" "--threads applies to --transport shm (the pipelined shared-memory protocol)" \
  "${bench[@]}" --sizes 1K --threads 2
refused "echo_bench --slot-kib over mpi" "--slot-kib applies to --transport shm" "${bench[@]}" --sizes 1K --transport mpi --slot-kib 64
refused "echo_bench group above slot" "--slot-kib 1 holds no 8-bit group of --group-size 4096 (4100 bytes encoded)" \
  "${bench[@]}" --sizes 8K --transport shm --bits 8 --group-size 4096 --slot-kib 1
refused "echo_bench step factor 1" "--step-factor must be at least 2 (got 1)" "${bench[@]}" --sizes 1K..4K --step-factor 1
refused "echo_bench unknown quantizer" "--quantizer 'foo': expected one of symmetric, asym_naive, asym_zero_aware" \
  "${bench[@]}" --sizes 1K --quantizer foo
refused "echo_bench bits 5" "--bits must be 4 or 8, as comm.bits (got 5)" "${bench[@]}" --sizes 1K --bits 5
refused "echo_bench bits 32" "--bits must be 4 or 8, as comm.bits (got 32)" "${bench[@]}" --sizes 1K --bits 32
group_words="must be a power of two from 2 to 1048576, as comm.group_size"
refused "echo_bench group size 0" "--group-size $group_words (got 0)" "${bench[@]}" --sizes 1K --group-size 0
refused "echo_bench group size 96" "--group-size $group_words (got 96)" "${bench[@]}" --sizes 1K --group-size 96
# 1G needs ~26 GiB per rank: refused before allocating wherever less than that is available.
# echo_bench reads MemAvailable again, a second later, while the tests beside this one allocate and
# free: its refusal is certain where MemTotal is below 26 GiB, or MemAvailable well below it (just
# under, it could find 26 GiB free and run the 1G message).
read -r total_kib avail_kib < <(awk '/^MemTotal:/ {t = $2} /^MemAvailable:/ {a = $2} END {print t, a}' /proc/meminfo)
if [[ -n $avail_kib ]] && ((total_kib < 26 * 1024 * 1024 || avail_kib < 20 * 1024 * 1024)); then
  refused "echo_bench size beyond memory" "GiB of host memory" "${bench[@]}" --sizes 1G
fi
runs "echo_bench machine" "$work/bench.jsonl" "${bench[@]}" --sizes 1K --iters 1 --warmup 0 --json "$work/bench.jsonl"
refused "echo_bench unknown transport" "--transport: tcp not in {mpi,shm}" "${bench[@]}" --sizes 1K --transport tcp
refused "echo_bench odd size" "--sizes: 3 bytes is not a whole number of 16-bit values" "${bench[@]}" --sizes 1K,3
# An empty value (an unset shell variable) is refused by every program, not taken as a file named ''.
refused "echo_bench empty --json" "--json: an empty value (an unset shell variable?)" "${bench[@]}" --sizes 1K --json ''
refused "echo_quant_bench empty --json" "--json: an empty value" "$build/echo_quant_bench" --mib 1 --json ''
refused "echo_s3r_bench empty --json" "--json: an empty value" "$build/echo_s3r_bench" --json ""
# Over shm with 2 ranks: every rank's output identical, the time split in the JSON.
runs "echo_bench shm" "$work/shm.jsonl" "${mpirun[@]}" -np 2 "$build/echo_bench" --sizes 64K --iters 2 --warmup 1 \
  --transport shm --json "$work/shm.jsonl"
if grep -q '"transport":"shm"' "$work/shm.jsonl" && grep -q '"engine":"echo over shm"' "$work/shm.jsonl" &&
   grep -q '"ranks_identical":true' "$work/shm.jsonl" &&
   grep -q '"split_us_per_call":{"copy"' "$work/shm.jsonl" && grep -q '"exchange":' "$work/shm.jsonl" &&
   grep -q '"fraction_of_copy"' "$work/shm.jsonl"; then
  ok "echo_bench shm JSON"
else
  bad "echo_bench shm JSON lacks the transport, identity, split or copy ceiling" "$(cat "$work/shm.jsonl")"
fi

quant=("$build/echo_quant_bench")
refused "echo_quant_bench negative mib" "--mib must be a whole number of MiB from 1 to 16384 (got '-1')" "${quant[@]}" --mib -1
refused "echo_quant_bench huge mib" "--mib must be a whole number of MiB from 1 to 16384 (got '99999999999999999999')" \
  "${quant[@]}" --mib 99999999999999999999
refused "echo_quant_bench runs 0" "--runs must be at least 1 (got 0)" "${quant[@]}" --mib 1 --runs 0
refused "echo_quant_bench group 3" "--group $group_words (got 3)" "${quant[@]}" --mib 1 --runs 1 --group 3
refused "echo_quant_bench group 0" "--group $group_words (got 0)" "${quant[@]}" --mib 1 --runs 1 --group 0
# A group longer than the input used to read past the end of it (a segfault).
refused "echo_quant_bench group above the values" "--group 1048576 is longer than the 262144 values of --mib 1" \
  "${quant[@]}" --mib 1 --runs 1 --group 1048576
runs "echo_quant_bench machine" "$work/quant.json" "${quant[@]}" --mib 1 --runs 1 --json "$work/quant.json"

model=("${np1[@]}" "$build/echo_model_bench" "$src/configs/model_bench.yaml")
refused "echo_model_bench iters 0" "--iters must be at least 1 (got 0)" "${model[@]}" --iters 0
refused "echo_model_bench batch 0" "--batch must be at least 1 (got 0)" "${model[@]}" --batch 0
# A batch that cannot fit is refused by the config's bound or the memory plan (it was a bad_alloc).
refused "echo_model_bench batch past int" "--batch 2147483647: 'train.micro_batch' = 2147483647 must be <= 65536" \
  "${model[@]}" --batch 2147483647
refused "echo_model_bench batch past 1 TiB" "more than the 1 TiB echo allows" "${model[@]}" --batch 65536 --seq 4096
refused "echo_model_bench --set of a key --seq sets" \
  "--set data.seq_len=64: echo_model_bench sets 'data.seq_len' from --seq; use that instead" \
  "${model[@]}" --set data.seq_len=64
refused "echo_model_bench --set of the section --batch sets" \
  "--set train={micro_batch: 3}: echo_model_bench sets 'train.micro_batch' from --batch; use that instead" \
  "${model[@]}" --set "train={micro_batch: 3}"
refused "echo_model_bench batch past host memory" "does not fit in this host's memory" "${model[@]}" --batch 2000 --seq 4096
refused "echo_model_bench names its arguments" "echo_model_bench --batch 2000 --seq 4096 (per rank: " "${model[@]}" --batch 2000 --seq 4096
runs "echo_model_bench machine" "$work/model.json" "${model[@]}" --batch 1 --seq 8 --iters 1 --warmup 0 --json "$work/model.json"

s3r=("$build/echo_s3r_bench" --tokens 16 --seq 8 --reps 1 --warmup 0)
runs "echo_s3r_bench machine" "$work/s3r.json" "${s3r[@]}" --shapes 16x32 --modes fp32 --json "$work/s3r.json"
shape_words="--shapes takes HIDDENxFFN items of two whole numbers from 1 to 16777216"
refused "echo_s3r_bench shape without ffn" "$shape_words, e.g. 512x2048 (got '128x')" "${s3r[@]}" --shapes 128x
refused "echo_s3r_bench seed past 2^64 - 1" "--seed: 18446744073709551616 is above 2^64 - 1" "${s3r[@]}" --seed 18446744073709551616
# Every unsigned option refuses a minus (strtoull read -1 as 2^64 - 1), every signed one a value
# past int64 (strtoll clamped it to 2^63 - 1 without a word).
refused "echo_s3r_bench negative seed" "--seed: -1 is not a whole number >= 0" "${s3r[@]}" --seed -1
refused "echo_s3r_bench blas threads past int64" \
  "--blas-threads: 9223372036854775808 is outside [-2^63, 2^63 - 1] = [-9223372036854775808, 9223372036854775807]" \
  "${s3r[@]}" --shapes 16x32 --modes fp32 --blas-threads 9223372036854775808
# A value within 64 bits that the option's 32-bit variable cannot hold ("Could not convert").
refused "echo_s3r_bench blas threads past int" \
  "--blas-threads: 3000000000 is above 2^31 - 1 = 2147483647, the largest this option holds" \
  "${s3r[@]}" --shapes 16x32 --modes fp32 --blas-threads 3000000000
refused "echo_s3r_bench shape 0x0" "$shape_words, e.g. 512x2048 (got '0x0')" "${s3r[@]}" --shapes 0x0
refused "echo_s3r_bench shape with sign" "$shape_words, e.g. 512x2048 (got '-16x32')" "${s3r[@]}" --shapes=-16x32
refused "echo_s3r_bench shape too large" \
  "--shapes 100000x100000: hidden x ffn = 10000000000 values, more than the 16777216" "${s3r[@]}" \
  --shapes 100000x100000
refused "echo_s3r_bench tokens x ffn too large" "--tokens 16384 x the larger side of --shapes 16x4096" \
  "$build/echo_s3r_bench" --tokens 16384 --seq 8 --shapes 16x4096
refused "echo_s3r_bench seq not dividing tokens" "--seq 100 must divide --tokens 256" \
  "$build/echo_s3r_bench" --tokens 256 --seq 100 --shapes 16x32
refused "echo_s3r_bench unknown mode" "--modes: 'foo' is not one of fp32, rtne, sr, s3r, dx_only, two_way" \
  "${s3r[@]}" --shapes 16x32 --modes foo
# Bounds in words a user can read (CLI::PositiveNumber printed the largest double in 309 digits),
# and an empty number named as empty, not as out of range.
refused "echo_s3r_bench blas threads 0" "--blas-threads: Value 0 not in range 1 to 9223372036854775807" \
  "${s3r[@]}" --shapes 16x32 --modes fp32 --blas-threads 0
refused "echo_s3r_bench empty --tokens" "--tokens: an empty value (an unset shell variable?)" \
  "$build/echo_s3r_bench" --tokens ''
# OpenBLAS caps the thread count at its build's maximum silently; the header would misreport it.
refused "echo_s3r_bench blas threads past OpenBLAS's maximum" "--blas-threads 100000: this OpenBLAS runs at most" \
  "${s3r[@]}" --shapes 16x32 --modes fp32 --blas-threads 100000

# A --json or --csv that names a file a run, a checkpoint or a dataset needs is refused before the
# measurement, the file untouched (a typo replaced a checkpoint's weights, or a live run's
# metrics.jsonl, which stopped that run, with exit 0).
needed="$work/needed"
mkdir -p "$needed/run/checkpoints/step_00000002"
for f in run/.echo_train.lock run/metrics.jsonl run/config.yaml run/checkpoints/step_00000002/model.safetensors \
         data.bin data.idx data.meta.json; do echo "kept $f" >"$needed/$f"; done
refused "echo_quant_bench --json a run's metrics" "$needed/run/metrics.jsonl is a file of the training run in '$needed/run': it would be overwritten" \
  "$build/echo_quant_bench" --mib 1 --runs 1 --json "$needed/run/metrics.jsonl"
refused "echo_s3r_bench --json a checkpoint's weights" "model.safetensors is a weights file: it would be overwritten" \
  "$build/echo_s3r_bench" --shapes 16x32 --modes fp32 --json "$needed/run/checkpoints/step_00000002/model.safetensors"
refused "echo_bench --json a dataset's .bin" "data.bin is a file of the dataset '$needed/data'" \
  "${bench[@]}" --sizes 1K --iters 1 --warmup 0 --json "$needed/./data.bin"
refused "echo_depth --csv a run's config" "config.yaml is a file of the training run" \
  "${np1[@]}" "$build/echo_depth" --sites 8 --csv "$needed/run/config.yaml"
refused "echo_depth --json a dataset's sidecar" "is a file of the dataset" \
  "${np1[@]}" "$build/echo_depth" --sites 8 --json "$needed/data.meta.json"
changed=""
for f in run/.echo_train.lock run/metrics.jsonl run/config.yaml run/checkpoints/step_00000002/model.safetensors \
         data.bin data.idx data.meta.json; do [[ $(cat "$needed/$f") == "kept $f" ]] || changed+=" $f"; done
[[ -z $changed ]] && ok "refused outputs left every needed file as it was" || bad "needed files changed:$changed" ""
# A new file beside them is fine.
runs "echo_quant_bench --json beside a run's files" "$needed/run/quant.json" "$build/echo_quant_bench" --mib 1 --runs 1 \
  --json "$needed/run/quant.json"

# echo_checkpoint_bench given a directory that holds a training run writes into a new directory
# inside it and removes only that: the run's files and checkpoints survive (it used to remove the
# whole --dir). A --dir that does not exist is created and removed again, every level of it.
ckpt=("${mpirun[@]}" -np 2 "$build/echo_checkpoint_bench" "$src/configs/model_bench.yaml" --set model.layers=1 --iters 1
      --warmup 0)
run="$work/run"
mkdir -p "$run/checkpoints/step_00000007"
echo "metrics" >"$run/metrics.jsonl"
echo "weights" >"$run/checkpoints/step_00000007/model.safetensors"
out=$(timeout 120 "${ckpt[@]}" --dir "$run" 2>&1 </dev/null); rc=$?
if ((rc != 0)); then bad "echo_checkpoint_bench in a run directory: exit $rc" "$out"
elif [[ $(cat "$run/metrics.jsonl" 2>/dev/null) != metrics ||
        $(cat "$run/checkpoints/step_00000007/model.safetensors" 2>/dev/null) != weights ]]; then
  bad "echo_checkpoint_bench in a run directory: the run's files did not survive" "$(ls -laR "$work" 2>&1)"
elif [[ $(cd "$run" && find . | sort | tr '\n' ' ') != \
        ". ./checkpoints ./checkpoints/step_00000007 ./checkpoints/step_00000007/model.safetensors ./metrics.jsonl " ]]; then
  bad "echo_checkpoint_bench in a run directory: left files behind or removed some" "$(find "$run" 2>&1)"
else ok "echo_checkpoint_bench in a run directory removes only its own files"; fi
mkdir -p "$work/kept"
out=$(timeout 120 "${ckpt[@]}" --dir "$work/kept/ckbench" 2>&1 </dev/null); rc=$?
if ((rc != 0)); then bad "echo_checkpoint_bench in a new directory: exit $rc" "$out"
elif [[ -e $work/kept/ckbench || ! -d $work/kept ]]; then
  bad "echo_checkpoint_bench in a new directory: it was not removed, or its parent was" "$(find "$work/kept" 2>&1)"
else ok "echo_checkpoint_bench in a new directory removes it again"; fi
# Every level it created goes (all of new/a/b, given with a trailing slash), and nothing above.
out=$(timeout 120 "${ckpt[@]}" --dir "$work/new/a/b/" 2>&1 </dev/null); rc=$?
if ((rc != 0)); then bad "echo_checkpoint_bench in new nested directories: exit $rc" "$out"
elif [[ -e $work/new || ! -d $work/kept ]]; then
  bad "echo_checkpoint_bench in new nested directories: left some, or removed more" "$(find "$work" -maxdepth 3 2>&1)"
else ok "echo_checkpoint_bench in new nested directories removes every level it made"; fi
refused "echo_checkpoint_bench dir is a file" "--dir '$run/metrics.jsonl' is not a directory" "${ckpt[@]}" \
  --dir "$run/metrics.jsonl"
[[ $(cat "$run/metrics.jsonl" 2>/dev/null) == metrics ]] || bad "echo_checkpoint_bench --dir a file: it changed" ""
# A stop signal ends echo_checkpoint_bench between two saves or loads, agreed by the ranks, and its
# scratch directory is removed while they are alive: mpirun passes SIGUSR1 on (what
# scripts/mpirun.sh turns a SIGTERM into); the bench died of it, leaving its checkpoints.
mkdir -p "$work/sig"
"${mpirun[@]}" -np 2 "$build/echo_checkpoint_bench" "$src/configs/model_bench.yaml" --set model.layers=1 --iters 100000 \
  --warmup 0 --dir "$work/sig" >"$work/sig.log" 2>&1 </dev/null &
pid=$!
for _ in $(seq 1 300); do compgen -G "$work/sig/echo_checkpoint_bench.*/checkpoints/step_*" >/dev/null && break; sleep 0.1; done
if ! compgen -G "$work/sig/echo_checkpoint_bench.*" >/dev/null; then
  bad "echo_checkpoint_bench under a signal: no scratch directory within 30 s" "$(cat "$work/sig.log")"
  kill -KILL $pid 2>/dev/null
else
  kill -USR1 $pid
  for _ in $(seq 1 300); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
  kill -0 $pid 2>/dev/null && { kill -KILL $pid; bad "echo_checkpoint_bench still runs 30 s after SIGUSR1" "$(cat "$work/sig.log")"; }
  wait $pid 2>/dev/null
  if compgen -G "$work/sig/echo_checkpoint_bench.*" >/dev/null; then
    bad "echo_checkpoint_bench under a signal: its scratch directory stayed" "$(find "$work/sig" | head)"
  elif ! grep -q "echo_checkpoint_bench: stopped on signal 10 before the measurement ended" "$work/sig.log"; then
    bad "echo_checkpoint_bench under a signal: no stop message" "$(cat "$work/sig.log")"
  else ok "echo_checkpoint_bench under SIGUSR1 stops and removes its scratch directory"; fi
fi

# The TP size is the number of ranks: a layout the model cannot take names that, not a --set the
# user never typed, and a --set of parallel.tp is refused; neither leaves a directory behind.
refused "echo_checkpoint_bench at 3 ranks" "the number of ranks (3)" "${mpirun[@]}" -np 3 \
  "$build/echo_checkpoint_bench" "$src/configs/model_bench.yaml" --dir "$work/np3"
refused "echo_checkpoint_bench --set parallel.tp" \
  "--set parallel.tp=1: echo_checkpoint_bench sets 'parallel.tp' from the number of ranks; use that instead" \
  "${ckpt[@]}" --set parallel.tp=1 --dir "$work/np3"
[[ ! -e $work/np3 ]] && ok "echo_checkpoint_bench refused: no directory left" ||
  bad "echo_checkpoint_bench refused: $work/np3 left behind" "$(find "$work/np3")"

# CUDA builds: echo_ipc_bench refuses bad arguments before it looks for a device.
if [[ -x "$build/echo_ipc_bench" ]]; then
  ipc=("${np1[@]}" "$build/echo_ipc_bench")
  refused "echo_ipc_bench slot 0" "--slot-kib 0 is outside [1, 65536]" "${ipc[@]}" --slot-kib 128,0
  refused "echo_ipc_bench tiles 99" "--tiles 99 is outside [1, 64]" "${ipc[@]}" --tiles 99
  refused "echo_ipc_bench group 96" "--group-size 96 must be a power of two in [1, 4096]" "${ipc[@]}" --group-size 96
  refused "echo_ipc_bench group above slot" "--slot-kib 1 holds no 8-bit group of --group-size 4096 (4100 bytes encoded)" \
    "${ipc[@]}" --slot-kib 1 --group-size 4096
  refused "echo_ipc_bench iters 0" "--iters must be >= 1" "${ipc[@]}" --iters 0
  refused "echo_ipc_bench odd size" "--sizes" "${ipc[@]}" --sizes 1001
  refused "echo_ipc_bench message shorter than a group" "--sizes 4K holds 2048 16-bit values, fewer than one group of --group-size 4096: each call would quantize one partial group; give sizes of at least 8K or a smaller --group-size" \
    "${ipc[@]}" --sizes 4K --group-size 4096
fi

finish
