#!/usr/bin/env bash
# `vdt parity` on CUDA for the reference fixtures (tests/fixtures: Wan wan_tiny_a, MiniMax-H3 h3_tiny_a) in each
# DTYPE (default bfloat16), one PASS/FAIL line each in $OUT/summary.txt; --kernels also runs `vdt bench kernels`
# (the fused CUDA kernels against their reference ops at the real widths). Exit 1 on any FAIL.
# Usage: benchmarks/gpu_parity.sh [--kernels] [DTYPE...]  (e.g. bfloat16 float32)   Env: DEVICE (cuda), VDT, OUT
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=benchmarks/common.sh
source benchmarks/common.sh
kernels=0
[ "${1:-}" = --kernels ] && { kernels=1; shift; }
[ $# -gt 0 ] || set -- bfloat16
rc=0
for dtype in "$@"; do
  for f in wan_tiny_a h3_tiny_a; do
    log="$OUT/parity_${f}_$dtype.log"
    "$VDT" parity "tests/fixtures/$f.safetensors" --device "${DEVICE:-cuda}" --dtype "$dtype" > "$log" 2>&1
    r=$?
    grep -q FAIL "$log" && r=1
    [ $r = 0 ] || rc=1
    say "parity $f $dtype: rc $r, $(grep -c PASS "$log") PASS, $(grep -c FAIL "$log") FAIL"
  done
done
if [ $kernels = 1 ]; then
  timeout 300 "$VDT" bench kernels --device cuda --dtypes bf16 > "$OUT/bench_kernels.log" 2>&1 || rc=1
  grep -E "^kernel|FAIL|rror|^result" "$OUT/bench_kernels.log" | cut -c1-200 | tee -a "$SUMMARY"
fi
exit $rc
