# What depth_study.sh and eta_lr_study.sh share (sourced, after they set STUDY to their name for
# messages): option values, and the copy of echo_train a study's runs use.

# need OPTION ARGS...: an option at the end of the line has no value (set -u would say "$2: unbound").
need() { [[ $# -ge 2 ]] || { echo "$STUDY: $1 needs a value" >&2; exit 2; }; }

# The runs use $out_root/echo_train. A given --echo-train ($echo_train_given non-empty) replaces
# it, saying so when it differs; without one, an existing copy is kept, so that a rebuild does not
# change a study half done.
copy_echo_train() {
  local copy=$out_root/echo_train
  if [[ -n $echo_train_given && -e $copy ]] && ! cmp -s "$echo_train" "$copy"; then
    [[ -f $echo_train ]] || { echo "$STUDY: --echo-train $echo_train: no such file" >&2; exit 2; }
    echo "$STUDY: replacing $copy with --echo-train $echo_train" >&2
  elif [[ -x $copy ]]; then
    return 0
  fi
  cp "$echo_train" "$copy"
}
