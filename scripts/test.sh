#!/usr/bin/env bash
# The README's test command: set up (install + build), then run the whole suite through ctest.
# MPI tests run under mpirun with 2 and 4 ranks, oversubscribed; GPU tests skip without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cd "${ECHO_BUILD_DIR:-build}"
ctest --output-on-failure -j"${ECHO_TEST_JOBS:-2}" "$@"
