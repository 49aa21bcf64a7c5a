#!/usr/bin/env bash
# The independent NumPy model of the Echo compensator (compensator_numpy_model.py) reproduces the
# constants that tests/comm/compensator_mpi_test.cpp (PartialSumsMatchTheIndependentNumPyModel)
# asserts for the C++ QAR + compensator (P = 4, b = 4, g = 128, n = 4096, ratio
# max_t ||S_t|| / max_k ||delta_k||, mean over the model's seeds):
#   independent, eta = 0: within 10 % of 2.75, 5.44, 10.74, 15.08 for N = 8, 32, 128, 256
#   independent, eta = 1: within 10 % of 1.1
#   coherent,    eta = 0: N within 2 %
#   coherent,    eta = 1: in [1.0, 1.8]
#   compensator_numpy_model_test.sh [PYTHON]
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PY=${1:-/usr/bin/python3}; [[ -x $PY ]] || PY=python3
fail() { echo "FAIL: $*"; exit 1; }
"$PY" -c 'import numpy' 2>/dev/null || fail "$PY has no numpy"
work=$(mktemp -d) || fail "mktemp"
trap 'rm -rf "$work"' EXIT
"$PY" "$here/compensator_numpy_model.py" --seed 0 --seeds 8 --sites 8,32,128,256 --json "$work/model.json" \
  || fail "compensator_numpy_model.py exited with status $?"
[[ -s $work/model.json ]] || fail "the model wrote no JSON"
"$PY" - "$work/model.json" <<'EOF' || fail "the model's numbers miss the C++ test's constants (see above)"
import json, sys
rows = {r["N"]: r for r in json.load(open(sys.argv[1]))["rows"]}
misses = 0
def check(ok, what):
    global misses
    print(("  pass: " if ok else "FAIL: ") + what)
    misses += not ok
for n, want in ((8, 2.75), (32, 5.44), (128, 10.74), (256, 15.08)):
    r = rows.get(n)
    if r is None:
        check(False, f"N = {n} missing from the model's table")
        continue
    i0, i1 = r["independent_eta0"]["mean"], r["independent_eta1"]["mean"]
    k0, k1 = r["coherent_eta0"]["mean"], r["coherent_eta1"]["mean"]
    check(abs(i0 - want) <= 0.10 * want, f"N={n} independent eta=0 {i0:.3f} within 10 % of {want}")
    check(abs(i1 - 1.1) <= 0.10 * 1.1, f"N={n} independent eta=1 {i1:.3f} within 10 % of 1.1")
    check(abs(k0 - n) <= 0.02 * n, f"N={n} coherent eta=0 {k0:.3f} within 2 % of {n}")
    check(1.0 <= k1 <= 1.8, f"N={n} coherent eta=1 {k1:.3f} in [1.0, 1.8]")
sys.exit(1 if misses else 0)
EOF
echo "ok: numpy compensator model"
