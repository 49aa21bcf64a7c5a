#!/usr/bin/env bash
# scripts/check_install.sh must catch a missing install step: with setup.sh as shipped it
# passes; with a copy of setup.sh that lacks ocl-icd-opencl-dev (needed by oneDNN's CMake
# config, the step a fresh machine once missed) it must fail and name that package.
set -u
src=$1 build=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
bash "$src/scripts/check_install.sh" "$build" "$src/scripts/setup.sh" || { echo "FAIL: shipped setup.sh rejected"; exit 1; }
sed 's/ ocl-icd-opencl-dev\b//' "$src/scripts/setup.sh" > "$tmp/setup.sh"
grep -q ocl-icd-opencl-dev "$tmp/setup.sh" && { echo "FAIL: could not remove the package from the copy"; exit 1; }
out=$(bash "$src/scripts/check_install.sh" "$build" "$tmp/setup.sh" 2>&1); rc=$?
[[ $rc -eq 1 ]] || { echo "FAIL: exit $rc without ocl-icd-opencl-dev"; echo "$out"; exit 1; }
grep -q 'ocl-icd-opencl-dev' <<<"$out" || { echo "FAIL: message does not name the package"; echo "$out"; exit 1; }
echo "ok: check_install accepts setup.sh and names ocl-icd-opencl-dev when it is missing"
