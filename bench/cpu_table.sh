#!/usr/bin/env bash
# Issue 9's table: every speed figure of the CPU paths as a ratio to its reference, measured in
# this run, for the AVX2 path, the AVX-512 path and the best path this CPU has (QAT_CPU selects the kernels of the
# same binary). 1 thread unless said otherwise. PyTorch runs on the same instruction set as each
# path (bench/torch_env.sh caps oneDNN and ATen), as it would on a CPU without the sets above it.
# avx2_vnni (AVX2 with AVX-VNNI) differs from avx2 only in its int8 GEMM: its column has the int8
# rows only. A listed path this CPU lacks is left out.
# Our MLP epochs run three times (fp32 and QAT alternating) and the threads row twice; each takes
# the fastest epoch, as the kernel benchmarks take their fastest trial (bench_quant's LSQ row
# alternates with its reference likewise).
#   bench/cpu_table.sh [BUILD_DIR]    env: PATHS ("avx2 avx2_vnni avx512 best"), EPOCHS (1), SKIP_DEMO=1
set -euo pipefail
build=${1:-build}
epochs=${EPOCHS:-1}
ref=${REFERENCE:-$(dirname "$0")/../../shared/reference/torch_qat_fmnist.py}
have_torch=0
if [ -f "$ref" ] && /usr/bin/python3 -c "import torch" 2>/dev/null; then have_torch=1; fi
field() { sed -n "s/.*\"$2\": \([^,}]*\).*/\1/p" <<<"$1" | tr -d '"'; }
min_of() { awk -v a="$1" -v b="$2" 'BEGIN { print (a < b ? a : b) }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0 && a != "") printf "%.2fx", a / b; else print "n/a" }'; }
path_of() {  # path_of QAT_CPU -> the path the binary takes with it
  QAT_CPU=$1 "$build/examples/mlp_qat" --mode fp32 --epochs 0 --test-limit 1 --json 2>/dev/null |
    tail -n 1 | sed -n 's/.*"cpu": "\([a-z0-9_]*\)".*/\1/p'
}
best=$(path_of "")
paths=${PATHS:-avx2 avx2_vnni avx512 best}
paths=${paths//best/$best}
# a path listed twice (best = avx2) runs once; one this CPU lacks not at all
paths=$(for p in $paths; do [ "$(path_of "$p")" = "$p" ] && echo "$p"; done | awk 'NF && !seen[$0]++' | tr '\n' ' ')
cpu_model=$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1)
echo "CPU: $cpu_model, $(nproc) cores; best kernel path: $best; paths measured: $paths"

ours() {  # ours MODEL MODE PATH [THREADS] -> JSON line
  QAT_CPU=$3 "$build/examples/${1}_qat" --mode "$2" --epochs "$epochs" --threads "${4:-1}" \
    --schedule none --json 2>/dev/null | tail -n 1
}
torch_s() {  # torch_s MODEL MODE PATH -> seconds per epoch
  [ $have_torch = 1 ] || { echo ""; return; }
  "$(dirname "$0")/torch_env.sh" "$3" /usr/bin/python3 "$ref" "$1" "$2" "$epochs" 1 2>/dev/null |
    awk '/train_s_per_epoch/ {print $NF}'
}

declare -A row
for p in $paths; do
  if [ "$p" = avx2_vnni ]; then  # the int8 rows only (every other kernel is avx2's)
    while read -r _ key val rest; do
      row[$key,$p]="$val $rest"
    done < <(QAT_CPU=$p "$build/bench/bench_int8" --rows 2>/dev/null | grep '^ROW ')
    continue
  fi
  t_cnn_fp32=$(torch_s cnn fp32 "$p")
  t_cnn_qat=$(torch_s cnn qat "$p")
  cnn_fp32=$(field "$(ours cnn fp32 "$p")" train_s_per_epoch)
  cnn_qat=$(field "$(ours cnn qat "$p")" train_s_per_epoch)
  # MLP epochs take ~1 s: fp32 and QAT alternating, three times, the fastest epoch of each
  mlp_fp32=9e9 mlp_qat=9e9
  for _ in 1 2 3; do
    mlp_fp32=$(min_of "$mlp_fp32" "$(field "$(ours mlp fp32 "$p")" train_s_per_epoch)")
    mlp_qat=$(min_of "$mlp_qat" "$(field "$(ours mlp qat "$p")" train_s_per_epoch)")
  done
  row[cnn_fp32,$p]="$(ratio "$cnn_fp32" "$t_cnn_fp32") (${cnn_fp32}s vs ${t_cnn_fp32:-?}s)"
  row[cnn_qat,$p]="$(ratio "$cnn_qat" "$t_cnn_qat") (${cnn_qat}s vs ${t_cnn_qat:-?}s)"
  row[mlp_qat,$p]="$(ratio "$mlp_qat" "$mlp_fp32") (${mlp_qat}s vs ${mlp_fp32}s)"
  # kernel rows: the benchmarks print "ROW key ratio (detail)" for the path they run on
  for b in bench_quant bench_int8; do
    [ -x "$build/bench/$b" ] || continue
    while read -r _ key val rest; do
      row[$key,$p]="$val $rest"
    done < <(QAT_CPU=$p "$build/bench/$b" --rows 2>/dev/null | grep '^ROW ')
  done
  if [ "${SKIP_DEMO:-0}" != 1 ]; then
    demo=$(QAT_CPU=$p "$build/examples/cnn_qat" --mode qat --arch cnn-bn --qconfig int8_default \
           --epochs 5 --optimizer sgd --lr 0.05 --momentum 0.9 --schedule cosine --threads 1 \
           --seed 0 ${DEMO_ARGS:-} --json 2>/dev/null | tail -n 1)
    row[demo,$p]="$(field "$demo" int8_acc) (QAT $(field "$demo" test_acc))"
  fi
done
# threads: the CNN fp32 epoch at 1 and 2 threads on the best path, twice, alternating; the
# faster epoch of each (as the kernel benchmarks take their fastest trial: a neighbour on the
# shared machine slows a 2-thread run on 2 cores the most)
if [ "$(nproc)" -ge 2 ]; then
  one=$(field "$(ours cnn fp32 "$best" 1)" train_s_per_epoch)
  two=$(field "$(ours cnn fp32 "$best" 2)" train_s_per_epoch)
  one_b=$(field "$(ours cnn fp32 "$best" 1)" train_s_per_epoch)
  two_b=$(field "$(ours cnn fp32 "$best" 2)" train_s_per_epoch)
  threads_row="$(ratio "$(min_of "$one" "$one_b")" "$(min_of "$two" "$two_b")") speed-up (1 thread ${one}s / ${one_b}s, 2 threads ${two}s / ${two_b}s)"
fi

printf '\n%-58s' "figure (1 thread, ratio to the reference in this run)"
for p in $paths; do printf ' | %-34s' "$p"; done
printf '\n'
line() {  # line KEY LABEL
  printf '%-58s' "$2"
  for p in $paths; do printf ' | %-34s' "${row[$1,$p]:-n/a}"; done
  printf '\n'
}
line cnn_fp32 "CNN fp32 epoch vs PyTorch 1.13 (target <= 0.7x)"
line cnn_qat "CNN QAT epoch vs PyTorch 1.13 QAT (target <= 0.7x)"
line mlp_qat "MLP QAT epoch vs own fp32 (target <= 1.15x)"
line observer_per_channel "per-channel observer [256,784] vs memcpy (<= 1.5x)"
line lsq_vs_fq "LSQ fwd + 3 grads vs fake quant fwd, 2^20 (<= 3x)"
line lsq_vs_torch "  the same LSQ op vs PyTorch 1.13's, same data"
line int8_linear "int8 linear vs own float GEMM (>= 2x faster)"
line int8_linear_ceiling "  its ceiling: int8 multiply vs FMA rate, on registers"
line int8_linear_7bit "  the same, inputs in [0, 127] (fbgemm reduce_range)"
line int8_linear_relu "  the same, 0.3% above 127 (a trained ReLU layer's)"
line int8_linear_batch1 "  one sample: QuantizedLinear vs nn::Linear layers"
line int8_dyn_linear "dynamic int8 linear (8da4w) vs own float GEMM"
line int8_dyn_linear_batch1 "  the same, batch 1 (one token, as when decoding)"
line int8_cnn_vs_fp32 "int8 CNN inference vs own fp32 (>= 2x faster)"
line int8_cnn_7bit_vs_fp32 "  the same, qconfig int8_fbgemm (7-bit activations)"
line int8_cnn_vs_torch "int8 CNN inference vs PyTorch 1.13 int8 (faster)"
line int8_cnn_7bit_vs_torch "  the same, qconfig int8_fbgemm (7-bit activations)"
[ "${SKIP_DEMO:-0}" = 1 ] || line demo "make demo recipe int8 accuracy (>= 0.90)"
[ -z "${threads_row:-}" ] || printf '%-58s | %s\n' "CNN fp32 epoch, 2 threads vs 1 ($best) (>= 1.6x)" "$threads_row"
