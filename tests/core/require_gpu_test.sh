#!/usr/bin/env bash
# ECHO_REQUIRE_GPU=1 turns a GPU test's skip into a failure (tests/support/gpu_test.h), so the
# device check cannot pass on a machine whose GPU does not work. Runs tensor_test's device
# test twice: plainly, which tells whether this machine has a device (skipped: none), then
# with ECHO_REQUIRE_GPU=1, which must fail without a device and pass with one.
set -u
bin=$1
filter=--gtest_filter='TensorCudaTest.*'
plain=$("$bin" "$filter" 2>&1); plain_rc=$?
required=$(ECHO_REQUIRE_GPU=1 "$bin" "$filter" 2>&1); required_rc=$?
[[ $plain_rc -eq 0 ]] || { echo "FAIL: plain run failed"; echo "$plain"; exit 1; }
if grep -q '^\[  SKIPPED' <<<"$plain"; then
  grep -q 'ECHO_REQUIRE_GPU is set' <<<"$required" ||
    { echo "FAIL: no device, but ECHO_REQUIRE_GPU=1 did not report it"; echo "$required"; exit 1; }
  [[ $required_rc -ne 0 ]] || { echo "FAIL: no device, but ECHO_REQUIRE_GPU=1 exited 0"; exit 1; }
  echo "ok: no device; skipped plainly, failed under ECHO_REQUIRE_GPU=1"
else
  [[ $required_rc -eq 0 ]] || { echo "FAIL: device present but ECHO_REQUIRE_GPU=1 run failed"; echo "$required"; exit 1; }
  echo "ok: device present; passed under ECHO_REQUIRE_GPU=1"
fi
