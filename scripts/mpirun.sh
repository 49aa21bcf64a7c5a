#!/usr/bin/env bash
# mpirun with the flags echo's scripts need on any machine: oversubscription (more ranks than
# cores is fine for the CPU backend), --allow-run-as-root when running as root, and one
# OpenBLAS / OpenMP (oneDNN) thread per rank unless the caller sets them: the CPU backend runs
# one rank per core, and pools per rank would fight over the cores.
#   bash scripts/mpirun.sh -np 2 build/echo_bench --sizes 1K..1M
#
# Signals: mpirun runs as a child, and a SIGTERM, SIGHUP or SIGINT sent to this script reaches it
# as SIGUSR1, which mpirun forwards to the ranks at once: echo_train then saves a checkpoint at
# the end of its step and exits. NOTE: Open MPI 4.1 treats SIGTERM (and SIGINT, SIGHUP) to mpirun
# as an abort: it SIGTERMs the ranks and SIGKILLs them about a second later, so a rank in a long
# step (or still writing its checkpoint) died with no checkpoint and no log line while this
# script exec'd mpirun. A second TERM/HUP/INT is passed on as SIGTERM (mpirun's abort), for a run
# that cannot stop between steps; SIGUSR1 is always passed on as SIGUSR1. The exit status is
# mpirun's (echo_train exits 0 after such a stop; 128 + signal only if mpirun itself was
# killed). A signal to the whole process group (a terminal's Ctrl-C) still reaches mpirun
# directly as well, as before.
#
# A closed stdin, stdout or stderr (`... >&- 2>&-`) is opened on /dev/null first: Open MPI 4.1.4's
# mpirun, started with some of them closed, hung after the job (stdout and stderr closed) or
# failed it (stdin and stdout closed: exit 138, "Forwarding signal 10 to job").
{ : 9<&0; } 2>/dev/null || exec </dev/null
{ : 9>&1; } 2>/dev/null || exec >/dev/null
: 9>&2 || exec 2>/dev/null  # (a closed stderr: the failed duplication has nowhere to say so)
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
flags=(--oversubscribe --bind-to none -x OPENBLAS_NUM_THREADS -x OMP_NUM_THREADS)
[[ $(id -u) -eq 0 ]] && flags+=(--allow-run-as-root)
# OpenBLAS's kernel choice (which moves a loss in its last digits) reaches ranks on other nodes too.
[[ -n ${OPENBLAS_CORETYPE:-} ]] && flags+=(-x OPENBLAS_CORETYPE)

pid='' pending='' stops=0 interrupted=0
forward() {  # forward SIGNAL: what reaches mpirun for a signal this script caught
  interrupted=1
  local sig=USR1
  if [[ $1 != USR1 ]]; then
    stops=$((stops + 1))
    ((stops > 1)) && sig=TERM
  fi
  if [[ -n $pid ]]; then kill -s "$sig" "$pid" 2>/dev/null; else pending=$sig; fi
}
for s in TERM HUP INT USR1; do trap "forward $s" "$s"; done
# NOTE: <&0: an asynchronous command's stdin would otherwise be /dev/null.
mpirun "${flags[@]}" "$@" <&0 &
pid=$!
[[ -n $pending ]] && kill -s "$pending" "$pid" 2>/dev/null
# `wait` returns early (128 + signal) when a trapped signal arrives: wait again until mpirun
# itself has exited, and return its status.
rc=0 waited=0
while :; do
  interrupted=0
  wait "$pid"
  status=$?
  ((waited && status == 127)) && break  # already reported (a signal landed just after it ended)
  rc=$status waited=1
  ((interrupted && status > 128)) || break
done
exit "$rc"
