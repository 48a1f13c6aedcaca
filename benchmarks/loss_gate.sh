#!/usr/bin/env bash
# The FP8 accuracy gate: reference (bf16 compute) and FP8 training runs of one configuration and seed on random
# weights and a learnable synthetic root (`vdt data synth --flat`: 4 clips, each latent frame one vector), their
# running-mean loss curves compared by benchmarks/loss_gate.py: PASS when the reference's loss falls to half or less
# and the FP8 curve stays within 2 %.
#   sft: `vdt train sft` 5B at 832x480 (FRAMES latent frames, default 4; ACCUM micro batches, default 1), the trainer's
#        default --precision mixed (bf16 compute, fp32 master weights), the runs one after the other; FLOOR=1 adds a
#        second reference run: the reference curve's own run-to-run spread.
#   h3:  `vdt train causal` LoRA r 32 on a random MiniMax-H3 base (6 chunks of 2 latents at 16x16), one after the other;
#        FLOOR=1 adds the second reference run here too.
#   h3-seeds: the seeds gate (loss_gate.py --seeds) on the h3 configuration: three bf16 runs (seeds 0, 1, 2) and three
#        candidate runs (CAND, default '--base-dtype fp8': the FP8-stored frozen base; '--fp8 fast' gates the FP8
#        GEMMs), STEPS default 150 and WINDOW 50 (the running means of steps 1-50 and 101-150 are compared: the H3 LoRA
#        halves its loss well within that).
# Usage: benchmarks/loss_gate.sh sft|h3|h3-seeds     Env: FP8 ('--fp8 fast'), STEPS (1000), LR (sft 1e-4, h3 1e-3),
#        RUN_S (time limit a run), CLIPS (train clips of the root, 4), MODES (the runs, of bf16 fp8 bf16b; default the
#        above: several calls of a time-limited machine can split them, loss_gate.py then compares the logs). The
#        reference runs first; when its loss does not halve, the verdict is NO GATE and the candidate is not run.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=benchmarks/common.sh
source benchmarks/common.sh
what=${1:?usage: benchmarks/loss_gate.sh sft|h3|h3-seeds}
window=${WINDOW:-100}

# reference_learns LOG: whether the reference's running mean fell to half its start (loss_gate.py's own rule, on the
# reference against itself); when it did not, the verdict is NO GATE and the FP8 run is not worth its GPU time.
reference_learns() {
  python3 benchmarks/loss_gate.py "$1" "$1" --window "$window" > "$OUT/gate_reference.txt" 2>&1 && return 0
  grep -E '^(learns|gate: NO GATE)' "$OUT/gate_reference.txt" | tee -a "$SUMMARY"
  say "gate $what: NO GATE, the candidate run skipped"
  return 1
}
fp8=${FP8:---fp8 fast}
root="$WORK/gate_${what}_root"
modes="bf16 fp8"
[ "${FLOOR:-0}" = 1 ] && modes="bf16 fp8 bf16b"
seeds=0
if [ "$what" = h3-seeds ]; then
  what=h3 seeds=1 window=${WINDOW:-50} fp8=${CAND:---base-dtype fp8}
  modes="bf16 bf16s1 bf16s2 fp8 fp8s1 fp8s2"
  STEPS=${STEPS:-150}
fi
# seed_of MODE: the seed a run takes (the seeds gate's bf16s1, fp8s2 ...: 1, 2; else 0)
seed_of() { [[ $1 == *s[0-9] ]] && echo "${1: -1}" || echo 0; }
# run MODE EXTRA: one training run into $WORK/<prefix>MODE, its log and train log copied to $OUT
if [ "$what" = sft ]; then
  "$VDT" data synth "$root" --overwrite --flat --channels 48 --latent_frames "${FRAMES:-4}" --latent_h 30 --latent_w 52 \
    --text_dim 4096 --text_len 512 --train_runs 1 --train_clips_per_run "${CLIPS:-4}" --val_runs 1 \
    --val_clips_per_run 1 --n_drop 0 > "$OUT/gate_synth.log" 2>&1 || { tail -5 "$OUT/gate_synth.log"; exit 1; }
  prefix=gate_ ext=csv
  run() {
    fresh_dir "$WORK/gate_$1"
    # shellcheck disable=SC2086  # $2 is a word list
    timeout "${RUN_S:-500}" "$VDT" train sft --random-init --data_root "$root" --output "$WORK/gate_$1" \
      --res 832x480 --max_steps "${STEPS:-1000}" --grad_accum "${ACCUM:-1}" --precision mixed \
      --checkpointing selective --lr "${LR:-1e-4}" --warmup_steps 20 --val_every 0 --save_every 100000 --no-save_state \
      --num_workers 2 --device cuda --seed "$(seed_of "$1")" $2 > "$OUT/gate_$1.log" 2>&1
    say "gate sft $1: rc $?, $(tail -1 "$OUT/gate_$1.log")"
    cp "$WORK/gate_$1/train_log.csv" "$OUT/gate_$1_train_log.csv"
  }
elif [ "$what" = h3 ]; then
  "$VDT" data synth "$root" --overwrite --flat --model h3 --latent_frames 12 --latent_h 16 --latent_w 16 --text_dim 5120 \
    --text_len 256 --train_runs 1 --train_clips_per_run "${CLIPS:-4}" --val_runs 1 --val_clips_per_run 1 --n_drop 0 \
    > "$OUT/gate_h3_synth.log" 2>&1 || { tail -5 "$OUT/gate_h3_synth.log"; exit 1; }
  prefix=gate_h3_ ext=jsonl
  run() {
    fresh_dir "$WORK/gate_h3_$1"
    # shellcheck disable=SC2086  # $2 is a word list
    timeout "${RUN_S:-480}" "$VDT" train causal --random-init --data-root "$root" --out "$WORK/gate_h3_$1" \
      --model minimax-h3 --init-lora none --chunk-frames 2 --steps "${STEPS:-1000}" --save-every 100000 --val-clips 1 \
      --lora-rank 32 --lora-alpha 32 --lr "${LR:-1e-3}" --warmup 20 --seed "$(seed_of "$1")" $2 > "$OUT/gate_h3_$1.log" 2>&1
    say "gate h3 $1: rc $?, $(grep -cE '^step' "$OUT/gate_h3_$1.log") step lines"
    cp "$WORK/gate_h3_$1/train_log.jsonl" "$OUT/gate_h3_$1_train_log.jsonl"
  }
else
  echo "usage: benchmarks/loss_gate.sh sft|h3|h3-seeds" >&2
  exit 2
fi
log() { echo "$OUT/$prefix$1_train_log.$ext"; }

# One run after the other: two mixed-precision 5B runs, or two 33B bases, do not fit one H200.
for mode in ${MODES:-$modes}; do
  extra=""
  [[ $mode == fp8* ]] && extra=$fp8
  run "$mode" "$extra"
  [ "$mode" = bf16 ] && { reference_learns "$(log bf16)" || exit 2; }
done
if [ $seeds = 1 ]; then
  refs="$(log bf16),$(log bf16s1),$(log bf16s2)" cands="$(log fp8),$(log fp8s1),$(log fp8s2)"
  for f in ${refs//,/ } ${cands//,/ }; do [ -f "$f" ] || exit 0; done  # MODES left one out
  say "gate h3-seeds: candidate '$fp8', $STEPS steps, window $window"
  python3 benchmarks/loss_gate.py --seeds "$refs" "$cands" --window "$window" 2>&1 | tee -a "$SUMMARY"
  exit "${PIPESTATUS[0]}"
fi
[ -f "$(log bf16)" ] && [ -f "$(log fp8)" ] || exit 0  # MODES left one out
floor=()
[ -f "$(log bf16b)" ] && floor=(--floor "$(log bf16b)")
python3 benchmarks/loss_gate.py "$(log bf16)" "$(log fp8)" --window "$window" "${floor[@]}" 2>&1 | tee -a "$SUMMARY"
