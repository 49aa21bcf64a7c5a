# What depth_study.sh and eta_lr_study.sh share (sourced, after they set STUDY to their name for
# messages): the locale, option values, and the copy of echo_train a study's runs use.

# Numbers in the C locale whatever the caller's (printf %f under de_DE wants 2,5, not 2.5).
export LC_ALL=C

die() { echo "$STUDY: $*" >&2; exit 2; }

# need OPTION ARGS...: an option at the end of the line has no value (set -u would say "$2: unbound"),
# and an empty value ("") is refused too.
need() {
  [[ $# -ge 2 ]] || die "$1 needs a value"
  [[ -n $2 ]] || die "$1 needs a value, not an empty one"
}

# The runs use $out_root/echo_train. A given --echo-train ($echo_train_given non-empty) replaces
# it, saying so when it differs; without one, an existing copy is kept, so that a rebuild does not
# change a study half done.
# check_paths (before anything is made) refuses an --out-root that is not a folder, and a
# --echo-train, or with no copy yet the default build/echo_train, that is not an executable file.
check_paths() {
  [[ ! -e $out_root || -d $out_root ]] || die "--out-root $out_root is not a folder"
  if [[ -n $echo_train_given ]]; then
    [[ -f $echo_train && -x $echo_train ]] || die "--echo-train $echo_train: no executable file there"
  elif ! [[ -f $out_root/echo_train && -x $out_root/echo_train ]]; then
    [[ -f $echo_train && -x $echo_train ]] ||
      die "no echo_train at $echo_train (build it, or name one with --echo-train) and no copy in $out_root"
  fi
}
# make_out_root: mkdir -p $out_root, with one line naming the folder when it fails.
make_out_root() {
  local err
  err=$(mkdir -p "$out_root" 2>&1) || die "--out-root $out_root: cannot make the folder: ${err#mkdir: }"
}
copy_echo_train() {
  local copy=$out_root/echo_train err
  if [[ -n $echo_train_given && -e $copy ]] && ! cmp -s "$echo_train" "$copy"; then
    echo "$STUDY: replacing $copy with --echo-train $echo_train" >&2
  elif [[ -f $copy && -x $copy ]]; then
    return 0
  fi
  # Through a temporary copy and a rename: a cut copy never looks like echo_train, and a copy that
  # another study still runs is not written over ("Text file busy").
  err=$( { cp "$echo_train" "$copy.tmp.$$" && chmod +x "$copy.tmp.$$" && mv -f "$copy.tmp.$$" "$copy"; } 2>&1) ||
    { rm -f "$copy.tmp.$$"; echo "$STUDY: cannot copy $echo_train to $copy: $err" >&2; exit 1; }
}
