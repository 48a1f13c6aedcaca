#!/usr/bin/env bash
# The distillation's step rows on one GPU (docs/distill.md "Speed and memory"): builds vdt (benchmarks/gpu_build.sh),
# runs the distill* rows of benchmarks/rows.txt through `vdt bench step --trainer distill` (each row's `distill
# mean_s=` line: the mean step of 1 critic + 1/5 student update, the student and critic steps, MFU against 989.4
# TFLOP/s), and, when SF_PEER names a folder holding the Self-Forcing peer (baseline_selfforcing.py and its `sf` tree
# made by make_sf_tree.sh), the peer's DMD step on the same card first (PRESET=1.3b: Wan2.1-1.3B student, critic and
# teacher at 480x832, 21 latents). Summary lines in $OUT/summary.txt.
# Usage: benchmarks/distill_rows.sh [ROW_PATTERN...]   (default: distill13b_default distill5b_default; the H3 row
# needs an H200: distillh3_default)       Env: SF_PEER, BUILD, OUT
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=benchmarks/common.sh
source benchmarks/common.sh
[ -x "$VDT" ] || benchmarks/gpu_build.sh || exit 1
if [ -n "${SF_PEER:-}" ]; then
  say "peer: Self-Forcing DMD step (PRESET=1.3b) on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
  (cd "$SF_PEER" && PRESET=1.3b timeout 900 python3 baseline_selfforcing.py) > "$OUT/peer_selfforcing.log" 2>&1
  tail -3 "$OUT/peer_selfforcing.log" | tee -a "$SUMMARY"
fi
rows=("$@")
[ ${#rows[@]} -gt 0 ] || rows=(distill13b_default distill5b_default)
benchmarks/bench_rows.sh "${rows[@]}"
for r in "${rows[@]}"; do grep -h "^distill mean_s" "$OUT/$r.log" 2> /dev/null | sed "s/^/$r: /" | tee -a "$SUMMARY"; done
