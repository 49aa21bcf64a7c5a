#!/usr/bin/env bash
# scripts/comm_eval.py on a checkpoint sweep_test.sh left in WORK (ctest fixture sweep_runs): six
# rows, the 16-bit row equal to echo_eval run by hand, each Δ column recomputed here from the
# JSON, 8-bit rows closer to 16-bit than the uncompensated 4-bit row; a missing checkpoint is
# refused naming it; a Ctrl-C before the first row is one line.
#   comm_eval_test.sh SRC_DIR BUILD_DIR WORK MPIRUN [mpirun flags...]
set -uo pipefail
src=$1 build=$2 work=$3; shift 3
mpirun_cmd=$(printf '%q ' "$@")
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
PY=/usr/bin/python3; [[ -x $PY ]] || PY=python3
fail() { echo "FAIL: $*"; exit 1; }
run=$work/sweep/seed=1_eta=0.5
[[ -d $run/checkpoints ]] || fail "no checkpoint of sweep_test in $run"
out=$work/comm-eval
log=$("$PY" "$src/scripts/comm_eval.py" "$run" --np 2 --batches 2 --out "$out" --echo-eval "$build/echo_eval" \
      --mpirun "$mpirun_cmd" 2>&1) || { echo "$log"; fail "comm_eval.py exited non-zero"; }
[[ -s $out.md && -s $out.json ]] || fail "no $out.md / $out.json"
(($(grep -c '^|' "$out.md") == 8)) || fail "expected a header, a rule and 6 rows in $out.md: $(cat "$out.md")"
eval "$mpirun_cmd -np 2 \"$build/echo_eval\" \"$run\" --tp 2 --batches 2 --set comm.allreduce=exact --json \"$work/exact.json\"" \
  >"$work/exact.log" 2>&1 || { cat "$work/exact.log"; fail "echo_eval by hand"; }
"$PY" - "$out.json" "$out.md" "$work/exact.json" <<'PY' || fail "comm_eval.py's table disagrees (above)"
import json, sys
rows, md, exact = json.load(open(sys.argv[1])), open(sys.argv[2]).read(), json.load(open(sys.argv[3]))
assert len(rows) == 6, f"{len(rows)} rows"
ref = rows[0]
assert ref["allreduce"] == "exact" and ref["loss"] == exact["loss"], (ref["loss"], exact["loss"])
by = {r["setting"]: r for r in rows}
assert by["Echo 4-bit"]["bits"] == 4 and by["Echo 8-bit"]["bits"] == 8 and by["4-bit, no compensation"]["compensator"] is False
assert by["Echo 4-bit, early sites 8-bit"]["early_site_8bit"] is True
for r in rows:
    line = f"| {r['setting']} | {r['loss']:.6f} | {r['ppl']:.4f} | {r['loss'] - ref['loss']:+.6f} | " \
           f"{100 * (r['ppl'] - ref['ppl']) / ref['ppl']:+.3f} % |"
    assert line in md, f"missing row: {line}"
worst8 = max(abs(by[s]["loss"] - ref["loss"]) for s in ("Echo 8-bit", "8-bit, no compensation"))
assert worst8 < abs(by["4-bit, no compensation"]["loss"] - ref["loss"]), "8-bit is not closer to 16-bit than 4-bit"
assert all(r["loss"] != ref["loss"] for r in rows[1:]), "a quantized row equals the exact one: did --set apply?"
print("rows ok")
PY
msg=$("$PY" "$src/scripts/comm_eval.py" "$work/no-such-run" --out "$work/x" 2>&1) && fail "a missing checkpoint was accepted"
[[ $msg == *no-such-run* ]] || fail "the message does not name the missing checkpoint: $msg"
# --out never overwrites what comm_eval did not write: a checkpoint's files (.json is appended),
# a dataset file of --data, any other existing file; refused with exit 2 before any row runs.
ck=$(ls -d "$run"/checkpoints/step_* | head -1)
mkdir -p "$work/ds" && printf 'meta\n' > "$work/ds/valid.meta.json" && printf 'notes\n' > "$work/notes.md"
snapshot() { { find "$ck" -type f -print0 | sort -z | xargs -0 cat; cat "$work/ds/valid.meta.json" "$work/notes.md" "$out.md" "$out.json"; } | cksum; }
sum_before=$(snapshot)
refused() {  # refused WORD_IN_MESSAGE ARGS...
  local want=$1 msg rc; shift
  msg=$("$PY" "$src/scripts/comm_eval.py" "$@" --np 2 --echo-eval "$build/echo_eval" --mpirun false 2>&1); rc=$?
  [[ $rc -eq 2 && $msg == *"$want"* && $msg != *"[1/6]"* && $msg != *Traceback* ]] || fail "comm_eval.py $*: exit $rc: $msg"
}
refused "is inside the checkpoints of $run" "$run" --out "$ck/config"
refused "is inside the checkpoints of $run" "$ck" --out "$run/checkpoints/x"
refused "is a file of the dataset $work/ds/valid" "$run" --data "$work/ds/valid" --out "$work/ds/valid.meta"
refused "$work/notes.md exists and is not an earlier comm_eval.py output" "$run" --out "$work/notes"
[[ $(snapshot) == "$sum_before" ]] ||
  fail "a refused --out changed a file"
# An earlier comm_eval output is overwritten: past the check, the rows run (here: fail at once).
msg=$("$PY" "$src/scripts/comm_eval.py" "$run" --np 2 --out "$out" --mpirun false 2>&1); rc=$?
[[ $rc -eq 1 && $msg == *"echo_eval exited"* ]] || fail "rerun into an earlier output: exit $rc: $msg"
# Ctrl-C before the first row (here: while the launcher is set up): one line, no traceback, killed by SIGINT.
msg=$("$PY" - "$src/scripts" "$run" <<'PY' 2>&1
import runpy, sys
sys.path.insert(0, sys.argv[1])
import launch
def interrupted(command):
    raise KeyboardInterrupt
launch.launcher = interrupted  # comm_eval imports it from launch
sys.argv = ["comm_eval.py", sys.argv[2], "--np", "2"]
runpy.run_path(sys.path[0] + "/comm_eval.py", run_name="__main__")
PY
); rc=$?
[[ $rc -eq 130 && $msg == "comm_eval: interrupted (SIGINT); no run was in progress" ]] ||
  fail "Ctrl-C before the first row: exit $rc: $msg"
echo "ok: comm_eval.py table of 6 settings"
