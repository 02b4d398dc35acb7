#!/usr/bin/env bash
# Installs the Debian 12 packages qat needs to build, test and run its demo -- only the missing
# ones, so a second run costs nothing. Needs root (or sudo) when something is missing.
# Extra package sets: `install-deps.sh fuzz` (clang + libFuzzer runtime),
#                     `install-deps.sh golden` (PyTorch, to regenerate tests/golden/*).
set -euo pipefail

pkgs=(g++ cmake make pkg-config libxtensor-dev libxtensor-blas-dev libboost-serialization-dev
      libboost-test-dev libhwy-dev libopenblas-dev zlib1g-dev libcli11-dev dataset-fashion-mnist)
for extra in "$@"; do
  case "$extra" in
    fuzz) pkgs+=(clang libclang-rt-14-dev libomp-14-dev) ;;
    golden) pkgs+=(python3-torch python3-numpy) ;;
    *) echo "install-deps.sh: unknown package set '$extra' (known: fuzz, golden)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps.sh: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps.sh: need root to install: ${missing[*]}" >&2; exit 1; }
  sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
