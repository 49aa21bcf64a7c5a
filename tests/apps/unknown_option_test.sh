#!/usr/bin/env bash
# An unknown option is named as such by echo_train, echo_eval and echo_prep, with or without the
# required arguments: CLI11 checks those first, and took the word after the unknown option as its
# value, so `echo_train --bogus` and `echo_train --bogus config.yaml` said "config is required".
# Also refused by name: an option given an empty value, an echo_prep option of the other input
# format, and one echo_prep input given twice.
#   unknown_option_test.sh BUILD_DIR
set -uo pipefail
build=$1
source "$(dirname "$0")/results.sh"
# unknown NAME PROGRAM ARGS...: PROGRAM exits non-zero within 60 s naming --bogus as not expected,
# and does not blame a missing required argument.
unknown() {
  local name=$1 program=$2; shift 2
  local out rc
  out=$(timeout 60 "$build/$program" "$@" 2>&1 </dev/null); rc=$?
  if ((rc == 0 || rc == 124)); then bad "$name: exit $rc" "$out"
  elif [[ $out != *"The following argument was not expected: --bogus"* ]]; then bad "$name: --bogus not named" "$out"
  elif [[ $out == *"is required"* ]]; then bad "$name: blames a required argument" "$out"
  else ok "$name"; fi
}
unknown "echo_train alone" echo_train --bogus
unknown "echo_train before the config" echo_train --bogus configs/quickstart.yaml
unknown "echo_train after the config" echo_train configs/quickstart.yaml --bogus
unknown "echo_eval alone" echo_eval --bogus
unknown "echo_eval before the checkpoint" echo_eval --bogus /nonexistent/checkpoint
unknown "echo_prep alone" echo_prep --bogus
unknown "echo_prep with its options" echo_prep --bogus --input x.txt --tokenizer byte --output-prefix /tmp/x
# refused NAME MESSAGE PROGRAM ARGS...: PROGRAM exits non-zero within 60 s printing MESSAGE.
refused() {
  local name=$1 message=$2 program=$3; shift 3
  local out rc
  out=$(timeout 60 "$build/$program" "$@" 2>&1 </dev/null); rc=$?
  if ((rc == 0 || rc == 124)); then bad "$name: exit $rc" "$out"
  elif [[ $out != *"$message"* ]]; then bad "$name: missing message '$message'" "$out"
  else ok "$name"; fi
}
work=$(mktemp -d /tmp/echo_unknown_option.XXXXXX)
trap 'rm -rf "$work"' EXIT
printf 'some text\n' > "$work/a.txt"
prep=(--tokenizer byte --output-prefix "$work/out")
# An empty value (an unset shell variable) is refused, not taken as a file named '' or ignored.
refused "echo_prep empty --eos-token" "--eos-token: an empty value" echo_prep --input "$work/a.txt" --format text \
  --eos-token '' "${prep[@]}"
refused "echo_eval empty --data" "--data: an empty value" echo_eval /nonexistent/checkpoint --data ''
# --opt= : CLI11 took the next word as the value (a dataset named --append-eos, the flag dropped).
refused "echo_prep --valid-prefix= before a flag" "--valid-prefix: an empty value" echo_prep --input "$work/a.txt" \
  --format text "${prep[@]}" --valid-prefix= --append-eos
refused "echo_eval --data= at the end" "--data: an empty value" echo_eval /nonexistent/checkpoint --data=
refused "echo_train empty config" "config: an empty value (an unset shell variable?): give one" echo_train ''
# An option of the other input format would be ignored.
refused "echo_prep --text-split with jsonl" "--text-split: applies to --format text only" echo_prep \
  --input "$work/a.txt" --format jsonl --text-split line "${prep[@]}"
refused "echo_prep --json-key with text" "--json-key: applies to --format jsonl only" echo_prep \
  --input "$work/a.txt" --format text --json-key body "${prep[@]}"
# One file twice (here under two spellings) would store its documents twice.
refused "echo_prep the same input twice" "are the same file: its documents would be stored twice" echo_prep \
  --input "$work/a.txt" "$work/./a.txt" --format text "${prep[@]}"
[[ ! -e $work/out.bin && ! -e ./--append-eos.bin ]] && ok "nothing written by the refused runs" ||
  bad "a refused run wrote $work/out.bin or ./--append-eos.bin"

# A missing required argument on its own is still named.
out=$(timeout 60 "$build/echo_train" 2>&1 </dev/null)
if [[ $out == *"config is required"* ]]; then ok "missing config"; else bad "missing config" "$out"; fi
finish
