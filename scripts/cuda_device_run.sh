#!/usr/bin/env bash
# The CUDA checks in one device call. nvcc builds here; the GPU machine has no package registry
# (no Boost, Highway, ...) but has the CUDA libraries inside its PyTorch's nvidia-* packages.
#
#   here:        scripts/cuda_device_run.sh pack [BUILD]   # -> build-cuda-carry/ (~36 MB)
#   device tool: run(command="scripts/cuda_device_run.sh run", carry=["build-cuda-carry"])
#
# pack copies test_cuda, test_nccl (when built), bench_cuda, mlp_qat and cnn_qat with the non-CUDA, non-glibc shared
# libraries they need (ldd), and Fashion-MNIST; run points LD_LIBRARY_PATH at them and at
# site-packages/nvidia/*/lib, prints the GPU, the libraries each binary resolves (missing ones
# named), runs the tests, the benchmark and bench/train_vs_pytorch.sh with DEVICE=cuda, and
# writes the logs under $OUT (or ./cuda-logs). Each step has a time limit (T_TEST, T_BENCH,
# T_TRAIN, T_IM2COL, T_NCCL, T_SAN, T_WF (each workflow command) seconds); STEPS picks steps ("test bench train im2col nccl";
# also "workflow": QAT on the GPU saved, resumed and converted, as a user runs it),
# TESTS narrows test_cuda to a Boost.Test filter, SANITIZE runs compute-sanitizer's memcheck on one.
set -uo pipefail
cmd=${1:-}
here=$(cd "$(dirname "$0")/.." && pwd)
carry="$here/build-cuda-carry"
case "$cmd" in
  pack)
    build=${2:-$here/build}
    cmake --build "$build" -j"$(nproc)" --target test_cuda bench_cuda || exit 1
    cmake --build "$build" -j"$(nproc)" --target mlp_qat cnn_qat || exit 1
    rm -rf "$carry" && mkdir -p "$carry/bin" "$carry/lib" "$carry/examples" "$carry/data"
    cp "$build/tests/test_cuda" "$build/bench/bench_cuda" "$carry/bin/"
    if cmake --build "$build" -j"$(nproc)" --target test_nccl 2>/dev/null; then
      cp "$build/tests/test_nccl" "$carry/bin/"
    fi
    cp "$build/examples/mlp_qat" "$build/examples/cnn_qat" "$carry/examples/"
    strip --strip-unneeded "$carry/bin/"* "$carry/examples/"*  # the device tool carries 64 MiB in all
    # Fashion-MNIST for the training comparison (the GPU machine has no Debian data sets)
    cp /usr/share/datasets/fashion-mnist/*-ubyte.gz "$carry/data/"
    ldd "$carry/bin/"* "$carry/examples/"* | awk '$3 ~ /^\// {print $3}' | sort -u | while read -r lib; do
      case "$(basename "$lib")" in
        libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libcuda.so*|libcublas*|libcudart*|libcudnn*|libnccl*) ;;
        *) cp -L "$lib" "$carry/lib/" ;;
      esac
    done
    # xz shrinks the binaries ~7x: with the data set the carry stays under the tool's 64 MiB
    tar -cJf "$carry/binaries.tar.xz" -C "$carry" bin examples lib && rm -rf "$carry/bin" "$carry/examples" "$carry/lib"
    du -sh "$carry"
    ;;
  run)
    out=${OUT:-$here/cuda-logs}
    mkdir -p "$out"
    [ -d "$carry/bin" ] || tar -xJf "$carry/binaries.tar.xz" -C "$carry" || exit 1
    nvdirs=$(python3 - <<'PY' 2>/dev/null
import glob, os, site, sys
roots = set(site.getsitepackages() + [site.getusersitepackages()] + sys.path)
print(":".join(sorted({d for r in roots for d in glob.glob(os.path.join(r, "nvidia", "*", "lib"))})))
PY
)
    export LD_LIBRARY_PATH="$carry/lib:${nvdirs}:${LD_LIBRARY_PATH:-}"
    {
      echo "== GPU"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
      echo "== nvidia library folders: ${nvdirs:-none found}"
      for b in "$carry/bin/"* "$carry/examples/"*; do
        echo "== ldd $(basename "$b")"; ldd "$b" | grep -E "cublas|cudart|cudnn|nccl|not found" || true
      done
      echo "(cuBLAS is not linked but opened on the first GEMM: test_cuda's cublas_is_opened_on_first_use names its file)"
    } 2>&1 | tee "$out/env.txt"
    # each step has its own time limit (seconds, env), so one that hangs leaves the others' logs
    step() { local limit=$1 log=$2; shift 2; timeout -k 5 "$limit" "$@" 2>&1 | tee "$out/$log"
             local r=${PIPESTATUS[0]}; [ "$r" -eq 124 ] && echo "== $log: stopped after ${limit} s" | tee -a "$out/$log"
             return "$r"; }
    want() { [[ " ${STEPS:-test bench train im2col nccl} " == *" $1 "* ]]; }  # STEPS: which to run
    rc=0
    want test && { step "${T_TEST:-240}" test_cuda.txt "$carry/bin/test_cuda" --log_level=test_suite \
      --report_level=short ${TESTS:+--run_test="$TESTS"} || rc=1; }
    want bench && step "${T_BENCH:-90}" bench_cuda.txt "$carry/bin/bench_cuda"
    # training epochs next to PyTorch eager on the same GPU (its python3 has torch with CUDA)
    want train && step "${T_TRAIN:-300}" train_vs_pytorch.txt env DEVICE=cuda PYTHON="${PYTHON:-python3}" DATA="$carry/data" \
      EPOCHS="${EPOCHS:-1}" "$here/bench/train_vs_pytorch.sh" "$carry"
    # ctest's test_cuda@im2col: every conv test again without cuDNN (im2col + cuBLAS)
    want im2col && { step "${T_IM2COL:-120}" test_cuda_im2col.txt env QAT_CUDNN=0 "$carry/bin/test_cuda" \
      --log_level=test_suite --report_level=short ${TESTS:+--run_test="$TESTS"} || rc=1; }
    # compute-sanitizer's memcheck over the tests named by SANITIZE (a Boost.Test --run_test filter)
    if [ -n "${SANITIZE:-}" ]; then
      san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
      step "${T_SAN:-240}" sanitizer.txt "$san" --tool memcheck --error-exitcode 1 "$carry/bin/test_cuda" \
        --log_level=test_suite --run_test="$SANITIZE" || rc=1
    fi
    # a user's workflow on the GPU: QAT with a checkpoint, resumed, its int8 model evaluated on the
    # CPU; the learnable and FP8 presets; the same QAT run on the CPU for its accuracy
    if want workflow; then
      wf() { echo "== $*"; timeout -k 5 "${T_WF:-120}" "$@" --data "$carry/data" --json 2>&1 | tail -n 3
             echo "(exit ${PIPESTATUS[0]})"; }
      ck=$(mktemp -d)/cnn.ckpt
      {
        wf "$carry/examples/cnn_qat" --arch cnn-bn --mode qat --device cuda --epochs 1 --train-limit 20000 --save "$ck"
        wf "$carry/examples/cnn_qat" --arch cnn-bn --mode qat --device cuda --epochs 2 --train-limit 20000 --resume "$ck"
        wf "$carry/examples/cnn_qat" --arch cnn-bn --mode qat --load "$ck.int8" --eval-only
        wf "$carry/examples/cnn_qat" --arch cnn-bn --mode qat --epochs 2 --train-limit 20000
        wf "$carry/examples/mlp_qat" --mode qat --qconfig int8_lsq --device cuda --epochs 1
        wf "$carry/examples/mlp_qat" --mode qat --qconfig fp8_e4m3 --device cuda --epochs 1
      } 2>&1 | tee "$out/workflow.txt"
    fi
    if want nccl && [ -x "$carry/bin/test_nccl" ]; then  # a group of one through NCCL (2 ranks need 2 GPUs)
      step "${T_NCCL:-60}" test_nccl.txt "$carry/bin/test_nccl" --log_level=test_suite || rc=1
    fi
    echo "test_cuda exit status: $rc" | tee -a "$out/env.txt"
    exit "$rc"
    ;;
  *)
    echo "usage: $0 pack [BUILD] | run" >&2
    exit 2
    ;;
esac
