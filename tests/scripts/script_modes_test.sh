#!/usr/bin/env bash
# Every script under scripts/ that starts with a #! line is executable, so the README's commands
# that run one directly (scripts/comm_eval.py RUN_DIR, scripts/sweep.py ...) work in a fresh clone.
#   script_modes_test.sh SRC_DIR
set -uo pipefail
src=$1
bad=0
n=0
for f in "$src"/scripts/*; do
  [[ -f $f && $(head -c 2 "$f") == '#!' ]] || continue
  n=$((n + 1))
  [[ -x $f ]] || { echo "FAIL: ${f#"$src"/} has a #! line but is not executable (git update-index --chmod=+x)"; bad=1; }
done
((n > 0)) || { echo "FAIL: no scripts found under $src/scripts"; exit 1; }
((bad == 0)) && echo "ok: $n scripts with a #! line are executable"
exit "$bad"
