#!/usr/bin/env bash
# The bytes a tensor-parallel step moves, counted by Open MPI itself: echo_train runs over the mpi
# transport under the pml monitoring component, which counts every byte a rank sends (collectives
# included) and prints it at MPI_Finalize. The difference between a 4-step and a 2-step run is what
# two steps send. That must equal what echo_train reports in metrics.jsonl (tp_wire_bytes +
# tp_reduce_bytes) up to the loop's few scalars, and tp_wire_bytes must equal the sizes worked out
# by hand below from the wire format (docs/design.md §14): 16-bit sites move bf16 values, Echo
# sites 4- or 8-bit codes plus two fp16 parameters per group, the embedding sites fp32. The shm
# transport under the monitor falls back to mpi with a warning (it aborted the job before).
#   wire_bytes_test.sh BUILD_DIR MPIRUN [mpirun flags...]
set -uo pipefail
build=$1; shift
mpirun=("$@")
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
work=$(mktemp -d /tmp/echo_wire_bytes.XXXXXX)
trap 'rm -rf "$work"' EXIT
trap 'exit 143' TERM INT  # ctest's timeout: still remove the work folder
fail() { echo "FAIL: $*"; exit 1; }
passed=0

for i in $(seq 1 300); do echo "a small corpus line $i for counting bytes $((i * 13))"; done > "$work/corpus.txt"
"$build/echo_prep" --input "$work/corpus.txt" --format text --tokenizer byte --output-prefix "$work/train" \
  >"$work/prep.log" 2>&1 || { cat "$work/prep.log"; fail "echo_prep"; }
# P = 2 ranks, L = 2 layers, micro-batch 2 x 32 tokens: every block site reduces n = 64 x 64 = 4096
# values, split into two segments of 2048 (64 groups of 32).
cat > "$work/cfg.yaml" <<YAML
run: {seed: 5, out_dir: $work/run}
model: {vocab_size: 257, hidden: 64, ffn: 128, layers: 2, heads: 2, kv_heads: 2, head_dim: 32}
parallel: {tp: 2}
comm: {transport: mpi, group_size: 32}
data: {train: $work/train, seq_len: 32, eos_id: 256}
train: {micro_batch: 2, global_batch: 2, eval_interval: 0, checkpoint_interval: 0, log_interval: 1}
YAML

# monitored_bytes PROF: bytes world rank 0 sent to its peers in the whole run (the "E 0 N" lines
# of rank 0's own monitoring file, not the interleaved stderr of the ranks).
monitored_bytes() { awk -F'\t' '$1 == "E" && $2 == 0 { split($4, a, " "); s += a[1]; n++ } END { if (n) print s }' "$1"; }
np=2      # ranks of the runs below (tp = np)
slack=256 # bytes a step may send beside what it reports (see check)
# run_steps STEPS NAME ARGS...: a run of STEPS steps under the monitor; sets `bytes` to its count.
run_steps() {
  local steps=$1 name=$2; shift 2
  rm -rf "$work/run"
  # The collectives stay on the pml, where the monitor counts them: no shared-memory collective
  # components (han, sm; xhc, acoll in newer Open MPI), which would move bytes past it. (Naming
  # components that do not exist is fine; leaving out coll's monitoring component is not: Open
  # MPI 4.1 then crashes in MPI_Comm_free.)
  "${mpirun[@]}" -np "$np" --mca pml_monitoring_enable 1 --mca pml_monitoring_enable_output 3 \
    --mca pml_monitoring_filename "$work/$name" --mca coll '^han,sm,xhc,acoll,hcoll,ucc' \
    "$build/echo_train" "$work/cfg.yaml" --set train.steps="$steps" "$@" >"$work/$name.log" 2>&1 ||
    { tail -20 "$work/$name.log"; fail "$name: echo_train failed"; }
  bytes=$(monitored_bytes "$work/$name.0.prof")
  [[ $bytes =~ ^[0-9]+$ ]] || { tail -20 "$work/$name.log"; fail "$name: no line 'E 0 1' in $name.0.prof (is Open MPI's pml monitoring component missing? ompi_info | grep monitoring)"; }
}
# metric KEY: the value of KEY on the last line of the last run's metrics.jsonl.
metric() { python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])[sys.argv[2]])' "$work/run/metrics.jsonl" "$1"; }

# check NAME EXPECTED_WIRE ARGS...: per-step bytes seen by MPI against metrics.jsonl and the sizes
# worked out by hand.
check() {
  local name=$1 expected=$2; shift 2
  local two four
  run_steps 2 "$name-2" "$@" && two=$bytes
  run_steps 4 "$name-4" "$@" && four=$bytes
  local wire reduce; wire=$(metric tp_wire_bytes) reduce=$(metric tp_reduce_bytes)
  (((four - two) % 2 == 0)) || fail "$name: two steps sent an odd number of bytes ($((four - two))): the steps differ"
  local per_step=$(((four - two) / 2)) reported=$((wire + reduce))
  # Beside the all-reduces a step sends a few scalars: the stop check, the gradient norm and weight
  # checks, one float per backward site for Echo's rescale; well under 256 bytes.
  local rest=$((per_step - reported))
  echo "$name: MPI counted $per_step B/step; echo_train reported $wire (all-reduces) + $reduce (reductions); rest $rest B; expected wire $expected"
  ((wire == expected)) || fail "$name: tp_wire_bytes is $wire, the wire format gives $expected"
  # The reductions' payload (the cross-entropy's doubles) depends on the tokens, not on tp or the
  # all-reduce: every case must report the first one's, so the slack below cannot hide a miscount.
  : "${reduce_first:=$reduce}"
  ((reduce == reduce_first)) || fail "$name: tp_reduce_bytes is $reduce, the first case's was $reduce_first"
  ((rest >= 0 && rest < slack)) || fail "$name: MPI moved $per_step B per step but echo_train reported $reported"
  passed=$((passed + 1))
}

# Rank 0's bytes per step (P = 2: each rank sends its peer half of every reduce-scatter and its own
# segment in the gather, so a site moves 2 x one segment's wire bytes):
#   block sites: 4 per layer (2 forward, 2 backward) = 8
#   edge sites (embedding output, LM-head input gradient), exact fp32: 2 x (2 x 2048 x 4) = 32768
#   q_norm/k_norm gradients, exact fp32: per layer 2 x head_dim values = 64 -> 2 x 32 x 4 = 256; x 2
edge=$((2 * 2 * 2048 * 4)) norms=$((2 * 2 * 32 * 4))
check exact $((8 * 2 * 2048 * 2 + edge + norms)) --set comm.allreduce=exact                # bf16 values
check echo4 $((8 * 2 * (2048 / 2 + 64 * 4) + edge + norms)) --set comm.allreduce=echo --set comm.bits=4
check echo8 $((8 * 2 * (2048 + 64 * 4) + edge + norms)) --set comm.allreduce=echo --set comm.bits=8
# The shm transport under the monitor: Open MPI's monitoring layer wraps the shared window and
# refuses MPI_Win_shared_query (MPI_ERR_RMA_FLAVOR). That aborted the job; now the group takes the
# mpi transport with a warning, so the counter sees the same bytes as above.
check echo4-shm $((8 * 2 * (2048 / 2 + 64 * 4) + edge + norms)) --set comm.allreduce=echo --set comm.transport=shm
grep -q "\[warning\] comm.transport = shm: the shm transport is not possible for this group (MPI_Win_shared_query" \
  "$work/echo4-shm-4.log" || { grep comm "$work/echo4-shm-4.log"; fail "no warning that shm fell back to mpi"; }
# tp = 4 (4 heads of 16): rank 0 sends 3 segments of each reduce-scatter and its segment to 3
# peers in the gather, 6 x n/4 values per site. The scalar reductions are MPI_Allreduce of a few
# doubles, whose algorithm at 4 ranks sends more than the payload (Open MPI 4.1's tuned
# allreduce: 2416 B more per step here): the slack bounds MPI's overhead, while the wire bytes
# and the reductions' payload are checked exactly above.
np=4 slack=4096
cat >> "$work/cfg.yaml" <<YAML
parallel: {tp: 4}
YAML
sed -i 's/^parallel: {tp: 2}$//; s/heads: 2, kv_heads: 2, head_dim: 32/heads: 4, kv_heads: 4, head_dim: 16/' "$work/cfg.yaml"
check exact-tp4 $((8 * 6 * 1024 * 2 + 2 * 6 * 1024 * 4 + 2 * 6 * 8 * 4)) --set comm.allreduce=exact
echo "$passed passed, 0 failed"
