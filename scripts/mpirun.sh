#!/usr/bin/env bash
# mpirun with the flags echo's scripts need on any machine: oversubscription (more ranks than
# cores is fine for the CPU backend), and --allow-run-as-root when running as root.
#   bash scripts/mpirun.sh -np 2 build/echo_bench --sizes 1K..1M
flags=(--oversubscribe --bind-to none)
[[ $(id -u) -eq 0 ]] && flags+=(--allow-run-as-root)
exec mpirun "${flags[@]}" "$@"
