#!/usr/bin/env bash
# The study scripts' argument handling, without training: depth_study.sh and eta_lr_study.sh
# refuse an option without its value or with an empty one, an empty or malformed --layers /
# --seeds, and a missing --echo-train, before making anything; run from a copy of the scripts
# with stand-ins for sweep.py, depth_report.py and plot.py (they log their arguments, the grid
# and LC_ALL), depth_study.sh sweeps each depth and seed, --echo-train replaces the out-root's
# copy of echo_train (kept without --echo-train), and both studies run in the C locale.
# s3r_compare.sh with a stand-in echo_train writes its table to --out only when every run
# finished (keeping a replaced file's mode), a failed run names a log that exists, paths with a
# space work, a comma-decimal locale (de_DE, built with localedef) gives the same table, and bad
# STEPS / options are refused before anything runs. A SIGTERM, SIGHUP or Ctrl-C to a study reaches
# its sweep.py or mpirun.sh once (a stand-in echo_train that sleeps): no orphans, exit 128 + n.
#   study_scripts_test.sh SRC_DIR WORK
set -uo pipefail
src=$1 work=$2
PY=/usr/bin/python3; [[ -x $PY ]] || PY=python3
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work" && mkdir -p "$work"
for s in depth_study eta_lr_study; do
  msg=$(bash "$src/scripts/$s.sh" --out-root 2>&1); rc=$?
  ((rc == 2)) || fail "$s.sh --out-root without a value: exit $rc, not 2: $msg"
  [[ $msg == "$s.sh: --out-root needs a value" ]] || fail "$s.sh --out-root without a value says: $msg"
  msg=$(bash "$src/scripts/$s.sh" --out-root "" 2>&1); rc=$?
  ((rc == 2)) || fail "$s.sh --out-root '': exit $rc, not 2: $msg"
  [[ $msg == "$s.sh: --out-root needs a value, not an empty one" ]] || fail "$s.sh --out-root '' says: $msg"
  msg=$(bash "$src/scripts/$s.sh" --out-root "$work/$s-none" --echo-train "$work/none" 2>&1); rc=$?
  [[ $rc == 2 && $msg == "$s.sh: --echo-train $work/none: no executable file there" && ! -e $work/$s-none ]] ||
    fail "$s.sh --echo-train MISSING: exit $rc: $msg"
done

msg=$(bash "$src/scripts/depth_study.sh" --steps 7 --out-root "$work/d7" 2>&1) && fail "depth_study.sh --steps 7 ran"
[[ $msg == *"--steps 7: not a multiple of the configs' train.eval_interval (150)"* && ! -e $work/d7 ]] ||
  fail "depth_study.sh --steps 7: $msg"
# refused OPTION VALUE MESSAGE: depth_study.sh exits 2 with that message and makes nothing.
refused() {
  msg=$(bash "$src/scripts/depth_study.sh" --out-root "$work/dbad" "$1" "$2" 2>&1); rc=$?
  [[ $rc == 2 && $msg == "depth_study.sh: $3" && ! -e $work/dbad ]] ||
    fail "depth_study.sh $1 '$2': exit $rc, made $work/dbad: $(ls -d "$work/dbad" 2>&1), says: $msg"
}
refused --seeds "" "--seeds needs a value, not an empty one"
refused --layers "" "--layers needs a value, not an empty one"
refused --layers " " "--layers ' ' lists no number"
refused --steps "" "--steps needs a value, not an empty one"
refused --steps 3x "--steps 3x: not a whole number >= 1 (at most 9 digits, no leading zero)"
refused --steps 0150 "--steps 0150: not a whole number >= 1 (at most 9 digits, no leading zero)"
refused --seeds "1,2" \
  "--seeds '1,2': '1,2' is not a whole number >= 0 (at most 9 digits, no leading zero; separated by spaces: --seeds \"1 2 3\")"
refused --layers "2 0" \
  "--layers '2 0': '0' is not a whole number >= 1 (at most 9 digits, no leading zero; separated by spaces: --layers \"1 2 3\")"
refused --layers "*" \
  "--layers '*': '*' is not a whole number >= 1 (at most 9 digits, no leading zero; separated by spaces: --layers \"1 2 3\")"
refused --seeds "1 2 1" "--seeds '1 2 1' lists 1 twice"
refused --layers $'1\nabc' "--layers: a list on one line, numbers separated by spaces: --layers \"1 2 3\""
refused --echo-train "$work" "--echo-train $work: no executable file there"
touch "$work/a-file"
msg=$(bash "$src/scripts/depth_study.sh" --out-root "$work/a-file" 2>&1); rc=$?
[[ $rc == 2 && $msg == "depth_study.sh: --out-root $work/a-file is not a folder" ]] ||
  fail "depth_study.sh --out-root FILE: exit $rc: $msg"

# Stand-ins for echo_train: fail prints its name and fails; ok writes val_loss 2.00SEED to run.out_dir.
printf '#!/bin/sh\necho fail-1; exit 1\n' > "$work/fail1"
printf '#!/bin/sh\necho fail-2; exit 1\n' > "$work/fail2"
cat > "$work/ok" <<'SH'
#!/usr/bin/env bash
while [[ $# -gt 0 ]]; do
  case $2 in run.out_dir=*) dir=${2#run.out_dir=} ;; run.seed=*) seed=${2#run.seed=} ;; esac
  shift
done
mkdir -p "$dir" && printf '{"step":4,"loss":2.5}\n{"step":4,"val_loss":2.00%s}\n' "$seed" > "$dir/metrics.jsonl"
SH
chmod +x "$work"/fail1 "$work"/fail2 "$work"/ok

# The study scripts run from a copy of the repository whose sweep.py, depth_report.py and plot.py
# log a line each to $STUDY_CALLS: NAME LC_ALL=VALUE ARGS | the grid file (sweep.py's second argument).
repo=$work/repo
mkdir -p "$repo/scripts" "$repo/configs/depth"
cp "$src"/scripts/{depth_study,eta_lr_study,study_common}.sh "$repo/scripts/"
cp "$src/configs/depth/bf16.yaml" "$repo/configs/depth/"
for py in sweep depth_report plot; do
  cat > "$repo/scripts/$py.py" <<'PY'
import os, sys
grid = open(sys.argv[2]).read().strip().replace("\n", "; ") if len(sys.argv) > 2 and os.path.isfile(sys.argv[2]) else ""
with open(os.environ["STUDY_CALLS"], "a") as f:
    f.write(f"{os.path.basename(sys.argv[0])} LC_ALL={os.environ.get('LC_ALL')} {' '.join(sys.argv[1:])} | {grid}\n")
PY
done
export STUDY_CALLS=$work/calls
msg=$(bash "$repo/scripts/depth_study.sh" --out-root "$work/depth" 2>&1) && fail "depth_study.sh ran without an echo_train"
[[ $msg == "depth_study.sh: no echo_train at $repo/build/echo_train (build it, or name one with --echo-train) and no copy in $work/depth" ]] ||
  fail "depth_study.sh without an echo_train says: $msg"
[[ ! -e $work/depth && ! -e $STUDY_CALLS ]] || fail "depth_study.sh without an echo_train made $work/depth or ran sweep.py"

# The sweeps of --layers "2 4" --seeds "1 2", under a caller's LC_ALL that is not C.
LC_ALL=de_DE.UTF-8 bash "$repo/scripts/depth_study.sh" --out-root "$work/depth" --layers "2 4" --seeds "1 2" \
  --echo-train "$work/fail1" >/dev/null 2>&1 || fail "depth_study.sh with stand-ins failed"
[[ $(grep -c '^sweep.py ' "$STUDY_CALLS") == 24 ]] ||
  fail "depth_study.sh --layers '2 4' --seeds '1 2': not 2 x (2 x 4 + 4) sweeps: $(cat "$STUDY_CALLS")"
grep -qF "sweep.py LC_ALL=C $repo/configs/depth/nocomp4.yaml " "$STUDY_CALLS" &&
  grep -qF " --out-root $work/depth/nocomp4 --echo-train $work/depth/echo_train | model.layers: [4]; run.seed: [2]" \
    "$STUDY_CALLS" &&
  grep -qF " --out-root $work/depth/echo8 --echo-train $work/depth/echo_train | model.layers: [4]; run.seed: [1, 2]" \
    "$STUDY_CALLS" &&
  [[ $(tail -1 "$STUDY_CALLS") == "depth_report.py LC_ALL=C $work/depth | " ]] ||
  fail "depth_study.sh's sweeps: $(cat "$STUDY_CALLS")"
grep -v '^[a-z_]*\.py LC_ALL=C ' "$STUDY_CALLS" && fail "depth_study.sh ran a tool outside the C locale"
cmp -s "$work/fail1" "$work/depth/echo_train" || fail "depth_study.sh did not copy --echo-train"

# --echo-train replaces the copy (saying so), none keeps it.
study() { bash "$repo/scripts/depth_study.sh" --out-root "$work/depth" --layers 2 --seeds 1 "$@" 2>&1; }
msg=$(study --echo-train "$work/fail2")
cmp -s "$work/fail2" "$work/depth/echo_train" || fail "depth_study.sh kept its old echo_train over --echo-train"
[[ $msg == *"replacing $work/depth/echo_train with --echo-train $work/fail2"* ]] ||
  fail "depth_study.sh replaced echo_train without saying so: $msg"
study >/dev/null
cmp -s "$work/fail2" "$work/depth/echo_train" || fail "depth_study.sh without --echo-train replaced its copy"
[[ -x $work/depth/echo_train && $(ls "$work/depth") == echo_train ]] ||
  fail "depth_study.sh's copy of echo_train: $(ls -l "$work/depth")"

rm -f "$STUDY_CALLS"
LC_ALL=de_DE.UTF-8 bash "$repo/scripts/eta_lr_study.sh" --out-root "$work/sweeps dir" --echo-train "$work/fail1" \
  >/dev/null 2>&1 || fail "eta_lr_study.sh with stand-ins failed"
[[ $(grep -c '^sweep.py LC_ALL=C ' "$STUDY_CALLS") == 3 && $(grep -c '^plot.py LC_ALL=C ' "$STUDY_CALLS") == 2 ]] &&
  grep -qF " --out-root $work/sweeps dir/lr-echo4 --echo-train $work/sweeps dir/echo_train | " "$STUDY_CALLS" &&
  cmp -s "$work/fail1" "$work/sweeps dir/echo_train" || fail "eta_lr_study.sh's sweeps and plots: $(cat "$STUDY_CALLS")"

# s3r_compare.sh: a failed run leaves --out as it was and names its log, which exists.
echo "the old table" > "$work/table.md"
msg=$(bash "$src/scripts/s3r_compare.sh" 4 --runs "$work/s3r" --echo-train "$work/fail1" --out "$work/table.md" 2>&1) &&
  fail "s3r_compare.sh succeeded with a failing echo_train"
[[ $msg == *"see $work/s3r/bf16_1.log"* && -s $work/s3r/bf16_1.log ]] ||
  fail "the failed run's log is not named or missing: $msg"
grep -q fail-1 "$work/s3r/bf16_1.log" || fail "the log lacks the run's output"
[[ $(cat "$work/table.md") == "the old table" ]] ||
  fail "a failed s3r_compare.sh changed --out: $(cat "$work/table.md")"
[[ $(ls "$work" | grep -c 'table.md.') == 0 ]] || fail "a failed s3r_compare.sh left a temporary file: $(ls "$work")"
chmod 640 "$work/table.md"
bash "$src/scripts/s3r_compare.sh" 4 --runs "$work/s3r" --echo-train "$work/ok" --out "$work/table.md" \
  >/dev/null 2>&1 ||
  fail "s3r_compare.sh failed with a working echo_train"
grep -qF '| S3R-EC two_way | 2.0010 | 2.0020 | 2.0030 | 2.0020 |' "$work/table.md" ||
  fail "s3r_compare.sh --out table wrong: $(cat "$work/table.md")"
# The replaced --out keeps its mode (was chmod 644); a new one gets the umask's.
[[ $(stat -c %a "$work/table.md") == 640 ]] || fail "s3r_compare.sh changed --out's mode 640 to $(stat -c %a "$work/table.md")"
(umask 077 && bash "$src/scripts/s3r_compare.sh" 4 --runs "$work/s3r" --echo-train "$work/ok" --out "$work/new.md" \
  >/dev/null 2>&1) || fail "s3r_compare.sh --out new.md failed"
[[ $(stat -c %a "$work/new.md") == 600 ]] || fail "a new --out under umask 077 has mode $(stat -c %a "$work/new.md"), not 600"
# A folder of --out that does not exist yet is made (the README's `--out runs/s3r/table.md` on a
# fresh clone), relative to the caller's folder.
(cd "$work" && bash "$src/scripts/s3r_compare.sh" 4 --runs "$work/s3r" --echo-train "$work/ok" --out new-dir/deep/t.md \
  >/dev/null 2>&1) || fail "s3r_compare.sh --out new-dir/deep/t.md (folders to make) failed"
grep -qF '| S3R-EC two_way | 2.0010 | 2.0020 | 2.0030 | 2.0020 |' "$work/new-dir/deep/t.md" ||
  fail "s3r_compare.sh did not write $work/new-dir/deep/t.md: $(ls -R "$work/new-dir" 2>&1)"
# "missing/../b/t.md" is b/t.md, and "missing" is not made.
(cd "$work" && bash "$src/scripts/s3r_compare.sh" 4 --runs "$work/s3r" --echo-train "$work/ok" --out never/../dotdot/t.md \
  >/dev/null 2>&1) || fail "s3r_compare.sh --out never/../dotdot/t.md failed"
[[ -s $work/dotdot/t.md && ! -e $work/never ]] || fail "--out never/../dotdot/t.md: $(ls "$work")"

# Paths with a space (--runs, --out: the title line quotes --out as a shell would), under a
# comma-decimal locale (bash's printf %f reads 2.001 as a bad number there): de_DE, built here.
loc=(env)
if mkdir -p "$work/locale" && localedef -i de_DE -f UTF-8 "$work/locale/de_DE.UTF-8" >/dev/null 2>&1; then
  loc=(env LOCPATH="$work/locale" LC_ALL=de_DE.UTF-8)
  [[ $("${loc[@]}" bash -c 'printf %.1f 2,5' 2>/dev/null) == 2,5 ]] ||
    fail "the de_DE locale built in $work/locale does not use a decimal comma"
else
  echo "note: localedef cannot build de_DE here; only checking that the scripts set LC_ALL=C"
fi
mkdir -p "$work/with space"
"${loc[@]}" bash "$src/scripts/s3r_compare.sh" 4 --runs "$work/s3r runs" --echo-train "$work/ok" \
  --out "$work/with space/t.md" >"$work/space.log" 2>&1 ||
  fail "s3r_compare.sh with spaces in --runs and --out (${loc[*]}) failed: $(cat "$work/space.log")"
[[ -s "$work/s3r runs/bf16_1/metrics.jsonl" && -e "$work/s3r runs/bf16_1.log" ]] ||
  fail "s3r_compare.sh --runs '$work/s3r runs': no run there: $(ls "$work")"
grep -qF '| S3R-EC two_way | 2.0010 | 2.0020 | 2.0030 | 2.0020 |' "$work/with space/t.md" &&
  grep -qF "s3r_compare.sh 4 --out $work/with\\ space/t.md\`." "$work/with space/t.md" ||
  fail "s3r_compare.sh --out with a space (${loc[*]}): $(cat "$work/with space/t.md")"
for f in s3r_compare.sh study_common.sh; do
  grep -q '^export LC_ALL=C' "$src/scripts/$f" || fail "scripts/$f does not export LC_ALL=C"
done

# Bad arguments: exit 2 with one line naming the problem, before any run (--runs is not made).
mkdir -p "$work/a-folder"
s3r_refused() {  # s3r_refused MESSAGE ARGS...
  local want=$1; shift
  msg=$(bash "$src/scripts/s3r_compare.sh" --runs "$work/s3r-bad" --echo-train "$work/ok" "$@" 2>&1); rc=$?
  [[ $rc == 2 && $msg == "s3r_compare.sh: $want" && ! -e $work/s3r-bad ]] ||
    fail "s3r_compare.sh $*: exit $rc, made $work/s3r-bad: $(ls -d "$work/s3r-bad" 2>&1), says: $msg"
}
s3r_refused "STEPS given twice ('1' and '2'): give one number" 1 2
s3r_refused "STEPS '0' is not a whole number >= 1 (at most 9 digits, no leading zero; see the header of $src/scripts/s3r_compare.sh)" 0
s3r_refused "STEPS '01' is not a whole number >= 1 (at most 9 digits, no leading zero; see the header of $src/scripts/s3r_compare.sh)" 01
s3r_refused "STEPS '-5' is not a whole number >= 1 (at most 9 digits, no leading zero; see the header of $src/scripts/s3r_compare.sh)" -5
s3r_refused "STEPS '99999999999999999999' is not a whole number >= 1 (at most 9 digits, no leading zero; see the header of $src/scripts/s3r_compare.sh)" 99999999999999999999
s3r_refused "unknown option '--seeds' (see the header of $src/scripts/s3r_compare.sh)" --seeds 1
s3r_refused "--out $work/a-folder is a folder: give the table's file name (--out DIR/table.md)" --out "$work/a-folder"
s3r_refused "--out $work/new/ is a folder: give the table's file name (--out DIR/table.md)" --out "$work/new/"
s3r_refused "--out $work/a-file/deep/t.md: $work/a-file is not a folder" --out "$work/a-file/deep/t.md"
if [[ $(id -u) != 0 ]]; then  # root writes anywhere
  mkdir -p "$work/read-only" && chmod 555 "$work/read-only"
  s3r_refused "--out $work/read-only/new/t.md: folder $work/read-only is not writable" --out "$work/read-only/new/t.md"
fi
s3r_refused "--out /dev/null is not a regular file" --out /dev/null
s3r_refused "--out needs a value, not an empty one" --out ""
s3r_refused "--echo-train needs a value, not an empty one" --echo-train ""
s3r_refused "--out needs a value" --out
s3r_refused "echo_train $work/none: no executable file there (build it, or name one with --echo-train)" \
  --echo-train "$work/none"
s3r_refused "echo_train $work/a-file: no executable file there (build it, or name one with --echo-train)" \
  --echo-train "$work/a-file"
msg=$(bash "$src/scripts/s3r_compare.sh" --runs "" 2>&1); rc=$?
[[ $rc == 2 && $msg == "s3r_compare.sh: --runs needs a value, not an empty one" ]] || fail "s3r_compare.sh --runs '': exit $rc: $msg"
msg=$(bash "$src/scripts/s3r_compare.sh" --runs "$work/a-file" --echo-train "$work/ok" 2>&1); rc=$?
[[ $rc == 2 && $msg == "s3r_compare.sh: --runs $work/a-file is not a folder" ]] ||
  fail "s3r_compare.sh --runs FILE: exit $rc: $msg"
[[ ! -e $work/a-folder.md && -z $(ls -A "$work/a-folder") ]] || fail "a refused --out left files"

# Signals: a SIGTERM or SIGHUP to a study (kill, a scheduler, a closed terminal), or a terminal's Ctrl-C
# (SIGINT to its whole process group), reaches the running sweep.py or mpirun.sh once (a second would
# escalate to SIGTERM), and through it every rank as SIGUSR1 (echo_train's checkpoint; never the SIGTERM
# of mpirun's abort); the study waits for
# them, then exits 128 + n. The real sweep.py and mpirun.sh, with a stand-in echo_train that logs its start
# and the signal it gets. (The study used to die alone: sweep.py, mpirun and the ranks ran on as orphans.)
cat > "$work/sleeper" <<SH
#!/usr/bin/env bash
trap 'echo "\$\$ USR1" >> "$work/sleeper.log"; kill \$sp 2>/dev/null; exit 0' USR1
trap 'echo "\$\$ TERM" >> "$work/sleeper.log"; kill \$sp 2>/dev/null; exit 1' TERM
echo "\$\$ started" >> "$work/sleeper.log"
sleep 120 & sp=\$!
wait \$sp
SH
chmod +x "$work/sleeper"
# signalled HOW RANKS EXIT SCRIPT ARGS...: runs bash SCRIPT ARGS as a terminal's job would (a process group
# of its own, SIGINT not ignored), sends HOW once RANKS stand-ins run (TERM or HUP to the script, INT to its
# process group: Ctrl-C), and checks its exit status, that each rank got SIGUSR1 and never SIGTERM,
# and that nothing with the run's paths is left running.
signalled() {
  local how=$1 ranks=$2 want=$3 pid rc="" i left; shift 3
  : > "$work/sleeper.log"
  "$PY" -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.setpgid(0, 0)
os.execvp("bash", ["bash", *sys.argv[1:]])' "$@" >"$work/sig.out" 2>&1 & pid=$!
  for i in $(seq 1 600); do
    (($(grep -c started "$work/sleeper.log" 2>/dev/null) >= ranks)) && break
    sleep 0.1
  done
  if [[ $how == INT ]]; then kill -INT -- "-$pid"; else kill -s "$how" "$pid"; fi
  for i in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null || { wait "$pid"; rc=$?; }
  sleep 0.5
  left=$(pgrep -af -- "$work/sig-" | grep -v pgrep)
  # Every rank got SIGUSR1, counted per rank: a rank may get it twice, since sweep.py (launch.py)
  # signals the run's whole process group, mpirun.sh and mpirun included, and mpirun forwards what
  # it gets (the copies usually merge while pending; under load one rank of four logged two).
  if [[ -n $left || $rc != "$want" || $(awk '/ USR1$/ {print $1}' "$work/sleeper.log" | sort -u | wc -l) != "$ranks" ||
        $(grep -c ' TERM$' "$work/sleeper.log") != 0 ]]; then
    # Let the stand-ins end (their launcher and sweep.py with them) before failing.
    for i in $(awk '/ started$/ {print $1}' "$work/sleeper.log"); do kill -USR1 "$i" 2>/dev/null; done
    fail "SIG$how to ${1##*/}: exit ${rc:-(still running)}, not $want; left running: $left; stand-ins:" \
      "$(tr '\n' ' ' < "$work/sleeper.log"); said: $(tail -5 "$work/sig.out")"
  fi
}
signalled TERM 4 143 "$src/scripts/depth_study.sh" --out-root "$work/sig-depth" --layers 2 --seeds 1 --echo-train "$work/sleeper"
grep -q 'interrupted at point 1 of 1 (layers=2_seed=1)' "$work/sig.out" || fail "depth_study.sh SIGTERM: $(cat "$work/sig.out")"
signalled INT 4 130 "$src/scripts/depth_study.sh" --out-root "$work/sig-depth" --layers 2 --seeds 1 --echo-train "$work/sleeper"
grep -q 'interrupted at point 1 of 1 (layers=2_seed=1)' "$work/sig.out" || fail "depth_study.sh Ctrl-C: $(cat "$work/sig.out")"
signalled HUP 4 129 "$src/scripts/eta_lr_study.sh" --out-root "$work/sig-sweeps" --echo-train "$work/sleeper"
grep -q 'interrupted at point 1 of 12 (layers=2_eta=0.5_seed=1)' "$work/sig.out" || fail "eta_lr_study.sh SIGHUP: $(cat "$work/sig.out")"
echo "the old table" > "$work/sig-table.md"
signalled TERM 2 143 "$src/scripts/s3r_compare.sh" 4 --runs "$work/sig-s3r" --echo-train "$work/sleeper" --out "$work/sig-table.md"
[[ $(cat "$work/sig-table.md") == "the old table" && -z $(ls "$work" | grep 'sig-table.md.') ]] ||
  fail "an interrupted s3r_compare.sh changed --out or left its temporary table: $(ls "$work")"
echo "ok: study scripts' arguments, echo_train copy and s3r_compare.sh --out"
