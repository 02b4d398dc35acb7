#!/usr/bin/env bash
# The CUDA checks in one device call. nvcc builds here; the GPU machine has no package registry
# (no Boost, Highway, ...) but has the CUDA libraries inside its PyTorch's nvidia-* packages.
#
#   here:        scripts/cuda_device_run.sh pack [BUILD]   # -> build-cuda-carry/ (a few MB)
#   device tool: run(command="scripts/cuda_device_run.sh run", carry=["build-cuda-carry"])
#
# pack copies test_cuda and bench_cuda with the non-CUDA, non-glibc shared libraries they need
# (ldd); run points LD_LIBRARY_PATH at them and at site-packages/nvidia/*/lib, prints the GPU,
# the libraries each binary resolves (missing ones named), runs the tests and the benchmark,
# and writes the logs under $OUT (or ./cuda-logs).
set -uo pipefail
cmd=${1:-}
here=$(cd "$(dirname "$0")/.." && pwd)
carry="$here/build-cuda-carry"
case "$cmd" in
  pack)
    build=${2:-$here/build}
    cmake --build "$build" -j"$(nproc)" --target test_cuda bench_cuda || exit 1
    rm -rf "$carry" && mkdir -p "$carry/bin" "$carry/lib"
    cp "$build/tests/test_cuda" "$build/bench/bench_cuda" "$carry/bin/"
    ldd "$carry/bin/"* | awk '$3 ~ /^\// {print $3}' | sort -u | while read -r lib; do
      case "$(basename "$lib")" in
        libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libcuda.so*|libcublas*|libcudart*|libcudnn*|libnccl*) ;;
        *) cp -L "$lib" "$carry/lib/" ;;
      esac
    done
    du -sh "$carry"
    ;;
  run)
    out=${OUT:-$here/cuda-logs}
    mkdir -p "$out"
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
      for b in "$carry/bin/"*; do
        echo "== ldd $(basename "$b")"; ldd "$b" | grep -E "cublas|cudart|not found" || true
      done
    } 2>&1 | tee "$out/env.txt"
    "$carry/bin/test_cuda" --log_level=test_suite --report_level=detailed 2>&1 | tee "$out/test_cuda.txt"
    rc=${PIPESTATUS[0]}
    "$carry/bin/bench_cuda" 2>&1 | tee "$out/bench_cuda.txt"
    echo "test_cuda exit status: $rc" | tee -a "$out/env.txt"
    exit "$rc"
    ;;
  *)
    echo "usage: $0 pack [BUILD] | run" >&2
    exit 2
    ;;
esac
