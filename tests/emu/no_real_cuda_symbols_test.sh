#!/usr/bin/env bash
# Every program linked against the kernel emulator must take each CUDA runtime, cuBLASLt and NCCL
# call from the emulator's stand-ins: a call the stand-ins do not define resolves to the real
# library instead (cudaMemcpy2D did, found by review), where it fails without a GPU, or worse, runs
# outside the emulated streams. This lists the programs' undefined dynamic symbols of those APIs.
#   no_real_cuda_symbols_test.sh PROGRAM...
set -uo pipefail
bad=0
for program in "$@"; do
  leaks=$(nm -D --undefined-only "$program" | grep -E ' (cuda|cublas|nccl)[A-Za-z0-9_]*(@|$)' | awk '{print $2}' | sort -u)
  if [[ -n $leaks ]]; then
    echo "FAIL: $(basename "$program") takes these from the real libraries: $(echo $leaks)"
    bad=1
  fi
done
((bad == 0)) && echo "$# programs, no CUDA, cuBLAS or NCCL symbol left to the real libraries"
exit $bad
