#!/usr/bin/env bash
# Installs the Debian 12 packages qat needs to build, test and run its demo -- only the missing
# ones, so a second run costs nothing. Needs root (or sudo) when something is missing.
# Then onnxruntime-node (npm, into <repo>/.deps) for the ONNX Runtime tests, when absent; without
# network that step only warns and those tests are skipped.
# Extra package sets: `install-deps.sh clang` (clang, its sanitizer and libFuzzer runtimes and
#                     OpenMP: make test-sanitize and make fuzz; `fuzz` is the same set),
#                     `install-deps.sh golden` (PyTorch, to regenerate tests/golden/*).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ort_version=1.30.0

pkgs=(g++ cmake make pkg-config libxtensor-dev libxtensor-blas-dev libboost-serialization-dev
      libboost-test-dev libhwy-dev libopenblas-dev zlib1g-dev libcli11-dev dataset-fashion-mnist
      libonnx-dev libprotobuf-dev libgloo-dev)
# node + npm run the exported models in ONNX Runtime; a node that is already on PATH (e.g.
# nodesource's nodejs, which bundles npm) is kept: Debian's npm package would conflict with it.
command -v node >/dev/null || pkgs+=(nodejs)
command -v npm >/dev/null || pkgs+=(npm)
for extra in "$@"; do
  case "$extra" in
    clang | fuzz) pkgs+=(clang libclang-rt-14-dev libomp-14-dev) ;;
    golden) pkgs+=(python3-torch python3-numpy) ;;
    *) echo "install-deps.sh: unknown package set '$extra' (known: clang, fuzz, golden)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps.sh: installing ${missing[*]}"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "install-deps.sh: need root to install: ${missing[*]}" >&2; exit 1; }
    sudo=sudo
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# ONNX Runtime for node, private to this checkout (no root needed; the package ships its .so).
if [ ! -f "$repo/.deps/node_modules/onnxruntime-node/package.json" ]; then
  echo "install-deps.sh: installing onnxruntime-node@$ort_version into $repo/.deps"
  log="$(mktemp)"
  if npm install --prefix "$repo/.deps" --ignore-scripts --no-audit --no-fund \
       "onnxruntime-node@$ort_version" >"$log" 2>&1; then
    rm -f "$log"
  else
    echo "install-deps.sh: could not install onnxruntime-node; ONNX Runtime tests will be skipped (npm output: $log)" >&2
  fi
fi
