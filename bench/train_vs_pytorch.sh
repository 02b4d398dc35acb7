#!/usr/bin/env bash
# Training speed next to PyTorch, same machine, same run: seconds per epoch of our mlp_qat /
# cnn_qat and of PyTorch on the same model, data, batch, optimizer and learning rate, fp32 and QAT,
# printed with the ratio ours / PyTorch (< 1: we are faster).
#   bench/train_vs_pytorch.sh [BUILD_DIR]   env: EPOCHS (default 1), MODELS ("mlp cnn"),
#       DEVICE (cpu: the reference script ../shared/reference/torch_qat_fmnist.py, 1 thread;
#               cuda: both on the GPU, PyTorch through bench/torch_fmnist_device.py),
#       REFERENCE (path of torch_qat_fmnist.py), PYTHON (/usr/bin/python3), DATA (Fashion-MNIST dir)
set -euo pipefail
build=${1:-build}
epochs=${EPOCHS:-1}
device=${DEVICE:-cpu}
python=${PYTHON:-/usr/bin/python3}
data=${DATA:-/usr/share/datasets/fashion-mnist}
here=$(dirname "$0")
ref=${REFERENCE:-$here/../../shared/reference/torch_qat_fmnist.py}
case "$device" in
  cpu) torch_cmd() { "$python" "$ref" "$1" "$2" "$epochs" 1; }
       script=$ref ;;
  cuda) torch_cmd() { "$python" "$here/torch_fmnist_device.py" "$1" "$2" "$epochs" cuda "$data"; }
        script=$here/torch_fmnist_device.py ;;
  *) echo "train_vs_pytorch: DEVICE must be cpu or cuda, got '$device'" >&2; exit 2 ;;
esac
if [ ! -f "$script" ] || ! "$python" -c "import torch" 2>/dev/null; then
  echo "train_vs_pytorch: needs PyTorch for $python (scripts/install-deps.sh golden) and $script; skipped"
  exit 0
fi
if [ "$device" = cuda ] && ! "$python" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "train_vs_pytorch: DEVICE=cuda but PyTorch sees no CUDA device; skipped"
  exit 0
fi
field() { sed -n "s/.*\"$2\": \([^,}]*\).*/\1/p" <<<"$1"; }
echo "device: $device ($("$python" -c 'import torch; print("torch", torch.__version__)'))"
printf '%-6s %-5s %14s %14s %10s %11s %11s\n' model mode "ours s/epoch" "torch s/epoch" "ratio" "ours acc" "torch acc"
for model in ${MODELS:-mlp cnn}; do
  for mode in fp32 qat; do
    # the reference recipe: SGD(0.05, 0.9), batch 64, constant learning rate
    ours=$("$build/examples/${model}_qat" --mode "$mode" --epochs "$epochs" --threads 1 --schedule none \
           --device "$device" --data "$data" --json 2>/dev/null | tail -n 1 || true)
    torch_out=$(torch_cmd "$model" "$mode" 2>/dev/null || true)  # a failed side prints "failed"
    t_ours=$(field "$ours" train_s_per_epoch)
    t_torch=$(awk '/train_s_per_epoch/ {print $NF}' <<<"$torch_out")
    acc_torch=$(awk '/ epoch / {a=$NF} END {print a}' <<<"$torch_out")
    awk -v m="$model" -v d="$mode" -v a="$t_ours" -v b="$t_torch" -v x="$(field "$ours" test_acc)" -v y="$acc_torch" \
      'BEGIN { if (a == "" || b == "") { printf "%-6s %-5s failed (ours: \"%s\", torch: \"%s\")\n", m, d, a, b; exit }
               printf "%-6s %-5s %14.2f %14.2f %9.2fx %11s %11s\n", m, d, a, b, a / b, x, y }'
  done
done
