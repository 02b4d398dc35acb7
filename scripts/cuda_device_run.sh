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
# writes the logs under $OUT (or ./cuda-logs).
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
    "$carry/bin/test_cuda" --log_level=test_suite --report_level=detailed 2>&1 | tee "$out/test_cuda.txt"
    rc=${PIPESTATUS[0]}
    if [ -x "$carry/bin/test_nccl" ]; then  # a group of one through NCCL (2 ranks need 2 GPUs)
      "$carry/bin/test_nccl" --log_level=test_suite 2>&1 | tee "$out/test_nccl.txt"
      [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
    fi
    "$carry/bin/bench_cuda" 2>&1 | tee "$out/bench_cuda.txt"
    # training epochs next to PyTorch eager on the same GPU (its python3 has torch with CUDA)
    DEVICE=cuda PYTHON=${PYTHON:-python3} DATA="$carry/data" EPOCHS=${EPOCHS:-1} \
      "$here/bench/train_vs_pytorch.sh" "$carry" 2>&1 | tee "$out/train_vs_pytorch.txt"
    echo "test_cuda exit status: $rc" | tee -a "$out/env.txt"
    exit "$rc"
    ;;
  *)
    echo "usage: $0 pack [BUILD] | run" >&2
    exit 2
    ;;
esac
