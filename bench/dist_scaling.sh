#!/usr/bin/env bash
# Data-parallel scaling on this machine: one CNN epoch (Fashion-MNIST, global batch 64, 1 thread
# per process) as 1 process and as N ranks on loopback (scripts/launch.sh), fp32 and QAT, each
# pair measured back to back in this run; prints the epoch-time ratio, the all-reduce bytes per
# step next to the gradient bytes, and the test accuracies; each mode with the ranks unbound and
# bound to their own cores (scripts/launch.sh QAT_BIND=1).
#   bench/dist_scaling.sh [BUILD] [RANKS]      (EPOCHS=1 ARCH=cnn by default)
set -euo pipefail
build=${1:-build}
ranks=${2:-2}
epochs=${EPOCHS:-1}
arch=${ARCH:-cnn}
prog="$build/examples/cnn_qat"
field() { sed -n "s/.*\"$2\": \"\{0,1\}\([^,\"}]*\).*/\1/p" <<<"$1"; }
printf "%-5s %-6s %12s %12s %8s %10s %10s %14s %14s\n" mode arch "1 proc s/ep" "$ranks rank s/ep" ratio \
  "acc 1" "acc $ranks" "allreduce B/st" "gradient B"
for mode in fp32 qat; do
 for bind in 0 1; do  # ranks free to move, then each bound to its cores (launch.sh QAT_BIND)
  args=(--mode "$mode" --arch "$arch" --epochs "$epochs" --threads 1 --json)
  one=$(QAT_NUM_THREADS=1 "$prog" "${args[@]}" 2>/dev/null | tail -1)
  many=$(MASTER_PORT=$((29400 + RANDOM % 500)) QAT_BIND=$bind QAT_NUM_THREADS=1 ./scripts/launch.sh \
         "$ranks" "$prog" --distributed "${args[@]}" 2>/dev/null | tail -1)
  t1=$(field "$one" train_s_per_epoch)
  tn=$(field "$many" train_s_per_epoch)
  printf "%-5s %-6s %12.2f %12.2f %8.3f %10s %10s %14s %14s\n" "$mode$([ $bind = 1 ] && echo +b)" "$arch" "$t1" "$tn" \
    "$(echo "$tn / $t1" | bc -l)" "$(field "$one" test_acc)" "$(field "$many" test_acc)" \
    "$(field "$many" allreduce_bytes_per_step)" "$(field "$many" gradient_bytes)"
 done
done
echo "(+b: QAT_BIND=1, each rank bound to its own cores)"
