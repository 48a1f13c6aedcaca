#!/usr/bin/env bash
# Training runs over several GPUs of one host (torchrun, NCCL) that a bench row does not cover. (The bench rows run
# sharded with NPROC=N benchmarks/bench_rows.sh NAME...: ZeRO-2 for sft, the frozen base sharded for causal.)
#   zero2:  `vdt train sft --precision mixed` at the 5B geometry (GA 2, validation, export) on 1 GPU, then on NPROC
#           GPUs (ZeRO-2): s/step per GPU and each rank's weight checksum.
#   resume: sharded state over NCCL with the tiny preset: NPROC GPUs save, NPROC GPUs resume, then 1 GPU resumes.
# Usage: benchmarks/multi_gpu.sh zero2|resume     Env: NPROC (2), STEPS (zero2: 7), VDT, OUT
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=benchmarks/common.sh
source benchmarks/common.sh
n=${NPROC:-2}
torchrun="python3 -m torch.distributed.run --nproc-per-node $n --no-python"
rc=0
case ${1:-} in
  zero2)
    root="$WORK/zero2_root"
    "$VDT" data synth "$root" --overwrite --channels 48 --latent_frames 21 --latent_h 30 --latent_w 52 \
      --text_dim 4096 --text_len 512 --train_runs 2 --train_clips_per_run 4 --val_runs 1 --val_clips_per_run 2 \
      --n_drop 0 > "$OUT/zero2_synth.log" 2>&1 || exit 1
    args=(--random-init --data_root "$root" --res 832x480 --max_steps "${STEPS:-7}" --grad_accum 2 --warmup_steps 2
      --val_every "${STEPS:-7}" --val_n 2 --val_timesteps 500 --save_every 1000 --no-save_state --num_workers 4)
    fresh_dir "$WORK/zero2_1gpu"
    "$VDT" train sft "${args[@]}" --output "$WORK/zero2_1gpu" --device cuda > "$OUT/zero2_1gpu.log" 2>&1 || rc=1
    fresh_dir "$WORK/zero2_${n}gpu"
    # shellcheck disable=SC2086  # the launcher is a word list
    $torchrun "$VDT" train sft "${args[@]}" --output "$WORK/zero2_${n}gpu" > "$OUT/zero2_${n}gpu.log" 2>&1 || rc=1
    for g in 1 "$n"; do
      grep -hE "^step|CRC|^\[done\]|rror" "$OUT/zero2_${g}gpu.log" | cut -c1-200 | sed "s/^/zero2 $g GPU: /" \
        | tee -a "$SUMMARY"
    done
    ;;
  resume)
    root="$WORK/resume_root" run="$WORK/resume_run"
    fresh_dir "$run"
    "$VDT" data synth "$root" --overwrite --train_runs 2 --train_clips_per_run 4 --n_drop 0 > /dev/null 2>&1 || exit 1
    args=(--random-init --data_root "$root" --res 128x128 --model tiny --grad_accum 1 --warmup_steps 2 --lr 1e-3
      --val_every 2 --val_n 2 --save_every 2 --num_workers 1 --output "$run")
    # shellcheck disable=SC2086
    $torchrun "$VDT" train sft "${args[@]}" --max_steps 4 > "$OUT/resume_a.log" 2>&1 || rc=1
    # shellcheck disable=SC2086
    $torchrun "$VDT" train sft "${args[@]}" --max_steps 6 --resume auto > "$OUT/resume_b.log" 2>&1 || rc=1
    "$VDT" train sft "${args[@]}" --max_steps 8 --resume auto --device cuda > "$OUT/resume_c.log" 2>&1 || rc=1
    grep -hE "^\[resume\]|^\[state\]|CRC|^trained|rror" "$OUT"/resume_[abc].log | cut -c1-220 | tee -a "$SUMMARY"
    cp "$run/train_log.csv" "$OUT/resume_train_log.csv"
    ;;
  *)
    sed -n '2,7p' "$0"
    exit 2
    ;;
esac
exit $rc
