#!/usr/bin/env bash
# The README's first command: set up, build, and run the main job on the bundled default.
# For now the main job is the all-reduce benchmark on 2 ranks: Echo 4-bit with the
# compensator against the exact 16-bit all-reduce, measured in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mkdir -p runs/quickstart
bash scripts/mpirun.sh -np 2 build/echo_bench --sizes 4K..16M --step-factor 4 --impl echo --bits 4 --compensate \
  --json runs/quickstart/echo_bench.jsonl
echo "quickstart: JSON records in runs/quickstart/echo_bench.jsonl"
