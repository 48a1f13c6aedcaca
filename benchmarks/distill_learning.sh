#!/usr/bin/env bash
# Learning, measured: the few-step pipeline on the CPU with the tiny preset, from a synthetic root whose video has a
# known structure (parts moving on a plane under a panning camera, each latent frame's motion named by its prompt),
# and the distance of each model's samples to the data (`vdt eval`, docs/cli.md).
#   0. teacher: `vdt train sft` from random weights, full parameters, bidirectional, until its loss has halved (the
#      mean of the last 100 logged losses at most half the first 100's; checked below). The semantic-map adapter is
#      kept off (every id map dropped, its learning rate ~0) and dropped at export, so the teacher is a plain base.
#   1. `vdt train causal` (diffusion forcing, block-causal chunks of CHUNK latent frames) on that base;
#   2. `vdt train distill` from the stage-1 LoRA (when the build has it);
#   then samples of N val clips: the teacher at 50 steps (and 4), the stage-1 LoRA at 4 steps (and 50), the student at
#   4 steps, and each set's Fréchet distance to the root's latents, frame 0 left out (every sampler is handed it).
# Usage: benchmarks/distill_learning.sh        Env: VDT (build/vdt), OUT, WORK, SFT_STEPS (2000), CAUSAL_STEPS (300),
#        DISTILL_STEPS (200), N (clips a sample set, at most 64: the causal runs hold 64 clips out), CFG (guidance of every sampler and the distillation's teacher, 3),
#        CHUNK (1), THREADS (torch threads a process, 2)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
VDT=${VDT:-build/vdt}
# shellcheck source=benchmarks/common.sh
source benchmarks/common.sh
export OMP_NUM_THREADS=${THREADS:-2}
sft_steps=${SFT_STEPS:-2000} causal_steps=${CAUSAL_STEPS:-300} distill_steps=${DISTILL_STEPS:-200}
n=${N:-64} cfg=${CFG:-3} chunk=${CHUNK:-1}
frames=$((6 * chunk))  # one causal span a clip: the SFT clip and the causal window are the same frames
w="$WORK/learning"
fresh_dir "$w"
cpu=(--device cpu)
t0=$(date +%s)
step() { say "learning [$(($(date +%s) - t0)) s] $*"; }

# The root: 16 latent channels at 8x8, one span a clip, 128 train clips and 64 val clips (their own runs).
"$VDT" data synth "$w/root" --latent_frames "$frames" --train_runs 32 --train_clips_per_run 4 --val_runs 16 \
  --val_clips_per_run 4 --n_drop 0 --seed 0 > "$OUT/learning_synth.log" 2>&1 || { tail -5 "$OUT/learning_synth.log"; exit 1; }

# 0. The bidirectional teacher.
"$VDT" train sft --data_root "$w/root" --output "$w/teacher" --model tiny --random-init --res 128x128 \
  --precision fp32 "${cpu[@]}" --cond_dropout 1 --cond_lr 1e-12 --lr 1e-3 --warmup_steps 20 --max_steps "$sft_steps" \
  --batch_size 4 --grad_accum 1 --val_every 0 --save_every "$sft_steps" --num_workers 1 --seed 0 \
  > "$OUT/learning_teacher.log" 2>&1 || { tail -5 "$OUT/learning_teacher.log"; exit 1; }
halved=$(python3 - "$w/teacher/train_log.csv" << 'PY'
import csv, sys
loss = [float(r["loss"]) for r in csv.DictReader(open(sys.argv[1]))]
a, b = sum(loss[:100]) / len(loss[:100]), sum(loss[-100:]) / len(loss[-100:])
print("loss mean of steps 1-100 %.4f -> last 100 %.4f (%.0f %%): %s" % (a, b, 100 * b / a, "halved" if b <= a / 2 else "NOT halved"))
PY
)
step "teacher: $sft_steps SFT steps, $halved"
teacher_ckpt="$w/teacher/step-$sft_steps.safetensors"
"$VDT" ckpt export "$teacher_ckpt" --format comfy --drop-adapter --out "$w/teacher_base.safetensors" \
  > "$OUT/learning_export.log" 2>&1 || { tail -5 "$OUT/learning_export.log"; exit 1; }

# 1. Diffusion forcing on the teacher's weights; frame 0 given clean, as the teacher's sampler gives it.
"$VDT" train causal --data-root "$w/root" --weights "$w/teacher_base.safetensors" --out "$w/causal" \
  --chunk-frames "$chunk" --clean-first-frame --precision fp32 "${cpu[@]}" --steps "$causal_steps" --lr 1e-3 \
  --lr-min 1e-4 --warmup 20 --lora-rank 16 --lora-alpha 16 --val-clips 64 --save-every "$causal_steps" --seed 0 \
  > "$OUT/learning_causal.log" 2>&1 || { tail -5 "$OUT/learning_causal.log"; exit 1; }
causal_lora="$w/causal/$(printf 'lora_step%05d.safetensors' "$causal_steps")"
step "stage 1: $causal_steps diffusion-forcing steps, $(tail -1 "$OUT/learning_causal.log")"

# 2. The few-step student.
student=""
if "$VDT" train --help 2> /dev/null | grep -qE '^ +distill\b'; then  # (train distill --help would print train's help)
  "$VDT" train distill --data-root "$w/root" --weights "$w/teacher_base.safetensors" --init-lora "$causal_lora" \
    --out "$w/distill" --teacher-cfg "$cfg" --chunk-frames "$chunk" --clean-first-frame --lr 1e-4 --critic-lr 2e-5 \
    --precision fp32 "${cpu[@]}" --steps "$distill_steps" --save-every "$distill_steps" \
    --val-clips 64 --seed 0 > "$OUT/learning_distill.log" 2>&1 || { tail -5 "$OUT/learning_distill.log"; exit 1; }
  student=$(find "$w/distill" -maxdepth 1 -name 'lora_step*.safetensors' ! -name '*ema*' | sort | tail -1)
  step "stage 2: $distill_steps distillation steps, $(tail -1 "$OUT/learning_distill.log")"
else
  step "stage 2: skipped, this vdt has no \`train distill\`"
fi

# Samples and distances. sample NAME ARGS...: N clips into $w/s_NAME, then their distance to the root.
table="$OUT/learning_table.txt"
: > "$table"
sample() {
  local name=$1
  shift
  "$VDT" sample "$@" --data_root "$w/root" --out "$w/s_$name" --n "$n" --cfg "$cfg" "${cpu[@]}" \
    > "$OUT/learning_sample_$name.log" 2>&1 || { tail -5 "$OUT/learning_sample_$name.log"; return 1; }
  evaluate "$name" "$w/s_$name"
}
evaluate() {
  local name=$1 dir=$2
  shift 2
  "$VDT" eval --generated "$dir" --reference "$w/root" --skip-frames 1 --out "$OUT/learning_eval_$name.json" "$@" \
    > "$OUT/learning_eval_$name.log" 2>&1 || { tail -5 "$OUT/learning_eval_$name.log"; return 1; }
  echo "$name $(grep '^frechet_distance' "$OUT/learning_eval_$name.log")" >> "$table"
  step "$name: $(grep '^frechet_distance' "$OUT/learning_eval_$name.log")"
}
sample teacher_50 --ckpt "$teacher_ckpt" --steps 50
evaluate data_val "$w/s_teacher_50" --key ground_truth  # the floor: N real clips against the root
sample teacher_4 --ckpt "$teacher_ckpt" --steps 4
sample causal_4 --causal --lora "$causal_lora" --steps 4
sample causal_50 --causal --lora "$causal_lora" --steps 50
[ -n "$student" ] && sample student_4 --causal --lora "$student" --steps 4

python3 - "$table" << 'PY' 2>&1 | tee -a "$SUMMARY"
import sys
d = {l.split()[0]: float(l.split()[2]) for l in open(sys.argv[1]) if l.strip()}
if "student_4" not in d:
    print("learning: no student; teacher_50 %.4g, causal_4 %.4g" % (d["teacher_50"], d["causal_4"]))
    sys.exit(0)
s, t, c = d["student_4"], d["teacher_50"], d["causal_4"]
ok = s <= 1.5 * t and s <= 0.5 * c
print("learning: student_4 %.4g = %.2fx teacher_50 (target <= 1.5), %.2fx causal_4 (target <= 0.5): %s"
      % (s, s / t, s / c, "MET" if ok else "NOT MET"))
PY
