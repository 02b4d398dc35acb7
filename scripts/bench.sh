#!/usr/bin/env bash
# make bench: every benchmark, each figure next to a reference measured in the same run.
set -euo pipefail
build=${1:-build}
./scripts/install-deps.sh golden  # PyTorch, the reference of the training benchmark
for b in "$build"/bench/bench_*; do
  [ -x "$b" ] || continue
  echo "== $(basename "$b")"
  "$b"
done
echo "== train_vs_pytorch (EPOCHS=${EPOCHS:-1})"
./bench/train_vs_pytorch.sh "$build"
echo "== cpu_table (issue 9's figures, AVX2 path and the best path)"
./bench/cpu_table.sh "$build"
echo "== dist_scaling (data-parallel: 2 ranks x 1 thread vs 1 process x 1 thread)"
./bench/dist_scaling.sh "$build" 2
