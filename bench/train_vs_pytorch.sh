#!/usr/bin/env bash
# Training speed next to PyTorch, same machine, same run: seconds per epoch of our mlp_qat /
# cnn_qat and of the PyTorch reference script (same model, data, batch, optimizer), 1 thread,
# fp32 and QAT, printed with the ratio ours / PyTorch (< 1: we are faster).
#   bench/train_vs_pytorch.sh [BUILD_DIR]   env: EPOCHS (default 1), MODELS ("mlp cnn"),
#                                               REFERENCE (path of torch_qat_fmnist.py)
set -euo pipefail
build=${1:-build}
epochs=${EPOCHS:-1}
ref=${REFERENCE:-$(dirname "$0")/../../shared/reference/torch_qat_fmnist.py}
if [ ! -f "$ref" ] || ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "train_vs_pytorch: needs python3-torch (scripts/install-deps.sh golden) and the reference" \
       "script (REFERENCE=$ref); skipped"
  exit 0
fi
field() { sed -n "s/.*\"$2\": \([^,}]*\).*/\1/p" <<<"$1"; }
printf '%-6s %-5s %14s %14s %10s %11s %11s\n' model mode "ours s/epoch" "torch s/epoch" "ratio" "ours acc" "torch acc"
for model in ${MODELS:-mlp cnn}; do
  for mode in fp32 qat; do
    # the reference recipe: SGD(0.05, 0.9), batch 64, constant learning rate
    ours=$("$build/examples/${model}_qat" --mode "$mode" --epochs "$epochs" --threads 1 --schedule none --json 2>/dev/null | tail -n 1)
    torch_out=$(/usr/bin/python3 "$ref" "$model" "$mode" "$epochs" 1 2>/dev/null)
    t_ours=$(field "$ours" train_s_per_epoch)
    t_torch=$(awk '/train_s_per_epoch/ {print $NF}' <<<"$torch_out")
    acc_torch=$(awk '/ epoch / {a=$NF} END {print a}' <<<"$torch_out")
    awk -v m="$model" -v d="$mode" -v a="$t_ours" -v b="$t_torch" -v x="$(field "$ours" test_acc)" -v y="$acc_torch" \
      'BEGIN { printf "%-6s %-5s %14.2f %14.2f %9.2fx %11s %11s\n", m, d, a, b, a / b, x, y }'
  done
done
