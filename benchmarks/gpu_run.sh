#!/usr/bin/env bash
# One call on a lent H200 (see docs/BENCHMARKS.md): build vdt against that machine's python3 torch 2.11, run the
# parity fixture on CUDA in bf16 and fp32, then `vdt bench step` at the TI2V-5B geometry (SPEC §9) with and without
# per-block checkpointing. Needs .deps/ from benchmarks/prepare_gpu_carry.sh (carry it). Logs go to $OUT.
# Usage: benchmarks/gpu_run.sh [parity|bench|all]   (default all)
set -uo pipefail
what=${1:-all}
OUT=${OUT:-/tmp/vdt_out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=9.0a NCCL_NVLS_ENABLE=0
torch_dir=$(python3 -c 'import torch, os; print(os.path.join(torch.utils.cmake_prefix_path, "Torch"))')
{ nvidia-smi; python3 -c 'import torch; print(torch.__version__, torch.cuda.get_device_name(0))'; } > "$OUT/machine.txt" 2>&1
head -20 "$OUT/machine.txt"
build=build-gpu
if [ ! -f $build/build.ninja ]; then
  cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTorch_DIR="$torch_dir" -DVDT_BUILD_TESTS=OFF \
    -DCMAKE_PREFIX_PATH="$PWD/.deps/usr" > "$OUT/configure.log" 2>&1 || { tail -40 "$OUT/configure.log"; exit 1; }
fi
t0=$(date +%s)
cmake --build $build -j "$(nproc)" > "$OUT/build.log" 2>&1 || { grep -A5 error "$OUT/build.log" | head -60; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
rc=0
if [ "$what" = parity ] || [ "$what" = all ]; then
  for dt in bfloat16 float32; do
    $build/vdt parity .deps/fixtures/wan_tiny_a.safetensors --device cuda --dtype $dt 2>&1 | tee -a "$OUT/parity.log" || rc=1
  done
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  for ck in block none; do
    $build/vdt bench step --checkpointing $ck --steps 6 --warmup 2 2>&1 | tee "$OUT/bench_step_$ck.log" || rc=1
  done
fi
exit $rc
