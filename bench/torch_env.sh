#!/bin/sh
# Runs a PyTorch reference on the same instruction set as one of our kernel paths, the way it
# would run on a CPU that has only that set: oneDNN (PyTorch's convolutions and int8 engine) is
# capped with ONEDNN_MAX_CPU_ISA and ATen's own kernels with ATEN_CPU_CAPABILITY.
#   bench/torch_env.sh PATH COMMAND...     PATH: generic | avx2 | avx2_vnni | avx512 | avx512_vnni | best
set -e
case "$1" in
  generic) isa=SSE41 aten=default ;;
  avx2) isa=AVX2 aten=avx2 ;;
  avx2_vnni) isa=AVX2_VNNI aten=avx2 ;;  # oneDNN 2.6: "Intel AVX2 with Intel DL Boost"
  avx512) isa=AVX512_CORE aten=avx512 ;;
  avx512_vnni) isa=AVX512_CORE_VNNI aten=avx512 ;;
  best | "") isa= aten= ;;
  *) echo "torch_env.sh: unknown path '$1' (generic, avx2, avx2_vnni, avx512, avx512_vnni, best)" >&2; exit 2 ;;
esac
shift
if [ -n "$isa" ]; then
  export ONEDNN_MAX_CPU_ISA=$isa DNNL_MAX_CPU_ISA=$isa ATEN_CPU_CAPABILITY=$aten
fi
exec "$@"
