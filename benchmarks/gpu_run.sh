#!/usr/bin/env bash
# One call on a lent H200 (see docs/BENCHMARKS.md): build vdt against that machine's python3 torch 2.11, run the
# parity fixture on CUDA in bf16 and fp32, then `vdt bench step` at the TI2V-5B geometry (the peer figures (docs/BENCHMARKS.md)) with and without
# per-block checkpointing. Needs .deps/ from benchmarks/prepare_gpu_carry.sh (carry it). Logs go to $OUT.
# Usage: benchmarks/gpu_run.sh [parity|bench|sft|multi|resume|causal|causal-multi|quick|skeleton|h3|profile|speed|table|fp8gate|
# fp8gate-h3|sfthost|tests|verify|variants|all]
# (default all)
# speed: parity (bf16, fp32), then `vdt bench step` rows for the speed tables (H3 causal, SFT and Wan causal with
# --checkpointing selective / block / none) and `vdt bench kernels`, one summary line each in $OUT/summary.txt.
# verify: after kernel code written without a GPU (GPU_TESTS=ON, fresh machine): the changed suites' CUDA tests, bf16
# parity, `vdt bench kernels` (KERNELS=0: not), the SFT rows over 30 steps, a traced step's split and elementwise
# kernels (TRACE_BF16=0: not; TRACE_FP8=1: the `--fp8 fast` step's too; GAPS=1: that step's GPU idle gaps and host
# time outside its span, trace_ops.py gaps / host; TRACE_CAUSAL=1: the 5B causal FP8 step's split, kernels and
# elementwise ops; CAUSAL_MEMORY="fast off": its allocation peak per --fp8 mode, trace_ops.py memory).
# table: the speed table of issue 15 in one run (TABLE parts "sft causal h3"): bf16 parity, the SFT bench rows,
# `vdt train sft` bf16 and mixed at the same geometry, the SFT selective step traced and split by kind, the Wan causal
# rows (block bf16, --fp8 fast, and --fp8 fast --attn-keep 0.5 --act-offload on), the H3 rows (block; selective SEL
# blocks, default 24, --fp8 fast, without and with --act-offload on --attn-keep KEEP); TABLE_SFT, TABLE_CAUSAL and
# TABLE_H3 replace a part's rows (speed_row names).
# fp8gate: two `vdt train sft` runs side by side on one GPU (random 5B weights, a synthetic 832x480 root of GATE_FRAMES
# latent frames, --precision bf16, selective checkpointing), without and with FP8 (FP8 flags), GATE_STEPS steps each:
# the running-mean loss curves compared by benchmarks/loss_gate.py. GATE_ACCUM: micro batches per step (default 2).
# GATE_FLOOR=1: a second bf16 run beside them, the bf16 curve's own run-to-run spread (loss_gate.py --floor).
# profile: bf16 parity, then one traced step (VDT_TRACE, input shapes) of the 5B SFT bench (CKS, default "block") with
# the ops that launched align2 GEMMs (benchmarks/trace_ops.py), and of the H3 causal bench step with its allocations
# (VDT_TRACE_MEMORY=1): kernel time by name and what is live at the allocation peak.
# h3: bf16 parity of h3_tiny_a, then `vdt bench step --trainer causal --model minimax-h3` (random 33B weights, LoRA r32
# on the four targets, block-causal) at the peer's geometry (256 text + Picture 1 + 6 chunks of 5 latents at 480x832
# with their audio = 12,686 rows) on GPU 0 with ATTNS (default "prefix mask"), then sharded over NPROC (default 2)
# with act-offload OFFLOADS (default "off on"); H3_TRACE=1 adds a traced sharded step (rank 0's allocations at its peak,
# act-offload H3_TRACE_OFFLOAD, default off). zero2: the 5B SFT bench step on 1 GPU and under ZeRO-2 on NPROC.
# skeleton: bf16 parity of both families (Wan, MiniMax-H3), `vdt bench step` through the real trainers (sft, causal)
# on GPU 0, then both under torchrun on NPROC (default 2) GPUs with each rank's weight / LoRA CRC.
# quick: bf16 parity, `vdt bench step` with checkpointing, and an 8-step 5B causal run (after a model change).
# causal: `vdt train causal` (LoRA r32, df, 6 chunks x 3 frames) at the 5B and 1.3B geometries (GEOS, default
# "5b 1.3b"), prefix / mask / prefix + act-offload, and `vdt bench step` (SFT) at equal tokens (18 latent frames).
# causal-multi: the 5B causal run on 1 GPU (step 6 traced with the PyTorch profiler, kernel time summed by
# benchmarks/trace_top.py) and on NPROC (default 2) GPUs (sharded frozen blocks), LoRA CRC per rank.
# resume: sharded state over NCCL with the tiny preset: 2 GPUs save, 2 GPUs resume, then 1 GPU resumes (2 -> 1).
# sft: a short `vdt train sft` at the real geometry (random 5B weights, synthetic data at 832x480, 48 channels,
# 21 latent frames, 4096-wide text) with validation and export.
set -uo pipefail
what=${1:-all}
OUT=${OUT:-/tmp/vdt_out}; mkdir -p "$OUT"
# Work dirs an earlier call left on a warm machine go first: a traced `vdt bench step` on a stale --work-dir
# segfaulted twice before its first line of setup (sixteenth session; not reproduced on the CPU), on a fresh one it ran.
for d in /tmp/vdt_*; do [ "$d" != "$OUT" ] && rm -rf "$d"; done
export TORCH_CUDA_ARCH_LIST=9.0a NCCL_NVLS_ENABLE=0
torch_dir=$(python3 -c 'import torch, os; print(os.path.join(torch.utils.cmake_prefix_path, "Torch"))')
{ nvidia-smi; python3 -c 'import torch; print(torch.__version__, torch.cuda.get_device_name(0))'; } > "$OUT/machine.txt" 2>&1
head -20 "$OUT/machine.txt"
build=build-gpu
if [ ! -f $build/build.ninja ]; then
  cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTorch_DIR="$torch_dir" -DVDT_BUILD_TESTS=${GPU_TESTS:-OFF} \
    -DCMAKE_PREFIX_PATH="$PWD/.deps/usr" > "$OUT/configure.log" 2>&1 || { tail -40 "$OUT/configure.log"; exit 1; }
fi
t0=$(date +%s)
cmake --build $build -j "$(nproc)" > "$OUT/build.log" 2>&1 || { grep -A5 error "$OUT/build.log" | head -60; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
rc=0
sum="$OUT/summary.txt"
bench() {  # name, args...: one `vdt bench step` row, its result line in $OUT/summary.txt; with CLOCKS=1 also the GPU's
  # SM clock, power and temperature sampled every 200 ms over the row (min / median / max), to tell a slow step mode
  # from power or thermal throttling
  local name=$1; shift
  rm -rf /tmp/vdt_speed_$name  # a stale work dir from an earlier call on a warm machine once gave no result line
  local smi=""
  if [ "${CLOCKS:-0}" = 1 ]; then
    nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 200 \
      > /tmp/vdt_smi_$name.csv 2>/dev/null & smi=$!
  fi
  timeout ${ROW_S:-240} $build/vdt bench step "$@" --work-dir /tmp/vdt_speed_$name > "$OUT/$name.log" 2>&1
  echo "$name: $(grep -E '^result' "$OUT/$name.log" | cut -c1-150)$(grep -iE 'out of memory|rror' "$OUT/$name.log" | head -1 | cut -c1-160)" | tee -a $sum
  if [ -n "$smi" ]; then
    kill $smi 2>/dev/null; wait $smi 2>/dev/null
    python3 - /tmp/vdt_smi_$name.csv <<'PY' | sed "s/^/$name: /" | tee -a $sum
import statistics, sys
rows = [[float(v) for v in l.split(",")] for l in open(sys.argv[1]) if l.count(",") == 2 and "N/A" not in l]
busy = [r for r in rows if r[1] > 150]  # samples while the GPU works (idle draws ~80 W)
for i, what in enumerate(["sm_mhz", "power_w", "temp_c"]):
    v = sorted(r[i] for r in busy) or [0]
    print(f"{what} min {v[0]:.0f} median {statistics.median(v):.0f} max {v[-1]:.0f} ({len(busy)} busy samples)")
PY
  fi
}
h3="--trainer causal --model minimax-h3 --frames 30 --height 30 --width 52 --text-len 256 --steps 3 --warmup 2"
# CAUSAL_STEPS: the causal rows' measured steps (default 4: their steps differ by chunk mix, 0.46-0.52 s at 5B FP8)
c5="--trainer causal --model wan2.2-ti2v-5b --frames 18 --height 30 --width 52 --steps ${CAUSAL_STEPS:-4} --warmup 2"
c13="--trainer causal --model wan2.1-t2v-1.3b --frames 18 --height 60 --width 104 --steps ${CAUSAL_STEPS:-4} --warmup 2"
sft="--trainer sft --steps ${SFT_STEPS:-4} --warmup ${SFT_WARMUP:-2}"  # SFT_STEPS=30: a median over the synthetic samples
speed_row() {  # the speed table's rows by name (SEL: H3's kept blocks with selective checkpointing, default 20); a
  # name ending in _again runs its row once more under that name (run-to-run checks)
  local row=$1 kind=${1%_again}
  case $kind in
    h3_block) bench $row $h3 --attn prefix ;;
    h3_block_fp8) bench $row $h3 --attn prefix --fp8 on ;;
    h3_block_fast) bench $row $h3 --attn prefix --fp8 fast ;;
    h3_selective) bench $row $h3 --attn prefix --checkpointing selective --selective-blocks ${SEL:-20} ;;
    h3_selective_fp8) bench $row $h3 --attn prefix --checkpointing selective --selective-blocks ${SEL:-20} --fp8 on ;;
    h3_selective_fast) bench $row $h3 --attn prefix --checkpointing selective --selective-blocks ${SEL:-20} --fp8 fast ;;
    h3_selective_fast_offload)  # the block inputs on the host (side-stream copies); KEEP: --attn-keep of the rest
      bench $row $h3 --attn prefix --checkpointing selective --selective-blocks ${SEL:-20} --fp8 fast --act-offload on \
        --attn-keep ${KEEP:-0} ;;
    sft_selective) bench $row $sft --checkpointing selective ;;
    sft_selective_fp8) bench $row $sft --checkpointing selective --fp8 on ;;
    sft_selective_fast) bench $row $sft --checkpointing selective --fp8 fast ;;
    sft_block) bench $row $sft --checkpointing block ;;
    sft_block_fp8) bench $row $sft --checkpointing block --fp8 on ;;
    sft_none) bench $row $sft --checkpointing none ;;
    causal5b_selective) bench $row $c5 --checkpointing selective ;;
    causal5b_selective_fp8) bench $row $c5 --checkpointing selective --fp8 on ;;
    causal5b_block) bench $row $c5 ;;
    causal5b_block_mask) bench $row $c5 --attn mask ;;
    causal5b_block_fast) bench $row $c5 --fp8 fast ;;
    causal13b_selective) bench $row $c13 --checkpointing selective ;;
    causal13b_selective_fp8) bench $row $c13 --checkpointing selective --fp8 on ;;
    causal13b_block) bench $row $c13 ;;
    causal13b_block_fast) bench $row $c13 --fp8 fast ;;
    causal5b_keep*_fast | causal13b_keep*_fast)  # causal13b_keep0.5_fast: --fp8 fast --attn-keep 0.5; with _offload
      # before _fast (causal13b_keep1_offload_fast) also --act-offload on
      local share=${kind#*_keep} offload=off geo=$c13; share=${share%_fast}
      [ "${share%_offload}" != "$share" ] && share=${share%_offload} offload=on
      [ "${kind%%_*}" = causal5b ] && geo=$c5
      bench $row $geo --fp8 fast --attn-keep $share --act-offload $offload ;;
    *) echo "unknown row $row" | tee -a $sum ;;
  esac
}
if [ "$what" = parity ] || [ "$what" = all ]; then
  for dt in bfloat16 float32; do
    for f in wan_tiny_a h3_tiny_a; do
      $build/vdt parity .deps/fixtures/$f.safetensors --device cuda --dtype $dt 2>&1 | tee -a "$OUT/parity.log" || rc=1
    done
  done
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  for ck in block none; do
    $build/vdt bench step --trainer sft --checkpointing $ck --steps 6 --warmup 2 2>&1 | tee "$OUT/bench_step_$ck.log" || rc=1
  done
fi
if [ "$what" = sft ] || [ "$what" = all ]; then
  root=/tmp/vdt_sft_root
  $build/vdt data synth $root --overwrite --channels 48 --latent_frames 21 --latent_h 30 --latent_w 52 \
    --text_dim 4096 --text_len 512 --train_runs 2 --train_clips_per_run 3 --val_runs 1 --val_clips_per_run 2 \
    --n_drop 1 2>&1 | tee "$OUT/sft_synth.log" || rc=1
  $build/vdt train sft --random-init --data_root $root --output /tmp/vdt_sft_run --res 832x480 --max_steps 8 --grad_accum 2 \
    --warmup_steps 2 --val_every 4 --val_n 1 --save_every 8 --num_workers 4 --device cuda 2>&1 \
    | tee "$OUT/sft_run.log" || rc=1
  cp /tmp/vdt_sft_run/train_log.csv "$OUT/sft_train_log.csv"; cp /tmp/vdt_sft_run/val_log.csv "$OUT/sft_val_log.csv"
  cp /tmp/vdt_sft_run/done.json "$OUT/sft_done.json"; ls -la /tmp/vdt_sft_run >> "$OUT/sft_run.log"
fi
if [ "$what" = multi ]; then
  # ZeRO-2 scaling: the same per-GPU work (batch 1 x GA 2 per rank) on 1 GPU and on NPROC (default 2) GPUs through
# torchrun.
  root=/tmp/vdt_multi_root
  $build/vdt data synth $root --overwrite --channels 48 --latent_frames 21 --latent_h 30 --latent_w 52 \
    --text_dim 4096 --text_len 512 --train_runs 2 --train_clips_per_run 4 --val_runs 1 --val_clips_per_run 2 \
    --n_drop 0 > "$OUT/multi_synth.log" 2>&1 || rc=1
  args="--random-init --data_root $root --res 832x480 --max_steps ${STEPS:-7} --grad_accum 2 --warmup_steps 2 --val_every 7 \
    --val_n 2 --val_timesteps 500 --save_every 1000 --no-save_state --num_workers 4"
  $build/vdt train sft $args --output /tmp/vdt_multi_1gpu --device cuda > "$OUT/multi_1gpu.log" 2>&1 || rc=1
  grep -E "^step|done" "$OUT/multi_1gpu.log" | cut -c1-200; cp /tmp/vdt_multi_1gpu/done.json "$OUT/multi_1gpu_done.json"
  n=${NPROC:-2}
  python3 -m torch.distributed.run --nproc-per-node $n --no-python $build/vdt train sft $args \
    --output /tmp/vdt_multi_${n}gpu > "$OUT/multi_${n}gpu.log" 2>&1 || rc=1
  grep -E "^step|CRC|done|val|error|Error|Warn" "$OUT/multi_${n}gpu.log" | cut -c1-200 | tail -16
  cp /tmp/vdt_multi_${n}gpu/done.json "$OUT/multi_${n}gpu_done.json"
fi
if [ "$what" = resume ]; then
  root=/tmp/vdt_resume_root; run=/tmp/vdt_resume_run; rm -rf $run
  $build/vdt data synth $root --overwrite --train_runs 2 --train_clips_per_run 4 --n_drop 0 > /dev/null 2>&1 || rc=1
  args="--random-init --data_root $root --res 128x128 --model tiny --grad_accum 1 --warmup_steps 2 --lr 1e-3 --val_every 2 --val_n 2 \
    --save_every 2 --num_workers 1 --output $run"
  torchrun="python3 -m torch.distributed.run --nproc-per-node 2 --no-python $build/vdt train sft"
  $torchrun $args --max_steps 4 > "$OUT/resume_a.log" 2>&1 || rc=1
  $torchrun $args --max_steps 6 --resume auto > "$OUT/resume_b.log" 2>&1 || rc=1
  $build/vdt train sft $args --max_steps 8 --resume auto --device cuda > "$OUT/resume_c.log" 2>&1 || rc=1
  grep -hE "^\[resume\]|^\[state\]|CRC|^trained|rror" "$OUT"/resume_[abc].log | cut -c1-220
  ls -la $run/state/ | tee -a "$OUT/resume_c.log"; cp $run/train_log.csv "$OUT/resume_train_log.csv"
fi
causal_root() {  # geometry -> a synthetic root of 18-frame streams
  local geo=$1 root=/tmp/vdt_causal_root_$1
  if [ "$geo" = 5b ]; then set -- 48 30 52; else set -- 16 60 104; fi
  [ -f $root/dataset.json ] || $build/vdt data synth $root --overwrite --channels $1 --latent_frames 18 --latent_h $2 \
    --latent_w $3 --text_dim 4096 --text_len 512 --train_runs 2 --train_clips_per_run 4 --val_runs 1 \
    --val_clips_per_run 2 --n_drop 0 > "$OUT/causal_synth_$geo.log" 2>&1
  echo $root
}
steady() {  # mean s/step from train_log.jsonl, skipping the first 3 steps (allocation, cuDNN plans)
  python3 -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; print('steady %.3f s/step over steps 4..%d' % ((r[-1]['sec']-r[2]['sec'])/(len(r)-3), len(r)))" "$1"
}
if [ "$what" = causal ] || [ "$what" = all ]; then
  for geo in ${GEOS:-5b 1.3b}; do
    root=$(causal_root $geo)
    model=wan2.2-ti2v-5b; hw="--height 30 --width 52"
    [ "$geo" = 1.3b ] && model=wan2.1-t2v-1.3b && hw="--height 60 --width 104"
    for variant in prefix mask offload; do
      extra="--attn $variant"; [ $variant = offload ] && extra="--attn prefix --act-offload on"
      run=/tmp/vdt_causal_${geo}_$variant; rm -rf $run
      timeout 240 $build/vdt train causal --random-init --data-root $root --out $run --model $model --steps ${CSTEPS:-10} \
        --val-clips 1 --save-every 1000 --lora-rank 32 --lora-alpha 32 $extra > "$OUT/causal_${geo}_$variant.log" 2>&1 || rc=1
      grep -E "^  |^trained|rror" "$OUT/causal_${geo}_$variant.log" | cut -c1-200
      steady $run/train_log.jsonl | tee -a "$OUT/causal_${geo}_$variant.log"
    done
    timeout 240 $build/vdt bench step --model $model --frames 18 $hw --steps 5 --warmup 2 2>&1 \
      | tee "$OUT/causal_${geo}_sft_bench.log" | tail -4 || rc=1
  done
fi
if [ "$what" = quick ]; then  # a check after a model change: parity, the SFT step (block), the 5B causal step (prefix)
  $build/vdt parity .deps/fixtures/wan_tiny_a.safetensors --device cuda --dtype bfloat16 2>&1 | tee "$OUT/parity.log" \
    | grep -E "out|PASS|FAIL" || rc=1
  $build/vdt bench step --checkpointing block --steps 4 --warmup 2 2>&1 | tee "$OUT/bench_step_block.log" | tail -5
  root=$(causal_root 5b); run=/tmp/vdt_causal_quick; rm -rf $run
  $build/vdt train causal --random-init --data-root $root --out $run --model wan2.2-ti2v-5b --steps 8 --val-clips 1 \
    --save-every 1000 --lora-rank 32 --lora-alpha 32 > "$OUT/causal_quick.log" 2>&1 || rc=1
  grep -E "^trained|rror" "$OUT/causal_quick.log"; steady $run/train_log.jsonl | tee -a "$OUT/causal_quick.log"
fi
if [ "$what" = causal-multi ]; then
  root=$(causal_root 5b); n=${NPROC:-2}
  args="--random-init --data-root $root --model wan2.2-ti2v-5b --steps ${CSTEPS:-10} --val-clips 1 --save-every 1000 --lora-rank 32 \
    --lora-alpha 32"
  VDT_TRACE=$OUT/causal_1gpu_step6.json VDT_TRACE_STEP=6 $build/vdt train causal $args --out /tmp/vdt_cm_1 \
    > "$OUT/causal_multi_1gpu.log" 2>&1 || rc=1
  grep -E "^  |^trained|rror" "$OUT/causal_multi_1gpu.log" | cut -c1-200; steady /tmp/vdt_cm_1/train_log.jsonl
  python3 benchmarks/trace_top.py $OUT/causal_1gpu_step6.json 30 | tee "$OUT/causal_1gpu_trace_top.txt"
  gzip -f $OUT/causal_1gpu_step6.json
  python3 -m torch.distributed.run --nproc-per-node $n --no-python $build/vdt train causal $args \
    --out /tmp/vdt_cm_$n > "$OUT/causal_multi_${n}gpu.log" 2>&1 || rc=1
  grep -E "^  |^trained|CRC|rror" "$OUT/causal_multi_${n}gpu.log" | cut -c1-200; steady /tmp/vdt_cm_$n/train_log.jsonl
  cp /tmp/vdt_cm_$n/train_log.jsonl "$OUT/causal_multi_${n}gpu_train_log.jsonl"
fi
if [ "$what" = skeleton ]; then
  for f in wan_tiny_a h3_tiny_a; do
    CUDA_VISIBLE_DEVICES=0 $build/vdt parity .deps/fixtures/$f.safetensors --device cuda --dtype bfloat16 2>&1 \
      | tee -a "$OUT/parity.log" | grep -E "model|out |logits|fixture.loss|PASS|FAIL" || rc=1
  done
  bench="$build/vdt bench step"
  sft="--trainer sft --steps ${STEPS:-4} --warmup 2"
  causal="--trainer causal --frames 18 --steps ${STEPS:-5} --warmup 3"
  CUDA_VISIBLE_DEVICES=0 $bench $sft > "$OUT/bench_sft_1gpu.log" 2>&1 || rc=1; tail -3 "$OUT/bench_sft_1gpu.log"
  CUDA_VISIBLE_DEVICES=0 $bench $causal > "$OUT/bench_causal_1gpu.log" 2>&1 || rc=1; tail -3 "$OUT/bench_causal_1gpu.log"
  n=${NPROC:-2}
  if [ "$(nvidia-smi -L | wc -l)" -ge "$n" ]; then
    run="python3 -m torch.distributed.run --nproc-per-node $n --no-python"
    $run $bench $sft > "$OUT/bench_sft_${n}gpu.log" 2>&1 || rc=1
    grep -E "CRC|result|rror" "$OUT/bench_sft_${n}gpu.log" | cut -c1-220
    $run $bench $causal > "$OUT/bench_causal_${n}gpu.log" 2>&1 || rc=1
    grep -E "CRC|result|rror" "$OUT/bench_causal_${n}gpu.log" | cut -c1-220
  fi
fi
if [ "$what" = h3 ]; then
  CUDA_VISIBLE_DEVICES=0 $build/vdt parity .deps/fixtures/h3_tiny_a.safetensors --device cuda --dtype bfloat16 2>&1 \
    | tee "$OUT/parity_h3.log" | grep -E "logits|fixture.loss|PASS|FAIL" || rc=1
  geo="--trainer causal --model minimax-h3 --frames 30 --height 30 --width 52 --text-len 256 --steps ${STEPS:-3} --warmup 2"
  for attn in ${ATTNS:-prefix mask}; do
    t0=$(date +%s)
    CUDA_VISIBLE_DEVICES=0 timeout 420 $build/vdt bench step $geo --attn $attn --work-dir /tmp/vdt_h3_1gpu_$attn \
      > "$OUT/bench_h3_1gpu_$attn.log" 2>&1 || rc=1
    grep -E "rows per|^  step|result|rror|what" "$OUT/bench_h3_1gpu_$attn.log" | cut -c1-220; echo "wall $(( $(date +%s) - t0 )) s"
  done
  n=${NPROC:-2}
  if [ "$(nvidia-smi -L | wc -l)" -ge "$n" ]; then
    for off in ${OFFLOADS:-off on}; do
      t0=$(date +%s)
      timeout 420 python3 -m torch.distributed.run --nproc-per-node $n --no-python $build/vdt bench step $geo \
        --attn prefix --act-offload $off --work-dir /tmp/vdt_h3_${n}gpu_$off > "$OUT/bench_h3_${n}gpu_$off.log" 2>&1 || rc=1
      grep -E "blocks sharded|^  step|result|CRC|rror|what" "$OUT/bench_h3_${n}gpu_$off.log" | cut -c1-220
      echo "wall $(( $(date +%s) - t0 )) s"
    done
    if [ "${H3_TRACE:-0}" = 1 ]; then  # where the sharded step's peak is: rank 0's allocations over step 4
      VDT_TRACE=$OUT/h3_${n}gpu.json VDT_TRACE_STEP=4 VDT_TRACE_MEMORY=1 timeout 420 python3 -m torch.distributed.run \
        --nproc-per-node $n --no-python $build/vdt bench step $geo --attn prefix --act-offload ${H3_TRACE_OFFLOAD:-off} \
        --work-dir /tmp/vdt_h3_${n}gpu_trace > "$OUT/bench_h3_${n}gpu_trace.log" 2>&1 || rc=1
      python3 benchmarks/trace_ops.py $OUT/h3_${n}gpu.rank0.json memory 30 | tee "$OUT/h3_${n}gpu_memory.txt"
      rm -f $OUT/h3_${n}gpu.rank*.json
    fi
  fi
fi
if [ "$what" = zero2 ]; then  # the 5B SFT step (ZeRO-2 over NPROC GPUs): s/step per GPU and each rank's weight CRC
  sft="--trainer sft --steps ${STEPS:-4} --warmup 2"
  CUDA_VISIBLE_DEVICES=0 timeout 300 $build/vdt bench step $sft --work-dir /tmp/vdt_z2_1 > "$OUT/bench_sft_1gpu.log" 2>&1 \
    || rc=1
  grep -E "^  step|result|rror" "$OUT/bench_sft_1gpu.log" | cut -c1-220
  n=${NPROC:-2}
  timeout 300 python3 -m torch.distributed.run --nproc-per-node $n --no-python $build/vdt bench step $sft \
    --work-dir /tmp/vdt_z2_$n > "$OUT/bench_sft_${n}gpu.log" 2>&1 || rc=1
  grep -E "^  step|CRC|result|rror" "$OUT/bench_sft_${n}gpu.log" | cut -c1-220
fi
if [ "$what" = h3-resume ]; then  # H3 causal LoRA on NPROC GPUs: uninterrupted vs killed (-9) after step 4 and re-run
  root=/tmp/vdt_h3_root; n=${NPROC:-2}
  $build/vdt data synth $root --overwrite --model h3 --latent_frames 30 --latent_h 30 --latent_w 52 --text_dim 5120 \
    --text_len 256 --train_runs 1 --train_clips_per_run 8 --val_runs 1 --val_clips_per_run 1 --n_drop 0 \
    > "$OUT/h3_synth.log" 2>&1 || rc=1
  tr="python3 -m torch.distributed.run --nproc-per-node $n --no-python $build/vdt train causal --random-init --data-root $root \
    --model minimax-h3 --steps 6 --save-every 2 --val-clips 1 --lora-rank 32 --lora-alpha 32"
  rm -rf /tmp/vdt_h3_full /tmp/vdt_h3_cut
  [ -n "${SKIP_FULL:-}" ] || timeout 300 $tr --out /tmp/vdt_h3_full > "$OUT/h3_full.log" 2>&1 || rc=1
  grep -E "^step|CRC|rror" "$OUT/h3_full.log" | cut -c1-160
  setsid $tr --out /tmp/vdt_h3_cut > "$OUT/h3_cut_a.log" 2>&1 &
  pid=$!
  for i in $(seq 1 240); do [ -f /tmp/vdt_h3_cut/lora_step00004.safetensors ] && break; sleep 1; done
  sleep 4; pkill -9 -f "vdt train causal"; kill -9 -- -$pid 2>/dev/null; wait $pid 2>/dev/null; sleep 3
  echo "killed after: $(ls /tmp/vdt_h3_cut | tr '\n' ' ')"
  timeout 300 $tr --out /tmp/vdt_h3_cut > "$OUT/h3_cut_b.log" 2>&1 || rc=1
  grep -E "fresh run|resume|^step|CRC|rror" "$OUT/h3_cut_b.log" | cut -c1-200
fi
if [ "$what" = profile ]; then  # where the time and memory go: the SFT step (block checkpointing) and the H3 causal step
  if [ "${PARITY:-1}" = 1 ]; then
    for dt in bfloat16 float32; do
      for f in wan_tiny_a h3_tiny_a; do
        $build/vdt parity .deps/fixtures/$f.safetensors --device cuda --dtype $dt 2>&1 | grep -E "PASS|FAIL" || rc=1
      done
    done
    timeout 200 $build/vdt bench kernels --device cuda 2>&1 | grep -E "^kernel|FAIL" | cut -c1-200 || rc=1
  fi
  rm -rf /tmp/vdt_prof_*  # fresh work dirs (see speed)
  for ck in ${CKS:-block}; do
    VDT_TRACE=$OUT/sft_$ck.json VDT_TRACE_STEP=4 timeout 150 $build/vdt bench step --trainer sft --checkpointing $ck \
      --steps 3 --warmup 2 --work-dir /tmp/vdt_prof_sft_$ck > "$OUT/prof_sft_$ck.log" 2>&1 || rc=1
    grep -E "^  step|result|rror" "$OUT/prof_sft_$ck.log" | cut -c1-200
    python3 benchmarks/trace_top.py $OUT/sft_$ck.json 40 | head -${TOPN:-24}
    python3 benchmarks/trace_ops.py $OUT/sft_$ck.json kernels align2 12 | head -30
    python3 benchmarks/trace_ops.py $OUT/sft_$ck.json elementwise 60 > "$OUT/sft_${ck}_elementwise.txt"
    head -${ELEM_N:-0} "$OUT/sft_${ck}_elementwise.txt"
    python3 benchmarks/trace_ops.py $OUT/sft_$ck.json gaps 12 | tee "$OUT/sft_${ck}_gaps.txt" | head -${GAPS_N:-30}
    python3 benchmarks/trace_top.py $OUT/sft_$ck.json 80 > "$OUT/sft_${ck}_top.txt"
    gzip -f $OUT/sft_$ck.json
  done
  for m in ${CAUSAL_MODELS:-}; do  # the Wan causal LoRA step (prefix), e.g. CAUSAL_MODELS="wan2.2-ti2v-5b"
    hw="--height 30 --width 52"; [ $m = wan2.1-t2v-1.3b ] && hw="--height 60 --width 104"
    timeout 150 $build/vdt bench step --trainer causal --model $m --frames 18 $hw --steps 4 --warmup 2 \
      --work-dir /tmp/vdt_prof_causal_$m > "$OUT/prof_causal_$m.log" 2>&1 || rc=1
    grep -E "result|rror" "$OUT/prof_causal_$m.log" | cut -c1-200
  done
  if [ "${H3:-1}" = 1 ]; then  # H3=0 skips the H3 step
    geo="--trainer causal --model minimax-h3 --frames 30 --height 30 --width 52 --text-len 256 --steps 3 --warmup 2"
    VDT_TRACE=$OUT/h3.json VDT_TRACE_STEP=4 VDT_TRACE_MEMORY=${H3_MEMORY:-1} timeout 300 $build/vdt bench step $geo --attn prefix \
      ${H3_ARGS:-} --work-dir /tmp/vdt_prof_h3 > "$OUT/prof_h3.log" 2>&1 || rc=1
    grep -E "rows per|^  step|result|rror" "$OUT/prof_h3.log" | cut -c1-200
    python3 benchmarks/trace_top.py $OUT/h3.json 40 > "$OUT/h3_top.txt"; head -30 "$OUT/h3_top.txt"
    [ "${H3_MEMORY:-1}" = 1 ] && python3 benchmarks/trace_ops.py $OUT/h3.json memory 30 | tee "$OUT/h3_memory.txt"
    python3 benchmarks/trace_ops.py $OUT/h3.json kernels gemm 15 > "$OUT/h3_gemms.txt"
    python3 benchmarks/trace_ops.py $OUT/h3.json elementwise 60 > "$OUT/h3_elementwise.txt"
    gzip -f $OUT/h3.json
  fi
fi
if [ "$what" = fp8gate ]; then  # issue 15 item 5: bf16 vs fp8 `vdt train sft` loss curves, the two runs side by side
  root=/tmp/vdt_gate_root
  $build/vdt data synth $root --overwrite --channels 48 --latent_frames ${GATE_FRAMES:-6} --latent_h 30 --latent_w 52 \
    --text_dim 4096 --text_len 512 --train_runs 4 --train_clips_per_run 8 --val_runs 1 --val_clips_per_run 2 \
    --n_drop 1 > "$OUT/gate_synth.log" 2>&1 || { tail -5 "$OUT/gate_synth.log"; rc=1; }
  modes="bf16 fp8"; [ "${GATE_FLOOR:-0}" = 1 ] && modes="bf16 fp8 bf16b"  # bf16b: bf16 again, the run-to-run floor
  for mode in $modes; do
    extra=""; [ $mode = fp8 ] && extra="${FP8:---fp8 on}"
    timeout ${GATE_S:-500} $build/vdt train sft --random-init --data_root $root --output /tmp/vdt_gate_$mode --res 832x480 \
      --max_steps ${GATE_STEPS:-1000} --grad_accum ${GATE_ACCUM:-2} --precision bf16 --checkpointing selective --lr 1e-4 --warmup_steps 20 \
      --val_every 0 --save_every 100000 --no-save_state --num_workers 2 --device cuda --seed 0 $extra \
      > "$OUT/gate_$mode.log" 2>&1 &
  done
  wait
  for mode in $modes; do cp /tmp/vdt_gate_$mode/train_log.csv "$OUT/gate_${mode}_train_log.csv"; done
  floor=""; [ "${GATE_FLOOR:-0}" = 1 ] && floor="--floor $OUT/gate_bf16b_train_log.csv"
  python3 benchmarks/loss_gate.py "$OUT/gate_bf16_train_log.csv" "$OUT/gate_fp8_train_log.csv" $floor 2>&1 | tee -a $sum
  grep -hE "^\[done\]|rror" "$OUT"/gate_*.log | cut -c1-200 | tee -a $sum
fi
if [ "$what" = fp8gate-h3 ]; then  # the FP8 gate for the H3 LoRA: `vdt train causal` on a random H3 base, bf16 then FP8
  # (FP8 flags, default --fp8 fast), one after the other (both do not fit one H200 together); a short H3 root of
  # 6 chunks of GATE_CHUNK latent frames (default 2: 4,680 video rows) so GATE_STEPS (default 150) steps fit one call.
  root=/tmp/vdt_gate_h3_root; ck=${GATE_CHUNK:-2}
  $build/vdt data synth $root --overwrite --model h3 --latent_frames $(( 6 * ck )) --latent_h 30 --latent_w 52 \
    --text_dim 5120 --text_len 256 --train_runs 2 --train_clips_per_run 8 --val_runs 1 --val_clips_per_run 1 \
    --n_drop 0 > "$OUT/gate_h3_synth.log" 2>&1 || { tail -5 "$OUT/gate_h3_synth.log"; rc=1; }
  for mode in bf16 fp8; do
    extra=""; [ $mode = fp8 ] && extra="${FP8:---fp8 fast}"
    rm -rf /tmp/vdt_gate_h3_$mode
    timeout ${GATE_S:-270} $build/vdt train causal --random-init --data-root $root --out /tmp/vdt_gate_h3_$mode \
      --model minimax-h3 --chunk-frames $ck --steps ${GATE_STEPS:-150} --save-every 100000 --val-clips 1 --lora-rank 32 \
      --lora-alpha 32 --lr ${GATE_LR:-1e-4} --warmup 10 --seed 0 $extra > "$OUT/gate_h3_$mode.log" 2>&1
    echo "gate_h3 $mode: rc $?, $(grep -cE '^step' "$OUT/gate_h3_$mode.log") step lines" | tee -a $sum
    cp /tmp/vdt_gate_h3_$mode/train_log.jsonl "$OUT/gate_h3_${mode}_train_log.jsonl"
  done
  for w in 25 50; do
    python3 benchmarks/loss_gate.py "$OUT/gate_h3_bf16_train_log.jsonl" "$OUT/gate_h3_fp8_train_log.jsonl" --window $w \
      2>&1 | tee -a $sum
  done
fi
if [ "$what" = sfthost ]; then  # bf16 parity of both fixtures, the SFT selective step over SFT_STEPS
  # timed steps (default 10: a steadier median), then one traced step: where its wall time goes outside the GPU's span (trace_ops.py host) and the
  # GPU's idle gaps inside it
  for f in wan_tiny_a h3_tiny_a; do
    $build/vdt parity .deps/fixtures/$f.safetensors --device cuda --dtype bfloat16 2>&1 | grep -E "PASS|FAIL" | tail -3 || rc=1
  done
  bench sft_selective_long --trainer sft --steps ${SFT_STEPS:-10} --warmup 3 --checkpointing selective ${SFT_ARGS:-}
  grep -E "^  step" "$OUT/sft_selective_long.log" | tr -s ' ' | tr '\n' ' '; echo
  VDT_TRACE=$OUT/sft_host.json VDT_TRACE_STEP=4 timeout 150 $build/vdt bench step $sft --checkpointing selective \
    ${SFT_ARGS:-} --work-dir /tmp/vdt_host_trace > "$OUT/host_trace.log" 2>&1 || rc=1
  grep -E "^  step|result" "$OUT/host_trace.log" | cut -c1-160
  python3 benchmarks/trace_ops.py $OUT/sft_host.json host ${HOST_N:-15}
  python3 benchmarks/trace_ops.py $OUT/sft_host.json gaps ${GAPS_N:-12} | head -40
  python3 benchmarks/trace_top.py $OUT/sft_host.json 40 | grep -E "^kernels|^split"
  gzip -f $OUT/sft_host.json
fi
verify_tree() {  # tag: a suffix for the logs of this tree (variants); `verify` below
  local tag=$1
  # the CUDA tests of the changed suites (GTEST_FILTER), bf16 parity of both fixtures, the SFT rows (VERIFY_ROWS) over
  # SFT_STEPS (default 30) steps, one traced selective step: its split and its elementwise kernels (ELEM_N lines);
  # TRACE_FP8=1 the `--fp8 fast` step's too, TRACE_CAUSAL=1 the 5B causal step's (block checkpointing, FP8)
  if [ -x $build/tests/vdt_tests ]; then
    timeout ${TESTS_S:-240} $build/tests/vdt_tests \
      --gtest_filter="${GTEST_FILTER:-FusedOps.*:ActivationCheckpoint.*:GatherRows.*:WanQkNormRope.*:BiasGrad.*}" \
      > "$OUT/gtest$tag.log" 2>&1; echo "gtest rc $? (an exit-time crash after the last test is known)" | tee -a $sum
    grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|Failure|rel_max|tests ran|^wgrad " "$OUT/gtest$tag.log" | head -40 | tee -a $sum
  else
    echo "no $build/tests/vdt_tests: GPU_TESTS=ON on a fresh machine builds it" | tee -a $sum
  fi
  for f in wan_tiny_a h3_tiny_a; do
    $build/vdt parity .deps/fixtures/$f.safetensors --device cuda --dtype bfloat16 > "$OUT/parity_$f.log" 2>&1
    echo "parity $f bfloat16: rc $?, $(grep -c PASS "$OUT/parity_$f.log") PASS, $(grep -c FAIL "$OUT/parity_$f.log") FAIL" | tee -a $sum
  done
  [ "${KERNELS:-1}" = 1 ] && timeout 200 $build/vdt bench kernels --device cuda --dtypes bf16 2>&1 | grep -E "^kernel|FAIL|rror" | cut -c1-200 | tee -a $sum
  export SFT_STEPS=${SFT_STEPS:-30} SFT_WARMUP=${SFT_WARMUP:-3}
  sft="--trainer sft --steps $SFT_STEPS --warmup $SFT_WARMUP"
  for row in ${VERIFY_ROWS:-sft_selective sft_selective_fast}; do speed_row $row; done
  if [ "${TRACE_BF16:-1}" = 1 ]; then  # TRACE_BF16=0 skips the bf16 step's trace (an FP8-only change)
    rm -rf /tmp/vdt_verify_trace  # a traced step on an earlier variant's work dir segfaults (seventeenth session)
    VDT_TRACE=$OUT/sft_verify.json VDT_TRACE_STEP=4 timeout 150 $build/vdt bench step --trainer sft --steps 4 --warmup 2 \
      --checkpointing selective --work-dir /tmp/vdt_verify_trace > "$OUT/verify_trace.log" 2>&1 || rc=1
    python3 benchmarks/trace_top.py $OUT/sft_verify.json 40 | grep -E "^kernels|^split" | tee -a $sum
    python3 benchmarks/trace_ops.py $OUT/sft_verify.json elementwise 40 | head -${ELEM_N:-30}
    python3 benchmarks/trace_ops.py $OUT/sft_verify.json kernels chunk_kernel | head -12
    rm -f $OUT/sft_verify.json
  fi
  if [ "${TRACE_FP8:-0}" = 1 ]; then  # the `--fp8 fast` step traced too: its split and its heaviest kernels by name
    rm -rf /tmp/vdt_verify_fp8
    VDT_TRACE=$OUT/sft_fp8.json VDT_TRACE_STEP=4 timeout 150 $build/vdt bench step --trainer sft --steps 4 --warmup 2 \
      --checkpointing selective --fp8 fast --work-dir /tmp/vdt_verify_fp8 > "$OUT/verify_fp8.log" 2>&1 || rc=1
    python3 benchmarks/trace_top.py $OUT/sft_fp8.json 40 | grep -E "^kernels|^split" | tee -a $sum
    python3 benchmarks/trace_top.py $OUT/sft_fp8.json 40 > "$OUT/sft_fp8_top$tag.txt"; head -${TOPN:-30} "$OUT/sft_fp8_top$tag.txt"
    python3 benchmarks/trace_ops.py $OUT/sft_fp8.json elementwise 40 | head -${ELEM_N:-30}
    python3 benchmarks/trace_ops.py $OUT/sft_fp8.json kernels quantize 12 | head -40
    if [ "${GAPS:-0}" = 1 ]; then  # where the FP8 step's GPU idled and what the host did outside its span
      python3 benchmarks/trace_ops.py $OUT/sft_fp8.json gaps ${GAPS_N:-12} | head -60 | tee "$OUT/gaps$tag.txt"
      python3 benchmarks/trace_ops.py $OUT/sft_fp8.json host ${HOST_N:-12} | head -40 | tee "$OUT/host$tag.txt"
    fi
    rm -f $OUT/sft_fp8.json
  fi
  if [ "${TRACE_CAUSAL:-0}" = 1 ]; then  # the causal LoRA step (block checkpointing, CAUSAL_FP8, default fast) traced:
    # 5B, or 1.3B with TRACE_CAUSAL_13B=1
    rm -rf /tmp/vdt_verify_causal
    local ctrace=$c5 cname=5B
    [ "${TRACE_CAUSAL_13B:-0}" = 1 ] && ctrace=$c13 cname=1.3B
    VDT_TRACE=$OUT/causal.json VDT_TRACE_STEP=4 timeout 200 $build/vdt bench step $ctrace --fp8 ${CAUSAL_FP8:-fast} \
      --work-dir /tmp/vdt_verify_causal > "$OUT/verify_causal.log" 2>&1 || rc=1
    echo "causal $cname block --fp8 ${CAUSAL_FP8:-fast}, traced:" | tee -a $sum
    python3 benchmarks/trace_top.py $OUT/causal.json 40 | grep -E "^kernels|^split" | tee -a $sum
    python3 benchmarks/trace_top.py $OUT/causal.json 40 | head -${TOPN:-30}
    python3 benchmarks/trace_ops.py $OUT/causal.json elementwise 40 | head -${ELEM_N:-30}
    rm -f $OUT/causal.json
  fi
  for mode in ${CAUSAL_MEMORY:-}; do  # CAUSAL_MEMORY="fast off": the 5B causal step's allocation peak per --fp8 mode
    rm -rf /tmp/vdt_verify_causal_mem
    VDT_TRACE=$OUT/causal_mem.json VDT_TRACE_STEP=4 VDT_TRACE_MEMORY=1 timeout 200 $build/vdt bench step $c5 --fp8 $mode \
      --work-dir /tmp/vdt_verify_causal_mem > "$OUT/verify_causal_mem_$mode.log" 2>&1 || rc=1
    echo "causal 5B block --fp8 $mode, allocation peak of the traced step:" | tee -a $sum
    python3 benchmarks/trace_ops.py $OUT/causal_mem.json memory ${MEM_N:-16} | tee "$OUT/causal_mem_$mode.txt"
    rm -f $OUT/causal_mem.json
  done
}
if [ "$what" = verify ]; then  # after kernel code written without a GPU (run on a fresh machine with GPU_TESTS=ON)
  verify_tree ""
fi
if [ "$what" = variants ]; then  # VARIANTS="name=file ...": patches against this tree (untracked files, e.g. `git diff
  # main BRANCH > benchmarks/NAME.patch` here; `name=base` for the tree itself), applied one at a time, each rebuilt
  # incrementally on the same machine and verified as `verify` does (its knobs; ROWS_<name> for one variant's rows),
  # then reverted: several branches in one call and one fresh build
  command -v patch > /dev/null || echo "no patch(1) on this machine: only the base tree is verified" | tee -a $sum
  for v in ${VARIANTS:-base}; do
    name=${v%%=*}; file=${v#*=}
    [ "$name" != base ] && ! command -v patch > /dev/null && continue
    echo "== variant $name" | tee -a $sum
    if [ "$name" != base ]; then
      if ! patch -p1 --dry-run < "$file" > "$OUT/patch_$name.log" 2>&1; then
        echo "variant $name: $file does not apply" | tee -a $sum; continue
      fi
      patch -p1 < "$file" >> "$OUT/patch_$name.log" 2>&1
    fi
    if cmake --build $build -j "$(nproc)" > "$OUT/build_$name.log" 2>&1; then
      rows_of="ROWS_$name"  # ROWS_<name>: this variant's VERIFY_ROWS (e.g. the base tree's other rows beside)
      VERIFY_ROWS=${!rows_of:-${VERIFY_ROWS:-sft_selective sft_selective_fast}} verify_tree "_$name"
    else
      grep -m5 -A5 error "$OUT/build_$name.log" | tee -a $sum
    fi
    [ "$name" != base ] && patch -p1 -R < "$file" >> "$OUT/patch_$name.log" 2>&1
  done
fi
if [ "$what" = tests ]; then  # the CUDA side of the unit tests (configure with GPU_TESTS=ON on a fresh machine, which
  # builds vdt_tests beside vdt): GTEST_FILTER (default: the kernel, optimizer and update-path suites)
  [ -x $build/tests/vdt_tests ] || { echo "no $build/tests/vdt_tests: run with GPU_TESTS=ON on a fresh machine"; exit 1; }
  timeout ${TESTS_S:-300} $build/tests/vdt_tests \
    --gtest_filter="${GTEST_FILTER:-*Cuda*:WanRmsNorm.*:GatherRows.*:ColumnSums.*:Swiglu.*:WanQkNormRope.*:AdamW.*:GradSync*}" \
    > "$OUT/gtest.log" 2>&1; echo "gtest rc $?"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests ran" "$OUT/gtest.log" | head -40
fi
if [ "$what" = speed ]; then  # issue 15 / 14 speed table, most important first; a summary line per result
  # PARITY=0 skips the parity and kernel checks; ROWS picks the bench rows (speed_row above).
  if [ "${PARITY:-1}" = 1 ]; then
    for dt in bfloat16 float32; do
      for f in wan_tiny_a h3_tiny_a; do
        $build/vdt parity .deps/fixtures/$f.safetensors --device cuda --dtype $dt > "$OUT/parity_${f}_$dt.log" 2>&1
        echo "parity $f $dt: rc $?, $(grep -cE "PASS" "$OUT/parity_${f}_$dt.log") PASS lines, $(grep -cE "FAIL" "$OUT/parity_${f}_$dt.log") FAIL" | tee -a $sum
      done
    done
    timeout 200 $build/vdt bench kernels --device cuda --dtypes bf16 2>&1 | grep -E "^kernel|FAIL|rror" | cut -c1-200 | tee -a $sum
  fi
  for row in ${ROWS:-h3_block sft_selective causal5b_selective h3_selective causal13b_selective sft_block}; do
    speed_row $row
  done
fi
if [ "$what" = table ]; then  # issue 15 item 7: the speed table's rows in one run; TABLE picks parts (sft causal h3)
  parts=" ${TABLE:-sft causal h3} "
  if [[ $parts == *" sft "* ]]; then
    for f in wan_tiny_a h3_tiny_a; do
      $build/vdt parity .deps/fixtures/$f.safetensors --device cuda --dtype bfloat16 > "$OUT/parity_$f.log" 2>&1
      echo "parity $f bfloat16: rc $?, $(grep -c PASS "$OUT/parity_$f.log") PASS, $(grep -c FAIL "$OUT/parity_$f.log") FAIL" | tee -a $sum
    done
    for row in ${TABLE_SFT:-sft_selective sft_selective_fast sft_block sft_none}; do speed_row $row; done
    # `vdt train sft` (adapter, per-cell text, loader, logging) at the bench's geometry, one micro batch per step:
    # the median of steps 3.. from train_log.csv against the bench rows above
    root=/tmp/vdt_table_root
    $build/vdt data synth $root --overwrite --channels 48 --latent_frames 21 --latent_h 30 --latent_w 52 \
      --text_dim 4096 --text_len 512 --train_runs 2 --train_clips_per_run 6 --val_runs 1 --val_clips_per_run 1 \
      --n_drop 0 > "$OUT/table_synth.log" 2>&1 || rc=1
    for prec in bf16 mixed; do
      rm -rf /tmp/vdt_table_$prec
      timeout 200 $build/vdt train sft --random-init --data_root $root --output /tmp/vdt_table_$prec --res 832x480 \
        --max_steps ${TRAIN_STEPS:-12} --grad_accum 1 --precision $prec --checkpointing selective --val_every 0 \
        --save_every 100000 --no-save_state --num_workers 4 --device cuda > "$OUT/table_train_$prec.log" 2>&1 || rc=1
      python3 -c "import csv,statistics,sys; r=list(csv.DictReader(open(sys.argv[1])))[2:]; print('train_sft_$prec: median %.3f s/step over steps 3..%d, peak %.1f GB' % (statistics.median(float(x['step_time']) for x in r), len(r) + 2, max(float(x['mem_gb']) for x in r)))" \
        /tmp/vdt_table_$prec/train_log.csv 2>&1 | tee -a $sum
    done
    VDT_TRACE=$OUT/sft_selective.json VDT_TRACE_STEP=4 timeout 150 $build/vdt bench step $sft --checkpointing selective \
      --work-dir /tmp/vdt_table_trace > "$OUT/table_trace.log" 2>&1 || rc=1
    python3 benchmarks/trace_top.py $OUT/sft_selective.json 40 > "$OUT/sft_selective_top.txt"
    grep -E "^kernels|^split" "$OUT/sft_selective_top.txt" | sed 's/^/sft_selective trace: /' | tee -a $sum
    python3 benchmarks/trace_ops.py $OUT/sft_selective.json elementwise 40 > "$OUT/sft_selective_elementwise.txt"
    head -${ELEM_N:-0} "$OUT/sft_selective_elementwise.txt"
    python3 benchmarks/trace_ops.py $OUT/sft_selective.json gaps 12 | head -${GAPS_N:-0}; rm -f $OUT/sft_selective.json
  fi
  if [[ $parts == *" causal "* ]]; then
    for row in ${TABLE_CAUSAL:-causal5b_block causal5b_block_mask causal5b_block_fast causal5b_keep0.5_offload_fast \
        causal13b_block causal13b_block_fast causal13b_keep0.5_offload_fast}; do
      speed_row $row
    done
  fi
  if [[ $parts == *" h3 "* ]]; then
    for row in ${TABLE_H3:-h3_block h3_selective_fast h3_selective_fast_offload}; do SEL=${SEL:-24} speed_row $row; done
  fi
fi
exit $rc
