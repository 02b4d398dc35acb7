#!/usr/bin/env bash
# The end-to-end demo (make demo): quantization-aware training of the Fashion-MNIST CNN with
# batch norm, conversion to int8, and a reload of the int8 checkpoint from disk for evaluation.
#   scripts/demo.sh [BUILD_DIR]       (extra cnn_qat options can go in DEMO_ARGS)
set -euo pipefail
build=${1:-build}
out="$build/demo"
mkdir -p "$out"
cnn="$build/examples/cnn_qat"
recipe=(--mode qat --arch cnn-bn --qconfig int8_default --epochs 5 --optimizer sgd --lr 0.05
        --momentum 0.9 --schedule cosine --threads 1 --seed 0)

echo "== training: cnn_qat ${recipe[*]} ${DEMO_ARGS:-}"
start=$(date +%s.%N)
"$cnn" "${recipe[@]}" ${DEMO_ARGS:-} --save "$out/cnn.ckpt" --json | tee "$out/train.log"
train=$(tail -n 1 "$out/train.log")
echo "== reloading the int8 checkpoint and evaluating it"
"$cnn" --load "$out/cnn.ckpt.int8" --eval-only --json --threads 1 | tee "$out/eval.log"
reload=$(tail -n 1 "$out/eval.log")
end=$(date +%s.%N)

field() { sed -n "s/.*\"$2\": \([^,}]*\).*/\1/p" <<<"$1"; }
printf '\n%-34s %s\n' "result" "value"
printf '%-34s %s\n' "QAT (fake-quant) test accuracy" "$(field "$train" test_acc)"
printf '%-34s %s\n' "int8 test accuracy (in memory)" "$(field "$train" int8_acc)"
printf '%-34s %s\n' "int8 test accuracy (reloaded)" "$(field "$reload" test_acc)"
printf '%-34s %s\n' "prediction agreement int8 vs QAT" "$(field "$train" agreement)"
printf '%-34s %s\n' "max logit difference" "$(field "$train" max_logit_diff)"
printf '%-34s %s bytes\n' "QAT checkpoint (with optimizer)" "$(stat -c %s "$out/cnn.ckpt")"
printf '%-34s %s bytes\n' "fp32 model checkpoint" "$(field "$train" fp32_checkpoint_bytes)"
printf '%-34s %s bytes\n' "int8 checkpoint" "$(stat -c %s "$out/cnn.ckpt.int8")"
printf '%-34s %s s\n' "training time per epoch" "$(field "$train" train_s_per_epoch)"
awk -v a="$start" -v b="$end" 'BEGIN { printf "%-34s %.1f s\n", "total demo time", b - a }'
