#!/usr/bin/env bash
# Weight streaming and the FP8 base on one GPU (docs/planner.md, "Streaming and the FP8 base"), in parts:
#   build  benchmarks/gpu_build.sh --tests with the suites these touch (streaming, FP8 base, the plan, shards,
#          checkpointing, the FP8 linears)
#   copy   `vdt bench plan --copy-only` per preset: the card's host-to-device rate, overlap and dequantization rate
#          merged into plans/<card>/<preset>.json (copied to $OUT/plans/: commit them)
#   rows   the stream_* rows of benchmarks/rows.txt (bench_rows.sh): MiniMax-H3 LoRA at 480x832 under --memory 80 (the
#          baseline: on an 80 GB card clamped to what auto gives), 48 and 24 (--base-dtype auto), Wan2.2-5B causal
#          --memory 12, Wan2.1-1.3B --memory 8; each result line has the measured and predicted peak and the pinned
#          host memory; then the checks of each row against its budget and of H3's steps against the baseline's
#   gate   the FP8-base seeds gate (benchmarks/loss_gate.sh h3-seeds: three bf16 and three FP8-base H3 LoRA runs,
#          150 steps each, window 50: the fewest steps whose 50-step means halve)
# Summaries first: $OUT/summary.txt gets one line per part as it ends.
# Usage: benchmarks/stream_rows.sh [PARTS...]  (default: build copy rows gate; about 4 + 1 + 5 + 7 minutes on an
#        H100, so a machine with a 10-minute call limit runs `build copy rows` and then `gate`, the build kept)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=benchmarks/common.sh
source benchmarks/common.sh
parts=${*:-build copy rows gate}
rc=0
t0=$(date +%s)
part() { say "stream_rows $1: rc $2, $(($(date +%s) - t0)) s since the start"; }

for p in $parts; do
  case $p in
    build)
      benchmarks/gpu_build.sh --tests 'WeightStream*:Fp8Base*:WeightPlan.*:BlockShards.*:ActivationCheckpoint.*:Fp8*:-ActivationCheckpoint.SftTrainerHonoursSelectiveBlocks'
      r=$?
      part build $r
      [ $r = 0 ] || rc=1
      [ -x "$VDT" ] || { say "stream_rows: no $VDT, stopping"; exit 1; }
      ;;
    copy)
      r=0
      for model in minimax-h3 wan2.2-ti2v-5b wan2.1-t2v-1.3b; do
        timeout 120 "$VDT" bench plan --model "$model" --training lora --attention causal --copy-only \
          > "$OUT/copy_$model.log" 2>&1 || r=1
        say "copy $model: $(grep -m1 'copy h2d' "$OUT/copy_$model.log" | cut -c1-120)"
      done
      mkdir -p "$OUT/plans" && cp -r plans/. "$OUT/plans/"
      part copy $r
      [ $r = 0 ] || rc=1
      ;;
    rows)
      ROW_S=${ROW_S:-240} benchmarks/bench_rows.sh 'stream_*'
      r=$?
      # each row within its budget; H3's steps against the baseline's (targets: 48 GiB <= 1.3x, 24 GiB <= 2x)
      python3 - "$SUMMARY" << 'PY' | tee -a "$SUMMARY"
import re, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"(stream_\w+): (.*)", line)
    if m and "median_s=" in m.group(2):
        rows[m.group(1)] = dict(kv.split("=", 1) for kv in m.group(2).split() if "=" in kv)
budget = {"stream_h3_m48": 48, "stream_h3_m24": 24, "stream_5b_m12": 12, "stream_13b_m8": 8}
for name, r in rows.items():
    peak, pred = float(r.get("peak_gib", "nan")), float(r.get("predicted_peak_gib", "nan"))
    off = (pred - peak) / peak * 100 if peak == peak and peak > 0 else float("nan")
    fits = f"within {budget[name]} GiB: {'yes' if peak <= budget[name] else 'NO'}" if name in budget else "baseline"
    print(f"check {name}: peak {peak:.2f} GiB predicted {pred:.2f} ({off:+.1f} %, target within 5 %), {fits}, "
          f"host pinned {r.get('host_pinned_gib', '?')} GiB")
base = rows.get("stream_h3_m80")
for name, target in (("stream_h3_m48", 1.3), ("stream_h3_m24", 2.0)):
    if base and name in rows:
        ratio = float(rows[name]["median_s"]) / float(base["median_s"])
        print(f"check {name}: step {float(rows[name]['median_s']):.3f} s = {ratio:.2f}x the baseline's "
              f"{float(base['median_s']):.3f} s (target <= {target}x): {'yes' if ratio <= target else 'NO'}")
PY
      part rows $r
      [ $r = 0 ] || rc=1
      ;;
    gate)
      benchmarks/loss_gate.sh h3-seeds
      r=$?
      part gate $r
      [ $r = 0 ] || rc=1
      ;;
    *)
      echo "unknown part '$p' (build, copy, rows, gate)" >&2
      exit 2
      ;;
  esac
done
exit $rc
