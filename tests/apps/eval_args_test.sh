#!/usr/bin/env bash
# echo_eval's numeric options as a user types them: a value given must be a real one. 0 used to
# mean "the default" silently (--batches 0 evaluated train.eval_batches batches) while -1 was
# refused with "must be positive"; now both are refused, naming the option, before any file is read.
#   eval_args_test.sh BUILD_DIR
set -uo pipefail
build=$1
source "$(dirname "$0")/results.sh"
# echo_eval starts Open MPI (a singleton here), whose dlopen'ed components keep allocations that
# LeakSanitizer reports as leaks from "<unknown module>" when the program returns normally (a
# refused option exits 105 that way): no leak check here, as for the mpi-labeled tests
# (scripts/test.sh --sanitize). AddressSanitizer itself stays on.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
# refused NAME MESSAGE ARGS...: echo_eval exits 1 within 60 s and prints MESSAGE without a source location.
refused() {
  local name=$1 message=$2; shift 2
  local out rc
  out=$(timeout 60 "$build/echo_eval" /nonexistent/checkpoint "$@" 2>&1 </dev/null); rc=$?
  if ((rc != 1)); then bad "$name: exit $rc, expected 1" "$out"
  elif [[ $out != *"error: $message"* ]]; then bad "$name: missing '$message'" "$out"
  elif [[ $out == *"[at /"* || $out == *"does not exist"* ]]; then bad "$name: wrong kind of error" "$out"
  else ok "$name"; fi
}
for opt in --tp --batches --micro-batch --global-batch --seq-len; do
  refused "$opt 0" "$opt 0: must be positive" "$opt" 0
  refused "$opt -2" "$opt -2: must be positive" "$opt" -2
done
# CLI11 read a leading zero as octal and 0x as hexadecimal: --batches 010 evaluated 8 batches.
# Refused by the command-line parser (CLI11's exit status 105 for a value that fails a check).
for case in "--batches 010|--batches: 010 has a leading zero, which would read it as octal" \
    "--seq-len 0x10|--seq-len: 0x10 is not a whole number in decimal digits"; do
  args=${case%%|*} message=${case#*|}
  # shellcheck disable=SC2086 # the option and its value are two words
  out=$(timeout 60 "$build/echo_eval" /nonexistent/checkpoint $args 2>&1 </dev/null); rc=$?
  if ((rc != 105)); then bad "$args: exit $rc, expected 105" "$out"
  elif [[ $out != *"$message"* ]]; then bad "$args: missing '$message'" "$out"
  else ok "$args"; fi
done
# The layout is --tp's: a --set of parallel.tp (silently ignored before) is refused naming --tp.
refused "--set parallel.tp" "--set parallel.tp: echo_eval takes its layout from --tp" --set parallel.tp=2
# Without the options, the checkpoint is what is wrong.
out=$(timeout 60 "$build/echo_eval" /nonexistent/checkpoint 2>&1 </dev/null)
if [[ $out == *"error: checkpoint '/nonexistent/checkpoint' does not exist"* ]]; then ok "defaults"
else bad "defaults" "$out"; fi
# A symbolic-link loop at the checkpoint's name is not "does not exist".
loop_dir=$(mktemp -d /tmp/echo_eval_args.XXXXXX)
ln -s "$loop_dir/loop" "$loop_dir/loop"
out=$(timeout 60 "$build/echo_eval" "$loop_dir/loop" 2>&1 </dev/null)
if [[ $out == *"error: checkpoint '$loop_dir/loop' cannot be resolved: it is a symbolic-link loop"* ]]; then
  ok "symbolic-link loop"
else bad "symbolic-link loop" "$out"; fi
rm -rf "$loop_dir"
finish
