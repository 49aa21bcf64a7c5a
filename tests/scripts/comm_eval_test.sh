#!/usr/bin/env bash
# scripts/comm_eval.py on a checkpoint sweep_test.sh left in WORK (ctest fixture sweep_runs): six
# rows, the 16-bit row equal to echo_eval run by hand, each Δ column recomputed here from the
# JSON, 8-bit rows closer to 16-bit than the uncompensated 4-bit row; a missing checkpoint is
# refused naming it; an --out that cannot be written is refused before the first row; a run directory
# still training is evaluated at one step in every row (a stand-in echo_eval); a Ctrl-C before the
# first row is one line; a FIFO as --out, a missing --echo-eval and a non-UTF-8 checkpoint path.
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
# An --out that cannot be written is refused before the first row (the files are written after the last):
# a folder as the prefix, PREFIX.md a folder, a file where a folder of the path should be.
mkdir -p "$work/outdir" "$work/outmd.md"
refused "--out $work/outdir/: is a folder; --out is a prefix, e.g. $work/outdir/comm-eval for" "$run" --out "$work/outdir/"
refused "--out $work/outdir: is a folder; --out is a prefix" "$run" --out "$work/outdir"
# An empty --out (an unset shell variable) is not the default prefix inside the run.
refused "--out: an empty value (an unset shell variable?)" "$run" --out ''
refused "--out $work/outmd: $work/outmd.md is a folder" "$run" --out "$work/outmd"
refused "--out $work/notes.md/sub/x: $work/notes.md is not a folder, so $work/notes.md/sub cannot be made" \
  "$run" --out "$work/notes.md/sub/x"
# Audit 90: a FIFO as PREFIX.md is refused (reading it to see whether comm_eval wrote it blocked forever), and
# a missing --echo-eval before the first row (it failed the row with mpirun's launch text).
mkfifo "$work/fifo.md"
msg=$(timeout 20 "$PY" "$src/scripts/comm_eval.py" "$run" --np 2 --out "$work/fifo" --echo-eval "$build/echo_eval" \
      --mpirun false 2>&1); rc=$?
[[ $rc -eq 2 && $msg == "comm_eval: --out $work/fifo: $work/fifo.md: not a regular file" ]] || fail "--out FIFO: exit $rc: $msg"
msg=$("$PY" "$src/scripts/comm_eval.py" "$run" --np 2 --out "$work/noeval" --echo-eval "$work/no-echo-eval" --mpirun false 2>&1); rc=$?
[[ $rc -eq 2 && $msg == "comm_eval: --echo-eval $work/no-echo-eval: no executable file there (build it, or name it with --echo-eval)" ]] ||
  fail "a missing --echo-eval: exit $rc: $msg"
# A run directory is resolved once, to its newest complete checkpoint, and every row evaluates that one:
# here a stand-in echo_eval saves a newer checkpoint after each row, as a run still training does (each
# echo_eval resolving the run directory itself evaluated a different step per row). step_6 is not an
# echo name and step_00000008 has no COMPLETE: neither is picked, as echo_eval picks neither.
hr=$work/training-run
rm -rf "$hr" && mkdir -p "$hr"/checkpoints/{step_00000002,step_00000004,step_6,step_00000008}
touch "$hr"/checkpoints/{step_00000002,step_00000004,step_6}/COMPLETE
printf '#!/bin/bash\nshift 2; exec "$@"\n' > "$work/np-dropped.sh"  # a launcher that runs one rank
cat > "$work/training-eval.sh" <<'SH'
#!/bin/bash
# echo_eval stand-in: logs the checkpoint it was given, writes a result, and the run saves a newer step.
echo "$1" >> "${0%/*}/evaluated.txt"
n=$(ls "${0%/*}/training-run/checkpoints" | wc -l)
mkdir -p "${0%/*}/training-run/checkpoints/step_0000010$n" && touch "${0%/*}/training-run/checkpoints/step_0000010$n/COMPLETE"
printf '{"loss":2.5,"ppl":12.18,"step":4,"tokens":64,"data":"d","batches":1,"micro_batch":1,"num_micro":1,"seq_len":32}\n' > "${@: -1}"
SH
chmod +x "$work/training-eval.sh" && rm -f "$work/evaluated.txt"
msg=$("$PY" "$src/scripts/comm_eval.py" "$hr" --np 2 --out "$work/hr" --echo-eval "$work/training-eval.sh" \
      --mpirun "$work/np-dropped.sh" 2>&1) || fail "comm_eval.py on a run still training: $msg"
[[ $(sort -u "$work/evaluated.txt") == "$hr/checkpoints/step_00000004" && $(wc -l < "$work/evaluated.txt") -eq 6 ]] ||
  fail "the rows evaluated different checkpoints: $(cat "$work/evaluated.txt")"
[[ $msg == *"comm_eval: $hr is a run directory: every row evaluates its newest complete checkpoint, step 4 ($hr/checkpoints/step_00000004)"* ]] ||
  fail "comm_eval.py does not say which checkpoint it evaluates: $msg"
grep -qF "Checkpoint \`$hr/checkpoints/step_00000004\` (step 4)" "$work/hr.md" || fail "the table does not name the step: $(head -3 "$work/hr.md")"
# A checkpoint path that is not UTF-8: the table names it as its bytes (a UnicodeEncodeError after the last row).
u=$work/$'ck\xff'
mkdir -p "$u/checkpoints/step_00000002" && touch "$u/checkpoints/step_00000002/COMPLETE"
printf '#!/bin/bash\ncp "%s" "${@: -1}"\n' "$work/hr.json.row" > "$work/plain-eval.sh"  # an echo_eval stand-in
"$PY" -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))[0]))' "$work/hr.json" > "$work/hr.json.row"
chmod +x "$work/plain-eval.sh"
msg=$("$PY" "$src/scripts/comm_eval.py" "$u" --np 2 --out "$u/ce" --echo-eval "$work/plain-eval.sh" --mpirun "$work/np-dropped.sh" 2>&1) &&
  LC_ALL=C grep -qF "Checkpoint \`$u/checkpoints/step_00000002\` (step 4)" "$u/ce.md" ||
  fail "a checkpoint path that is not UTF-8: $msg"
rm -rf "$hr"/checkpoints/step_0000000[24] "$hr"/checkpoints/step_000001*  # left: step_6, step_00000008
refused "$hr: a run directory without a complete checkpoint (none under $hr/checkpoints carries a COMPLETE marker)" "$hr" --out "$work/hr"
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
