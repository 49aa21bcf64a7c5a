#!/usr/bin/env bash
# The study scripts' argument handling, without training: depth_study.sh and eta_lr_study.sh
# refuse an option without its value; depth_study.sh --echo-train replaces the out-root's copy
# of echo_train (kept without --echo-train); s3r_compare.sh with a stand-in echo_train writes its
# table to --out only when every run finished (keeping a replaced file's mode), and a failed run
# names a log that exists.
#   study_scripts_test.sh SRC_DIR WORK
set -uo pipefail
src=$1 work=$2
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work" && mkdir -p "$work"
for s in depth_study eta_lr_study; do
  msg=$(bash "$src/scripts/$s.sh" --out-root 2>&1); rc=$?
  ((rc == 2)) || fail "$s.sh --out-root without a value: exit $rc, not 2: $msg"
  [[ $msg == "$s.sh: --out-root needs a value" ]] || fail "$s.sh --out-root without a value says: $msg"
done

msg=$(bash "$src/scripts/depth_study.sh" --steps 7 --out-root "$work/d7" 2>&1) && fail "depth_study.sh --steps 7 ran"
[[ $msg == *"--steps 7: not a multiple of the configs' train.eval_interval (150)"* && ! -e $work/d7 ]] ||
  fail "depth_study.sh --steps 7: $msg"

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

# depth_study.sh with no layers trains nothing (and its report fails): only the copy is looked at.
study() { bash "$src/scripts/depth_study.sh" --out-root "$work/depth" --layers "" "$@" 2>&1; }
study --echo-train "$work/fail1" >/dev/null
cmp -s "$work/fail1" "$work/depth/echo_train" || fail "depth_study.sh did not copy --echo-train"
msg=$(study --echo-train "$work/fail2")
cmp -s "$work/fail2" "$work/depth/echo_train" || fail "depth_study.sh kept its old echo_train over --echo-train"
[[ $msg == *"replacing $work/depth/echo_train with --echo-train $work/fail2"* ]] ||
  fail "depth_study.sh replaced echo_train without saying so: $msg"
study >/dev/null
cmp -s "$work/fail2" "$work/depth/echo_train" || fail "depth_study.sh without --echo-train replaced its copy"

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
echo "ok: study scripts' arguments, echo_train copy and s3r_compare.sh --out"
