#!/usr/bin/env bash
# Every GPU check in one call, for the lent GPU machine: runs the GPU-labelled tests (from
# bundle/ made by scripts/make_bundle.sh, or from build/ when the machine can build) and
# prints a short table last. Exit status is non-zero when any check failed or skipped:
# ECHO_REQUIRE_GPU=1 makes a GPU test fail when it finds no usable device.
set -uo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
export ECHO_REQUIRE_GPU=1
if [[ -d bundle/bin ]]; then
  export LD_LIBRARY_PATH="$PWD/bundle/lib:${LD_LIBRARY_PATH:-}"
  mapfile -t tests < <(ls bundle/bin/*_test)
else
  bash scripts/setup.sh >/dev/null
  mapfile -t names < <(cd build && ctest -N -L gpu | sed -n 's/^ *Test *#[0-9]*: *//p')
  tests=()
  for n in "${names[@]}"; do tests+=("$(find build/tests -type f -name "$n" -perm -u+x | head -1)"); done
fi
declare -a rows
status=0
for t in "${tests[@]}"; do
  [[ -x "$t" ]] || continue
  start=$(date +%s.%N)
  out=$("$t" 2>&1); rc=$?
  secs=$(echo "$(date +%s.%N) - $start" | bc)
  passed=$(grep -oE '[0-9]+ tests?, listed below|PASSED.*[0-9]+ test' <<<"$out" | tail -1)
  skipped=$(grep -c '^\[  SKIPPED' <<<"$out")
  [[ $skipped -ne 0 ]] && rc=1
  [[ $rc -ne 0 ]] && status=1 && echo "$out" | tail -30
  rows+=("$(printf '%-28s %-6s %8.2fs  %s skipped=%s' "$(basename "$t")" "$([[ $rc -eq 0 ]] && echo ok || echo FAIL)" "$secs" "$passed" "$skipped")")
done
((${#tests[@]})) || { echo "no GPU test binaries found"; status=1; }
echo
echo "== device_check summary =="
printf '%s\n' "${rows[@]}"
exit $status
