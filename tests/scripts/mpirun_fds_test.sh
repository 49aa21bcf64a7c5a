#!/usr/bin/env bash
# scripts/mpirun.sh with stdin, stdout or stderr closed (`... >&- 2>&-`, a daemon or a cron job):
# it opens them on /dev/null before starting mpirun. Open MPI 4.1.4's mpirun started with them
# closed hung after the job, or failed it (exit 138, "Forwarding signal 10 to job", with all
# three closed). Each case runs 2 ranks of a shell that marks its rank and writes to stdout and
# stderr, under `timeout 60`.
#   mpirun_fds_test.sh SRC_DIR WORK
set -uo pipefail
src=$1 work=$2
passed=0 failed=0
ok() { echo "ok: $*"; passed=$((passed + 1)); }
bad() { echo "FAIL: $*"; failed=$((failed + 1)); }
rm -rf "$work" && mkdir -p "$work" || { echo "FAIL: cannot make $work"; exit 1; }
export MARKS=$work/marks
for closed in "<&-" ">&- 2>&-" "<&- >&- 2>&-" "<&- >&-"; do
  rm -rf "$MARKS" && mkdir "$MARKS"
  # NOTE: eval: the closing redirections are text; timeout's own stdout/stderr stay open for rc.
  # shellcheck disable=SC2016
  eval "timeout 60 bash \"\$src/scripts/mpirun.sh\" -np 2 sh -c 'touch \"\$MARKS/rank\$OMPI_COMM_WORLD_RANK\"; echo out; echo err >&2' $closed"
  rc=$?
  if ((rc == 124)); then
    bad "mpirun.sh with $closed still ran after 60 s"
  elif ((rc != 0)); then
    bad "mpirun.sh with $closed exited $rc"
  elif [[ ! -e $MARKS/rank0 || ! -e $MARKS/rank1 ]]; then
    bad "mpirun.sh with $closed exited 0, but not both ranks ran: $(ls "$MARKS")"
  else
    ok "mpirun.sh -np 2 with $closed: both ranks ran, exit 0"
  fi
done
echo "$passed passed, $failed failed"
