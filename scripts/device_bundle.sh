#!/usr/bin/env bash
# Packs what the GPU machine needs into bundle/: the GPU test binaries, the benchmarks, and
# the shared libraries they load that a bare machine may lack (MPI, yaml-cpp, spdlog, fmt,
# OpenBLAS, ...; not libc and not the CUDA driver). Carry bundle/ to the device and run
# scripts/device_check.sh there.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${ECHO_BUILD_DIR:-build}
ECHO_CUDA=ON bash scripts/setup.sh >/dev/null
rm -rf bundle && mkdir -p bundle/bin bundle/lib
mapfile -t gpu_tests < <(cd "$BUILD_DIR" && ctest -N -L gpu | sed -n 's/^ *Test *#[0-9]*: *//p')
for t in "${gpu_tests[@]}"; do
  find "$BUILD_DIR/tests" -type f -name "$t" -perm -u+x -exec cp {} bundle/bin/ \;
done
cp "$BUILD_DIR"/echo_bench "$BUILD_DIR"/echo_quant_bench bundle/bin/
for b in bundle/bin/*; do
  ldd "$b" | awk '/=> \//{print $3}' | grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux|libcuda)\.' |
    xargs -r -I{} cp -L -n {} bundle/lib/
done
# Open MPI's launcher and its plugins, for benchmarks that need mpirun on the device.
if command -v mpirun >/dev/null; then
  mkdir -p bundle/openmpi && cp -L "$(command -v orterun || command -v mpirun)" bundle/openmpi/mpirun 2>/dev/null || true
fi
du -sh bundle
