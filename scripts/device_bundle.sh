#!/usr/bin/env bash
# Packs what the lent GPU machine needs into bundle/ (git-ignored), from an existing CUDA build:
#   bash scripts/device_bundle.sh [--dry-run] [BUILD_DIR]       (BUILD_DIR defaults to build/)
# then carry bundle/ to the device and run `bash scripts/device_check.sh` there.
#
# bundle/ holds three files: env.sh, payload.tar.xz (unpacked by env.sh the first time it is
# sourced) and MANIFEST.txt. NOTE: xz, not gzip: every binary holds the same 2.6 MB of CUDA
# kernels (.nv_fatbin), which gzip's 32 KB window packs anew in each (61 MB) and xz's 64 MiB
# dictionary only once (24 MB); env.sh unpacks with Python's lzma where xz is missing. The payload is
#   bin/      every ctest test labelled gpu, the MPI tests the device check runs with 2 and 4
#             ranks, echo_train, echo_bench, echo_quant_bench, echo_model_bench, echo_prep
#   lib/      every shared library they load except glibc and the CUDA driver and toolkit
#             libraries (libcublasLt alone is 540 MB, libnccl 220 MB); lib/fallback-*/ hold libstdc++/libgcc_s
#             and libcudart, which env.sh uses only when the machine has no suitable copy
#   openmpi/  Open MPI 4.1's launcher (mpirun = orterun, orted, ompi_info), its MCA plugins,
#             help texts and config, and PMIx's plugins, relocated by env.sh (OPAL_PREFIX,
#             OPAL_LIBDIR, OPAL_PKGLIBDIR, OPAL_DATADIR, ... and PMIX_*)
#   data/     a tiny byte-level dataset (echo_prep on 24 KB of data/corpus) for the loss parity
#   configs/  quickstart.yaml (the loss parity's model, with overrides) and model_bench.yaml
#   tests.env each test's ctest ENVIRONMENT (NAME VAR=VALUE ...), which the runs must use;
#   tests.gpu, tests.mpi  the names of the gpu-labelled and of the multi-rank tests
# A target missing from BUILD_DIR is built there (-j2). --dry-run then unpacks a copy of the
# bundle in a temporary directory and, in a clean environment (env -i; LD_LIBRARY_PATH only
# from env.sh), proves every binary loads, ldd finds every library in the bundle, and the
# bundle's mpirun runs MPI tests with the system's Open MPI hidden; PASS/FAIL per check,
# exit 1 on any failure. A target that cannot be built stops it, unless
# ECHO_BUNDLE_ALLOW_MISSING=1 (the manifest then names what is missing).
set -euo pipefail
trap 'echo "device_bundle.sh: failed (rc $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/.."
ROOT=$PWD
dry_run=false
BUILD_DIR=build
for arg in "$@"; do
  case "$arg" in
    --dry-run) dry_run=true ;;
    -h | --help) sed -n '2,25p' "$0"; exit 0 ;;
    -*) echo "device_bundle: unknown option '$arg' (try --help)" >&2; exit 2 ;;
    *) BUILD_DIR=$arg ;;
  esac
done
BUILD_DIR=${BUILD_DIR%/}
BUNDLE=${ECHO_BUNDLE_DIR:-bundle}
MPI_TESTS=(seam_golden_mpi_test trainer_mpi_test tp_mpi_test qar_mpi_test make_all_reduce_mpi_test world_mpi_test)
TOOLS=(echo_train echo_bench echo_quant_bench echo_model_bench echo_kernel_bench echo_ipc_bench echo_eval echo_prep)
GLIBC_RE='/(libc|libm|libpthread|libdl|librt|libutil|libresolv|ld-linux-x86-64|libcuda|libnvidia-[a-z-]*)\.so'
CUDA_RE='/(libnccl|libcudart|libcublas|libcublasLt|libnvrtc|libnvJitLink|libcufft|libcurand|libcusparse|libcusolver)\.so'
# Open MPI plugins for fabrics a single GPU machine does not use; their libraries are not shipped.
SKIP_PLUGIN_DEPS='libuc[pstm]\.|libibverbs|librdmacm|libfabric|libpsm|libinfinipath|libefa|libnl-|liboshmem'
die() { echo "device_bundle: $*" >&2; exit 1; }

[[ -f "$BUILD_DIR/CMakeCache.txt" ]] || die "$BUILD_DIR is not a configured build (bash scripts/setup.sh first)"
command -v ompi_info >/dev/null || die "ompi_info not found: Open MPI must be installed here"
command -v xz >/dev/null || die "xz not found (apt-get install xz-utils): the payload is packed with it"

# find_bin NAME: the executable NAME in BUILD_DIR, built (-j2) when missing; waits while
# another build is linking it (a file that is not yet a complete ELF). Prints nothing when it
# cannot be had.
find_bin() {
  local name=$1 f try
  for try in 1 2 3 4 5 6 7; do
    # NOTE: ELF files only: a test's work folder may hold a script of the same name (the study
    # scripts' test makes a stand-in echo_train), which find may list first.
    f=$(find "$BUILD_DIR" -path '*/CMakeFiles' -prune -o -type f -name "$name" -perm -u+x -print |
      while IFS= read -r c; do [[ $(head -c 4 "$c" | od -An -c | tr -d ' ') == 177ELF ]] && { echo "$c"; break; }; done ||
      true)
    if [[ -z "$f" ]]; then
      [[ $try -eq 1 ]] || return 0
      echo "device_bundle: building $name in $BUILD_DIR" >&2
      cmake --build "$BUILD_DIR" -j2 --target "$name" >"${TMPDIR:-/tmp}/device_bundle.build.log" 2>&1 ||
        { tail -5 "${TMPDIR:-/tmp}/device_bundle.build.log" >&2; return 0; }
      continue
    fi
    readelf -h "$f" >/dev/null 2>&1 && ldd "$f" >/dev/null 2>&1 && { echo "$f"; return 0; }
    sleep 10
  done
}

# A test labelled both gpu and mpi is registered once per rank count (NAME_np2, NAME_np4): one binary.
mapfile -t GPU_TESTS < <(cd "$BUILD_DIR" && ctest -N -L gpu | sed -n 's/^ *Test *#[0-9]*: *//p' | sed 's/_np[0-9]*$//' |
  awk '!seen[$0]++')
printf '%s\n' "${GPU_TESTS[@]}" | grep -q '_cuda_test$' ||
  die "$BUILD_DIR has no *_cuda_test: configure it with -DECHO_CUDA=ON (nvcc at /usr/local/cuda)"

STAGE=$(mktemp -d "${TMPDIR:-/tmp}/echo-bundle.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
P=$STAGE/payload
mkdir -p "$P"/{bin,lib/fallback-cxx,lib/fallback-cudart,openmpi/bin,openmpi/lib,openmpi/share,openmpi/etc,data,configs,scripts}

# 1. Binaries.
missing=()
for n in "${GPU_TESTS[@]}" "${MPI_TESTS[@]}" "${TOOLS[@]}"; do
  f=$(find_bin "$n")
  if [[ -n "$f" ]]; then cp "$f" "$P/bin/$n"; else missing+=("$n"); fi
done
if ((${#missing[@]})); then
  # ECHO_BUNDLE_ALLOW_MISSING=1 bundles the rest (the manifest names what is missing).
  [[ "${ECHO_BUNDLE_ALLOW_MISSING:-0}" == 1 ]] || die "cannot build: ${missing[*]} (ECHO_BUNDLE_ALLOW_MISSING=1 bundles without them)"
  echo "device_bundle: WARNING: bundled without ${missing[*]}" >&2
fi
for n in orterun orted ompi_info; do cp -L "$(command -v $n)" "$P/openmpi/bin/$n"; done
ln -s orterun "$P/openmpi/bin/mpirun"
ln -s orterun "$P/openmpi/bin/mpiexec"

# Each bundled test's ctest ENVIRONMENT (e.g. seam_golden's OPENBLAS_CORETYPE=Haswell, which its
# bit-exact numbers need), one line per binary: NAME VAR=VALUE ... (device_check.sh reads it).
command -v python3 >/dev/null || die "python3 is needed to read ctest's test list"
(cd "$BUILD_DIR" && ctest --show-only=json-v1) | python3 -c '
import json, re, sys
want = set(sys.argv[1:]); done = set()
for t in json.load(sys.stdin)["tests"]:
    name = re.sub(r"_np[0-9]+$", "", t["name"])
    if name in want and name not in done:
        env = next((p["value"] for p in t.get("properties", []) if p["name"] == "ENVIRONMENT"), [])
        print(name, *env); done.add(name)
' "${GPU_TESTS[@]}" "${MPI_TESTS[@]}" >"$P/tests.env"
printf '%s\n' "${GPU_TESTS[@]}" >"$P/tests.gpu"
printf '%s\n' "${MPI_TESTS[@]}" >"$P/tests.mpi"

# 2. Open MPI's plugins, help texts and config; PMIx's plugins and help texts.
pkglibdir=$(ompi_info --path pkglibdir | awk '{print $NF}')
pkgdatadir=$(ompi_info --path pkgdatadir | awk '{print $NF}')
sysconfdir=$(ompi_info --path sysconfdir | awk '{print $NF}')
plugdir=$P/openmpi/lib/$(basename "$pkglibdir")
mkdir -p "$plugdir"
skipped_plugins=()
for so in "$pkglibdir"/*.so; do
  if readelf -d "$so" | grep NEEDED | grep -qE "$SKIP_PLUGIN_DEPS"; then skipped_plugins+=("$(basename "$so" .so)"); continue; fi
  cp -L "$so" "$plugdir/"
done
cp -rL "$pkgdatadir" "$P/openmpi/share/"
cp -rL "$sysconfdir"/. "$P/openmpi/etc/" 2>/dev/null || true
pmix_lib=$(readlink -f "$(ldconfig -p | awk '$1=="libpmix.so.2" {print $NF; exit}')" 2>/dev/null || true)
pmix_root=$(dirname "$(dirname "${pmix_lib:-/x/x/x}")")   # .../pmix2 (Debian's PMIx tree)
if [[ -d "$pmix_root/lib/pmix" ]]; then
  mkdir -p "$P/openmpi/pmix/lib" "$P/openmpi/pmix/share"
  cp -rL "$pmix_root/lib/pmix" "$P/openmpi/pmix/lib/"
  cp -rL "$pmix_root/share/." "$P/openmpi/pmix/share/"
fi

# 3. Shared libraries: everything ldd resolves for the binaries and plugins, less glibc, the
# CUDA driver and the CUDA toolkit (libcudart goes to a fallback directory).
declare -A seen
copy_deps() {
  local name path
  while read -r name path; do
    [[ -n "${seen[$name]:-}" ]] && continue
    seen[$name]=1
    if [[ "$path" =~ $GLIBC_RE ]]; then continue; fi
    if [[ "$path" =~ /libcudart\.so ]]; then cp -L "$path" "$P/lib/fallback-cudart/$name"; continue; fi
    if [[ "$path" =~ $CUDA_RE ]]; then continue; fi
    if [[ "$name" =~ ^lib(stdc\+\+|gcc_s)\.so ]]; then cp -L "$path" "$P/lib/fallback-cxx/$name"; continue; fi
    cp -L "$path" "$P/lib/$name"
  done < <(ldd "$@" 2>/dev/null | awk '$2=="=>" && $3 ~ /^\// {print $1, $3}')
}
copy_deps "$P"/bin/* "$P"/openmpi/bin/orterun "$P"/openmpi/bin/orted "$P"/openmpi/bin/ompi_info
copy_deps "$plugdir"/*.so
[[ -d "$P/openmpi/pmix/lib/pmix" ]] && copy_deps "$P"/openmpi/pmix/lib/pmix/*.so
chmod -R u+w "$P"

# 4. The tiny dataset and the configs.
corpus=data/corpus/nlp-corpus/doc-0.json
[[ -f "$corpus" ]] || die "$corpus is missing: run bash scripts/get_data.sh"
# The first sentences of one corpus file, about 24 KB, as a JSON array (echo_prep reads it).
awk 'NR==1 {print; next} /^\]/ {exit} {n += length($0); if (n > 24000) exit; print}' "$corpus" |
  sed '$ s/,$//' >"$STAGE/tiny.json"
echo "]" >>"$STAGE/tiny.json"
mkdir -p "$P/data/tiny"
"$P/bin/echo_prep" --input "$STAGE/tiny.json" --format jsonl --tokenizer byte --threads 1 \
  --output-prefix "$P/data/tiny/train" --valid-prefix "$P/data/tiny/valid" --valid-fraction 0.1 >"$STAGE/prep.log" 2>&1 ||
  { cat "$STAGE/prep.log"; die "echo_prep failed"; }
# The loss parity runs configs/quickstart.yaml's model with overrides (scripts/device_check.sh).
cp configs/quickstart.yaml configs/model_bench.yaml configs/qwen3-0.6b-bf16.yaml "$P/configs/"
# The PyTorch baseline of the training-step benchmark (the GPU image has torch and transformers).
mkdir -p "$P/scripts" && cp scripts/torch_reference.py "$P/scripts/"

# 5. env.sh, the manifest, the payload.
# (lib/fallback-*/ not counted: env.sh uses them only where the machine lacks its own copy.)
# Only ELF files: objdump fails on an executable script (scripts/torch_reference.py is one), and
# under pipefail that failure ended the whole bundle.
elf_symbols() {
  local f
  while IFS= read -r -d '' f; do
    [[ $(head -c 4 "$f") == $'\x7fELF' ]] && objdump -T "$f" 2>/dev/null
  done
  return 0
}
glibc_need=$(find "$P" -path '*/fallback-*' -prune -o -type f \( -name '*.so*' -o -perm -u+x \) -print0 | elf_symbols |
  grep -oE 'GLIBC_[0-9]+\.[0-9]+' | sort -Vu | tail -1)
cxx_need=$(find "$P/bin" "$P/lib" -maxdepth 1 -type f -print0 | elf_symbols | grep -oE 'GLIBCXX_[0-9.]+[0-9]' |
  sort -Vu | tail -1)
cat >"$STAGE/env.sh" <<EOF_ENV
# source bundle/env.sh: puts the bundle's programs, libraries and Open MPI first (made by
# scripts/device_bundle.sh). Unpacks payload.tar.xz beside this file into ECHO_BUNDLE_UNPACK
# (default \$TMPDIR/echo-bundle-UID), again whenever the payload changed, and sets ECHO_BUNDLE to
# it. NOTE: not into bundle/ itself: unpacked (179 MB) it could no longer travel to a device
# machine (64 MiB). ECHO_BUNDLE_FALLBACK=all|none forces the fallback libraries on or off;
# ECHO_BUNDLE_UNXZ=python unpacks with Python's lzma even where xz is installed (a check).
_eb_src=\$(cd "\$(dirname "\${BASH_SOURCE[0]}")" && pwd)
_eb=\${ECHO_BUNDLE_UNPACK:-\${TMPDIR:-/tmp}/echo-bundle-\$(id -u)}
_eb_stamp="\$_eb_src \$(stat -c '%s %Y' "\$_eb_src/payload.tar.xz" 2>/dev/null)"
# _eb_unpack TOOL ARCHIVE DIR: tar with xz, or Python's tarfile (lzma is in its standard library).
_eb_unpack() {
  if [[ \$1 == xz ]]; then
    tar -xJf "\$2" -C "\$3"
  else
    # NOTE: the payload is ours (made by device_bundle.sh): no extraction filter (Python 3.14's
    # default "data" filter would refuse nothing here, but older ones lack the argument).
    python3 -c 'import sys, tarfile
kw = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2], **kw)' "\$2" "\$3"
  fi
}
if [[ ! -f "\$_eb/.unpacked" || \$(cat "\$_eb/.unpacked") != "\$_eb_stamp" ]]; then
  # NOTE: only a folder this file unpacked (.unpacked) or began to unpack (.unpacking: an unpack
  # that was interrupted), or an empty one, is cleared.
  if [[ -d "\$_eb" && ! -f "\$_eb/.unpacked" && ! -f "\$_eb/.unpacking" && -n \$(ls -A "\$_eb" 2>/dev/null) ]]; then
    echo "env.sh: \$_eb holds files that are not an unpacked bundle; set ECHO_BUNDLE_UNPACK to an empty folder" >&2
    return 1 2>/dev/null || exit 1
  fi
  _eb_err="" _eb_tool=python
  if [[ \${ECHO_BUNDLE_UNXZ:-} != python ]] && command -v xz >/dev/null; then
    _eb_tool=xz
  elif ! python3 -c 'import lzma' 2>/dev/null; then
    _eb_err="neither xz nor a python3 with its lzma module is installed here"
  fi
  if [[ -z \$_eb_err ]] && ! { rm -rf "\$_eb" && mkdir -p "\$_eb" && : >"\$_eb/.unpacking"; }; then
    _eb_err="cannot make the folder"
  fi
  if [[ -z \$_eb_err ]] && ! _eb_out=\$(_eb_unpack \$_eb_tool "\$_eb_src/payload.tar.xz" "\$_eb" 2>&1); then
    _eb_err="\$_eb_tool failed: \$(tail -n 3 <<<"\$_eb_out")"
    rm -rf "\$_eb"  # a half-unpacked bundle is never used
  fi
  if [[ -n \$_eb_err ]]; then
    echo "env.sh: cannot unpack \$_eb_src/payload.tar.xz into \$_eb: \$_eb_err" >&2
    return 1 2>/dev/null || exit 1
  fi
  rm -f "\$_eb/.unpacking" && echo "\$_eb_stamp" >"\$_eb/.unpacked"
fi
export ECHO_BUNDLE=\$_eb ECHO_BUNDLE_GLIBC_NEEDED=$glibc_need ECHO_BUNDLE_GLIBCXX_NEEDED=$cxx_need
# _eb_sys_has SONAME [NEEDLE]: the machine has its own SONAME (containing NEEDLE).
_eb_sys_has() {
  local f
  for f in \$( (ldconfig -p || /sbin/ldconfig -p) 2>/dev/null | awk -v s="\$1" '\$1==s && /x86-64/ {print \$NF}') \\
           /lib/x86_64-linux-gnu/\$1 /usr/lib/x86_64-linux-gnu/\$1 /usr/lib64/\$1 \${CUDA_HOME:-/usr/local/cuda}/lib64/\$1; do
    [[ -e "\$f" ]] && { [[ -z "\${2:-}" ]] || grep -qa "\$2" "\$f"; } && return 0
  done
  return 1
}
_eb_ld=\$_eb/lib
# CUDA toolkit libraries are not bundled: use the machine's (its ld.so cache or CUDA_HOME).
for _d in \${CUDA_HOME:-/usr/local/cuda}/lib64 \${CUDA_HOME:-/usr/local/cuda}/lib; do
  [[ -e "\$_d/libcublasLt.so.13" || -e "\$_d/libnccl.so.2" ]] && { _eb_ld=\$_eb_ld:\$_d; break; }
done
case "\${ECHO_BUNDLE_FALLBACK:-auto}" in
  all) _eb_ld=\$_eb/lib/fallback-cxx:\$_eb/lib/fallback-cudart:\$_eb_ld ;;
  none) ;;
  *) _eb_sys_has libstdc++.so.6 "\$ECHO_BUNDLE_GLIBCXX_NEEDED" || _eb_ld=\$_eb_ld:\$_eb/lib/fallback-cxx
     _eb_sys_has libcudart.so.13 || _eb_ld=\$_eb_ld:\$_eb/lib/fallback-cudart ;;
esac
export PATH=\$_eb/bin:\$_eb/openmpi/bin\${PATH:+:\$PATH}
export LD_LIBRARY_PATH=\$_eb_ld\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
# Open MPI 4.1 relocation: every install directory it reads, moved into the bundle.
export OPAL_PREFIX=\$_eb/openmpi OPAL_EXEC_PREFIX=\$_eb/openmpi OPAL_BINDIR=\$_eb/openmpi/bin
export OPAL_LIBDIR=\$_eb/lib OPAL_PKGLIBDIR=\$_eb/openmpi/lib/$(basename "$pkglibdir")
export OPAL_DATADIR=\$_eb/openmpi/share OPAL_PKGDATADIR=\$_eb/openmpi/share/$(basename "$pkgdatadir") OPAL_SYSCONFDIR=\$_eb/openmpi/etc
export PMIX_PREFIX=\$_eb/openmpi/pmix PMIX_LIBDIR=\$_eb/lib PMIX_PKGLIBDIR=\$_eb/openmpi/pmix/lib/pmix
export PMIX_DATADIR=\$_eb/openmpi/pmix/share PMIX_PKGDATADIR=\$_eb/openmpi/pmix/share/pmix PMIX_SYSCONFDIR=\$_eb/openmpi/pmix/share
export PMIX_MCA_mca_base_component_path=\$_eb/openmpi/pmix/lib/pmix
# What the suite passes to mpirun (cmake/EchoTest.cmake), as defaults: plain \`mpirun -np 4\` works.
export OMPI_MCA_btl=\${OMPI_MCA_btl:-self,vader,tcp} OMPI_MCA_rmaps_base_oversubscribe=\${OMPI_MCA_rmaps_base_oversubscribe:-1}
export OMPI_MCA_hwloc_base_binding_policy=\${OMPI_MCA_hwloc_base_binding_policy:-none}
# Every rank on this machine: no ssh/rsh launcher (Open MPI looks for one even for local ranks,
# and the GPU image has none).
export OMPI_MCA_plm=\${OMPI_MCA_plm:-isolated}
export OPENBLAS_NUM_THREADS=\${OPENBLAS_NUM_THREADS:-1} OMP_NUM_THREADS=\${OMP_NUM_THREADS:-1}
[[ \$(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset _eb _eb_src _eb_stamp _eb_ld _d
EOF_ENV
{
  echo "echo device bundle, made $(date -u +%FT%TZ) from $(git rev-parse --short HEAD 2>/dev/null || echo '?') build dir $BUILD_DIR"
  echo "needs: glibc >= ${glibc_need#GLIBC_}, a CUDA 13 driver (>= 580), the CUDA 13 library libcublasLt.so.13 and NCCL libnccl.so.2 (libcudart.so.13 is bundled as a fallback)"
  echo "cuda code in bin/gemm_cuda_test: $(strings -a "$P/bin/gemm_cuda_test" 2>/dev/null | grep -oE '\bsm_[0-9]+a?\b' | sort -u | tr '\n' ' ')"
  echo "gpu tests: ${GPU_TESTS[*]}"
  echo "mpi tests: ${MPI_TESTS[*]}"
  echo "tools: ${TOOLS[*]}"
  echo "missing (could not be built): ${missing[*]:-none}"
  echo "open mpi plugins skipped (fabric libraries not shipped): ${skipped_plugins[*]}"
  echo "files:"
  (cd "$P" && find . -type f -printf '%10s %P\n' | sort -k2)
} >"$STAGE/MANIFEST.txt"
tar -cf - -C "$P" . | xz -9 -T2 >"$STAGE/payload.tar.xz"
rm -rf "$BUNDLE"
mkdir -p "$BUNDLE"
mv "$STAGE/payload.tar.xz" "$STAGE/env.sh" "$STAGE/MANIFEST.txt" "$BUNDLE/"
echo "device_bundle: $(find "$P" -type f | wc -l) files, $(du -sh "$P" | cut -f1) unpacked; ${#GPU_TESTS[@]} gpu tests, ${#MPI_TESTS[@]} mpi tests, ${#TOOLS[@]} tools"
du -sh "$BUNDLE"
# What a device call carries: the tracked and untracked-not-ignored files plus bundle/, 64 MiB at
# most; keep 2 MiB spare.
tree_bytes=$( (git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s 2>/dev/null || true) |
  awk '{ s += $1 } END { print s + 0 }')
bundle_bytes=$(du -sb "$BUNDLE" | cut -f1)
echo "device_bundle: a device call carries $(((tree_bytes + bundle_bytes) >> 20)) MiB (tree $((tree_bytes >> 20)) MiB + bundle $((bundle_bytes >> 20)) MiB) of 64"
if ((tree_bytes + bundle_bytes > 62 << 20)); then
  echo "device_bundle: that is over 62 MiB: a device call carries 64 MiB at most (build for sm_90 only, or ship less)" >&2
  exit 1
fi

$dry_run || exit 0

# --dry-run: a copy of the bundle somewhere else, a clean environment.
echo "== dry run (copy in $STAGE/b, env -i, LD_LIBRARY_PATH only from env.sh) =="
cp -r "$BUNDLE" "$STAGE/b"
fails=0
check() {  # check NAME COMMAND...: runs COMMAND in the clean environment with the bundle sourced
  local name=$1 out rc
  shift
  rc=0
  out=$(cd "$STAGE" && env -i PATH=/usr/bin:/bin HOME="$HOME" TMPDIR="${TMPDIR:-/tmp}" ECHO_BUNDLE_UNPACK="$STAGE/u" \
    GLIBC_RE="$GLIBC_RE" CUDA_RE="$CUDA_RE" bash -c 'source b/env.sh && eval "$1"' _ "$*" 2>&1) || rc=$?
  if [[ $rc -eq 0 ]]; then echo "PASS  $name"; else echo "FAIL  $name (exit $rc)"; tail -15 <<<"$out" | sed 's/^/      /'; fails=$((fails + 1)); fi
}
check "env.sh unpacks the payload outside bundle/" \
  '[[ $ECHO_BUNDLE == */u ]] && test -x $ECHO_BUNDLE/bin/echo_train && test -d $ECHO_BUNDLE/openmpi/lib && ! test -e b/bin'
check "env.sh unpacks with Python's lzma where xz is missing (the same files, modes and links)" \
  'ECHO_BUNDLE_UNPACK=$PWD/upy ECHO_BUNDLE_UNXZ=python bash -c "source b/env.sh && cd \$ECHO_BUNDLE && find . ! -name .unpacked -printf \"%M %l %s %P\n\" | sort" >upy.txt && (cd u && find . ! -name .unpacked -printf "%M %l %s %P\n" | sort) >uxz.txt && diff uxz.txt upy.txt && test -s upy.txt'
check "env.sh refuses a truncated payload (source fails, nothing unpacked is left)" \
  'cp -r b bt && head -c 1000000 b/payload.tar.xz >bt/payload.tar.xz && ! ECHO_BUNDLE_UNPACK=$PWD/ut bash -c "source bt/env.sh" 2>ut.err && grep -q "cannot unpack" ut.err && ! test -e ut'
check "env.sh redoes an interrupted unpack (.unpacking left behind)" \
  'mkdir ui && touch ui/.unpacking ui/half && ECHO_BUNDLE_UNPACK=$PWD/ui bash -c "source b/env.sh && test -x \$ECHO_BUNDLE/bin/echo_train && ! test -e \$ECHO_BUNDLE/half && ! test -e \$ECHO_BUNDLE/.unpacking"'
mapfile -t bins < <(tar -tJf "$BUNDLE/payload.tar.xz" | sed -n 's|^\./bin/||p' | grep . | sort)
for b in "${bins[@]}"; do
  case "$b" in
    *_test) check "loads: $b --gtest_list_tests" "\$ECHO_BUNDLE/bin/$b --gtest_list_tests >/dev/null" ;;
    *) check "loads: $b --help" "\$ECHO_BUNDLE/bin/$b --help >/dev/null" ;;
  esac
done
# Every library a bundled file needs resolves, and into the bundle unless it is glibc, the
# driver or the CUDA toolkit.
check "ldd: nothing 'not found' in bin/, lib/, openmpi/" \
  '! find $ECHO_BUNDLE/bin $ECHO_BUNDLE/lib $ECHO_BUNDLE/openmpi -type f \( -name "*.so*" -o -perm -u+x \) -exec ldd {} + 2>&1 | grep -B20 "not found"'
check "ldd: every other library resolves into the bundle" \
  'bad=$(find $ECHO_BUNDLE/bin $ECHO_BUNDLE/lib $ECHO_BUNDLE/openmpi -type f \( -name "*.so*" -o -perm -u+x \) -exec ldd {} + 2>/dev/null |
     grep -oE "=> /[^ ]+" | cut -c4- | sort -u | grep -vE "$GLIBC_RE|$CUDA_RE|/lib(stdc\+\+|gcc_s)\.so" | grep -v "^$ECHO_BUNDLE/")
   [[ -z $bad ]] || { echo "resolved outside the bundle:"; echo "$bad"; exit 1; }'
check "which mpirun is the bundle's" '[[ $(which mpirun) == $ECHO_BUNDLE/openmpi/bin/mpirun ]] && which mpirun'
check "ompi_info reports the relocated install dirs" \
  'ompi_info --path pkglibdir | grep -q "$ECHO_BUNDLE/openmpi/lib" && ompi_info --path pkgdatadir | grep -q "$ECHO_BUNDLE/openmpi/share"'
check "mpirun -np 2 seam_golden_mpi_test PASSES" 'out=$(env $(sed -n "s/^seam_golden_mpi_test //p" $ECHO_BUNDLE/tests.env) mpirun -np 2 $ECHO_BUNDLE/bin/seam_golden_mpi_test 2>&1) && grep -q "PASSED" <<<"$out" || { echo "$out"; exit 1; }'
check "Open MPI and PMIx load only from the bundle (LD_DEBUG, mpirun -np 2 world_mpi_test)" \
  'LD_DEBUG=libs,files LD_DEBUG_OUTPUT=$PWD/lddebug mpirun -np 2 $ECHO_BUNDLE/bin/world_mpi_test >/dev/null 2>&1 || exit 1
   cat lddebug.* >ld.all; rm -f lddebug.*
   grep -qE "file=$ECHO_BUNDLE/openmpi/lib/[^ ]*/mca_" ld.all || { echo "no bundled plugin load seen"; exit 1; }
   bad=$(grep -oE "calling init: /[^ ]*(openmpi|pmix|libmpi|libopen-|mca_)[^ ]*" ld.all | grep -v "$ECHO_BUNDLE/" | sort -u)
   [[ -z $bad ]] || { echo "loaded outside the bundle:"; echo "$bad"; exit 1; }'
# With root and unshare, the system's Open MPI is hidden outright (bind mounts in a private
# mount namespace) and the bundle must still run 4 ranks.
if [[ $(id -u) -eq 0 ]] && unshare -m --propagation private true 2>/dev/null; then
  hide="" hide_dirs=""
  # ssh and rsh too: the GPU image has neither, and Open MPI looks for one even for local ranks.
  for p in "$pkglibdir" "$pkgdatadir" "$sysconfdir" "$pmix_root" $(readlink -f "$(command -v orterun)" "$(command -v orted)" "$(command -v mpirun)") \
           $(command -v ssh rsh | xargs -r readlink -f) \
           $(ldconfig -p | awk '$1 ~ /^lib(mpi|open-rte|open-pal|pmix|mpi_cxx)\.so/ && /x86-64/ {print $NF}' | xargs -r readlink -f | sort -u); do
    [[ -e "$p" ]] || continue
    if [[ -d "$p" ]]; then hide_dirs+="mount --bind $STAGE/empty $p && "; else hide+="mount --bind /dev/null $p && "; fi
  done
  hide+=$hide_dirs
  mkdir -p "$STAGE/empty"
  rc=0
  out=$(cd "$STAGE" && unshare -m --propagation private env -i PATH=/usr/bin:/bin HOME="$HOME" ECHO_BUNDLE_UNPACK="$STAGE/u" bash -c \
    "${hide} source b/env.sh && ! test -s /usr/bin/orterun && env \$(sed -n 's/^seam_golden_mpi_test //p' \$ECHO_BUNDLE/tests.env) mpirun -np 4 \$ECHO_BUNDLE/bin/seam_golden_mpi_test" 2>&1) || rc=$?
  if [[ $rc -eq 0 ]] && grep -q PASSED <<<"$out"; then echo "PASS  system Open MPI and ssh hidden: mpirun -np 4 seam_golden_mpi_test"
  else echo "FAIL  system Open MPI and ssh hidden: mpirun -np 4 seam_golden_mpi_test"; tail -15 <<<"$out" | sed 's/^/      /'; fails=$((fails + 1)); fi
else
  echo "SKIP  system Open MPI hidden (needs root and unshare -m)"
fi
echo "dry run: $fails failed"
[[ $fails -eq 0 ]]
