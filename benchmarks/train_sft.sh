#!/usr/bin/env bash
# `vdt train sft` (adapter, per-cell text, loader, logging) at the bench rows' 5B geometry (832x480, 21 latent frames,
# 4096-wide text), selective checkpointing, one micro batch a step: the median step_time of train_log.csv over steps
# 3..STEPS per PRECISION, one summary line each, to compare with the sft_selective bench row.
# Usage: benchmarks/train_sft.sh [PRECISION...]     (default: bf16 mixed)     Env: STEPS (12), VDT, OUT
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=benchmarks/common.sh
source benchmarks/common.sh
[ $# -gt 0 ] || set -- bf16 mixed
root="$WORK/train_sft_root"
"$VDT" data synth "$root" --overwrite --channels 48 --latent_frames 21 --latent_h 30 --latent_w 52 --text_dim 4096 \
  --text_len 512 --train_runs 2 --train_clips_per_run 6 --val_runs 1 --val_clips_per_run 1 --n_drop 0 \
  > "$OUT/train_sft_synth.log" 2>&1 || { tail -5 "$OUT/train_sft_synth.log"; exit 1; }
rc=0
for prec in "$@"; do
  run="$WORK/train_sft_$prec"
  fresh_dir "$run"
  timeout "${RUN_S:-300}" "$VDT" train sft --random-init --data_root "$root" --output "$run" --res 832x480 \
    --max_steps "${STEPS:-12}" --grad_accum 1 --precision "$prec" --checkpointing selective --val_every 0 \
    --save_every 100000 --no-save_state --num_workers 4 --device cuda > "$OUT/train_sft_$prec.log" 2>&1 || rc=1
  python3 - "$run/train_log.csv" "$prec" << 'PY' 2>&1 | tee -a "$SUMMARY"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))[2:]
print("train_sft_%s: median %.3f s/step over steps 3..%d, peak %.1f GB" % (sys.argv[2],
      statistics.median(float(r["step_time"]) for r in rows), len(rows) + 2, max(float(r["mem_gb"]) for r in rows)))
PY
done
exit $rc
