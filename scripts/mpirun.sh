#!/usr/bin/env bash
# mpirun with the flags echo's scripts need on any machine: oversubscription (more ranks than
# cores is fine for the CPU backend), --allow-run-as-root when running as root, and one
# OpenBLAS / OpenMP (oneDNN) thread per rank unless the caller sets them: the CPU backend runs
# one rank per core, and pools per rank would fight over the cores.
#   bash scripts/mpirun.sh -np 2 build/echo_bench --sizes 1K..1M
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
flags=(--oversubscribe --bind-to none -x OPENBLAS_NUM_THREADS -x OMP_NUM_THREADS)
[[ $(id -u) -eq 0 ]] && flags+=(--allow-run-as-root)
exec mpirun "${flags[@]}" "$@"
