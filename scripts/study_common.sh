# What depth_study.sh, eta_lr_study.sh and s3r_compare.sh share (sourced, after they set STUDY to
# their name for messages): the locale, option values, signals (run_child), and the copy of
# echo_train a study's runs use.

# Numbers in the C locale whatever the caller's (printf %f under de_DE wants 2,5, not 2.5).
export LC_ALL=C

die() { echo "$STUDY: $*" >&2; exit 2; }

# run_child CMD...: CMD's exit status. A SIGTERM, SIGHUP or SIGINT to the study while CMD runs is
# passed on to CMD (sweep.py and scripts/mpirun.sh turn it into a checkpoint and a clean stop);
# once CMD has ended, the study exits 128 + n (an `exit`: the EXIT trap runs; after `trap - SIG`,
# dying of the signal skips an EXIT trap set after these traps). Before,
# CMD ran in the foreground with no trap: a `kill` of the study left sweep.py, mpirun and the
# ranks running as orphans, and the EXIT trap removed the temporary grid under them.
# NOTE: CMD runs in a session of its own (setsid), so a signal to the whole process group (a
# terminal's Ctrl-C, GNU timeout) reaches it once, through here: sweep.py and mpirun.sh take a
# second signal as "abort the run". CMD gets SIGTERM for any of the three: bash starts a
# background command with SIGINT ignored, which no script can undo. A second signal is passed on
# too (the abort, as a second Ctrl-C always was). Outside run_child the study exits at once.
child_pid='' child_signal='' child_interrupted=0
stop_child() {  # stop_child SIGNAL: the trap of TERM, HUP and INT
  [[ -n $child_pid ]] || exit $((128 + $(kill -l "$1")))
  child_signal=${child_signal:-$1} child_interrupted=1
  kill -s TERM "$child_pid" 2>/dev/null || true
}
for sig in TERM HUP INT; do trap "stop_child $sig" "$sig"; done
run_child() {
  local status
  setsid "$@" </dev/null & child_pid=$!
  [[ -z $child_signal ]] || kill -s TERM "$child_pid" 2>/dev/null || true  # a signal while it was started
  # `wait` returns early (128 + n) when a trapped signal arrives: wait again until CMD has ended.
  while :; do
    child_interrupted=0 status=0
    wait "$child_pid" || status=$?
    ((child_interrupted && status > 128)) || break
  done
  child_pid=''
  [[ -z $child_signal ]] || exit $((128 + $(kill -l "$child_signal")))
  return "$status"
}

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
