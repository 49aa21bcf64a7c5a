#!/usr/bin/env bash
# Does scripts/setup.sh install everything the build uses?  A machine set up by hand hides a
# missing install step (oneDNN's CMake config needs OpenCL, which Debian's libdnnl-dev only
# recommends). Run after CMake has configured BUILD_DIR and before building: every file under
# /usr that CMake recorded in BUILD_DIR/CMakeCache.txt (libraries, headers, package configs)
# must belong to a package in setup.sh's PACKAGES list or to that list's dependency closure
# (Depends/PreDepends, what `apt-get install --no-install-recommends` brings).
#   bash scripts/check_install.sh [BUILD_DIR] [SETUP_SCRIPT]
# Exit 0: covered; 1: the build uses a package setup.sh does not install; 2: cannot check.
set -uo pipefail
build=${1:-build}
setup=${2:-$(dirname "$0")/setup.sh}
cache=$build/CMakeCache.txt
[[ -f $cache ]] || { echo "check_install: no $cache (configure first)" >&2; exit 2; }
command -v dpkg-query >/dev/null && command -v apt-cache >/dev/null ||
  { echo "check_install: needs dpkg and apt-cache (Debian)" >&2; exit 2; }

# The PACKAGES=( ... ) array of setup.sh, evaluated on its own.
eval "$(sed -n '/^PACKAGES=(/,/)/p' "$setup")"
((${#PACKAGES[@]})) || { echo "check_install: no PACKAGES=( ... ) list in $setup" >&2; exit 2; }
closure=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
            --no-replaces --no-enhances "${PACKAGES[@]}" 2>/dev/null | grep -vE '^ |^<' | sed 's/:.*//' | sort -u)

# Files CMake recorded; for a package-config directory (XXX_DIR=/usr/lib/.../cmake/xxx), the
# config files inside it, since a directory belongs to many packages.
files=()
while read -r p; do
  if [[ -f $p ]]; then
    files+=("$p")
  elif [[ -d $p && $p == */cmake* ]]; then
    for f in "$p"/*[Cc]onfig.cmake; do [[ -f $f ]] && files+=("$f"); done
  fi
done < <(grep -oE '=/usr/[^;]+' "$cache" | sed 's/^=//' | sort -u)

# One dpkg-query for all files (it reads every package's file list each call): "pkg: path" lines.
# The path as recorded first (a -dev package owns the unversioned .so link), then its target.
declare -A owner
while IFS= read -r line; do
  owner[${line#*: }]=${line%%:*}
done < <(dpkg-query -S "${files[@]}" 2>/dev/null)
resolved=()
for f in "${files[@]}"; do [[ -n ${owner[$f]:-} ]] || resolved+=("$(readlink -f "$f")"); done
if ((${#resolved[@]})); then
  while IFS= read -r line; do owner[${line#*: }]=${line%%:*}; done < <(dpkg-query -S "${resolved[@]}" 2>/dev/null)
fi

missing=()
for f in "${files[@]}"; do
  pkg=${owner[$f]:-${owner[$(readlink -f "$f")]:-}}
  [[ -n $pkg ]] || continue  # not from a package (e.g. /usr/local/cuda): nothing apt could install
  grep -qx "$pkg" <<<"$closure" || missing+=("$pkg (for $f)")
done
if ((${#missing[@]})); then
  echo "check_install: the build uses packages that $setup does not install; add them to PACKAGES:" >&2
  printf '  %s\n' "${missing[@]}" | sort -u >&2
  exit 1
fi
echo "check_install: every package the build uses (${#files[@]} files) is installed by $setup"
