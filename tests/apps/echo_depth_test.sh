#!/usr/bin/env bash
# echo_depth as a user runs it (np 2 and 4): the η = 1 ratios respect Theorem 1's (1 + μ_w), every
# η < 1 ratio its Eqn. (21) bound, the uncompensated coherent stream grows like N (exactly N), and
# the CSV/JSON are complete; bad arguments are refused in words. Also plots the CSV when
# matplotlib is there (scripts/plot.py --depth).
#   echo_depth_test.sh BUILD_DIR MPIRUN [mpirun flags...]
set -uo pipefail
build=$1; shift
mpirun=("$@")
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/echo_depth_test.XXXXXX)
trap 'rm -rf "$work"' EXIT
PY=/usr/bin/python3; [[ -x $PY ]] || PY=python3
source "$(dirname "$0")/results.sh"

for np in 2 4; do
  out=$(timeout 240 "${mpirun[@]}" -np $np "$build/echo_depth" --sites 8,16,32 --eta 0,0.75,1 \
        --coeffs 0.7,0.3,0.35 --coeffs 0.9,0.5,0.5 --elements 2048 \
        --csv "$work/d$np.csv" --json "$work/d$np.json" 2>&1); rc=$?
  if ((rc != 0)); then bad "np $np: exit $rc" "$out"; continue; fi
  [[ $out == *"| case | η |"* ]] && ok "np $np: Markdown table" || bad "np $np: no table" "$out"
  check=$("$PY" - "$work/d$np.csv" "$work/d$np.json" <<'PYEOF'
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 2 * 2 * 3 * 3, f"{len(rows)} rows, expected 36 (2 cases x 2 coeffs x 3 eta x 3 N)"
assert len(json.load(open(sys.argv[2]))["rows"]) == len(rows), "JSON and CSV disagree"
for r in rows:
    eta, n, ratio, mu = float(r["eta"]), int(r["sites"]), float(r["max_s_over_q"]), float(r["mu_w"])
    b1, b2, a = float(r["beta1"]), float(r["beta2"]), float(r["a"])
    assert abs(mu - (a * b1 / (1 - b1) + (1 - a) * b2 / (1 - b2))) < 1e-9 * mu, f"mu_w {mu}"
    bound = (1 - eta) * n + eta * (1 + mu)
    assert abs(float(r["bound"]) - bound) < 1e-9 * bound, f"bound {r['bound']} vs {bound}"
    assert ratio <= bound * (1 + 1e-9), f"{r['case']} eta={eta} N={n}: {ratio} > bound {bound}"
    if eta == 1:
        assert ratio <= 1 + mu, f"Theorem 1: {r['case']} N={n}: {ratio} > {1 + mu}"
    if eta == 0 and r["case"] == "coherent":
        assert abs(ratio - n) < 1e-6 * n, f"coherent eta=0 N={n}: {ratio}, expected N"
    if eta == 0 and r["case"] == "independent":
        assert 1.2 < ratio < 0.5 * n + 1, f"independent eta=0 N={n}: {ratio}"
print("ok")
PYEOF
  )
  [[ $check == ok ]] && ok "np $np: bounds hold, coherent eta=0 = N" || bad "np $np: CSV check" "$check"
done

if "$PY" -c "import matplotlib, numpy" 2>/dev/null; then
  plot=$("$PY" "$src/scripts/plot.py" --depth "$work/d2.csv" --out "$work/plots" 2>&1)
  [[ -s $work/plots/depth.png ]] && ok "plot.py --depth wrote depth.png" || bad "plot.py --depth" "$plot"
fi

# refused NAME MESSAGE ARGS...: exits non-zero within 60 s, printing MESSAGE.
refused() {
  local name=$1 message=$2; shift 2
  local out rc
  out=$(timeout 60 "${mpirun[@]}" -np 2 "$build/echo_depth" "$@" 2>&1 </dev/null); rc=$?
  if ((rc == 0 || rc == 124)); then bad "$name: exit $rc, expected a refusal" "$out"
  elif [[ $out != *"$message"* ]]; then bad "$name: missing message '$message'" "$out"
  else ok "$name (exit $rc)"; fi
}
refused "N beyond 512" "each N must lie in [1, 512]" --sites 1024
refused "eta above 1" "η must lie in [0, 1]" --eta 1.5
refused "bad coeffs" "β1 = 1 is out of range [0, 1)" --coeffs 1,0.3,0.35
refused "beta2 that is 1 in fp32" "β2 = 0.99999999 rounds to 1 in fp32" --coeffs 0.7,0.99999999,0.35
refused "bad bits" "must be 4 or 8" --bits 3
refused "negative seed" "--seed: -1 is not a whole number >= 0" --seed -1
# A value given twice is one row: "--eta 1,1 --cases coherent,coherent" gave 4 identical rows.
out=$(timeout 60 "${mpirun[@]}" -np 2 "$build/echo_depth" --sites 8,8 --eta 1,1 --cases coherent,coherent \
      --elements 256 --csv "$work/dup.csv" 2>&1); rc=$?
rows=$(($(wc -l <"$work/dup.csv" 2>/dev/null || echo 0) - 1))
((rc == 0 && rows == 1)) && ok "repeated --sites, --eta and --cases: one row" || bad "repeated values: exit $rc, $rows rows" "$out"
# --json and --csv are one file under any spelling: a name not made yet, bare and with "./" (run in
# the work folder, whose files do not exist yet), and a dangling link to the other.
cd "$work" || exit 1
refused "--json x and --csv ./x" "--json new.json and --csv ./new.json name one file" --sites 8 --json new.json --csv ./new.json
ln -s "$work/target.json" "$work/link.json"
refused "--csv through a dangling link to --json" "name one file" --sites 8 --json target.json --csv link.json
[[ ! -e $work/new.json && ! -e $work/target.json ]] && ok "refused: nothing written" || bad "refused runs wrote files" "$(ls "$work")"

finish
