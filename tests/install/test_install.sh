#!/usr/bin/env bash
# Installs the build into a temporary prefix, then builds and runs a consumer twice: through
# find_package(qat) and through pkg-config.
set -euo pipefail
build=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cmake -S "$src" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$tmp/consumer" >/dev/null
"$tmp/consumer/consumer" > "$tmp/out.txt"
grep -q "QuantLinear" "$tmp/out.txt"
if grep -q "kernels/cuda/runtime.cpp" "$build/framework/CMakeFiles/qat_framework.dir/build.make" 2>/dev/null; then
  grep -q "^cuda built 1" "$tmp/out.txt"  # qat_HAS_CUDA and the CUDA runtime reached the consumer
else
  grep -q "^cuda built 0" "$tmp/out.txt"
fi
if grep -q "distributed/detail/nccl_group.cpp" "$build/framework/CMakeFiles/qat_framework.dir/build.make" 2>/dev/null; then
  grep -q "^nccl built 1" "$tmp/out.txt"  # qat_HAS_NCCL and libnccl reached the consumer
else
  grep -q "^nccl built 0" "$tmp/out.txt"
fi
if grep -q "kernels/cuda/cudnn_conv.cpp" "$build/framework/CMakeFiles/qat_framework.dir/build.make" 2>/dev/null; then
  grep -q "^cudnn built 1" "$tmp/out.txt"  # qat_HAS_CUDNN and libcudnn reached the consumer
else
  grep -q "^cudnn built 0" "$tmp/out.txt"
fi
if grep -q "qat: ONNX export on" "$build/CMakeCache.txt" 2>/dev/null || [ -e "$build/modules/libqat_onnx.a" ]; then
  grep -q "^onnx [0-9]* bytes" "$tmp/out.txt"  # qat::onnx linked and ran downstream
fi
PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig" g++ -std=c++20 "$src/main.cpp" -o "$tmp/consumer_pc" \
  $(PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig" pkg-config --cflags --libs qat)
"$tmp/consumer_pc" | grep -q "QuantLinear"
if [ -e "$build/tools/qat-inspect" ]; then  # QAT_BUILD_TOOLS
  "$tmp/prefix/bin/qat-inspect" --help | grep -q "usage: qat-inspect FILE"
fi
echo "install test: find_package(qat) and pkg-config consumers built and ran"
