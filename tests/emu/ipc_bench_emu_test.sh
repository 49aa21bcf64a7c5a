#!/usr/bin/env bash
# echo_ipc_bench on the kernel emulator at np 2: every row of the Echo paper's Table 2 (16-bit,
# two-collective 8/4-bit, cuda_ipc 16/8/4-bit, 4-bit + unfused and + fused compensator: 8 rows),
# in place and out of place, must finish with 0 wrong elements (the bench exits 1 on any), and the
# JSON must hold one record per row and place. Emulated times mean nothing and are not checked.
#   ipc_bench_emu_test.sh ECHO_IPC_BENCH_EMU MPIRUN [mpirun flags...]
set -uo pipefail
bench=$1; shift
export ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1
work=$(mktemp -d /tmp/echo_ipc_bench_emu.XXXXXX)
trap 'rm -rf "$work"' EXIT
trap 'exit 143' TERM INT
"$@" -np 2 "$bench" --sizes 1M --iters 2 --warmup 1 --out-of-place --json "$work/rows.json" >"$work/log" 2>&1 ||
  { tail -20 "$work/log"; echo "FAIL: echo_ipc_bench exited non-zero"; exit 1; }
grep -q "echo kernel emulator" "$work/log" || { cat "$work/log"; echo "FAIL: the header does not name the device"; exit 1; }
/usr/bin/python3 - "$work/rows.json" <<'PY' || exit 1
import json, sys
text = open(sys.argv[1]).read().strip()
records = json.loads(text) if text.startswith("[") else [json.loads(l) for l in text.splitlines() if l.strip()]
wrong = sum(int(r["wrong"]) for r in records)
rows = {(r["row"], r["place"]) for r in records}
print(f"{len(rows)} rows, {wrong} wrong")
if len(records) != 16 or len(rows) != 16 or wrong != 0:
    print("FAIL: expected 16 distinct (row, place) records with 0 wrong elements")
    sys.exit(1)
PY
