#!/usr/bin/env bash
# echo_kernel_bench on the kernel emulator, every row at small sizes: the ceilings (copy, bf16
# GEMM), the memory-bound kernels, the layer's bf16 and int8 GEMMs and attention forward and
# backward must run (no launch error, ASan report or cuBLASLt refusal), and the JSON must hold the
# 15 rows, each with a positive time. Emulated times mean nothing and are not checked.
#   kernel_bench_emu_test.sh ECHO_KERNEL_BENCH_EMU
set -uo pipefail
bench=$1
export ASAN_OPTIONS=detect_leaks=0
work=$(mktemp -d /tmp/echo_kernel_bench_emu.XXXXXX)
trap 'rm -rf "$work"' EXIT
trap 'exit 143' TERM INT
"$bench" --tokens 64 --hidden 64 --ffn 96 --heads 4 --kv-heads 2 --head-dim 16 --seq 32 --iters 2 --copy-mib 1 \
  --gemm-ceiling-n 64 --adamw-params 4096 --json "$work/rows.json" >"$work/log" 2>&1 ||
  { tail -20 "$work/log"; echo "FAIL: echo_kernel_bench exited non-zero"; exit 1; }
grep -q "echo kernel emulator" "$work/log" || { cat "$work/log"; echo "FAIL: the header does not name the device"; exit 1; }
grep -q "copy d2d 1 MiB (ceiling)" "$work/log" || { cat "$work/log"; echo "FAIL: the copy row does not name its size"; exit 1; }
/usr/bin/python3 - "$work/rows.json" <<'PY' || exit 1
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
names = [r["kernel"] for r in rows]
bad = [r["kernel"] for r in rows if not r["ms"] > 0 or not r["rate"] > 0]
print(f"{len(rows)} rows, {len(bad)} without a positive time")
if len(rows) != 15 or len(set(names)) != 15 or bad:
    print("FAIL: expected 15 distinct rows, each timed:", names, bad)
    sys.exit(1)
PY
